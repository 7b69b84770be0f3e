"""The ``LayerNorm`` module kind: its options, parameters and the call of
:func:`jln.layer_norm` that both faces make."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from jln import _stats, _validate
from jln._modules import (
    AXIS,
    BIAS_INIT,
    COMPUTE,
    DISTRIBUTED,
    EPS,
    LINEN_IMPORTS,
    NNX_IMPORTS,
    NORM_RNGS,
    NUM_FEATURES,
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
    literal,
    make_config,
    norm_affine_specs,
    ones,
    zeros,
)
from jln.families.layer_norm.function import layer_norm
from jln.families.layer_norm.spec import ALIASES, resolve_convention
from jln.families.rms_norm import module as rms_module

Array = jax.Array


def _check_layer_norm(cfg: Any) -> None:
    _validate.check_eps(cfg.eps, "jln LayerNorm")
    _validate.check_torch_names(cfg, "jln LayerNorm")
    _validate.check_module_options(cfg, "jln LayerNorm")
    _validate.check_inits(cfg, "jln LayerNorm")
    resolve_convention(cfg.convention, "jln LayerNorm")
    _validate.check_param_axes(cfg, "jln LayerNorm")
    if cfg.zero_centered and not cfg.use_scale:
        raise ValueError(
            "jln LayerNorm: zero_centered=True multiplies by `1 + scale`, so it needs use_scale=True; "
            "received use_scale=False."
        )


_LN_OPTIONS = (
    EPS.but(doc="added to the variance; torch's default 1e-5 (flax's LayerNorm uses 1e-6)."), AXIS, USE_SCALE,
     USE_BIAS, *COMPUTE, *DISTRIBUTED, SCALE_INIT, BIAS_INIT,
     Option("zero_centered", "bool", False, "multiply by ``1 + scale`` (Nemotron's ``LayerNorm1P``, "
            "TransformerEngine's ``zero_centered_gamma``), ``1 + scale`` rounded to ``param_dtype``; "
            "``scale`` then initialises to 0. ``axis=1`` gives channels-first LayerNorm "
            "(``LayerNorm2d``, ``data_format=\"channels_first\"``)."),
     Option("convention", literal(ALIASES), "torch", "where the reference rounds, as :func:`jln.layer_norm`: "
            "``\"torch\"``, ``\"deberta\"`` (the row rounded to the input dtype, then the affine; "
            "alias ``\"moonshine\"``) or ``\"eager\"`` (every op in the input dtype; alias "
            "``\"vitdet\"``). With ``dtype=None`` the latter two promote a bf16 ``x`` with float32 "
            "parameters to float32, as torch's ``weight * h`` does."), TORCH_NAMES,
     Option("param_axes", "Axis | None", None, "the axes of ``x`` that ``scale`` and ``bias`` span, as "
            ":func:`jln.layer_norm`: every axis in ``axis`` plus more (flax's ``feature_axes``), e.g. "
            "``param_axes=(1, -1)`` with ``axis=-1`` on ``[batch, heads, seq, head_dim]``: one LayerNorm "
            "per head, parameters ``(heads, head_dim)`` (NNX: ``num_features`` is that shape). ``None``: "
            "``axis``. Runs on the XLA path."))

#: LayerNorm's own option (not QuantizedLayerNorm's): an input-dependent parameter rounding
ROUND_PARAMS_FOR_BF16 = Option(
    "round_params_for_bf16", "bool", False, "with bfloat16 input (after ``dtype``), round ``scale`` and "
    "``bias`` to bfloat16 before the norm; other inputs use them as they are. transformers' "
    "``EsmFoldLayerNorm`` does this (``weight.to(x.dtype)`` for bfloat16 ``x`` only), so its float32 "
    "parameters give float32 input torch's LayerNorm and bfloat16 input the rounded weights.")

LayerNormConfig = make_config("LayerNormConfig", (*_LN_OPTIONS, ROUND_PARAMS_FOR_BF16), _check_layer_norm)


def _check_quantized_layer_norm(cfg: Any) -> None:
    _check_layer_norm(cfg)
    rms_module.check_module_quant(cfg.quantize, "jln QuantizedLayerNorm")
    rms_module.check_history_len(cfg, "jln QuantizedLayerNorm")


QuantizedLayerNormConfig = make_config(
    "QuantizedLayerNormConfig", (*_LN_OPTIONS, rms_module.QUANTIZE, rms_module.AMAX_HISTORY_LEN), _check_quantized_layer_norm,
)


def layer_norm_specs(cfg: Any, features: tuple[int, ...]) -> dict[str, ParamSpec]:
    """``scale`` and ``bias`` as the options say (``zero_centered``: ``1 + scale``, so the
    identity ``scale`` is 0)."""
    return norm_affine_specs(features, use_scale=cfg.use_scale, use_bias=cfg.use_bias, scale_init=cfg.scale_init,
                             bias_init=cfg.bias_init, default_scale=zeros if cfg.zero_centered else ones)


def _options(cfg: Any) -> dict[str, Any]:
    options: dict[str, Any] = {} if cfg.convention == "torch" else {"convention": cfg.convention}
    if cfg.zero_centered:
        options["zero_centered"] = True
    if cfg.param_axes is not None:
        options["param_axes"] = cfg.param_axes
    return options


def apply_layer_norm(params: Params, x: Array, cfg: Any) -> tuple[Array, Stats]:
    """``jln.layer_norm(x, scale, bias)`` with the module's dtype rule and monitor
    (``round_params_for_bf16``: the parameters rounded to bfloat16 for bfloat16 input)."""
    if cfg.round_params_for_bf16 and jnp.dtype(cfg.dtype or x.dtype) == jnp.bfloat16:
        # round_to, not a bare astype: XLA may keep a cast round trip's excess precision under jit
        params = {k: _stats.round_to(v, jnp.bfloat16).astype(jnp.bfloat16) for k, v in params.items()}
    return apply_norm(layer_norm, params, x, cfg, "jln LayerNorm", **_options(cfg))


def apply_quantized_layer_norm(params: Params, x: Array, cfg: Any, *, state: dict[str, Any],
                               training: bool) -> tuple[tuple[Any, Any], Stats]:
    """``jln.layer_norm(x, scale, bias, quantize=...)``, as :class:`LayerNorm`'s call."""
    return rms_module.apply_quantized(layer_norm, params, x, cfg, "jln QuantizedLayerNorm", state, training,
                                      **_options(cfg))



