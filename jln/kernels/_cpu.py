"""Native CPU kernels: jln's LayerNorm/RMSNorm contract as XLA FFI calls, built by ``jln build``.

Why: on CPU, XLA runs row sums as library reduction fusions that cannot take a per-row
broadcast (``x - mean``) as their input, so the exact two-pass statistics of the XLA path
materialize float32 ``[rows, n]`` intermediates (measured: 33-43% of copy bandwidth). The
kernels in ``cpu_norm.cc`` keep each row in cache for both passes and write ``y`` in the
same sweep, forward and backward, on XLA's intra-op thread pool.

Contract: the XLA bodies of :mod:`jln._contract`'s LayerNorm (with adaptive modulation) and
RMSNorm (every convention but ``seed``) specs, as stated at the top of ``cpu_norm.cc``; the
tests compare them elementwise. Each convention's rounding becomes ``round_*``/``gemma`` flags
derived here from the contract's own dtype rules (:attr:`RMSNormSpec.steps`,
:func:`modulation_dtypes`).

Transforms, all with public JAX machinery except small primitives of jln's own:

* the forward is a ``jax.custom_jvp`` whose tangent is ``jln_cpu_norm_lin``, a primitive
  linear in the tangents. Forward mode evaluates it with the XLA body's own JVP (so
  ``jvp``/``jacfwd`` work and give the XLA path's numbers); reverse mode transposes it into
  the native backward kernel, which needs only ``x``, the parameters and the per-row
  statistics (the residuals are those of the XLA path: about 2 bytes per element for
  bfloat16).
* the backward kernel is itself a ``custom_jvp`` whose derivative is the XLA body's VJP, so
  grad-of-grad and Hessians work (through XLA).
* ``vmap`` folds the mapped axis into the rows (parameters mapped per example become one
  parameter row per example).
* the fused residual step of ``add_*_norm`` (``s = x + residual``, one dtype) is its own
  ``custom_jvp`` (:func:`_forward_add`): the kernel writes ``s`` and ``y`` in one sweep, the
  tangent of ``s`` is the sum of the inputs' tangents and that of ``y`` the norm's tangent at
  ``s``, so reverse mode keeps ``s`` and shares the norm's backward kernel.
* ``jax.export`` and other platforms: each FFI call is a primitive of its own
  (:func:`_exportable`) that lowers to the kernel on the CPU, and to the XLA body it
  implements when the computation is lowered for export (a custom call without a
  compatibility guarantee cannot be serialized) or for another platform.

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

from jln import _checks, _distributed, _stats
from jln._contract import NormSpec, add_in
from jln._contract.layer_norm import LayerNormSpec, modulation_dtypes
from jln._contract.rms_norm import RMSNormSpec
from jln.kernels import _cpu_build, _export

Array = jax.Array

_LOG = logging.getLogger("jln")
_KINDS = {jnp.dtype(jnp.float32): 0, jnp.dtype(jnp.bfloat16): 1, jnp.dtype(jnp.float16): 2}
_FWD, _FWD_ADD, _BWD = "jln_cpu_norm_fwd", "jln_cpu_norm_add_fwd", "jln_cpu_norm_bwd"


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
        jax.ffi.register_ffi_target(_FWD, jax.ffi.pycapsule(lib.JlnNormFwd), platform="cpu")
        jax.ffi.register_ffi_target(_FWD_ADD, jax.ffi.pycapsule(lib.JlnNormAddFwd), platform="cpu")
        jax.ffi.register_ffi_target(_BWD, jax.ffi.pycapsule(lib.JlnNormBwd), platform="cpu")
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


def _xla_vjp(spec: Spec, ct: Array, x: Array, *params: Array) -> tuple[Array, ...]:
    """The XLA body's VJP: the backward kernel's contract, and (differentiated) its derivative."""
    return tuple(jax.vjp(functools.partial(_xla, spec), x, *params)[1](ct))


def _xla_bwd(spec: Spec, ct: Array, x: Array, *rest: Array) -> tuple[Array, ...]:
    """``_ffi_bwd`` where the kernel is not taken: the XLA body's VJP (the statistics in
    ``rest`` unread; the primitive casts the parameters' gradients to the kernel's float32)."""
    return _xla_vjp(spec, ct, x, *rest[:-2])


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


def _fwd_call(spec: Spec, x: Array, *params: Array) -> tuple[Array, Array, Array]:
    y, m, r = _fwd_p.bind(x, *params, spec=spec)
    return y, m, r


def _fwd_add_call(spec: Spec, x: Array, residual: Array, *params: Array) -> tuple[Array, Array, Array, Array]:
    y, s, m, r = _fwd_add_p.bind(x, residual, *params, spec=spec)
    return y, s, m, r


def _bwd_call(spec: Spec, ct: Array, x: Array, params: tuple[Array, ...], m: Array, r: Array) -> tuple[Array, ...]:
    dx, *dp = _bwd_p.bind(ct, x, *params, m, r, spec=spec)
    # float32 sums, rounded once to each parameter's dtype (as the XLA path's gradients)
    return (dx, *(d.astype(p.dtype) if on else jnp.zeros_like(p) for d, p, on in zip(dp, params, spec.has, strict=True)))


# ----------------------------------------------------------------------------- differentiation


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _forward(spec: Spec, x: Array, *params: Array) -> tuple[Array, Array, Array]:
    """``(y, m, rstd)``; only ``y`` is differentiated (the statistics are internal caches that
    the tangent and backward rules never differentiate through)."""
    return _fwd_call(spec, x, *params)


_DUMMY_SHAPE = (1, 1)


def _dummy(dtype: Any) -> Array:
    return jnp.zeros(_DUMMY_SHAPE, dtype)


def _value_needed(spec: Spec) -> tuple[bool, ...]:
    """Which parameter values the tangent's transpose (the backward kernel) reads: the scale,
    the modulation scale, and the bias only under modulation (the backward recomputes the
    modulated value); never the shift. The others go in as placeholders, so reverse mode does
    not keep them (the XLA path does not keep them either)."""
    has = spec.has
    return (has[0], has[1] and has[3], False, has[3])


def _nonzero(tangents: tuple[Any, ...]) -> list[Any]:
    """The tangents with symbolic zeros (inputs not differentiated: a custom rule's
    ``SymbolicZero``, a primitive rule's ``ad.Zero``) as ``None``."""
    from jax.custom_derivatives import SymbolicZero
    from jax.interpreters import ad

    return [None if isinstance(t, (SymbolicZero, ad.Zero)) else t for t in tangents]


def _tangent(spec: Spec, x: Array, params: tuple[Array, ...], tangents: list[Any], m: Array, r: Array) -> Array:
    """The forward's tangent ``dy`` at ``x`` (``tangents`` of x and the parameters, ``None``
    where zero: those stay out of the residuals, as placeholders)."""
    present = tuple(t is not None for t in tangents)
    tans = [t if on else _dummy(p.dtype) for t, p, on in zip(tangents, (x, *params), present, strict=True)]
    kept = [p if need else _dummy(p.dtype) for p, need in zip(params, _value_needed(spec), strict=True)]
    return _lin_p.bind(*tans, x, *kept, m, r, spec=spec, present=present)


def _forward_jvp(spec: Spec, primals: tuple[Array, ...], tangents: tuple[Any, ...]) -> Any:
    y, m, r = _forward(spec, *primals)
    dy = _tangent(spec, primals[0], primals[1:], _nonzero(tangents), m, r)
    return (y, m, r), (dy, jnp.zeros_like(m), jnp.zeros_like(r))


_forward.defjvp(_forward_jvp, symbolic_zeros=True)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _forward_add(spec: Spec, x: Array, residual: Array, *params: Array) -> tuple[Array, Array, Array, Array]:
    """``(y, s, m, rstd)`` of the fused residual step ``s = x + residual`` (all three in one
    dtype) and the norm of ``s``. The tangent of ``s`` is that of ``x`` plus that of the
    residual; ``y``'s is the norm's tangent at ``s``, so reverse mode keeps ``s`` (not ``x``
    and the residual) and transposes into the same backward kernel as the unfused norm."""
    return _fwd_add_call(spec, x, residual, *params)


def _forward_add_jvp(spec: Spec, primals: tuple[Array, ...], tangents: tuple[Any, ...]) -> Any:
    y, s, m, r = _forward_add(spec, *primals)
    tans = _nonzero(tangents)
    parts = [t for t in tans[:2] if t is not None]
    ds = None if not parts else parts[0] if len(parts) == 1 else parts[0] + parts[1]
    dy = _tangent(spec, s, primals[2:], [ds, *tans[2:]], m, r)
    return (y, s, m, r), (dy, jnp.zeros_like(s) if ds is None else ds, jnp.zeros_like(m), jnp.zeros_like(r))


_forward_add.defjvp(_forward_add_jvp, symbolic_zeros=True)


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _backward(spec: Spec, ct: Array, x: Array, *rest: Array) -> tuple[Array, ...]:
    """``(dx, *dparams)`` from the cotangent ``ct``; ``rest`` is the parameters then ``m``, ``rstd``."""
    return _bwd_call(spec, ct, x, rest[:-2], rest[-2], rest[-1])


@_backward.defjvp
def _backward_jvp(spec: Spec, primals: tuple[Array, ...], tangents: tuple[Array, ...]) -> Any:
    _, dout = jax.jvp(functools.partial(_xla_vjp, spec), primals[:-2], tangents[:-2])
    return _backward(spec, *primals), dout


def _bwd_jvp_raw(primals: tuple[Array, ...], tangents: tuple[Any, ...], *, spec: Spec) -> Any:
    """The backward kernel's primitive met without its ``custom_jvp`` (see
    :func:`_register_primitive`): :func:`_backward_jvp`'s derivative, in the kernel's dtypes."""
    from jax.interpreters import ad

    out = _bwd_p.bind(*primals, spec=spec)
    tans = tuple(ad.instantiate_zeros(t) for t in tangents[:-2])
    _, dout = jax.jvp(functools.partial(_xla_vjp, spec), tuple(primals[:-2]), tans)
    return out, [d.astype(o.dtype) for d, o in zip(dout, out, strict=True)]


_NP = 4  # parameters: scale, bias, shift, mscale


def _full(args: tuple[Array, ...], present: tuple[bool, ...]) -> tuple[tuple[Array, ...], tuple[Array, ...]]:
    """Tangents and primal values of x and the parameters with placeholders filled in: an
    absent tangent is zero; a placeholder value (one the tangent does not depend on) is zero
    of its tangent's shape."""
    k = _NP + 1
    tans, vals = list(args[:k]), list(args[k : 2 * k])
    for i in range(k):
        if vals[i].shape != tans[i].shape and present[i]:
            vals[i] = jnp.zeros_like(tans[i])
        if not present[i]:
            tans[i] = jnp.zeros_like(vals[i])
    return tuple(tans), tuple(vals)


def _lin_impl(*args: Array, spec: Spec, present: tuple[bool, ...]) -> Array:
    """The tangent of the forward (``args``: tangents of x and the parameters, x and the
    parameters, m, rstd), evaluated with the XLA body's JVP (forward mode)."""
    tans, vals = _full(args, present)
    return jax.jvp(functools.partial(_xla, spec), vals, tans)[1]


_lin_p: Any = None


def _register_primitive() -> None:
    """Create ``jln_cpu_norm_lin``: linear in its first five operands (the tangents of ``x``
    and the parameters); its transpose is the native backward kernel. Also the kernels' own
    primitives (:func:`_exportable`)."""
    global _lin_p, _fwd_p, _fwd_add_p, _bwd_p
    if _lin_p is not None:
        return
    _fwd_p = _exportable(_FWD, _ffi_fwd, _xla_fwd)
    _fwd_add_p = _exportable(_FWD_ADD, _ffi_fwd_add, _xla_fwd_add)
    _bwd_p = _exportable(_BWD, _ffi_bwd, _xla_bwd)
    from jax.extend.core import Primitive
    from jax.interpreters import ad, batching, mlir

    # The kernels' primitives carry their custom_jvp's rules too: where JAX partially
    # evaluates a loop (a scan's linearization), it keeps the forward's known part without
    # its custom_jvp, so second-order AD through the loop (a Hessian-vector product, grad of
    # grad) meets the primitives themselves.
    ad.primitive_jvps[_fwd_p] = lambda primals, tangents, *, spec: _forward_jvp(spec, tuple(primals), tuple(tangents))
    ad.primitive_jvps[_fwd_add_p] = lambda primals, tangents, *, spec: _forward_add_jvp(
        spec, tuple(primals), tuple(tangents))
    ad.primitive_jvps[_bwd_p] = _bwd_jvp_raw

    k = _NP + 1
    p = Primitive("jln_cpu_norm_lin")
    p.def_impl(_lin_impl)
    p.def_abstract_eval(lambda *args, spec, present: args[k].update(dtype=jnp.dtype(spec.y_dtype), weak_type=False))
    mlir.register_lowering(p, mlir.lower_fun(_lin_impl, multiple_results=False))  # (the XLA body's JVP)

    def transpose(ct: Any, *args: Any, spec: Spec, present: tuple[bool, ...]) -> list[Any]:
        if type(ct) is ad.Zero:
            return [None] * len(args)
        x, params, stats = args[k], list(args[k + 1 : 2 * k]), args[2 * k :]
        has = list(spec.has)
        for i, need in enumerate(_value_needed(spec)):
            if spec.has[i] and not need:  # a placeholder: zeros of the gradient's shape, if wanted
                t = args[1 + i]
                wanted = present[1 + i] and ad.is_undefined_primal(t)
                has[i] = wanted
                params[i] = jnp.zeros(t.aval.shape, t.aval.dtype) if wanted else params[i]
        grads = _backward(spec._replace(has=(has[0], has[1], has[2], has[3])), ct, x, *params, *stats)
        return [g if ad.is_undefined_primal(t) else None for g, t in zip(grads, args[:k], strict=True)] + [None] * (len(args) - k)

    def jvp(primals: tuple[Any, ...], tangents: tuple[Any, ...], *, spec: Spec, present: tuple[bool, ...]) -> tuple[Array, Array]:
        out = p.bind(*primals, spec=spec, present=present)
        t = [ad.instantiate_zeros(t) for t in tangents]
        lin = p.bind(*t[:k], *primals[k:], spec=spec, present=present)  # the map itself

        # d/d(x, parameters) of the map, through the XLA body (placeholders filled with zeros)
        tans, vals = _full(tuple(primals), present)
        dvals = [dv if dv.shape == v.shape else jnp.zeros_like(v) for dv, v in zip(t[k : 2 * k], vals, strict=True)]

        def at(*xp: Array) -> Array:
            return jax.jvp(functools.partial(_xla, spec), xp, tans)[1]

        return out, lin + jax.jvp(at, vals, tuple(dvals))[1]

    def batch(args: tuple[Any, ...], dims: tuple[Any, ...], *, spec: Spec, present: tuple[bool, ...]) -> tuple[Array, int]:
        size = next(a.shape[d] for a, d in zip(args, dims, strict=True) if d is not None)

        def front(a: Array, d: Any) -> Array:
            return jnp.moveaxis(a, d, 0) if d is not None else jnp.broadcast_to(a, (size,) + a.shape)

        fa = [front(a, d) for a, d in zip(args, dims, strict=True)]
        flat = [a.reshape((-1,) + a.shape[2:]) for a in fa]  # the mapped axis becomes more rows/groups
        out = p.bind(*flat, spec=spec, present=present)
        return out.reshape(fa[k].shape), 0

    ad.primitive_transposes[p] = transpose
    ad.primitive_jvps[p] = jvp
    batching.primitive_batchers[p] = batch
    _lin_p = p


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


def _ln_flags(spec: LayerNormSpec) -> tuple[bool, bool, tuple[int, ...], float]:
    """LayerNorm's kernel flags ``(center, gemma, rounds, offset)``: the output rounding of
    the spec's tail, then its modulation steps (:func:`modulation_dtypes`)."""
    round_b = round_f = round_s = 0
    if spec.modulated:
        after_scale, after_shift = modulation_dtypes(spec.out_dtype, spec.shift_dtype, spec.mscale_dtype)
        round_b = _kind(spec.out_dtype)
        round_f = _kind(after_scale) if spec.mscale_dtype is not None else 0
        round_s = _kind(after_shift) if spec.shift_dtype is not None else 0
    return True, False, (0, 0, round_b, round_f, round_s, _kind(spec.mscale_dtype)), spec.mod_offset


def _rms_flags(spec: RMSNormSpec) -> tuple[bool, bool, tuple[int, ...], float]:
    """RMSNorm's kernel flags: the convention's steps (:attr:`RMSNormSpec.steps`)."""
    gemma, step_h, step_y = spec.steps
    return False, gemma, (_kind(step_h), _kind(step_y), 0, 0, 0, 0), 1.0


#: The families these kernels implement, and each one's flags.
FLAGS_OF: dict[str, Any] = {"layer_norm": _ln_flags, "rms_norm": _rms_flags}


def run(spec: NormSpec, x: Array, operands: tuple[Array | None, ...], addends: tuple[Array, Array] | None = None) -> Any:
    """The native path of ``spec.body(x, *operands)`` (same result). With ``addends = (a, b)``
    (``x`` being ``a + b``) it returns ``(y, s)``, the kernel fusing the residual step when
    ``a``, ``b`` and ``x`` share one dtype."""
    reason = available()
    if reason is not None:
        raise RuntimeError(f"impl='native': {reason}")
    params = (*operands, None, None, None, None)[:_NP]
    present = tuple(p is not None for p in params)
    center, gemma, rounds, offset = FLAGS_OF[spec.op](spec)
    k = x.ndim - len(spec.axes)
    shape2 = _checks.rows_and_width(x.shape, len(spec.axes))
    kspec = Spec(spec.on_rows(2), center, gemma, rounds, offset, present,  # type: ignore[arg-type]
                 tuple(_dtype(p) for p in params))  # type: ignore[arg-type]
    flat = [_dummy(jnp.float32) if p is None else _grouped(p, x.shape, k, shape2[1]) for p in params]
    # the residual step is fused when x, the residual and their sum x share one dtype;
    # otherwise XLA has added them (x), and the kernel normalizes x
    if addends is not None and addends[0].dtype == addends[1].dtype == x.dtype:
        y, s, _, _ = _forward_add(kspec, addends[0].reshape(shape2), addends[1].reshape(shape2), *flat)
        return y.reshape(x.shape), s.reshape(x.shape)
    y, _, _ = _forward(kspec, x.reshape(shape2), *flat)
    return y.reshape(x.shape) if addends is None else (y.reshape(x.shape), x)


def unsupported_reason(spec: NormSpec, x: Any, operands: tuple[Any, ...], backend: str | None = None) -> str | None:
    """``None`` when a native CPU kernel handles this call, else a sentence saying why not
    (``backend``: the platform the call runs on; default: the default backend)."""
    backend = backend or jax.default_backend()
    if backend != "cpu":
        return f"the native kernels run on the CPU backend (this call's platform: {backend!r})"
    if spec.axis_name is not None:
        return _distributed.CROSS_DEVICE_REASON
    if spec.op not in FLAGS_OF:
        return f"no native CPU kernel for {spec.op!r}"
    if getattr(spec, "convention", None) == "seed":
        return "the 'seed' RMSNorm convention runs on the XLA path"
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
