"""The parity rule jln is held to, and the error measures it reports.

* General rule: ``max|jln - ref64| <= 2 * max|torch_lowp - ref64| + atol(dtype)``, where
  ``ref64`` is the torch reference evaluated in float64 on the same (rounded) inputs and
  ``torch_lowp`` the same reference in the dtype under test. jln may be at most twice as far
  from the exact answer as torch itself is.
* Named conventions in bfloat16 and float16 against torch (``exact=True``): bit-exact on at
  least 99.5% of elements and never more than 2 ulp off: 2 of the element's own ulps, or 1 ulp
  of its row's largest value (an element that the output's bias brings near zero keeps the
  rounding of the product it cancels: DeBERTa's ``w·h + b`` in float16 turns a one-ulp split of
  ``w·h`` into 8 ulps of a small result, *measured* by ``jln parity --full``). (The
  general rule's bound, twice torch's own error, is a few ulp in a half type: wide enough to
  let a convention with the wrong rounding order through, which this rule catches.)
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

#: atol of the general rule, by dtype name (a floor for outputs torch happens to get exact).
ATOL = {"float64": 1e-12, "float32": 2e-6, "bfloat16": 1e-2, "float16": 2e-3}
#: rtol when there is no float64 reference (jln vs torch directly): relative to max|torch|,
#: a few ulp of the largest element, since summation orders differ (used by ``jln.testing``).
RTOL = {"float64": 1e-12, "float32": 4e-6, "bfloat16": 2 ** -6, "float16": 2 ** -9}
EXACT_FRACTION = 0.995
#: the dtypes the bit-exact rule applies to (``exact=True``), each with the most ulp any element
#: may be off: 2. An output rounded twice (``w * h`` after ``h`` is rounded: LLaMA's, diffusers'
#: and Qwen3-Next's orders) turns a row whose float32 statistics round ``h`` one ulp the other
#: way (rsqrt and summation order differ between libraries) into two ulp of the product, where
#: ``w``'s mantissa carries it (measured by ``jln parity --full``: float16 often; bfloat16 in
#: 1-3 of 65,536 elements at 64x1024 for diffusers' and Qwen3-Next's orders; >= 99.99% bit-exact).
EXACT_MAX_ULP = {"bfloat16": 2, "float16": 2}
EXACT_DTYPES = tuple(EXACT_MAX_ULP)


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
    return np.where(na ^ nb, NAN_ULP, d)


#: The ulp distance :func:`ulp_distance` gives a NaN against a number: no distance at all, shown
#: as ``nan`` (:func:`ulp_text`).
NAN_ULP = int(np.iinfo(np.int64).max)


def ulp_text(max_ulp: float) -> str:
    """An ulp distance for people: the number (3 significant digits where it is not whole), or
    ``nan`` where a NaN met a number (no distance)."""
    if math.isnan(max_ulp) or max_ulp >= NAN_ULP:
        return "nan"
    return str(int(max_ulp)) if float(max_ulp).is_integer() else f"{max_ulp:.3g}"


def _ulp_of(m: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The spacing of ``dtype``'s numbers at magnitude ``m`` (float64 array; the smallest
    subnormal at and near 0)."""
    import ml_dtypes

    info = ml_dtypes.finfo(dtype)
    tiny = float(info.smallest_subnormal)
    with np.errstate(divide="ignore"):
        e = np.floor(np.log2(np.where(m > 0, m, 1.0)))
    return np.maximum(np.where(m > 0, np.exp2(e - info.nmant), tiny), tiny)


