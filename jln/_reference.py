"""The shared part of jln's torch references: each family's ``reference.py`` mirrors the public
reference it names, op by op and dtype by dtype (the formulas are the ones torch, transformers
and diffusers ship, restated in torch). They serve the test suite, ``jln.testing`` and ``jln
parity``. torch is imported lazily: importing a reference does not import torch.
"""

from __future__ import annotations

from typing import Any

Tensor = Any


def torch() -> Any:
    """The ``torch`` module, with a clear error when it is not installed."""
    try:
        import torch
    except ImportError as e:  # pragma: no cover - exercised only without torch
        raise ImportError(
            "jln's torch references need PyTorch. Install it with `pip install 'jln[torch]'` "
            "(CPU builds are enough)."
        ) from e
    return torch


def dims(k: int) -> tuple[int, ...]:
    """The trailing ``k`` dimensions, as torch's ``dim=`` takes them."""
    return tuple(range(-k, 0))


def residual_sum(x: Tensor, residual: Tensor, residual_in_fp32: bool = False) -> Tensor:
    """``x + residual`` in their promoted dtype (float32 at least with ``residual_in_fp32``), as
    the fused residual steps compute it."""
    t = torch()
    dtype = t.promote_types(x.dtype, residual.dtype)
    if residual_in_fp32:
        dtype = t.promote_types(dtype, t.float32)
    return x.to(dtype) + residual.to(dtype)
