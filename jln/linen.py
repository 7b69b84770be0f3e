"""Flax linen modules over jln's core functions (same names and parameters as :mod:`jln.nnx`).

Every class is built from its record in ``jln._modules`` (options, parameters, the pure function
it calls), as its :mod:`jln.nnx` twin is: fields, defaults and docstrings are generated from it.
A flax argument name (``epsilon``...) gets a ``TypeError`` naming jln's. Defaults follow torch
(eps 1e-5, output in the input dtype). ``dtype=None`` keeps the core functions' dtype rule; ``dtype=d`` computes in and
returns ``d``. ``monitor=True`` sows per-row input/output statistics (see
``jln._monitor.row_stats``) into the ``"intermediates"`` collection under ``"stats"``.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Mapping
from typing import Any, ClassVar

import flax.linen as nn
import jax

from jln import _modules as M
from jln.families.adaptive import conditioned as MC
from jln.families.adaptive import module as MA
from jln.families.batch_norm import module as B
from jln.families.blocks import module as BL
from jln.families.gated_rms_norm import module as G
from jln.families.layer_norm import module as LN
from jln.families.local_response_norm import module as ML
from jln.families.lp_norm import module as LP
from jln.families.rms_norm import module as RMS

Array = jax.Array

__all__ = [
    "AdaLNContinuous",
    "AdaLNZero",
    "AdaptiveLayerNorm",
    "DiTBlock",
    "LayerNorm",
    "RMSNorm",
    "TransformerEncoderLayer",
    "GatedRMSNorm",
    "BatchNorm",
    "FrozenBatchNorm",
    "GroupNorm",
    "InstanceNorm",
    "AdaLNZeroJoint",
    "AdaLNScale",
    "GlobalResponseNorm",
    "LpNorm",
    "AdaLNSingle",
    "AdaGroupNorm",
    "AdaLNTable",
    "ModulatedRMSNorm",
    "AdaRMSNorm",
    "AdaLNSigmoidGate",
    "LocalResponseNorm",
]


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


def _sow(module: nn.Module, stats: Any) -> None:
    if stats is not None:
        module.sow("intermediates", "stats", stats)


_P = inspect.Parameter


def _call_signature(kind: M.Kind) -> inspect.Signature:
    """``(self, *inputs, *call_options[, *, deterministic=True])``."""
    ps = [_P("self", _P.POSITIONAL_OR_KEYWORD)] + [_P(n, _P.POSITIONAL_OR_KEYWORD) for n in kind.inputs]
    ps += [_P(n, _P.POSITIONAL_OR_KEYWORD, default=d) for n, d in kind.call_options]
    if kind.dropout:
        ps.append(_P("deterministic", _P.KEYWORD_ONLY, default=True))
    return inspect.Signature(ps)


def _forward(module: _Module, sig: inspect.Signature, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    kind = module._kind
    fn = f"jln.linen.{kind.name}"
    bound = sig.bind(module, *args, **kwargs)
    bound.apply_defaults()
    call = dict(bound.arguments)
    call.pop("self")
    inputs = [call.pop(n) for n in kind.inputs]
    deterministic = call.pop("deterministic", True)
    cfg = module.cfg
    shapes = [s.infer(cfg, inputs[s.input], kind.inputs[s.input], fn) for s in kind.shapes]
    params = _create(module, kind.specs(cfg, *shapes), cfg.param_dtype)
    if kind.dropout:
        on = not deterministic and cfg.dropout > 0
        call["dropout_fn"] = nn.Dropout(rate=cfg.dropout, deterministic=False, name="dropout_layer") if on else None
    if kind.state is not None:
        return _forward_stateful(module, kind, cfg, params, inputs, shapes, call, fn)
    out, stats = kind.apply(params, *inputs, cfg, **call)
    _sow(module, stats)
    return out


def _forward_stateful(
    module: _Module, kind: M.Kind, cfg: Any, params: Any, inputs: list[Any], shapes: list[Any],
    call: dict[str, Any], fn: str,
) -> Any:
    """A kind with running statistics (``jln.families.batch_norm.module``): they live in ``"batch_stats"``.
    ``use_running_average=None`` trains where they may change (``mutable=["batch_stats"]``, or
    at ``init``, which leaves them as initialised) and normalizes with them otherwise (torch's
    eval mode); ``True``/``False`` force either (``False`` needs them mutable)."""
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


class _Module(nn.Module):
    """The base of jln's linen modules: ``class X(_Module, kind=M.X)`` takes the kind's options
    as dataclass fields, its docstring and a ``__call__`` with the kind's signature."""

    _kind: ClassVar[M.Kind]

    def __init_subclass__(cls, kind: M.Kind | None = None, **kwargs: Any) -> None:
        if kind is not None:
            cls._kind = kind
            cls.__annotations__ = {f.name: f.type for f in kind.options}
            for f in kind.options:
                if f.default is not dataclasses.MISSING:
                    setattr(cls, f.name, f.default)
            cls.__doc__ = cls.__doc__ or kind.docstring("linen")
            sig = _call_signature(kind)

            def __call__(self: _Module, *args: Any, **kw: Any) -> Any:
                return _forward(self, sig, args, kw)

            __call__.__signature__ = sig  # type: ignore[attr-defined]
            setattr(cls, "__call__", nn.compact(__call__))  # noqa: B010
        super().__init_subclass__(**kwargs)
        if kind is not None:
            init = cls.__init__

            @functools.wraps(init)
            def __init__(self: _Module, *args: Any, **kw: Any) -> None:
                M.flax_hint(kind, kw, "linen")
                init(self, *args, **kw)

            setattr(cls, "__init__", __init__)  # noqa: B010 (mypy types it as the base's)

    @property
    def cfg(self) -> Any:
        """The options as the kind's frozen config (validated: raises on a bad option)."""
        return self._kind.config(**{f.name: getattr(self, f.name) for f in self._kind.options})


