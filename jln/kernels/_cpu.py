"""Native CPU kernels: jln's LayerNorm/RMSNorm contract as XLA FFI calls, built by ``jln build``.

Why: on CPU, XLA runs row sums as library reduction fusions that cannot take a per-row
broadcast (``x - mean``) as their input, so the exact two-pass statistics of the XLA path
materialize float32 ``[rows, n]`` intermediates (measured: 33-43% of copy bandwidth). The
kernels in ``cpu_norm.cc`` keep each row in cache for both passes and write ``y`` in the
same sweep, forward and backward, on XLA's intra-op thread pool.

Contract: the XLA bodies of :mod:`jln._contract`'s LayerNorm (with adaptive modulation) and
RMSNorm (every convention but ``seed``) specs, as stated at the top of ``cpu_norm.cc``; the
tests compare them elementwise. Each convention's rounding becomes ``round_*``/``gemma`` flags
derived here from the contract's own dtype rules (the specs' ``steps``).

Transforms: :mod:`jln.kernels._ad`, shared with the Pallas kernels: forward mode (``jvp``,
``jacfwd``) evaluates the XLA body's JVP, reverse mode runs the native backward kernel, which
needs only ``x``, the parameters and the per-row statistics (the residuals of the XLA path:
about 2 bytes per element for bfloat16), higher derivatives go through the XLA body's VJP, and
``vmap`` makes the mapped axis more rows (parameters mapped per example become one parameter
row per example). The fused residual step of ``add_*_norm`` (``s = x + residual``, one dtype)
writes ``s`` and ``y`` in one sweep; reverse mode keeps ``s`` and shares the norm's backward.

``jax.export`` and other platforms: each FFI call is a primitive of its own (:func:`_exportable`)
that lowers to the kernel on the CPU, and to the XLA body it implements when the computation is
lowered for export (a custom call without a compatibility guarantee cannot be serialized) or
for another platform.

The library is built ahead of time, never inside a call: ``jln build`` compiles it for this
machine and jaxlib into a cache (:mod:`jln.kernels._cpu_build`), and :func:`available` only
loads it from there. Not built, with ``JLN_NATIVE=0``, or on several devices, ``impl="auto"``
runs the XLA path; ``impl="native"`` raises ``ValueError`` saying why (and how to build).
"""

from __future__ import annotations

import functools
import logging
import math
import os
import threading
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jln import _distributed, _stats
from jln._contract import NormSpec, add_in, rows_and_width
from jln.kernels import _ad, _cpu_build, _export

Array = jax.Array

_LOG = logging.getLogger("jln")
_KINDS = {jnp.dtype(jnp.float32): 0, jnp.dtype(jnp.bfloat16): 1, jnp.dtype(jnp.float16): 2}
_FWD, _FWD_ADD, _BWD = "jln_cpu_norm_fwd", "jln_cpu_norm_add_fwd", "jln_cpu_norm_bwd"
GATED_FWD, GATED_BWD = "jln_cpu_gated_fwd", "jln_cpu_gated_bwd"  # (jln.kernels._cpu_gated's)
#: The library's FFI handlers: target name -> exported symbol.
TARGETS = {_FWD: "JlnNormFwd", _FWD_ADD: "JlnNormAddFwd", _BWD: "JlnNormBwd",
           GATED_FWD: "JlnGatedFwd", GATED_BWD: "JlnGatedBwd"}


# ----------------------------------------------------------------------------- load


_LOCK = threading.Lock()
_LIBRARY: Path | None = None  # the library this process loaded
_REFUSED: str | None = None  # why the kernels cannot be used in this process, once known for good
_TOLD = False  # whether this process has logged that the kernels are not built


def library() -> Path | None:
    """The kernel library this process has loaded (``None`` before :func:`available` has
    loaded it, or where it cannot)."""
    return _LIBRARY


def available() -> str | None:
    """``None`` if the native CPU kernels are ready to use, else a sentence saying why not.

    Loads and registers the kernels the first time they are found built (thread-safe), and
    never compiles them (``jln build`` does, :func:`jln.kernels._cpu_build.build`). Not built
    is not final: a build later in this process, or by another, is found by the next call.
    """
    if _LIBRARY is not None:
        return None
    with _LOCK:
        return _load_locked()


