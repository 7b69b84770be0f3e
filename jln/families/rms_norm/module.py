"""The ``RMSNorm`` module kind: its options, parameters and the call of :func:`jln.rms_norm`
that both faces make."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from jln import _quant, _validate
from jln._modules import (
    AXIS,
    BIAS_INIT,
    COMPUTE,
    DISTRIBUTED,
    EPS,
    LINEN_IMPORTS,
    NNX_IMPORTS,
    NORM_RNGS,
    NUM_FEATURES_OR_NONE,
    SCALE_INIT,
    TORCH_NAMES,
    USE_BIAS,
    USE_SCALE,
    Kind,
    Option,
    Params,
    ParamSpec,
    Stats,
    apply_norm,
    cast_in,
    distributed,
    literal,
    make_config,
    norm_affine_specs,
    ones,
    record,
    zeros,
)
from jln.families.rms_norm.function import rms_norm
from jln.families.rms_norm.spec import ALIASES, resolve_convention

Array = jax.Array


def _canonical(cfg: Any) -> str:
    """The convention's canonical name (``"qwen2"`` -> ``"llama"``)."""
    return resolve_convention(cfg.convention, "jln RMSNorm")


def _check_rms_norm(cfg: Any) -> None:
    fn = "jln RMSNorm"
    resolve_convention(cfg.convention, fn)
    _validate.check_torch_names(cfg, fn)
    _validate.check_inits(cfg, fn)
    if cfg.eps is not None:
        _validate.check_eps(cfg.eps, fn)
    if cfg.use_bias and (_canonical(cfg) != "diffusers" or not cfg.use_scale):
        raise ValueError(
            f"{fn}: use_bias=True is only defined for convention='diffusers' with "
            f"use_scale=True (diffusers' RMSNorm with bias); received "
            f"convention={cfg.convention!r}, use_scale={cfg.use_scale}."
        )
    _validate.check_module_options(cfg, fn)


_RMS_OPTIONS = (
    EPS.but(type="float | None", default=None, doc="``None`` takes the convention's default (torch: "
             "``finfo(float32).eps``)."),
     Option("convention", literal(ALIASES), "torch", "``\"torch\"``, ``\"llama\"``, ``\"gemma\"``, ``\"t5\"``, "
            "``\"diffusers\"``, ``\"seed\"``, ``\"eager\"``, ``\"round_rstd\"``, ``\"input_scaled\"`` or "
            "``\"gemma_rounded\"`` (cast order and eps default as :func:`jln.rms_norm`); ``\"input_scaled\"`` and "
            "``\"gemma_rounded\"`` also initialise ``scale`` to 0; "
            "``\"gemma\"`` initialises ``scale`` to 0 (it multiplies by ``1 + scale``). With "
            "``dtype=None`` the output dtype is the convention's (``\"llama\"``: bf16 x with float32 "
            "scale gives float32)."),
     AXIS, USE_SCALE.but(doc="learnable ``scale``."),
     USE_BIAS.but(default=False, doc="learnable ``bias`` (``convention=\"diffusers\"`` only)."), *COMPUTE,
     *DISTRIBUTED, SCALE_INIT.but(doc="as :class:`LayerNorm`'s; ``None``: the convention's identity (ones, "
                                  "zeros for ``\"gemma\"``, ``\"input_scaled\"`` and ``\"gemma_rounded\"``)."), BIAS_INIT, TORCH_NAMES)

RMSNormConfig = make_config("RMSNormConfig", _RMS_OPTIONS, _check_rms_norm, canonical=property(_canonical))


def _check_quantized_rms_norm(cfg: Any) -> None:
    _check_rms_norm(cfg)
    check_module_quant(cfg.quantize, "jln QuantizedRMSNorm")
    check_history_len(cfg, "jln QuantizedRMSNorm")


def check_module_quant(quant: Any, fn: str) -> None:
    """A quantized module's ``quantize`` option: a :class:`jln.Quant` without delayed scaling
    (whose amax history the functions take and return), or ``None``."""
    if quant is None:
        return
    if not isinstance(quant, _quant.Quant):
        raise TypeError(f"{fn}: `quantize` must be a jln.Quant or None; received {quant!r}.")


def check_history_len(cfg: Any, fn: str) -> None:
    n = cfg.amax_history_len
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"{fn}: `amax_history_len` must be an int >= 1; received {n!r}.")


QUANTIZE = Option("quantize", "Quant | None", None, "how the output is quantized (a :class:`jln.Quant`); "
                  "``None``: ``jln.Quant()``, float8_e4m3fn with one scale per row. With ``scaling=\"delayed\"`` "
                  "the module keeps the amax history as state (linen: the ``\"batch_stats\"`` collection, "
                  "updated by ``apply(..., mutable=[\"batch_stats\"])``; NNX: an ``nnx.BatchStat``, updated "
                  "in training mode), as BatchNorm keeps its running statistics.")
AMAX_HISTORY_LEN = Option("amax_history_len", "int", 1024, "the length of the delayed-scaling amax history "
                          "(TransformerEngine's default 1024); read with ``scaling=\"delayed\"`` only.")


@dataclasses.dataclass(frozen=True)
class HistorySpec(ParamSpec):
    """The delayed-scaling amax history: state, float32."""

    dtype: Any = jnp.float32


