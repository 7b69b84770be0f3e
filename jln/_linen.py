"""What every jln linen module does, written once: its options as a validated config, the
parameters created from its kind's specs, the call of the kind's pure ``apply``.

The classes themselves are ordinary source (each family's ``linen.py``, written by
:mod:`jln._faces` from the family's module kinds): typed dataclass fields, a typed
``__call__`` that calls :func:`forward`. This base checks the options at construction
(``jln.linen.LayerNorm(use_bias="yes")`` raises there), gives ``module.cfg``, and answers a
mistyped or flax-named keyword with the option jln has.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, ClassVar

import flax.linen as nn

from jln import _modules as M


class _Group(nn.Module):
    """A named sub-tree of parameters (``self_attn/query/kernel``...), created from a spec."""

    specs: Any
    param_dtype: Any

    @nn.compact
    def __call__(self) -> dict[str, Any]:
        return _create(self, self.specs, self.param_dtype)


def _create(module: nn.Module, specs: Mapping[str, Any], param_dtype: Any) -> dict[str, Any]:
    """Declare the parameters of ``specs`` in ``module``'s scope; return their values."""
    out: dict[str, Any] = {}
    for name, spec in specs.items():
        if isinstance(spec, M.ParamSpec):
            out[name] = module.param(name, spec.init, spec.shape, param_dtype)
        else:
            out[name] = _Group(spec, param_dtype, name=name)()
    return out


class Module(nn.Module):
    """The base of jln's linen modules: ``cfg`` (the options, validated) and the checks at
    construction. A subclass names its kind in ``_kind`` and declares the kind's options as
    its fields."""

    _kind: ClassVar[M.Kind]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "_kind" not in cls.__dict__:
            return
        init, kind = cls.__init__, cls._kind

        @functools.wraps(init)
        def __init__(self: Module, *args: Any, **kw: Any) -> None:
            M.unknown_keywords(kind, kw, "linen")
            init(self, *args, **kw)

        setattr(cls, "__init__", __init__)  # noqa: B010 (mypy types it as the base's)

    def __post_init__(self) -> None:
        if hasattr(type(self), "_kind"):
            self.cfg  # noqa: B018 (validates the options: a bad one raises here, not at the call)
        super().__post_init__()

    @property
    def cfg(self) -> Any:
        """The options as the kind's frozen config (validated: raises on a bad option)."""
        return self._kind.config(**{f.name: getattr(self, f.name) for f in self._kind.options})


def _sow(module: nn.Module, stats: Any) -> None:
    if stats is not None:
        module.sow("intermediates", "stats", stats)


def forward(module: Module, inputs: tuple[Any, ...], call: dict[str, Any], deterministic: bool = True,
            aliased: Mapping[str, Any] | None = None) -> Any:
    """The body of every linen ``__call__`` (inside ``nn.compact``): infer the sizes from the
    inputs, create the parameters, run the kind's ``apply``. ``aliased``: the inputs given by
    their torch keyword (:attr:`jln._modules.Kind.input_aliases`)."""
    kind, cfg = module._kind, module.cfg
    fn = f"jln.linen.{kind.name}"
    inputs = M.aliased_inputs(kind, inputs, aliased, fn)
    M.check_features_option(kind, cfg, inputs, fn)
    shapes = _sizes(module, kind, cfg, inputs, fn)
    params = _create(module, kind.specs(cfg, *shapes), cfg.param_dtype)
    call = dict(call)
    if kind.dropout:
        on = not deterministic and cfg.dropout > 0
        call["dropout_fn"] = nn.Dropout(rate=cfg.dropout, deterministic=False, name="dropout_layer") if on else None
    if kind.state is not None:
        return _forward_stateful(module, kind, cfg, params, inputs, shapes, call, fn)
    out, stats = kind.apply(params, *inputs, cfg, **call)
    _sow(module, stats)
    return out


def _flat_shapes(tree: Mapping[str, Any], prefix: str = "") -> dict[str, tuple[int, ...]]:
    """A parameter tree (arrays, or specs) as ``{"linear/kernel": shape, ...}``."""
    out: dict[str, tuple[int, ...]] = {}
    for name, v in tree.items():
        if isinstance(v, Mapping):
            out.update(_flat_shapes(v, f"{prefix}{name}/"))
        else:
            out[prefix + name] = tuple(v.shape)
    return out


