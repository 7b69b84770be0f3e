"""The ``GlobalResponseNorm`` (ConvNeXt-V2), ``LpNorm`` (``F.normalize``), ``ScaledLpNorm``
(Kandinsky 6) and ``QKL2Norm`` (ZAYA's query/key norm) module kinds: their options, parameters
and the calls of the lp_norm functions that both faces make."""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp

from jln import _modules as M
from jln import _stats, _validate
from jln._modules import (
    COMPUTE,
    DTYPE,
    EPS,
    LINEN_IMPORTS,
    NNX_IMPORTS,
    NORM_RNGS,
    PARAM_DTYPE,
    TORCH_NAMES,
    Kind,
    Option,
    Params,
    Shape,
    Stats,
    cast_in,
    cast_out,
    make_config,
    record,
    zeros,
)
from jln.families.lp_norm.function import (
    _check_p,
    global_response_norm,
    grn_body,
    l2_rescale,
    lp_normalize,
    rsqrt_normalize_float32,
    scaled_normalize,
)

Array = jax.Array


# --------------------------------------------------------------------------- GlobalResponseNorm

_GRN_SPATIAL = Option("spatial_axes", "Axis", (1, 2), "the axes the response norm ``||x||_2`` runs over "
                      "(torch's ``dim=(1, 2)`` for ``[N, H, W, C]``); channels are the last axis.")


_GRN_BROADCAST = Option("broadcast_rank", "int | None", None, "``None``: ``x``'s shape, its last axis the "
                        "channels. An int ``r``: broadcast as torch does with parameters kept as ``[1, ..., 1, C]`` "
                        "of rank ``r`` (diffusers' and ConvNeXt-V2's ``[1, 1, 1, C]``: 4): an ``x`` of lower rank "
                        "gains leading axes of 1 (a 3-D ``[N, L, C]``, whose ``spatial_axes`` (1, 2) then hold the "
                        "channels too, gives ``[1, N, L, C]``) and a channel axis of 1 broadcasts to ``C``.")


def _check_grn(cfg: Any) -> None:
    fn = "jln GlobalResponseNorm"
    if isinstance(cfg.spatial_axes, list):
        object.__setattr__(cfg, "spatial_axes", tuple(cfg.spatial_axes))
    if cfg.broadcast_rank is not None:
        object.__setattr__(cfg, "broadcast_rank", _validate.check_positive(cfg.broadcast_rank, "broadcast_rank", fn))
    _validate.check_eps(cfg.eps, fn)
    _validate.check_torch_names(cfg, fn)
    _validate.check_inits(cfg, fn, ("gamma_init", "beta_init"))
    _validate.check_module_options(cfg, fn)


GlobalResponseNormConfig = make_config(
    "GlobalResponseNormConfig",
    (_GRN_SPATIAL, EPS.but(default=1e-6, doc="added to the channel mean of the response norm (1e-6)."),
     *COMPUTE,
     Option("gamma_init", "Initializer | None", None, "initializer of ``gamma``; ``None``: zeros (the identity)."),
     Option("beta_init", "Initializer | None", None, "initializer of ``beta``; ``None``: zeros."),
     _GRN_BROADCAST, TORCH_NAMES),
    _check_grn,
)


def grn_specs(cfg: Any, num_features: int) -> dict[str, Any]:
    return {"gamma": M.ParamSpec((num_features,), cfg.gamma_init or zeros),
            "beta": M.ParamSpec((num_features,), cfg.beta_init or zeros)}


def apply_grn(params: Params, x: Array, cfg: Any) -> tuple[Array, Stats]:
    fn = "jln GlobalResponseNorm"
    xi = cast_in(x, cfg.dtype)
    if cfg.broadcast_rank is None:
        y = global_response_norm(xi, params["gamma"], params["beta"], spatial_axes=cfg.spatial_axes, eps=cfg.eps)
    else:
        y = _torch_broadcast(xi, params["gamma"], params["beta"], cfg, fn)
    y = cast_out(y, cfg.dtype)
    return y, record(cfg.monitor, xi, y, cfg.spatial_axes, fn)


def _torch_broadcast(x: Array, gamma: Array, beta: Array, cfg: Any, fn: str) -> Array:
    """torch's ``gamma * (x * N) + beta + x`` with ``[1, ..., 1, C]`` parameters of rank
    ``cfg.broadcast_rank``: the norm over ``spatial_axes`` of ``x`` as it is (they may hold its
    last axis), the result broadcast against the parameters."""
    _validate.check_floating(x, fn)
    axes = _validate.normalize_axes(cfg.spatial_axes, x.ndim, fn, "spatial_axes")
    _check_channels(cfg, x, int(gamma.shape[-1]), fn)
    lead = (1,) * (x.ndim - 1)  # explicit rank: strict-rank safe
    g, b = (jnp.asarray(v).reshape(lead + (-1,)) for v in (gamma, beta))
    y = grn_body(x, g, b, axes, _validate.check_eps(cfg.eps, fn))
    rank = max(y.ndim, cfg.broadcast_rank)
    return y.reshape((1,) * (rank - y.ndim) + tuple(y.shape))


