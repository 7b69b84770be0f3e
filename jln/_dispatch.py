"""``impl=`` selection between the XLA path (always available), Pallas kernels and jln's
native CPU kernels."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

from jln import _checks, _distributed, _eager, _stats

IMPLS = ("auto", "xla", "pallas", "native")


def choose(
    impl: str, fn: str, op: str, x: Any, axis_name: Any, operands: tuple[Any, ...] = (), **static: Any
) -> str:
    """Return ``"xla"``, ``"pallas"`` or ``"native"`` for one call.

    ``"auto"`` takes, on a single-device CPU backend, the native CPU kernels when they are
    built and support this op, shape and dtype; elsewhere a Pallas kernel only where one is
    compiled natively for the platform (never interpret mode); else XLA. The platform is
    :func:`platform_of` ``x``.
    ``"pallas"`` insists: on CPU it runs the kernels in interpret mode, and an unsupported
    case raises ``ValueError`` saying why. ``"native"`` insists on the CPU kernels the same way.
    """
    _checks.check_choice(impl, "impl", IMPLS, fn)
    if impl == "xla":
        return "xla"
    from jln import kernels
    from jln.kernels import _cpu

    backend = platform_of(x)
    tiny = static.get("eps") is not None and _stats.tiny_eps(static["eps"], x.dtype)
    if tiny and impl != "auto":
        raise ValueError(
            f"{fn}: impl={impl!r} is not available for eps={static['eps']!r}: the kernels take "
            f"eps >= 2**-101; a smaller eps (e.g. 0) runs on the XLA path, which finds "
            f"variances below float32's normal range. Use impl='xla' or 'auto', or a larger eps."
        )
    if tiny or (all(isinstance(d, int) for d in x.shape) and 0 in x.shape):
        return "xla"  # (an empty x: nothing to compute, whichever impl was asked for)
    if impl == "native":
        why = _cpu.unsupported_reason(op, x, operands, axis_name, static, backend=backend)
        if why is not None:
            raise ValueError(f"{fn}: impl='native' is not available here: {why}. Use impl='xla' or 'auto'.")
        return "native"
    # several devices: XLA's partitioner shards the XLA path (and nothing is built in vain)
    if impl == "auto" and backend == "cpu" and jax.device_count(backend) == 1:
        if _cpu.unsupported_reason(op, x, operands, axis_name, static, backend=backend) is None:
            return "native"
    reason = kernels.unsupported_reason(op, x, axis_name, backend=backend, **static)
    if impl == "pallas":
        if reason is not None:
            raise ValueError(f"{fn}: impl='pallas' is not available here: {reason}. Use impl='xla' or 'auto'.")
        return "pallas"
    if reason is None and kernels.native(backend, _checks.rows_and_width(x.shape, len(static["axes"]))[1]):
        return "pallas"
    return "xla"


def platform_of(x: Any) -> str:
    """The platform a call on ``x`` runs on: a concrete array's devices' (an eager call on a
    CPU array on a GPU machine runs on the CPU; compiled whole, see :mod:`jln._eager`, it
    keeps that platform), else the default backend. A traced value carries no device, so
    under a user's ``jit`` the default backend decides: to run a jitted norm on the CPU of a
    GPU machine, pass ``impl="xla"``."""
    eager = _eager.traced_platform()
    if eager is not None:
        return eager
    if isinstance(x, jax.Array):
        try:
            platforms = {d.platform for d in x.devices()}
        except Exception:  # noqa: BLE001 - a tracer: no devices to ask
            platforms = set()
        if len(platforms) == 1:
            return platforms.pop()
    return jax.default_backend()


def apply(
    fn: str,
    impl: str,
    op: str,
    body: Callable[..., Any],
    kernel: str,
    x: Any,
    operands: tuple[Any, ...],
    static: dict[str, Any],
    axis_name: Any = None,
    axis_index_groups: Any = None,
    addends: tuple[Any, Any] | None = None,
) -> Any:
    """Run one norm call: the XLA ``body`` or the kernel ``jln.kernels.<kernel>``.

    Both take ``(x, *operands, **static)`` plus, only when set, the distributed statistics
    (``axis_name``), which kernels see only if ``unsupported_reason`` declared support. An
    ``x`` sharded over explicit mesh axes runs on its local blocks (:mod:`jln._distributed`).

    ``addends = (a, b)`` marks ``x`` as the residual sum ``a + b`` (``add_*_norm``): the call
    then returns ``(y, s)``: the Pallas kernels, and the native CPU kernels when ``a``, ``b``
    and ``x`` share a dtype, read ``a`` and ``b`` and write ``s`` themselves (one pass instead
    of an XLA add and a kernel); otherwise ``x`` is ``s``.
    """
    dist = {} if axis_name is None else dict(axis_name=axis_name, axis_index_groups=axis_index_groups)
    path = choose(impl, fn, op, x, axis_name, operands, **static)
    layout = None if axis_name is not None else _distributed.explicit_layout(x)
    if _distributed.wants_local(layout, static["axes"], path != "xla"):

        def local(xl: Any, *ops: Any, axis_name: Any) -> Any:
            return apply(fn, impl, op, body, kernel, xl, ops, static, axis_name)

        y = _distributed.run_local(local, layout, static["axes"], x, *operands)  # type: ignore[arg-type]
        return y if addends is None else (y, x)
    with jax.named_scope(fn):
        if path != "xla":  # the kernels take the addends and return (y, s) themselves
            from jln import kernels
            from jln.kernels import _cpu

            fused = {} if addends is None else {"addends": addends}
            module = kernels if path == "pallas" else _cpu
            return getattr(module, kernel)(x, *operands, **static, **dist, **fused)
        y = body(x, *operands, **static, **dist)
        return y if addends is None else (y, x)
