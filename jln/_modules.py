"""The math of every Flax module, written once for :mod:`jln.linen` and :mod:`jln.nnx`.

Each module kind has three pieces here:

* a frozen config dataclass (the module's options, validated once in ``__post_init__``),
* a ``*_specs`` function giving the parameter tree: names, shapes and initializers,
* an ``apply_*`` pure function ``(params, inputs, cfg) -> (outputs, stats)`` that calls
  the :mod:`jln` core functions. ``stats`` is the monitor record (``None`` unless
  ``cfg.monitor``).

The linen and nnx classes only create the parameters from the spec and call ``apply_*``, so
the two front-ends cannot drift. Norm math is only ever ``jln.layer_norm``,
``jln.rms_norm``, ``jln.adaptive_layer_norm`` and ``jln.modulate``; attention lives once in
:func:`mha`.

dtype policy (both front-ends): ``dtype=None`` keeps the core functions' rule for the norms
(torch: output in the input dtype; the named RMS conventions as in ``jln.rms_norm``) and
runs Dense/attention layers in the dtype of the module's main input ``x`` (parameters are
cast to it at use, as torch autocast does). ``dtype=d`` casts ``x`` (and conditions) to
``d``, runs everything in ``d`` (norm statistics stay float32) and returns ``d``.
Parameters are stored in ``param_dtype``.
"""

from __future__ import annotations

import dataclasses
import math
import operator
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jln import _checks, _monitor, _platform, _stats
from jln._adaptive import adaptive_layer_norm, modulate, resolve_order, split_condition
from jln._contract.rms_norm import resolve_convention
from jln._layer_norm import layer_norm
from jln._rms_norm import rms_norm

Array = jax.Array
Params = Mapping[str, Any]
Stats = dict[str, Any] | None

# --------------------------------------------------------------------------- param specs


@dataclasses.dataclass(frozen=True)
class ParamSpec:
    """One parameter: its shape and initializer ``init(key, shape, dtype) -> Array``."""

    shape: tuple[int, ...]
    init: Callable[..., Array]


ones = jax.nn.initializers.ones
zeros = jax.nn.initializers.zeros
#: torch ``nn.Linear``'s default kernel init (kaiming_uniform with a=sqrt(5)),
#: U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
dense_kernel_init = jax.nn.initializers.variance_scaling(1.0 / 3.0, "fan_in", "uniform")
#: xavier_uniform over torch's packed ``[3d, d]`` q/k/v weight (``nn.MultiheadAttention``'s
#: in_proj, timm's qkv Linear in DiT), on one ``[d, d]`` block of it:
#: U(+-sqrt(6 / (d + 3d))) = U(+-sqrt(3 * 0.5 / d)).
qkv_kernel_init = jax.nn.initializers.variance_scaling(0.5, "fan_avg", "uniform")
#: xavier_uniform (DiT's Linear layers).
xavier_kernel_init = jax.nn.initializers.glorot_uniform()


