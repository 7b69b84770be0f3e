"""``impl=`` selection between the XLA path (always available) and Pallas kernels."""

from __future__ import annotations

from typing import Any

import jax

from jln import _checks

IMPLS = ("auto", "xla", "pallas")


def choose(impl: str, fn: str, op: str, x: Any, axis_name: Any, **static: Any) -> str:
    """Return ``"xla"`` or ``"pallas"`` for one call.

    ``"auto"`` takes a Pallas kernel only where one is compiled natively for the default
    backend and supports this op, shape and dtype; it never picks interpret mode.
    ``"pallas"`` insists: on CPU it runs the kernels in interpret mode, and an unsupported
    case raises ``ValueError`` saying why.
    """
    _checks.check_choice(impl, "impl", IMPLS, fn)
    if impl == "xla":
        return "xla"
    from jln import kernels

    backend = jax.default_backend()
    reason = kernels.unsupported_reason(op, x, axis_name, backend=backend, **static)
    if impl == "pallas":
        if reason is not None:
            raise ValueError(f"{fn}: impl='pallas' is not available here: {reason}. Use impl='xla' or 'auto'.")
        return "pallas"
    if reason is None and kernels.native(backend):
        return "pallas"
    return "xla"