class LayerNorm(_Module, kind=LN.LAYER_NORM):
    pass


class RMSNorm(_Module, kind=RMS.RMS_NORM):
    pass


class AdaptiveLayerNorm(_Module, kind=MA.ADAPTIVE_LAYER_NORM):
    pass


class AdaLNZero(_Module, kind=MA.ADA_LN_ZERO):
    pass


class AdaLNContinuous(_Module, kind=MA.ADA_LN_CONTINUOUS):
    pass


class TransformerEncoderLayer(_Module, kind=BL.TRANSFORMER_ENCODER_LAYER):
    pass


class DiTBlock(_Module, kind=BL.DIT_BLOCK):
    pass


class GatedRMSNorm(_Module, kind=G.GATED_RMS_NORM):
    pass


class BatchNorm(_Module, kind=B.BATCH_NORM):
    pass


class InstanceNorm(_Module, kind=B.INSTANCE_NORM):
    pass


class GroupNorm(_Module, kind=B.GROUP_NORM):
    pass


class FrozenBatchNorm(_Module, kind=B.FROZEN_BATCH_NORM):
    pass


class AdaLNZeroJoint(_Module, kind=MA.ADA_LN_ZERO_JOINT):
    pass


class AdaLNScale(_Module, kind=MA.ADA_LN_SCALE):
    pass


class GlobalResponseNorm(_Module, kind=LP.GLOBAL_RESPONSE_NORM):
    pass


class LpNorm(_Module, kind=LP.LP_NORM):
    pass


class AdaLNSingle(_Module, kind=MA.ADA_LN_SINGLE):
    pass


class AdaGroupNorm(_Module, kind=MC.ADA_GROUP_NORM):
    pass


class AdaLNTable(_Module, kind=MC.ADA_LN_TABLE):
    pass


class ModulatedRMSNorm(_Module, kind=MC.MODULATED_RMS_NORM):
    pass


class AdaRMSNorm(_Module, kind=MC.ADA_RMS_NORM):
    pass


class AdaLNSigmoidGate(_Module, kind=MC.ADA_LN_SIGMOID_GATE):
    pass


class LocalResponseNorm(_Module, kind=ML.LOCAL_RESPONSE_NORM):
    pass
