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

import typing as _typing

if _typing.TYPE_CHECKING:
    # flax.linen's names spelt out, so that type checkers see them and jln's five norms below
    # (through a star import mypy would take flax's norms); tests/test_flax_dropin.py checks
    # that the list is the installed flax's
    from flax.linen import PARTITION_NAME as PARTITION_NAME
    from flax.linen import RNN as RNN
    from flax.linen import BatchApply as BatchApply
    from flax.linen import Bidirectional as Bidirectional
    from flax.linen import Conv as Conv
    from flax.linen import ConvLocal as ConvLocal
    from flax.linen import ConvLSTMCell as ConvLSTMCell
    from flax.linen import ConvTranspose as ConvTranspose
    from flax.linen import Dense as Dense
    from flax.linen import DenseGeneral as DenseGeneral
    from flax.linen import DenyList as DenyList
    from flax.linen import Dropout as Dropout
    from flax.linen import Einsum as Einsum
    from flax.linen import Embed as Embed
    from flax.linen import Fp8DirectDotGeneralOp as Fp8DirectDotGeneralOp
    from flax.linen import Fp8DotGeneral as Fp8DotGeneral
    from flax.linen import Fp8DotGeneralOp as Fp8DotGeneralOp
    from flax.linen import Fp8Einsum as Fp8Einsum
    from flax.linen import FrozenDict as FrozenDict
    from flax.linen import GRUCell as GRUCell
    from flax.linen import LogicallyPartitioned as LogicallyPartitioned
    from flax.linen import LSTMCell as LSTMCell
    from flax.linen import MGUCell as MGUCell
    from flax.linen import Module as Module
    from flax.linen import MultiHeadAttention as MultiHeadAttention
    from flax.linen import MultiHeadDotProductAttention as MultiHeadDotProductAttention
    from flax.linen import NANOOFp8DotGeneralOp as NANOOFp8DotGeneralOp
    from flax.linen import OptimizedLSTMCell as OptimizedLSTMCell
    from flax.linen import Partitioned as Partitioned
    from flax.linen import PReLU as PReLU
    from flax.linen import RNNCellBase as RNNCellBase
    from flax.linen import SelfAttention as SelfAttention
    from flax.linen import Sequential as Sequential
    from flax.linen import SimpleCell as SimpleCell
    from flax.linen import SpectralNorm as SpectralNorm
    from flax.linen import Variable as Variable
    from flax.linen import WeightNorm as WeightNorm
    from flax.linen import activation as activation
    from flax.linen import add_metadata_axis as add_metadata_axis
    from flax.linen import apply as apply
    from flax.linen import attention as attention
    from flax.linen import avg_pool as avg_pool
    from flax.linen import batch_apply as batch_apply
    from flax.linen import broadcast as broadcast
    from flax.linen import celu as celu
    from flax.linen import checkpoint as checkpoint
    from flax.linen import combinators as combinators
    from flax.linen import combine_masks as combine_masks
    from flax.linen import compact as compact
    from flax.linen import compact_name_scope as compact_name_scope
    from flax.linen import cond as cond
    from flax.linen import custom_vjp as custom_vjp
    from flax.linen import disable_named_call as disable_named_call
    from flax.linen import dot_product_attention as dot_product_attention
    from flax.linen import dot_product_attention_weights as dot_product_attention_weights
    from flax.linen import dtypes as dtypes
    from flax.linen import elu as elu
    from flax.linen import enable_named_call as enable_named_call
    from flax.linen import fold_rngs as fold_rngs
    from flax.linen import fp8_ops as fp8_ops
    from flax.linen import gelu as gelu
    from flax.linen import get_logical_axis_rules as get_logical_axis_rules
    from flax.linen import get_partition_spec as get_partition_spec
    from flax.linen import get_sharding as get_sharding
    from flax.linen import glu as glu
    from flax.linen import grad as grad
    from flax.linen import hard_sigmoid as hard_sigmoid
    from flax.linen import hard_silu as hard_silu
    from flax.linen import hard_swish as hard_swish
    from flax.linen import hard_tanh as hard_tanh
    from flax.linen import init as init
    from flax.linen import init_with_output as init_with_output
    from flax.linen import initializers as initializers
    from flax.linen import intercept_methods as intercept_methods
    from flax.linen import jit as jit
    from flax.linen import jvp as jvp
    from flax.linen import kw_only_dataclasses as kw_only_dataclasses
    from flax.linen import leaky_relu as leaky_relu
    from flax.linen import linear as linear
    from flax.linen import log_sigmoid as log_sigmoid
    from flax.linen import log_softmax as log_softmax
    from flax.linen import logical_axis_rules as logical_axis_rules
    from flax.linen import logical_to_mesh as logical_to_mesh
    from flax.linen import logical_to_mesh_axes as logical_to_mesh_axes
    from flax.linen import logical_to_mesh_sharding as logical_to_mesh_sharding
    from flax.linen import logsumexp as logsumexp
    from flax.linen import make_attention_mask as make_attention_mask
    from flax.linen import make_causal_mask as make_causal_mask
    from flax.linen import map_variables as map_variables
    from flax.linen import max_pool as max_pool
    from flax.linen import merge_param as merge_param
    from flax.linen import meta as meta
    from flax.linen import module as module
    from flax.linen import named_call as named_call
    from flax.linen import normalization as normalization
    from flax.linen import normalize as normalize
    from flax.linen import nowrap as nowrap
    from flax.linen import one_hot as one_hot
    from flax.linen import ones as ones
    from flax.linen import ones_init as ones_init
    from flax.linen import override_named_call as override_named_call
    from flax.linen import pool as pool
    from flax.linen import pooling as pooling
    from flax.linen import recurrent as recurrent
    from flax.linen import relu as relu
    from flax.linen import relu6 as relu6
    from flax.linen import remat as remat
    from flax.linen import remat_scan as remat_scan
    from flax.linen import scan as scan
    from flax.linen import selu as selu
    from flax.linen import set_logical_axis_rules as set_logical_axis_rules
    from flax.linen import share_scope as share_scope
    from flax.linen import sigmoid as sigmoid
    from flax.linen import silu as silu
    from flax.linen import soft_sign as soft_sign
    from flax.linen import softmax as softmax
    from flax.linen import softplus as softplus
    from flax.linen import spmd as spmd
    from flax.linen import standardize as standardize
    from flax.linen import stochastic as stochastic
    from flax.linen import summary as summary
    from flax.linen import swish as swish
    from flax.linen import switch as switch
    from flax.linen import tabulate as tabulate
    from flax.linen import tanh as tanh
    from flax.linen import transforms as transforms
    from flax.linen import unbox as unbox
    from flax.linen import value_and_grad as value_and_grad
    from flax.linen import vjp as vjp
    from flax.linen import vmap as vmap
    from flax.linen import while_loop as while_loop
    from flax.linen import with_logical_constraint as with_logical_constraint
    from flax.linen import with_logical_partitioning as with_logical_partitioning
    from flax.linen import with_partitioning as with_partitioning
    from flax.linen import zeros as zeros
    from flax.linen import zeros_init as zeros_init
else:
    from flax.linen import *  # noqa: F403  (all of flax.linen, at the installed version)

from jln.flax._linen import BatchNorm as BatchNorm
from jln.flax._linen import GroupNorm as GroupNorm
from jln.flax._linen import InstanceNorm as InstanceNorm
from jln.flax._linen import LayerNorm as LayerNorm
from jln.flax._linen import RMSNorm as RMSNorm
