"""Tests' helper: measure what reverse mode keeps from forward to backward (the "residual budget").

Uses ``jax.ad_checkpoint.print_saved_residuals`` (public API) and reads its report, so the
number is what JAX itself saves for ``jax.vjp``/``jax.grad`` of the function.
"""

from __future__ import annotations

import contextlib
import io
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from jax.ad_checkpoint import print_saved_residuals

_ITEMSIZE = {
    "bf16": 2, "f16": 2, "f32": 4, "f64": 8, "f8": 1,
    "s8": 1, "u8": 1, "s16": 2, "u16": 2, "s32": 4, "u32": 4, "s64": 8, "u64": 8, "bool": 1,
}
_LINE = re.compile(r"^\s*([a-z]+[0-9]*)\[([0-9,\s]*)\]\s*(.*)$")


@dataclass(frozen=True)
class Residual:
    dtype: str
    shape: tuple[int, ...]
    source: str

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * _ITEMSIZE.get(self.dtype, 4)


def saved_residuals(fn: Callable[..., Any], *args: Any) -> list[Residual]:
    """The arrays reverse mode of ``fn`` keeps, as reported by ``print_saved_residuals``."""
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        print_saved_residuals(fn, *args)
    out = []
    for line in buf.getvalue().splitlines():
        m = _LINE.match(line)
        if m:
            dims = tuple(int(d) for d in m.group(2).replace(" ", "").split(",") if d)
            out.append(Residual(m.group(1), dims, m.group(3)))
    return out


def residual_bytes_per_element(fn: Callable[..., Any], x: Any, *args: Any) -> float:
    """Bytes kept per element of ``x`` by reverse mode of ``fn(x, *args)`` (all residuals)."""
    total = sum(r.nbytes for r in saved_residuals(fn, x, *args))
    return total / max(int(np.prod(x.shape)), 1)