def _check_channels(cfg: Any, x: Array, n: int, fn: str) -> None:
    _validate.check_floating(x, fn)
    broadcasts = cfg.broadcast_rank is not None and x.ndim > 0 and x.shape[-1] == 1
    if (x.ndim == 0 or x.shape[-1] != n) and not broadcasts:
        ones = " (or 1, which broadcasts as torch's)" if cfg.broadcast_rank is not None else ""
        raise ValueError(
            f"{fn}: the module was built for {n} channels (x's last axis{ones}); received "
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
    examples=(LINEN_IMPORTS + "  >>> x = jnp.ones((1, 4, 4, 8))\n  >>> m = jnn.GlobalResponseNorm()\n  >>> "
              "bool((m.apply(m.init(jax.random.key(0), x), x) == x).all())\n  True",
              NNX_IMPORTS + "  >>> jnnx.GlobalResponseNorm(8)(jnp.ones((1, 4, 4, 8))).shape\n  (1, 4, 4, 8)"),
    rngs_doc=NORM_RNGS,
    shapes=(Shape("num_features", "int", "channels, ``x``'s last axis.", 0,
                  lambda v, fn: _validate.check_positive(v, "num_features", fn), M.infer_last, _check_channels,
                  M.stored_rows("gamma")),),
)

# --------------------------------------------------------------------------- LpNorm


_EPS_MODES = ("floor", "root")


def _check_lp(cfg: Any) -> None:
    fn = "jln LpNorm"
    _check_p(cfg.p, fn)
    if cfg.eps_mode not in _EPS_MODES:
        raise ValueError(f"{fn}: `eps_mode` must be one of {_EPS_MODES}; received {cfg.eps_mode!r}.")
    if cfg.eps_mode == "root" and cfg.p != 2:
        raise ValueError(
            f"{fn}: eps_mode='root' (x * rsqrt(sum(x^2) + eps)) is an L2 norm; received p={cfg.p!r}. "
            f"Use p=2, or eps_mode='floor' for another p."
        )
    if isinstance(cfg.axis, list):
        object.__setattr__(cfg, "axis", tuple(cfg.axis))
    _validate.check_eps(cfg.eps, fn)
    if cfg.dtype is not None and not jnp.issubdtype(jnp.dtype(cfg.dtype), jnp.floating):
        raise TypeError(f"{fn}: `dtype` must be a floating dtype or None; received {cfg.dtype!r}.")


LpNormConfig = make_config(
    "LpNormConfig",
    (Option("p", "float", 2.0, "the norm's exponent (positive, or ``float('inf')``)."),
     Option("axis", "Axis", -1, "axis or axes the norm runs over (torch's ``dim``)."),
     EPS.but(default=1e-12, doc="floor of the norm (torch's 1e-12); with ``eps_mode='root'``, added to "
             "the sum of squares."),
     Option("eps_mode", M.literal(_EPS_MODES), "floor", "``\"floor\"``: ``x / max(||x||_p, eps)`` "
            "(``F.normalize``, :func:`jln.lp_normalize`). ``\"root\"`` (``p=2`` only): ``x * rsqrt(sum(x^2) + "
            "eps)`` in float32, rounded once to ``x``'s dtype (transformers' ``DoryL2Norm``, nGPT)."),
     DTYPE, PARAM_DTYPE),
    _check_lp,
)


def lp_specs(cfg: Any) -> dict[str, Any]:
    return {}


def apply_lp(params: Params, x: Array, cfg: Any) -> tuple[Array, Stats]:
    xi = cast_in(x, cfg.dtype)
    if cfg.eps_mode == "root":
        fn = "jln LpNorm"
        _validate.check_floating(xi, fn)
        y = rsqrt_normalize_float32(xi, _validate.normalize_axes(cfg.axis, xi.ndim, fn), cfg.eps)
    else:
        y = lp_normalize(xi, p=cfg.p, axis=cfg.axis, eps=cfg.eps)
    return cast_out(y, cfg.dtype), None