def torch_bias_init(fan_in: int) -> Callable[..., Array]:
    """torch ``nn.Linear``'s default bias init, U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
    bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0

    def init(key: Array, shape: Any, dtype: Any = jnp.float32) -> Array:
        return jax.random.uniform(key, shape, jnp.float32, -bound, bound).astype(dtype)

    return init


def dense_specs(
    n_in: int, n_out: int, *, use_bias: bool = True, zero: bool = False, kernel_init: Any = None, bias_init: Any = None,
) -> dict[str, ParamSpec]:
    """``{"kernel": [n_in, n_out], "bias": [n_out]}``, initialised as torch's ``nn.Linear`` unless
    ``kernel_init``/``bias_init`` say otherwise; ``zero`` initialises both to 0 (adaLN-Zero)."""
    kernel = zeros if zero else dense_kernel_init if kernel_init is None else kernel_init
    specs = {"kernel": ParamSpec((n_in, n_out), kernel)}
    if use_bias:
        specs["bias"] = ParamSpec((n_out,), zeros if zero else torch_bias_init(n_in) if bias_init is None else bias_init)
    return specs


def _positive_int(value: Any) -> int | None:
    """``value`` as a Python int if it is a positive integer of any kind (``int``, a NumPy
    integer: anything ``operator.index`` takes, but not a bool), else None."""
    if isinstance(value, (bool, np.bool_)):
        return None
    try:
        v = operator.index(value)
    except TypeError:
        return None
    return v if v > 0 else None


def feature_shape(num_features: Any, fn: str) -> tuple[int, ...]:
    """``num_features`` as a shape tuple of Python ints (an integer means one normalized axis)."""
    one = _positive_int(num_features)
    try:
        sizes = (one,) if one is not None else tuple(_positive_int(n) for n in num_features)
    except TypeError:
        sizes = ()
    if not sizes or any(n is None for n in sizes):
        raise ValueError(
            f"{fn}: `num_features` must be a positive int or a tuple of positive ints (the "
            f"shape of x at the normalized axes); received {num_features!r}."
        )
    return tuple(int(n) for n in sizes if n is not None)


def check_num_features(x: Any, axis: Any, num_features: tuple[int, ...], fn: str) -> None:
    """``ValueError`` unless ``x`` has the module's ``num_features`` at the normalized axes (an
    NNX norm declares them; without parameters nothing else would notice a wrong width)."""
    _checks.check_floating(x, fn)
    have = _checks.feature_shape(x.shape, _checks.normalize_axes(axis, x.ndim, fn))
    if have != tuple(num_features):
        raise ValueError(
            f"{fn}: the module was built for num_features={tuple(num_features)} at axis={axis!r}; "
            f"received x.shape={tuple(x.shape)}, which has {have} there. Build it with "
            f"num_features={have if len(have) > 1 else have[0]}, or pass x with that shape."
        )


def check_positive(value: Any, name: str, fn: str) -> int:
    """``value`` as a Python int; ``ValueError`` unless it is a positive integer (NumPy's too)."""
    v = _positive_int(value)
    if v is None:
        raise ValueError(f"{fn}: `{name}` must be a positive int; received {value!r}.")
    return v


def set_positive(cfg: Any, names: tuple[str, ...], fn: str) -> None:
    """Check each named field of a frozen config with :func:`check_positive` and store the
    Python int."""
    for name in names:
        object.__setattr__(cfg, name, check_positive(getattr(cfg, name), name, fn))


# --------------------------------------------------------------------------- helpers


def compute_dtype(cfg_dtype: Any, x: Array) -> jnp.dtype:
    """The dtype Dense/attention layers run in: ``dtype`` if given, else ``x.dtype``."""
    return jnp.dtype(x.dtype if cfg_dtype is None else cfg_dtype)


def dense(p: Params, x: Array, dtype: Any, fn: str = "jln Dense", name: str = "x") -> Array:
    """``x @ kernel + bias`` in ``dtype`` (torch ``nn.Linear`` with ``weight = kernel.T``)."""
    _checks.check_floating(x, fn, name)
    n_in = p["kernel"].shape[0]
    if x.ndim == 0 or x.shape[-1] != n_in:
        raise ValueError(
            f"{fn}: the last axis of `{name}` must have {n_in} features (the layer's kernel is "
            f"{tuple(p['kernel'].shape)}); received {name}.shape={tuple(x.shape)}."
        )
    # accumulate in float32 and add the bias before the one rounding to `dtype`, as torch's
    # addmm does: rounding the product first disagrees with torch on ~1/4 of bf16 elements
    acc = _stats.stats_dtype(dtype)
    y = jnp.matmul(x.astype(dtype), p["kernel"].astype(dtype), preferred_element_type=acc)
    if "bias" in p:
        b = p["bias"].astype(dtype).astype(acc)
        y = y + b.reshape((1,) * (y.ndim - 1) + b.shape)  # explicit rank: strict-rank safe
    return y.astype(dtype)


def silu(v: Array) -> Array:
    """SiLU evaluated in the statistics dtype and rounded once, as torch's fused kernel does
    (``jax.nn.silu`` on bfloat16 rounds twice and disagrees with torch on ~38% of elements)."""
    return jax.nn.silu(v.astype(_stats.stats_dtype(v.dtype))).astype(v.dtype)


def _cast_in(x: Array, dtype: Any) -> Array:
    return x if dtype is None else x.astype(dtype)


def _cast_out(y: Array, dtype: Any) -> Array:
    return y if dtype is None else y.astype(dtype)


def _record(monitor: bool, x: Array, y: Array, axis: Any, fn: str) -> Stats:
    if not monitor:
        return None
    return _monitor.row_stats(x, y, _checks.normalize_axes(axis, x.ndim, fn))


def check_inits(cfg: Any, fn: str, names: tuple[str, ...] = ("scale_init", "bias_init")) -> None:
    """Raise ``TypeError`` unless each of ``names`` (``cfg.scale_init`` and ``cfg.bias_init``
    by default) is None or an initializer ``init(key, shape, dtype)``."""
    for name in names:
        init = getattr(cfg, name)
        if init is not None and not callable(init):
            raise TypeError(
                f"{fn}: `{name}` must be an initializer called as init(key, shape, dtype) (e.g. "
                f"jax.nn.initializers.ones, or one wrapped by flax's with_partitioning for a "
                f"sharded model) or None for the default; received {init!r}."
            )


def _param(features: tuple[int, ...], init: Any, default: Callable[..., Array]) -> ParamSpec:
    return ParamSpec(features, default if init is None else init)


def _frozen(v: Any) -> Any:
    """Lists as tuples, all the way down (a config is hashable: an nnx GraphDef holds it)."""
    return tuple(_frozen(e) for e in v) if isinstance(v, (list, tuple)) else v


def _check_common(cfg: Any, fn: str) -> None:
    for name in ("axis", "axis_index_groups", "order"):
        if isinstance(getattr(cfg, name, None), list):
            object.__setattr__(cfg, name, _frozen(getattr(cfg, name)))
    _checks.check_choice(cfg.impl, "impl", _platform.IMPLS, fn)
    if cfg.dtype is not None:
        dt = jnp.dtype(cfg.dtype)
        if not jnp.issubdtype(dt, jnp.floating):
            raise TypeError(f"{fn}: `dtype` must be a floating dtype or None; received {cfg.dtype!r}.")


def distributed(cfg: Any) -> dict[str, Any]:
    """The ``axis_name``/``axis_index_groups`` options of a norm config, for the core call."""
    return dict(axis_name=cfg.axis_name, axis_index_groups=cfg.axis_index_groups)


# --------------------------------------------------------------------------- LayerNorm


@dataclasses.dataclass(frozen=True)
class LayerNormConfig:
    eps: float = 1e-5
    axis: Any = -1
    use_scale: bool = True
    use_bias: bool = True
    dtype: Any = None
    impl: str = "auto"
    monitor: bool = False
    axis_name: Any = None  # distributed: mesh axis splitting the normalized axes
    axis_index_groups: Any = None
    scale_init: Any = None  # None: ones
    bias_init: Any = None  # None: zeros

    def __post_init__(self) -> None:
        _checks.check_eps(self.eps, "jln LayerNorm")
        _check_common(self, "jln LayerNorm")
        check_inits(self, "jln LayerNorm")


def layer_norm_specs(cfg: LayerNormConfig, features: tuple[int, ...]) -> dict[str, ParamSpec]:
    specs = {}
    if cfg.use_scale:
        specs["scale"] = _param(features, cfg.scale_init, ones)
    if cfg.use_bias:
        specs["bias"] = _param(features, cfg.bias_init, zeros)
    return specs


def apply_layer_norm(params: Params, x: Array, cfg: LayerNormConfig) -> tuple[Array, Stats]:
    """``jln.layer_norm(x, scale, bias)`` with the module's dtype rule and monitor."""
    xi = _cast_in(x, cfg.dtype)
    y = layer_norm(
        xi, params.get("scale"), params.get("bias"), axis=cfg.axis, eps=cfg.eps, impl=cfg.impl,
        **distributed(cfg),
    )
    y = _cast_out(y, cfg.dtype)
    return y, _record(cfg.monitor, xi, y, cfg.axis, "jln LayerNorm")


# --------------------------------------------------------------------------- RMSNorm


@dataclasses.dataclass(frozen=True)
class RMSNormConfig:
    eps: float | None = None
    convention: str = "torch"
    axis: Any = -1
    use_scale: bool = True
    use_bias: bool = False
    dtype: Any = None
    impl: str = "auto"
    monitor: bool = False
    axis_name: Any = None  # distributed: mesh axis splitting the normalized axes
    axis_index_groups: Any = None
    scale_init: Any = None  # None: ones (zeros for gemma, whose factor is 1 + scale)
    bias_init: Any = None  # None: zeros

    def __post_init__(self) -> None:
        fn = "jln RMSNorm"
        resolve_convention(self.convention, fn)
        check_inits(self, fn)
        if self.eps is not None:
            _checks.check_eps(self.eps, fn)
        if self.use_bias and (self.canonical != "diffusers" or not self.use_scale):
            raise ValueError(
                f"{fn}: use_bias=True is only defined for convention='diffusers' with "
                f"use_scale=True (diffusers' RMSNorm with bias); received "
                f"convention={self.convention!r}, use_scale={self.use_scale}."
            )
        _check_common(self, fn)

    @property
    def canonical(self) -> str:
        """The convention's canonical name (``"qwen2"`` -> ``"llama"``)."""
        return resolve_convention(self.convention, "jln RMSNorm")


def rms_norm_specs(cfg: RMSNormConfig, features: tuple[int, ...]) -> dict[str, ParamSpec]:
    specs = {}
    if cfg.use_scale:
        # Gemma multiplies by (1 + scale), so its identity weight is 0.
        specs["scale"] = _param(features, cfg.scale_init, zeros if cfg.canonical == "gemma" else ones)
    if cfg.use_bias:
        specs["bias"] = _param(features, cfg.bias_init, zeros)
    return specs


def apply_rms_norm(params: Params, x: Array, cfg: RMSNormConfig) -> tuple[Array, Stats]:
    """``jln.rms_norm(x, scale, convention=...)`` with the module's dtype rule and monitor."""
    xi = _cast_in(x, cfg.dtype)
    y = rms_norm(
        xi, params.get("scale"), axis=cfg.axis, eps=cfg.eps, convention=cfg.convention,
        bias=params.get("bias"), impl=cfg.impl, **distributed(cfg),
    )
    y = _cast_out(y, cfg.dtype)
    return y, _record(cfg.monitor, xi, y, cfg.axis, "jln RMSNorm")


# --------------------------------------------------------------------------- adaptive norms


@dataclasses.dataclass(frozen=True)
class AdaptiveLayerNormConfig:
    eps: float = 1e-5
    order: Any = "seed"
    use_scale: bool = True
    use_bias: bool = True
    dtype: Any = None
    impl: str = "auto"
    monitor: bool = False
    axis_name: Any = None  # distributed: mesh axis splitting the feature axis
    axis_index_groups: Any = None
    scale_init: Any = None  # the norm's scale and bias; None: ones and zeros
    bias_init: Any = None
    proj_kernel_init: Any = None  # the Dense proj; None: torch's nn.Linear init
    proj_bias_init: Any = None

    def __post_init__(self) -> None:
        fn = "jln AdaptiveLayerNorm"
        check_inits(self, fn, ("scale_init", "bias_init", "proj_kernel_init", "proj_bias_init"))
        names = resolve_order(self.order, fn)
        if not {"shift", "scale"} <= set(names):
            raise ValueError(
                f"{fn}: `order` must name a 'shift' and a 'scale' chunk (e.g. 'seed', "
                f"'dit_final', 'continuous'); received {self.order!r} = {names}."
            )
        _checks.check_eps(self.eps, fn)
        _check_common(self, fn)


def adaptive_layer_norm_specs(cfg: AdaptiveLayerNormConfig, cond_features: int, features: int) -> dict[str, Any]:
    k = len(resolve_order(cfg.order, "jln AdaptiveLayerNorm"))
    return {
        "proj": dense_specs(cond_features, k * features, kernel_init=cfg.proj_kernel_init,
                            bias_init=cfg.proj_bias_init),
        "norm": layer_norm_specs(
            LayerNormConfig(use_scale=cfg.use_scale, use_bias=cfg.use_bias, scale_init=cfg.scale_init,
                            bias_init=cfg.bias_init), (features,)),
    }


def apply_adaptive_layer_norm(params: Params, x: Array, cond: Array, cfg: AdaptiveLayerNormConfig) -> tuple[Array, Stats]:
    """The seed's AdaptiveLN: ``LN(x) * (1 + gamma) + beta``, ``(gamma, beta) = proj(cond)``."""
    fn = "jln AdaptiveLayerNorm"
    _checks.check_floating(x, fn)
    dt = compute_dtype(cfg.dtype, x)
    xi = _cast_in(x, cfg.dtype)
    emb = dense(params["proj"], cond, dt, fn, "cond")
    norm = params["norm"]
    y, _ = adaptive_layer_norm(
        xi, emb, norm.get("scale"), norm.get("bias"), order=cfg.order, eps=cfg.eps, impl=cfg.impl,
        **distributed(cfg),
    )
    y = _cast_out(y, cfg.dtype)
    return y, _record(cfg.monitor, xi, y, -1, fn)


@dataclasses.dataclass(frozen=True)
class AdaLNZeroConfig:
    num_chunks: int = 6
    eps: float = 1e-6
    use_bias: bool = True
    dtype: Any = None
    impl: str = "auto"
    monitor: bool = False
    axis_name: Any = None  # distributed: mesh axis splitting the feature axis
    axis_index_groups: Any = None
    linear_kernel_init: Any = None  # the Dense linear; None: zeros (adaLN-Zero)
    linear_bias_init: Any = None

    def __post_init__(self) -> None:
        fn = "jln AdaLNZero"
        check_inits(self, fn, ("linear_kernel_init", "linear_bias_init"))
        if self.num_chunks not in (6, 3):
            raise ValueError(
                f"{fn}: `num_chunks` must be 6 (DiT / AdaLayerNormZero) or 3 "
                f"(AdaLayerNormZeroSingle); received {self.num_chunks!r}."
            )
        _checks.check_eps(self.eps, fn)
        _check_common(self, fn)


def ada_ln_zero_specs(cfg: AdaLNZeroConfig, cond_features: int, features: int) -> dict[str, Any]:
    kernel, bias = cfg.linear_kernel_init or zeros, cfg.linear_bias_init or zeros
    return {"linear": dense_specs(cond_features, cfg.num_chunks * features, use_bias=cfg.use_bias,
                                  kernel_init=kernel, bias_init=bias)}


def apply_ada_ln_zero(params: Params, x: Array, emb: Array, cfg: AdaLNZeroConfig) -> tuple[tuple[Array, ...], Stats]:
    """DiT's adaLN-Zero: ``chunks = linear(SiLU(emb))``; ``LN(x) * (1 + scale_msa) + shift_msa``."""
    fn = "jln AdaLNZero"
    _checks.check_floating(x, fn)
    _checks.check_floating(emb, fn, "emb")
    # diffusers runs the projection in the condition's dtype (its gates come back in it)
    dt = compute_dtype(cfg.dtype, emb)
    xi = _cast_in(x, cfg.dtype)
    h = dense(params["linear"], silu(emb).astype(dt), dt, fn, "emb")
    order = "dit" if cfg.num_chunks == 6 else "dit_single"
    y, ch = adaptive_layer_norm(xi, h, order=order, eps=cfg.eps, impl=cfg.impl, **distributed(cfg))
    y = _cast_out(y, cfg.dtype)
    stats = _record(cfg.monitor, xi, y, -1, fn)
    if cfg.num_chunks == 3:
        return (y, ch["gate_msa"]), stats
    return (y, ch["gate_msa"], ch["shift_mlp"], ch["scale_mlp"], ch["gate_mlp"]), stats


NORM_TYPES = ("layer_norm", "rms_norm")


@dataclasses.dataclass(frozen=True)
class AdaLNContinuousConfig:
    eps: float = 1e-5
    elementwise_affine: bool = True
    use_bias: bool = True
    norm_type: str = "layer_norm"
    dtype: Any = None
    impl: str = "auto"
    monitor: bool = False
    axis_name: Any = None  # distributed: mesh axis splitting the feature axis
    axis_index_groups: Any = None
    scale_init: Any = None  # the norm's scale and bias (elementwise_affine); None: ones and zeros
    bias_init: Any = None
    linear_kernel_init: Any = None  # the Dense linear; None: torch's nn.Linear init
    linear_bias_init: Any = None

    def __post_init__(self) -> None:
        fn = "jln AdaLNContinuous"
        check_inits(self, fn, ("scale_init", "bias_init", "linear_kernel_init", "linear_bias_init"))
        _checks.check_choice(self.norm_type, "norm_type", NORM_TYPES, fn)
        _checks.check_eps(self.eps, fn)
        _check_common(self, fn)


def ada_ln_continuous_specs(cfg: AdaLNContinuousConfig, cond_features: int, features: int) -> dict[str, Any]:
    specs: dict[str, Any] = {"linear": dense_specs(cond_features, 2 * features, use_bias=cfg.use_bias,
                                                   kernel_init=cfg.linear_kernel_init,
                                                   bias_init=cfg.linear_bias_init)}
    if cfg.elementwise_affine:
        # diffusers: `bias` switches the Linear's and the LayerNorm's bias; its RMSNorm has none
        ln_bias = cfg.use_bias and cfg.norm_type == "layer_norm"
        norm = LayerNormConfig(use_bias=ln_bias, scale_init=cfg.scale_init, bias_init=cfg.bias_init)
        specs["norm"] = layer_norm_specs(norm, (features,))
    return specs


def apply_ada_ln_continuous(params: Params, x: Array, cond: Array, cfg: AdaLNContinuousConfig) -> tuple[Array, Stats]:
    """SD3/Flux ``norm_out``: ``(scale, shift) = linear(SiLU(cond))``; ``norm(x) * (1 + scale) + shift``."""
    fn = "jln AdaLNContinuous"
    _checks.check_floating(x, fn)
    _checks.check_floating(cond, fn, "cond")
    dt = compute_dtype(cfg.dtype, x)
    xi = _cast_in(x, cfg.dtype)
    h = dense(params["linear"], silu(cond).astype(dt), dt, fn, "cond")
    norm = params.get("norm", {})
    if cfg.norm_type == "layer_norm":
        y, _ = adaptive_layer_norm(
            xi, h, norm.get("scale"), norm.get("bias"), order="continuous", eps=cfg.eps, impl=cfg.impl,
            **distributed(cfg),
        )
    else:
        n = rms_norm(
            xi, norm.get("scale"), eps=cfg.eps, convention="diffusers", impl=cfg.impl, **distributed(cfg)
        )
        ch = split_condition(h, "continuous")
        y = modulate(n, ch["shift"], ch["scale"])
    y = _cast_out(y, cfg.dtype)
    return y, _record(cfg.monitor, xi, y, -1, fn)


# --------------------------------------------------------------------------- attention


def attention_specs(
    d_model: int, use_bias: bool = True, *, out_kernel: Any = None, kernel_init: Any = None, bias_init: Any = None,
) -> dict[str, Any]:
    """q/k/v/out projections, initialised as torch's ``nn.MultiheadAttention``: q/k/v kernels
    xavier over the packed ``[3d, d]`` weight, ``out`` as its Linear (``out_kernel``, default
    torch's Linear init), every bias 0; ``kernel_init``/``bias_init`` replace them all."""
    zero_bias = zeros if bias_init is None else bias_init
    specs = {
        name: dense_specs(d_model, d_model, use_bias=use_bias, bias_init=zero_bias,
                          kernel_init=qkv_kernel_init if kernel_init is None else kernel_init)
        for name in ("query", "key", "value")
    }
    specs["out"] = dense_specs(d_model, d_model, use_bias=use_bias, bias_init=zero_bias,
                               kernel_init=out_kernel if kernel_init is None else kernel_init)
    return specs


def _check_mask_dtype(mask: Any, name: str, what: str, fn: str) -> None:
    dtype = getattr(mask, "dtype", None)
    if dtype is None or not (jnp.issubdtype(dtype, jnp.bool_) or jnp.issubdtype(dtype, jnp.floating)):
        raise TypeError(
            f"{fn}: `{name}` must be a bool array (True = {what}, as torch) or a float array "
            f"added to the attention scores; received {getattr(mask, 'dtype', type(mask).__name__)}."
        )


def check_mask(mask: Any, batch: int, length: int, fn: str, unbatched: bool = False) -> None:
    """``src_key_padding_mask``: ``[batch, seq]`` (``[seq]`` for an unbatched input)."""
    if mask is None:
        return
    _check_mask_dtype(mask, "src_key_padding_mask", "ignore that key", fn)
    want = (length,) if unbatched else (batch, length)
    if tuple(mask.shape) != want:
        layout = "[seq]" if unbatched else "[batch, seq]"
        raise ValueError(
            f"{fn}: `src_key_padding_mask` must have shape {layout} = {want} (whatever "
            f"batch_first says, as torch); received {tuple(mask.shape)}."
        )


def check_attn_mask(mask: Any, batch: int, length: int, num_heads: int, fn: str) -> None:
    """``src_mask``: ``[seq, seq]`` or ``[batch * num_heads, seq, seq]`` (torch's layouts)."""
    if mask is None:
        return
    _check_mask_dtype(mask, "src_mask", "that query may not attend to that key", fn)
    shape = tuple(mask.shape)
    if shape not in ((length, length), (batch * num_heads, length, length)):
        raise ValueError(
            f"{fn}: `src_mask` must have shape [seq, seq] = {(length, length)} or [batch * nhead, "
            f"seq, seq] = {(batch * num_heads, length, length)} (as torch); received {shape}."
        )


def causal_mask(length: int) -> Array:
    """``[seq, seq]``, True above the diagonal: each query sees itself and the keys before it
    (torch's ``Transformer.generate_square_subsequent_mask``, as a bool mask)."""
    return jnp.triu(jnp.ones((length, length), jnp.bool_), k=1)


def mha(
    p: Params,
    x: Array,
    *,
    num_heads: int,
    dtype: Any,
    key_padding_mask: Array | None = None,
    attn_mask: Array | None = None,
    dropout_fn: Callable[[Array], Array] | None = None,
) -> Array:
    """Multi-head self-attention on ``x [B, T, D]`` (torch ``nn.MultiheadAttention`` math).

    ``softmax(q k^T / sqrt(D / num_heads) + mask) v`` per head, projections in ``dtype``,
    scores, softmax and the weighted sum in float32 (float64 for float64), one rounding to
    ``dtype`` per head output. A bool ``key_padding_mask [B, T]`` masks keys where True, a bool
    ``attn_mask`` (``[T, T]`` or ``[B * num_heads, T, T]``) masks (query, key) pairs where True
    (torch's conventions), with the most negative float rather than ``-inf``: rows with some
    visible key match torch exactly; a fully masked row averages the values instead of
    torch's NaN. Float masks are added to the scores.
    """
    b, t, d = x.shape
    hd = d // num_heads
    sd = _stats.promote(dtype, jnp.float32)
    q, k, v = (dense(p[n], x, dtype).reshape(b, t, num_heads, hd) for n in ("query", "key", "value"))
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k, preferred_element_type=sd) * (1.0 / math.sqrt(hd))
    masks = []
    if key_padding_mask is not None:
        masks.append(key_padding_mask[:, None, None, :])
    if attn_mask is not None:
        masks.append(attn_mask.reshape((b, num_heads, t, t) if attn_mask.ndim == 3 else (1, 1, t, t)))
    for m in masks:
        if jnp.issubdtype(m.dtype, jnp.bool_):
            scores = jnp.where(m, jnp.finfo(sd).min, scores)
        else:
            scores = scores + m.astype(sd)
    # torch's CPU attention (scaled_dot_product_attention, flash kernel) keeps the
    # probabilities and the weighted sum in float32 and rounds the head output once
    w = jax.nn.softmax(scores, axis=-1)
    if dropout_fn is not None:
        w = dropout_fn(w)
    o = jnp.einsum("bhqk,bkhd->bqhd", w, v.astype(sd)).astype(dtype).reshape(b, t, d)
    return dense(p["out"], o, dtype)


