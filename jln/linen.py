"""Flax linen modules over jln's core functions (same names and parameters as :mod:`jln.nnx`).

Every module holds parameters only; its math is the pure function of the same name in
``jln._modules``, shared with :mod:`jln.nnx`. Defaults follow torch (eps 1e-5, output in the
input dtype). ``dtype=None`` keeps the core functions' dtype rule; ``dtype=d`` computes in and
returns ``d``. ``monitor=True`` sows per-row input/output statistics (see
``jln._monitor.row_stats``) into the ``"intermediates"`` collection under ``"stats"``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from jln import _checks
from jln import _modules as M
from jln._checks import Axis

Array = jax.Array

__all__ = [
    "AdaLNContinuous",
    "AdaLNZero",
    "AdaptiveLayerNorm",
    "DiTBlock",
    "LayerNorm",
    "RMSNorm",
    "TransformerEncoderLayer",
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


def _cfg(module: nn.Module, cls: type) -> Any:
    return cls(**{f.name: getattr(module, f.name) for f in dataclasses.fields(cls)})


def _sow(module: nn.Module, stats: Any) -> None:
    if stats is not None:
        module.sow("intermediates", "stats", stats)


def _features(x: Any, axis: Axis, fn: str) -> tuple[int, ...]:
    _checks.check_floating(x, fn)
    return _checks.feature_shape(x.shape, _checks.normalize_axes(axis, x.ndim, fn))


class LayerNorm(nn.Module):
    r"""LayerNorm with torch's numbers: ``(x - E[x]) / sqrt(Var[x] + eps) * scale + bias``.

    Biased variance, eps inside the square root, statistics in float32 (float64 for float64
    input); the module calls :func:`jln.layer_norm`.

    Attributes:
      eps: added to the variance; torch's default 1e-5 (flax's LayerNorm uses 1e-6).
      axis: axis or axes to normalize over; parameters have the shape of ``x`` there.
      use_scale, use_bias: learnable ``scale`` (ones) and ``bias`` (zeros), torch's
        ``elementwise_affine`` / ``bias``.
      dtype: ``None``: output in ``x.dtype``; else compute in and return this dtype.
      param_dtype: dtype of the parameters (float32).
      impl: ``"auto"``, ``"xla"``, ``"native"`` or ``"pallas"``, as :func:`jln.layer_norm`.
      monitor: sow per-row statistics into ``"intermediates"``.
      axis_name: inside ``jax.shard_map``/``jax.pmap``, the mesh axis over which the
        normalized axis is split (tensor parallelism); parameters are then the local blocks.
        See :func:`jln.layer_norm`. The monitor's statistics stay per device.
      axis_index_groups: with ``axis_name``, the device groups that each hold one row's blocks
        (as ``jax.lax.psum``); see :func:`jln.layer_norm`.
      scale_init, bias_init: initializers ``init(key, shape, dtype)`` of ``scale`` and
        ``bias``, as flax's; ``None``: ones and zeros. Wrap one in
        ``flax.linen.with_logical_partitioning`` (or ``with_partitioning``) to annotate how a
        sharded model splits the parameter.

    Returns (``__call__(x)``): array of ``x.shape``, dtype ``x.dtype`` (or ``dtype``).

    Raises:
      TypeError, ValueError: as :func:`jln.layer_norm`; ``TypeError`` for an initializer that
      is not callable.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from jln import linen as jnn
      >>> x = jnp.arange(8.0).reshape(2, 4)
      >>> variables = jnn.LayerNorm().init(jax.random.key(0), x)
      >>> jnn.LayerNorm().apply(variables, x).shape
      (2, 4)
    """

    eps: float = 1e-5
    axis: Axis = -1
    use_scale: bool = True
    use_bias: bool = True
    dtype: Any = None
    param_dtype: Any = jnp.float32
    impl: str = "auto"
    monitor: bool = False
    axis_name: Any = None
    axis_index_groups: Any = None
    scale_init: Any = None
    bias_init: Any = None

    @nn.compact
    def __call__(self, x: Array) -> Array:
        cfg = _cfg(self, M.LayerNormConfig)
        features = _features(x, self.axis, "jln.linen.LayerNorm")
        params = _create(self, M.layer_norm_specs(cfg, features), self.param_dtype)
        y, stats = M.apply_layer_norm(params, x, cfg)
        _sow(self, stats)
        return y


class RMSNorm(nn.Module):
    r"""RMSNorm in torch's convention or a named model's: ``x * rsqrt(mean(x^2) + eps) * scale``.

    The exact cast order and eps default of each convention (``"torch"``, ``"llama"``,
    ``"gemma"``, ``"t5"``, ``"diffusers"``, ``"seed"``) are those of :func:`jln.rms_norm`.

    Attributes:
      eps: ``None`` takes the convention's default (torch: ``finfo(float32).eps``).
      convention: see :func:`jln.rms_norm`. ``"gemma"`` initialises ``scale`` to 0 (it
        multiplies by ``1 + scale``).
      axis: axis or axes to normalize over.
      use_scale: learnable ``scale``.
      use_bias: learnable ``bias`` (``convention="diffusers"`` only).
      dtype, param_dtype, impl, monitor, axis_name, axis_index_groups: as :class:`LayerNorm`.
        With ``dtype=None`` the output dtype is the convention's (``"llama"``: bf16 x with
        float32 scale gives float32).
      scale_init, bias_init: as :class:`LayerNorm`; ``None``: the convention's identity
        (``scale`` ones, zeros for ``"gemma"``; ``bias`` zeros).

    Returns (``__call__(x)``): array of ``x.shape``.

    Raises:
      TypeError, ValueError: as :func:`jln.rms_norm`; ``ValueError`` for ``use_bias`` outside
      the diffusers convention; ``TypeError`` for an initializer that is not callable.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from jln import linen as jnn
      >>> m = jnn.RMSNorm(convention="llama")
      >>> x = jnp.ones((2, 4))
      >>> m.apply(m.init(jax.random.key(0), x), x).dtype
      dtype('float32')
    """

    eps: float | None = None
    convention: str = "torch"
    axis: Axis = -1
    use_scale: bool = True
    use_bias: bool = False
    dtype: Any = None
    param_dtype: Any = jnp.float32
    impl: str = "auto"
    monitor: bool = False
    axis_name: Any = None
    axis_index_groups: Any = None
    scale_init: Any = None
    bias_init: Any = None

    @nn.compact
    def __call__(self, x: Array) -> Array:
        cfg = _cfg(self, M.RMSNormConfig)
        features = _features(x, self.axis, "jln.linen.RMSNorm")
        params = _create(self, M.rms_norm_specs(cfg, features), self.param_dtype)
        y, stats = M.apply_rms_norm(params, x, cfg)
        _sow(self, stats)
        return y


def _last(x: Any, fn: str, name: str) -> int:
    _checks.check_floating(x, fn, name)
    if x.ndim == 0:
        raise ValueError(f"{fn}: `{name}` must have a feature axis; received a scalar.")
    return int(x.shape[-1])


class AdaptiveLayerNorm(nn.Module):
    r"""The seed's AdaptiveLN: ``LN(x) * (1 + gamma) + beta`` with ``(gamma, beta) = proj(cond)``.

    ``proj`` is a Dense ``cond_features -> 2 * features`` (torch ``nn.Linear``); the
    LayerNorm has its own affine (``norm/scale``, ``norm/bias``). Calls
    :func:`jln.adaptive_layer_norm` (norm and modulation in one fused body).

    Attributes:
      features: d, the size of ``x``'s last axis.
      eps: LayerNorm eps (torch default 1e-5).
      order: chunk order of ``proj(cond)``; ``"seed"`` = (scale, shift) = (gamma, beta).
      use_scale, use_bias: the LayerNorm's own affine.
      dtype, param_dtype, impl, monitor: as :class:`LayerNorm`; the Dense runs in ``dtype``
        (default: ``x.dtype``).
      axis_name, axis_index_groups: tensor parallelism inside ``jax.shard_map``/``jax.pmap``
        with ``x``'s last axis split over ``axis_name``: ``features`` is then the local size
        d / n, the norm's statistics span the devices, and ``proj`` must produce each device's
        local block of every chunk, i.e. its kernel and bias hold, per device, columns
        ``[chunk_0 block_i, chunk_1 block_i, ...]``. :func:`jln.shard_chunks` puts a global
        ``[c, k*d]`` kernel (``[k*d]`` bias) in that order, after which ``P(None, axis)``
        (``P(axis)``) gives every device its blocks; ``cond`` is replicated over ``axis_name``.
      scale_init, bias_init: the LayerNorm's ``scale`` and ``bias`` initializers, as
        :class:`LayerNorm`'s.
      proj_kernel_init, proj_bias_init: ``proj``'s kernel and bias initializers; ``None``
        gives torch ``nn.Linear``'s (kernel and bias U(±1/√cond_features)).

    Returns (``__call__(x, cond)``): ``x [B, ..., d]`` modulated by ``cond [B, c]`` (broadcast
    over the token axes) or ``cond`` with ``x``'s leading shape; dtype ``x.dtype``.

    Raises:
      TypeError, ValueError: non-floating inputs, mismatched feature sizes, a bad ``order``,
      an initializer that is not callable.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from jln import linen as jnn
      >>> m = jnn.AdaptiveLayerNorm(features=8)
      >>> x, c = jnp.ones((2, 5, 8)), jnp.ones((2, 3))
      >>> m.apply(m.init(jax.random.key(0), x, c), x, c).shape
      (2, 5, 8)
    """

    features: int
    eps: float = 1e-5
    order: Any = "seed"
    use_scale: bool = True
    use_bias: bool = True
    dtype: Any = None
    param_dtype: Any = jnp.float32
    impl: str = "auto"
    monitor: bool = False
    axis_name: Any = None
    axis_index_groups: Any = None
    scale_init: Any = None
    bias_init: Any = None
    proj_kernel_init: Any = None
    proj_bias_init: Any = None

    @nn.compact
    def __call__(self, x: Array, cond: Array) -> Array:
        cfg = _cfg(self, M.AdaptiveLayerNormConfig)
        c = _last(cond, "jln.linen.AdaptiveLayerNorm", "cond")
        params = _create(self, M.adaptive_layer_norm_specs(cfg, c, self.features), self.param_dtype)
        y, stats = M.apply_adaptive_layer_norm(params, x, cond, cfg)
        _sow(self, stats)
        return y


class AdaLNZero(nn.Module):
    r"""DiT's adaLN-Zero (diffusers ``AdaLayerNormZero`` / ``AdaLayerNormZeroSingle``).

    ``chunks = linear(SiLU(emb))`` with ``linear`` zero-initialised (the block starts as the
    identity); ``x_mod = LN(x) * (1 + scale_msa) + shift_msa`` with a LayerNorm of eps 1e-6
    and no affine.

    Attributes:
      features: d, the size of ``x``'s last axis.
      num_chunks: 6 (DiT order: shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp,
        gate_mlp) or 3 (shift_msa, scale_msa, gate_msa).
      eps: LayerNorm eps (DiT: 1e-6).
      use_bias: Dense bias.
      dtype, param_dtype, impl, monitor, axis_name, axis_index_groups: as
        :class:`AdaptiveLayerNorm` (with ``axis_name``, lay out ``linear`` with
        :func:`jln.shard_chunks`; the returned gates are local blocks too).
      linear_kernel_init, linear_bias_init: ``linear``'s kernel and bias initializers;
        ``None`` gives zeros (adaLN-Zero).

    Returns (``__call__(x, emb)``): ``(x_mod, gate_msa, shift_mlp, scale_mlp, gate_mlp)`` for 6
    chunks, ``(x_mod, gate_msa)`` for 3; ``x_mod`` like ``x``, the others ``[B, d]``.

    Raises:
      TypeError, ValueError: non-floating inputs, mismatched sizes, ``num_chunks`` not 3 or 6.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from jln import linen as jnn
      >>> m = jnn.AdaLNZero(features=8)
      >>> x, c = jnp.ones((2, 5, 8)), jnp.ones((2, 8))
      >>> len(m.apply(m.init(jax.random.key(0), x, c), x, c))
      5
    """

    features: int
    num_chunks: int = 6
    eps: float = 1e-6
    use_bias: bool = True
    dtype: Any = None
    param_dtype: Any = jnp.float32
    impl: str = "auto"
    monitor: bool = False
    axis_name: Any = None
    axis_index_groups: Any = None
    linear_kernel_init: Any = None
    linear_bias_init: Any = None

    @nn.compact
    def __call__(self, x: Array, emb: Array) -> tuple[Array, ...]:
        cfg = _cfg(self, M.AdaLNZeroConfig)
        c = _last(emb, "jln.linen.AdaLNZero", "emb")
        params = _create(self, M.ada_ln_zero_specs(cfg, c, self.features), self.param_dtype)
        out, stats = M.apply_ada_ln_zero(params, x, emb, cfg)
        _sow(self, stats)
        return out


class AdaLNContinuous(nn.Module):
    r"""SD3/Flux final-layer norm (diffusers ``AdaLayerNormContinuous``).

    ``(scale, shift) = linear(SiLU(cond))`` (that order); ``norm(x) * (1 + scale) + shift``,
    ``norm`` a LayerNorm (``jln.adaptive_layer_norm``) or diffusers' RMSNorm
    (``jln.rms_norm(convention="diffusers")`` then ``jln.modulate``).

    Attributes:
      features: d, the size of ``x``'s last axis.
      eps: the norm's eps (1e-5).
      elementwise_affine: the norm's own ``scale`` (and ``bias`` for layer_norm).
      use_bias: the Dense bias and the LayerNorm bias (diffusers' ``bias``).
      norm_type: ``"layer_norm"`` or ``"rms_norm"``.
      dtype, param_dtype, impl, monitor, axis_name, axis_index_groups: as
        :class:`AdaptiveLayerNorm` (with ``axis_name``, lay out ``linear`` with
        :func:`jln.shard_chunks`).
      scale_init, bias_init: the norm's ``scale`` and ``bias`` initializers (with
        ``elementwise_affine``), as :class:`LayerNorm`'s.
      linear_kernel_init, linear_bias_init: ``linear``'s kernel and bias initializers;
        ``None`` gives torch ``nn.Linear``'s.

    Returns (``__call__(x, cond)``): array like ``x``.

    Raises:
      TypeError, ValueError: as :class:`AdaptiveLayerNorm`; an unknown ``norm_type``.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from jln import linen as jnn
      >>> m = jnn.AdaLNContinuous(features=8)
      >>> x, c = jnp.ones((2, 5, 8)), jnp.ones((2, 4))
      >>> m.apply(m.init(jax.random.key(0), x, c), x, c).shape
      (2, 5, 8)
    """

    features: int
    eps: float = 1e-5
    elementwise_affine: bool = True
    use_bias: bool = True
    norm_type: str = "layer_norm"
    dtype: Any = None
    param_dtype: Any = jnp.float32
    impl: str = "auto"
    monitor: bool = False
    axis_name: Any = None
    axis_index_groups: Any = None
    scale_init: Any = None
    bias_init: Any = None
    linear_kernel_init: Any = None
    linear_bias_init: Any = None

    @nn.compact
    def __call__(self, x: Array, cond: Array) -> Array:
        cfg = _cfg(self, M.AdaLNContinuousConfig)
        c = _last(cond, "jln.linen.AdaLNContinuous", "cond")
        params = _create(self, M.ada_ln_continuous_specs(cfg, c, self.features), self.param_dtype)
        y, stats = M.apply_ada_ln_continuous(params, x, cond, cfg)
        _sow(self, stats)
        return y


class TransformerEncoderLayer(nn.Module):
    r"""``torch.nn.TransformerEncoderLayer`` in linen: same options, same eval-mode numbers.

    Post-LN (``norm_first=False``): ``x = norm1(x + SA(x)); x = norm2(x + FF(x))``.
    Pre-LN (``norm_first=True``): ``x = x + SA(norm1(x)); x = x + FF(norm2(x))``.
    ``SA`` is multi-head self-attention (scaled dot product, softmax in float32),
    ``FF(x) = linear2(dropout(activation(linear1(x))))``; norms are :func:`jln.layer_norm`.

    Sharding: under ``jax.jit`` with ``NamedSharding`` the batch and sequence axes of ``x``
    may be split across devices (data/sequence parallelism; XLA partitions attention and the
    norms). The hidden axis must not be split: the attention and feed-forward layers are not
    tensor-parallel, so the block takes no ``axis_name``.

    Attributes:
      d_model, nhead, dim_feedforward, dropout, activation (``"relu"``/``"gelu"``),
      layer_norm_eps, batch_first, norm_first, bias: as torch, in torch's order (``bias=False``:
      no biases in the Linear layers and the LayerNorms).
      dtype: compute dtype (default ``src.dtype``); param_dtype, impl, monitor as
        :class:`LayerNorm` (the monitor records ``{"norm1": ..., "norm2": ...}``).
      kernel_init, bias_init: initializers of every Linear kernel and bias; ``None`` gives
        torch's distributions: q/k/v kernels xavier-uniform over the packed ``[3d, d]``
        weight, ``out_proj``/``linear1``/``linear2`` kernels and ``linear1``/``linear2``
        biases U(+-1/sqrt(fan_in)), attention biases 0; LayerNorms ones and zeros.

    Returns (``__call__(src, src_mask=None, src_key_padding_mask=None, is_causal=False, *,
    deterministic=True)``, torch's arguments in torch's order): array like ``src`` (``[T, B,
    D]``, ``[B, T, D]`` with ``batch_first``, or unbatched ``[T, D]``), dtype ``src.dtype`` (or
    ``dtype``). ``src_mask [T, T]`` or ``[B * nhead, T, T]``: True (bool) forbids a query from
    attending to a key, a float mask is added to the scores (torch).
    ``src_key_padding_mask [B, T]`` (``[T]`` unbatched): True marks padding keys to ignore.
    ``is_causal=True`` without ``src_mask`` applies the causal mask (each position sees itself
    and the ones before it; torch requires the mask with this hint). ``deterministic=False``
    turns dropout on (rng stream ``"dropout"``).

    Raises:
      TypeError, ValueError: bad options (d_model not divisible by nhead, unknown
      activation, dropout outside [0, 1)), bad ``src`` or mask shape/dtype.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from jln import linen as jnn
      >>> m = jnn.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16)
      >>> src = jnp.ones((5, 2, 8))
      >>> m.apply(m.init(jax.random.key(0), src), src).shape
      (5, 2, 8)
    """

    d_model: int
    nhead: int
    dim_feedforward: int = 2048
    dropout: float = 0.1
    activation: str = "relu"
    layer_norm_eps: float = 1e-5
    batch_first: bool = False
    norm_first: bool = False
    bias: bool = True
    dtype: Any = None
    param_dtype: Any = jnp.float32
    impl: str = "auto"
    monitor: bool = False
    kernel_init: Any = None
    bias_init: Any = None

    @nn.compact
    def __call__(
        self, src: Array, src_mask: Array | None = None, src_key_padding_mask: Array | None = None,
        is_causal: bool = False, *, deterministic: bool = True,
    ) -> Array:
        cfg = _cfg(self, M.EncoderLayerConfig)
        params = _create(self, M.encoder_layer_specs(cfg), self.param_dtype)
        drop = None
        if not deterministic and cfg.dropout > 0:
            layer = nn.Dropout(rate=cfg.dropout, deterministic=False, name="dropout_layer")
            drop = layer
        y, stats = M.apply_encoder_layer(
            params, src, cfg, src_mask=src_mask, src_key_padding_mask=src_key_padding_mask, is_causal=is_causal,
            dropout_fn=drop,
        )
        _sow(self, stats)
        return y


class DiTBlock(nn.Module):
    r"""A DiT block with adaLN-Zero conditioning (Peebles and Xie, 2023).

    ``emb = adaLN_modulation(SiLU(c))`` (zero-initialised Dense, 6 chunks in DiT's order);
    ``x = x + gate_msa * attn(LN(x) * (1 + scale_msa) + shift_msa)``, then
    ``x = x + gate_mlp * mlp(LN(x) * (1 + scale_mlp) + shift_mlp)``; LayerNorms with eps 1e-6
    and no affine, ``mlp = fc2(GELU_tanh(fc1(.)))``. At initialisation it returns ``x``.

    Sharding: under ``jax.jit`` with ``NamedSharding`` the batch and sequence axes of ``x``
    may be split across devices (data/sequence parallelism; XLA partitions attention and the
    norms; ``c`` follows the batch split). The hidden axis must not be split: the attention
    and MLP layers are not tensor-parallel, so the block takes no ``axis_name``.

    Attributes:
      hidden_size, num_heads, mlp_ratio: as DiT.
      dtype, param_dtype, impl, monitor: as :class:`TransformerEncoderLayer`.
      kernel_init, bias_init: initializers of every Dense kernel and bias but
        ``adaLN_modulation``'s (zero, so the block starts as the identity); ``None`` gives
        DiT's: xavier-uniform kernels (q/k/v over the packed ``[3d, d]`` weight), zero biases.

    Returns (``__call__(x, c)``): ``x [B, T, D]`` updated, conditioned on ``c [B, D]``.

    Raises:
      TypeError, ValueError: bad options or input shapes.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from jln import linen as jnn
      >>> m = jnn.DiTBlock(hidden_size=8, num_heads=2)
      >>> x, c = jnp.ones((2, 5, 8)), jnp.ones((2, 8))
      >>> bool((m.apply(m.init(jax.random.key(0), x, c), x, c) == x).all())
      True
    """

    hidden_size: int
    num_heads: int
    mlp_ratio: float = 4.0
    dtype: Any = None
    param_dtype: Any = jnp.float32
    impl: str = "auto"
    monitor: bool = False
    kernel_init: Any = None
    bias_init: Any = None

    @nn.compact
    def __call__(self, x: Array, c: Array) -> Array:
        cfg = _cfg(self, M.DiTBlockConfig)
        params = _create(self, M.dit_block_specs(cfg), self.param_dtype)
        y, stats = M.apply_dit_block(params, x, c, cfg)
        _sow(self, stats)
        return y
