"""``impl=``: run a validated call (its family spec) on the XLA path, the Pallas kernels or
jln's native CPU kernels. Nothing here validates: the public functions did."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from jln import _distributed, _quant, _stats, kernels
from jln._contract import NormSpec, rows_and_width
from jln._platform import platform_of
from jln.kernels import _native


def choose(fn: str, impl: str, spec: NormSpec, x: Any, operands: tuple[Any, ...] = ()) -> str:
    """Return ``"xla"``, ``"pallas"`` or ``"native"`` for one call.

    ``"auto"`` takes, on a single-device CPU backend, the native CPU kernels when they are
    built and support this call; elsewhere a Pallas kernel only where one is compiled natively
    for the platform (never interpret mode); else XLA. The platform is :func:`platform_of`
    ``x``. ``"pallas"`` insists: on CPU it runs the kernels in interpret mode, and an
    unsupported case raises ``ValueError`` saying why. ``"native"`` insists on the CPU kernels
    the same way.
    """
    if impl == "xla":
        return "xla"
    why = spec.kernel_reason()
    if why is not None:  # a convention only the XLA body computes
        if impl != "auto":
            raise ValueError(f"{fn}: impl={impl!r} is not available here: {why}. Use impl='xla' or 'auto'.")
        return "xla"
    backend = platform_of(x)
    tiny = _stats.tiny_eps(spec.eps, x.dtype)
    if tiny and impl != "auto":
        raise ValueError(
            f"{fn}: impl={impl!r} is not available for eps={spec.eps!r}: the kernels take "
            f"eps >= 2**-101; a smaller eps (e.g. 0) runs on the XLA path, which finds "
            f"variances below float32's normal range. Use impl='xla' or 'auto', or a larger eps."
        )
    if tiny or (all(isinstance(d, int) for d in x.shape) and 0 in x.shape):
        return "xla"  # (an empty x: nothing to compute, whichever impl was asked for)
    # "auto" on several devices: XLA's partitioner shards the XLA path (and nothing is built in vain)
    if impl == "native" or (impl == "auto" and backend == "cpu" and jax.device_count(backend) == 1):
        why = _native.unsupported_reason(spec, x, operands, backend)
        if why is None:
            return "native"
        if impl == "native":
            raise ValueError(f"{fn}: impl='native' is not available here: {why}. Use impl='xla' or 'auto'.")
    reason = kernels.unsupported_reason(spec, x, operands, backend)
    if impl == "pallas":
        if reason is not None:
            raise ValueError(f"{fn}: impl='pallas' is not available here: {reason}. Use impl='xla' or 'auto'.")
        return "pallas"
    if reason is None and spec.pallas_auto and kernels.native(backend, rows_and_width(x.shape, len(spec.axes))[1]):
        return "pallas"
    return "xla"


def apply(
    fn: str, impl: str, spec: NormSpec, x: Any, operands: tuple[Any, ...],
    addends: tuple[Any, Any] | None = None,
) -> Any:
    """Run one norm call: ``spec``'s XLA body or a kernel backend, on ``x`` and the operands
    (broadcastable against ``x``, ``None`` where absent).

    ``addends = (a, b)`` marks ``x`` as the residual sum ``a + b`` (``add_*_norm``): the call
    then returns ``(y, s)``: the Pallas kernels, and the native CPU kernels when ``a``, ``b``
    and ``x`` share a dtype, read ``a`` and ``b`` and write ``s`` themselves (one pass instead
    of an XLA add and a kernel); otherwise ``x`` is ``s``. An ``x`` sharded over explicit mesh
    axes runs on its local blocks (:mod:`jln._distributed`).
    """
    path = choose(fn, impl, spec, x, operands)
    layout = None if spec.axis_name is not None else _distributed.explicit_layout(x)
    if _distributed.wants_local(layout, spec.axes, path != "xla"):

        def local(xl: Any, *ops: Any, axis_name: Any) -> Any:
            return apply(fn, impl, spec.with_axis_name(axis_name), xl, ops)

        y = _distributed.run_local(local, layout, spec.axes, x, *operands)  # type: ignore[arg-type]
        return y if addends is None else (y, x)
    with jax.named_scope(fn):
        if path == "pallas":
            return kernels.run(spec, x, operands, addends)
        if path == "native":
            return _native.run(spec, x, operands, addends)
        y = spec.body(x, *operands)
        return y if addends is None else (y, x)


def apply_with(
    fn: str, impl: str, spec: NormSpec, x: Any, operands: tuple[Any, ...],
    addends: tuple[Any, Any] | None = None, *, quantize: Any = None, amax_history: Any = None,
    return_stats: bool = False,
) -> Any:
    """:func:`apply`, then the output quantized (``quantize``, a :class:`jln.Quant`, in XLA
    after whichever path computed it) and the per-row statistics appended (``return_stats``).

    ``quantize.source == "float32"`` runs the spec with a float32 ``out_dtype``: the
    convention's last step unrounded (the XLA path only: the kernels round to the output
    dtype). Returns ``y`` / ``(y, s)`` as :func:`apply`, ``y`` a :class:`jln.Quantized` when
    quantized, followed by a :class:`jln.Stats` when asked.
    """
    quant = _quant.check_call(fn, quantize, amax_history, return_stats, x.shape, spec.axes, spec.axis_name)
    if quant is not None and quant.source == "float32":
        if impl in ("pallas", "native"):
            raise ValueError(
                f"{fn}: impl={impl!r} is not available with Quant(source='float32'): the kernels round y to the "
                f"output dtype, and only the XLA path hands over the unrounded float32 row. Use impl='xla' or 'auto'."
            )
        impl = "xla"
        spec = dataclasses.replace(spec, out_dtype=jnp.dtype(jnp.float32))  # type: ignore[call-arg]
    out = apply(fn, impl, spec, x, operands, addends)
    y, s = (out, None) if addends is None else out
    if quant is not None:
        y = _quant.quantize(y, quant, spec.axes, amax_history)
    result = (y,) if addends is None else (y, s)
    if return_stats:
        result = (*result, _quant.Stats(*spec.row_stats(x, *operands)))
    return result[0] if len(result) == 1 else result