def quant_state(cfg: Any, *shapes: Any) -> dict[str, ParamSpec]:
    """The state a quantized module keeps: the amax history with delayed scaling, else none."""
    if cfg.quantize is None or cfg.quantize.scaling != "delayed":
        return {}
    return {"amax_history": HistorySpec((cfg.amax_history_len,), zeros)}

QuantizedRMSNormConfig = make_config(
    "QuantizedRMSNormConfig", (*_RMS_OPTIONS, QUANTIZE, AMAX_HISTORY_LEN), _check_quantized_rms_norm, canonical=property(_canonical),
)


def rms_norm_specs(cfg: Any, features: tuple[int, ...]) -> dict[str, ParamSpec]:
    # Gemma multiplies by (1 + scale), so its identity weight is 0.
    return norm_affine_specs(features, use_scale=cfg.use_scale, use_bias=cfg.use_bias, scale_init=cfg.scale_init,
                             bias_init=cfg.bias_init, default_scale=zeros if _canonical(cfg) in ("gemma", "input_scaled", "gemma_rounded") else ones)


def apply_rms_norm(params: Params, x: Array, cfg: Any) -> tuple[Array, Stats]:
    """``jln.rms_norm(x, scale, convention=...)`` with the module's dtype rule and monitor."""
    return apply_norm(rms_norm, params, x, cfg, "jln RMSNorm", convention=cfg.convention)



def apply_quantized(
    norm: Any, params: Params, x: Array, cfg: Any, fn: str, state: dict[str, Any], training: bool, **options: Any,
) -> tuple[tuple[Any, Any], Stats]:
    """``norm(x, scale, ..., quantize=...)``: the module's options, its input dtype rule, and the
    monitor on the dequantized output (``dtype`` sets the compute dtype; the output is codes).
    Returns ``((q, new_state or None), stats)``: with delayed scaling a training call returns
    the updated amax history, an eval call uses the history and leaves it."""
    xi = cast_in(x, cfg.dtype)
    hist = state.get("amax_history")
    q = norm(xi, params.get("scale"), bias=params.get("bias"), axis=cfg.axis, eps=cfg.eps, impl=cfg.impl,
             quantize=cfg.quantize or _quant.Quant(), amax_history=hist, **distributed(cfg), **options)
    new = {"amax_history": q.amax_history} if training and hist is not None else None
    if hist is not None:
        q = dataclasses.replace(q, amax_history=None)
    return (q, new), (record(cfg.monitor, xi, q.dequantize(), cfg.axis, fn) if cfg.monitor else None)


def apply_quantized_rms_norm(params: Params, x: Array, cfg: Any, *, state: dict[str, Any],
                             training: bool) -> tuple[tuple[Any, Any], Stats]:
    return apply_quantized(rms_norm, params, x, cfg, "jln QuantizedRMSNorm", state, training,
                           convention=cfg.convention)


RMS_NORM = Kind(
    "RMSNorm", RMSNormConfig, rms_norm_specs, apply_rms_norm, ("x",),
    doc="RMSNorm in torch's convention or a named model's: ``x * rsqrt(mean(x^2) + eps) * scale``.\n\n"
        "The exact cast order and eps default of each convention are those of :func:`jln.rms_norm`.",
    returns="(``__call__(x)``): array of ``x.shape``, dtype by the convention (or ``dtype``).",
    raises="TypeError, ValueError: as :func:`jln.rms_norm`; ``ValueError`` for ``use_bias`` outside "
           "the diffusers convention; otherwise as :class:`LayerNorm`.",
    examples=(LINEN_IMPORTS + "  >>> m = jnn.RMSNorm(convention=\"llama\")\n  >>> x = jnp.ones((2, 4))\n  >>> "
              "m.apply(m.init(jax.random.key(0), x), x).dtype\n  dtype('float32')",
              NNX_IMPORTS + "  >>> jnnx.RMSNorm(4, convention=\"gemma\").scale[...]\n  Array([0., 0., 0., 0.], "
              "dtype=float32)"),
    rngs_doc=NORM_RNGS, shapes=(NUM_FEATURES_OR_NONE,), flax_twin=True,
)

QUANTIZED_RMS_NORM = Kind(
    "QuantizedRMSNorm", QuantizedRMSNormConfig, rms_norm_specs, apply_quantized_rms_norm, ("x",),
    doc="RMSNorm whose output is quantized for an fp8/int8 matmul: :class:`RMSNorm`'s options and parameters, "
        "and ``quantize``.\n\nThe call is :func:`jln.rms_norm` with ``quantize=``; gradients pass straight "
        "through :meth:`jln.Quantized.dequantize` (see the quantization guide).",
    returns="(``__call__(x)``): a :class:`jln.Quantized` (codes of ``x.shape`` and their scales).",
    raises="TypeError, ValueError: as :class:`RMSNorm`, and for a ``quantize`` that is no :class:`jln.Quant`.",
    examples=(LINEN_IMPORTS + "  >>> m = jnn.QuantizedRMSNorm(convention=\"llama\")\n  >>> x = jnp.ones((2, 4))\n  >>> "
              "m.apply(m.init(jax.random.key(0), x), x).values.dtype\n  dtype(float8_e4m3fn)",
              NNX_IMPORTS + "  >>> jnnx.QuantizedRMSNorm(4)(jnp.ones((2, 4))).scale.shape\n  (2, 1)"),
    rngs_doc=NORM_RNGS, shapes=(NUM_FEATURES_OR_NONE,), output="Quantized", state=quant_state,
)
