"""The Dynamic Tanh family's record: ``jln.dyt``, ``DyT``."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp
import numpy as np

from jln._registry import Family, Function, Op, axis, cast
from jln.families.dyt import convert, module, reference
from jln.families.dyt.function import dyt

#: alpha where an input set has none (``jln bench`` feeds x, scale and bias only)
ALPHA = 0.5


@dataclasses.dataclass(frozen=True)
class DyTOp(Op):
    """A DyT op: its inputs add the scalar ``alpha`` (torch's ``[1]``, near its init, in the
    parameters' dtype), so ``jln parity`` compares alpha's gradient too."""

    def make_inputs(self, shape: tuple[int, ...], k: int, dtype: str, param_dtype: str | None = None,
                    seed: int = 0) -> dict[str, np.ndarray]:
        out = super().make_inputs(shape, k, dtype, param_dtype, seed)
        rng = np.random.default_rng(seed + 7)
        out["alpha"] = cast(np.asarray([ALPHA + 0.2 * rng.standard_normal()]), param_dtype or dtype)
        return out

    def grad_atol(self, inputs: dict[str, np.ndarray], k: int = 1, ct_max: float = 5.0) -> float:
        """The norm floor, or that of alpha's gradient where it is larger: one sum over every
        element of ``ct * gamma * x * sech(alpha x)^2``, whose float rounding grows as the square
        root of the element count whatever the summation order (float32 alpha gradients over a
        few thousand elements differ from torch's by a few 1e-6)."""
        base = super().grad_atol(inputs, k, ct_max)
        x = inputs["x"].astype(np.float64)
        if x.size == 0:
            return base
        a = float(np.asarray(inputs.get("alpha", ALPHA), np.float64).reshape(-1)[0])
        g = float(np.max(np.abs(inputs["scale"].astype(np.float64)))) if "scale" in inputs else 1.0
        term = float(np.max(np.abs(x / np.cosh(a * x) ** 2))) * g * ct_max
        return max(base, 2 * float(jnp.finfo(str(inputs["x"].dtype)).eps) * float(np.sqrt(x.size)) * term)


def _alpha_jax(a: dict[str, Any]) -> Any:
    return a["alpha"] if "alpha" in a else jnp.full((1,), ALPHA, a["x"].dtype)


def _alpha_torch(t: dict[str, Any]) -> Any:
    import torch

    return t["alpha"] if "alpha" in t else torch.full((1,), ALPHA, dtype=t["x"].dtype)


DYT = Function(
    "dyt",
    lambda a, p, o, k: (dyt(a["x"], _alpha_jax(a), *p, axis=axis(k), **o),),
    lambda t, p, o, k: (reference.dyt(t["x"], _alpha_torch(t), *p, **o),),
    impl=False,
)

FAMILY = Family(
    "dyt",
    functions=(DYT,),
    ops=tuple(DyTOp(f"dyt[{conv}]", DYT, options={"convention": conv}, exact=True) for conv in ("torch", "float32")),
    kinds=(module.DYT,),
    converters=convert.CONVERTERS,
    layouts=convert.LAYOUTS,
)
