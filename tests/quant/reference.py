"""Independent references of jln's quantization rules: torch (float32 arithmetic, torch's own
fp8/int8 casts) and, for MXFP8, float64 NumPy of the OCP MX v1.0 rule. Written from the rules
in jln._quant's docstring, not from its code."""

from __future__ import annotations

import numpy as np
import torch

QMAX = {"float8_e4m3fn": 448.0, "float8_e5m2": 57344.0, "int8": 127.0}
TORCH_DTYPE = {"float8_e4m3fn": torch.float8_e4m3fn, "float8_e5m2": torch.float8_e5m2, "int8": torch.int8}


def cast(v: torch.Tensor, dtype: str) -> torch.Tensor:
    """Saturating cast of float32 ``v``: fp8 keeps NaN, int8 rounds half-even and maps NaN to 0."""
    q = QMAX[dtype]
    if dtype == "int8":
        r = torch.round(v).clamp(-q, q)
        return torch.where(torch.isnan(v), torch.zeros_like(r), r).to(torch.int8)
    return v.clamp(-q, q).to(TORCH_DTYPE[dtype])


def scale_of(y: torch.Tensor, dtype: str, scaling: str, scale: float | None = None,
             scale_ub: float | None = None, dims: tuple[int, ...] = (-1,)) -> torch.Tensor:
    """The dequantization scale (float32): static, or vLLM's dynamic ``min(amax, ub) / qmax``
    floored at ``1 / (qmax * 512)``, the amax over finite values."""
    q = QMAX[dtype]
    if scaling == "static":
        return torch.tensor(scale, dtype=torch.float32)
    finite = torch.where(torch.isfinite(y), y.abs(), torch.zeros_like(y))
    amax = finite.amax() if scaling == "tensor" else finite.amax(dim=dims, keepdim=True)
    if scale_ub is not None:
        amax = amax.clamp(max=scale_ub)
    return (amax / q).clamp(min=1.0 / (q * 512.0))


def quantize(y: torch.Tensor, dtype: str, scaling: str, scale: float | None = None,
             scale_ub: float | None = None, dims: tuple[int, ...] = (-1,)) -> tuple[torch.Tensor, torch.Tensor]:
    """``(codes, scale)``: codes = saturate(y * (1 / scale)), the reciprocal in float32 (vLLM's
    ``scale_inv``)."""
    y = y.float()
    s = scale_of(y, dtype, scaling, scale, scale_ub, dims)
    return cast(y * (1.0 / s), dtype), s


def delayed(y: torch.Tensor, history: torch.Tensor, dtype: str, margin: int = 0,
            algo: str = "max") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """TransformerEngine's delayed scaling: ``m = (qmax / amax) / 2**margin`` (1 where amax is 0
    or not finite) from the history before this step; codes = saturate(y * m); scale = 1 / m;
    the history gains this step's finite amax at index 0."""
    y = y.float()
    amax = history.max() if algo == "max" else history[0]
    # (a tensor numerator: torch computes `float / tensor` as `reciprocal(tensor) * float`)
    m = torch.div(torch.tensor(QMAX[dtype]), amax) / (2.0**margin)
    m = torch.where(torch.isfinite(amax) & (amax > 0), m, torch.ones_like(m))
    now = torch.where(torch.isfinite(y), y.abs(), torch.zeros_like(y)).amax()
    return cast(y * m, dtype), 1.0 / m, torch.cat([now[None], history[:-1]])


def mxfp8(y: np.ndarray, dtype: str = "float8_e4m3fn") -> tuple[torch.Tensor, np.ndarray]:
    """OCP MX v1.0 in float64: per 32-block ``X = 2**(floor(log2(amax)) - emax_elem)`` (emax 8
    for e4m3, 15 for e5m2; exponent clamped to E8M0's [-127, 127]; amax 0 gives 2**-127), codes
    the saturating cast of ``y / X``. Returns the codes (torch fp8) and X (float64)."""
    emax = {"float8_e4m3fn": 8, "float8_e5m2": 15}[dtype]
    v = np.asarray(y, np.float64)
    b = v.reshape(*v.shape[:-1], v.shape[-1] // 32, 32)
    amax = np.where(np.isfinite(b), np.abs(b), 0.0).max(axis=-1, keepdims=True)
    with np.errstate(divide="ignore"):
        e = np.where(amax > 0, np.floor(np.log2(np.where(amax > 0, amax, 1.0))) - emax, -127.0)
    e = np.clip(e, -127, 127)
    x = np.exp2(e)
    q = QMAX[dtype]
    codes = torch.from_numpy(np.clip(b / x, -q, q).reshape(v.shape)).to(TORCH_DTYPE[dtype])
    return codes, x[..., 0]


def bits(t: torch.Tensor) -> np.ndarray:
    """The codes' raw bytes (fp8 NaNs compare equal by bit pattern)."""
    return t.view(torch.uint8).numpy() if t.dtype != torch.int8 else t.view(torch.uint8).numpy()
