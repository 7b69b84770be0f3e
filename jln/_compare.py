"""The parity rule jln is held to, and the error measures it reports.

* General rule: ``max|jln - ref64| <= 2 * max|torch_lowp - ref64| + atol(dtype)``, where
  ``ref64`` is the torch reference evaluated in float64 on the same (rounded) inputs and
  ``torch_lowp`` the same reference in the dtype under test. jln may be at most twice as far
  from the exact answer as torch itself is.
* Named conventions in bfloat16 against torch: bit-exact on at least 99.5% of elements and
  never more than 1 ulp off.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

#: atol of the general rule, by dtype name (a floor for outputs torch happens to get exact).
ATOL = {"float64": 1e-12, "float32": 2e-6, "bfloat16": 1e-2, "float16": 2e-3}
#: rtol when there is no float64 reference (jln vs torch directly): relative to max|torch|,
#: a few ulp of the largest element, since summation orders differ (used by ``jln.testing``).
RTOL = {"float64": 1e-12, "float32": 4e-6, "bfloat16": 2 ** -6, "float16": 2 ** -9}
EXACT_FRACTION = 0.995
EXACT_MAX_ULP = 1


def to_numpy(a: Any) -> np.ndarray:
    """A NumPy copy of a jax array, torch tensor or array-like, keeping bfloat16 as ml_dtypes."""
    if hasattr(a, "detach"):  # torch
        import torch

        t = a.detach().cpu()
        if t.dtype == torch.bfloat16:
            import ml_dtypes

            return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
        return t.numpy()
    return np.asarray(a)


def _ordered_ints(a: np.ndarray) -> np.ndarray:
    """Map floats to integers whose order and spacing follow the float line (1 per ulp)."""
    bits = a.dtype.itemsize * 8
    ints = a.view({16: np.int16, 32: np.int32, 64: np.int64}[bits]).astype(np.int64)
    # sign-magnitude -> two's complement order; -0.0 and +0.0 coincide
    magnitude = ints & ((1 << (bits - 1)) - 1)
    return np.where(ints < 0, -magnitude, magnitude)


def ulp_distance(a: Any, b: Any) -> np.ndarray:
    """Elementwise distance in units in the last place between same-dtype arrays.

    NaN against NaN counts 0; NaN against a number counts as a huge distance.
    """
    a, b = to_numpy(a), to_numpy(b)
    if a.dtype != b.dtype:
        raise TypeError(f"ulp_distance needs equal dtypes; received {a.dtype} and {b.dtype}.")
    d = np.abs(_ordered_ints(a) - _ordered_ints(b))
    na, nb = np.isnan(a.astype(np.float64)), np.isnan(b.astype(np.float64))
    d = np.where(na & nb, 0, d)
    return np.where(na ^ nb, np.iinfo(np.int64).max, d)


@dataclass
class Report:
    """How one output of jln compares with torch and with the float64 reference."""

    dtype: str
    max_abs_err: float  # max |jln - ref64| (or - torch when no ref64)
    torch_err: float  # max |torch - ref64|
    max_ulp: int  # max ulp distance jln vs torch, same dtype
    frac_bitexact: float  # fraction of elements where jln == torch bit for bit
    bound: float  # what max_abs_err must not exceed
    exact_rule: bool  # whether the bf16 bit-exact rule applied
    passed: bool

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _f64(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float64)


def _max_abs(a: np.ndarray) -> float:
    if a.size == 0:
        return 0.0
    finite = np.isfinite(a)
    if not finite.all():
        return float("inf")
    return float(np.max(np.abs(a)))


def compare(
    jln_out: Any, torch_out: Any, ref64: Any | None = None, *, exact: bool = False,
    atol: float | None = None, rtol: float | None = None,
) -> Report:
    """Apply the parity rule to one output.

    Args:
      jln_out: jln's result.
      torch_out: torch's result in the same dtype.
      ref64: the torch reference evaluated in float64, or None (then the bound is
        ``atol`` around torch's own result).
      exact: apply the bfloat16 bit-exact rule (named conventions) when the dtype is bfloat16.
      atol: override ``ATOL[dtype]``.
      rtol: adds ``rtol * max|torch|`` to the bound (default none; ``jln.testing`` passes
        ``RTOL[dtype]`` when it compares with torch alone).

    Returns:
      a :class:`Report`; ``passed`` says whether the rule holds. NaN/Inf positions must agree
      between jln and torch.
    """
    j, t = to_numpy(jln_out), to_numpy(torch_out)
    dtype = str(j.dtype)
    if t.dtype != j.dtype:
        t = t.astype(j.dtype)
    if j.shape != t.shape:
        raise ValueError(f"shape mismatch: jln {j.shape} vs torch {t.shape}")
    jf, tf = _f64(j), _f64(t)
    same_nonfinite = np.array_equal(~np.isfinite(jf), ~np.isfinite(tf))
    mask = np.isfinite(jf) & np.isfinite(tf)
    ulps = ulp_distance(j, t)
    max_ulp = int(ulps.max()) if ulps.size else 0
    frac = float(np.mean(ulps == 0)) if ulps.size else 1.0
    atol = ATOL.get(dtype, 1e-6) if atol is None else atol
    rel = rtol * _max_abs(np.where(mask, tf, 0)) if rtol else 0.0
    if ref64 is not None:
        r = _f64(to_numpy(ref64))
        err = _max_abs(np.where(mask, jf - r, 0))
        torch_err = _max_abs(np.where(mask, tf - r, 0))
        bound = 2 * torch_err + atol + rel
    else:
        err = _max_abs(np.where(mask, jf - tf, 0))
        torch_err = 0.0
        bound = atol + rel
    exact_rule = exact and dtype == "bfloat16"
    passed = same_nonfinite and err <= bound
    if exact_rule:
        passed = same_nonfinite and frac >= EXACT_FRACTION and max_ulp <= EXACT_MAX_ULP
    return Report(dtype, err, torch_err, max_ulp, frac, bound, exact_rule, bool(passed))