def row_ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``|a - b|`` elementwise, in units in the last place of each row's largest ``|b|``, the
    reference.

    A row is the last axis (a scalar is one row). Near-zero elements have tiny ulps of their
    own, so an error that is invisible at the row's scale can be millions of their ulps
    (:func:`ulp_distance`); here every element's error is measured in the units of the row's
    magnitude, which is what a downstream matmul sees. Non-finite elements give 0
    (:func:`compare` counts them apart).
    """
    a, b = to_numpy(a), to_numpy(b)
    af, bf = np.atleast_1d(a.astype(np.float64)), np.atleast_1d(b.astype(np.float64))
    finite = np.isfinite(af) & np.isfinite(bf)
    af, bf = np.where(finite, af, 0.0), np.where(finite, bf, 0.0)  # (no inf - inf below)
    err, mag = np.abs(af - bf), np.abs(bf)
    if err.size == 0:
        return err
    scale = _ulp_of(mag.max(axis=-1, keepdims=True), b.dtype)
    with np.errstate(over="ignore"):  # a row whose largest |b| is subnormal: inf ulps
        return err / scale


def row_ulp(a: np.ndarray, b: np.ndarray) -> float:
    """The largest of :func:`row_ulps` (0 for an empty array)."""
    r = row_ulps(a, b)
    return float(r.max()) if r.size else 0.0


@dataclass
class Report:
    """How one output of jln compares with torch and with the float64 reference."""

    dtype: str
    max_abs_err: float  # max |jln - ref64| (or - torch when no ref64)
    torch_err: float  # max |torch - ref64| (0 when no ref64)
    #: max |jln - torch| (same dtype) in ulps of each row's max |torch| (:func:`row_ulp`);
    #: nan where a NaN meets a number
    max_ulp: float
    frac_bitexact: float  # fraction of elements where jln == torch bit for bit
    bound: float  # what max_abs_err must not exceed
    exact_rule: bool  # whether the half-precision bit-exact rule applied
    passed: bool
    #: elements where jln's NaN/+-inf differ from torch's (NaN against inf, an infinity's sign,
    #: a non-finite value against a finite one): the rule needs none
    nonfinite_mismatch: int = 0
    #: whether max_abs_err and torch_err are against a float64 reference (else against torch)
    ref64: bool = True
    #: the largest elementwise ulp distance jln vs torch (:func:`ulp_distance`: each element in
    #: its own ulps, so a near-zero element's tiny error can count 1e9; NAN_ULP: a NaN against
    #: a number); the half-precision bit-exact rule bounds this one
    max_ulp_elementwise: int = 0
    #: max |reference| over the compared elements (ref64, else torch): max_rel_err's divisor
    ref_max_abs: float = 0.0

    @property
    def max_rel_err(self) -> float:
        """``max_abs_err / max|reference|`` (0 when both are 0, inf when only the error is not)."""
        if self.ref_max_abs > 0:
            return self.max_abs_err / self.ref_max_abs
        return 0.0 if self.max_abs_err == 0 else math.inf

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
      exact: apply the bit-exact rule (named conventions) when the dtype is in
        :data:`EXACT_DTYPES` (bfloat16, float16).
      atol: override ``ATOL[dtype]``.
      rtol: adds ``rtol * max|torch|`` to the bound (default none; ``jln.testing`` passes
        ``RTOL[dtype]`` when it compares with torch alone).

    Returns:
      a :class:`Report`; ``passed`` says whether the rule holds. jln must have NaN exactly
      where torch has NaN and each infinity where torch has the same infinity (same sign).
    """
    j, t = to_numpy(jln_out), to_numpy(torch_out)
    dtype = str(j.dtype)
    if t.dtype != j.dtype:
        t = t.astype(j.dtype)
    if j.shape != t.shape:
        raise ValueError(f"shape mismatch: jln {j.shape} vs torch {t.shape}")
    jf, tf = _f64(j), _f64(t)
    # NaN where torch has NaN, and each infinity with torch's sign: a port that turns an
    # overflow into NaN, or flips an infinity's sign, must not pass
    differ = (np.isnan(jf) != np.isnan(tf)) | (np.where(np.isinf(jf), jf, 0.0) != np.where(np.isinf(tf), tf, 0.0))
    nonfinite_mismatch = int(np.count_nonzero(differ))
    same_nonfinite = nonfinite_mismatch == 0
    mask = np.isfinite(jf) & np.isfinite(tf)
    ulps = ulp_distance(j, t)
    max_ulp_elem = int(ulps.max()) if ulps.size else 0
    max_ulp = math.nan if max_ulp_elem >= NAN_ULP else row_ulp(j, t)
    frac = float(np.mean(ulps == 0)) if ulps.size else 1.0
    atol = ATOL.get(dtype, 1e-6) if atol is None else atol
    rel = rtol * _max_abs(np.where(mask, tf, 0)) if rtol else 0.0
    jm, tm = np.where(mask, jf, 0.0), np.where(mask, tf, 0.0)  # (no inf - inf below)
    if ref64 is not None:
        rm = np.where(mask, _f64(to_numpy(ref64)), 0.0)
        err = _max_abs(jm - rm)
        torch_err = _max_abs(tm - rm)
        bound = 2 * torch_err + atol + rel
        ref_max = _max_abs(np.where(np.isfinite(rm), rm, 0.0))
    else:
        err = _max_abs(jm - tm)
        torch_err = 0.0
        bound = atol + rel
        ref_max = _max_abs(tm)
    exact_rule = exact and dtype in EXACT_DTYPES
    passed = same_nonfinite and err <= bound
    if exact_rule:
        close = (ulps <= EXACT_MAX_ULP[dtype]) | (row_ulps(j, t).reshape(ulps.shape) <= 1)
        passed = same_nonfinite and frac >= EXACT_FRACTION and bool(np.all(close))
    return Report(dtype, err, torch_err, max_ulp, frac, bound, exact_rule, bool(passed), nonfinite_mismatch,
                  ref64 is not None, max_ulp_elem, ref_max)
