"""The LayerNorm family's record: ``jln.layer_norm``, ``jln.add_layer_norm``, ``LayerNorm``."""

from __future__ import annotations

from jln._registry import Family, Function, Op, axis
from jln.families.layer_norm import convert, module, reference
from jln.families.layer_norm.function import add_layer_norm, layer_norm
from jln.families.layer_norm.spec import LayerNormSpec

LAYER_NORM = Function(
    "layer_norm",
    lambda a, p, o, k: (layer_norm(a["x"], *p, axis=axis(k), **o),),
    lambda t, p, o, k: (reference.layer_norm(t["x"], *p, k=k, **o),),
    spec=LayerNormSpec, centered=True, flax="LayerNorm",
)
ADD_LAYER_NORM = Function(
    "add_layer_norm",
    lambda a, p, o, k: tuple(add_layer_norm(a["x"], a["residual"], *p, axis=axis(k), **o)),
    lambda t, p, o, k: reference.add_layer_norm(t["x"], t["residual"], *p, k=k, **o),
    spec=LayerNormSpec, centered=True, residual=True, flax="LayerNorm",
)

FAMILY = Family(
    "layer_norm",
    functions=(LAYER_NORM, ADD_LAYER_NORM),
    ops=(
        Op("layer_norm", LAYER_NORM),
        Op("layer_norm[zero_centered]", LAYER_NORM, options={"zero_centered": True}, scale_center=0.0),
        Op("layer_norm[deberta]", LAYER_NORM, options={"convention": "deberta"}, exact=True),
        Op("layer_norm[eager]", LAYER_NORM, options={"convention": "eager"}, exact=True),
        Op("add_layer_norm", ADD_LAYER_NORM, extra=("residual",)),
        Op("add_layer_norm[deberta]", ADD_LAYER_NORM, extra=("residual",), options={"convention": "deberta"}, exact=True),
    ),
    kinds=(module.LAYER_NORM, module.QUANTIZED_LAYER_NORM),
    converters=convert.CONVERTERS,
    layouts=convert.LAYOUTS,
    near_misses=convert.NEAR_MISSES,
)
