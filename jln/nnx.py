"""Flax NNX modules over jln's core functions (same names and parameters as :mod:`jln.linen`).

Every module holds parameters only; its math is the pure function of the same name in
``jln._modules``, shared with :mod:`jln.linen`. Size arguments are positional, options
keyword-only. ``monitor=True`` sows per-row statistics as ``nnx.Intermediate`` named
``"stats"`` (read them with ``nnx.capture(model, nnx.Intermediate)``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

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


class LayerNorm(nnx.Module):
    r"""LayerNorm with torch's numbers: ``(x - E[x]) / sqrt(Var[x] + eps) * scale + bias``.

    The NNX twin of :class:`jln.linen.LayerNorm` (same options, parameters and numbers).

    Args:
      num_features: shape of ``x`` at ``axis`` (an int for one axis).
      eps, axis, use_scale, use_bias, dtype, param_dtype, impl, monitor, axis_name, axis_index_groups,
        scale_init, bias_init: as :class:`jln.linen.LayerNorm` (annotate sharding with
        ``flax.nnx.with_partitioning``).
      rngs: the key of an initializer other than ones and zeros; otherwise unused.

    Returns (``__call__(x)``): array of ``x.shape``, dtype ``x.dtype`` (or ``dtype``).

    Raises:
      TypeError, ValueError: as :func:`jln.layer_norm`, and for a bad ``num_features`` or an
      ``x`` whose shape at ``axis`` is not ``num_features``; ``TypeError`` for an initializer that is not callable, or one other than ones and zeros
      without ``rngs``.

    Example:
      >>> import jax.numpy as jnp
      >>> from jln import nnx as jnnx
      >>> jnnx.LayerNorm(4)(jnp.arange(8.0).reshape(2, 4)).shape
      (2, 4)
    """

    def __init__(
        self,
        num_features: int | tuple[int, ...],
        *,
        eps: float = 1e-5,
        axis: Axis = -1,
        use_scale: bool = True,
        use_bias: bool = True,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        impl: str = "auto",
        monitor: bool = False,
        axis_name: Any = None,
        axis_index_groups: Any = None,
        scale_init: Any = None,
        bias_init: Any = None,
        rngs: nnx.Rngs | None = None,
    ):
        fn = "jln.nnx.LayerNorm"
        self.cfg = M.LayerNormConfig(
            eps=eps, axis=axis, use_scale=use_scale, use_bias=use_bias, dtype=dtype, impl=impl, monitor=monitor,
            axis_name=axis_name, axis_index_groups=axis_index_groups, scale_init=scale_init, bias_init=bias_init,
        )
        self.num_features = M.feature_shape(num_features, fn)
        specs = M.layer_norm_specs(self.cfg, self.num_features)
        self._layout = _layout(specs)
        _create(self, specs, param_dtype, rngs, fn)

    def __call__(self, x: Array) -> Array:
        M.check_num_features(x, self.cfg.axis, self.num_features, "jln.nnx.LayerNorm")
        y, stats = M.apply_layer_norm(_values(self, self._layout), x, self.cfg)
        _sow(self, stats)
        return y


class RMSNorm(nnx.Module):
    r"""RMSNorm in torch's convention or a named model's: ``x * rsqrt(mean(x^2) + eps) * scale``.

    The NNX twin of :class:`jln.linen.RMSNorm`.

    Args:
      num_features: shape of ``x`` at ``axis`` (an int for one axis).
      eps, convention, axis, use_scale, use_bias, dtype, param_dtype, impl, monitor, axis_name,
        axis_index_groups, scale_init, bias_init: as :class:`jln.linen.RMSNorm`.
      rngs: the key of an initializer other than ones and zeros; otherwise unused.

    Returns (``__call__(x)``): array of ``x.shape``, dtype by the convention (or ``dtype``).

    Raises:
      TypeError, ValueError: as :func:`jln.rms_norm`, and for an ``x`` whose shape at ``axis``
      is not ``num_features``; ``TypeError`` for an initializer that is not callable, or one
      other than ones and zeros without ``rngs``.

    Example:
      >>> import jax.numpy as jnp
      >>> from jln import nnx as jnnx
      >>> jnnx.RMSNorm(4, convention="gemma").scale[...]
      Array([0., 0., 0., 0.], dtype=float32)
    """

    def __init__(
        self,
        num_features: int | tuple[int, ...],
        *,
        eps: float | None = None,
        convention: str = "torch",
        axis: Axis = -1,
        use_scale: bool = True,
        use_bias: bool = False,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        impl: str = "auto",
        monitor: bool = False,
        axis_name: Any = None,
        axis_index_groups: Any = None,
        scale_init: Any = None,
        bias_init: Any = None,
        rngs: nnx.Rngs | None = None,
    ):
        fn = "jln.nnx.RMSNorm"
        self.cfg = M.RMSNormConfig(
            eps=eps, convention=convention, axis=axis, use_scale=use_scale, use_bias=use_bias,
            dtype=dtype, impl=impl, monitor=monitor, axis_name=axis_name, axis_index_groups=axis_index_groups,
            scale_init=scale_init, bias_init=bias_init,
        )
        self.num_features = M.feature_shape(num_features, fn)
        specs = M.rms_norm_specs(self.cfg, self.num_features)
        self._layout = _layout(specs)
        _create(self, specs, param_dtype, rngs, fn)

    def __call__(self, x: Array) -> Array:
        M.check_num_features(x, self.cfg.axis, self.num_features, "jln.nnx.RMSNorm")
        y, stats = M.apply_rms_norm(_values(self, self._layout), x, self.cfg)
        _sow(self, stats)
        return y


class AdaptiveLayerNorm(nnx.Module):
    r"""The seed's AdaptiveLN: ``LN(x) * (1 + gamma) + beta`` with ``(gamma, beta) = proj(cond)``.

    The NNX twin of :class:`jln.linen.AdaptiveLayerNorm`.

    Args:
      cond_features: size of ``cond``'s last axis.
      features: d, the size of ``x``'s last axis.
      eps, order, use_scale, use_bias, dtype, param_dtype, impl, monitor, axis_name,
        axis_index_groups, scale_init, bias_init, proj_kernel_init, proj_bias_init: as linen.
      rngs: ``nnx.Rngs`` for the Dense kernel init.

    Returns (``__call__(x, cond)``): array like ``x``.

    Raises:
      TypeError, ValueError: as :class:`jln.linen.AdaptiveLayerNorm`; ``TypeError`` without
      ``rngs``.

    Example:
      >>> import jax.numpy as jnp
      >>> from flax import nnx
      >>> from jln import nnx as jnnx
      >>> m = jnnx.AdaptiveLayerNorm(3, 8, rngs=nnx.Rngs(0))
      >>> m(jnp.ones((2, 5, 8)), jnp.ones((2, 3))).shape
      (2, 5, 8)
    """

    def __init__(
        self,
        cond_features: int,
        features: int,
        *,
        eps: float = 1e-5,
        order: Any = "seed",
        use_scale: bool = True,
        use_bias: bool = True,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        impl: str = "auto",
        monitor: bool = False,
        axis_name: Any = None,
        axis_index_groups: Any = None,
        scale_init: Any = None,
        bias_init: Any = None,
        proj_kernel_init: Any = None,
        proj_bias_init: Any = None,
        rngs: nnx.Rngs | None = None,
    ):
        fn = "jln.nnx.AdaptiveLayerNorm"
        self.cfg = M.AdaptiveLayerNormConfig(
            eps=eps, order=order, use_scale=use_scale, use_bias=use_bias, dtype=dtype, impl=impl, monitor=monitor,
            axis_name=axis_name, axis_index_groups=axis_index_groups, scale_init=scale_init, bias_init=bias_init,
            proj_kernel_init=proj_kernel_init, proj_bias_init=proj_bias_init,
        )
        specs = M.adaptive_layer_norm_specs(
            self.cfg, M.check_positive(cond_features, "cond_features", fn), M.check_positive(features, "features", fn)
        )
        self._layout = _layout(specs)
        _create(self, specs, param_dtype, rngs, fn)

    def __call__(self, x: Array, cond: Array) -> Array:
        y, stats = M.apply_adaptive_layer_norm(_values(self, self._layout), x, cond, self.cfg)
        _sow(self, stats)
        return y


class AdaLNZero(nnx.Module):
    r"""DiT's adaLN-Zero (diffusers ``AdaLayerNormZero`` / ``AdaLayerNormZeroSingle``).

    The NNX twin of :class:`jln.linen.AdaLNZero` (``linear`` zero-initialised).

    Args:
      cond_features: size of ``emb``'s last axis.
      features: d.
      num_chunks, eps, use_bias, dtype, param_dtype, impl, monitor, axis_name,
        axis_index_groups, linear_kernel_init, linear_bias_init: as linen.
      rngs: ``nnx.Rngs``, needed only by a random ``linear_kernel_init``/``linear_bias_init``
        (the default zero init takes no key).

    Returns (``__call__(x, emb)``): ``(x_mod, gate_msa, shift_mlp, scale_mlp, gate_mlp)`` (6
    chunks) or ``(x_mod, gate_msa)`` (3).

    Raises:
      TypeError, ValueError: as :class:`jln.linen.AdaLNZero`.

    Example:
      >>> import jax.numpy as jnp
      >>> from jln import nnx as jnnx
      >>> x_mod, *rest = jnnx.AdaLNZero(8, 8)(jnp.ones((2, 5, 8)), jnp.ones((2, 8)))
      >>> x_mod.shape, len(rest)
      ((2, 5, 8), 4)
    """

    def __init__(
        self,
        cond_features: int,
        features: int,
        *,
        num_chunks: int = 6,
        eps: float = 1e-6,
        use_bias: bool = True,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        impl: str = "auto",
        monitor: bool = False,
        axis_name: Any = None,
        axis_index_groups: Any = None,
        linear_kernel_init: Any = None,
        linear_bias_init: Any = None,
        rngs: nnx.Rngs | None = None,
    ):
        fn = "jln.nnx.AdaLNZero"
        self.cfg = M.AdaLNZeroConfig(
            num_chunks=num_chunks, eps=eps, use_bias=use_bias, dtype=dtype, impl=impl, monitor=monitor,
            axis_name=axis_name, axis_index_groups=axis_index_groups, linear_kernel_init=linear_kernel_init,
            linear_bias_init=linear_bias_init,
        )
        specs = M.ada_ln_zero_specs(
            self.cfg, M.check_positive(cond_features, "cond_features", fn), M.check_positive(features, "features", fn)
        )
        self._layout = _layout(specs)
        _create(self, specs, param_dtype, rngs, fn)

    def __call__(self, x: Array, emb: Array) -> tuple[Array, ...]:
        out, stats = M.apply_ada_ln_zero(_values(self, self._layout), x, emb, self.cfg)
        _sow(self, stats)
        return out


class AdaLNContinuous(nnx.Module):
    r"""SD3/Flux final-layer norm (diffusers ``AdaLayerNormContinuous``).

    The NNX twin of :class:`jln.linen.AdaLNContinuous`.

    Args:
      cond_features: size of ``cond``'s last axis.
      features: d.
      eps, elementwise_affine, use_bias, norm_type, dtype, param_dtype, impl, monitor, axis_name,
        axis_index_groups, scale_init, bias_init, linear_kernel_init, linear_bias_init: as linen.
      rngs: ``nnx.Rngs`` for the Dense kernel init.

    Returns (``__call__(x, cond)``): array like ``x``.

    Raises:
      TypeError, ValueError: as :class:`jln.linen.AdaLNContinuous`.

    Example:
      >>> import jax.numpy as jnp
      >>> from flax import nnx
      >>> from jln import nnx as jnnx
      >>> jnnx.AdaLNContinuous(4, 8, rngs=nnx.Rngs(0))(jnp.ones((2, 5, 8)), jnp.ones((2, 4))).shape
      (2, 5, 8)
    """

    def __init__(
        self,
        cond_features: int,
        features: int,
        *,
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        use_bias: bool = True,
        norm_type: str = "layer_norm",
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        impl: str = "auto",
        monitor: bool = False,
        axis_name: Any = None,
        axis_index_groups: Any = None,
        scale_init: Any = None,
        bias_init: Any = None,
        linear_kernel_init: Any = None,
        linear_bias_init: Any = None,
        rngs: nnx.Rngs | None = None,
    ):
        fn = "jln.nnx.AdaLNContinuous"
        self.cfg = M.AdaLNContinuousConfig(
            eps=eps, elementwise_affine=elementwise_affine, use_bias=use_bias, norm_type=norm_type,
            dtype=dtype, impl=impl, monitor=monitor, axis_name=axis_name, axis_index_groups=axis_index_groups,
            scale_init=scale_init, bias_init=bias_init, linear_kernel_init=linear_kernel_init,
            linear_bias_init=linear_bias_init,
        )
        specs = M.ada_ln_continuous_specs(
            self.cfg, M.check_positive(cond_features, "cond_features", fn), M.check_positive(features, "features", fn)
        )
        self._layout = _layout(specs)
        _create(self, specs, param_dtype, rngs, fn)

    def __call__(self, x: Array, cond: Array) -> Array:
        y, stats = M.apply_ada_ln_continuous(_values(self, self._layout), x, cond, self.cfg)
        _sow(self, stats)
        return y


class TransformerEncoderLayer(nnx.Module):
    r"""``torch.nn.TransformerEncoderLayer`` in NNX: same options, same eval-mode numbers.

    The NNX twin of :class:`jln.linen.TransformerEncoderLayer`. Dropout is an
    ``nnx.Dropout``: on after construction (like a fresh torch module), off after
    ``module.eval()``, on again after ``module.train()``.

    Sharding: as the linen block, batch and sequence axes of ``x`` may be split across
    devices under ``jax.jit``; the hidden axis must not be (the block is not tensor-parallel).

    Args:
      d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps, batch_first,
        norm_first, bias: as torch (positional, in torch's order; ``bias=False``: no biases in
        the Linear layers and the LayerNorms).
      dtype, param_dtype, impl, monitor, kernel_init, bias_init: as linen.
      rngs: ``nnx.Rngs`` for parameter init and the dropout stream.

    Returns (``__call__(src, src_mask=None, src_key_padding_mask=None, is_causal=False)``,
    torch's arguments in torch's order): as :class:`jln.linen.TransformerEncoderLayer`
    (dropout follows ``.train()``/``.eval()``).

    Raises:
      TypeError, ValueError: as :class:`jln.linen.TransformerEncoderLayer`.

    Example:
      >>> import jax.numpy as jnp
      >>> from flax import nnx
      >>> from jln import nnx as jnnx
      >>> m = jnnx.TransformerEncoderLayer(8, 2, 16, rngs=nnx.Rngs(0))
      >>> m.eval()
      >>> m(jnp.ones((5, 2, 8))).shape
      (5, 2, 8)
    """

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: str = "relu",
        layer_norm_eps: float = 1e-5,
        batch_first: bool = False,
        norm_first: bool = False,
        bias: bool = True,
        *,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        impl: str = "auto",
        monitor: bool = False,
        kernel_init: Any = None,
        bias_init: Any = None,
        rngs: nnx.Rngs | None = None,
    ):
        fn = "jln.nnx.TransformerEncoderLayer"
        self.cfg = M.EncoderLayerConfig(
            d_model=d_model, nhead=nhead, dim_feedforward=dim_feedforward, dropout=dropout,
            activation=activation, layer_norm_eps=layer_norm_eps, batch_first=batch_first,
            norm_first=norm_first, bias=bias, dtype=dtype, impl=impl, monitor=monitor,
            kernel_init=kernel_init, bias_init=bias_init,
        )
        specs = M.encoder_layer_specs(self.cfg)
        self._layout = _layout(specs)
        _create(self, specs, param_dtype, rngs, fn)
        if rngs is None:
            raise TypeError(f"{fn}: pass rngs=nnx.Rngs(0) (parameter init and the dropout stream).")
        self.dropout_layer = nnx.Dropout(dropout, rngs=rngs)

    def __call__(
        self, src: Array, src_mask: Array | None = None, src_key_padding_mask: Array | None = None,
        is_causal: bool = False,
    ) -> Array:
        drop = None if self.dropout_layer.deterministic or self.cfg.dropout == 0 else self.dropout_layer
        y, stats = M.apply_encoder_layer(
            _values(self, self._layout), src, self.cfg, src_mask=src_mask, src_key_padding_mask=src_key_padding_mask,
            is_causal=is_causal, dropout_fn=drop,
        )
        _sow(self, stats)
        return y


class DiTBlock(nnx.Module):
    r"""A DiT block with adaLN-Zero conditioning; the identity at initialisation.

    The NNX twin of :class:`jln.linen.DiTBlock`.

    Sharding: as the linen block, batch and sequence axes of ``x`` (and ``c``'s batch) may be
    split across devices under ``jax.jit``; the hidden axis must not be.

    Args:
      hidden_size, num_heads: as DiT.
      mlp_ratio, dtype, param_dtype, impl, monitor, kernel_init, bias_init: as linen.
      rngs: ``nnx.Rngs`` for parameter init.

    Returns (``__call__(x, c)``): ``x [B, T, D]`` updated, conditioned on ``c [B, D]``.

    Raises:
      TypeError, ValueError: as :class:`jln.linen.DiTBlock`.

    Example:
      >>> import jax.numpy as jnp
      >>> from flax import nnx
      >>> from jln import nnx as jnnx
      >>> x = jnp.ones((2, 5, 8))
      >>> bool((jnnx.DiTBlock(8, 2, rngs=nnx.Rngs(0))(x, jnp.ones((2, 8))) == x).all())
      True
    """

    def __init__(
        self,
        hidden_size: int,
        num_heads: int,
        *,
        mlp_ratio: float = 4.0,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        impl: str = "auto",
        monitor: bool = False,
        kernel_init: Any = None,
        bias_init: Any = None,
        rngs: nnx.Rngs | None = None,
    ):
        fn = "jln.nnx.DiTBlock"
        self.cfg = M.DiTBlockConfig(
            hidden_size=hidden_size, num_heads=num_heads, mlp_ratio=mlp_ratio, dtype=dtype, impl=impl, monitor=monitor,
            kernel_init=kernel_init, bias_init=bias_init,
        )
        specs = M.dit_block_specs(self.cfg)
        self._layout = _layout(specs)
        _create(self, specs, param_dtype, rngs, fn)

    def __call__(self, x: Array, c: Array) -> Array:
        y, stats = M.apply_dit_block(_values(self, self._layout), x, c, self.cfg)
        _sow(self, stats)
        return y
