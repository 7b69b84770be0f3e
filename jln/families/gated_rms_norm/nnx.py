# Written by `python -m jln._faces` from the module kinds of jln/families/gated_rms_norm/module.py: edit those and run it
# again (tests/test_faces.py fails when this file is stale).
"""The NNX face of the gated_rms_norm family: :class:`GatedRMSNorm`."""

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
from jln._validate import Axis
from jln.families.gated_rms_norm import module as kinds


class GatedRMSNorm(_nnx.Module):
    """Gated RMSNorm (Mamba-2, hybrid SSMs): ``rms_norm(x * silu(gate)) * scale`` or ``rms_norm(x) *
    scale * silu(gate)``.

    The gate order, groups and exact cast order of each convention are those of
    :func:`jln.gated_rms_norm`; ``gate`` (x's shape) is optional at the call.

    The NNX twin of :class:`jln.linen.GatedRMSNorm` (same options, parameters and numbers).

    Args:
      num_features: shape of ``x`` at ``axis`` (LayerNorm: at ``param_axes`` when set; an int for
        one axis).
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
      rngs: the key of an initializer other than ones and zeros; otherwise unused.

    Returns (``__call__(x, gate=None)``): array of ``x.shape``, dtype by the convention (or
    ``dtype``).

    Raises:
      TypeError, ValueError: as :func:`jln.gated_rms_norm`; otherwise as :class:`LayerNorm`.

    Example:
      >>> import jax.numpy as jnp
      >>> from flax import nnx
      >>> from jln import nnx as jnnx
      >>> jnnx.GatedRMSNorm(4, convention="qwen3_next")(jnp.ones((2, 4)), jnp.zeros((2, 4)))[0]
      Array([0., 0., 0., 0.], dtype=float32)
    """

    _kind: ClassVar[Kind] = kinds.GATED_RMS_NORM

    num_features: tuple[int, ...]
    scale: nnx.Param[jax.Array] | None = None
    eps: float
    convention: Literal["mamba", "mamba2", "bamba", "zamba2", "nemotron_h", "granitemoehybrid", "qwen3_next", "qwen3_5", "olmo_hybrid", "float32", "falcon_h1", "mamba_ssm"]
    group_size: int | None
    norm_before_gate: bool | None
    activation: Literal["silu", "sigmoid"]
    axis: Axis
    use_scale: bool
    dtype: DTypeLike | None
    param_dtype: DTypeLike
    impl: Impl
    monitor: bool
    axis_name: Hashable | None
    axis_index_groups: Sequence[Sequence[int]] | None
    scale_init: Initializer | None

    def __init__(
        self,
        num_features: int | tuple[int, ...],
        *,
        eps: float = 1e-06,
        convention: Literal["mamba", "mamba2", "bamba", "zamba2", "nemotron_h", "granitemoehybrid", "qwen3_next", "qwen3_5", "olmo_hybrid", "float32", "falcon_h1", "mamba_ssm"] = "mamba",
        group_size: int | None = None,
        norm_before_gate: bool | None = None,
        activation: Literal["silu", "sigmoid"] = "silu",
        axis: Axis = -1,
        use_scale: bool = True,
        dtype: DTypeLike | None = None,
        param_dtype: DTypeLike = jnp.float32,
        impl: Impl = "auto",
        monitor: bool = False,
        axis_name: Hashable | None = None,
        axis_index_groups: Sequence[Sequence[int]] | None = None,
        scale_init: Initializer | None = None,
        rngs: nnx.Rngs | None = None,
    ) -> None:
        """Build the module: the arguments are the Args of the class docstring."""
        _nnx.build(
            self,
            (num_features,),
            dict(
                eps=eps,
                convention=convention,
                group_size=group_size,
                norm_before_gate=norm_before_gate,
                activation=activation,
                axis=axis,
                use_scale=use_scale,
                dtype=dtype,
                param_dtype=param_dtype,
                impl=impl,
                monitor=monitor,
                axis_name=axis_name,
                axis_index_groups=axis_index_groups,
                scale_init=scale_init,
            ),
            rngs,
        )

    def __call__(self, x: jax.Array, gate: jax.Array | None = None) -> jax.Array:
        """The module on its inputs.

        Returns:
          array of ``x.shape``, dtype by the convention (or ``dtype``).
        """
        return _nnx.forward(self, (x,), {"gate": gate})