# --------------------------------------------------------------------------- encoder layer


ACTIVATIONS = ("relu", "gelu")


@dataclasses.dataclass(frozen=True)
class EncoderLayerConfig:
    d_model: int
    nhead: int
    dim_feedforward: int = 2048
    dropout: float = 0.1
    activation: str = "relu"
    layer_norm_eps: float = 1e-5
    batch_first: bool = False  # (torch's order: batch_first, norm_first, bias)
    norm_first: bool = False
    bias: bool = True  # the Linear layers' and the LayerNorms' biases
    dtype: Any = None
    impl: str = "auto"
    monitor: bool = False
    kernel_init: Any = None  # every Dense kernel; None: torch's (MultiheadAttention's, Linear's)
    bias_init: Any = None  # every Dense bias; None: torch's

    def __post_init__(self) -> None:
        fn = "jln TransformerEncoderLayer"
        check_inits(self, fn, ("kernel_init", "bias_init"))
        set_positive(self, ("d_model", "nhead", "dim_feedforward"), fn)
        if self.d_model % self.nhead:
            raise ValueError(
                f"{fn}: `d_model` must be divisible by `nhead`; received d_model={self.d_model}, "
                f"nhead={self.nhead}."
            )
        if not 0.0 <= float(self.dropout) < 1.0:
            raise ValueError(f"{fn}: `dropout` must be in [0, 1); received {self.dropout!r}.")
        _checks.check_choice(self.activation, "activation", ACTIVATIONS, fn)
        _checks.check_eps(self.layer_norm_eps, fn)
        _check_common(self, fn)