LAYER_NORM = Kind(
    "LayerNorm", LayerNormConfig, layer_norm_specs, apply_layer_norm, ("x",),
    doc="LayerNorm with torch's numbers: ``(x - E[x]) / sqrt(Var[x] + eps) * scale + bias``.\n\n"
        "Biased variance, eps inside the square root, statistics in float32 (float64 for float64 "
        "input); the module calls :func:`jln.layer_norm`.",
    returns="(``__call__(x)``): array of ``x.shape``, dtype ``x.dtype`` (or ``dtype``).",
    raises="TypeError, ValueError: as :func:`jln.layer_norm` (NNX: also an ``x`` whose shape at "
           "``axis`` is not ``num_features``); ``TypeError`` for an initializer that is not callable, "
           "or (NNX) one other than ones and zeros without ``rngs``, and for flax's argument names "
           "(``epsilon``...), saying jln's.",
    examples=(LINEN_IMPORTS + "  >>> x = jnp.arange(8.0).reshape(2, 4)\n  >>> variables = jnn.LayerNorm().init("
              "jax.random.key(0), x)\n  >>> jnn.LayerNorm().apply(variables, x).shape\n  (2, 4)",
              NNX_IMPORTS + "  >>> jnnx.LayerNorm(4)(jnp.arange(8.0).reshape(2, 4)).shape\n  (2, 4)"),
    rngs_doc=NORM_RNGS, shapes=(NUM_FEATURES,), flax_twin=True,
)

QUANTIZED_LAYER_NORM = Kind(
    "QuantizedLayerNorm", QuantizedLayerNormConfig, layer_norm_specs, apply_quantized_layer_norm, ("x",),
    doc="LayerNorm whose output is quantized for an fp8/int8 matmul: :class:`LayerNorm`'s options and "
        "parameters, and ``quantize``.\n\nThe call is :func:`jln.layer_norm` with ``quantize=``; gradients "
        "pass straight through :meth:`jln.Quantized.dequantize` (see the quantization guide).",
    returns="(``__call__(x)``): a :class:`jln.Quantized` (codes of ``x.shape`` and their scales).",
    raises="TypeError, ValueError: as :class:`LayerNorm`, and for a ``quantize`` that is no :class:`jln.Quant`.",
    examples=(LINEN_IMPORTS + "  >>> import jln\n  >>> m = jnn.QuantizedLayerNorm(quantize=jln.Quant(dtype=\"int8\"))\n"
              "  >>> x = jnp.arange(8.0).reshape(2, 4)\n  >>> m.apply(m.init(jax.random.key(0), x), x).values.dtype\n"
              "  dtype('int8')",
              NNX_IMPORTS + "  >>> jnnx.QuantizedLayerNorm(4)(jnp.arange(8.0).reshape(2, 4)).scale.shape\n  (2, 1)"),
    rngs_doc=NORM_RNGS, shapes=(NUM_FEATURES,), output="Quantized", state=rms_module.quant_state,
)
