"""jln: normalization layers for JAX and Flax whose numbers match PyTorch.

Pure functions hold every formula once; ``jln.linen`` and ``jln.nnx`` wrap them in Flax
modules, ``jln.interop`` converts torch modules and checkpoints, ``jln.testing`` asserts
parity in a user's own tests. The submodules load on first use: ``import jln`` and then
``jln.linen.RMSNorm`` works, as ``jax.numpy`` does after ``import jax``.
"""

import importlib
from typing import TYPE_CHECKING, Any

from jln._distributed import shard_chunks as shard_chunks
from jln._quant import Quant as Quant
from jln._quant import Quantized as Quantized
from jln._quant import Stats as Stats
from jln.families.adaptive.function import ORDERS as ORDERS
from jln.families.adaptive.function import adaptive_layer_norm as adaptive_layer_norm
from jln.families.adaptive.function import adaptive_rms_norm as adaptive_rms_norm
from jln.families.adaptive.function import modulate as modulate
from jln.families.adaptive.function import split_condition as split_condition
from jln.families.affine.function import affine as affine
from jln.families.batch_norm.function import RunningStats as RunningStats
from jln.families.batch_norm.function import batch_norm as batch_norm
from jln.families.batch_norm.function import frozen_batch_norm as frozen_batch_norm
from jln.families.batch_norm.function import group_norm as group_norm
from jln.families.batch_norm.function import instance_norm as instance_norm
from jln.families.dyt.function import dyt as dyt
from jln.families.gated_rms_norm.function import GATED_CONVENTIONS as GATED_CONVENTIONS
from jln.families.gated_rms_norm.function import gated_rms_norm as gated_rms_norm
from jln.families.layer_norm.function import add_layer_norm as add_layer_norm
from jln.families.layer_norm.function import layer_norm as layer_norm
from jln.families.local_response_norm.function import local_response_norm as local_response_norm
from jln.families.lp_norm.function import global_response_norm as global_response_norm
from jln.families.lp_norm.function import lp_normalize as lp_normalize
from jln.families.poly_norm.function import poly_norm as poly_norm
from jln.families.rms_norm.function import CONVENTIONS as CONVENTIONS
from jln.families.rms_norm.function import add_rms_norm as add_rms_norm
from jln.families.rms_norm.function import rms_norm as rms_norm

__version__ = "0.1.0"

if TYPE_CHECKING:  # what the lazy attributes below are, for type checkers and IDEs
    from jln import flax as flax
    from jln import interop as interop
    from jln import linen as linen
    from jln import nnx as nnx
    from jln import testing as testing

#: the submodules ``jln.<name>`` loads on first use
_SUBMODULES = ("flax", "interop", "linen", "nnx", "testing")


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"jln.{name}")
    raise AttributeError(f"module 'jln' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_SUBMODULES])


__all__ = [
    "Quant",
    "Quantized",
    "Stats",
    "CONVENTIONS",
    "ORDERS",
    "adaptive_layer_norm",
    "add_layer_norm",
    "add_rms_norm",
    "layer_norm",
    "modulate",
    "rms_norm",
    "shard_chunks",
    "split_condition",
    "GATED_CONVENTIONS",
    "gated_rms_norm",
    "RunningStats",
    "batch_norm",
    "frozen_batch_norm",
    "group_norm",
    "instance_norm",
    "adaptive_rms_norm",
    "global_response_norm",
    "lp_normalize",
    "local_response_norm",
    "dyt",
    "affine",
    "poly_norm",
]
