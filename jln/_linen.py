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


def forward(module: Module, inputs: tuple[Any, ...], call: dict[str, Any], deterministic: bool = True) -> Any:
    """The body of every linen ``__call__`` (inside ``nn.compact``): infer the sizes from the
    inputs, create the parameters, run the kind's ``apply``."""
    kind, cfg = module._kind, module.cfg
    fn = f"jln.linen.{kind.name}"
    M.check_features_option(kind, cfg, inputs, fn)
    shapes = [s.infer(cfg, inputs[s.input], kind.inputs[s.input], fn) for s in kind.shapes]
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
                                   training=training)
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
