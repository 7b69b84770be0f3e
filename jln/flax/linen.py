"""flax.linen with jln's normalization layers: change the import, nothing else.

``from jln.flax import linen as nn`` in place of ``from flax import linen as nn``: every name
of ``flax.linen`` is here (``nn.Module``, ``nn.compact``, ``nn.Dense``, ``nn.Conv``,
``nn.Dropout``, ``nn.initializers``...), flax's own objects, except the five statistics norms
``LayerNorm``, ``RMSNorm``, ``GroupNorm``, ``InstanceNorm`` and ``BatchNorm``, which are jln's.

Each of those is a subclass of flax's own, with flax's attributes and defaults (``epsilon``
1e-6, BatchNorm's 1e-5 and ``momentum=0.99``, ``reduction_axes``/``feature_axes``/``axis``,
``num_groups``/``group_size``, ``use_bias``/``use_scale``, ``dtype``/``param_dtype``,
``axis_name``/``axis_index_groups``, ``use_running_average``, ``force_float32_reductions``),
so a model keeps its variables (``params`` ``scale``/``bias``, BatchNorm's ``batch_stats``
``mean``/``var``: names, shapes, dtypes, partitioning boxes), its RNG streams and its
checkpoints in both directions. Only ``__call__`` differs:

* The statistics are jln's (the mean, then the mean of squared deviations from it) in
  float32 (float64 where flax computes in float64), so data at offset 1e4 keeps float32's
  accuracy where flax's default ``E[x^2] - E[x]^2`` loses about three digits.
  ``use_fast_variance`` is accepted and has no effect (both settings give jln's statistics).
* BatchNorm's running statistics follow flax's rule (``m * running + (1 - m) * batch``, the
  biased batch variance), from jln's batch statistics.
* Reverse mode saves ``x`` in its own dtype and the statistics, and jln's kernels run
  LayerNorm/RMSNorm where they apply.
* The result dtype is flax's: ``dtype`` when given, else the promotion of ``x`` and the
  parameters (a bfloat16 ``x`` with float32 parameters gives float32), rounded once.

``force_float32_reductions=False`` is accepted; jln reduces in float32 regardless (flax then
reduces in the input dtype). Complex input is computed by flax's own ``__call__``.

Example:
  >>> import jax, jax.numpy as jnp
  >>> from jln.flax import linen as nn          # was: from flax import linen as nn
  >>> class Block(nn.Module):
  ...     @nn.compact
  ...     def __call__(self, x, train: bool = False):
  ...         x = nn.Conv(8, (3, 3))(x)
  ...         x = nn.BatchNorm(use_running_average=not train)(x)
  ...         return nn.Dense(4)(nn.relu(nn.GroupNorm(num_groups=2)(x)))
  >>> variables = Block().init(jax.random.key(0), jnp.ones((2, 4, 4, 3)))
  >>> sorted(variables["params"]), sorted(variables["batch_stats"]["BatchNorm_0"])
  (['BatchNorm_0', 'Conv_0', 'Dense_0', 'GroupNorm_0'], ['mean', 'var'])
  >>> nn.Dense is __import__("flax").linen.Dense, nn.GroupNorm.__mro__[1].__module__
  (True, 'flax.linen.normalization')
"""

from jln.flax._linen import BatchNorm as BatchNorm
from jln.flax._linen import GroupNorm as GroupNorm
from jln.flax._linen import InstanceNorm as InstanceNorm
from jln.flax._linen import LayerNorm as LayerNorm
from jln.flax._linen import RMSNorm as RMSNorm
