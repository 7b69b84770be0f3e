# Written by `python -m jln._faces` from the module kinds of jln/families/batch_norm/module.py: edit those and run it
# again (tests/test_faces.py fails when this file is stale).
"""The NNX face of the batch_norm family: :class:`BatchNorm`, :class:`InstanceNorm`, :class:`GroupNorm`, :class:`FrozenBatchNorm`."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import ClassVar, Literal

import jax
import jax.numpy as jnp
from flax import nnx
from jax.typing import DTypeLike

from jln import _nnx
from jln._modules import Kind, TorchNames
from jln._platform import Impl
from jln.families.batch_norm import module as kinds


class BatchNorm(_nnx.Module):
    """BatchNorm with torch's semantics (``nn.BatchNorm1d/2d/3d``; ``SyncBatchNorm`` with
    ``axis_name``): batch statistics in training mode, running statistics in eval mode.

    Calls :func:`jln.batch_norm`: the output uses the biased batch variance, ``running_var`` the
    unbiased one, ``running = (1 - momentum) * running + momentum * batch``.

    Running statistics: linen keeps ``running_mean``, ``running_var`` and ``num_batches_tracked`` in
    the ``"batch_stats"`` collection: ``apply(variables, x, mutable=["batch_stats"])`` is a training
    step (batch statistics; returns ``(y, updates)``), ``apply(variables, x)`` is torch's eval mode
    (running statistics); ``use_running_average=True``/``False`` at the call forces either; ``init``
    leaves them as initialised. NNX keeps them as ``nnx.BatchStat`` and updates them in training
    mode (the default, as a fresh torch module, or after ``.train()``; ``.eval()`` normalizes with
    them).

    The NNX twin of :class:`jln.linen.BatchNorm` (same options, parameters and numbers).

    Args:
      num_features: C, the number of channels (torch's ``num_features``).
      eps: added to the variance inside the square root; torch's default 1e-5.
      momentum: torch's momentum: ``running = (1 - momentum) * running + momentum * batch`` (flax's
        0.99 is the complement); ``None``: cumulative average.
      affine: learnable per-channel ``scale`` and ``bias`` (torch's ``weight``/``bias``).
      track_running_stats: keep ``running_mean``/``running_var``/``num_batches_tracked`` in
        ``batch_stats``; ``False``: always batch statistics.
      channel_axis: the channel axis of ``x``: 1 for torch's NCHW layout, -1 for channels-last
        (NHWC) input.
      dtype: ``None``: output in ``x.dtype``; else ``x`` is cast to it first.
      param_dtype: dtype of the parameters and running statistics (float32).
      impl: ``"auto"`` or ``"xla"`` (no kernels for this family yet).
      axis_name: inside ``jax.shard_map``/``jax.pmap``, the mesh axis over which the normalized axis
        is split (tensor parallelism); parameters are then the local blocks, see
        :func:`jln.layer_norm`. The monitor's statistics stay per device.
      axis_index_groups: with ``axis_name``, the device groups that each hold one row's blocks (as
        ``jax.lax.psum``).
      torch_names: the torch ``state_dict`` names of a class that holds this norm's tensors under
        other names: a mapping from torch's default name to the class's (``{"weight": "norm.weight",
        "bias": "norm.bias"}``, ``{"weight": "gamma"}``; a name with ``{}``, ``"norms.{}.weight"``,
        splits the tensor along its first axis, one per index: StableLM's per-head norms), used by
        ``jln.interop.to_torch_state_dict``; ``None``: torch's names. Numbers are unaffected.
      rngs: unused (ones and zeros initializers); accepted for symmetry.

    Returns (``__call__(x, use_running_average=None)``): array of ``x.shape``, dtype ``x.dtype`` (or
    ``dtype``).

    Raises:
      TypeError, ValueError: bad options (``momentum`` outside [0, 1], ``impl``
        ``"native"``/``"pallas"``), an input whose channels differ from the module's, and (linen)
        ``use_running_average=False`` without ``mutable=["batch_stats"]``; as the function
        otherwise.

    Example:
      >>> import jax.numpy as jnp
      >>> from flax import nnx
      >>> from jln import nnx as jnnx
      >>> m = jnnx.BatchNorm(2)
      >>> _ = m(jnp.arange(8.0).reshape(4, 2))
      >>> m.running_mean[...], int(m.num_batches_tracked[...])
      (Array([0.3, 0.4], dtype=float32), 1)
    """

    _kind: ClassVar[Kind] = kinds.BATCH_NORM

    num_features: int
    scale: nnx.Param[jax.Array] | None = None
    bias: nnx.Param[jax.Array] | None = None
    running_mean: nnx.BatchStat[jax.Array] | None = None
    running_var: nnx.BatchStat[jax.Array] | None = None
    num_batches_tracked: nnx.BatchStat[jax.Array] | None = None
    use_running_average: bool
    eps: float
    momentum: float | None
    affine: bool
    track_running_stats: bool
    channel_axis: int
    dtype: DTypeLike | None
    param_dtype: DTypeLike
    impl: Impl
    axis_name: Hashable | None
    axis_index_groups: Sequence[Sequence[int]] | None
    torch_names: TorchNames | None

    def __init__(
        self,
        num_features: int,
        *,
        eps: float = 1e-05,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        channel_axis: int = 1,
        dtype: DTypeLike | None = None,
        param_dtype: DTypeLike = jnp.float32,
        impl: Impl = "auto",
        axis_name: Hashable | None = None,
        axis_index_groups: Sequence[Sequence[int]] | None = None,
        torch_names: TorchNames | None = None,
        rngs: nnx.Rngs | None = None,
    ) -> None:
        """Build the module: the arguments are the Args of the class docstring."""
        _nnx.build(
            self,
            (num_features,),
            dict(
                eps=eps,
                momentum=momentum,
                affine=affine,
                track_running_stats=track_running_stats,
                channel_axis=channel_axis,
                dtype=dtype,
                param_dtype=param_dtype,
                impl=impl,
                axis_name=axis_name,
                axis_index_groups=axis_index_groups,
                torch_names=torch_names,
            ),
            rngs,
        )

    def __call__(self, x: jax.Array, use_running_average: bool | None = None) -> jax.Array:
        """The module on its inputs.

        Returns:
          array of ``x.shape``, dtype ``x.dtype`` (or ``dtype``).
        """
        return _nnx.forward(self, (x,), {"use_running_average": use_running_average})


class InstanceNorm(_nnx.Module):
    """InstanceNorm with torch's semantics (``nn.InstanceNorm1d/2d/3d``): statistics per sample and
    channel over the spatial axes; by default (torch's) no affine and no running statistics.

    Calls :func:`jln.instance_norm`. With ``track_running_stats=True``: running
    ``running_mean``/``running_var`` (no counter), updated as torch does, used in eval mode.

    The NNX twin of :class:`jln.linen.InstanceNorm` (same options, parameters and numbers).

    Args:
      num_features: C, the number of channels (torch's ``num_features``).
      eps: added to the variance inside the square root; torch's default 1e-5.
      momentum: torch's momentum: ``running = (1 - momentum) * running + momentum * batch`` (flax's
        0.99 is the complement); ``None``: cumulative average.
      affine: learnable per-channel ``scale`` and ``bias`` (torch's ``weight``/``bias``).
      track_running_stats: keep ``running_mean``/``running_var``/``num_batches_tracked`` in
        ``batch_stats``; ``False``: always batch statistics.
      channel_axis: the channel axis of ``x``: 1 for torch's NCHW layout, -1 for channels-last
        (NHWC) input.
      dtype: ``None``: output in ``x.dtype``; else ``x`` is cast to it first.
      param_dtype: dtype of the parameters and running statistics (float32).
      impl: ``"auto"`` or ``"xla"`` (no kernels for this family yet).
      rngs: unused (ones and zeros initializers); accepted for symmetry.

    Returns (``__call__(x, use_running_average=None)``): array of ``x.shape``, dtype ``x.dtype`` (or
    ``dtype``).

    Raises:
      TypeError, ValueError: bad options (``momentum`` outside [0, 1], ``impl``
        ``"native"``/``"pallas"``), an input whose channels differ from the module's, and (linen)
        ``use_running_average=False`` without ``mutable=["batch_stats"]``; as the function
        otherwise.

    Example:
      >>> import jax.numpy as jnp
      >>> from flax import nnx
      >>> from jln import nnx as jnnx
      >>> jnnx.InstanceNorm(2)(jnp.arange(8.0).reshape(1, 2, 4)).shape
      (1, 2, 4)
    """

    _kind: ClassVar[Kind] = kinds.INSTANCE_NORM

    num_features: int
    scale: nnx.Param[jax.Array] | None = None
    bias: nnx.Param[jax.Array] | None = None
    running_mean: nnx.BatchStat[jax.Array] | None = None
    running_var: nnx.BatchStat[jax.Array] | None = None
    use_running_average: bool
    eps: float
    momentum: float | None
    affine: bool
    track_running_stats: bool
    channel_axis: int
    dtype: DTypeLike | None
    param_dtype: DTypeLike
    impl: Impl

    def __init__(
        self,
        num_features: int,
        *,
        eps: float = 1e-05,
        momentum: float | None = 0.1,
        affine: bool = False,
        track_running_stats: bool = False,
        channel_axis: int = 1,
        dtype: DTypeLike | None = None,
        param_dtype: DTypeLike = jnp.float32,
        impl: Impl = "auto",
        rngs: nnx.Rngs | None = None,
    ) -> None:
        """Build the module: the arguments are the Args of the class docstring."""
        _nnx.build(
            self,
            (num_features,),
            dict(
                eps=eps,
                momentum=momentum,
                affine=affine,
                track_running_stats=track_running_stats,
                channel_axis=channel_axis,
                dtype=dtype,
                param_dtype=param_dtype,
                impl=impl,
            ),
            rngs,
        )

    def __call__(self, x: jax.Array, use_running_average: bool | None = None) -> jax.Array:
        """The module on its inputs.

        Returns:
          array of ``x.shape``, dtype ``x.dtype`` (or ``dtype``).
        """
        return _nnx.forward(self, (x,), {"use_running_average": use_running_average})


class GroupNorm(_nnx.Module):
    """GroupNorm with torch's numbers (``nn.GroupNorm(num_groups, num_channels)``): statistics per
    sample over each group's channels and the spatial axes, per-channel affine, eps 1e-5.

    Calls :func:`jln.group_norm`. No running statistics.

    The NNX twin of :class:`jln.linen.GroupNorm` (same options, parameters and numbers).

    Args:
      num_groups: number of groups the channels are split into.
      num_channels: C, the number of channels (divisible by num_groups).
      eps: added to the variance inside the square root; torch's default 1e-5.
      affine: learnable per-channel ``scale`` and ``bias`` (torch's ``weight``/``bias``).
      channel_axis: the channel axis of ``x``: 1 for torch's NCHW layout, -1 for channels-last
        (NHWC) input.
      dtype: ``None``: output in ``x.dtype``; else ``x`` is cast to it first.
      param_dtype: dtype of the parameters and running statistics (float32).
      impl: ``"auto"`` or ``"xla"`` (no kernels for this family yet).
      torch_names: the torch ``state_dict`` names of a class that holds this norm's tensors under
        other names: a mapping from torch's default name to the class's (``{"weight": "norm.weight",
        "bias": "norm.bias"}``, ``{"weight": "gamma"}``; a name with ``{}``, ``"norms.{}.weight"``,
        splits the tensor along its first axis, one per index: StableLM's per-head norms), used by
        ``jln.interop.to_torch_state_dict``; ``None``: torch's names. Numbers are unaffected.
      frame_axis: an axis whose every index gets its own statistics (2: each frame of ``[N, C, T, H,
        W]`` video, as the video VAEs' per-frame GroupNorm); ``None``: torch's GroupNorm.
      activation: ``"relu"``, ``"silu"`` or ``"gelu"`` applied to the output (transformers'
        ``BitGroupNormActivation``); ``None``: none.
      rngs: unused (ones and zeros initializers); accepted for symmetry.

    Returns (``__call__(x)``): array of ``x.shape``, dtype ``x.dtype`` (or ``dtype``).

    Raises:
      TypeError, ValueError: ``num_channels`` not divisible by ``num_groups``, an input with another
        channel count; as :func:`jln.group_norm` otherwise.

    Example:
      >>> import jax.numpy as jnp
      >>> from flax import nnx
      >>> from jln import nnx as jnnx
      >>> jnnx.GroupNorm(2, 4)(jnp.ones((2, 4, 3))).shape
      (2, 4, 3)
    """

    _kind: ClassVar[Kind] = kinds.GROUP_NORM

    scale: nnx.Param[jax.Array] | None = None
    bias: nnx.Param[jax.Array] | None = None
    use_running_average: bool
    num_groups: int
    num_channels: int
    eps: float
    affine: bool
    channel_axis: int
    dtype: DTypeLike | None
    param_dtype: DTypeLike
    impl: Impl
    torch_names: TorchNames | None
    frame_axis: int | None
    activation: Literal["relu", "silu", "gelu"] | None

    def __init__(
        self,
        num_groups: int,
        num_channels: int,
        *,
        eps: float = 1e-05,
        affine: bool = True,
        channel_axis: int = 1,
        dtype: DTypeLike | None = None,
        param_dtype: DTypeLike = jnp.float32,
        impl: Impl = "auto",
        torch_names: TorchNames | None = None,
        frame_axis: int | None = None,
        activation: Literal["relu", "silu", "gelu"] | None = None,
        rngs: nnx.Rngs | None = None,
    ) -> None:
        """Build the module: the arguments are the Args of the class docstring."""
        _nnx.build(
            self,
            (),
            dict(
                num_groups=num_groups,
                num_channels=num_channels,
                eps=eps,
                affine=affine,
                channel_axis=channel_axis,
                dtype=dtype,
                param_dtype=param_dtype,
                impl=impl,
                torch_names=torch_names,
                frame_axis=frame_axis,
                activation=activation,
            ),
            rngs,
        )

    def __call__(self, x: jax.Array) -> jax.Array:
        """The module on its inputs.

        Returns:
          array of ``x.shape``, dtype ``x.dtype`` (or ``dtype``).
        """
        return _nnx.forward(self, (x,), {})


class FrozenBatchNorm(_nnx.Module):
    """The DETR family's ``FrozenBatchNorm2d`` (transformers ``DetrFrozenBatchNorm2d`` and its copies):
    fixed statistics and affine, torch's rounding order ``x * s + (b - mean * s)``, ``s = w *
    rsqrt(var + eps)``.

    Calls :func:`jln.frozen_batch_norm`. All four are buffers in torch, so here they are state,
    never trained nor updated: ``scale`` (torch's ``weight``), ``bias``, ``running_mean`` and
    ``running_var`` in linen's ``"batch_stats"`` collection, as ``nnx.BatchStat`` in NNX (an
    optimizer over ``nnx.Param`` leaves them frozen).

    The NNX twin of :class:`jln.linen.FrozenBatchNorm` (same options, parameters and numbers).

    Args:
      num_features: C, the number of channels (torch's ``num_features``).
      eps: added to the variance inside the square root; torch's default 1e-5.
      channel_axis: the channel axis of ``x``: 1 for torch's NCHW layout, -1 for channels-last
        (NHWC) input.
      param_dtype: dtype of the four buffers (float32).
      rngs: unused (ones and zeros initializers); accepted for symmetry.

    Returns (``__call__(x)``): array of ``x.shape``, dtype promoted from ``x``'s and the buffers'
    (bfloat16 ``x`` with float32 buffers: float32, as torch).

    Raises:
      TypeError, ValueError: an input whose channels differ from the module's.

    Example:
      >>> import jax.numpy as jnp
      >>> from flax import nnx
      >>> from jln import nnx as jnnx
      >>> jnnx.FrozenBatchNorm(2)(jnp.ones((1, 2, 3, 3))).shape
      (1, 2, 3, 3)
    """

    _kind: ClassVar[Kind] = kinds.FROZEN_BATCH_NORM

    num_features: int
    scale: nnx.BatchStat[jax.Array]
    bias: nnx.BatchStat[jax.Array]
    running_mean: nnx.BatchStat[jax.Array]
    running_var: nnx.BatchStat[jax.Array]
    use_running_average: bool
    eps: float
    channel_axis: int
    param_dtype: DTypeLike

    def __init__(
        self,
        num_features: int,
        *,
        eps: float = 1e-05,
        channel_axis: int = 1,
        param_dtype: DTypeLike = jnp.float32,
        rngs: nnx.Rngs | None = None,
    ) -> None:
        """Build the module: the arguments are the Args of the class docstring."""
        _nnx.build(
            self,
            (num_features,),
            dict(
                eps=eps,
                channel_axis=channel_axis,
                param_dtype=param_dtype,
            ),
            rngs,
        )

    def __call__(self, x: jax.Array) -> jax.Array:
        """The module on its inputs.

        Returns:
          array of ``x.shape``, dtype promoted from ``x``'s and the buffers' (bfloat16 ``x`` with
          float32 buffers: float32, as torch).
        """
        return _nnx.forward(self, (x,), {})
