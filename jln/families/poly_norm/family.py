"""The PolyNorm family's record: ``jln.poly_norm``, ``PolyNorm``."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp
import numpy as np

from jln._registry import Family, Function, Op, axis, cast
from jln.families.poly_norm import convert, module, reference
from jln.families.poly_norm.function import poly_norm


@dataclasses.dataclass(frozen=True)
class PolyNormOp(Op):
    """A PolyNorm op: its inputs are ``x``, the ``(3,)`` ``weight`` (near Liger's 1/3) and the
    scalar ``bias``, in the parameters' dtype, so ``jln parity`` compares their gradients too."""

    def make_inputs(self, shape: tuple[int, ...], k: int, dtype: str, param_dtype: str | None = None,
                    seed: int = 0) -> dict[str, np.ndarray]:
        out = super().make_inputs(shape, k, dtype, param_dtype, seed)
        rng = np.random.default_rng(seed + 11)
        pdt = param_dtype or dtype
        out["weight"] = cast(1 / 3 + 0.1 * rng.standard_normal(3), pdt)
        out["bias"] = cast(np.asarray(0.1 * rng.standard_normal()), pdt)
        return out

    def grad_atol(self, inputs: dict[str, np.ndarray], k: int = 1, ct_max: float = 5.0) -> float:
        """The norm floor, or that of the weight's and bias's gradients where it is larger: each
        one sum over every element (of ``ct * n(x^p)``, of ``ct``), whose float rounding grows as
        the square root of the element count whatever the summation order."""
        base = super().grad_atol(inputs, k, ct_max)
        x = inputs["x"].astype(np.float64)
        if x.size == 0:
            return base
        axes = tuple(range(x.ndim - k, x.ndim))
        big = max(float(np.max(np.abs(u / np.sqrt(np.mean(u * u, axis=axes, keepdims=True) + 1e-6))))
                  for u in (x**3, x**2, x))
        eps = float(jnp.finfo(str(inputs["x"].dtype)).eps)
        return max(base, 2 * eps * float(np.sqrt(x.size)) * max(big, 1.0) * ct_max)


def _params_jax(a: dict[str, Any]) -> tuple[Any, Any]:
    """The op's weight and bias; Liger's init where an input set has none (``jln bench`` feeds x)."""
    dt = a["x"].dtype
    return a.get("weight", jnp.full((3,), 1 / 3, dt)), a.get("bias", jnp.zeros((), dt))


def _params_torch(t: dict[str, Any]) -> tuple[Any, Any]:
    import torch

    dt = t["x"].dtype
    return (t["weight"] if "weight" in t else torch.full((3,), 1 / 3, dtype=dt),
            t["bias"] if "bias" in t else torch.zeros((), dtype=dt))


POLY_NORM = Function(
    "poly_norm",
    lambda a, p, o, k: (poly_norm(a["x"], *_params_jax(a), axis=axis(k), **o),),
    lambda t, p, o, k: (reference.poly_norm(t["x"], *_params_torch(t), axis=axis(k), **o),),
    impl=False,
)

FAMILY = Family(
    "poly_norm",
    functions=(POLY_NORM,),
    ops=(PolyNormOp("poly_norm", POLY_NORM, params=(), exact=True),),
    kinds=(module.POLY_NORM,),
    converters=convert.CONVERTERS,
    layouts=convert.LAYOUTS,
)
