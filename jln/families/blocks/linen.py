# Written by `python -m jln._faces` from the module kinds of jln/families/blocks/module.py: edit those and run it
# again (tests/test_faces.py fails when this file is stale).
"""The linen face of the blocks family: :class:`TransformerEncoderLayer`, :class:`DiTBlock`."""

from __future__ import annotations

from typing import ClassVar, Literal

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.typing import DTypeLike

from jln import _linen
from jln._modules import Initializer, Kind
from jln._platform import Impl
from jln.families.blocks import module as kinds


class TransformerEncoderLayer(_linen.Module):
    """``torch.nn.TransformerEncoderLayer``: same options (in torch's order), same eval-mode numbers.

    Post-LN (``norm_first=False``): ``x = norm1(x + SA(x)); x = norm2(x + FF(x))``. Pre-LN
    (``norm_first=True``): ``x = x + SA(norm1(x)); x = x + FF(norm2(x))``. ``SA`` is multi-head
    self-attention (scaled dot product, softmax in float32), ``FF(x) =
    linear2(dropout(activation(linear1(x))))``; norms are :func:`jln.layer_norm`. Dropout is off
    unless asked for: linen ``deterministic=False`` at the call (rng stream ``"dropout"``); the NNX
    module's ``nnx.Dropout`` is on after construction (like a fresh torch module), off after
    ``.eval()``, on again after ``.train()``.

    Sharding: under ``jax.jit`` with ``NamedSharding`` the batch and sequence axes of the input may
    be split across devices (data/sequence parallelism; XLA partitions attention and the norms). The
    hidden axis must not be split: the attention and feed-forward layers are not tensor-parallel, so
    the block takes no ``axis_name``.

    Attributes:
      d_model: the model width, as torch's ``nn.TransformerEncoderLayer``.
      nhead: attention heads, as torch's ``nn.TransformerEncoderLayer``.
      dim_feedforward: the feed-forward width, as torch's ``nn.TransformerEncoderLayer``.
      dropout: dropout rate on the attention weights, after the activation and on each branch (off
        unless asked for: linen ``deterministic=False``, NNX ``.train()``).
      activation: ``"relu"`` or ``"gelu"`` (exact).
      layer_norm_eps: the LayerNorms' eps, as torch's ``nn.TransformerEncoderLayer``.
      batch_first: ``src`` is ``[B, T, D]`` rather than ``[T, B, D]``.
      norm_first: Pre-LN (``x + SA(norm1(x))``) rather than Post-LN.
      bias: biases in the Linear layers and the LayerNorms.
      dtype: compute dtype (default ``src.dtype``).
      param_dtype: dtype of the parameters (float32).
      impl: ``"auto"``, ``"xla"``, ``"native"`` or ``"pallas"``, as :func:`jln.layer_norm`.
      monitor: record per-row input/output statistics (``jln._monitor.row_stats``): linen sows them
        into ``"intermediates"``, NNX as an ``nnx.Intermediate``, both named ``"stats"``.
      kernel_init: initializer of every Linear kernel; ``None``: torch's (q/k/v xavier-uniform over
        the packed ``[3d, d]`` weight, the others U(+-1/sqrt(fan_in))).
      bias_init: initializer of every Linear bias; ``None``: torch's (attention biases 0,
        ``linear1``/``linear2`` U(+-1/sqrt(fan_in))). The LayerNorms start as ones and zeros.

    Returns (``__call__(src, src_mask=None, src_key_padding_mask=None, is_causal=False)``, torch's
    arguments in torch's order; linen adds ``*, deterministic=True``): array like ``src`` (``[T, B,
    D]``, ``[B, T, D]`` with ``batch_first``, or unbatched ``[T, D]``), dtype ``src.dtype`` (or
    ``dtype``). ``src_mask [T, T]`` or ``[B * nhead, T, T]``: True (bool) forbids a query from
    attending to a key, a float mask is added to the scores (torch). ``src_key_padding_mask [B, T]``
    (``[T]`` unbatched): True marks padding keys to ignore. ``is_causal=True`` without ``src_mask``
    applies the causal mask (each position sees itself and the ones before it; torch requires the
    mask with this hint). The monitor records ``{"norm1": ..., "norm2": ...}``.

    Raises:
      TypeError, ValueError: bad options (d_model not divisible by nhead, unknown activation,
        dropout outside [0, 1)), bad ``src`` or mask shape/dtype; NNX: ``TypeError`` without
        ``rngs``.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from jln import linen as jnn
      >>> m = jnn.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16)
      >>> src = jnp.ones((5, 2, 8))
      >>> m.apply(m.init(jax.random.key(0), src), src).shape
      (5, 2, 8)
    """

    _kind: ClassVar[Kind] = kinds.TRANSFORMER_ENCODER_LAYER

    d_model: int
    nhead: int
    dim_feedforward: int = 2048
    dropout: float = 0.1
    activation: Literal["relu", "gelu"] = "relu"
    layer_norm_eps: float = 1e-05
    batch_first: bool = False
    norm_first: bool = False
    bias: bool = True
    dtype: DTypeLike | None = None
    param_dtype: DTypeLike = jnp.float32
    impl: Impl = "auto"
    monitor: bool = False
    kernel_init: Initializer | None = None
    bias_init: Initializer | None = None

    @nn.compact
    def __call__(
        self,
        src: jax.Array,
        src_mask: jax.Array | None = None,
        src_key_padding_mask: jax.Array | None = None,
        is_causal: bool = False,
        *,
        deterministic: bool = True,
    ) -> jax.Array:
        """The module on its inputs (torch's arguments in torch's order; linen adds ``*, deterministic=True``).

        Returns:
          array like ``src`` (``[T, B, D]``, ``[B, T, D]`` with ``batch_first``, or unbatched ``[T,
          D]``), dtype ``src.dtype`` (or ``dtype``). ``src_mask [T, T]`` or ``[B * nhead, T, T]``: True
          (bool) forbids a query from attending to a key, a float mask is added to the scores (torch).
          ``src_key_padding_mask [B, T]`` (``[T]`` unbatched): True marks padding keys to ignore.
          ``is_causal=True`` without ``src_mask`` applies the causal mask (each position sees itself and
          the ones before it; torch requires the mask with this hint). The monitor records ``{"norm1":
          ..., "norm2": ...}``.
        """
        return _linen.forward(self, (src,), {"src_mask": src_mask, "src_key_padding_mask": src_key_padding_mask, "is_causal": is_causal}, deterministic)


