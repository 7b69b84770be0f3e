"""Pallas kernels implementing the exact contract of jln's XLA bodies.

Entry points mirror ``jln._layer_norm.ln_body`` and ``jln._rms_norm.rms_body``.
"""

from __future__ import annotations

from typing import Any


def native(backend: str) -> bool:
    """Whether kernels compile natively (not interpret mode) on ``backend``."""
    return False


def unsupported_reason(op: str, x: Any, axis_name: Any, *, backend: str, **static: Any) -> str | None:
    """``None`` when a kernel handles this call, else a sentence saying why not."""
    return "jln has no Pallas kernels in this build"
