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

import typing as _typing

if _typing.TYPE_CHECKING:
    # flax.nnx's names spelt out, so that type checkers see them and jln's five norms below
    # (through a star import mypy would take flax's norms); tests/test_flax_dropin.py checks
    # that the list is the installed flax's
    from flax.nnx import EMA as EMA
    from flax.nnx import PARTITION_NAME as PARTITION_NAME
    from flax.nnx import RNN as RNN
    from flax.nnx import A as A
    from flax.nnx import All as All
    from flax.nnx import Any as Any
    from flax.nnx import BatchStat as BatchStat
    from flax.nnx import Bidirectional as Bidirectional
    from flax.nnx import Cache as Cache
    from flax.nnx import Carry as Carry
    from flax.nnx import Conv as Conv
    from flax.nnx import ConvTranspose as ConvTranspose
    from flax.nnx import Data as Data
    from flax.nnx import Dict as Dict
    from flax.nnx import DiffState as DiffState
    from flax.nnx import Dropout as Dropout
    from flax.nnx import Einsum as Einsum
    from flax.nnx import Embed as Embed
    from flax.nnx import Everything as Everything
    from flax.nnx import FlatState as FlatState
    from flax.nnx import GraphDef as GraphDef
    from flax.nnx import GraphState as GraphState
    from flax.nnx import GRUCell as GRUCell
    from flax.nnx import Initializer as Initializer
    from flax.nnx import Intermediate as Intermediate
    from flax.nnx import Linear as Linear
    from flax.nnx import LinearGeneral as LinearGeneral
    from flax.nnx import List as List
    from flax.nnx import LoRA as LoRA
    from flax.nnx import LoRALinear as LoRALinear
    from flax.nnx import LoRAParam as LoRAParam
    from flax.nnx import LSTMCell as LSTMCell
    from flax.nnx import M as M
    from flax.nnx import MergeContext as MergeContext
    from flax.nnx import Metric as Metric
    from flax.nnx import ModelAndOptimizer as ModelAndOptimizer
    from flax.nnx import Module as Module
    from flax.nnx import MultiHeadAttention as MultiHeadAttention
    from flax.nnx import MultiMetric as MultiMetric
    from flax.nnx import NodeStates as NodeStates
    from flax.nnx import Not as Not
    from flax.nnx import Nothing as Nothing
    from flax.nnx import Object as Object
    from flax.nnx import OfType as OfType
    from flax.nnx import OptArray as OptArray
    from flax.nnx import OptimizedLSTMCell as OptimizedLSTMCell
    from flax.nnx import Optimizer as Optimizer
    from flax.nnx import OptState as OptState
    from flax.nnx import OptVariable as OptVariable
    from flax.nnx import Param as Param
    from flax.nnx import PathContains as PathContains
    from flax.nnx import Perturbation as Perturbation
    from flax.nnx import PReLU as PReLU
    from flax.nnx import PureState as PureState
    from flax.nnx import Pytree as Pytree
    from flax.nnx import RngCount as RngCount
    from flax.nnx import RngKey as RngKey
    from flax.nnx import Rngs as Rngs
    from flax.nnx import RngState as RngState
    from flax.nnx import RngStream as RngStream
    from flax.nnx import RNNCellBase as RNNCellBase
    from flax.nnx import Sequential as Sequential
    from flax.nnx import SimpleCell as SimpleCell
    from flax.nnx import SpectralNorm as SpectralNorm
    from flax.nnx import SplitContext as SplitContext
    from flax.nnx import State as State
    from flax.nnx import StateAxes as StateAxes
    from flax.nnx import StateSharding as StateSharding
    from flax.nnx import Static as Static
    from flax.nnx import TrainState as TrainState
    from flax.nnx import UpdateContext as UpdateContext
    from flax.nnx import Variable as Variable
    from flax.nnx import VariableMetadata as VariableMetadata
    from flax.nnx import WeightNorm as WeightNorm
    from flax.nnx import WithTag as WithTag
    from flax.nnx import abstract_with_sharding as abstract_with_sharding
    from flax.nnx import as_abstract as as_abstract
    from flax.nnx import as_pure as as_pure
    from flax.nnx import avg_pool as avg_pool
    from flax.nnx import bridge as bridge
    from flax.nnx import cached_partial as cached_partial
    from flax.nnx import call as call
    from flax.nnx import capture as capture
    from flax.nnx import celu as celu
    from flax.nnx import check_pytree as check_pytree
    from flax.nnx import checkify as checkify
    from flax.nnx import clone as clone
    from flax.nnx import combine_masks as combine_masks
    from flax.nnx import compat as compat
    from flax.nnx import cond as cond
    from flax.nnx import current_update_context as current_update_context
    from flax.nnx import custom_vjp as custom_vjp
    from flax.nnx import data as data
    from flax.nnx import dataclass as dataclass
    from flax.nnx import deprecations as deprecations
    from flax.nnx import display as display
    from flax.nnx import dot_product_attention as dot_product_attention
    from flax.nnx import elu as elu
    from flax.nnx import eval_shape as eval_shape
    from flax.nnx import extract as extract
    from flax.nnx import filter_state as filter_state
    from flax.nnx import filterlib as filterlib
    from flax.nnx import find_duplicates as find_duplicates
    from flax.nnx import flatten as flatten
    from flax.nnx import fori_loop as fori_loop
    from flax.nnx import fork_rngs as fork_rngs
    from flax.nnx import from_flat_state as from_flat_state
    from flax.nnx import from_tree as from_tree
    from flax.nnx import gelu as gelu
    from flax.nnx import get_abstract_model as get_abstract_model
    from flax.nnx import get_named_sharding as get_named_sharding
    from flax.nnx import get_partition_spec as get_partition_spec
    from flax.nnx import glu as glu
    from flax.nnx import grad as grad
    from flax.nnx import graph as graph
    from flax.nnx import graphdef as graphdef
    from flax.nnx import graphlib as graphlib
    from flax.nnx import hard_sigmoid as hard_sigmoid
    from flax.nnx import hard_silu as hard_silu
    from flax.nnx import hard_swish as hard_swish
    from flax.nnx import hard_tanh as hard_tanh
    from flax.nnx import has_data as has_data
    from flax.nnx import helpers as helpers
    from flax.nnx import identity as identity
    from flax.nnx import initializers as initializers
    from flax.nnx import is_data as is_data
    from flax.nnx import iter_children as iter_children
    from flax.nnx import iter_graph as iter_graph
    from flax.nnx import iter_module_children as iter_module_children
    from flax.nnx import iter_modules as iter_modules
    from flax.nnx import jit as jit
    from flax.nnx import jit_partial as jit_partial
    from flax.nnx import jvp as jvp
    from flax.nnx import leaky_relu as leaky_relu
    from flax.nnx import log_sigmoid as log_sigmoid
    from flax.nnx import log_softmax as log_softmax
    from flax.nnx import logical_axis_rules as logical_axis_rules
    from flax.nnx import logsumexp as logsumexp
    from flax.nnx import make_attention_mask as make_attention_mask
    from flax.nnx import make_causal_mask as make_causal_mask
    from flax.nnx import make_jaxpr as make_jaxpr
    from flax.nnx import map as map
    from flax.nnx import map_state as map_state
    from flax.nnx import max_pool as max_pool
    from flax.nnx import merge as merge
    from flax.nnx import merge_context as merge_context
    from flax.nnx import merge_state as merge_state
    from flax.nnx import metrics as metrics
    from flax.nnx import min_pool as min_pool
    from flax.nnx import module as module
    from flax.nnx import nn as nn
    from flax.nnx import object as object
    from flax.nnx import one_hot as one_hot
    from flax.nnx import optimizer as optimizer
    from flax.nnx import pmap as pmap
    from flax.nnx import pool as pool
    from flax.nnx import pop as pop
    from flax.nnx import prefix as prefix
    from flax.nnx import proxy_caller as proxy_caller
    from flax.nnx import pure as pure
    from flax.nnx import pytreelib as pytreelib
    from flax.nnx import recursive_map as recursive_map
    from flax.nnx import register_data_type as register_data_type
    from flax.nnx import register_variable_name as register_variable_name
    from flax.nnx import relu as relu
    from flax.nnx import relu6 as relu6
    from flax.nnx import remat as remat
    from flax.nnx import replace_by_pure_dict as replace_by_pure_dict
    from flax.nnx import reprlib as reprlib
    from flax.nnx import reseed as reseed
    from flax.nnx import restore_int_paths as restore_int_paths
    from flax.nnx import restore_rngs as restore_rngs
    from flax.nnx import rnglib as rnglib
    from flax.nnx import scan as scan
    from flax.nnx import selu as selu
    from flax.nnx import set_graph_mode as set_graph_mode
    from flax.nnx import set_graph_updates as set_graph_updates
    from flax.nnx import set_metadata as set_metadata
    from flax.nnx import shard_map as shard_map
    from flax.nnx import sigmoid as sigmoid
    from flax.nnx import silu as silu
    from flax.nnx import soft_sign as soft_sign
    from flax.nnx import softmax as softmax
    from flax.nnx import softplus as softplus
    from flax.nnx import split as split
    from flax.nnx import split_context as split_context
    from flax.nnx import split_rngs as split_rngs
    from flax.nnx import split_state as split_state
    from flax.nnx import spmd as spmd
    from flax.nnx import standardize as standardize
    from flax.nnx import state as state
    from flax.nnx import statelib as statelib
    from flax.nnx import static as static
    from flax.nnx import summary as summary
    from flax.nnx import swish as swish
    from flax.nnx import switch as switch
    from flax.nnx import tabulate as tabulate
    from flax.nnx import tanh as tanh
    from flax.nnx import to_flat_state as to_flat_state
    from flax.nnx import to_pure_dict as to_pure_dict
    from flax.nnx import to_tree as to_tree
    from flax.nnx import tracers as tracers
    from flax.nnx import training as training
    from flax.nnx import transform_metadata as transform_metadata
    from flax.nnx import transforms as transforms
    from flax.nnx import traversals as traversals
    from flax.nnx import unflatten as unflatten
    from flax.nnx import unpack as unpack
    from flax.nnx import update as update
    from flax.nnx import update_context as update_context
    from flax.nnx import use_eager_sharding as use_eager_sharding
    from flax.nnx import using_eager_sharding as using_eager_sharding
    from flax.nnx import value_and_grad as value_and_grad
    from flax.nnx import var_defaults as var_defaults
    from flax.nnx import variable_name_from_type as variable_name_from_type
    from flax.nnx import variable_type_from_name as variable_type_from_name
    from flax.nnx import variablelib as variablelib
    from flax.nnx import variables as variables
    from flax.nnx import vars_as as vars_as
    from flax.nnx import view as view
    from flax.nnx import view_info as view_info
    from flax.nnx import visualization as visualization
    from flax.nnx import vjp as vjp
    from flax.nnx import vmap as vmap
    from flax.nnx import while_loop as while_loop
    from flax.nnx import with_attributes as with_attributes
    from flax.nnx import with_metadata as with_metadata
    from flax.nnx import with_partitioning as with_partitioning
    from flax.nnx import with_rngs as with_rngs
    from flax.nnx import with_vars as with_vars
    from flax.nnx import wrappers as wrappers
else:
    from flax.nnx import *  # noqa: F403  (all of flax.nnx, at the installed version)

from jln.flax._nnx import BatchNorm as BatchNorm
from jln.flax._nnx import GroupNorm as GroupNorm
from jln.flax._nnx import InstanceNorm as InstanceNorm
from jln.flax._nnx import LayerNorm as LayerNorm
from jln.flax._nnx import RMSNorm as RMSNorm
