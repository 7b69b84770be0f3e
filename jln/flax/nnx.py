"""flax.nnx with jln's normalization layers: change the import, nothing else.

``from jln.flax import nnx`` in place of ``from flax import nnx``: every name of ``flax.nnx``
is here (``nnx.Module``, ``nnx.Rngs``, ``nnx.Linear``, ``nnx.Conv``, ``nnx.jit``,
``nnx.state``, ``nnx.Optimizer``...), flax's own objects, except the five statistics norms
``LayerNorm``, ``RMSNorm``, ``GroupNorm``, ``InstanceNorm`` and ``BatchNorm``, which are jln's.

Each of those is a subclass of flax's own and keeps flax's ``__init__`` unchanged, so the
constructor signature and defaults (``num_features``, ``epsilon`` 1e-6, BatchNorm's 1e-5 and
``momentum=0.99``, ``num_groups``/``group_size``, ``use_bias``, ``use_scale``,
``scale_init``, ``*_metadata``, ``promote_dtype``, ``rngs``...), the ``Param`` and
``BatchStat`` variables with their metadata, and the keys drawn from ``rngs`` (one for
``scale`` and one for ``bias``, drawn for ones/zeros initializers too) are flax's own: the
layers after it see the same keys, and checkpoints load both ways. ``train()``/``eval()``
and ``nnx.view`` set BatchNorm's ``use_running_average`` as in flax. Only ``__call__`` differs:

* ``promote_dtype`` runs as in flax (with ``dtype`` set, ``x``, the parameters and
  BatchNorm's running statistics are cast to it first); the result dtype is flax's, rounded
  once.
* The statistics are jln's (the mean, then the mean of squared deviations from it) in
  float32, float64 where flax computes in float64; ``use_fast_variance`` is accepted and has
  no effect. BatchNorm's running statistics follow flax's rule (``m * running + (1 - m) *
  batch``, the biased batch variance), from jln's batch statistics.
* Reverse mode saves ``x`` in its own dtype and the statistics, and jln's kernels run
  LayerNorm/RMSNorm where they apply.

Complex input is computed by flax's own ``__call__``.

Example:
  >>> import jax.numpy as jnp
  >>> from jln.flax import nnx                  # was: from flax import nnx
  >>> class Block(nnx.Module):
  ...     def __init__(self, rngs: nnx.Rngs):
  ...         self.conv = nnx.Conv(3, 8, (3, 3), rngs=rngs)
  ...         self.bn = nnx.BatchNorm(8, rngs=rngs)
  ...         self.gn = nnx.GroupNorm(8, num_groups=2, rngs=rngs)
  ...     def __call__(self, x):
  ...         return nnx.relu(self.gn(self.bn(self.conv(x))))
  >>> model = Block(nnx.Rngs(0))
  >>> model(jnp.ones((2, 4, 4, 3))).shape
  (2, 4, 4, 8)
  >>> type(model.bn).__module__, type(model.conv).__module__
  ('jln.flax._nnx', 'flax.nnx.nn.linear')
"""

from jln.flax._nnx import BatchNorm as BatchNorm
from jln.flax._nnx import GroupNorm as GroupNorm
from jln.flax._nnx import InstanceNorm as InstanceNorm
from jln.flax._nnx import LayerNorm as LayerNorm
from jln.flax._nnx import RMSNorm as RMSNorm
