"""One autodiff layer for jln's kernels: the native CPU kernels and the Pallas kernels.

A :class:`Backend` gives three calls on the kernel layout (``x [*rows, n]``, parameters
broadcastable against it) and this module makes them one differentiable function, :func:`apply`:

* ``forward(spec, x, [residual,] *params)`` returns ``(y, [s,] *stats)``: with a fused add
  (``spec.add``: the dtypes of ``s``, ``x`` and the residual) the kernel reads ``x`` and the
  residual and writes ``s = x + residual`` and ``y = norm(s)``;
* ``backward(spec, base, ct_y, ct_s, stats, params)`` returns ``(d_base, *d_params)`` in
  their primals' dtypes (``base``: ``x``, or ``s``, whose cotangent ``ct_s`` is added);
* ``body(spec, base, *params)`` is the XLA body the kernels implement.

Rules:

* :func:`apply` is a ``jax.custom_jvp`` whose tangent is ``jln_norm_lin``, a primitive linear
  in the tangents. Forward mode evaluates it with the XLA body's JVP (``jvp``/``jacfwd`` give
  the XLA path's numbers); reverse mode transposes it into the backward kernel, which reads
  only ``x`` (``s`` with a fused add), the parameters and the per-row float32 statistics:
  the XLA path's residuals (about 2 bytes per element for bfloat16).
* The backward kernel is a ``custom_jvp`` whose derivative is that of the XLA body's VJP
  (grad-of-grad, Hessians).
* Each direction's kernel call is held in ``jln_norm_call``, a primitive that carries the
  call as a jaxpr (so JAX still sees what is inside: custom partitioning, per-platform
  lowerings) and has that direction's derivative: where JAX partially evaluates a loop (a
  scan's linearization) it keeps the forward's known part without its ``custom_jvp``, so
  second-order AD through the loop meets the call itself.
* ``vmap``: the mapped axis becomes one more leading row axis of ``x``-like arrays (and of
  the statistics); an unmapped parameter is broadcast over it when the backend says so
  (``broadcast``: kernels that read one parameter row per group of consecutive rows), else
  given a size-1 axis. The held calls are vmapped as traced: the backends batch their own
  kernel calls.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax.custom_derivatives import SymbolicZero
from jax.extend.core import Primitive, jaxpr_as_fun
from jax.interpreters import ad, batching, mlir

from jln._contract import add_in

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class Backend:
    """A kernel family's calls (see the module docstring); hashable, a static argument."""

    forward: Callable[..., tuple[Array, ...]]
    backward: Callable[..., tuple[Array, ...]]
    body: Callable[..., Array]
    broadcast: bool  # vmap: unmapped parameters get the mapped axis too
    #: which parameters' values the backward reads (default: all); reverse mode keeps only
    #: those (a parameter the norm is affine in, a bias or shift, goes in as a placeholder)
    needed: Callable[[Any], tuple[bool, ...]] | None = None


def _n_x(spec: Any) -> int:
    return 1 if spec.add is None else 2


def _zero(t: Any) -> bool:
    return isinstance(t, (SymbolicZero, ad.Zero))


# ----------------------------------------------------------------------------- held calls

_call_p = Primitive("jln_norm_call")
_call_p.multiple_results = True
_call_p.def_impl(lambda *args, jaxpr, rule, broadcast: jaxpr_as_fun(jaxpr)(*args))
_call_p.def_abstract_eval(lambda *args, jaxpr, rule, broadcast: jaxpr.out_avals)
mlir.register_lowering(_call_p, lambda ctx, *args, jaxpr, rule, broadcast: mlir.lower_fun(
    jaxpr_as_fun(jaxpr), multiple_results=True)(ctx, *args))


def _hold(f: Callable[..., Any], args: tuple[Array, ...], rule: Any, broadcast: bool) -> list[Array]:
    """``f(*args)`` as ``jln_norm_call`` (``f`` traced here); ``rule(primals, tangents,
    params)`` is its derivative."""
    return _call_p.bind(*args, jaxpr=jax.make_jaxpr(f)(*args), rule=rule, broadcast=broadcast)


