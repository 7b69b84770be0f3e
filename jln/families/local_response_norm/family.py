"""The local response norm family's record: ``jln.local_response_norm``, ``LocalResponseNorm``."""

from __future__ import annotations

from jln._registry import Family, Function, Op
from jln.families.local_response_norm import convert, module, reference
from jln.families.local_response_norm.function import local_response_norm

LOCAL_RESPONSE_NORM = Function(
    "local_response_norm",
    lambda a, p, o, k: (local_response_norm(a["x"], **o),),
    lambda t, p, o, k: (reference.local_response_norm(t["x"], **o),),
    stat_axes=lambda ndim, k: (ndim - 1,), impl=False, min_rank=3,
)

FAMILY = Family(
    "local_response_norm",
    functions=(LOCAL_RESPONSE_NORM,),
    ops=(Op("local_response_norm", LOCAL_RESPONSE_NORM, params=(), options={"size": 3, "alpha": 0.1, "channel_axis": -1},
            multi_axis=False, exact=True),),
    kinds=(module.LOCAL_RESPONSE_NORM,),
    converters=convert.CONVERTERS,
    layouts=convert.LAYOUTS,
)
