# Written by `python -m jln._faces` from the module kinds of jln._index: edit those and run it
# again (tests/test_faces.py fails when this file is stale).
"""Flax linen modules over jln's core functions (the same classes, options and numbers as
:mod:`jln.nnx`).

Every class is written from its family's module kind (options, parameters, the pure function
it calls), as its :mod:`jln.nnx` twin is. Defaults follow torch (eps 1e-5, output in the input
dtype). ``dtype=None`` keeps the core functions' dtype rule; ``dtype=d`` computes in and
returns ``d``. ``monitor=True`` sows per-row input/output statistics (see
``jln._monitor.row_stats``) into the ``"intermediates"`` collection under ``"stats"``. A
flax argument name (``epsilon``...) gets a ``TypeError`` naming jln's.
"""

from jln.families.adaptive.linen import AdaGroupNorm as AdaGroupNorm
from jln.families.adaptive.linen import AdaLNContinuous as AdaLNContinuous
from jln.families.adaptive.linen import AdaLNScale as AdaLNScale
from jln.families.adaptive.linen import AdaLNSigmoidGate as AdaLNSigmoidGate
from jln.families.adaptive.linen import AdaLNSingle as AdaLNSingle
from jln.families.adaptive.linen import AdaLNTable as AdaLNTable
from jln.families.adaptive.linen import AdaLNZero as AdaLNZero
from jln.families.adaptive.linen import AdaLNZeroJoint as AdaLNZeroJoint
from jln.families.adaptive.linen import AdaptiveLayerNorm as AdaptiveLayerNorm
from jln.families.adaptive.linen import AdaRMSNorm as AdaRMSNorm
from jln.families.adaptive.linen import ModulatedRMSNorm as ModulatedRMSNorm
from jln.families.batch_norm.linen import BatchNorm as BatchNorm
from jln.families.batch_norm.linen import FrozenBatchNorm as FrozenBatchNorm
from jln.families.batch_norm.linen import GroupNorm as GroupNorm
from jln.families.batch_norm.linen import InstanceNorm as InstanceNorm
from jln.families.blocks.linen import DiTBlock as DiTBlock
from jln.families.blocks.linen import TransformerEncoderLayer as TransformerEncoderLayer
from jln.families.gated_rms_norm.linen import GatedRMSNorm as GatedRMSNorm
from jln.families.layer_norm.linen import LayerNorm as LayerNorm
from jln.families.local_response_norm.linen import LocalResponseNorm as LocalResponseNorm
from jln.families.lp_norm.linen import GlobalResponseNorm as GlobalResponseNorm
from jln.families.lp_norm.linen import LpNorm as LpNorm
from jln.families.rms_norm.linen import RMSNorm as RMSNorm

__all__ = [
    "LayerNorm",
    "RMSNorm",
    "GatedRMSNorm",
    "AdaptiveLayerNorm",
    "AdaLNZero",
    "AdaLNContinuous",
    "AdaLNZeroJoint",
    "AdaLNScale",
    "AdaLNSingle",
    "AdaGroupNorm",
    "AdaLNTable",
    "ModulatedRMSNorm",
    "AdaRMSNorm",
    "AdaLNSigmoidGate",
    "BatchNorm",
    "InstanceNorm",
    "GroupNorm",
    "FrozenBatchNorm",
    "LocalResponseNorm",
    "GlobalResponseNorm",
    "LpNorm",
    "TransformerEncoderLayer",
    "DiTBlock",
]
