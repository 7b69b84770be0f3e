# Written by `python -m jln._faces` from the module kinds of jln._index: edit those and run it
# again (tests/test_faces.py fails when this file is stale).
"""Flax NNX modules over jln's core functions (the same classes, options and numbers as
:mod:`jln.linen`).

Every class is written from its family's module kind, as its :mod:`jln.linen` twin is. Size
arguments are positional, options keyword-only (but torch's positional ones in
``TransformerEncoderLayer``); each option reads as an attribute (``module.eps``) and all of
them as ``module.cfg``, as on a linen module. ``monitor=True`` sows per-row statistics as
``nnx.Intermediate`` named ``"stats"`` (read them with ``nnx.capture(model, nnx.Intermediate)``).
"""

from jln.families.adaptive.nnx import AdaGroupNorm as AdaGroupNorm
from jln.families.adaptive.nnx import AdaLNContinuous as AdaLNContinuous
from jln.families.adaptive.nnx import AdaLNScale as AdaLNScale
from jln.families.adaptive.nnx import AdaLNSigmoidGate as AdaLNSigmoidGate
from jln.families.adaptive.nnx import AdaLNSingle as AdaLNSingle
from jln.families.adaptive.nnx import AdaLNTable as AdaLNTable
from jln.families.adaptive.nnx import AdaLNZero as AdaLNZero
from jln.families.adaptive.nnx import AdaLNZeroJoint as AdaLNZeroJoint
from jln.families.adaptive.nnx import AdaptiveLayerNorm as AdaptiveLayerNorm
from jln.families.adaptive.nnx import AdaRMSNorm as AdaRMSNorm
from jln.families.adaptive.nnx import ModulatedRMSNorm as ModulatedRMSNorm
from jln.families.batch_norm.nnx import BatchNorm as BatchNorm
from jln.families.batch_norm.nnx import FrozenBatchNorm as FrozenBatchNorm
from jln.families.batch_norm.nnx import GroupNorm as GroupNorm
from jln.families.batch_norm.nnx import InstanceNorm as InstanceNorm
from jln.families.blocks.nnx import DiTBlock as DiTBlock
from jln.families.blocks.nnx import TransformerEncoderLayer as TransformerEncoderLayer
from jln.families.gated_rms_norm.nnx import GatedRMSNorm as GatedRMSNorm
from jln.families.layer_norm.nnx import LayerNorm as LayerNorm
from jln.families.local_response_norm.nnx import LocalResponseNorm as LocalResponseNorm
from jln.families.lp_norm.nnx import GlobalResponseNorm as GlobalResponseNorm
from jln.families.lp_norm.nnx import LpNorm as LpNorm
from jln.families.rms_norm.nnx import RMSNorm as RMSNorm

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
