"""The adaptive family's record: ``jln.modulate``, ``jln.adaptive_layer_norm``,
``jln.adaptive_rms_norm`` and the adaptive (conditioned) modules."""

from __future__ import annotations

from typing import Any

from jln._registry import Family, Function, Op, axis
from jln.families.adaptive import conditioned, convert, module, reference
from jln.families.adaptive.function import ORDERS, adaptive_layer_norm, adaptive_rms_norm, modulate
from jln.families.layer_norm.spec import LayerNormSpec


def _adaptive_torch(t: dict[str, Any], p: list[Any], o: dict[str, Any], k: int) -> tuple[Any, ...]:
    order = ORDERS[o.pop("order")]
    return (reference.adaptive_layer_norm(t["x"], t["emb"], *p, order=order, **o),)


def _adaptive_rms_torch(t: dict[str, Any], p: list[Any], o: dict[str, Any], k: int) -> tuple[Any, ...]:
    order = ORDERS[o.pop("order")]
    return (reference.adaptive_rms_norm(t["x"], t["emb"], *p, order=order, **o),)


MODULATE = Function(
    "modulate",
    lambda a, p, o, k: (modulate(a["x"], a["shift"], a["scale_c"], **o),),
    lambda t, p, o, k: (reference.modulate(t["x"], t["shift"], t["scale_c"], **o),), impl=False,
)
ADAPTIVE_LAYER_NORM = Function(
    "adaptive_layer_norm",
    lambda a, p, o, k: (adaptive_layer_norm(a["x"], a["emb"], *p, axis=axis(k), **o)[0],),
    _adaptive_torch, spec=LayerNormSpec, centered=True, flax="LayerNorm",
)
ADAPTIVE_RMS_NORM = Function(
    "adaptive_rms_norm",
    lambda a, p, o, k: (adaptive_rms_norm(a["x"], a["emb"], *p, **o)[0],),
    _adaptive_rms_torch,
)

FAMILY = Family(
    "adaptive",
    functions=(MODULATE, ADAPTIVE_LAYER_NORM, ADAPTIVE_RMS_NORM),
    ops=(
        Op("modulate", MODULATE, params=(), extra=("shift", "scale_c"), multi_axis=False, exact=True),
        Op("adaptive_layer_norm[seed]", ADAPTIVE_LAYER_NORM, extra=("emb",), options={"order": "seed"},
           multi_axis=False, chunks=2),
        Op("adaptive_layer_norm[dit]", ADAPTIVE_LAYER_NORM, params=(), extra=("emb",),
           options={"order": "dit", "eps": 1e-6}, multi_axis=False, chunks=6),
        Op("adaptive_layer_norm[continuous]", ADAPTIVE_LAYER_NORM, extra=("emb",),
           options={"order": "continuous", "eps": 1e-6}, multi_axis=False, chunks=2),
        Op("adaptive_rms_norm[lumina_zero]", ADAPTIVE_RMS_NORM, params=("scale",), extra=("emb",),
           options={"order": "lumina_zero", "eps": 1e-6}, multi_axis=False, chunks=4, exact=True),
    ),
    kinds=(module.ADAPTIVE_LAYER_NORM, module.ADA_LN_ZERO, module.ADA_LN_CONTINUOUS, module.ADA_LN_ZERO_JOINT,
           module.ADA_LN_SCALE, module.ADA_LN_SINGLE, conditioned.ADA_GROUP_NORM, conditioned.ADA_LN_TABLE,
           conditioned.MODULATED_RMS_NORM, conditioned.ADA_RMS_NORM, conditioned.ADA_LN_SIGMOID_GATE,
           conditioned.SPATIAL_NORM),
    converters=convert.CONVERTERS,
    layouts=convert.LAYOUTS,
    near_misses=convert.NEAR_MISSES,
)
