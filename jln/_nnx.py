"""What every jln NNX module does, written once: its options as attributes and a validated
config, the parameters created from its kind's specs, the call of the kind's pure ``apply``.

The classes themselves are ordinary source (each family's ``nnx.py``, written by
:mod:`jln._faces` from the family's module kinds): a typed ``__init__`` that calls
:func:`build`, typed parameter attributes (``scale: nnx.Param[jax.Array] | None``, ``None``
where the options create none), one typed attribute per option, a typed ``__call__`` that
calls :func:`forward`. ``monitor=True`` sows per-row statistics as ``nnx.Intermediate`` named
``"stats"`` (read them with ``nnx.capture(model, nnx.Intermediate)``).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import jax
from flax import nnx

from jln import _modules as M


class Params(nnx.Module):
    """A named sub-tree of a module's parameters (``linear.kernel``, ``self_attn.query.bias``...),
    created from its kind's specs: each entry an ``nnx.Param`` or a nested ``Params``."""

    def __init__(self, specs: Mapping[str, Any], param_dtype: Any, rngs: nnx.Rngs | None, fn: str):
        _create(self, specs, param_dtype, rngs, fn)

    if TYPE_CHECKING:  # its entries depend on the options: typed loosely for checkers

        def __getattr__(self, name: str) -> Any: ...


def _key(spec: M.ParamSpec, rngs: nnx.Rngs | None, fn: str) -> Any:
    if spec.init in (M.ones, M.zeros) or getattr(spec.init, "keyless", False):
        return jax.random.key(0)  # constant initializers ignore the key
    if rngs is None:
        raise TypeError(
            f"{fn}: this module has parameters whose initializer takes a random key (a Dense "
            f"kernel, or a scale_init/bias_init other than ones and zeros); pass rngs=nnx.Rngs(0)."
        )
    return rngs.params()


def _create(module: nnx.Module, specs: Mapping[str, Any], param_dtype: Any, rngs: nnx.Rngs | None, fn: str) -> None:
    for name, spec in specs.items():
        if isinstance(spec, M.ParamSpec):
            setattr(module, name, nnx.Param(spec.init(_key(spec, rngs, fn), spec.shape, param_dtype)))
        else:
            setattr(module, name, Params(spec, param_dtype, rngs, fn))


Layout = tuple[tuple[str, Any], ...]


def _layout(specs: Mapping[str, Any]) -> Layout:
    """The parameter tree's names as nested tuples (``None`` marks a parameter): what a module
    keeps of its specs, static and hashable, so an ``nnx.GraphDef`` holding it hashes (and can
    be a static argument of ``jax.jit``) as flax's own modules' do."""
    return tuple((name, None if isinstance(spec, M.ParamSpec) else _layout(spec)) for name, spec in specs.items())


def _values(module: nnx.Module, layout: Layout) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, sub in layout:
        node = getattr(module, name)
        out[name] = node[...] if sub is None else _values(node, sub)
    return out


class Module(nnx.Module):
    """The base of jln's NNX modules: ``cfg`` (the options, validated, as on a linen module)
    and the answer to a mistyped or flax-named keyword. A subclass names its kind in ``_kind``;
    its ``__init__`` calls :func:`build`."""

    _kind: ClassVar[M.Kind]
    _cfg: Any
    _layout: Layout
    use_running_average: bool  # (kinds with running statistics)
    dropout_layer: nnx.Dropout  # (kinds with dropout)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "_kind" not in cls.__dict__:
            return
        init, kind = cls.__init__, cls._kind
        sizes = tuple(s.name for s in kind.shapes)

        @functools.wraps(init)
        def __init__(self: Module, *args: Any, **kw: Any) -> None:
            M.unknown_keywords(kind, kw, "nnx", sizes)
            init(self, *args, **kw)

        setattr(cls, "__init__", __init__)  # noqa: B010 (mypy types it as the base's)

    @property
    def cfg(self) -> Any:
        """The options as the kind's frozen config (validated at construction). Each reads as
        an attribute too (``module.eps``)."""
        return self._cfg

    def __setattr__(self, name: str, value: Any) -> None:
        if "_cfg" in vars(self) and name in {f.name for f in self._kind.options}:
            raise AttributeError(
                f"jln.nnx.{self._kind.name}: the options are fixed at construction (as a linen "
                f"module's); build a new module with {name}={value!r}."
            )
        super().__setattr__(name, value)


