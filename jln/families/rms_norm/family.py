"""The RMSNorm family's record: ``jln.rms_norm``, ``jln.add_rms_norm``, ``RMSNorm``."""

from __future__ import annotations

from typing import Any

from jln._registry import Family, Function, Op, axis
from jln.families.rms_norm import convert, module, reference
from jln.families.rms_norm.function import add_rms_norm, rms_norm
from jln.families.rms_norm.spec import RMSNormSpec

RMS_NORM = Function(
    "rms_norm",
    lambda a, p, o, k: (rms_norm(a["x"], p[0], bias=a.get("bias"), axis=axis(k), **o),),
    lambda t, p, o, k: (reference.rms_norm(t["x"], p[0], bias=t.get("bias"), k=k, **o),),
    spec=RMSNormSpec, flax="RMSNorm",
)
ADD_RMS_NORM = Function(
    "add_rms_norm",
    lambda a, p, o, k: tuple(add_rms_norm(a["x"], a["residual"], *p, axis=axis(k), **o)),
    lambda t, p, o, k: reference.add_rms_norm(t["x"], t["residual"], *p, k=k, **o),
    spec=RMSNormSpec, residual=True, flax="RMSNorm",
)


def _rms(conv: str, **kw: Any) -> Op:
    return Op(
        f"rms_norm[{conv}]",
        RMS_NORM,
        params=("scale", "bias") if conv == "diffusers" else ("scale",),
        options={"convention": conv, **kw},
        exact=conv != "torch",
        scale_center=0.0 if conv in ("gemma", "input_scaled", "gemma_rounded") else 1.0,
    )


FAMILY = Family(
    "rms_norm",
    functions=(RMS_NORM, ADD_RMS_NORM),
    ops=(
        _rms("torch"),
        _rms("llama", eps=1e-6),
        _rms("gemma", eps=1e-6),
        _rms("t5", eps=1e-6),
        _rms("diffusers", eps=1e-6),
        _rms("seed", eps=1e-8),
        _rms("eager", eps=1e-5),
        _rms("round_rstd", eps=1e-6),
        _rms("input_scaled", eps=1e-6),
        _rms("gemma_rounded", eps=1e-6),
        Op("add_rms_norm[torch]", ADD_RMS_NORM, params=("scale",), extra=("residual",), options={"convention": "torch"}),
        Op("add_rms_norm[llama]", ADD_RMS_NORM, params=("scale",), extra=("residual",),
           options={"convention": "llama", "eps": 1e-6}, exact=True),
    ),
    kinds=(module.RMS_NORM, module.QUANTIZED_RMS_NORM),
    converters=convert.CONVERTERS,
    layouts=convert.LAYOUTS,
    near_misses=convert.NEAR_MISSES,
)