def _call_batch(args: tuple[Any, ...], dims: tuple[Any, ...], *, jaxpr: Any, rule: Any, broadcast: bool) -> Any:
    size = next(a.shape[d] for a, d in zip(args, dims, strict=True) if d is not None)
    moved = [jnp.moveaxis(a, d, 0) if d is not None else jnp.broadcast_to(a, (size, *a.shape)) if broadcast else a
             for a, d in zip(args, dims, strict=True)]
    axes = [0 if d is not None or broadcast else None for d in dims]
    out = _hold(jax.vmap(jaxpr_as_fun(jaxpr), in_axes=axes), tuple(moved), rule, broadcast)
    return out, [0] * len(out)


batching.primitive_batchers[_call_p] = _call_batch
ad.primitive_jvps[_call_p] = lambda primals, tangents, **params: params["rule"](
    tuple(primals), tuple(tangents), params)


# ----------------------------------------------------------------------------- forward


@functools.partial(jax.custom_jvp, nondiff_argnums=(0, 1))
def apply(backend: Backend, spec: Any, *args: Array) -> tuple[Array, ...]:
    """``(y, [s,] *stats)`` of the kernels on ``args = (x, [residual,] *params)``; only ``y``
    (and ``s``) are differentiated (the statistics are caches the rules never differentiate)."""
    rule = functools.partial(_forward_rule, backend, spec)
    return tuple(_hold(functools.partial(backend.forward, spec), args, rule, backend.broadcast))


def _forward_jvp(backend: Backend, spec: Any, primals: tuple[Any, ...], tangents: tuple[Any, ...]) -> Any:
    outs = apply(backend, spec, *primals)
    nx = _n_x(spec)
    base = outs[1] if spec.add is not None else primals[0]  # what the backward reads: x, or s
    # zero tangents (inputs not differentiated) stay out of the residuals: scalar placeholders
    present = tuple(not _zero(t) for t in tangents)
    tans = [t if on else jnp.zeros((), p.dtype) for t, p, on in zip(tangents, primals, present, strict=True)]
    needed = backend.needed(spec) if backend.needed else (True,) * (len(primals) - nx)
    params = [p if need else jnp.zeros((1,) * p.ndim, p.dtype) for p, need in zip(primals[nx:], needed, strict=True)]
    lin = _lin_p.bind(*tans, base, *params, *outs[nx:], backend=backend, spec=spec, present=present)
    return outs, (*lin, *(jnp.zeros_like(st) for st in outs[nx:]))


def _forward_rule(backend: Backend, spec: Any, primals: Any, tangents: Any, params: Any) -> Any:
    return _forward_jvp(backend, spec, primals, tangents)


apply.defjvp(_forward_jvp, symbolic_zeros=True)


# ----------------------------------------------------------------------------- backward


def _body_vjp(backend: Backend, spec: Any, base: Array, ct_y: Array, ct_s: Array | None, *params: Array) -> tuple[Array, ...]:
    """The backward through the XLA body: the backward kernel's contract."""
    d_base, *d_params = jax.vjp(functools.partial(backend.body, spec), base, *params)[1](ct_y)
    return (d_base if ct_s is None else d_base + ct_s, *d_params)


def _backward_tangent(backend: Backend, spec: Any, primals: tuple[Any, ...], tangents: tuple[Any, ...]) -> Any:
    """The tangent of the backward at ``primals = (base, ct_y, ct_s, stats, params)``: the XLA
    body's VJP's (the statistics unread)."""
    base, ct_y, ct_s, _, params = primals
    t_base, t_ct_y, t_ct_s, _, t_params = tangents
    if ct_s is None:
        return jax.jvp(lambda b, c, *p: _body_vjp(backend, spec, b, c, None, *p), (base, ct_y, *params),
                       (t_base, t_ct_y, *t_params))[1]
    return jax.jvp(functools.partial(_body_vjp, backend, spec), (base, ct_y, ct_s, *params),
                   (t_base, t_ct_y, t_ct_s, *t_params))[1]