LP_NORM = Kind(
    "LpNorm", LpNormConfig, lp_specs, apply_lp, ("x",),
    doc="Lp normalization, ``x / max(||x||_p, eps)`` (``torch.nn.functional.normalize``; diffusers "
        "``LpNorm``); no parameters. Calls :func:`jln.lp_normalize`; ``eps_mode='root'`` computes "
        "``x * rsqrt(sum(x^2) + eps)`` instead (transformers' ``DoryL2Norm``).",
    returns="(``__call__(x)``): array like ``x`` (or ``dtype``).",
    raises="TypeError, ValueError: as :func:`jln.lp_normalize`.",
    examples=(LINEN_IMPORTS + "  >>> x = jnp.array([[3.0, 4.0]])\n  >>> jnn.LpNorm().apply({}, x)\n  "
              "Array([[0.6, 0.8]], dtype=float32)",
              NNX_IMPORTS + "  >>> jnnx.LpNorm()(jnp.array([[3.0, 4.0]]))\n  Array([[0.6, 0.8]], dtype=float32)"),
    rngs_doc="unused (no parameters).",
)

# --------------------------------------------------------------------------- ScaledLpNorm


def _check_scaled(cfg: Any) -> None:
    fn = "jln ScaledLpNorm"
    if not isinstance(cfg.axis, int) or isinstance(cfg.axis, bool):
        raise TypeError(f"{fn}: `axis` must be one int (the channel axis); received {cfg.axis!r}.")
    _validate.check_eps(cfg.eps, fn)
    m = cfg.multiplier
    if m is not None and (isinstance(m, bool) or not isinstance(m, (int, float))):
        raise TypeError(f"{fn}: `multiplier` must be a number or None (sqrt of the channels); received {m!r}.")
    _validate.check_inits(cfg, fn, ("scale_init",))
    if cfg.dtype is not None and not jnp.issubdtype(jnp.dtype(cfg.dtype), jnp.floating):
        raise TypeError(f"{fn}: `dtype` must be a floating dtype or None; received {cfg.dtype!r}.")


ScaledLpNormConfig = make_config(
    "ScaledLpNormConfig",
    (Option("axis", "int", -1, "the channel axis the norm runs over and ``scale`` lies along (Kandinsky 6: 1)."),
     EPS.but(default=1e-12, doc="floor of the norm (``F.normalize``'s 1e-12)."),
     Option("multiplier", "float | None", None, "the constant the normalized ``x`` is multiplied by, rounded "
            "to ``x``'s dtype; ``None``: ``sqrt(num_features)`` (Kandinsky 6's)."),
     Option("scale_init", "Initializer | None", None, "initializer of ``scale``; ``None``: ones."),
     DTYPE, PARAM_DTYPE),
    _check_scaled,
)


def scaled_specs(cfg: Any, num_features: int) -> dict[str, Any]:
    return {"scale": M.param_spec((num_features,), cfg.scale_init, M.ones)}


def _scaled_channels(cfg: Any, x: Array, name: str, fn: str) -> int:
    _validate.check_floating(x, fn, name)
    ax = _validate.normalize_axes(cfg.axis, x.ndim, fn)[0]
    return int(x.shape[ax])


def _check_scaled_channels(cfg: Any, x: Array, n: int, fn: str) -> None:
    if _scaled_channels(cfg, x, "x", fn) != n:
        raise ValueError(
            f"{fn}: the module was built for {n} channels at axis={cfg.axis}; received x.shape={tuple(x.shape)}."
        )


def apply_scaled(params: Params, x: Array, cfg: Any) -> tuple[Array, Stats]:
    fn = "jln ScaledLpNorm"
    xi = cast_in(x, cfg.dtype)
    scale = params["scale"]
    n = _scaled_channels(cfg, xi, "x", fn)
    if scale.shape != (n,):
        raise ValueError(
            f"{fn}: `scale` must have shape ({n},), the size of x's axis {cfg.axis}; received "
            f"{tuple(scale.shape)} for x.shape={tuple(xi.shape)}."
        )
    mult = math.sqrt(n) if cfg.multiplier is None else float(cfg.multiplier)
    axis = _validate.normalize_axes(cfg.axis, xi.ndim, fn)[0]
    y = scaled_normalize(xi, scale, axis, _validate.check_eps(cfg.eps, fn), mult)
    return cast_out(y, cfg.dtype), None