class DiTBlock(_linen.Module):
    """A DiT block with adaLN-Zero conditioning (Peebles and Xie, 2023).

    ``emb = adaLN_modulation(SiLU(c))`` (zero-initialised Dense, 6 chunks in DiT's order); ``x = x +
    gate_msa * attn(LN(x) * (1 + scale_msa) + shift_msa)``, then ``x = x + gate_mlp * mlp(LN(x) * (1
    + scale_mlp) + shift_mlp)``; LayerNorms with eps 1e-6 and no affine, ``mlp =
    fc2(GELU_tanh(fc1(.)))``. At initialisation it returns ``x``.

    Sharding: under ``jax.jit`` with ``NamedSharding`` the batch and sequence axes of the input may
    be split across devices (data/sequence parallelism; XLA partitions attention and the norms). The
    hidden axis must not be split: the attention and MLP layers are not tensor-parallel, so the
    block takes no ``axis_name``. ``c`` follows the batch split.

    Attributes:
      hidden_size: the token width, as DiT.
      num_heads: attention heads, as DiT.
      mlp_ratio: the MLP's hidden size is ``int(hidden_size * mlp_ratio)``.
      dtype: compute dtype (default ``x.dtype``).
      param_dtype: dtype of the parameters (float32).
      impl: ``"auto"``, ``"xla"``, ``"native"`` or ``"pallas"``, as :func:`jln.layer_norm`.
      monitor: record per-row input/output statistics (``jln._monitor.row_stats``): linen sows them
        into ``"intermediates"``, NNX as an ``nnx.Intermediate``, both named ``"stats"``.
      kernel_init: initializer of every Dense kernel but ``adaLN_modulation``'s (zero, so the block
        starts as the identity); ``None``: DiT's xavier-uniform (q/k/v over the packed ``[3d, d]``
        weight).
      bias_init: initializer of every Dense bias but ``adaLN_modulation``'s; ``None``: zeros (DiT).

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

    _kind: ClassVar[Kind] = kinds.DIT_BLOCK

    hidden_size: int
    num_heads: int
    mlp_ratio: float = 4.0
    dtype: DTypeLike | None = None
    param_dtype: DTypeLike = jnp.float32
    impl: Impl = "auto"
    monitor: bool = False
    kernel_init: Initializer | None = None
    bias_init: Initializer | None = None

    @nn.compact
    def __call__(self, x: jax.Array, c: jax.Array) -> jax.Array:
        """The module on its inputs.

        Returns:
          ``x [B, T, D]`` updated, conditioned on ``c [B, D]``.
        """
        return _linen.forward(self, (x, c), {})
