"""Conditioned norms (see :mod:`jln._modules`): a norm whose scale and shift come from a
condition, in the dtype flows of the diffusers and transformers classes they reproduce.

* ``AdaGroupNorm``: ``GroupNorm(x) * (1 + scale) + shift``, ``(scale, shift) = linear(act(emb))``
  (diffusers ``AdaGroupNorm``, Kandinsky 3's ``Kandinsky3ConditionalGroupNorm``).
* ``AdaLNTable``: ``LN(x) * (1 + scale) + shift`` with ``(shift, scale) = table + temb``
  (diffusers ``SanaModulatedNorm``).
* ``ModulatedRMSNorm``: ``(rms_norm(f32(x)) * scale)`` rounded once (diffusers
  ``MochiModulatedRMSNorm``).
* ``AdaRMSNorm``: RMSNorm modulated in float32 by ``dense(cond)`` = scale, shift, gate
  (transformers ``PI05AdaptiveRMSNorm``).
* ``AdaLNSigmoidGate``: ``sigmoid(gate_proj(LN(c))) * LN(f32(x)) + shift_proj(LN(c))``, rounded
  once (transformers ``EsmFold2AdaptiveLayerNorm``).

Norm math is only ever :func:`jln.group_norm`, :func:`jln.modulate`,
:func:`jln.adaptive_layer_norm`, :func:`jln.adaptive_rms_norm`, :func:`jln.layer_norm` and
:func:`jln.rms_norm`.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from jln import _modules as M
from jln import _stats, _validate
from jln._modules import (
    COMPUTE,
    DTYPE,
    EPS,
    FEATURES,
    IMPL,
    INITS,
    LINEN_IMPORTS,
    NNX_IMPORTS,
    PARAM_DTYPE,
    SCALE_INIT,
    USE_BIAS,
    Kind,
    Option,
    Params,
    Stats,
    activate,
    cast_in,
    cast_out,
    check_activation,
    compute_dtype,
    dense,
    dense_inits,
    dense_specs,
    make_config,
    record,
)
from jln.families.adaptive.function import (
    adaptive_layer_norm,
    adaptive_rms_norm,
    modulate,
    resolve_order,
    torch_broadcast,
)
from jln.families.batch_norm.function import group_norm
from jln.families.layer_norm.function import layer_norm
from jln.families.rms_norm.function import rms_norm

Array = jax.Array


# --------------------------------------------------------------------------- AdaGroupNorm

#: the name of AdaGroupNorm's Dense: diffusers' ``linear`` or Kandinsky 3's ``context_mlp``
#: (torch ``context_mlp.1``, after its SiLU)
PROJ_NAMES = ("linear", "context_mlp")


def _check_group(cfg: Any) -> None:
    fn = "jln AdaGroupNorm"
    _validate.check_inits(cfg, fn, ("linear_kernel_init", "linear_bias_init"))
    _validate.set_positive(cfg, ("features", "num_groups"), fn)
    if cfg.features % cfg.num_groups:
        raise ValueError(f"{fn}: `num_groups` must divide `features` (the channels); received "
                         f"num_groups={cfg.num_groups}, features={cfg.features}.")
    check_activation(cfg.activation, fn)
    _validate.check_choice(cfg.proj_name, "proj_name", PROJ_NAMES, fn)
    _validate.check_eps(cfg.eps, fn)
    _validate.check_module_options(cfg, fn)


AdaGroupNormConfig = make_config(
    "AdaGroupNormConfig",
    (FEATURES.but(doc="C, the channels of ``x`` (axis 1, torch's NCHW)."),
     Option("num_groups", "int", 32, "groups of channels the statistics run over (torch's ``num_groups``)."),
     EPS.but(doc="the GroupNorm's eps (1e-5)."),
     Option("activation", M.literal(M.COND_ACTIVATIONS, optional=True), None, "applied to ``emb`` before ``linear``: ``None`` (diffusers' "
            "default), ``\"silu\"`` (Kandinsky 3), ``\"swish\"``, ``\"mish\"``, ``\"gelu\"``, ``\"relu\"``."),
     USE_BIAS.but(doc="the Dense's bias."),
     Option("proj_name", M.literal(PROJ_NAMES), "linear", "the Dense's parameter name: ``\"linear\"`` (diffusers "
            "``AdaGroupNorm``) or ``\"context_mlp\"`` (Kandinsky 3, torch ``context_mlp.1``)."),
     *COMPUTE, *dense_inits("linear", "torch ``nn.Linear``'s")),
    _check_group,
)


def group_specs(cfg: Any, cond_features: int) -> dict[str, Any]:
    return {cfg.proj_name: dense_specs(cond_features, 2 * cfg.features, use_bias=cfg.use_bias,
                                       kernel_init=cfg.linear_kernel_init, bias_init=cfg.linear_bias_init)}


def apply_group(params: Params, x: Array, emb: Array, cfg: Any) -> tuple[Array, Stats]:
    """``(scale, shift) = linear(act(emb))``; ``group_norm(x) * (1 + scale) + shift``."""
    fn = "jln AdaGroupNorm"
    _validate.check_floating(x, fn)
    _validate.check_floating(emb, fn, "emb")
    if emb.ndim != 2 or x.ndim < 2 or x.shape[0] != emb.shape[0]:
        raise ValueError(f"{fn}: `emb` must be [B, cond_features] for x [B, C, *spatial] (torch broadcasts "
                         f"emb[:, :, None, None]); received emb.shape={tuple(emb.shape)}, "
                         f"x.shape={tuple(x.shape)}.")
    dt = compute_dtype(cfg.dtype, emb)  # diffusers runs the Dense in the condition's dtype
    xi = cast_in(x, cfg.dtype)
    h = dense(params[cfg.proj_name], activate(cfg.activation, emb).astype(dt), dt, fn, "emb")
    # [B, C] -> [B, C, 1, ...]: the channels are axis 1
    scale, shift = (c.reshape(c.shape + (1,) * (xi.ndim - 2)) for c in jnp.split(h, 2, axis=-1))
    n = group_norm(xi, cfg.num_groups, eps=cfg.eps, impl=cfg.impl)
    y = cast_out(modulate(n, shift, scale), cfg.dtype)
    return y, record(cfg.monitor, xi, y, tuple(range(1, xi.ndim)), fn)


ADA_GROUP_NORM = Kind(
    "AdaGroupNorm", AdaGroupNormConfig, group_specs, apply_group, ("x", "emb"),
    doc="GroupNorm modulated by a condition (diffusers ``AdaGroupNorm``, Kandinsky 3's "
        "``Kandinsky3ConditionalGroupNorm``), channels first.\n\n"
        "``(scale, shift) = linear(act(emb))`` in ``emb``'s dtype; ``y = group_norm(x) * (1 + scale) + shift`` "
        "with ``group_norm`` torch's (no affine, eps inside the square root, float32 statistics, rounded "
        "to ``x.dtype``: :func:`jln.group_norm`) and the modulation rounded after each op "
        "(:func:`jln.modulate`).",
    returns="(``__call__(x, emb)``): ``x [B, C, *spatial]`` modulated by ``emb [B, cond_features]``; "
            "dtype the promotion of ``x``'s and ``emb``'s (or ``dtype``).",
    raises="TypeError, ValueError: non-floating inputs, ``num_groups`` not dividing ``features``, an unknown "
           "``activation``, an ``emb`` that is not ``[B, cond_features]``.",
    examples=(LINEN_IMPORTS + "  >>> m = jnn.AdaGroupNorm(features=8, num_groups=2)\n  >>> x, e = jnp.ones((2, 8, 4, 4)), "
              "jnp.ones((2, 3))\n  >>> m.apply(m.init(jax.random.key(0), x, e), x, e).shape\n  (2, 8, 4, 4)",
              NNX_IMPORTS + "  >>> m = jnnx.AdaGroupNorm(3, 8, num_groups=2, rngs=nnx.Rngs(0))\n  >>> "
              "m(jnp.ones((2, 8, 4, 4)), jnp.ones((2, 3))).shape\n  (2, 8, 4, 4)"),
    rngs_doc="``nnx.Rngs`` for the Dense kernel init.",
    shapes=(M.cond_features("emb", "{cfg.proj_name}/kernel"),), positional=1, features_axis=1,
)

# --------------------------------------------------------------------------- AdaLNTable


def _check_table(cfg: Any) -> None:
    fn = "jln AdaLNTable"
    _validate.check_inits(cfg, fn)
    _validate.set_positive(cfg, ("features",), fn)
    names = resolve_order(cfg.order, fn)
    if not set(names) & {"shift", "scale"}:
        raise ValueError(f"{fn}: `order` must name a 'shift' and/or a 'scale' row; received {cfg.order!r}.")
    _validate.check_eps(cfg.eps, fn)
    _validate.check_module_options(cfg, fn)


AdaLNTableConfig = make_config(
    "AdaLNTableConfig",
    (FEATURES, EPS.but(default=1e-6, doc="the LayerNorm's eps (Sana: 1e-6)."),
     Option("elementwise_affine", "bool", False, "the LayerNorm's own ``scale`` and ``bias`` (Sana: none)."),
     USE_BIAS.but(doc="with ``elementwise_affine``, the LayerNorm's ``bias``."),
     Option("order", "ChunkOrder", "shift_scale", "the rows of ``scale_shift_table``: ``\"shift_scale\"`` (Sana) or "
            "a tuple of names with ``\"shift\"`` and/or ``\"scale\"``."),
     *COMPUTE, SCALE_INIT.but(doc="the LayerNorm's ``scale`` initializer; ``None``: ones."),
     M.BIAS_INIT.but(doc="the LayerNorm's ``bias`` initializer; ``None``: zeros.")),
    _check_table,
)


def table_specs(cfg: Any) -> dict[str, Any]:
    if not cfg.elementwise_affine:
        return {}
    return {"norm": M.norm_affine_specs((cfg.features,), use_bias=cfg.use_bias, scale_init=cfg.scale_init,
                                        bias_init=cfg.bias_init)}


def apply_table(params: Params, x: Array, temb: Array, scale_shift_table: Array, cfg: Any) -> tuple[Array, Stats]:
    """``(shift, scale) = scale_shift_table + temb`` (each row, in their promoted dtype);
    ``LN(x) * (1 + scale) + shift``."""
    fn = "jln AdaLNTable"
    _validate.check_floating(x, fn)
    _validate.check_floating(temb, fn, "temb")
    _validate.check_floating(scale_shift_table, fn, "scale_shift_table")
    names = resolve_order(cfg.order, fn)
    table, d = jnp.asarray(scale_shift_table), cfg.features
    if table.shape != (len(names), d) or temb.ndim < 1 or temb.shape[-1] != d:
        raise ValueError(f"{fn}: `scale_shift_table` must be [{len(names)}, {d}] (rows {names}) and `temb` "
                         f"[..., {d}]; received scale_shift_table.shape={tuple(table.shape)}, "
                         f"temb.shape={tuple(temb.shape)}.")
    xi = cast_in(x, cfg.dtype)
    dt = _stats.promote(table.dtype, temb.dtype)
    lead = (1,) * (temb.ndim - 1)
    rows = [table[i].astype(dt).reshape(lead + (d,)) + temb.astype(dt) for i in range(len(names))]
    norm = params.get("norm", {})
    y, _ = adaptive_layer_norm(xi, jnp.concatenate(rows, axis=-1), norm.get("scale"), norm.get("bias"),
                               order=names, eps=cfg.eps, impl=cfg.impl)
    y = cast_out(y, cfg.dtype)
    return y, record(cfg.monitor, xi, y, -1, fn)


ADA_LN_TABLE = Kind(
    "AdaLNTable", AdaLNTableConfig, table_specs, apply_table, ("x", "temb", "scale_shift_table"),
    doc="LayerNorm modulated by a table of rows plus the condition (diffusers ``SanaModulatedNorm``, "
        "PixArt's ``scale_shift_table``).\n\n"
        "``shift = table[0] + temb``, ``scale = table[1] + temb`` (each rounded to the promotion of their "
        "dtypes), ``y = LN(x) * (1 + scale) + shift`` as :func:`jln.adaptive_layer_norm`. The table is the "
        "transformer block's parameter, so it is an input here as in torch; ``temb`` is ``[B, d]`` (broadcast "
        "over the tokens: Sana) or ``x``'s shape (per token: Sana-Video).",
    returns="(``__call__(x, temb, scale_shift_table)``): array like ``x``, dtype the promotion of ``x``'s, "
            "``temb``'s and the table's (or ``dtype``).",
    raises="TypeError, ValueError: non-floating inputs, a table that is not ``[k, features]``, a ``temb`` "
           "that does not broadcast against ``x``.",
    examples=(LINEN_IMPORTS + "  >>> m = jnn.AdaLNTable(features=8)\n  >>> x, t, tab = jnp.ones((2, 5, 8)), "
              "jnp.ones((2, 8)), jnp.zeros((2, 8))\n  >>> m.apply(m.init(jax.random.key(0), x, t, tab), x, t, "
              "tab).shape\n  (2, 5, 8)",
              NNX_IMPORTS + "  >>> jnnx.AdaLNTable(8)(jnp.ones((2, 5, 8)), jnp.ones((2, 8)), jnp.zeros((2, 8))).shape\n"
              "  (2, 5, 8)"),
    rngs_doc=M.NORM_RNGS, positional=1,
)

# --------------------------------------------------------------------------- ModulatedRMSNorm


def _check_modulated(cfg: Any) -> None:
    fn = "jln ModulatedRMSNorm"
    _validate.check_eps(cfg.eps, fn)
    _validate.check_module_options(cfg, fn)


ModulatedRMSNormConfig = make_config(
    "ModulatedRMSNormConfig",
    (EPS.but(doc="added to the mean square (Mochi passes its own)."), DTYPE, PARAM_DTYPE, IMPL),
    _check_modulated,
)


def modulated_specs(cfg: Any) -> dict[str, Any]:
    return {}


def apply_modulated(params: Params, x: Array, cfg: Any, scale: Array | None = None) -> tuple[Array, Stats]:
    """``(rms_norm(f32(x)) * f32(scale))`` rounded once to ``x.dtype``."""
    fn = "jln ModulatedRMSNorm"
    _validate.check_floating(x, fn)
    xi = cast_in(x, cfg.dtype)
    if scale is None:
        y = rms_norm(xi.astype(jnp.float32), eps=cfg.eps, convention="diffusers", impl=cfg.impl).astype(xi.dtype)
    else:
        y, _ = adaptive_rms_norm(xi, scale, order="scale_only", use=(None, "scale"), eps=cfg.eps,
                                 convention="diffusers", modulation="float32", scale_offset=0.0, impl=cfg.impl)
    return cast_out(y, cfg.dtype), None


MODULATED_RMS_NORM = Kind(
    "ModulatedRMSNorm", ModulatedRMSNormConfig, modulated_specs, apply_modulated, ("x",),
    doc="RMSNorm scaled by a given factor in float32 (diffusers ``MochiModulatedRMSNorm``); no parameters.\n\n"
        "``y = (f32(x) * rsqrt(mean(f32(x)^2) + eps) * f32(scale))`` rounded once to ``x.dtype`` "
        "(:func:`jln.adaptive_rms_norm` with ``modulation=\"float32\"``, ``scale_offset=0``): the caller "
        "passes the whole factor, e.g. ``1 + scale_msa[:, None]``.",
    returns="(``__call__(x, scale=None)``): array of ``x.shape`` and ``x.dtype`` (or ``dtype``); ``scale`` "
            "``[d]``, ``[B, d]``, ``x``'s shape or ``x``'s rank with size-1 axes.",
    raises="TypeError, ValueError: as :func:`jln.adaptive_rms_norm`.",
    examples=(LINEN_IMPORTS + "  >>> x = jnp.ones((2, 5, 8))\n  >>> jnn.ModulatedRMSNorm(eps=1e-6).apply({}, x, "
              "2 * jnp.ones((2, 1, 8))).shape\n  (2, 5, 8)",
              NNX_IMPORTS + "  >>> jnnx.ModulatedRMSNorm(eps=1e-6)(jnp.ones((2, 5, 8))).shape\n  (2, 5, 8)"),
    rngs_doc="unused (no parameters).", call_options=(("scale", None, "jax.Array | None"),),
)

# --------------------------------------------------------------------------- AdaRMSNorm


def _check_ada_rms(cfg: Any) -> None:
    fn = "jln AdaRMSNorm"
    _validate.check_inits(cfg, fn, ("kernel_init", "bias_init"))
    _validate.set_positive(cfg, ("features",), fn)
    _validate.check_eps(cfg.eps, fn)
    _validate.check_module_options(cfg, fn)


AdaRMSNormConfig = make_config(
    "AdaRMSNormConfig",
    (FEATURES, EPS.but(default=1e-6, doc="added to the mean square (PI0.5: 1e-6)."),
     USE_BIAS.but(doc="the Dense ``dense``'s bias."), *COMPUTE, *INITS),
    _check_ada_rms,
)


def ada_rms_specs(cfg: Any, cond_features: int) -> dict[str, Any]:
    return {"dense": dense_specs(cond_features, 3 * cfg.features, use_bias=cfg.use_bias,
                                 kernel_init=cfg.kernel_init, bias_init=cfg.bias_init)}


def apply_ada_rms(params: Params, x: Array, cond: Array, cfg: Any) -> tuple[tuple[Array, Array], Stats]:
    """``(scale, shift, gate) = dense(cond)``; ``rms(f32(x)) * (1 + f32(scale)) + f32(shift)``."""
    fn = "jln AdaRMSNorm"
    _validate.check_floating(x, fn)
    _validate.check_floating(cond, fn, "cond")
    dt = compute_dtype(cfg.dtype, cond)  # the Dense runs in the condition's dtype
    xi = cast_in(x, cfg.dtype)
    h = dense(params["dense"], cond.astype(dt), dt, fn, "cond")
    # torch: dense(cond)[:, None, :], broadcast against x whatever the ranks
    xb, hb, hx = torch_broadcast(xi, h, fn)
    y, _ = adaptive_rms_norm(xb, hb, order="pi05", eps=cfg.eps, convention="diffusers", modulation="float32",
                             impl=cfg.impl)
    y = cast_out(y, cfg.dtype)
    gate = jnp.split(hx, 3, axis=-1)[2]
    return (y, gate.astype(y.dtype)), record(cfg.monitor, xb, y, -1, fn)


ADA_RMS_NORM = Kind(
    "AdaRMSNorm", AdaRMSNormConfig, ada_rms_specs, apply_ada_rms, ("x", "cond"), output="tuple[jax.Array, jax.Array]",
    doc="RMSNorm with scale, shift and a residual gate predicted from a condition (transformers "
        "``PI05AdaptiveRMSNorm``).\n\n"
        "``(scale, shift, gate) = dense(cond)`` in ``cond``'s dtype (no activation); "
        "``y = f32(x) * rsqrt(mean(f32(x)^2) + eps) * (1 + f32(scale)) + f32(shift)`` in float32, rounded "
        "once to ``x.dtype`` (:func:`jln.adaptive_rms_norm` with ``modulation=\"float32\"``).",
    returns="(``__call__(x, cond)``): ``(y, gate)``: ``y`` like ``x``, ``gate [B, 1, d]``, both in "
            "``x.dtype`` (or ``dtype``); ``dense(cond)[:, None, :]`` meets ``x`` under torch's broadcasting "
            "whatever the ranks (``cond [B, L', c]``: ``y [B, B, L, d]``, ``gate [B, 1, L', d]``, as torch).",
    raises="TypeError, ValueError: non-floating inputs, a ``cond`` without a batch axis, shapes torch "
           "cannot broadcast, mismatched sizes.",
    examples=(LINEN_IMPORTS + "  >>> m = jnn.AdaRMSNorm(features=8)\n  >>> x, c = jnp.ones((2, 5, 8)), jnp.ones((2, 4))\n"
              "  >>> [o.shape for o in m.apply(m.init(jax.random.key(0), x, c), x, c)]\n  [(2, 5, 8), (2, 1, 8)]",
              NNX_IMPORTS + "  >>> y, gate = jnnx.AdaRMSNorm(4, 8, rngs=nnx.Rngs(0))(jnp.ones((2, 5, 8)), jnp.ones((2, 4)))\n"
              "  >>> gate.shape\n  (2, 1, 8)"),
    rngs_doc=M.DENSE_RNGS, shapes=(M.cond_features("cond", "dense/kernel"),), positional=1,
)

# --------------------------------------------------------------------------- AdaLNSigmoidGate


def _check_sigmoid_gate(cfg: Any) -> None:
    fn = "jln AdaLNSigmoidGate"
    _validate.check_inits(cfg, fn, ("scale_init", "kernel_init", "bias_init"))
    _validate.set_positive(cfg, ("features",), fn)
    _validate.check_eps(cfg.eps, fn)
    _validate.check_module_options(cfg, fn)


AdaLNSigmoidGateConfig = make_config(
    "AdaLNSigmoidGateConfig",
    (FEATURES, EPS.but(doc="both LayerNorms' eps (1e-5)."), *COMPUTE,
     SCALE_INIT.but(doc="``cond_norm``'s ``scale`` initializer; ``None``: ones."), *INITS),
    _check_sigmoid_gate,
)


def sigmoid_gate_specs(cfg: Any, cond_features: int) -> dict[str, Any]:
    d = cfg.features
    return {
        "cond_norm": {"scale": M.param_spec((cond_features,), cfg.scale_init, M.ones)},
        "gate_proj": dense_specs(cond_features, d, kernel_init=cfg.kernel_init, bias_init=cfg.bias_init),
        "shift_proj": dense_specs(cond_features, d, use_bias=False, kernel_init=cfg.kernel_init),
    }


def apply_sigmoid_gate(params: Params, x: Array, cond: Array, cfg: Any) -> tuple[Array, Stats]:
    """``c = LN(cond) * w``; ``sigmoid(gate_proj(c)) * LN(f32(x)) + shift_proj(c)``, rounded once."""
    fn = "jln AdaLNSigmoidGate"
    _validate.check_floating(x, fn)
    _validate.check_floating(cond, fn, "cond")
    dt = compute_dtype(cfg.dtype, cond)
    xi = cast_in(x, cfg.dtype)
    c = layer_norm(cond.astype(dt), params["cond_norm"]["scale"], eps=cfg.eps, impl=cfg.impl)
    gate = activate("sigmoid", dense(params["gate_proj"], c, dt, fn, "cond"))
    shift = dense(params["shift_proj"], c, dt, fn, "cond")
    # gate * LN(x) in float32 (``scale_offset=0``: the gate multiplies alone), + shift, one rounding
    y, _ = adaptive_layer_norm(xi.astype(jnp.float32), jnp.concatenate([gate, shift], axis=-1),
                               order=("scale", "shift"), eps=cfg.eps, scale_offset=0.0, impl=cfg.impl)
    y = cast_out(y.astype(xi.dtype), cfg.dtype)
    return y, record(cfg.monitor, xi, y, -1, fn)


ADA_LN_SIGMOID_GATE = Kind(
    "AdaLNSigmoidGate", AdaLNSigmoidGateConfig, sigmoid_gate_specs, apply_sigmoid_gate, ("x", "cond"),
    doc="LayerNorm gated by a sigmoid of the condition (transformers ``EsmFold2AdaptiveLayerNorm``).\n\n"
        "``c = cond_norm(cond)`` (LayerNorm with a weight, no bias, rounded to ``cond``'s dtype); "
        "``y = sigmoid(gate_proj(c)) * LN(f32(x)) + shift_proj(c)`` with the gate and shift in ``cond``'s "
        "dtype and the rest in float32, rounded once to ``x.dtype`` (:func:`jln.adaptive_layer_norm` with "
        "``scale_offset=0``). No ``1 +``: the gate is the whole factor.",
    returns="(``__call__(x, cond)``): array like ``x``, dtype ``x.dtype`` (or ``dtype``); ``cond`` ``[B, c]`` "
            "(broadcast over the tokens) or ``x``'s leading shape with ``c`` features.",
    raises="TypeError, ValueError: non-floating inputs, mismatched sizes.",
    examples=(LINEN_IMPORTS + "  >>> m = jnn.AdaLNSigmoidGate(features=8)\n  >>> x, c = jnp.ones((2, 5, 8)), "
              "jnp.ones((2, 5, 4))\n  >>> m.apply(m.init(jax.random.key(0), x, c), x, c).shape\n  (2, 5, 8)",
              NNX_IMPORTS + "  >>> jnnx.AdaLNSigmoidGate(4, 8, rngs=nnx.Rngs(0))(jnp.ones((2, 5, 8)), "
              "jnp.ones((2, 4))).shape\n  (2, 5, 8)"),
    rngs_doc=M.DENSE_RNGS, shapes=(M.cond_features("cond", "gate_proj/kernel"),), positional=1,
)

# --------------------------------------------------------------------------- SpatialNorm


def nearest_indices(n_in: int, n_out: int) -> Any:
    """The source index of each of ``n_out`` positions under torch's ``F.interpolate(...,
    size=..., mode="nearest")``: ``min(floor(i * (n_in / n_out)), n_in - 1)`` with the scale
    and the product in float32 (torch's CPU and CUDA kernels), ``i // 2`` for an exact doubling."""
    import numpy as np

    i = np.arange(n_out)
    if n_out == n_in:
        return i
    if n_out == 2 * n_in:
        return i >> 1
    scale = np.float32(n_in) / np.float32(n_out)
    return np.minimum(np.floor(i.astype(np.float32) * scale).astype(np.int64), n_in - 1)


def _check_spatial(cfg: Any) -> None:
    fn = "jln SpatialNorm"
    _validate.check_inits(cfg, fn, ("scale_init", "bias_init", "conv_kernel_init", "conv_bias_init"))
    _validate.set_positive(cfg, ("features", "num_groups"), fn)
    if cfg.features % cfg.num_groups:
        raise ValueError(f"{fn}: `num_groups` must divide `features` (the channels of x); received "
                         f"num_groups={cfg.num_groups}, features={cfg.features}.")
    _validate.check_eps(cfg.eps, fn)
    _validate.check_module_options(cfg, fn)


SpatialNormConfig = make_config(
    "SpatialNormConfig",
    (FEATURES.but(doc="C, the channels of ``x`` (axis 1, torch's NCHW) and of the output."),
     Option("num_groups", "int", 32, "the GroupNorm's groups (32 in diffusers' and Emu3's)."),
     EPS.but(default=1e-6, doc="the GroupNorm's eps (1e-6 in diffusers' and Emu3's)."),
     USE_BIAS.but(doc="the two 1x1 convolutions' biases."),
     *COMPUTE,
     SCALE_INIT.but(doc="the GroupNorm's ``scale`` initializer; ``None``: ones."),
     Option("bias_init", "Initializer | None", None, "the GroupNorm's ``bias`` initializer; ``None``: zeros."),
     *dense_inits("conv", "torch ``nn.Conv2d``'s")),
    _check_spatial,
)


def spatial_specs(cfg: Any, zq_features: int) -> dict[str, Any]:
    conv = {"use_bias": cfg.use_bias, "kernel_init": cfg.conv_kernel_init, "bias_init": cfg.conv_bias_init}
    return {
        "norm_layer": M.norm_affine_specs((cfg.features,), scale_init=cfg.scale_init, bias_init=cfg.bias_init),
        "conv_y": dense_specs(zq_features, cfg.features, **conv),
        "conv_b": dense_specs(zq_features, cfg.features, **conv),
    }


def _zq_channels(cfg: Any, zq: Array, name: str, fn: str) -> int:
    _validate.check_floating(zq, fn, name)
    if zq.ndim < 3:
        raise ValueError(f"{fn}: `{name}` must be channels first, [B, C_zq, *spatial]; received "
                         f"{name}.shape={tuple(zq.shape)}.")
    return int(zq.shape[1])


ZQ_FEATURES = M.Shape(
    "zq_features", "int", "channels of ``zq`` (its axis 1).", 1,
    lambda v, fn: _validate.check_positive(v, "zq_features", fn), _zq_channels, stored=M.stored_rows("conv_y/kernel"),
)


def _conv1x1(p: Params, v: Array, dt: Any, fn: str) -> Array:
    """A 1x1 convolution of channels-first ``v``: the Dense over axis 1 (float32 accumulation
    and the bias, one rounding: torch's CPU convolution)."""
    return jnp.moveaxis(dense(p, jnp.moveaxis(v, 1, -1).astype(dt), dt, fn, "zq"), -1, 1)


def apply_spatial(params: Params, x: Array, zq: Array, cfg: Any) -> tuple[Array, Stats]:
    """``zq`` resized (nearest) to ``x``'s spatial shape; ``group_norm(x) * conv_y(zq) + conv_b(zq)``."""
    fn = "jln SpatialNorm"
    _validate.check_floating(x, fn)
    _zq_channels(cfg, zq, "zq", fn)
    if x.ndim != zq.ndim or x.shape[0] != zq.shape[0] or x.shape[1] != cfg.features:
        raise ValueError(
            f"{fn}: `x` must be [B, features={cfg.features}, *spatial] and `zq` [B, C_zq, *spatial'] of the "
            f"same rank and batch (zq is resized to x's spatial shape); received x.shape={tuple(x.shape)}, "
            f"zq.shape={tuple(zq.shape)}."
        )
    xi = cast_in(x, cfg.dtype)
    for ax in range(2, xi.ndim):
        zq = jnp.take(zq, nearest_indices(zq.shape[ax], xi.shape[ax]), axis=ax)
    dt = compute_dtype(cfg.dtype, zq)  # the convolutions run in zq's dtype
    cy = _conv1x1(params["conv_y"], zq, dt, fn)
    cb = _conv1x1(params["conv_b"], zq, dt, fn)
    norm = params["norm_layer"]
    n = group_norm(xi, cfg.num_groups, norm.get("scale"), norm.get("bias"), eps=cfg.eps, impl=cfg.impl)
    y = cast_out(modulate(n, cb, cy, scale_offset=0.0), cfg.dtype)  # n * cy, rounded; + cb, rounded
    return y, record(cfg.monitor, xi, y, tuple(range(1, xi.ndim)), fn)


SPATIAL_NORM = Kind(
    "SpatialNorm", SpatialNormConfig, spatial_specs, apply_spatial, ("x", "zq"),
    doc="GroupNorm modulated by a second feature map (diffusers ``SpatialNorm``, transformers' "
        "``Emu3VQVAESpatialNorm``: MoVQ's spatially conditioned normalization), channels first.\n\n"
        "``zq`` is resized to ``x``'s spatial shape (torch's nearest interpolation); "
        "``y = group_norm(x) * conv_y(zq) + conv_b(zq)`` with ``group_norm`` torch's GroupNorm with its affine "
        "(:func:`jln.group_norm`), ``conv_y``/``conv_b`` 1x1 convolutions in ``zq``'s dtype, and the "
        "product and the sum each rounded, as torch evaluates them (:func:`jln.modulate`).",
    returns="(``__call__(x, zq)``): array of ``x.shape``; dtype the promotion of ``x``'s and ``zq``'s (or ``dtype``).",
    raises="TypeError, ValueError: non-floating inputs, ``num_groups`` not dividing ``features``, an ``x`` "
           "without ``features`` channels at axis 1, a ``zq`` of another rank or batch.",
    examples=(LINEN_IMPORTS + "  >>> m = jnn.SpatialNorm(features=8, num_groups=2)\n  >>> x, zq = jnp.ones((2, 8, 4, 4)), "
              "jnp.ones((2, 3, 2, 2))\n  >>> m.apply(m.init(jax.random.key(0), x, zq), x, zq).shape\n  (2, 8, 4, 4)",
              NNX_IMPORTS + "  >>> m = jnnx.SpatialNorm(3, 8, num_groups=2, rngs=nnx.Rngs(0))\n  >>> "
              "m(jnp.ones((2, 8, 4, 4)), jnp.ones((2, 3, 2, 2))).shape\n  (2, 8, 4, 4)"),
    rngs_doc="``nnx.Rngs`` for the convolution kernels' init.", shapes=(ZQ_FEATURES,), positional=1, features_axis=1,
)
