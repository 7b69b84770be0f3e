"""Flax NNX modules over jln's core functions (same names and parameters as :mod:`jln.linen`).

Every class is built from its record in ``jln._modules`` (options, parameters, the pure function
it calls), as its :mod:`jln.linen` twin is: signatures, per-option attributes and docstrings are
generated from it. Size arguments are positional, options keyword-only (but torch's positional
ones in ``TransformerEncoderLayer``); each option reads as an attribute (``module.eps``) and all
of them as ``module.cfg``, as on a linen module. ``monitor=True`` sows per-row statistics as ``nnx.Intermediate`` named
``"stats"`` (read them with ``nnx.capture(model, nnx.Intermediate)``).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping
from typing import Any, ClassVar

import jax
from flax import nnx

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


class _Group(nnx.Module):
    """A named sub-tree of parameters (``self_attn.query.kernel``...), created from a spec."""

    def __init__(self, specs: Mapping[str, Any], param_dtype: Any, rngs: nnx.Rngs | None, fn: str):
        _create(self, specs, param_dtype, rngs, fn)


def _key(spec: M.ParamSpec, rngs: nnx.Rngs | None, fn: str) -> Any:
    if spec.init in (M.ones, M.zeros):
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
            value = spec.init(_key(spec, rngs, fn), spec.shape, param_dtype)
            setattr(module, name, nnx.Param(value))
        else:
            setattr(module, name, _Group(spec, param_dtype, rngs, fn))


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


def _sow(module: nnx.Module, stats: Any) -> None:
    if stats is not None:
        module.sow(nnx.Intermediate, "stats", stats)


_P = inspect.Parameter


def _init_signature(kind: M.Kind) -> inspect.Signature:
    """``(self, *shapes, *options[:positional], *, *options[positional:], rngs=None)``."""
    ps = [_P("self", _P.POSITIONAL_OR_KEYWORD)]
    ps += [_P(s.name, _P.POSITIONAL_OR_KEYWORD, annotation=s.type) for s in kind.shapes]
    for i, f in enumerate(kind.options):
        how = _P.POSITIONAL_OR_KEYWORD if i < kind.positional else _P.KEYWORD_ONLY
        ps.append(_P(f.name, how, default=f.default if f.default is not dataclasses.MISSING else _P.empty,
                     annotation=f.type))
    ps.append(_P("rngs", _P.KEYWORD_ONLY, default=None, annotation="nnx.Rngs | None"))
    return inspect.Signature(ps)


def _call_signature(kind: M.Kind) -> inspect.Signature:
    ps = [_P("self", _P.POSITIONAL_OR_KEYWORD)] + [_P(n, _P.POSITIONAL_OR_KEYWORD) for n in kind.inputs]
    return inspect.Signature(ps + [_P(n, _P.POSITIONAL_OR_KEYWORD, default=d) for n, d in kind.call_options])


def _bind(sig: inspect.Signature, module: nnx.Module, args: tuple[Any, ...], kw: dict[str, Any]) -> dict[str, Any]:
    bound = sig.bind(module, *args, **kw)
    bound.apply_defaults()
    out = dict(bound.arguments)
    out.pop("self")
    return out


def _option(name: str) -> property:
    return property(lambda self: getattr(self.cfg, name), doc=f"``cfg.{name}``.")


class _Module(nnx.Module):
    """The base of jln's NNX modules: ``class X(_Module, kind=M.X)`` takes the kind's options
    (``__init__`` with the kind's signature, ``.cfg`` and one read-only attribute per option),
    its docstring and a ``__call__`` with the kind's signature."""

    _kind: ClassVar[M.Kind]
    cfg: Any
    _layout: Layout
    dropout_layer: nnx.Dropout
    _state_names: tuple[str, ...]
    use_running_average: bool

    def __init_subclass__(cls, kind: M.Kind | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if kind is None:
            return
        cls._kind = kind
        cls.__doc__ = cls.__doc__ or kind.docstring("nnx")
        for f in kind.options:
            setattr(cls, f.name, _option(f.name))
        init_sig, call_sig = _init_signature(kind), _call_signature(kind)

        def __init__(self: _Module, *args: Any, **kw: Any) -> None:
            M.flax_hint(kind, kw, "nnx")
            _build(self, _bind(init_sig, self, args, kw))

        def __call__(self: _Module, *args: Any, **kw: Any) -> Any:
            return _forward(self, _bind(call_sig, self, args, kw))

        __init__.__signature__ = init_sig  # type: ignore[attr-defined]
        __call__.__signature__ = call_sig  # type: ignore[attr-defined]
        __init__.__qualname__, __call__.__qualname__ = f"{cls.__name__}.__init__", f"{cls.__name__}.__call__"
        # setattr: mypy types these as the base's (inspect.signature(cls) reads __signature__)
        setattr(cls, "__init__", __init__)  # noqa: B010
        setattr(cls, "__call__", __call__)  # noqa: B010
        setattr(cls, "__signature__", init_sig.replace(parameters=list(init_sig.parameters.values())[1:]))  # noqa: B010


def _build(module: _Module, args: dict[str, Any]) -> None:
    kind = module._kind
    fn = f"jln.nnx.{kind.name}"
    rngs = args.pop("rngs")
    sizes = {s.name: args.pop(s.name) for s in kind.shapes}
    module.cfg = kind.config(**args)
    shapes = []
    for s in kind.shapes:
        shapes.append(s.take(sizes[s.name], fn))
        setattr(module, s.name, shapes[-1])
    specs = kind.specs(module.cfg, *shapes)
    module._layout = _layout(specs)
    _create(module, specs, module.cfg.param_dtype, rngs, fn)
    if kind.state is not None:
        module._state_names = tuple(kind.state(module.cfg, *shapes))
        for name, spec in kind.state(module.cfg, *shapes).items():
            dtype = module.cfg.param_dtype if spec.dtype is None else spec.dtype
            setattr(module, name, nnx.BatchStat(spec.init(None, spec.shape, dtype)))
        module.use_running_average = False  # a fresh torch module is in training mode
    if kind.dropout:
        if rngs is None:
            raise TypeError(f"{fn}: pass rngs=nnx.Rngs(0) (parameter init and the dropout stream).")
        module.dropout_layer = nnx.Dropout(module.cfg.dropout, rngs=rngs)


def _forward(module: _Module, call: dict[str, Any]) -> Any:
    kind, cfg = module._kind, module.cfg
    inputs = [call.pop(n) for n in kind.inputs]
    for s in kind.shapes:
        if s.check is not None:
            s.check(cfg, inputs[s.input], getattr(module, s.name), f"jln.nnx.{kind.name}")
    if kind.dropout:
        layer = module.dropout_layer
        call["dropout_fn"] = None if layer.deterministic or cfg.dropout == 0 else layer
    if kind.state is not None:
        eval_mode = call.pop("use_running_average", None)
        training = not (module.use_running_average if eval_mode is None else eval_mode)
        state = {n: getattr(module, n)[...] for n in module._state_names}
        (out, new), stats = kind.apply(_values(module, module._layout), *inputs, cfg, state=state, training=training)
        for name, value in (new or {}).items():
            getattr(module, name).value = value
        _sow(module, stats)
        return out
    out, stats = kind.apply(_values(module, module._layout), *inputs, cfg, **call)
    _sow(module, stats)
    return out


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
