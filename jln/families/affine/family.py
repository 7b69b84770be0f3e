"""The elementwise affine family's record: ``jln.affine``, ``Affine``, ``Standardize``."""

from __future__ import annotations

import dataclasses

import numpy as np

from jln._registry import Family, Function, Op, axis, cast
from jln.families.affine import convert, module, reference
from jln.families.affine.function import affine


@dataclasses.dataclass(frozen=True)
class AffineOp(Op):
    """An affine op; with ``center``, its inputs add the per-feature ``center`` (Phi-4's
    ``global_mean``, small, in the parameters' dtype), so ``jln parity`` compares its gradient
    too."""

    center: bool = False

    def make_inputs(self, shape: tuple[int, ...], k: int, dtype: str, param_dtype: str | None = None,
                    seed: int = 0) -> dict[str, np.ndarray]:
        out = super().make_inputs(shape, k, dtype, param_dtype, seed)
        if self.center:
            rng = np.random.default_rng(seed + 11)
            out["center"] = cast(0.3 * rng.standard_normal(shape[len(shape) - k:]), param_dtype or dtype)
        return out


AFFINE = Function(
    "affine",
    lambda a, p, o, k: (affine(a["x"], *p, center=a.get("center"), axis=axis(k), **o),),
    lambda t, p, o, k: (reference.affine(t["x"], *p, center=t.get("center"), **o),),
    impl=False,
)

FAMILY = Family(
    "affine",
    functions=(AFFINE,),
    ops=(
        AffineOp("affine[scale_bias]", AFFINE, exact=True),  # MobileBERT's NoNorm
        AffineOp("affine[center_scale]", AFFINE, params=("scale",), center=True, exact=True),  # Phi-4's
    ),
    kinds=(module.AFFINE, module.STANDARDIZE),
    converters=convert.CONVERTERS,
    layouts=convert.LAYOUTS,
)