def encoder_layer_specs(cfg: EncoderLayerConfig) -> dict[str, Any]:
    d, f, bias = cfg.d_model, cfg.dim_feedforward, bool(cfg.bias)
    norm = layer_norm_specs(LayerNormConfig(use_bias=bias), (d,))
    inits = dict(kernel_init=cfg.kernel_init, bias_init=cfg.bias_init)
    return {
        "self_attn": attention_specs(d, bias, **inits),
        "linear1": dense_specs(d, f, use_bias=bias, **inits),
        "linear2": dense_specs(f, d, use_bias=bias, **inits),
        "norm1": dict(norm),
        "norm2": dict(norm),
    }


def _activation(name: str, h: Array) -> Array:
    return jax.nn.relu(h) if name == "relu" else jax.nn.gelu(h, approximate=False)


def apply_encoder_layer(
    params: Params,
    src: Array,
    cfg: EncoderLayerConfig,
    *,
    src_mask: Array | None = None,
    src_key_padding_mask: Array | None = None,
    is_causal: bool = False,
    dropout_fn: Callable[[Array], Array] | None = None,
) -> tuple[Array, Stats]:
    """``torch.nn.TransformerEncoderLayer.forward`` (Post-LN or Pre-LN).

    ``src`` is ``[T, B, D]`` (``[B, T, D]`` with ``batch_first``) or unbatched ``[T, D]``;
    ``src_mask`` and ``src_key_padding_mask`` as torch's; ``is_causal=True`` without a
    ``src_mask`` applies the causal mask (torch requires the mask with the hint; with one,
    the mask is used). ``dropout_fn`` (``None`` in eval mode) applies dropout at
    ``cfg.dropout`` where torch does: attention weights, after the activation, and on each
    branch before the residual.
    """
    fn = "jln TransformerEncoderLayer"
    _checks.check_floating(src, fn, "src")
    layout = "[batch, seq, d_model]" if cfg.batch_first else "[seq, batch, d_model]"
    if src.ndim not in (2, 3) or src.shape[-1] != cfg.d_model:
        raise ValueError(
            f"{fn}: `src` must have shape {layout} (or [seq, d_model] unbatched) with d_model="
            f"{cfg.d_model} (batch_first={cfg.batch_first}); received src.shape={tuple(src.shape)}."
        )
    if not isinstance(is_causal, bool):
        raise TypeError(f"{fn}: `is_causal` must be a bool; received {is_causal!r}.")
    unbatched = src.ndim == 2
    dt = compute_dtype(cfg.dtype, src)
    x = src.astype(dt)
    if unbatched:
        x = x[None]
    elif not cfg.batch_first:
        x = jnp.swapaxes(x, 0, 1)
    check_mask(src_key_padding_mask, x.shape[0], x.shape[1], fn, unbatched)
    if unbatched and src_key_padding_mask is not None:
        src_key_padding_mask = src_key_padding_mask[None]
    check_attn_mask(src_mask, x.shape[0], x.shape[1], cfg.nhead, fn)
    if src_mask is None and is_causal:
        src_mask = causal_mask(x.shape[1])
    drop = dropout_fn if dropout_fn is not None else (lambda h: h)
    stats: dict[str, Any] = {}

    def norm(name: str, h: Array) -> Array:
        y = layer_norm(h, params[name]["scale"], params[name].get("bias"), eps=cfg.layer_norm_eps, impl=cfg.impl)
        if cfg.monitor:
            stats[name] = _monitor.row_stats(h, y, (h.ndim - 1,))
        return y

    def sa(h: Array) -> Array:
        a = mha(
            params["self_attn"], h, num_heads=cfg.nhead, dtype=dt,
            key_padding_mask=src_key_padding_mask, attn_mask=src_mask, dropout_fn=dropout_fn,
        )
        return drop(a)

    def ff(h: Array) -> Array:
        h = drop(_activation(cfg.activation, dense(params["linear1"], h, dt)))
        return drop(dense(params["linear2"], h, dt))

    if cfg.norm_first:
        x = x + sa(norm("norm1", x))
        x = x + ff(norm("norm2", x))
    else:
        x = norm("norm1", x + sa(x))
        x = norm("norm2", x + ff(x))
    if unbatched:
        x = x[0]
    elif not cfg.batch_first:
        x = jnp.swapaxes(x, 0, 1)
    return x, (stats if cfg.monitor else None)


