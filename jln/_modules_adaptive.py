"""More module kinds (see :mod:`jln._modules`): diffusers' other adaptive norms, and the
Lp and global response norms.

* ``AdaLNZeroJoint``: one norm, two streams (diffusers ``CogVideoXLayerNormZero``).
* ``AdaLNScale``: ``norm(x) * (1 + linear_1(SiLU(cond)))``, then an optional ``linear_2``
  (diffusers ``LuminaLayerNormContinuous``, ``MochiLayerNormContinuous``).
* ``GlobalResponseNorm`` (ConvNeXt-V2, diffusers) and ``LpNorm`` (``F.normalize``).

Norm math is only ever :func:`jln.adaptive_layer_norm`, :func:`jln.adaptive_rms_norm`,
:func:`jln.global_response_norm` and :func:`jln.lp_normalize`.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jln import _modules as M
from jln import _validate
from jln._lp import _check_p, global_response_norm, lp_normalize
from jln._modules import (
    _LINEN,
    _NNX,
    _NORM_RNGS,
    ADAPTIVE_DISTRIBUTED,
    BIAS_INIT,
    COMPUTE,
    DTYPE,
    EPS,
    FEATURES,
    PARAM_DTYPE,
    SCALE_INIT,
    USE_BIAS,
    Kind,
    Option,
    Params,
    Shape,
    Stats,
    _cast_in,
    _cast_out,
    _dense_inits,
    _record,
    compute_dtype,
    dense,
    dense_specs,
    make_config,
    modulated_norm,
    silu,
    zeros,
)

Array = jax.Array

# --------------------------------------------------------------------------- AdaLNZeroJoint


def _check_joint(cfg: Any) -> None:
    fn = "jln AdaLNZeroJoint"
    _validate.check_inits(cfg, fn, ("scale_init", "bias_init", "linear_kernel_init", "linear_bias_init"))
    _validate.set_positive(cfg, ("features",), fn)
    if cfg.num_chunks not in (6, 12):
        raise ValueError(f"{fn}: `num_chunks` must be 6 (CogVideoX) or 12 (CogView3-Plus); received "
                         f"{cfg.num_chunks!r}.")
    if cfg.layout is not None:
        _validate.check_choice(cfg.layout, "layout", tuple(JOINT_LAYOUTS), fn)
        if JOINT_LAYOUTS[cfg.layout][0] != cfg.num_chunks:
            raise ValueError(f"{fn}: layout={cfg.layout!r} splits the projection into "
                             f"{JOINT_LAYOUTS[cfg.layout][0]} chunks; received num_chunks={cfg.num_chunks}.")
    M.check_activation(cfg.activation, fn)
    if cfg.num_chunks == 12 and cfg.elementwise_affine:
        raise ValueError(f"{fn}: num_chunks=12 (CogView3-Plus: two LayerNorms without affine) takes "
                         f"elementwise_affine=False.")
    _validate.check_eps(cfg.eps, fn)
    _validate.check_module_options(cfg, fn)


_DIT12_AFTER = (("gate_msa", "shift_mlp", "scale_mlp", "gate_mlp"),
                ("c_gate_msa", "c_shift_mlp", "c_scale_mlp", "c_gate_mlp"))
#: layout -> (chunk count, order, the x and context chunk pairs (shift, scale), the chunks
#: returned after x, after context; ``*`` marks a gate returned as ``[B, 1, d]``)
JOINT_LAYOUTS: dict[str, tuple[int, str, tuple[str, str], tuple[str, str], tuple[str, ...], tuple[str, ...]]] = {
    "cogvideox": (6, "cogvideox", ("shift", "scale"), ("enc_shift", "enc_scale"), (), ("*gate", "*enc_gate")),
    "cogview3plus": (12, "cogview3plus", ("shift_msa", "scale_msa"), ("c_shift_msa", "c_scale_msa"), *_DIT12_AFTER),
    # CogView4 / GLM-Image: the image's and the text's chunks interleaved
    "cogview4": (12, "cogview4", ("shift_msa", "scale_msa"), ("c_shift_msa", "c_scale_msa"), *_DIT12_AFTER),
    # EasyAnimate: CogVideoX's chunks, the gates returned as [B, d]
    "easyanimate": (6, "cogvideox", ("shift", "scale"), ("enc_shift", "enc_scale"), (), ("gate", "enc_gate")),
}
#: the layout of ``layout=None``, by chunk count
_DEFAULT_LAYOUT = {6: "cogvideox", 12: "cogview3plus"}


AdaLNZeroJointConfig = make_config(
    "AdaLNZeroJointConfig",
    (FEATURES, EPS, Option("elementwise_affine", "bool", True, "the LayerNorm's own ``scale`` and ``bias``."),
     USE_BIAS.but(doc="the Dense ``linear``'s bias."), *COMPUTE, *ADAPTIVE_DISTRIBUTED,
     SCALE_INIT.but(doc="the LayerNorm's ``scale`` initializer; ``None``: ones."),
     BIAS_INIT.but(doc="the LayerNorm's ``bias`` initializer; ``None``: zeros."),
     *_dense_inits("linear", "torch ``nn.Linear``'s"),
     Option("num_chunks", "int", 6, "6 (CogVideoX: shift, scale, gate, enc_shift, enc_scale, enc_gate) or 12 "
            "(CogView3-Plus: DiT's six for ``x``, then for ``context``; LayerNorms without affine)."),
     Option("layout", "str | None", None, "how the chunks are laid out and returned: ``None`` (by "
            "``num_chunks``: ``\"cogvideox\"`` or ``\"cogview3plus\"``), ``\"cogview4\"`` (12 chunks, the "
            "image's and the text's interleaved: CogView4, GLM-Image) or ``\"easyanimate\"`` (CogVideoX's six, "
            "gates returned ``[B, d]``)."),
     Option("activation", "str | None", "silu", "applied to ``emb`` before ``linear``: ``\"silu\"``; "
            "``None`` for CogView4 / GLM-Image.")),
    _check_joint,
)


def joint_specs(cfg: Any, cond_features: int) -> dict[str, Any]:
    specs: dict[str, Any] = {"linear": dense_specs(cond_features, cfg.num_chunks * cfg.features, use_bias=cfg.use_bias,
                                                   kernel_init=cfg.linear_kernel_init,
                                                   bias_init=cfg.linear_bias_init)}
    return {**specs, **M._norm_params_specs(cfg, cfg.features, "layer_norm")}


def _token_axis(g: Array) -> Array:
    """``g[:, None, :]``: a per-example chunk with a token axis."""
    return g.reshape(g.shape[:-1] + (1,) + g.shape[-1:])


def apply_joint(params: Params, x: Array, context: Array, emb: Array, cfg: Any) -> tuple[tuple[Array, ...], Stats]:
    """CogVideoX: ``(shift, scale, gate, enc_shift, enc_scale, enc_gate) = linear(SiLU(emb))``;
    the one LayerNorm modulates ``x`` and ``context`` with their own chunks."""
    fn = "jln AdaLNZeroJoint"
    for v, name in ((x, "x"), (context, "context"), (emb, "emb")):
        _validate.check_floating(v, fn, name)
    dt = compute_dtype(cfg.dtype, emb)
    xi, ci = _cast_in(x, cfg.dtype), _cast_in(context, cfg.dtype)
    h = dense(params["linear"], M.activate(cfg.activation, emb).astype(dt), dt, fn, "emb")
    norm = params.get("norm", {})
    _, order, use_x, use_c, after_x, after_c = JOINT_LAYOUTS[cfg.layout or _DEFAULT_LAYOUT[cfg.num_chunks]]
    y, ch = modulated_norm(xi, h, cfg, norm, order=order, norm_type="layer_norm", use=use_x)
    c, _ = modulated_norm(ci, h, cfg, norm, order=order, norm_type="layer_norm", use=use_c)
    y, c = _cast_out(y, cfg.dtype), _cast_out(c, cfg.dtype)
    stats = _record(cfg.monitor, xi, y, -1, fn)

    def out(n: str) -> Array:
        return _token_axis(ch[n[1:]]) if n.startswith("*") else ch[n]

    if cfg.num_chunks == 6:  # CogVideoX and EasyAnimate return both streams first
        return (y, c, *(out(n) for n in after_c)), stats
    return (y, *(out(n) for n in after_x), c, *(out(n) for n in after_c)), stats


ADA_LN_ZERO_JOINT = Kind(
    "AdaLNZeroJoint", AdaLNZeroJointConfig, joint_specs, apply_joint, ("x", "context", "emb"),
    doc="adaLN-Zero over two token streams sharing one LayerNorm (diffusers ``CogVideoXLayerNormZero``; "
        "``CogView3PlusAdaLayerNormZeroTextImage`` with ``num_chunks=12``).\n\n"
        "``(shift, scale, gate, enc_shift, enc_scale, enc_gate) = linear(SiLU(emb))`` in ``emb``'s "
        "dtype; ``x_mod = LN(x) * (1 + scale) + shift`` and ``context_mod = LN(context) * (1 + enc_scale) "
        "+ enc_shift`` (LayerNorm with affine, eps 1e-5), as :func:`jln.adaptive_layer_norm`. ``layout`` "
        "and ``activation`` give CogView4's / GLM-Image's (interleaved chunks, no SiLU) and EasyAnimate's.",
    returns="(``__call__(x, context, emb)``): ``(x_mod, context_mod, gate, enc_gate)`` with ``[B, 1, d]`` "
            "gates (6 chunks; ``[B, d]`` with ``layout=\"easyanimate\"``); ``(x_mod, gate_msa, shift_mlp, scale_mlp, gate_mlp, context_mod, c_gate_msa, "
            "c_shift_mlp, c_scale_mlp, c_gate_mlp)`` with ``[B, d]`` chunks (12).",
    raises="TypeError, ValueError: non-floating inputs, mismatched sizes, an initializer that is not "
           "callable.",
    examples=(_LINEN + "  >>> m = jnn.AdaLNZeroJoint(features=8)\n  >>> x, t, c = jnp.ones((2, 5, 8)), "
              "jnp.ones((2, 3, 8)), jnp.ones((2, 4))\n  >>> [o.shape for o in m.apply(m.init("
              "jax.random.key(0), x, t, c), x, t, c)][2]\n  (2, 1, 8)",
              _NNX + "  >>> m = jnnx.AdaLNZeroJoint(4, 8, rngs=nnx.Rngs(0))\n  >>> len(m(jnp.ones((2, 5, 8)), "
              "jnp.ones((2, 3, 8)), jnp.ones((2, 4))))\n  4"),
    rngs_doc="``nnx.Rngs`` for the Dense kernel init.",
    shapes=(Shape("cond_features", "int", "size of ``emb``'s last axis.", 2,
                  lambda v, fn: _validate.check_positive(v, "cond_features", fn), M._infer_last),),
    positional=1,
)

# --------------------------------------------------------------------------- AdaLNScale


def _check_scale(cfg: Any) -> None:
    fn = "jln AdaLNScale"
    _validate.check_inits(cfg, fn, ("scale_init", "bias_init", "linear_kernel_init", "linear_bias_init"))
    _validate.set_positive(cfg, ("features",), fn)
    if cfg.out_features is not None:
        object.__setattr__(cfg, "out_features", _validate.check_positive(cfg.out_features, "out_features", fn))
    _validate.check_choice(cfg.norm_type, "norm_type", M.ZERO_NORM_TYPES, fn)
    if cfg.norm_type == "fp32_rms_norm" and cfg.elementwise_affine:
        raise ValueError(
            f"{fn}: norm_type='fp32_rms_norm' (Mochi's modulated RMSNorm) has no weight; build it "
            f"with elementwise_affine=False."
        )
    _validate.check_eps(cfg.eps, fn)
    _validate.check_module_options(cfg, fn)


AdaLNScaleConfig = make_config(
    "AdaLNScaleConfig",
    (FEATURES, EPS.but(doc="the norm's eps (1e-5)."),
     Option("elementwise_affine", "bool", True, "the norm's own ``scale`` (and ``bias`` for layer_norm)."),
     USE_BIAS.but(doc="the Dense biases and the LayerNorm bias (diffusers' ``bias``)."),
     Option("norm_type", "str", "layer_norm", "``\"layer_norm\"``, ``\"rms_norm\"`` (diffusers' RMSNorm) or "
            "``\"fp32_rms_norm\"`` (Mochi: float32 norm and modulation, one rounding)."),
     Option("out_features", "int | None", None, "with a size, a Dense ``linear_2`` (``features -> "
            "out_features``) after the modulation (Lumina's ``out_dim``)."),
     *COMPUTE, *ADAPTIVE_DISTRIBUTED,
     SCALE_INIT.but(doc="the norm's ``scale`` initializer (with ``elementwise_affine``); ``None``: ones."),
     BIAS_INIT.but(doc="the norm's ``bias`` initializer; ``None``: zeros."),
     *_dense_inits("linear", "torch ``nn.Linear``'s")),
    _check_scale,
)


def scale_specs(cfg: Any, cond_features: int) -> dict[str, Any]:
    def lin(n_in: int, n_out: int) -> dict[str, Any]:
        return dense_specs(n_in, n_out, use_bias=cfg.use_bias, kernel_init=cfg.linear_kernel_init,
                           bias_init=cfg.linear_bias_init)

    specs: dict[str, Any] = {"linear_1": lin(cond_features, cfg.features)}
    specs.update(M._norm_params_specs(cfg, cfg.features, cfg.norm_type, ln_bias=cfg.use_bias))
    if cfg.out_features is not None:
        specs["linear_2"] = lin(cfg.features, cfg.out_features)
    return specs


def apply_scale(params: Params, x: Array, cond: Array, cfg: Any) -> tuple[Array, Stats]:
    """``norm(x) * (1 + linear_1(SiLU(cond)))``, then ``linear_2``."""
    fn = "jln AdaLNScale"
    _validate.check_floating(x, fn)
    _validate.check_floating(cond, fn, "cond")
    dt = compute_dtype(cfg.dtype, x)  # diffusers casts SiLU(cond) to x's dtype
    xi = _cast_in(x, cfg.dtype)
    h = dense(params["linear_1"], silu(cond).astype(dt), dt, fn, "cond")
    y, _ = modulated_norm(xi, h, cfg, params.get("norm", {}), order="scale_only", norm_type=cfg.norm_type)
    if "linear_2" in params:
        y = dense(params["linear_2"], y, y.dtype, fn, "the modulated x")
    y = _cast_out(y, cfg.dtype)
    return y, _record(cfg.monitor, xi, y, -1, fn)


ADA_LN_SCALE = Kind(
    "AdaLNScale", AdaLNScaleConfig, scale_specs, apply_scale, ("x", "cond"),
    doc="Scale-only adaptive norm (diffusers ``LuminaLayerNormContinuous``, ``MochiLayerNormContinuous``).\n\n"
        "``scale = linear_1(SiLU(cond))`` (in ``x``'s dtype); ``norm(x) * (1 + scale)``, then the optional "
        "``linear_2``. ``norm`` is a LayerNorm (:func:`jln.adaptive_layer_norm`) or diffusers' RMSNorm "
        "(:func:`jln.adaptive_rms_norm`, ``fp32_rms_norm``: Mochi's float32 modulation).",
    returns="(``__call__(x, cond)``): array like ``x`` (last axis ``out_features`` with ``linear_2``).",
    raises="TypeError, ValueError: non-floating inputs, mismatched sizes, an unknown ``norm_type``, "
           "``fp32_rms_norm`` with ``elementwise_affine``.",
    examples=(_LINEN + "  >>> m = jnn.AdaLNScale(features=8, out_features=3)\n  >>> x, c = jnp.ones((2, 5, 8)), "
              "jnp.ones((2, 4))\n  >>> m.apply(m.init(jax.random.key(0), x, c), x, c).shape\n  (2, 5, 3)",
              _NNX + "  >>> jnnx.AdaLNScale(4, 8, rngs=nnx.Rngs(0))(jnp.ones((2, 5, 8)), "
              "jnp.ones((2, 4))).shape\n  (2, 5, 8)"),
    rngs_doc="``nnx.Rngs`` for the Dense kernel init.",
    shapes=(Shape("cond_features", "int", "size of ``cond``'s last axis.", 1,
                  lambda v, fn: _validate.check_positive(v, "cond_features", fn), M._infer_last),),
    positional=1,
)

# --------------------------------------------------------------------------- GlobalResponseNorm

_GRN_SPATIAL = Option("spatial_axes", "Any", (1, 2), "the axes the response norm ``||x||_2`` runs over "
                      "(torch's ``dim=(1, 2)`` for ``[N, H, W, C]``); channels are the last axis.")


def _check_grn(cfg: Any) -> None:
    fn = "jln GlobalResponseNorm"
    if isinstance(cfg.spatial_axes, list):
        object.__setattr__(cfg, "spatial_axes", tuple(cfg.spatial_axes))
    _validate.check_eps(cfg.eps, fn)
    _validate.check_inits(cfg, fn, ("gamma_init", "beta_init"))
    _validate.check_module_options(cfg, fn)


GlobalResponseNormConfig = make_config(
    "GlobalResponseNormConfig",
    (_GRN_SPATIAL, EPS.but(default=1e-6, doc="added to the channel mean of the response norm (1e-6)."),
     *COMPUTE,
     Option("gamma_init", "Any", None, "initializer of ``gamma``; ``None``: zeros (the identity)."),
     Option("beta_init", "Any", None, "initializer of ``beta``; ``None``: zeros.")),
    _check_grn,
)


def grn_specs(cfg: Any, num_features: int) -> dict[str, Any]:
    return {"gamma": M.ParamSpec((num_features,), cfg.gamma_init or zeros),
            "beta": M.ParamSpec((num_features,), cfg.beta_init or zeros)}


def apply_grn(params: Params, x: Array, cfg: Any) -> tuple[Array, Stats]:
    fn = "jln GlobalResponseNorm"
    xi = _cast_in(x, cfg.dtype)
    y = global_response_norm(xi, params["gamma"], params["beta"], spatial_axes=cfg.spatial_axes, eps=cfg.eps)
    y = _cast_out(y, cfg.dtype)
    return y, _record(cfg.monitor, xi, y, cfg.spatial_axes, fn)


def _check_channels(cfg: Any, x: Array, n: int, fn: str) -> None:
    _validate.check_floating(x, fn)
    if x.ndim == 0 or x.shape[-1] != n:
        raise ValueError(
            f"{fn}: the module was built for {n} channels (x's last axis); received "
            f"x.shape={tuple(x.shape)}."
        )


GLOBAL_RESPONSE_NORM = Kind(
    "GlobalResponseNorm", GlobalResponseNormConfig, grn_specs, apply_grn, ("x",),
    doc="Global response normalization (ConvNeXt-V2; diffusers ``GlobalResponseNorm``), channels last.\n\n"
        "``G = ||x||_2`` over ``spatial_axes``; ``y = gamma * (x * G / (mean_c(G) + eps)) + beta + x`` "
        "with torch's rounding (:func:`jln.global_response_norm`); ``gamma`` and ``beta`` start at 0.",
    returns="(``__call__(x)``): array like ``x``; dtype ``x.dtype`` promoted with the parameters' (or "
            "``dtype``).",
    raises="TypeError, ValueError: as :func:`jln.global_response_norm` (NNX: also an ``x`` whose last "
           "axis is not ``num_features``).",
    examples=(_LINEN + "  >>> x = jnp.ones((1, 4, 4, 8))\n  >>> m = jnn.GlobalResponseNorm()\n  >>> "
              "bool((m.apply(m.init(jax.random.key(0), x), x) == x).all())\n  True",
              _NNX + "  >>> jnnx.GlobalResponseNorm(8)(jnp.ones((1, 4, 4, 8))).shape\n  (1, 4, 4, 8)"),
    rngs_doc=_NORM_RNGS,
    shapes=(Shape("num_features", "int", "channels, ``x``'s last axis.", 0,
                  lambda v, fn: _validate.check_positive(v, "num_features", fn), M._infer_last, _check_channels),),
)

# --------------------------------------------------------------------------- LpNorm


def _check_lp(cfg: Any) -> None:
    fn = "jln LpNorm"
    _check_p(cfg.p, fn)
    if isinstance(cfg.axis, list):
        object.__setattr__(cfg, "axis", tuple(cfg.axis))
    _validate.check_eps(cfg.eps, fn)
    if cfg.dtype is not None and not jnp.issubdtype(jnp.dtype(cfg.dtype), jnp.floating):
        raise TypeError(f"{fn}: `dtype` must be a floating dtype or None; received {cfg.dtype!r}.")


LpNormConfig = make_config(
    "LpNormConfig",
    (Option("p", "float", 2.0, "the norm's exponent (positive, or ``float('inf')``)."),
     Option("axis", "Axis", -1, "axis or axes the norm runs over (torch's ``dim``)."),
     EPS.but(default=1e-12, doc="floor of the norm (torch's 1e-12)."), DTYPE, PARAM_DTYPE),
    _check_lp,
)


def lp_specs(cfg: Any) -> dict[str, Any]:
    return {}


def apply_lp(params: Params, x: Array, cfg: Any) -> tuple[Array, Stats]:
    y = lp_normalize(_cast_in(x, cfg.dtype), p=cfg.p, axis=cfg.axis, eps=cfg.eps)
    return _cast_out(y, cfg.dtype), None


LP_NORM = Kind(
    "LpNorm", LpNormConfig, lp_specs, apply_lp, ("x",),
    doc="Lp normalization, ``x / max(||x||_p, eps)`` (``torch.nn.functional.normalize``; diffusers "
        "``LpNorm``); no parameters. Calls :func:`jln.lp_normalize`.",
    returns="(``__call__(x)``): array like ``x`` (or ``dtype``).",
    raises="TypeError, ValueError: as :func:`jln.lp_normalize`.",
    examples=(_LINEN + "  >>> x = jnp.array([[3.0, 4.0]])\n  >>> jnn.LpNorm().apply({}, x)\n  "
              "Array([[0.6, 0.8]], dtype=float32)",
              _NNX + "  >>> jnnx.LpNorm()(jnp.array([[3.0, 4.0]]))\n  Array([[0.6, 0.8]], dtype=float32)"),
    rngs_doc="unused (no parameters).",
)

# --------------------------------------------------------------------------- AdaLNSingle

#: PixArt's sinusoidal projection width (diffusers ``Timesteps(num_channels=256)``)
TIME_CHANNELS = 256


def timestep_embedding(t: Array, channels: int = TIME_CHANNELS, *, max_period: float = 10000.0) -> Array:
    """diffusers' ``get_timestep_embedding(t, channels, flip_sin_to_cos=True,
    downscale_freq_shift=0)`` in float32: ``[cos(t * f), sin(t * f)]`` with
    ``f = exp(-log(max_period) * arange(channels // 2) / (channels // 2))``, each op rounded
    to float32 as torch evaluates it (sin and cos may differ from torch's in the last bit)."""
    f32 = jnp.float32
    half = channels // 2
    # the frequencies are constants: torch's float32 exponent, its exp correctly rounded (torch's
    # own exp agrees on 126 of PixArt's 128; XLA's float32 exp on 111)
    exponent = (np.float32(-math.log(max_period)) * np.arange(half, dtype=np.float32)) / np.float32(half)
    freqs = jnp.asarray(np.exp(exponent.astype(np.float64)).astype(np.float32))
    arg = t.astype(f32)[:, None] * freqs[None, :]
    emb = jnp.concatenate([jnp.cos(arg), jnp.sin(arg)], axis=-1)
    if channels % 2:
        emb = jnp.pad(emb, ((0, 0), (0, 1)))
    return emb


def _check_single(cfg: Any) -> None:
    fn = "jln AdaLNSingle"
    _validate.check_inits(cfg, fn, ("kernel_init", "bias_init"))
    _validate.set_positive(cfg, ("features", "num_chunks"), fn)
    if cfg.use_additional_conditions and cfg.features % 3:
        raise ValueError(
            f"{fn}: with use_additional_conditions the resolution (2 values) and aspect ratio embed "
            f"into features // 3 each and must add up to `features`, so `features` must be a multiple "
            f"of 3; received {cfg.features}."
        )
    _validate.check_module_options(cfg, fn)


AdaLNSingleConfig = make_config(
    "AdaLNSingleConfig",
    (FEATURES.but(doc="d, the embedding size (PixArt's ``embedding_dim``)."),
     Option("use_additional_conditions", "bool", False, "embed the resolution and aspect ratio too "
            "(PixArt-alpha at 1024 px)."),
     *COMPUTE, *M.INITS,
     Option("num_chunks", "int", 6, "modulation chunks ``linear`` produces (PixArt: 6; LTX-2's "
            "``num_mod_params``).")),
    _check_single,
)


def single_specs(cfg: Any) -> dict[str, Any]:
    d = cfg.features

    def mlp(n_out: int) -> dict[str, Any]:
        return {"linear_1": dense_specs(TIME_CHANNELS, n_out, kernel_init=cfg.kernel_init, bias_init=cfg.bias_init),
                "linear_2": dense_specs(n_out, n_out, kernel_init=cfg.kernel_init, bias_init=cfg.bias_init)}

    emb = {"timestep_embedder": mlp(d)}
    if cfg.use_additional_conditions:
        emb.update(resolution_embedder=mlp(d // 3), aspect_ratio_embedder=mlp(d // 3))
    return {"emb": emb, "linear": dense_specs(d, cfg.num_chunks * d, kernel_init=cfg.kernel_init, bias_init=cfg.bias_init)}


def _mlp(p: Params, v: Array, dt: Any, fn: str) -> Array:
    return dense(p["linear_2"], silu(dense(p["linear_1"], v, dt, fn)), dt, fn)


def apply_single(
    params: Params, timestep: Array, cfg: Any, resolution: Array | None = None, aspect_ratio: Array | None = None,
    hidden_dtype: Any = None,
) -> tuple[tuple[Array, Array], Stats]:
    """PixArt's adaLN-single: ``cond = MLP(sinusoid(t))`` (+ the size embeddings);
    returns ``(linear(SiLU(cond)), cond)``."""
    fn = "jln AdaLNSingle"
    t = jnp.asarray(timestep)
    if t.ndim != 1:
        raise ValueError(f"{fn}: `timestep` must be 1-D [B] (one per example); received shape {tuple(t.shape)}.")
    # diffusers casts the float32 sinusoid to `hidden_dtype` (None: kept float32)
    dt = jnp.dtype(hidden_dtype or cfg.dtype or jnp.float32)
    e = params["emb"]
    cond = _mlp(e["timestep_embedder"], timestep_embedding(t).astype(dt), dt, fn)
    if cfg.use_additional_conditions:
        if resolution is None or aspect_ratio is None:
            raise ValueError(f"{fn}: use_additional_conditions=True needs `resolution` [B, 2] and "
                             f"`aspect_ratio` [B, 1]; received resolution={resolution!r}, "
                             f"aspect_ratio={aspect_ratio!r}.")
        b = t.shape[0]
        sizes = [
            _mlp(e[name], timestep_embedding(jnp.asarray(v).reshape(-1)).astype(dt), dt, fn).reshape(b, -1)
            for name, v in (("resolution_embedder", resolution), ("aspect_ratio_embedder", aspect_ratio))
        ]
        extra = jnp.concatenate(sizes, axis=1)
        if extra.shape[1] != cond.shape[1]:
            raise ValueError(f"{fn}: `resolution` and `aspect_ratio` must hold 2 and 1 values per example; "
                             f"received shapes {jnp.shape(resolution)} and {jnp.shape(aspect_ratio)}.")
        cond = (cond + extra.astype(cond.dtype)).astype(cond.dtype)
    out = dense(params["linear"], silu(cond), cond.dtype, fn)
    return (out, cond), None


ADA_LN_SINGLE = Kind(
    "AdaLNSingle", AdaLNSingleConfig, single_specs, apply_single, ("timestep",),
    doc="PixArt's adaLN-single (diffusers ``AdaLayerNormSingle``): the one timestep embedding that "
        "all blocks' ``scale_shift_table`` modulations share; it normalizes nothing itself.\n\n"
        "``cond = linear_2(SiLU(linear_1(sinusoid(t))))`` (the sinusoid of 256 channels, cos then sin, "
        "in float32, cast to ``hidden_dtype``), plus the resolution and aspect-ratio embeddings with "
        "``use_additional_conditions``; returns ``(linear(SiLU(cond)), cond)``, the ``[B, 6d]`` "
        "modulation and the embedded timestep.",
    returns="(``__call__(timestep, resolution=None, aspect_ratio=None, hidden_dtype=None)``, torch's "
            "arguments): ``([B, num_chunks * features], [B, features])`` in ``hidden_dtype`` (default ``dtype``, "
            "else float32).",
    raises="ValueError: a ``timestep`` that is not 1-D, missing or misshapen size conditions, "
           "``features`` not a multiple of 3 with ``use_additional_conditions``.",
    examples=(_LINEN + "  >>> m = jnn.AdaLNSingle(features=8)\n  >>> t = jnp.array([1.0, 500.0])\n  >>> "
              "[o.shape for o in m.apply(m.init(jax.random.key(0), t), t)]\n  [(2, 48), (2, 8)]",
              _NNX + "  >>> m = jnnx.AdaLNSingle(8, rngs=nnx.Rngs(0))\n  >>> [o.shape for o in "
              "m(jnp.array([1.0, 500.0]))]\n  [(2, 48), (2, 8)]"),
    rngs_doc="``nnx.Rngs`` for the Dense kernel init.",
    call_options=(("resolution", None), ("aspect_ratio", None), ("hidden_dtype", None)), positional=1,
)

KINDS = (ADA_LN_ZERO_JOINT, ADA_LN_SCALE, GLOBAL_RESPONSE_NORM, LP_NORM, ADA_LN_SINGLE)

__all__ = ["ADA_LN_SCALE", "ADA_LN_SINGLE", "ADA_LN_ZERO_JOINT", "GLOBAL_RESPONSE_NORM", "KINDS", "LP_NORM"]
