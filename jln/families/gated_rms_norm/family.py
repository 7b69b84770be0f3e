"""The gated RMSNorm family's record: ``jln.gated_rms_norm``, ``GatedRMSNorm``, ``LowRankGatedRMSNorm``."""

from __future__ import annotations

from jln._registry import Family, Function, Op, axis
from jln.families.gated_rms_norm import convert, module, reference
from jln.families.gated_rms_norm.function import gated_rms_norm
from jln.families.gated_rms_norm.spec import GatedRMSNormSpec

GATED_RMS_NORM = Function(
    "gated_rms_norm",
    lambda a, p, o, k: (gated_rms_norm(a["x"], a.get("gate"), *p, axis=axis(k), **o),),
    lambda t, p, o, k: (reference.gated_rms_norm(t["x"], t.get("gate"), *p, k=k, **o),),
    spec=GatedRMSNormSpec, flax="RMSNorm",
)

FAMILY = Family(
    "gated_rms_norm",
    functions=(GATED_RMS_NORM,),
    ops=tuple(Op(f"gated_rms_norm[{conv}]", GATED_RMS_NORM, params=("scale",), extra=("gate",),
                 options={"convention": conv}, exact=True) for conv in ("mamba", "qwen3_next", "float32")),
    kinds=(module.GATED_RMS_NORM, module.LOW_RANK_GATED_RMS_NORM),
    converters=convert.CONVERTERS,
    layouts=convert.LAYOUTS,
    near_misses=convert.NEAR_MISSES,
)