SCALED_LP_NORM = Kind(
    "ScaledLpNorm", ScaledLpNormConfig, scaled_specs, apply_scaled, ("x",),
    doc="L2 normalization over the channels, times a constant and a learned per-channel ``scale``: "
        "``F.normalize(x.float(), dim=axis).to(x.dtype) * multiplier * scale`` op by op with torch's "
        "rounding (diffusers' ``Kandinsky6VAERMSNorm`` and ``Kandinsky6SRLatentUpscalerRMSNorm``, "
        "``multiplier = sqrt(C)``). The norm is taken in float32 and rounded to ``x``'s dtype, the "
        "product with ``multiplier`` rounds to ``x``'s dtype, the product with ``scale`` to ``x``'s "
        "dtype promoted with ``scale``'s (as torch promotes a bfloat16 ``x`` with a float32 "
        "parameter).\n\ntorch's ``gamma`` of shape ``[C, 1, 1, 1]`` lies along axis 1 of a 5-D "
        "``[B, C, T, H, W]`` input, the layout those classes take; ``axis`` places ``scale`` at that "
        "axis of any input.",
    returns="(``__call__(x)``): array like ``x``; dtype ``x.dtype`` promoted with ``scale``'s (or ``dtype``).",
    raises="TypeError, ValueError: a non-floating ``x``, a bad ``axis``, a channel count other than "
           "``num_features``.",
    examples=(LINEN_IMPORTS + "  >>> x = jnp.array([[3.0, 4.0]])\n  >>> m = jnn.ScaledLpNorm(multiplier=1.0)\n"
              "  >>> m.apply(m.init(jax.random.key(0), x), x)\n  Array([[0.6, 0.8]], dtype=float32)",
              NNX_IMPORTS + "  >>> jnnx.ScaledLpNorm(2, multiplier=1.0)(jnp.array([[3.0, 4.0]]))\n"
              "  Array([[0.6, 0.8]], dtype=float32)"),
    rngs_doc=NORM_RNGS,
    shapes=(Shape("num_features", "int", "channels, the size of ``x`` at ``axis``.", 0,
                  lambda v, fn: _validate.check_positive(v, "num_features", fn), _scaled_channels,
                  _check_scaled_channels, M.stored_rows("scale")),),
)

# --------------------------------------------------------------------------- QKL2Norm


def _check_qk(cfg: Any) -> None:
    fn = "jln QKL2Norm"
    if not isinstance(cfg.head_axis, int) or isinstance(cfg.head_axis, bool):
        raise TypeError(f"{fn}: `head_axis` must be one int (key's heads axis); received {cfg.head_axis!r}.")
    if cfg.eps is not None:
        _validate.check_eps(cfg.eps, fn)
    m = cfg.multiplier
    if m is not None and (isinstance(m, bool) or not isinstance(m, (int, float))):
        raise TypeError(f"{fn}: `multiplier` must be a number or None (sqrt of head_dim); received {m!r}.")
    _validate.check_inits(cfg, fn, ("key_scale_init",))
    if cfg.dtype is not None and not jnp.issubdtype(jnp.dtype(cfg.dtype), jnp.floating):
        raise TypeError(f"{fn}: `dtype` must be a floating dtype or None; received {cfg.dtype!r}.")


QKL2NormConfig = make_config(
    "QKL2NormConfig",
    (Option("head_axis", "int", 2, "the axis of ``key`` that ``key_scale`` lies along (transformers' "
            "``[B, S, heads, head_dim]``: 2)."),
     Option("eps", "float | None", None, "floor of each L2 norm; ``None``: ``finfo(query.dtype).eps`` "
            "(ZAYA's), for both inputs."),
     Option("multiplier", "float | None", None, "the constant both normalized inputs are scaled to; "
            "``None``: ``sqrt(head_dim)``, ``query``'s last axis (ZAYA's ``head_dim_scale``)."),
     Option("key_scale_init", "Initializer | None", None, "initializer of ``key_scale``; ``None``: zeros "
            "(torch's ``temp``)."),
     DTYPE.but(doc="``None``: outputs in the inputs' dtypes (the key's promoted with ``key_scale``'s); "
               "else compute in and return this dtype."), PARAM_DTYPE),
    _check_qk,
)


def qk_specs(cfg: Any, num_heads: int) -> dict[str, Any]:
    return {"key_scale": M.param_spec((num_heads,), cfg.key_scale_init, zeros)}


def _key_heads(cfg: Any, key: Array, name: str, fn: str) -> int:
    _validate.check_floating(key, fn, name)
    return int(key.shape[_validate.normalize_axes(cfg.head_axis, key.ndim, fn, "head_axis")[0]])


def _check_key_heads(cfg: Any, key: Array, n: int, fn: str) -> None:
    if _key_heads(cfg, key, "key", fn) != n:
        raise ValueError(
            f"{fn}: the module was built for {n} key heads (key's axis {cfg.head_axis}); received "
            f"key.shape={tuple(key.shape)}. Pass keys with {n} heads at axis {cfg.head_axis}, or set "
            f"head_axis to where your layout keeps them."
        )


