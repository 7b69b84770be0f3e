# Written by `python -m jln._faces` from the module kinds of jln/families/rms_norm/module.py: edit those and run it
# again (tests/test_faces.py fails when this file is stale).
"""The linen face of the rms_norm family: :class:`RMSNorm`."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import ClassVar, Literal

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.typing import DTypeLike

from jln import _linen
from jln._modules import Initializer, Kind, TorchNames
from jln._platform import Impl
from jln._validate import Axis
from jln.families.rms_norm import module as kinds


class RMSNorm(_linen.Module):
    """RMSNorm in torch's convention or a named model's: ``x * rsqrt(mean(x^2) + eps) * scale``.

    The exact cast order and eps default of each convention are those of :func:`jln.rms_norm`.

    Attributes:
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

    Returns (``__call__(x)``): array of ``x.shape``, dtype by the convention (or ``dtype``).

    Raises:
      TypeError, ValueError: as :func:`jln.rms_norm`; ``ValueError`` for ``use_bias`` outside the
        diffusers convention; otherwise as :class:`LayerNorm`.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from jln import linen as jnn
      >>> m = jnn.RMSNorm(convention="llama")
      >>> x = jnp.ones((2, 4))
      >>> m.apply(m.init(jax.random.key(0), x), x).dtype
      dtype('float32')
    """

    _kind: ClassVar[Kind] = kinds.RMS_NORM

    eps: float | None = None
    convention: Literal["torch", "llama", "qwen2", "mistral", "gemma", "t5", "diffusers", "seed", "x-transformers", "eager", "imagegpt", "ltx2", "round_rstd", "deepseek_v4", "glm5_next", "input_scaled", "muse_spark_input"] = "torch"
    axis: Axis = -1
    use_scale: bool = True
    use_bias: bool = False
    dtype: DTypeLike | None = None
    param_dtype: DTypeLike = jnp.float32
    impl: Impl = "auto"
    monitor: bool = False
    axis_name: Hashable | None = None
    axis_index_groups: Sequence[Sequence[int]] | None = None
    scale_init: Initializer | None = None
    bias_init: Initializer | None = None
    torch_names: TorchNames | None = None

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        """The module on its inputs.

        Returns:
          array of ``x.shape``, dtype by the convention (or ``dtype``).
        """
        return _linen.forward(self, (x,), {})
