"""The Lp family's record: ``jln.lp_normalize``, ``jln.global_response_norm``, ``LpNorm``,
``ScaledLpNorm``, ``QKL2Norm``, ``GlobalResponseNorm``."""

from __future__ import annotations

from jln._registry import Family, Function, Op, axis, spatial
from jln.families.lp_norm import convert, module, reference
from jln.families.lp_norm.function import global_response_norm, lp_normalize

LP_NORMALIZE = Function(
    "lp_normalize",
    lambda a, p, o, k: (lp_normalize(a["x"], axis=axis(k), **o),),
    lambda t, p, o, k: (reference.lp_normalize(t["x"], axis=axis(k), **o),), impl=False,
)
GLOBAL_RESPONSE_NORM = Function(
    "global_response_norm",
    lambda a, p, o, k: (global_response_norm(a["x"], *p, spatial_axes=spatial(a["x"].ndim, k), **o),),
    lambda t, p, o, k: (reference.global_response_norm(t["x"], *p, spatial_axes=spatial(t["x"].dim(), k), **o),),
    stat_axes=spatial, impl=False, min_rank=3,
)

FAMILY = Family(
    "lp_norm",
    functions=(LP_NORMALIZE, GLOBAL_RESPONSE_NORM),
    ops=(Op("lp_normalize", LP_NORMALIZE, params=(), exact=True),
         Op("global_response_norm", GLOBAL_RESPONSE_NORM, multi_axis=False, exact=True)),
    kinds=(module.GLOBAL_RESPONSE_NORM, module.LP_NORM, module.SCALED_LP_NORM, module.QK_L2_NORM),
    converters=convert.CONVERTERS,
    layouts=convert.LAYOUTS,
)