# --------------------------------------------------------------------------- DiT block


@dataclasses.dataclass(frozen=True)
class DiTBlockConfig:
    hidden_size: int
    num_heads: int
    mlp_ratio: float = 4.0
    dtype: Any = None
    impl: str = "auto"
    monitor: bool = False
    kernel_init: Any = None  # every Dense kernel but adaLN_modulation's; None: DiT's xavier
    bias_init: Any = None  # every Dense bias but adaLN_modulation's; None: zeros (DiT)

    eps = 1e-6  # DiT's LayerNorms: eps 1e-6, no affine

    def __post_init__(self) -> None:
        fn = "jln DiTBlock"
        check_inits(self, fn, ("kernel_init", "bias_init"))
        set_positive(self, ("hidden_size", "num_heads"), fn)
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"{fn}: `hidden_size` must be divisible by `num_heads`; received "
                f"hidden_size={self.hidden_size}, num_heads={self.num_heads}."
            )
        if isinstance(self.mlp_ratio, bool) or not isinstance(self.mlp_ratio, (int, float, np.integer, np.floating)):
            raise TypeError(f"{fn}: `mlp_ratio` must be a number; received {self.mlp_ratio!r}.")
        if self.mlp_hidden <= 0:
            raise ValueError(
                f"{fn}: the MLP's hidden size int(hidden_size * mlp_ratio) must be at least 1; "
                f"received hidden_size={self.hidden_size}, mlp_ratio={self.mlp_ratio!r}, which give "
                f"{self.mlp_hidden}. Use a larger mlp_ratio (DiT uses 4.0)."
            )
        _check_common(self, fn)

    @property
    def mlp_hidden(self) -> int:
        return int(self.hidden_size * self.mlp_ratio)