def apply_qk(params: Params, query: Array, key: Array, cfg: Any) -> tuple[tuple[Array, Array], Stats]:
    fn = "jln QKL2Norm"
    q, k = cast_in(query, cfg.dtype), cast_in(key, cfg.dtype)
    _validate.check_floating(q, fn, "query")
    if q.ndim == 0:
        raise ValueError(f"{fn}: `query` must have a head_dim (last) axis; received a scalar.")
    scale = params["key_scale"]
    n = _key_heads(cfg, k, "key", fn)
    if scale.shape != (n,):
        raise ValueError(
            f"{fn}: `key_scale` has shape {tuple(scale.shape)}; key.shape={tuple(k.shape)} needs ({n},), "
            f"one per head at axis {cfg.head_axis}. Pass keys whose axis {cfg.head_axis} matches "
            f"key_scale, or set head_axis to where your layout keeps the heads."
        )
    # torch takes one eps and one constant, from the query, for both inputs
    eps = float(jnp.finfo(q.dtype).eps) if cfg.eps is None else cfg.eps
    mult = math.sqrt(q.shape[-1]) if cfg.multiplier is None else float(cfg.multiplier)
    with jax.named_scope("jln.qk_l2_norm"):
        yq = l2_rescale(q, mult, eps).astype(q.dtype)
        yk = l2_rescale(k, mult, eps)
        out = _stats.promote(k.dtype, scale.dtype)
        shape = [1] * k.ndim
        shape[_validate.normalize_axes(cfg.head_axis, k.ndim, fn, "head_axis")[0]] = -1
        s = scale.reshape(shape).astype(_stats.stats_dtype(out))
        yk = _stats.round_to(yk.astype(s.dtype) * s, out).astype(out)
    return (cast_out(yq, cfg.dtype), cast_out(yk, cfg.dtype)), None


QK_L2_NORM = Kind(
    "QKL2Norm", QKL2NormConfig, qk_specs, apply_qk, ("query", "key"), output="tuple[jax.Array, jax.Array]",
    doc="Query/key L2 normalization with a learned per-key-head scale (transformers' ``ZayaQKNorm``).\n\n"
        "``query * (multiplier / max(||query||_2, eps))`` and ``key * (multiplier / max(||key||_2, eps)) * "
        "key_scale``, the norms over the last axis (head_dim), ``eps`` a floor outside the norm, "
        "``multiplier = sqrt(head_dim)``, ``eps = finfo(query.dtype).eps`` by default and ``key_scale`` "
        "(torch's ``temp``, zeros at init) along ``key``'s ``head_axis``. Each op rounds as torch "
        "evaluates it: the norm reduced in float32 and rounded to the input's dtype, the reciprocal of "
        "the floored norm, its product with ``multiplier``, the product with the input, and the "
        "product with ``key_scale`` in the key's dtype promoted with ``key_scale``'s.",
    returns="(``__call__(query, key)``): ``(query, key)`` normalized: the query like ``query``, the key "
            "like ``key`` with dtype ``key.dtype`` promoted with ``key_scale``'s (or ``dtype``).",
    raises="TypeError, ValueError: non-floating inputs, a bad ``head_axis``, a key whose heads are not "
           "``num_heads``.",
    examples=(LINEN_IMPORTS + "  >>> q, k = jnp.ones((1, 2, 4, 16)), jnp.ones((1, 2, 2, 16))\n"
              "  >>> m = jnn.QKL2Norm(key_scale_init=jax.nn.initializers.ones)\n"
              "  >>> yq, yk = m.apply(m.init(jax.random.key(0), q, k), q, k)\n"
              "  >>> float(yq[0, 0, 0, 0]), float(yk[0, 0, 0, 0])\n  (1.0, 1.0)",
              NNX_IMPORTS + "  >>> yq, yk = jnnx.QKL2Norm(2)(jnp.ones((1, 2, 4, 16)), jnp.ones((1, 2, 2, 16)))\n"
              "  >>> float(yq[0, 0, 0, 0]), float(yk[0, 0, 0, 0])\n  (1.0, 0.0)"),
    rngs_doc=NORM_RNGS,
    shapes=(Shape("num_heads", "int", "key heads, the size of ``key`` at ``head_axis`` (ZAYA's "
                  "``num_key_value_heads``).", 1,
                  lambda v, fn: _validate.check_positive(v, "num_heads", fn), _key_heads,
                  _check_key_heads, M.stored_rows("key_scale")),),
)