def _flat_arrays(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, v in tree.items():
        if isinstance(v, Mapping):
            out.update(_flat_arrays(v, f"{prefix}{name}/"))
        else:
            out[prefix + name] = v
    return out


def _sizes(module: Module, kind: M.Kind, cfg: Any, inputs: tuple[Any, ...], fn: str) -> list[Any]:
    """The sizes of the parameters this call uses: inferred from the inputs, held against the
    parameters the module already has (``apply``). Where they disagree, a size whose NNX check
    accepts the input at the stored size (an input that broadcasts, as torch's) keeps the
    stored one; any other disagreement is a ``ValueError`` naming the input, its shape and the
    parameter's, before flax's own shape error."""
    shapes = [s.infer(cfg, inputs[s.input], kind.inputs[s.input], fn) for s in kind.shapes]
    if not kind.shapes or module.is_initializing():
        return shapes
    arrays = _flat_arrays(nn.unbox(module.variables.get("params", {})))  # (sharding boxes off)
    if not arrays:
        return shapes
    have = {k: tuple(v.shape) for k, v in arrays.items()}

    def misfits(sizes: list[Any]) -> list[tuple[str, tuple[int, ...], tuple[int, ...]]]:
        want = _flat_shapes(kind.specs(cfg, *sizes))
        return [(k, have[k], w) for k, w in want.items() if k in have and have[k] != w]

    if not misfits(shapes):
        return shapes
    fitted = list(shapes)
    for i, s in enumerate(kind.shapes):
        stored = s.stored(cfg, arrays)
        if stored == shapes[i]:
            continue
        x = inputs[s.input]
        accepted = False
        if s.check is not None:
            try:
                s.check(cfg, x, stored, fn)
                accepted = True
            except ValueError:
                accepted = False
        if not accepted:
            fixed = {k for k, _, _ in misfits([*shapes[:i], stored, *shapes[i + 1:]])}
            bad = misfits(shapes)
            path, got, want = next((m for m in bad if m[0] not in fixed), bad[0])
            raise ValueError(
                f"{fn}: `{kind.inputs[s.input]}` does not fit the module's parameters: they were created for "
                f"{s.name}={_show(stored)} (`{path}` has shape {got}), but "
                f"{kind.inputs[s.input]}.shape={tuple(x.shape)} gives {s.name}={_show(shapes[i])} "
                f"(`{path}` would be {want}). Pass a {kind.inputs[s.input]} whose {s.name} is {_show(stored)}, or "
                f"initialise the module (init) on this input."
            )
        fitted[i] = stored
    left = misfits(fitted)
    if left:
        path, got, want = left[0]
        shown = ", ".join(f"{n}.shape={tuple(a.shape)}" for n, a in zip(kind.inputs, inputs, strict=False)
                          if hasattr(a, "shape"))
        raise ValueError(
            f"{fn}: the inputs ({shown}) do not fit the module's parameters: `{path}` has shape {got}, "
            f"these inputs need {want}. Pass inputs of the sizes the module was initialised on, or "
            f"initialise it (init) on these."
        )
    return fitted


def _show(size: Any) -> Any:
    return size[0] if isinstance(size, tuple) and len(size) == 1 else size


def _forward_stateful(
    module: Module, kind: M.Kind, cfg: Any, params: Any, inputs: tuple[Any, ...], shapes: list[Any],
    call: dict[str, Any], fn: str,
) -> Any:
    """A kind with running statistics (:mod:`jln.families.batch_norm`): they live in
    ``"batch_stats"``. ``use_running_average=None`` trains where they may change
    (``mutable=["batch_stats"]``, or at ``init``, which leaves them as initialised) and
    normalizes with them otherwise (torch's eval mode); ``True``/``False`` force either
    (``False`` needs them mutable)."""
    assert kind.state is not None
    specs = kind.state(cfg, *shapes)
    variables = {
        name: module.variable(
            "batch_stats", name,
            lambda s=spec: s.init(None, s.shape, cfg.param_dtype if s.dtype is None else s.dtype),
        )
        for name, spec in specs.items()
    }
    use_running_average = call.pop("use_running_average", None)
    mutable = module.is_mutable_collection("batch_stats")
    training = mutable if use_running_average is None else not use_running_average
    (out, new), stats = kind.apply(params, *inputs, cfg, state={n: v.value for n, v in variables.items()},
                                   training=training, **call)
    if new is not None and not module.is_initializing():
        if not mutable:
            raise ValueError(
                f"{fn}: use_running_average=False is a training call, which updates the running "
                f"statistics, so `batch_stats` must be mutable: call apply(variables, x, "
                f"mutable=['batch_stats']) (it returns (y, updates)); without it (and "
                f"use_running_average=None) the module normalizes with the running statistics."
            )
        for name, v in variables.items():
            v.value = new[name]
    _sow(module, stats)
    return out