def build(module: Module, sizes: tuple[Any, ...], options: dict[str, Any], rngs: nnx.Rngs | None) -> None:
    """The body of every NNX ``__init__``: validate the options (into ``module.cfg`` and one
    attribute each), check the sizes the linen face infers, create the parameters (and the
    running statistics, and the dropout layer) from the kind's specs."""
    kind = module._kind
    fn = f"jln.nnx.{kind.name}"
    cfg = kind.config(**options)
    for f in kind.options:
        setattr(module, f.name, getattr(cfg, f.name))
    module._cfg = cfg  # (last: the options are read-only from here on)
    shapes = []
    for s, size in zip(kind.shapes, sizes, strict=True):
        shapes.append(s.take(size, fn))
        setattr(module, s.name, shapes[-1])
    specs = kind.specs(cfg, *shapes)
    if specs and any(size is None for size in shapes):
        unset = [s.name for s, size in zip(kind.shapes, shapes, strict=True) if size is None]
        raise ValueError(f"{fn}: {', '.join(f'{n}=None' for n in unset)} is for a module without parameters; these "
                         f"options create {sorted(specs)}, whose shape it gives: pass the size.")
    undeclared = set(specs) - set(_declared(type(module)))
    if undeclared:  # the face is generated from the kind: regenerate it (python -m jln._faces)
        raise AssertionError(f"{fn}: the kind creates {sorted(undeclared)}, which the class does not declare")
    module._layout = _layout(specs)
    _create(module, specs, cfg.param_dtype, rngs, fn)
    if kind.state is not None:
        for name, spec in kind.state(cfg, *shapes).items():
            dtype = cfg.param_dtype if spec.dtype is None else spec.dtype
            setattr(module, name, nnx.BatchStat(spec.init(None, spec.shape, dtype)))
        module.use_running_average = False  # a fresh torch module is in training mode
    if kind.dropout:
        if rngs is None:
            raise TypeError(f"{fn}: pass rngs=nnx.Rngs(0) (parameter init and the dropout stream).")
        module.dropout_layer = nnx.Dropout(cfg.dropout, rngs=rngs)


def _declared(cls: type) -> tuple[str, ...]:
    """The attributes a face class declares (its annotations)."""
    return tuple(cls.__dict__.get("__annotations__", {}))


def _sow(module: nnx.Module, stats: Any) -> None:
    if stats is not None:
        module.sow(nnx.Intermediate, "stats", stats)


def forward(module: Module, inputs: tuple[Any, ...], call: dict[str, Any],
            aliased: Mapping[str, Any] | None = None) -> Any:
    """The body of every NNX ``__call__``: check the inputs against the sizes given at
    construction, run the kind's ``apply`` (updating the running statistics in training
    mode). ``aliased``: the inputs given by their torch keyword."""
    kind, cfg = module._kind, module.cfg
    inputs = M.aliased_inputs(kind, inputs, aliased, f"jln.nnx.{kind.name}")
    call = dict(call)
    M.check_features_option(kind, cfg, inputs, f"jln.nnx.{kind.name}")
    for s in kind.shapes:
        if s.check is not None:
            s.check(cfg, inputs[s.input], getattr(module, s.name), f"jln.nnx.{kind.name}")
    if kind.dropout:
        layer = module.dropout_layer
        call["dropout_fn"] = None if layer.deterministic or cfg.dropout == 0 else layer
    params = _values(module, module._layout)
    if kind.state is not None:
        eval_mode = call.pop("use_running_average", None)
        training = not (module.use_running_average if eval_mode is None else eval_mode)
        state = {n: getattr(module, n)[...] for n in kind.state(cfg, *(getattr(module, s.name) for s in kind.shapes))}
        (out, new), stats = kind.apply(params, *inputs, cfg, state=state, training=training, **call)
        for name, value in (new or {}).items():
            getattr(module, name).value = value
        _sow(module, stats)
        return out
    out, stats = kind.apply(params, *inputs, cfg, **call)
    _sow(module, stats)
    return out