def dit_block_specs(cfg: DiTBlockConfig) -> dict[str, Any]:
    d, h = cfg.hidden_size, cfg.mlp_hidden
    return {
        "adaLN_modulation": dense_specs(d, 6 * d, zero=True),
        # DiT's initialize_weights: xavier_uniform kernels (timm's packed qkv Linear included),
        # zero biases; kernel_init/bias_init replace them
        "attn": attention_specs(d, out_kernel=xavier_kernel_init, kernel_init=cfg.kernel_init,
                                bias_init=cfg.bias_init),
        "mlp": {"fc1": dense_specs(d, h, kernel_init=cfg.kernel_init or xavier_kernel_init,
                                   bias_init=cfg.bias_init or zeros),
                "fc2": dense_specs(h, d, kernel_init=cfg.kernel_init or xavier_kernel_init,
                                   bias_init=cfg.bias_init or zeros)},
    }


def apply_dit_block(params: Params, x: Array, c: Array, cfg: DiTBlockConfig) -> tuple[Array, Stats]:
    """DiT block with adaLN-Zero; the identity at initialisation (zero gates)."""
    fn = "jln DiTBlock"
    _checks.check_floating(x, fn)
    _checks.check_floating(c, fn, "c")
    if x.ndim != 3 or x.shape[-1] != cfg.hidden_size:
        raise ValueError(
            f"{fn}: `x` must have shape [batch, tokens, hidden_size={cfg.hidden_size}]; "
            f"received x.shape={tuple(x.shape)}."
        )
    dt = compute_dtype(cfg.dtype, x)
    xi = x.astype(dt)
    emb = dense(params["adaLN_modulation"], silu(c).astype(dt), dt, fn, "c")
    stats: dict[str, Any] = {}

    def branch(h: Array, use: tuple[str, str], name: str) -> tuple[Array, dict[str, Array]]:
        y, ch = adaptive_layer_norm(h, emb, order="dit", use=use, eps=cfg.eps, impl=cfg.impl)
        if cfg.monitor:
            stats[name] = _monitor.row_stats(h, y, (h.ndim - 1,))
        return y, ch

    h, ch = branch(xi, ("shift_msa", "scale_msa"), "norm1")
    a = mha(params["attn"], h, num_heads=cfg.num_heads, dtype=dt)
    xi = xi + modulate(a, None, ch["gate_msa"], scale_offset=0.0)
    h, _ = branch(xi, ("shift_mlp", "scale_mlp"), "norm2")
    m = params["mlp"]
    h = dense(m["fc2"], jax.nn.gelu(dense(m["fc1"], h, dt), approximate=True), dt)
    xi = xi + modulate(h, None, ch["gate_mlp"], scale_offset=0.0)
    return _cast_out(xi, cfg.dtype), (stats if cfg.monitor else None)
