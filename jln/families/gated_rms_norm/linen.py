# Written by `python -m jln._faces` from the module kinds of jln/families/gated_rms_norm/module.py: edit those and run it
# again (tests/test_faces.py fails when this file is stale).
"""The linen face of the gated_rms_norm family: :class:`GatedRMSNorm`."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import ClassVar, Literal

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.typing import DTypeLike

from jln import _linen
from jln._modules import Initializer, Kind
from jln._platform import Impl
from jln._validate import Axis
from jln.families.gated_rms_norm import module as kinds


class GatedRMSNorm(_linen.Module):
    """Gated RMSNorm (Mamba-2, hybrid SSMs): ``rms_norm(x * silu(gate)) * scale`` or ``rms_norm(x) *
    scale * silu(gate)``.

    The gate order, groups and exact cast order of each convention are those of
    :func:`jln.gated_rms_norm`; ``gate`` (x's shape) is optional at the call.

    Attributes:
      eps: added to the mean square (transformers' default 1e-6).
      convention: ``"mamba"``, ``"qwen3_next"`` or ``"float32"`` (or an alias): the cast order of
        :func:`jln.gated_rms_norm`. With ``dtype=None`` the output dtype is the convention's
        (``"mamba"``: bf16 x with float32 scale gives float32).
      group_size: statistics per group of this many channels (``None``: the whole row).
      norm_before_gate: ``None``: the convention's gate order.
      activation: the gate's activation, ``"silu"`` or ``"sigmoid"``.
      axis: axis or axes to normalize over; parameters have the shape of ``x`` there.
      use_scale: learnable ``scale``.
      dtype: ``None``: output in ``x.dtype`` (Dense layers run in the main input's dtype); else
        compute in and return this dtype.
      param_dtype: dtype of the parameters (float32).
      impl: ``"auto"``, ``"xla"``, ``"native"`` or ``"pallas"``, as :func:`jln.layer_norm`.
      monitor: record per-row input/output statistics (``jln._monitor.row_stats``): linen sows them
        into ``"intermediates"``, NNX as an ``nnx.Intermediate``, both named ``"stats"``.
      axis_name: inside ``jax.shard_map``/``jax.pmap``, the mesh axis over which the normalized axis
        is split (tensor parallelism); parameters are then the local blocks, see
        :func:`jln.layer_norm`. The monitor's statistics stay per device.
      axis_index_groups: with ``axis_name``, the device groups that each hold one row's blocks (as
        ``jax.lax.psum``).
      scale_init: initializer ``init(key, shape, dtype)`` of the norm's ``scale``; ``None``: ones.
        Wrap one in flax's ``with_partitioning`` (linen: or ``with_logical_partitioning``) to
        annotate how a sharded model splits the parameter.

    Returns (``__call__(x, gate=None)``): array of ``x.shape``, dtype by the convention (or
    ``dtype``).

    Raises:
      TypeError, ValueError: as :func:`jln.gated_rms_norm`; otherwise as :class:`LayerNorm`.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from jln import linen as jnn
      >>> m = jnn.GatedRMSNorm(group_size=2)
      >>> x = jnp.ones((2, 4))
      >>> m.apply(m.init(jax.random.key(0), x), x, x).shape
      (2, 4)
    """

    _kind: ClassVar[Kind] = kinds.GATED_RMS_NORM

    eps: float = 1e-06
    convention: Literal["mamba", "mamba2", "bamba", "zamba2", "nemotron_h", "granitemoehybrid", "qwen3_next", "qwen3_5", "olmo_hybrid", "float32", "falcon_h1", "mamba_ssm"] = "mamba"
    group_size: int | None = None
    norm_before_gate: bool | None = None
    activation: Literal["silu", "sigmoid"] = "silu"
    axis: Axis = -1
    use_scale: bool = True
    dtype: DTypeLike | None = None
    param_dtype: DTypeLike = jnp.float32
    impl: Impl = "auto"
    monitor: bool = False
    axis_name: Hashable | None = None
    axis_index_groups: Sequence[Sequence[int]] | None = None
    scale_init: Initializer | None = None

    @nn.compact
    def __call__(self, x: jax.Array, gate: jax.Array | None = None) -> jax.Array:
        """The module on its inputs.

        Returns:
          array of ``x.shape``, dtype by the convention (or ``dtype``).
        """
        return _linen.forward(self, (x,), {"gate": gate})