def _load_locked() -> str | None:
    global _LIBRARY, _REFUSED, _TOLD
    if _LIBRARY is not None or _REFUSED is not None:
        return _REFUSED
    if os.environ.get("JLN_NATIVE") == "0":
        _REFUSED = "disabled by the environment variable JLN_NATIVE=0"
        return _REFUSED
    try:
        _register_primitive()
        lib = _cpu_build.load()
        for name, symbol in TARGETS.items():
            jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(getattr(lib, symbol)), platform="cpu")
    except _cpu_build.NotBuiltError as e:
        if not _TOLD:
            _TOLD = True
            _LOG.info("jln: impl='auto' runs CPU norms on the XLA path, as %s; impl='auto' takes the "
                      "faster native kernels once they are built", e)
        return str(e)
    except Exception as e:  # a library the loader refuses, or a JAX without the APIs used here
        _REFUSED = (f"the native CPU kernels could not be loaded ({type(e).__name__}: {e}); "
                    "`jln build --force` rebuilds them")
        return _REFUSED
    _LIBRARY = _cpu_build.library_path()
    return None


# ----------------------------------------------------------------------------- the contract


class Spec(NamedTuple):
    """Static description of one norm: the kernel's flags and the family spec they implement."""

    family: NormSpec  # the contract, on the kernel layout ([rows, n], normalized over n)
    center: bool
    gemma: bool
    rounds: tuple[int, int, int, int, int, int]  # round_h, round_y, round_b, round_f, round_s, round_m
    offset: float  # adaptive modulation: y * (offset + mscale)
    has: tuple[bool, bool, bool, bool]  # scale, bias, shift, mscale
    param_dtypes: tuple[Any, Any, Any, Any]
    add: tuple[Any, Any, Any] | None = None  # the fused residual step: dtypes of s, x and residual

    @property
    def y_dtype(self) -> jnp.dtype:
        return self.family.result_dtype

    def attrs(self) -> dict[str, Any]:
        names = ("round_h", "round_y", "round_b", "round_f", "round_s", "round_m")
        return dict(
            threads=np.int32(threads()), eps=np.float32(self.family.eps), offset=np.float32(self.offset),
            center=np.int32(self.center), gemma=np.int32(self.gemma),
            **{k: np.int32(v) for k, v in zip(names, self.rounds, strict=True)},
            **{k: np.int32(v) for k, v in zip(_HAS, self.has, strict=True)},
        )


_HAS = ("has_scale", "has_bias", "has_shift", "has_mscale")


def threads() -> int:
    """How many of XLA's intra-op threads a kernel call may use (0: all of them, the default).

    ``JLN_NATIVE_THREADS=k`` sets it. By default the kernels use the pool XLA hands them, as
    XLA's own loop fusions do: XLA sizes it from the process's CPU affinity, and
    ``--xla_cpu_multi_thread_eigen=false`` does not stop XLA's fusions from using it
    (measured on 2 cores: XLA's float32 RMSNorm took 409 µs with both, 602 µs pinned to one
    with ``taskset``), so a rule of one thread under that flag made jln the only
    single-threaded party. Read when a call is traced.
    """
    if os.environ.get("JLN_NATIVE_THREADS"):
        return max(0, int(os.environ["JLN_NATIVE_THREADS"]))
    return 0


def _kind(dtype: Any) -> int:
    """The kernel's rounding step for a cast to ``dtype``: none for float32."""
    return _KINDS[jnp.dtype(dtype)] if dtype is not None and _stats.is_low_precision(dtype) else 0


def _dtype(a: Any) -> Any:
    return None if a is None else jnp.dtype(a.dtype)


