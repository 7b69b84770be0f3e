# Written by `python -m jln._faces` from the module kinds of jln/families/adaptive/conditioned.py, jln/families/adaptive/module.py: edit those and run it
# again (tests/test_faces.py fails when this file is stale).
"""The NNX face of the adaptive family: :class:`AdaptiveLayerNorm`, :class:`AdaLNZero`, :class:`AdaLNContinuous`, :class:`AdaLNZeroJoint`, :class:`AdaLNScale`, :class:`AdaLNSingle`, :class:`AdaGroupNorm`, :class:`AdaLNTable`, :class:`ModulatedRMSNorm`, :class:`AdaRMSNorm`, :class:`AdaLNSigmoidGate`."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import ClassVar, Literal

import jax
import jax.numpy as jnp
from flax import nnx
from jax.typing import DTypeLike

from jln import _nnx
from jln._modules import Initializer, Kind
from jln._platform import Impl
from jln.families.adaptive import conditioned
from jln.families.adaptive import module as kinds
from jln.families.adaptive.function import ChunkOrder


class AdaptiveLayerNorm(_nnx.Module):
    """The seed's AdaptiveLN: ``LN(x) * (1 + gamma) + beta`` with ``(gamma, beta) = proj(cond)``.

    ``proj`` is a Dense ``cond_features -> 2 * features`` (torch ``nn.Linear``); the LayerNorm has
    its own affine (``norm/scale``, ``norm/bias``). Calls :func:`jln.adaptive_layer_norm` (norm and
    modulation in one fused body).

    The NNX twin of :class:`jln.linen.AdaptiveLayerNorm` (same options, parameters and numbers).

    Args:
      cond_features: size of ``cond``'s last axis.
      features: d, the size of ``x``'s last axis (with ``axis_name``: the local size).
      eps: LayerNorm eps, added to the variance (torch's default 1e-5).
      order: chunk order of ``proj(cond)``; ``"seed"`` = (scale, shift) = (gamma, beta).
      use_scale: the LayerNorm's own ``scale``.
      use_bias: the LayerNorm's own ``bias``.
      dtype: ``None``: output in ``x.dtype`` (Dense layers run in the main input's dtype); else
        compute in and return this dtype.
      param_dtype: dtype of the parameters (float32).
      impl: ``"auto"``, ``"xla"``, ``"native"`` or ``"pallas"``, as :func:`jln.layer_norm`.
      monitor: record per-row input/output statistics (``jln._monitor.row_stats``): linen sows them
        into ``"intermediates"``, NNX as an ``nnx.Intermediate``, both named ``"stats"``.
      axis_name: tensor parallelism inside ``jax.shard_map``/``jax.pmap`` with ``x``'s last axis
        split over ``axis_name``: ``features`` is then the local size d / n, the norm's statistics
        span the devices, and the Dense must produce each device's local block of every chunk:
        :func:`jln.shard_chunks` lays out a global kernel that way; the condition is replicated over
        ``axis_name``.
      axis_index_groups: with ``axis_name``, the device groups that each hold one row's blocks (as
        ``jax.lax.psum``).
      scale_init: the LayerNorm's ``scale`` initializer; ``None``: ones.
      bias_init: the LayerNorm's ``bias`` initializer; ``None``: zeros.
      proj_kernel_init: ``proj``'s kernel initializer; ``None``: torch ``nn.Linear``'s,
        U(+-1/sqrt(cond_features)).
      proj_bias_init: ``proj``'s bias initializer; ``None``: torch ``nn.Linear``'s,
        U(+-1/sqrt(cond_features)).
      rngs: ``nnx.Rngs`` for the Dense kernel init.

    Returns (``__call__(x, cond)``): ``x [B, ..., d]`` modulated by ``cond [B, c]`` (broadcast over
    the token axes) or ``cond`` with ``x``'s leading shape; array like ``x``, dtype ``x.dtype`` (or
    ``dtype``).

    Raises:
      TypeError, ValueError: non-floating inputs, mismatched feature sizes, a bad ``order``, an
        initializer that is not callable (NNX: a random one without ``rngs``).

    Example:
      >>> import jax.numpy as jnp
      >>> from flax import nnx
      >>> from jln import nnx as jnnx
      >>> m = jnnx.AdaptiveLayerNorm(3, 8, rngs=nnx.Rngs(0))
      >>> m(jnp.ones((2, 5, 8)), jnp.ones((2, 3))).shape
      (2, 5, 8)
    """

    _kind: ClassVar[Kind] = kinds.ADAPTIVE_LAYER_NORM

    cond_features: int
    proj: _nnx.Params
    norm: _nnx.Params
    features: int
    eps: float
    order: ChunkOrder
    use_scale: bool
    use_bias: bool
    dtype: DTypeLike | None
    param_dtype: DTypeLike
    impl: Impl
    monitor: bool
    axis_name: Hashable | None
    axis_index_groups: Sequence[Sequence[int]] | None
    scale_init: Initializer | None
    bias_init: Initializer | None
    proj_kernel_init: Initializer | None
    proj_bias_init: Initializer | None

    def __init__(
        self,
        cond_features: int,
        features: int,
        *,
        eps: float = 1e-05,
        order: ChunkOrder = "seed",
        use_scale: bool = True,
        use_bias: bool = True,
        dtype: DTypeLike | None = None,
        param_dtype: DTypeLike = jnp.float32,
        impl: Impl = "auto",
        monitor: bool = False,
        axis_name: Hashable | None = None,
        axis_index_groups: Sequence[Sequence[int]] | None = None,
        scale_init: Initializer | None = None,
        bias_init: Initializer | None = None,
        proj_kernel_init: Initializer | None = None,
        proj_bias_init: Initializer | None = None,
        rngs: nnx.Rngs | None = None,
    ) -> None:
        """Build the module: the arguments are the Args of the class docstring."""
        _nnx.build(
            self,
            (cond_features,),
            dict(
                features=features,
                eps=eps,
                order=order,
                use_scale=use_scale,
                use_bias=use_bias,
                dtype=dtype,
                param_dtype=param_dtype,
                impl=impl,
                monitor=monitor,
                axis_name=axis_name,
                axis_index_groups=axis_index_groups,
                scale_init=scale_init,
                bias_init=bias_init,
                proj_kernel_init=proj_kernel_init,
                proj_bias_init=proj_bias_init,
            ),
            rngs,
        )

    def __call__(self, x: jax.Array, cond: jax.Array) -> jax.Array:
        """The module on its inputs.

        Returns:
          ``x [B, ..., d]`` modulated by ``cond [B, c]`` (broadcast over the token axes) or ``cond``
          with ``x``'s leading shape; array like ``x``, dtype ``x.dtype`` (or ``dtype``).
        """
        return _nnx.forward(self, (x, cond), {})


class AdaLNZero(_nnx.Module):
    """DiT's adaLN-Zero (diffusers ``AdaLayerNormZero`` / ``AdaLayerNormZeroSingle`` /
    ``SD35AdaLayerNormZeroX`` / ``LuminaRMSNormZero`` / ``MochiRMSNormZero``, Qwen2.5-Omni's
    ``AdaLayerNormZero``).

    ``chunks = linear(SiLU(emb))`` with ``linear`` zero-initialised (the block starts as the
    identity), run in ``emb``'s dtype; ``x_mod = norm(x) * (1 + scale_msa) + shift_msa`` with a
    LayerNorm of eps 1e-6 and no affine by default (``norm_type``, ``elementwise_affine``:
    diffusers' RMSNorm, as :func:`jln.adaptive_rms_norm`).

    The NNX twin of :class:`jln.linen.AdaLNZero` (same options, parameters and numbers).

    Args:
      cond_features: size of ``emb``'s last axis.
      features: d, the size of ``x``'s last axis (with ``axis_name``: the local size).
      num_chunks: 6 (DiT order: shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp), 3
        (shift_msa, scale_msa, gate_msa), 9 (DiT's six, then shift_msa2, scale_msa2, gate_msa2:
        SD3.5's second attention) or 4 (scale_msa, gate_msa, scale_mlp, gate_mlp: Lumina, Mochi; no
        shifts).
      eps: the norm's eps (DiT: 1e-6).
      use_bias: the Dense ``linear``'s bias.
      dtype: ``None``: output in ``x.dtype`` (Dense layers run in the main input's dtype); else
        compute in and return this dtype.
      param_dtype: dtype of the parameters (float32).
      impl: ``"auto"``, ``"xla"``, ``"native"`` or ``"pallas"``, as :func:`jln.layer_norm`.
      monitor: record per-row input/output statistics (``jln._monitor.row_stats``): linen sows them
        into ``"intermediates"``, NNX as an ``nnx.Intermediate``, both named ``"stats"``.
      axis_name: tensor parallelism inside ``jax.shard_map``/``jax.pmap`` with ``x``'s last axis
        split over ``axis_name``: ``features`` is then the local size d / n, the norm's statistics
        span the devices, and the Dense must produce each device's local block of every chunk:
        :func:`jln.shard_chunks` lays out a global kernel that way; the condition is replicated over
        ``axis_name``.
      axis_index_groups: with ``axis_name``, the device groups that each hold one row's blocks (as
        ``jax.lax.psum``).
      linear_kernel_init: ``linear``'s kernel initializer; ``None``: zeros (adaLN-Zero).
      linear_bias_init: ``linear``'s bias initializer; ``None``: zeros (adaLN-Zero).
      norm_type: ``"layer_norm"``; ``"rms_norm"`` (diffusers' RMSNorm, then torch's rounding after
        each op: Lumina); ``"fp32_rms_norm"`` (diffusers' RMSNorm on float32 ``x``, modulated in
        float32 and rounded once to ``x.dtype``: Mochi).
      elementwise_affine: the norm's own ``scale`` (and a LayerNorm's ``bias``): Lumina's RMSNorm
        has one.
      scale_init: the norm's ``scale`` initializer (with ``elementwise_affine``); ``None``: ones.
      bias_init: the LayerNorm's ``bias`` initializer; ``None``: zeros.
      rngs: ``nnx.Rngs``, needed only by a random ``linear_kernel_init``/``linear_bias_init`` (the
        default zero init takes no key).

    Returns (``__call__(x, emb)``): ``(x_mod, gate_msa, shift_mlp, scale_mlp, gate_mlp)`` for 6
    chunks, ``(x_mod, gate_msa)`` for 3, ``(x_mod, gate_msa, shift_mlp, scale_mlp, gate_mlp, x_mod2,
    gate_msa2)`` for 9 (``x_mod2``: the same normed ``x`` modulated by ``shift_msa2``,
    ``scale_msa2``), ``(x_mod, gate_msa, scale_mlp, gate_mlp)`` for 4; ``x_mod`` like ``x``, the
    others ``[B, d]``.

    Raises:
      TypeError, ValueError: non-floating inputs, mismatched sizes, ``num_chunks`` not 3, 4, 6 or 9,
        an unknown ``norm_type``.

    Example:
      >>> import jax.numpy as jnp
      >>> from flax import nnx
      >>> from jln import nnx as jnnx
      >>> x_mod, *rest = jnnx.AdaLNZero(8, 8)(jnp.ones((2, 5, 8)), jnp.ones((2, 8)))
      >>> x_mod.shape, len(rest)
      ((2, 5, 8), 4)
    """

    _kind: ClassVar[Kind] = kinds.ADA_LN_ZERO

    cond_features: int
    linear: _nnx.Params
    norm: _nnx.Params | None = None
    features: int
    num_chunks: int
    eps: float
    use_bias: bool
    dtype: DTypeLike | None
    param_dtype: DTypeLike
    impl: Impl
    monitor: bool
    axis_name: Hashable | None
    axis_index_groups: Sequence[Sequence[int]] | None
    linear_kernel_init: Initializer | None
    linear_bias_init: Initializer | None
    norm_type: Literal["layer_norm", "rms_norm", "fp32_rms_norm"]
    elementwise_affine: bool
    scale_init: Initializer | None
    bias_init: Initializer | None

    def __init__(
        self,
        cond_features: int,
        features: int,
        *,
        num_chunks: int = 6,
        eps: float = 1e-06,
        use_bias: bool = True,
        dtype: DTypeLike | None = None,
        param_dtype: DTypeLike = jnp.float32,
        impl: Impl = "auto",
        monitor: bool = False,
        axis_name: Hashable | None = None,
        axis_index_groups: Sequence[Sequence[int]] | None = None,
        linear_kernel_init: Initializer | None = None,
        linear_bias_init: Initializer | None = None,
        norm_type: Literal["layer_norm", "rms_norm", "fp32_rms_norm"] = "layer_norm",
        elementwise_affine: bool = False,
        scale_init: Initializer | None = None,
        bias_init: Initializer | None = None,
        rngs: nnx.Rngs | None = None,
    ) -> None:
        """Build the module: the arguments are the Args of the class docstring."""
        _nnx.build(
            self,
            (cond_features,),
            dict(
                features=features,
                num_chunks=num_chunks,
                eps=eps,
                use_bias=use_bias,
                dtype=dtype,
                param_dtype=param_dtype,
                impl=impl,
                monitor=monitor,
                axis_name=axis_name,
                axis_index_groups=axis_index_groups,
                linear_kernel_init=linear_kernel_init,
                linear_bias_init=linear_bias_init,
                norm_type=norm_type,
                elementwise_affine=elementwise_affine,
                scale_init=scale_init,
                bias_init=bias_init,
            ),
            rngs,
        )

    def __call__(self, x: jax.Array, emb: jax.Array) -> tuple[jax.Array, ...]:
        """The module on its inputs.

        Returns:
          ``(x_mod, gate_msa, shift_mlp, scale_mlp, gate_mlp)`` for 6 chunks, ``(x_mod, gate_msa)`` for
          3, ``(x_mod, gate_msa, shift_mlp, scale_mlp, gate_mlp, x_mod2, gate_msa2)`` for 9 (``x_mod2``:
          the same normed ``x`` modulated by ``shift_msa2``, ``scale_msa2``), ``(x_mod, gate_msa,
          scale_mlp, gate_mlp)`` for 4; ``x_mod`` like ``x``, the others ``[B, d]``.
        """
        return _nnx.forward(self, (x, emb), {})


class AdaLNContinuous(_nnx.Module):
    """SD3/Flux final-layer norm (diffusers ``AdaLayerNormContinuous``; also ``AdaLayerNorm`` and
    Qwen2.5-Omni's ``AdaLayerNormZero_Final`` through ``order`` and ``project_in``).

    ``(scale, shift) = linear(SiLU(cond))`` (that order by default; ``activation`` replaces or drops
    the SiLU, an ``order`` of one chunk gives ``norm(x) + shift`` or ``norm(x) * (1 + scale)``);
    ``norm(x) * (1 + scale) + shift``, ``norm`` a LayerNorm (``jln.adaptive_layer_norm``) or
    diffusers' RMSNorm (``jln.rms_norm(convention="diffusers")`` then ``jln.modulate``).

    The NNX twin of :class:`jln.linen.AdaLNContinuous` (same options, parameters and numbers).

    Args:
      cond_features: size of ``cond``'s last axis.
      features: d, the size of ``x``'s last axis (with ``axis_name``: the local size).
      eps: the norm's eps (1e-5).
      elementwise_affine: the norm's own ``scale`` (and ``bias`` for layer_norm).
      use_bias: the Dense bias and the LayerNorm bias (diffusers' ``bias``).
      norm_type: ``"layer_norm"`` or ``"rms_norm"`` (diffusers' RMSNorm).
      dtype: ``None``: output in ``x.dtype`` (Dense layers run in the main input's dtype); else
        compute in and return this dtype.
      param_dtype: dtype of the parameters (float32).
      impl: ``"auto"``, ``"xla"``, ``"native"`` or ``"pallas"``, as :func:`jln.layer_norm`.
      monitor: record per-row input/output statistics (``jln._monitor.row_stats``): linen sows them
        into ``"intermediates"``, NNX as an ``nnx.Intermediate``, both named ``"stats"``.
      axis_name: tensor parallelism inside ``jax.shard_map``/``jax.pmap`` with ``x``'s last axis
        split over ``axis_name``: ``features`` is then the local size d / n, the norm's statistics
        span the devices, and the Dense must produce each device's local block of every chunk:
        :func:`jln.shard_chunks` lays out a global kernel that way; the condition is replicated over
        ``axis_name``.
      axis_index_groups: with ``axis_name``, the device groups that each hold one row's blocks (as
        ``jax.lax.psum``).
      scale_init: the norm's ``scale`` initializer (with ``elementwise_affine``); ``None``: ones.
      bias_init: the norm's ``bias`` initializer; ``None``: zeros.
      linear_kernel_init: ``linear``'s kernel initializer; ``None``: torch ``nn.Linear``'s.
      linear_bias_init: ``linear``'s bias initializer; ``None``: torch ``nn.Linear``'s.
      order: chunk order of ``linear(SiLU(cond))``: ``"continuous"`` (scale, shift: diffusers
        ``AdaLayerNormContinuous``, ``AdaLayerNorm``), ``"dit_final"`` (shift, scale:
        ``AdaLayerNorm(chunk_dim=1)``) or ``("scale", "shift")``-like tuples.
      project_in: the dtype the Dense runs in: ``"x"`` (``SiLU(cond)`` cast to ``x``'s dtype, as
        ``AdaLayerNormContinuous``) or ``"cond"`` (the condition's own, as ``AdaLayerNorm`` and
        Qwen2.5-Omni's ``AdaLayerNormZero_Final``).
      activation: the activation applied to ``cond`` before ``linear``: ``"silu"`` (diffusers),
        ``None`` (CogView4's final norm) or another of ``jln._modules.COND_ACTIVATIONS``.
      rngs: ``nnx.Rngs`` for the Dense kernel init.

    Returns (``__call__(x, cond)``): array like ``x``, dtype ``x.dtype`` (or ``dtype``).

    Raises:
      TypeError, ValueError: as :class:`AdaptiveLayerNorm`; an unknown ``norm_type``.

    Example:
      >>> import jax.numpy as jnp
      >>> from flax import nnx
      >>> from jln import nnx as jnnx
      >>> jnnx.AdaLNContinuous(4, 8, rngs=nnx.Rngs(0))(jnp.ones((2, 5, 8)), jnp.ones((2, 4))).shape
      (2, 5, 8)
    """

    _kind: ClassVar[Kind] = kinds.ADA_LN_CONTINUOUS

    cond_features: int
    linear: _nnx.Params
    norm: _nnx.Params | None = None
    features: int
    eps: float
    elementwise_affine: bool
    use_bias: bool
    norm_type: Literal["layer_norm", "rms_norm"]
    dtype: DTypeLike | None
    param_dtype: DTypeLike
    impl: Impl
    monitor: bool
    axis_name: Hashable | None
    axis_index_groups: Sequence[Sequence[int]] | None
    scale_init: Initializer | None
    bias_init: Initializer | None
    linear_kernel_init: Initializer | None
    linear_bias_init: Initializer | None
    order: ChunkOrder
    project_in: Literal["x", "cond"]
    activation: Literal["silu", "swish", "mish", "gelu", "relu", "sigmoid"] | None

    def __init__(
        self,
        cond_features: int,
        features: int,
        *,
        eps: float = 1e-05,
        elementwise_affine: bool = True,
        use_bias: bool = True,
        norm_type: Literal["layer_norm", "rms_norm"] = "layer_norm",
        dtype: DTypeLike | None = None,
        param_dtype: DTypeLike = jnp.float32,
        impl: Impl = "auto",
        monitor: bool = False,
        axis_name: Hashable | None = None,
        axis_index_groups: Sequence[Sequence[int]] | None = None,
        scale_init: Initializer | None = None,
        bias_init: Initializer | None = None,
        linear_kernel_init: Initializer | None = None,
        linear_bias_init: Initializer | None = None,
        order: ChunkOrder = "continuous",
        project_in: Literal["x", "cond"] = "x",
        activation: Literal["silu", "swish", "mish", "gelu", "relu", "sigmoid"] | None = "silu",
        rngs: nnx.Rngs | None = None,
    ) -> None:
        """Build the module: the arguments are the Args of the class docstring."""
        _nnx.build(
            self,
            (cond_features,),
            dict(
                features=features,
                eps=eps,
                elementwise_affine=elementwise_affine,
                use_bias=use_bias,
                norm_type=norm_type,
                dtype=dtype,
                param_dtype=param_dtype,
                impl=impl,
                monitor=monitor,
                axis_name=axis_name,
                axis_index_groups=axis_index_groups,
                scale_init=scale_init,
                bias_init=bias_init,
                linear_kernel_init=linear_kernel_init,
                linear_bias_init=linear_bias_init,
                order=order,
                project_in=project_in,
                activation=activation,
            ),
            rngs,
        )

    def __call__(self, x: jax.Array, cond: jax.Array) -> jax.Array:
        """The module on its inputs.

        Returns:
          array like ``x``, dtype ``x.dtype`` (or ``dtype``).
        """
        return _nnx.forward(self, (x, cond), {})


class AdaLNZeroJoint(_nnx.Module):
    """adaLN-Zero over two token streams sharing one LayerNorm (diffusers ``CogVideoXLayerNormZero``;
    ``CogView3PlusAdaLayerNormZeroTextImage`` with ``num_chunks=12``).

    ``(shift, scale, gate, enc_shift, enc_scale, enc_gate) = linear(SiLU(emb))`` in ``emb``'s dtype;
    ``x_mod = LN(x) * (1 + scale) + shift`` and ``context_mod = LN(context) * (1 + enc_scale) +
    enc_shift`` (LayerNorm with affine, eps 1e-5), as :func:`jln.adaptive_layer_norm`. ``layout``
    and ``activation`` give CogView4's / GLM-Image's (interleaved chunks, no SiLU) and
    EasyAnimate's.

    The NNX twin of :class:`jln.linen.AdaLNZeroJoint` (same options, parameters and numbers).

    Args:
      cond_features: size of ``emb``'s last axis.
      features: d, the size of ``x``'s last axis (with ``axis_name``: the local size).
      eps: LayerNorm eps, added to the variance (torch's default 1e-5).
      elementwise_affine: the LayerNorm's own ``scale`` and ``bias``.
      use_bias: the Dense ``linear``'s bias.
      dtype: ``None``: output in ``x.dtype`` (Dense layers run in the main input's dtype); else
        compute in and return this dtype.
      param_dtype: dtype of the parameters (float32).
      impl: ``"auto"``, ``"xla"``, ``"native"`` or ``"pallas"``, as :func:`jln.layer_norm`.
      monitor: record per-row input/output statistics (``jln._monitor.row_stats``): linen sows them
        into ``"intermediates"``, NNX as an ``nnx.Intermediate``, both named ``"stats"``.
      axis_name: tensor parallelism inside ``jax.shard_map``/``jax.pmap`` with ``x``'s last axis
        split over ``axis_name``: ``features`` is then the local size d / n, the norm's statistics
        span the devices, and the Dense must produce each device's local block of every chunk:
        :func:`jln.shard_chunks` lays out a global kernel that way; the condition is replicated over
        ``axis_name``.
      axis_index_groups: with ``axis_name``, the device groups that each hold one row's blocks (as
        ``jax.lax.psum``).
      scale_init: the LayerNorm's ``scale`` initializer; ``None``: ones.
      bias_init: the LayerNorm's ``bias`` initializer; ``None``: zeros.
      linear_kernel_init: ``linear``'s kernel initializer; ``None``: torch ``nn.Linear``'s.
      linear_bias_init: ``linear``'s bias initializer; ``None``: torch ``nn.Linear``'s.
      num_chunks: 6 (CogVideoX: shift, scale, gate, enc_shift, enc_scale, enc_gate) or 12
        (CogView3-Plus: DiT's six for ``x``, then for ``context``; LayerNorms without affine).
      layout: how the chunks are laid out and returned: ``None`` (by ``num_chunks``: ``"cogvideox"``
        or ``"cogview3plus"``), ``"cogview4"`` (12 chunks, the image's and the text's interleaved:
        CogView4, GLM-Image) or ``"easyanimate"`` (CogVideoX's six, gates returned ``[B, d]``).
      activation: applied to ``emb`` before ``linear``: ``"silu"``; ``None`` for CogView4 / GLM-
        Image.
      rngs: ``nnx.Rngs`` for the Dense kernel init.

    Returns (``__call__(x, context, emb)``): ``(x_mod, context_mod, gate, enc_gate)`` with ``[B, 1,
    d]`` gates (6 chunks; ``[B, d]`` with ``layout="easyanimate"``); ``(x_mod, gate_msa, shift_mlp,
    scale_mlp, gate_mlp, context_mod, c_gate_msa, c_shift_mlp, c_scale_mlp, c_gate_mlp)`` with ``[B,
    d]`` chunks (12).

    Raises:
      TypeError, ValueError: non-floating inputs, mismatched sizes, an initializer that is not
        callable.

    Example:
      >>> import jax.numpy as jnp
      >>> from flax import nnx
      >>> from jln import nnx as jnnx
      >>> m = jnnx.AdaLNZeroJoint(4, 8, rngs=nnx.Rngs(0))
      >>> len(m(jnp.ones((2, 5, 8)), jnp.ones((2, 3, 8)), jnp.ones((2, 4))))
      4
    """

    _kind: ClassVar[Kind] = kinds.ADA_LN_ZERO_JOINT

    cond_features: int
    linear: _nnx.Params
    norm: _nnx.Params | None = None
    features: int
    eps: float
    elementwise_affine: bool
    use_bias: bool
    dtype: DTypeLike | None
    param_dtype: DTypeLike
    impl: Impl
    monitor: bool
    axis_name: Hashable | None
    axis_index_groups: Sequence[Sequence[int]] | None
    scale_init: Initializer | None
    bias_init: Initializer | None
    linear_kernel_init: Initializer | None
    linear_bias_init: Initializer | None
    num_chunks: int
    layout: Literal["cogvideox", "cogview3plus", "cogview4", "easyanimate"] | None
    activation: Literal["silu", "swish", "mish", "gelu", "relu", "sigmoid"] | None

    def __init__(
        self,
        cond_features: int,
        features: int,
        *,
        eps: float = 1e-05,
        elementwise_affine: bool = True,
        use_bias: bool = True,
        dtype: DTypeLike | None = None,
        param_dtype: DTypeLike = jnp.float32,
        impl: Impl = "auto",
        monitor: bool = False,
        axis_name: Hashable | None = None,
        axis_index_groups: Sequence[Sequence[int]] | None = None,
        scale_init: Initializer | None = None,
        bias_init: Initializer | None = None,
        linear_kernel_init: Initializer | None = None,
        linear_bias_init: Initializer | None = None,
        num_chunks: int = 6,
        layout: Literal["cogvideox", "cogview3plus", "cogview4", "easyanimate"] | None = None,
        activation: Literal["silu", "swish", "mish", "gelu", "relu", "sigmoid"] | None = "silu",
        rngs: nnx.Rngs | None = None,
    ) -> None:
        """Build the module: the arguments are the Args of the class docstring."""
        _nnx.build(
            self,
            (cond_features,),
            dict(
                features=features,
                eps=eps,
                elementwise_affine=elementwise_affine,
                use_bias=use_bias,
                dtype=dtype,
                param_dtype=param_dtype,
                impl=impl,
                monitor=monitor,
                axis_name=axis_name,
                axis_index_groups=axis_index_groups,
                scale_init=scale_init,
                bias_init=bias_init,
                linear_kernel_init=linear_kernel_init,
                linear_bias_init=linear_bias_init,
                num_chunks=num_chunks,
                layout=layout,
                activation=activation,
            ),
            rngs,
        )

    def __call__(self, x: jax.Array, context: jax.Array, emb: jax.Array) -> tuple[jax.Array, ...]:
        """The module on its inputs.

        Returns:
          ``(x_mod, context_mod, gate, enc_gate)`` with ``[B, 1, d]`` gates (6 chunks; ``[B, d]`` with
          ``layout="easyanimate"``); ``(x_mod, gate_msa, shift_mlp, scale_mlp, gate_mlp, context_mod,
          c_gate_msa, c_shift_mlp, c_scale_mlp, c_gate_mlp)`` with ``[B, d]`` chunks (12).
        """
        return _nnx.forward(self, (x, context, emb), {})


class AdaLNScale(_nnx.Module):
    """Scale-only adaptive norm (diffusers ``LuminaLayerNormContinuous``,
    ``MochiLayerNormContinuous``).

    ``scale = linear_1(SiLU(cond))`` (in ``x``'s dtype); ``norm(x) * (1 + scale)``, then the
    optional ``linear_2``. ``norm`` is a LayerNorm (:func:`jln.adaptive_layer_norm`) or diffusers'
    RMSNorm (:func:`jln.adaptive_rms_norm`, ``fp32_rms_norm``: Mochi's float32 modulation).

    The NNX twin of :class:`jln.linen.AdaLNScale` (same options, parameters and numbers).

    Args:
      cond_features: size of ``cond``'s last axis.
      features: d, the size of ``x``'s last axis (with ``axis_name``: the local size).
      eps: the norm's eps (1e-5).
      elementwise_affine: the norm's own ``scale`` (and ``bias`` for layer_norm).
      use_bias: the Dense biases and the LayerNorm bias (diffusers' ``bias``).
      norm_type: ``"layer_norm"``, ``"rms_norm"`` (diffusers' RMSNorm) or ``"fp32_rms_norm"``
        (Mochi: float32 norm and modulation, one rounding).
      out_features: with a size, a Dense ``linear_2`` (``features -> out_features``) after the
        modulation (Lumina's ``out_dim``).
      dtype: ``None``: output in ``x.dtype`` (Dense layers run in the main input's dtype); else
        compute in and return this dtype.
      param_dtype: dtype of the parameters (float32).
      impl: ``"auto"``, ``"xla"``, ``"native"`` or ``"pallas"``, as :func:`jln.layer_norm`.
      monitor: record per-row input/output statistics (``jln._monitor.row_stats``): linen sows them
        into ``"intermediates"``, NNX as an ``nnx.Intermediate``, both named ``"stats"``.
      axis_name: tensor parallelism inside ``jax.shard_map``/``jax.pmap`` with ``x``'s last axis
        split over ``axis_name``: ``features`` is then the local size d / n, the norm's statistics
        span the devices, and the Dense must produce each device's local block of every chunk:
        :func:`jln.shard_chunks` lays out a global kernel that way; the condition is replicated over
        ``axis_name``.
      axis_index_groups: with ``axis_name``, the device groups that each hold one row's blocks (as
        ``jax.lax.psum``).
      scale_init: the norm's ``scale`` initializer (with ``elementwise_affine``); ``None``: ones.
      bias_init: the norm's ``bias`` initializer; ``None``: zeros.
      linear_kernel_init: ``linear``'s kernel initializer; ``None``: torch ``nn.Linear``'s.
      linear_bias_init: ``linear``'s bias initializer; ``None``: torch ``nn.Linear``'s.
      rngs: ``nnx.Rngs`` for the Dense kernel init.

    Returns (``__call__(x, cond)``): array like ``x`` (last axis ``out_features`` with
    ``linear_2``).

    Raises:
      TypeError, ValueError: non-floating inputs, mismatched sizes, an unknown ``norm_type``,
        ``fp32_rms_norm`` with ``elementwise_affine``.

    Example:
      >>> import jax.numpy as jnp
      >>> from flax import nnx
      >>> from jln import nnx as jnnx
      >>> jnnx.AdaLNScale(4, 8, rngs=nnx.Rngs(0))(jnp.ones((2, 5, 8)), jnp.ones((2, 4))).shape
      (2, 5, 8)
    """

    _kind: ClassVar[Kind] = kinds.ADA_LN_SCALE

    cond_features: int
    linear_1: _nnx.Params
    norm: _nnx.Params | None = None
    linear_2: _nnx.Params | None = None
    features: int
    eps: float
    elementwise_affine: bool
    use_bias: bool
    norm_type: Literal["layer_norm", "rms_norm", "fp32_rms_norm"]
    out_features: int | None
    dtype: DTypeLike | None
    param_dtype: DTypeLike
    impl: Impl
    monitor: bool
    axis_name: Hashable | None
    axis_index_groups: Sequence[Sequence[int]] | None
    scale_init: Initializer | None
    bias_init: Initializer | None
    linear_kernel_init: Initializer | None
    linear_bias_init: Initializer | None

    def __init__(
        self,
        cond_features: int,
        features: int,
        *,
        eps: float = 1e-05,
        elementwise_affine: bool = True,
        use_bias: bool = True,
        norm_type: Literal["layer_norm", "rms_norm", "fp32_rms_norm"] = "layer_norm",
        out_features: int | None = None,
        dtype: DTypeLike | None = None,
        param_dtype: DTypeLike = jnp.float32,
        impl: Impl = "auto",
        monitor: bool = False,
        axis_name: Hashable | None = None,
        axis_index_groups: Sequence[Sequence[int]] | None = None,
        scale_init: Initializer | None = None,
        bias_init: Initializer | None = None,
        linear_kernel_init: Initializer | None = None,
        linear_bias_init: Initializer | None = None,
        rngs: nnx.Rngs | None = None,
    ) -> None:
        """Build the module: the arguments are the Args of the class docstring."""
        _nnx.build(
            self,
            (cond_features,),
            dict(
                features=features,
                eps=eps,
                elementwise_affine=elementwise_affine,
                use_bias=use_bias,
                norm_type=norm_type,
                out_features=out_features,
                dtype=dtype,
                param_dtype=param_dtype,
                impl=impl,
                monitor=monitor,
                axis_name=axis_name,
                axis_index_groups=axis_index_groups,
                scale_init=scale_init,
                bias_init=bias_init,
                linear_kernel_init=linear_kernel_init,
                linear_bias_init=linear_bias_init,
            ),
            rngs,
        )

    def __call__(self, x: jax.Array, cond: jax.Array) -> jax.Array:
        """The module on its inputs.

        Returns:
          array like ``x`` (last axis ``out_features`` with ``linear_2``).
        """
        return _nnx.forward(self, (x, cond), {})


class AdaLNSingle(_nnx.Module):
    """PixArt's adaLN-single (diffusers ``AdaLayerNormSingle``): the one timestep embedding that all
    blocks' ``scale_shift_table`` modulations share; it normalizes nothing itself.

    ``cond = linear_2(SiLU(linear_1(sinusoid(t))))`` (the sinusoid of 256 channels, cos then sin, in
    float32, cast to ``hidden_dtype``), plus the resolution and aspect-ratio embeddings with
    ``use_additional_conditions``; returns ``(linear(SiLU(cond)), cond)``, the ``[B, 6d]``
    modulation and the embedded timestep.

    The NNX twin of :class:`jln.linen.AdaLNSingle` (same options, parameters and numbers).

    Args:
      features: d, the embedding size (PixArt's ``embedding_dim``).
      use_additional_conditions: embed the resolution and aspect ratio too (PixArt-alpha at 1024
        px).
      dtype: ``None``: output in ``x.dtype`` (Dense layers run in the main input's dtype); else
        compute in and return this dtype.
      param_dtype: dtype of the parameters (float32).
      impl: ``"auto"``, ``"xla"``, ``"native"`` or ``"pallas"``, as :func:`jln.layer_norm`.
      monitor: record per-row input/output statistics (``jln._monitor.row_stats``): linen sows them
        into ``"intermediates"``, NNX as an ``nnx.Intermediate``, both named ``"stats"``.
      kernel_init: initializer of every Dense kernel; ``None``: torch's.
      bias_init: initializer of every Dense bias; ``None``: torch's.
      num_chunks: modulation chunks ``linear`` produces (PixArt: 6; LTX-2's ``num_mod_params``).
      rngs: ``nnx.Rngs`` for the Dense kernel init.

    Returns (``__call__(timestep, resolution=None, aspect_ratio=None, hidden_dtype=None)``, torch's
    arguments): ``([B, num_chunks * features], [B, features])`` in ``hidden_dtype`` (default
    ``dtype``, else float32).

    Raises:
      ValueError: a ``timestep`` that is not 1-D, missing or misshapen size conditions, ``features``
        not a multiple of 3 with ``use_additional_conditions``.

    Example:
      >>> import jax.numpy as jnp
      >>> from flax import nnx
      >>> from jln import nnx as jnnx
      >>> m = jnnx.AdaLNSingle(8, rngs=nnx.Rngs(0))
      >>> [o.shape for o in m(jnp.array([1.0, 500.0]))]
      [(2, 48), (2, 8)]
    """

    _kind: ClassVar[Kind] = kinds.ADA_LN_SINGLE

    emb: _nnx.Params
    linear: _nnx.Params
    features: int
    use_additional_conditions: bool
    dtype: DTypeLike | None
    param_dtype: DTypeLike
    impl: Impl
    monitor: bool
    kernel_init: Initializer | None
    bias_init: Initializer | None
    num_chunks: int

    def __init__(
        self,
        features: int,
        *,
        use_additional_conditions: bool = False,
        dtype: DTypeLike | None = None,
        param_dtype: DTypeLike = jnp.float32,
        impl: Impl = "auto",
        monitor: bool = False,
        kernel_init: Initializer | None = None,
        bias_init: Initializer | None = None,
        num_chunks: int = 6,
        rngs: nnx.Rngs | None = None,
    ) -> None:
        """Build the module: the arguments are the Args of the class docstring."""
        _nnx.build(
            self,
            (),
            dict(
                features=features,
                use_additional_conditions=use_additional_conditions,
                dtype=dtype,
                param_dtype=param_dtype,
                impl=impl,
                monitor=monitor,
                kernel_init=kernel_init,
                bias_init=bias_init,
                num_chunks=num_chunks,
            ),
            rngs,
        )

    def __call__(
        self,
        timestep: jax.Array,
        resolution: jax.Array | None = None,
        aspect_ratio: jax.Array | None = None,
        hidden_dtype: DTypeLike | None = None,
    ) -> tuple[jax.Array, jax.Array]:
        """The module on its inputs (torch's arguments).

        Returns:
          ``([B, num_chunks * features], [B, features])`` in ``hidden_dtype`` (default ``dtype``, else
          float32).
        """
        return _nnx.forward(self, (timestep,), {"resolution": resolution, "aspect_ratio": aspect_ratio, "hidden_dtype": hidden_dtype})


class AdaGroupNorm(_nnx.Module):
    """GroupNorm modulated by a condition (diffusers ``AdaGroupNorm``, Kandinsky 3's
    ``Kandinsky3ConditionalGroupNorm``), channels first.

    ``(scale, shift) = linear(act(emb))`` in ``emb``'s dtype; ``y = group_norm(x) * (1 + scale) +
    shift`` with ``group_norm`` torch's (no affine, eps inside the square root, float32 statistics,
    rounded to ``x.dtype``: :func:`jln.group_norm`) and the modulation rounded after each op
    (:func:`jln.modulate`).

    The NNX twin of :class:`jln.linen.AdaGroupNorm` (same options, parameters and numbers).

    Args:
      cond_features: size of ``emb``'s last axis.
      features: C, the channels of ``x`` (axis 1, torch's NCHW).
      num_groups: groups of channels the statistics run over (torch's ``num_groups``).
      eps: the GroupNorm's eps (1e-5).
      activation: applied to ``emb`` before ``linear``: ``None`` (diffusers' default), ``"silu"``
        (Kandinsky 3), ``"swish"``, ``"mish"``, ``"gelu"``, ``"relu"``.
      use_bias: the Dense's bias.
      proj_name: the Dense's parameter name: ``"linear"`` (diffusers ``AdaGroupNorm``) or
        ``"context_mlp"`` (Kandinsky 3, torch ``context_mlp.1``).
      dtype: ``None``: output in ``x.dtype`` (Dense layers run in the main input's dtype); else
        compute in and return this dtype.
      param_dtype: dtype of the parameters (float32).
      impl: ``"auto"``, ``"xla"``, ``"native"`` or ``"pallas"``, as :func:`jln.layer_norm`.
      monitor: record per-row input/output statistics (``jln._monitor.row_stats``): linen sows them
        into ``"intermediates"``, NNX as an ``nnx.Intermediate``, both named ``"stats"``.
      linear_kernel_init: ``linear``'s kernel initializer; ``None``: torch ``nn.Linear``'s.
      linear_bias_init: ``linear``'s bias initializer; ``None``: torch ``nn.Linear``'s.
      rngs: ``nnx.Rngs`` for the Dense kernel init.

    Returns (``__call__(x, emb)``): ``x [B, C, *spatial]`` modulated by ``emb [B, cond_features]``;
    dtype the promotion of ``x``'s and ``emb``'s (or ``dtype``).

    Raises:
      TypeError, ValueError: non-floating inputs, ``num_groups`` not dividing ``features``, an
        unknown ``activation``, an ``emb`` that is not ``[B, cond_features]``.

    Example:
      >>> import jax.numpy as jnp
      >>> from flax import nnx
      >>> from jln import nnx as jnnx
      >>> m = jnnx.AdaGroupNorm(3, 8, num_groups=2, rngs=nnx.Rngs(0))
      >>> m(jnp.ones((2, 8, 4, 4)), jnp.ones((2, 3))).shape
      (2, 8, 4, 4)
    """

    _kind: ClassVar[Kind] = conditioned.ADA_GROUP_NORM

    cond_features: int
    linear: _nnx.Params | None = None
    context_mlp: _nnx.Params | None = None
    features: int
    num_groups: int
    eps: float
    activation: Literal["silu", "swish", "mish", "gelu", "relu", "sigmoid"] | None
    use_bias: bool
    proj_name: Literal["linear", "context_mlp"]
    dtype: DTypeLike | None
    param_dtype: DTypeLike
    impl: Impl
    monitor: bool
    linear_kernel_init: Initializer | None
    linear_bias_init: Initializer | None

    def __init__(
        self,
        cond_features: int,
        features: int,
        *,
        num_groups: int = 32,
        eps: float = 1e-05,
        activation: Literal["silu", "swish", "mish", "gelu", "relu", "sigmoid"] | None = None,
        use_bias: bool = True,
        proj_name: Literal["linear", "context_mlp"] = "linear",
        dtype: DTypeLike | None = None,
        param_dtype: DTypeLike = jnp.float32,
        impl: Impl = "auto",
        monitor: bool = False,
        linear_kernel_init: Initializer | None = None,
        linear_bias_init: Initializer | None = None,
        rngs: nnx.Rngs | None = None,
    ) -> None:
        """Build the module: the arguments are the Args of the class docstring."""
        _nnx.build(
            self,
            (cond_features,),
            dict(
                features=features,
                num_groups=num_groups,
                eps=eps,
                activation=activation,
                use_bias=use_bias,
                proj_name=proj_name,
                dtype=dtype,
                param_dtype=param_dtype,
                impl=impl,
                monitor=monitor,
                linear_kernel_init=linear_kernel_init,
                linear_bias_init=linear_bias_init,
            ),
            rngs,
        )

    def __call__(self, x: jax.Array, emb: jax.Array) -> jax.Array:
        """The module on its inputs.

        Returns:
          ``x [B, C, *spatial]`` modulated by ``emb [B, cond_features]``; dtype the promotion of ``x``'s
          and ``emb``'s (or ``dtype``).
        """
        return _nnx.forward(self, (x, emb), {})


class AdaLNTable(_nnx.Module):
    """LayerNorm modulated by a table of rows plus the condition (diffusers ``SanaModulatedNorm``,
    PixArt's ``scale_shift_table``).

    ``shift = table[0] + temb``, ``scale = table[1] + temb`` (each rounded to the promotion of their
    dtypes), ``y = LN(x) * (1 + scale) + shift`` as :func:`jln.adaptive_layer_norm`. The table is
    the transformer block's parameter, so it is an input here as in torch; ``temb`` is ``[B, d]``
    (broadcast over the tokens: Sana) or ``x``'s shape (per token: Sana-Video).

    The NNX twin of :class:`jln.linen.AdaLNTable` (same options, parameters and numbers).

    Args:
      features: d, the size of ``x``'s last axis (with ``axis_name``: the local size).
      eps: the LayerNorm's eps (Sana: 1e-6).
      elementwise_affine: the LayerNorm's own ``scale`` and ``bias`` (Sana: none).
      use_bias: with ``elementwise_affine``, the LayerNorm's ``bias``.
      order: the rows of ``scale_shift_table``: ``"shift_scale"`` (Sana) or a tuple of names with
        ``"shift"`` and/or ``"scale"``.
      dtype: ``None``: output in ``x.dtype`` (Dense layers run in the main input's dtype); else
        compute in and return this dtype.
      param_dtype: dtype of the parameters (float32).
      impl: ``"auto"``, ``"xla"``, ``"native"`` or ``"pallas"``, as :func:`jln.layer_norm`.
      monitor: record per-row input/output statistics (``jln._monitor.row_stats``): linen sows them
        into ``"intermediates"``, NNX as an ``nnx.Intermediate``, both named ``"stats"``.
      scale_init: the LayerNorm's ``scale`` initializer; ``None``: ones.
      bias_init: the LayerNorm's ``bias`` initializer; ``None``: zeros.
      rngs: the key of an initializer other than ones and zeros; otherwise unused.

    Returns (``__call__(x, temb, scale_shift_table)``): array like ``x``, dtype the promotion of
    ``x``'s, ``temb``'s and the table's (or ``dtype``).

    Raises:
      TypeError, ValueError: non-floating inputs, a table that is not ``[k, features]``, a ``temb``
        that does not broadcast against ``x``.

    Example:
      >>> import jax.numpy as jnp
      >>> from flax import nnx
      >>> from jln import nnx as jnnx
      >>> jnnx.AdaLNTable(8)(jnp.ones((2, 5, 8)), jnp.ones((2, 8)), jnp.zeros((2, 8))).shape
      (2, 5, 8)
    """

    _kind: ClassVar[Kind] = conditioned.ADA_LN_TABLE

    norm: _nnx.Params | None = None
    features: int
    eps: float
    elementwise_affine: bool
    use_bias: bool
    order: ChunkOrder
    dtype: DTypeLike | None
    param_dtype: DTypeLike
    impl: Impl
    monitor: bool
    scale_init: Initializer | None
    bias_init: Initializer | None

    def __init__(
        self,
        features: int,
        *,
        eps: float = 1e-06,
        elementwise_affine: bool = False,
        use_bias: bool = True,
        order: ChunkOrder = "shift_scale",
        dtype: DTypeLike | None = None,
        param_dtype: DTypeLike = jnp.float32,
        impl: Impl = "auto",
        monitor: bool = False,
        scale_init: Initializer | None = None,
        bias_init: Initializer | None = None,
        rngs: nnx.Rngs | None = None,
    ) -> None:
        """Build the module: the arguments are the Args of the class docstring."""
        _nnx.build(
            self,
            (),
            dict(
                features=features,
                eps=eps,
                elementwise_affine=elementwise_affine,
                use_bias=use_bias,
                order=order,
                dtype=dtype,
                param_dtype=param_dtype,
                impl=impl,
                monitor=monitor,
                scale_init=scale_init,
                bias_init=bias_init,
            ),
            rngs,
        )

    def __call__(self, x: jax.Array, temb: jax.Array, scale_shift_table: jax.Array) -> jax.Array:
        """The module on its inputs.

        Returns:
          array like ``x``, dtype the promotion of ``x``'s, ``temb``'s and the table's (or ``dtype``).
        """
        return _nnx.forward(self, (x, temb, scale_shift_table), {})


class ModulatedRMSNorm(_nnx.Module):
    """RMSNorm scaled by a given factor in float32 (diffusers ``MochiModulatedRMSNorm``); no
    parameters.

    ``y = (f32(x) * rsqrt(mean(f32(x)^2) + eps) * f32(scale))`` rounded once to ``x.dtype``
    (:func:`jln.adaptive_rms_norm` with ``modulation="float32"``, ``scale_offset=0``): the caller
    passes the whole factor, e.g. ``1 + scale_msa[:, None]``.

    The NNX twin of :class:`jln.linen.ModulatedRMSNorm` (same options, parameters and numbers).

    Args:
      eps: added to the mean square (Mochi passes its own).
      dtype: ``None``: output in ``x.dtype`` (Dense layers run in the main input's dtype); else
        compute in and return this dtype.
      param_dtype: dtype of the parameters (float32).
      impl: ``"auto"``, ``"xla"``, ``"native"`` or ``"pallas"``, as :func:`jln.layer_norm`.
      rngs: unused (no parameters).

    Returns (``__call__(x, scale=None)``): array of ``x.shape`` and ``x.dtype`` (or ``dtype``);
    ``scale`` ``[d]``, ``[B, d]``, ``x``'s shape or ``x``'s rank with size-1 axes.

    Raises:
      TypeError, ValueError: as :func:`jln.adaptive_rms_norm`.

    Example:
      >>> import jax.numpy as jnp
      >>> from flax import nnx
      >>> from jln import nnx as jnnx
      >>> jnnx.ModulatedRMSNorm(eps=1e-6)(jnp.ones((2, 5, 8))).shape
      (2, 5, 8)
    """

    _kind: ClassVar[Kind] = conditioned.MODULATED_RMS_NORM

    eps: float
    dtype: DTypeLike | None
    param_dtype: DTypeLike
    impl: Impl

    def __init__(
        self,
        *,
        eps: float = 1e-05,
        dtype: DTypeLike | None = None,
        param_dtype: DTypeLike = jnp.float32,
        impl: Impl = "auto",
        rngs: nnx.Rngs | None = None,
    ) -> None:
        """Build the module: the arguments are the Args of the class docstring."""
        _nnx.build(self, (), dict(eps=eps, dtype=dtype, param_dtype=param_dtype, impl=impl), rngs)

    def __call__(self, x: jax.Array, scale: jax.Array | None = None) -> jax.Array:
        """The module on its inputs.

        Returns:
          array of ``x.shape`` and ``x.dtype`` (or ``dtype``); ``scale`` ``[d]``, ``[B, d]``, ``x``'s
          shape or ``x``'s rank with size-1 axes.
        """
        return _nnx.forward(self, (x,), {"scale": scale})


class AdaRMSNorm(_nnx.Module):
    """RMSNorm with scale, shift and a residual gate predicted from a condition (transformers
    ``PI05AdaptiveRMSNorm``).

    ``(scale, shift, gate) = dense(cond)`` in ``cond``'s dtype (no activation); ``y = f32(x) *
    rsqrt(mean(f32(x)^2) + eps) * (1 + f32(scale)) + f32(shift)`` in float32, rounded once to
    ``x.dtype`` (:func:`jln.adaptive_rms_norm` with ``modulation="float32"``).

    The NNX twin of :class:`jln.linen.AdaRMSNorm` (same options, parameters and numbers).

    Args:
      cond_features: size of ``cond``'s last axis.
      features: d, the size of ``x``'s last axis (with ``axis_name``: the local size).
      eps: added to the mean square (PI0.5: 1e-6).
      use_bias: the Dense ``dense``'s bias.
      dtype: ``None``: output in ``x.dtype`` (Dense layers run in the main input's dtype); else
        compute in and return this dtype.
      param_dtype: dtype of the parameters (float32).
      impl: ``"auto"``, ``"xla"``, ``"native"`` or ``"pallas"``, as :func:`jln.layer_norm`.
      monitor: record per-row input/output statistics (``jln._monitor.row_stats``): linen sows them
        into ``"intermediates"``, NNX as an ``nnx.Intermediate``, both named ``"stats"``.
      kernel_init: initializer of every Dense kernel; ``None``: torch's.
      bias_init: initializer of every Dense bias; ``None``: torch's.
      rngs: ``nnx.Rngs`` for the Dense kernel init.

    Returns (``__call__(x, cond)``): ``(y, gate)``: ``y`` like ``x``, ``gate [B, 1, d]``, both in
    ``x.dtype`` (or ``dtype``).

    Raises:
      TypeError, ValueError: non-floating inputs, a ``cond`` that is not ``[B, cond_features]``,
        mismatched sizes.

    Example:
      >>> import jax.numpy as jnp
      >>> from flax import nnx
      >>> from jln import nnx as jnnx
      >>> y, gate = jnnx.AdaRMSNorm(4, 8, rngs=nnx.Rngs(0))(jnp.ones((2, 5, 8)), jnp.ones((2, 4)))
      >>> gate.shape
      (2, 1, 8)
    """

    _kind: ClassVar[Kind] = conditioned.ADA_RMS_NORM

    cond_features: int
    dense: _nnx.Params
    features: int
    eps: float
    use_bias: bool
    dtype: DTypeLike | None
    param_dtype: DTypeLike
    impl: Impl
    monitor: bool
    kernel_init: Initializer | None
    bias_init: Initializer | None

    def __init__(
        self,
        cond_features: int,
        features: int,
        *,
        eps: float = 1e-06,
        use_bias: bool = True,
        dtype: DTypeLike | None = None,
        param_dtype: DTypeLike = jnp.float32,
        impl: Impl = "auto",
        monitor: bool = False,
        kernel_init: Initializer | None = None,
        bias_init: Initializer | None = None,
        rngs: nnx.Rngs | None = None,
    ) -> None:
        """Build the module: the arguments are the Args of the class docstring."""
        _nnx.build(
            self,
            (cond_features,),
            dict(
                features=features,
                eps=eps,
                use_bias=use_bias,
                dtype=dtype,
                param_dtype=param_dtype,
                impl=impl,
                monitor=monitor,
                kernel_init=kernel_init,
                bias_init=bias_init,
            ),
            rngs,
        )

    def __call__(self, x: jax.Array, cond: jax.Array) -> tuple[jax.Array, jax.Array]:
        """The module on its inputs.

        Returns:
          ``(y, gate)``: ``y`` like ``x``, ``gate [B, 1, d]``, both in ``x.dtype`` (or ``dtype``).
        """
        return _nnx.forward(self, (x, cond), {})


class AdaLNSigmoidGate(_nnx.Module):
    """LayerNorm gated by a sigmoid of the condition (transformers ``EsmFold2AdaptiveLayerNorm``).

    ``c = cond_norm(cond)`` (LayerNorm with a weight, no bias, rounded to ``cond``'s dtype); ``y =
    sigmoid(gate_proj(c)) * LN(f32(x)) + shift_proj(c)`` with the gate and shift in ``cond``'s dtype
    and the rest in float32, rounded once to ``x.dtype`` (:func:`jln.adaptive_layer_norm` with
    ``scale_offset=0``). No ``1 +``: the gate is the whole factor.

    The NNX twin of :class:`jln.linen.AdaLNSigmoidGate` (same options, parameters and numbers).

    Args:
      cond_features: size of ``cond``'s last axis.
      features: d, the size of ``x``'s last axis (with ``axis_name``: the local size).
      eps: both LayerNorms' eps (1e-5).
      dtype: ``None``: output in ``x.dtype`` (Dense layers run in the main input's dtype); else
        compute in and return this dtype.
      param_dtype: dtype of the parameters (float32).
      impl: ``"auto"``, ``"xla"``, ``"native"`` or ``"pallas"``, as :func:`jln.layer_norm`.
      monitor: record per-row input/output statistics (``jln._monitor.row_stats``): linen sows them
        into ``"intermediates"``, NNX as an ``nnx.Intermediate``, both named ``"stats"``.
      scale_init: ``cond_norm``'s ``scale`` initializer; ``None``: ones.
      kernel_init: initializer of every Dense kernel; ``None``: torch's.
      bias_init: initializer of every Dense bias; ``None``: torch's.
      rngs: ``nnx.Rngs`` for the Dense kernel init.

    Returns (``__call__(x, cond)``): array like ``x``, dtype ``x.dtype`` (or ``dtype``); ``cond``
    ``[B, c]`` (broadcast over the tokens) or ``x``'s leading shape with ``c`` features.

    Raises:
      TypeError, ValueError: non-floating inputs, mismatched sizes.

    Example:
      >>> import jax.numpy as jnp
      >>> from flax import nnx
      >>> from jln import nnx as jnnx
      >>> jnnx.AdaLNSigmoidGate(4, 8, rngs=nnx.Rngs(0))(jnp.ones((2, 5, 8)), jnp.ones((2, 4))).shape
      (2, 5, 8)
    """

    _kind: ClassVar[Kind] = conditioned.ADA_LN_SIGMOID_GATE

    cond_features: int
    cond_norm: _nnx.Params
    gate_proj: _nnx.Params
    shift_proj: _nnx.Params
    features: int
    eps: float
    dtype: DTypeLike | None
    param_dtype: DTypeLike
    impl: Impl
    monitor: bool
    scale_init: Initializer | None
    kernel_init: Initializer | None
    bias_init: Initializer | None

    def __init__(
        self,
        cond_features: int,
        features: int,
        *,
        eps: float = 1e-05,
        dtype: DTypeLike | None = None,
        param_dtype: DTypeLike = jnp.float32,
        impl: Impl = "auto",
        monitor: bool = False,
        scale_init: Initializer | None = None,
        kernel_init: Initializer | None = None,
        bias_init: Initializer | None = None,
        rngs: nnx.Rngs | None = None,
    ) -> None:
        """Build the module: the arguments are the Args of the class docstring."""
        _nnx.build(
            self,
            (cond_features,),
            dict(
                features=features,
                eps=eps,
                dtype=dtype,
                param_dtype=param_dtype,
                impl=impl,
                monitor=monitor,
                scale_init=scale_init,
                kernel_init=kernel_init,
                bias_init=bias_init,
            ),
            rngs,
        )

    def __call__(self, x: jax.Array, cond: jax.Array) -> jax.Array:
        """The module on its inputs.

        Returns:
          array like ``x``, dtype ``x.dtype`` (or ``dtype``); ``cond`` ``[B, c]`` (broadcast over the
          tokens) or ``x``'s leading shape with ``c`` features.
        """
        return _nnx.forward(self, (x, cond), {})
