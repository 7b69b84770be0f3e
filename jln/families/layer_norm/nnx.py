# Written by `python -m jln._faces` from the module kinds of jln/families/layer_norm/module.py: edit those and run it
# again (tests/test_faces.py fails when this file is stale).
"""The NNX face of the layer_norm family: :class:`LayerNorm`."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import ClassVar, Literal

import jax
import jax.numpy as jnp
from flax import nnx
from jax.typing import DTypeLike

from jln import _nnx
from jln._modules import Initializer, Kind, TorchNames
from jln._platform import Impl
from jln._validate import Axis
from jln.families.layer_norm import module as kinds


class LayerNorm(_nnx.Module):
    """LayerNorm with torch's numbers: ``(x - E[x]) / sqrt(Var[x] + eps) * scale + bias``.

    Biased variance, eps inside the square root, statistics in float32 (float64 for float64 input);
    the module calls :func:`jln.layer_norm`.

    The NNX twin of :class:`jln.linen.LayerNorm` (same options, parameters and numbers).

    Args:
      num_features: shape of ``x`` at ``axis`` (LayerNorm: at ``param_axes`` when set; an int for
        one axis).
      eps: added to the variance; torch's default 1e-5 (flax's LayerNorm uses 1e-6).
      axis: axis or axes to normalize over; parameters have the shape of ``x`` there.
      use_scale: learnable ``scale`` (torch's ``elementwise_affine``).
      use_bias: learnable ``bias`` (torch's ``bias``).
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
      bias_init: initializer of the norm's ``bias``; ``None``: zeros.
      zero_centered: multiply by ``1 + scale`` (Nemotron's ``LayerNorm1P``, TransformerEngine's
        ``zero_centered_gamma``), ``1 + scale`` rounded to ``param_dtype``; ``scale`` then
        initialises to 0. ``axis=1`` gives channels-first LayerNorm (``LayerNorm2d``,
        ``data_format="channels_first"``).
      convention: where the reference rounds, as :func:`jln.layer_norm`: ``"torch"``, ``"deberta"``
        (the row rounded to the input dtype, then the affine; alias ``"moonshine"``) or ``"eager"``
        (every op in the input dtype; alias ``"vitdet"``). With ``dtype=None`` the latter two
        promote a bf16 ``x`` with float32 parameters to float32, as torch's ``weight * h`` does.
      torch_names: the torch ``state_dict`` names of a class that holds this norm's tensors under
        other names: a mapping from torch's default name to the class's (``{"weight": "norm.weight",
        "bias": "norm.bias"}``, ``{"weight": "gamma"}``; a name with ``{}``, ``"norms.{}.weight"``,
        splits the tensor along its first axis, one per index: StableLM's per-head norms), used by
        ``jln.interop.to_torch_state_dict``; ``None``: torch's names. Numbers are unaffected.
      param_axes: the axes of ``x`` that ``scale`` and ``bias`` span, as :func:`jln.layer_norm`:
        every axis in ``axis`` plus more (flax's ``feature_axes``), e.g. ``param_axes=(1, -1)`` with
        ``axis=-1`` on ``[batch, heads, seq, head_dim]``: one LayerNorm per head, parameters
        ``(heads, head_dim)`` (NNX: ``num_features`` is that shape). ``None``: ``axis``. Runs on the
        XLA path.
      rngs: the key of an initializer other than ones and zeros; otherwise unused.

    Returns (``__call__(x)``): array of ``x.shape``, dtype ``x.dtype`` (or ``dtype``).

    Raises:
      TypeError, ValueError: as :func:`jln.layer_norm` (NNX: also an ``x`` whose shape at ``axis``
        is not ``num_features``); ``TypeError`` for an initializer that is not callable, or (NNX)
        one other than ones and zeros without ``rngs``, and for flax's argument names
        (``epsilon``...), saying jln's.

    Example:
      >>> import jax.numpy as jnp
      >>> from flax import nnx
      >>> from jln import nnx as jnnx
      >>> jnnx.LayerNorm(4)(jnp.arange(8.0).reshape(2, 4)).shape
      (2, 4)
    """

    _kind: ClassVar[Kind] = kinds.LAYER_NORM

    num_features: tuple[int, ...]
    scale: nnx.Param[jax.Array] | None = None
    bias: nnx.Param[jax.Array] | None = None
    eps: float
    axis: Axis
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
    zero_centered: bool
    convention: Literal["torch", "deberta", "moonshine", "eager", "vitdet"]
    torch_names: TorchNames | None
    param_axes: Axis | None

    def __init__(
        self,
        num_features: int | tuple[int, ...],
        *,
        eps: float = 1e-05,
        axis: Axis = -1,
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
        zero_centered: bool = False,
        convention: Literal["torch", "deberta", "moonshine", "eager", "vitdet"] = "torch",
        torch_names: TorchNames | None = None,
        param_axes: Axis | None = None,
        rngs: nnx.Rngs | None = None,
    ) -> None:
        """Build the module: the arguments are the Args of the class docstring."""
        _nnx.build(
            self,
            (num_features,),
            dict(
                eps=eps,
                axis=axis,
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
                zero_centered=zero_centered,
                convention=convention,
                torch_names=torch_names,
                param_axes=param_axes,
            ),
            rngs,
        )

    def __call__(self, x: jax.Array) -> jax.Array:
        """The module on its inputs.

        Returns:
          array of ``x.shape``, dtype ``x.dtype`` (or ``dtype``).
        """
        return _nnx.forward(self, (x,), {})