def _unpack(spec: Any, n_stats: int, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """A held backward's operands ``(base, ct_y, [ct_s,] *stats, *params)`` as
    ``(base, ct_y, ct_s or None, stats, params)``."""
    k = 2 + (spec.add is not None)
    return args[0], args[1], args[2] if k == 3 else None, tuple(args[k : k + n_stats]), tuple(args[k + n_stats :])


@functools.partial(jax.custom_jvp, nondiff_argnums=(0, 1))
def _backward(backend: Backend, spec: Any, base: Array, ct_y: Array, ct_s: Array | None, stats: tuple[Array, ...],
              *params: Array) -> tuple[Array, ...]:
    ns = len(stats)

    def kernel(*args: Array) -> tuple[Array, ...]:
        return tuple(backend.backward(spec, *_unpack(spec, ns, args)))

    args = (base, ct_y, *(() if ct_s is None else (ct_s,)), *stats, *params)
    return tuple(_hold(kernel, args, functools.partial(_backward_rule, backend, spec, ns), backend.broadcast))


@_backward.defjvp
def _backward_jvp(backend: Backend, spec: Any, primals: tuple[Any, ...], tangents: tuple[Any, ...]) -> Any:
    def five(a: tuple[Any, ...]) -> tuple[Any, ...]:
        return (*a[:4], tuple(a[4:]))

    return _backward(backend, spec, *primals), _backward_tangent(backend, spec, five(primals), five(tangents))


def _backward_rule(backend: Backend, spec: Any, ns: int, primals: Any, tangents: Any, params: Any) -> Any:
    out = _call_p.bind(*primals, **params)
    t = tuple(ad.instantiate_zeros(t) for t in tangents)
    d = _backward_tangent(backend, spec, _unpack(spec, ns, primals), _unpack(spec, ns, t))
    return out, [a.astype(o.dtype) for a, o in zip(d, out, strict=True)]


# ----------------------------------------------------------------------------- the tangent map


def _split(present: tuple[bool, ...], nx: int, args: tuple[Any, ...]) -> tuple[Any, ...]:
    """``jln_norm_lin``'s operands: the tangents (of x [and the residual] and the parameters),
    the base (x, or s), the parameters, the statistics."""
    n, k = len(present), len(present) - nx
    return args[:n], args[n], args[n + 1 : n + 1 + k], args[n + 1 + k :]


def _lin_impl(*args: Array, backend: Backend, spec: Any, present: tuple[bool, ...]) -> list[Array]:
    """The tangent map, evaluated with the XLA body's JVP (forward mode)."""
    nx = _n_x(spec)
    tans, base, params, _ = _split(present, nx, args)
    # a placeholder value (one the tangent does not depend on) is zeros of its tangent's shape
    params = tuple(jnp.zeros_like(t) if on and t.shape != p.shape else p
                   for t, p, on in zip(tans[nx:], params, present[nx:], strict=True))
    dtypes = [base.dtype] if spec.add is None else list(spec.add[1:])
    full = [t if on else jnp.zeros(v.shape, dt)
            for t, on, v, dt in zip(tans, present, (base,) * nx + params, dtypes + [p.dtype for p in params], strict=True)]
    t_x = full[0] if spec.add is None else add_in(full[0], full[1], spec.add[0])
    t_y = jax.jvp(functools.partial(backend.body, spec), (base, *params), (t_x, *full[nx:]))[1]
    return [t_y] if spec.add is None else [t_y, t_x]


def _lin_abstract(*args: Any, backend: Backend, spec: Any, present: tuple[bool, ...]) -> list[Any]:
    base = args[len(present)]
    outs = [base.update(dtype=jnp.dtype(spec.family.result_dtype), weak_type=False)]
    return outs if spec.add is None else [*outs, base.update(weak_type=False)]


def _lin_transpose(cts: Any, *args: Any, backend: Backend, spec: Any, present: tuple[bool, ...]) -> list[Any]:
    tans, base, params, stats = _split(present, _n_x(spec), args)
    if all(type(c) is ad.Zero for c in cts):
        return [None] * len(args)
    ct_s = None if spec.add is None else ad.instantiate_zeros(cts[1])
    # a placeholder value whose gradient is wanted: zeros of the gradient's shape
    params = tuple(jnp.zeros(t.aval.shape, t.aval.dtype) if on and ad.is_undefined_primal(t) and t.aval.shape != p.shape
                   else p for t, p, on in zip(tans[_n_x(spec):], params, present[_n_x(spec):], strict=True))
    backward: Any = _backward  # custom_jvp: mypy does not see through nondiff_argnums
    d_base, *d_params = backward(backend, spec, base, ad.instantiate_zeros(cts[0]), ct_s, tuple(stats), *params)
    d_x = [d_base] if spec.add is None else [d_base.astype(spec.add[1]), d_base.astype(spec.add[2])]
    grads = [g if on and ad.is_undefined_primal(t) else None for g, t, on in zip(d_x + d_params, tans, present, strict=True)]
    return grads + [None] * (len(args) - len(tans))


def _lin_jvp(primals: Any, tangents: Any, *, backend: Backend, spec: Any, present: tuple[bool, ...]) -> Any:
    # linear in the tangent operands; smooth in (base, parameters) through the XLA body (the
    # statistics are derived from the base and never differentiated)
    kw = dict(backend=backend, spec=spec, present=present)
    nx = _n_x(spec)
    out = _lin_p.bind(*primals, **kw)
    tans, base, params, stats = _split(present, nx, primals)
    d_tans, d_base, d_params, _ = _split(present, nx, tuple(ad.instantiate_zeros(t) for t in tangents))
    d_tans = tuple(d if on else v for d, v, on in zip(d_tans, tans, present, strict=True))
    linear = _lin_p.bind(*d_tans, base, *params, *stats, **kw)
    _, smooth = jax.jvp(lambda b, *o: _lin_impl(*tans, b, *o, *stats, **kw), (base, *params), (d_base, *d_params))
    return out, [a + b for a, b in zip(linear, smooth, strict=True)]


def _lin_batch(args: Any, dims: Any, *, backend: Backend, spec: Any, present: tuple[bool, ...]) -> Any:
    size = next(a.shape[d] for a, d in zip(args, dims, strict=True) if d is not None)
    nx, n = _n_x(spec), len(present)
    k = n - nx
    out = [jnp.moveaxis(a, d, 0) if d is not None else None for a, d in zip(args, dims, strict=True)]

    def grow(i: int, mapped: bool) -> None:
        if out[i] is None and (i >= n or present[i]):  # (placeholders stay as they are)
            out[i] = jnp.broadcast_to(args[i], (size, *args[i].shape)) if mapped else args[i][None]

    # x-like operands (tangents of x, the base, the statistics) get the mapped axis as a
    # leading row axis; a parameter and its tangent get it together, or a size-1 axis each
    for i in (*range(nx), n, *range(n + 1 + k, len(args))):
        grow(i, True)
    for j in range(k):
        mapped = backend.broadcast or out[nx + j] is not None or out[n + 1 + j] is not None
        grow(nx + j, mapped)
        grow(n + 1 + j, mapped)
    res = _lin_p.bind(*[a if o is None else o for a, o in zip(args, out, strict=True)],
                      backend=backend, spec=spec, present=present)
    return res, [0] * len(res)


_lin_p = Primitive("jln_norm_lin")
_lin_p.multiple_results = True
_lin_p.def_impl(_lin_impl)
_lin_p.def_abstract_eval(_lin_abstract)
mlir.register_lowering(_lin_p, mlir.lower_fun(_lin_impl, multiple_results=True))
ad.primitive_transposes[_lin_p] = _lin_transpose
ad.primitive_jvps[_lin_p] = _lin_jvp
batching.primitive_batchers[_lin_p] = _lin_batch
