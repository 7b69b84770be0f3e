# Written by `python -m jln._faces` from the module kinds of jln/families/rms_norm/module.py: edit those and run it
# again (tests/test_faces.py fails when this file is stale).
"""The NNX face of the rms_norm family: :class:`RMSNorm`."""

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
from jln.families.rms_norm import module as kinds


class RMSNorm(_nnx.Module):
    """RMSNorm in torch's convention or a named model's: ``x * rsqrt(mean(x^2) + eps) * scale``.

    The exact cast order and eps default of each convention are those of :func:`jln.rms_norm`.

    The NNX twin of :class:`jln.linen.RMSNorm` (same options, parameters and numbers).

    Args:
      num_features: shape of ``x`` at ``axis`` (LayerNorm: at ``param_axes`` when set; an int for
        one axis).
      eps: ``None`` takes the convention's default (torch: ``finfo(float32).eps``).
      convention: ``"torch"``, ``"llama"``, ``"gemma"``, ``"t5"``, ``"diffusers"``, ``"seed"``,
        ``"eager"``, ``"round_rstd"`` or ``"input_scaled"`` (cast order and eps default as
        :func:`jln.rms_norm`); ``"input_scaled"`` also initialises ``scale`` to 0; ``"gemma"``
        initialises ``scale`` to 0 (it multiplies by ``1 + scale``). With ``dtype=None`` the output
        dtype is the convention's (``"llama"``: bf16 x with float32 scale gives float32).
      axis: axis or axes to normalize over; parameters have the shape of ``x`` there.
      use_scale: learnable ``scale``.
      use_bias: learnable ``bias`` (``convention="diffusers"`` only).
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
      scale_init: as :class:`LayerNorm`'s; ``None``: the convention's identity (ones, zeros for
        ``"gemma"`` and ``"input_scaled"``).
      bias_init: initializer of the norm's ``bias``; ``None``: zeros.
      torch_names: the torch ``state_dict`` names of a class that holds this norm's tensors under
        other names: a mapping from torch's default name to the class's (``{"weight": "norm.weight",
        "bias": "norm.bias"}``, ``{"weight": "gamma"}``; a name with ``{}``, ``"norms.{}.weight"``,
        splits the tensor along its first axis, one per index: StableLM's per-head norms), used by
        ``jln.interop.to_torch_state_dict``; ``None``: torch's names. Numbers are unaffected.
      rngs: the key of an initializer other than ones and zeros; otherwise unused.

    Returns (``__call__(x)``): array of ``x.shape``, dtype by the convention (or ``dtype``).

    Raises:
      TypeError, ValueError: as :func:`jln.rms_norm`; ``ValueError`` for ``use_bias`` outside the
        diffusers convention; otherwise as :class:`LayerNorm`.

    Example:
      >>> import jax.numpy as jnp
      >>> from flax import nnx
      >>> from jln import nnx as jnnx
      >>> jnnx.RMSNorm(4, convention="gemma").scale[...]
      Array([0., 0., 0., 0.], dtype=float32)
    """

    _kind: ClassVar[Kind] = kinds.RMS_NORM

    num_features: tuple[int, ...]
    scale: nnx.Param[jax.Array] | None = None
    bias: nnx.Param[jax.Array] | None = None
    eps: float | None
    convention: Literal["torch", "llama", "qwen2", "mistral", "gemma", "t5", "diffusers", "seed", "x-transformers", "eager", "imagegpt", "ltx2", "round_rstd", "deepseek_v4", "glm5_next", "input_scaled", "muse_spark_input"]
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
    torch_names: TorchNames | None

    def __init__(
        self,
        num_features: int | tuple[int, ...],
        *,
        eps: float | None = None,
        convention: Literal["torch", "llama", "qwen2", "mistral", "gemma", "t5", "diffusers", "seed", "x-transformers", "eager", "imagegpt", "ltx2", "round_rstd", "deepseek_v4", "glm5_next", "input_scaled", "muse_spark_input"] = "torch",
        axis: Axis = -1,
        use_scale: bool = True,
        use_bias: bool = False,
        dtype: DTypeLike | None = None,
        param_dtype: DTypeLike = jnp.float32,
        impl: Impl = "auto",
        monitor: bool = False,
        axis_name: Hashable | None = None,
        axis_index_groups: Sequence[Sequence[int]] | None = None,
        scale_init: Initializer | None = None,
        bias_init: Initializer | None = None,
        torch_names: TorchNames | None = None,
        rngs: nnx.Rngs | None = None,
    ) -> None:
        """Build the module: the arguments are the Args of the class docstring."""
        _nnx.build(
            self,
            (num_features,),
            dict(
                eps=eps,
                convention=convention,
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
                torch_names=torch_names,
            ),
            rngs,
        )

    def __call__(self, x: jax.Array) -> jax.Array:
        """The module on its inputs.

        Returns:
          array of ``x.shape``, dtype by the convention (or ``dtype``).
        """
        return _nnx.forward(self, (x,), {})