def _xla(spec: Spec, x: Array, *params: Array) -> Array:
    """The XLA body this kernel implements, on the kernel's layout (``x [rows, n]``, each
    parameter ``[groups, n]``): the reference for forward mode and higher derivatives.
    Parameter rows are repeated over their groups' rows."""
    rows = x.shape[-2]
    full = [
        jnp.repeat(p.astype(dt), rows // p.shape[-2], axis=-2) if on else None
        for p, dt, on in zip(params, spec.param_dtypes, spec.has, strict=True)
    ]
    return spec.family.on_rows(x.ndim).body(x, *full[: len(spec.family.operands)])


# ----------------------------------------------------------------------------- FFI calls
# (vmap reaches them through their primitives' batching rule, in _exportable)


def _ffi_fwd(spec: Spec, x: Array, *params: Array) -> tuple[Array, Array, Array]:
    stat = jax.ShapeDtypeStruct(x.shape[:-1], jnp.float32)
    call = jax.ffi.ffi_call(
        _FWD, (jax.ShapeDtypeStruct(x.shape, spec.y_dtype), stat, stat)
    )
    y, m, r = call(x, *params, **spec.attrs())
    return y, m, r


def _ffi_fwd_add(spec: Spec, x: Array, residual: Array, *params: Array) -> tuple[Array, Array, Array, Array]:
    stat = jax.ShapeDtypeStruct(x.shape[:-1], jnp.float32)
    call = jax.ffi.ffi_call(
        _FWD_ADD,
        (jax.ShapeDtypeStruct(x.shape, spec.y_dtype), jax.ShapeDtypeStruct(x.shape, x.dtype), stat, stat),
    )
    y, s, m, r = call(x, residual, *params, **spec.attrs())
    return y, s, m, r


def _ffi_bwd(spec: Spec, ct: Array, x: Array, *rest: Array) -> tuple[Array, ...]:
    """``(dx, *dparams)``, the parameters' gradients in float32; ``rest``: the parameters, m, rstd."""
    call = jax.ffi.ffi_call(
        _BWD,
        (jax.ShapeDtypeStruct(x.shape, x.dtype), *(jax.ShapeDtypeStruct(p.shape, jnp.float32) for p in rest[:-2])),
    )
    return tuple(call(ct, x, *rest, **spec.attrs()))


# ----------------------------------------------------------------------------- jax.export
#
# Each FFI call is a primitive of its own (jln.kernels._export) that lowers to the kernel on
# the CPU and to the XLA body it implements under jax.export (a custom call without a
# compatibility guarantee cannot be serialized) and on other platforms.


def _xla_fwd(spec: Spec, x: Array, *params: Array) -> tuple[Array, Array, Array]:
    """``_ffi_fwd`` where the kernel is not taken (jax.export, another platform): ``y`` from the
    XLA body, and zeros for the row statistics, which only the native backward kernel reads
    (there the backward is :func:`_xla_bwd`, the XLA body's VJP, and forward mode is the XLA
    body's JVP already)."""
    stat = jnp.zeros(x.shape[:-1], jnp.float32)
    return _xla(spec, x, *params), stat, stat


def _xla_fwd_add(spec: Spec, x: Array, residual: Array, *params: Array) -> tuple[Array, Array, Array, Array]:
    s = add_in(x, residual, x.dtype)
    y, m, r = _xla_fwd(spec, s, *params)
    return y, s, m, r


def _xla_bwd(spec: Spec, ct: Array, x: Array, *rest: Array) -> tuple[Array, ...]:
    """``_ffi_bwd`` where the kernel is not taken: the XLA body's VJP (the statistics in
    ``rest`` unread; the primitive casts the parameters' gradients to the kernel's float32)."""
    return tuple(jax.vjp(functools.partial(_xla, spec), x, *rest[:-2])[1](ct))


def _exportable(name: str, ffi: Any, xla: Any) -> Any:
    """A primitive ``name`` computing ``ffi(spec, *args)`` (the kernel) on the CPU and ``xla``'s
    body under jax.export and on other platforms (:func:`jln.kernels._export.primitive`);
    batched by moving the mapped axes to the front and broadcasting the unmapped operands
    there (the kernels take leading axes as more rows and more parameter groups)."""
    from jax.interpreters import batching

    p = _export.primitive(
        name,
        lambda *args, spec: ffi(spec, *args),
        lambda *args, spec: xla(spec, *args),
        lambda plat, spec: plat == "cpu",
    )

    def batch(args: tuple[Any, ...], dims: tuple[Any, ...], *, spec: Spec) -> tuple[Any, tuple[int, ...]]:
        size = next(a.shape[d] for a, d in zip(args, dims, strict=True) if d is not None)
        front = [jnp.moveaxis(a, d, 0) if d is not None else jnp.broadcast_to(a, (size, *a.shape))
                 for a, d in zip(args, dims, strict=True)]
        outs = p.bind(*front, spec=spec)
        return outs, (0,) * len(outs)

    batching.primitive_batchers[p] = batch
    return p


_fwd_p: Any = None
_fwd_add_p: Any = None
_bwd_p: Any = None


def _register_primitive() -> None:
    """Create the kernels' primitives (:func:`_exportable`), once."""
    global _fwd_p, _fwd_add_p, _bwd_p
    if _fwd_p is None:
        _fwd_add_p = _exportable(_FWD_ADD, _ffi_fwd_add, _xla_fwd_add)
        _bwd_p = _exportable(_BWD, _ffi_bwd, _xla_bwd)
        _fwd_p = _exportable(_FWD, _ffi_fwd, _xla_fwd)


# ----------------------------------------------------------------------------- differentiation
#
# jln.kernels._ad makes these calls one differentiable function (forward and reverse mode,
# higher derivatives through the XLA body, vmap, scan): reverse mode keeps x (s with the fused
# residual step), the parameters and the per-row statistics.


def _kernel_forward(spec: Spec, *args: Array) -> tuple[Array, ...]:
    """``(y, m, rstd)`` of ``(x, *params)``, or ``(y, s, m, rstd)`` of ``(x, residual, *params)``
    with the fused residual step (``spec.add``)."""
    return tuple((_fwd_p if spec.add is None else _fwd_add_p).bind(*args, spec=spec))


def _kernel_backward(spec: Spec, x: Array, ct: Array, ct_s: Array | None, stats: tuple[Array, ...],
                     params: tuple[Array, ...]) -> tuple[Array, ...]:
    # a placeholder parameter (see _needed) whose gradient is not wanted: not computed
    has = tuple(h and p.shape[-1] == x.shape[-1] for h, p in zip(spec.has, params, strict=True))
    spec = spec._replace(has=has)  # type: ignore[arg-type]  # (four flags, as spec.has)
    dx, *dp = _bwd_p.bind(ct, x, *params, *stats, spec=spec)
    # float32 sums, rounded once to each parameter's dtype (as the XLA path's gradients)
    dp = [d.astype(p.dtype) if on else jnp.zeros_like(p) for d, p, on in zip(dp, params, spec.has, strict=True)]
    return (dx if ct_s is None else dx + ct_s, *dp)


def _needed(spec: Spec) -> tuple[bool, ...]:
    """Which parameter values the backward kernel reads: the scale, the modulation scale, and
    the bias only under modulation (the backward recomputes the modulated value); never the
    shift (the XLA path does not keep the others either)."""
    has = spec.has
    return (has[0], has[1] and has[3], False, has[3])


BACKEND = _ad.Backend(_kernel_forward, _kernel_backward, _xla, broadcast=True, needed=_needed)
_NP = 4  # parameters: scale, bias, shift, mscale


def _dummy(dtype: Any) -> Array:
    return jnp.zeros((1, 1), dtype)


# ----------------------------------------------------------------------------- entry points


def _grouped(p: Array, x_shape: tuple[int, ...], k: int, n: int) -> Array:
    """A parameter broadcastable against ``x`` as ``[groups, n]`` (its own dtype): rows of ``x`` in
    equal consecutive blocks (1 group for a per-feature vector, one per example for a
    ``[B, 1, D]`` condition; a layout that is not a prefix of the row axes is broadcast)."""
    p = jnp.asarray(p)
    p = p.reshape((1,) * (len(x_shape) - p.ndim) + p.shape)
    lead = p.shape[:k]
    i = max((j + 1 for j, d in enumerate(lead) if d != 1), default=0)
    p = jnp.broadcast_to(p, x_shape[:i] + (1,) * (k - i) + x_shape[k:])
    return p.reshape(math.prod(x_shape[:i]), n)


def _ln_flags(spec: Any) -> tuple[bool, bool, tuple[int, ...], float]:
    """LayerNorm's kernel flags ``(center, gemma, rounds, offset)``: the output rounding of
    the spec's tail, then its modulation steps (``LayerNormSpec.steps``)."""
    round_b = round_f = round_s = 0
    if spec.modulated:
        after_scale, after_shift = spec.steps
        round_b = _kind(spec.out_dtype)
        round_f = _kind(after_scale) if spec.mscale_dtype is not None else 0
        round_s = _kind(after_shift) if spec.shift_dtype is not None else 0
    return True, False, (0, 0, round_b, round_f, round_s, _kind(spec.mscale_dtype)), spec.mod_offset


def _rms_flags(spec: Any) -> tuple[bool, bool, tuple[int, ...], float]:
    """RMSNorm's kernel flags: the convention's steps (``RMSNormSpec.steps``)."""
    gemma, step_h, step_y = spec.steps
    return False, gemma, (_kind(step_h), _kind(step_y), 0, 0, 0, 0), 1.0




def run(spec: NormSpec, x: Array, operands: tuple[Array | None, ...], addends: tuple[Array, Array] | None = None) -> Any:
    """The native path of ``spec.body(x, *operands)`` (same result). With ``addends = (a, b)``
    (``x`` being ``a + b``) it returns ``(y, s)``, the kernel fusing the residual step when
    ``a``, ``b`` and ``x`` share one dtype."""
    reason = available()
    if reason is not None:
        raise RuntimeError(f"impl='native': {reason}")
    params = (*operands, None, None, None, None)[:_NP]
    present = tuple(p is not None for p in params)
    center, gemma, rounds, offset = (_ln_flags if spec.centered else _rms_flags)(spec)
    k = x.ndim - len(spec.axes)
    shape2 = rows_and_width(x.shape, len(spec.axes))
    kspec = Spec(spec.on_rows(2), center, gemma, rounds, offset, present,  # type: ignore[arg-type]
                 tuple(_dtype(p) for p in params))  # type: ignore[arg-type]
    flat = [_dummy(jnp.float32) if p is None else _grouped(p, x.shape, k, shape2[1]) for p in params]
    # the residual step is fused when x, the residual and their sum x share one dtype;
    # otherwise XLA has added them (x), and the kernel normalizes x
    if addends is not None and addends[0].dtype == addends[1].dtype == x.dtype:
        fused = kspec._replace(add=(x.dtype,) * 3)
        y, s, _, _ = _ad.apply(BACKEND, fused, addends[0].reshape(shape2), addends[1].reshape(shape2), *flat)
        return y.reshape(x.shape), s.reshape(x.shape)
    y, _, _ = _ad.apply(BACKEND, kspec, x.reshape(shape2), *flat)
    return y.reshape(x.shape) if addends is None else (y.reshape(x.shape), x)


def unsupported_reason(spec: NormSpec, x: Any, operands: tuple[Any, ...], backend: str | None = None) -> str | None:
    """``None`` when a native CPU kernel handles this call, else a sentence saying why not
    (``backend``: the platform the call runs on; default: the default backend)."""
    if spec.native != "norm":  # the LayerNorm/RMSNorm specs name these kernels
        return f"no native CPU kernel for {spec.op!r} yet (it runs on the XLA path)"
    if getattr(spec, "convention", None) == "seed":
        return "the 'seed' RMSNorm convention runs on the XLA path"
    return layout_reason(spec, x, operands, backend)


def layout_reason(spec: NormSpec, x: Any, operands: tuple[Any, ...], backend: str | None = None) -> str | None:
    """What every native kernel needs of a call (the CPU backend, rows local to the device, the
    trailing axes, float32/bfloat16/float16 arrays, the library loaded): ``None`` when the call
    has it, else a sentence saying what is missing."""
    backend = backend or jax.default_backend()
    if backend != "cpu":
        return f"the native kernels run on the CPU backend (this call's platform: {backend!r})"
    if spec.axis_name is not None:
        return _distributed.CROSS_DEVICE_REASON
    axes = spec.axes
    if axes != tuple(range(x.ndim - len(axes), x.ndim)):
        return (
            f"native kernels normalize the trailing axes of x only; received axes={axes} for "
            f"x.ndim={x.ndim} (move the normalized axes last, e.g. with jnp.moveaxis)"
        )
    dtypes = [x.dtype, spec.result_dtype] + [o.dtype for o in operands if o is not None]
    if any(jnp.dtype(d) not in _KINDS for d in dtypes):
        return (f"native kernels take float32, bfloat16 and float16 (received "
                f"{sorted({str(jnp.dtype(d)) for d in dtypes})}); float64 runs on the XLA path")
    return available()
