"""Row partitioning of the kernels for XLA's partitioner (``AxisType.Auto`` meshes).

A ``pallas_call`` is opaque to XLA's SPMD partitioner, which would gather its operands onto
every device. The forward and the backward kernel calls are therefore each wrapped in a
``jax.experimental.custom_partitioning`` (it has no differentiation rule, so it sits inside
:mod:`jln.kernels._ad`'s differentiation rules, once per direction):

* ``x [*lead, n]``, the saved statistics ``[*lead, 1]`` and ``dx`` keep the sharding of
  ``x``'s row axes (``lead``); each device runs the kernels on its block of rows with a plan
  sized for that block (:func:`jln.kernels._norm.localize`). No collective touches the
  activation.
* Operands are broadcastable against ``x`` (``[*lead', n]``, each row axis ``x``'s or 1):
  they follow ``x`` on the row axes they share with it (a per-example condition
  ``[B, 1, n]`` is split with ``x``'s batch) and are replicated on the others.
* The normalized axis ``n`` is replicated: when it arrives split over mesh axes, XLA
  all-gathers that axis only (each device keeps its rows), runs the kernel, and slices the
  result back. That gather moves the activation; ``impl="xla"`` (or an explicit mesh, where
  jln merges per-row statistics instead) avoids it.
* The backward's gradient of a broadcast operand is each device's float32 partial sum,
  all-reduced over the mesh axes that split the row axes the operand broadcasts along (a
  ``[1, 1, n]`` vector per parameter), then cast to the operand's dtype.
* A row axis whose size the mesh axes do not divide evenly is replicated rather than padded
  (padded rows would add garbage to the parameter gradients).

Outside a multi-device computation (one device, or inside ``jax.shard_map`` where every axis
is manual) ``custom_partitioning`` inlines the kernels unchanged. Inside it, each direction's
kernel call is a primitive of :mod:`jln.kernels._export` (the kernel on its target's
platforms, the XLA body under ``jax.export`` and elsewhere); it stays below
``custom_partitioning``, whose lowering JAX gives the devices only when the traced program
shows it. ``custom_partitioning`` has
no batching rule, so each direction is also a ``jax.custom_batching.custom_vmap`` whose rule
makes the mapped axis one more row axis (an unmapped operand is broadcast over it, in the
backward as one group per example so each example gets its own gradient). Their
differentiation rules are :mod:`jln.kernels._ad`'s.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
from jax.custom_batching import custom_vmap
from jax.experimental.custom_partitioning import custom_partitioning
from jax.sharding import NamedSharding, PartitionSpec

from jln.kernels import _export, _norm

Array = jax.Array


def _signature(x: Array, ops: tuple[Array, ...]) -> tuple[int, tuple[tuple[bool, ...], ...]]:
    """Static layout: ``x``'s rank and, per operand, which row axes it shares with ``x``."""
    return x.ndim, tuple(tuple(o.shape[i] == x.shape[i] != 1 for i in range(x.ndim - 1)) for o in ops)


# ----------------------------------------------------------------------------- sharding decisions


def _entries(sharding: Any, ndim: int) -> tuple[Any, ...]:
    spec = tuple(getattr(sharding, "spec", ()))
    return spec + (None,) * (ndim - len(spec))


def _names(entry: Any) -> tuple[Any, ...]:
    if entry is None:
        return ()
    return tuple(entry) if isinstance(entry, tuple) else (entry,)


def _row_entries(mesh: Any, x_info: Any) -> tuple[Any, ...]:
    """x's sharding of each row axis where the mesh axes divide it evenly, else None."""
    shape = tuple(x_info.shape)
    if not isinstance(x_info.sharding, NamedSharding):  # no mesh to name axes with: replicate
        return (None,) * (len(shape) - 1)
    sizes = dict(mesh.shape)
    rows: list[Any] = []
    for dim, entry in zip(shape[:-1], _entries(x_info.sharding, len(shape))[:-1], strict=True):
        split = math.prod(sizes[a] for a in _names(entry))
        rows.append(entry if entry is not None and dim % split == 0 else None)
    return tuple(rows)


def _like(mesh: Any, rows: tuple[Any, ...], shared: tuple[bool, ...] | None, last: int = 1) -> NamedSharding:
    """Sharding of an array laid out like x's rows (all shared, or per ``shared``) with the
    normalized (or statistics) axis replicated."""
    entries = rows if shared is None else tuple(e if s else None for e, s in zip(rows, shared, strict=True))
    return NamedSharding(mesh, PartitionSpec(*entries, *(None,) * last))


def _summed_axes(rows: tuple[Any, ...], shared: tuple[bool, ...]) -> tuple[Any, ...]:
    """Mesh axes splitting the row axes an operand broadcasts over: its gradient's partial
    sums are added across them."""
    return tuple(a for e, s in zip(rows, shared, strict=True) if not s for a in _names(e))


def _rule(sig: tuple[int, tuple[tuple[bool, ...], ...]], n_stats: int, backward: bool, n_x: int = 1) -> str:
    """Shardy rule: row factors shared by x, statistics, dx and the operands' matching axes;
    one factor for the normalized axis; broadcast (size-1) axes get factors of their own.
    ``n_x`` counts the arrays laid out like x in each direction (2 with a fused add: x and
    the residual in, y and s out; s, dy and ds in)."""
    ndim, shared = sig
    rows = [f"r{i}" for i in range(ndim - 1)]
    x = " ".join(rows + ["n"])
    stat = " ".join(rows + ["s"])

    def op(i: int, tag: str) -> str:
        return " ".join([r if s else f"{tag}{i}_{d}" for d, (r, s) in enumerate(zip(rows, shared[i], strict=True))] + ["n"])

    ops = [op(i, "u") for i in range(len(shared))]
    if not backward:
        return f"{', '.join([x] * n_x + ops)} -> {', '.join([x] * n_x + [stat] * n_stats)}"
    args = [x] * (n_x + 1) + [stat] * n_stats + ops
    return f"{', '.join(args)} -> {', '.join([x] + [op(i, 'v') for i in range(len(shared))])}"


# ----------------------------------------------------------------------------- forward


#: The platforms each kernel target lowers for (interpret mode: any).
_TARGET_PLATFORMS = {"gpu": ("cuda", "rocm"), "tpu": ("tpu",)}


def _runs_on(platform: str, spec: _norm.Spec) -> bool:
    return spec.plan.interpret or platform in _TARGET_PLATFORMS.get(spec.plan.target, ())


# Each direction's kernel call on a device's rows is a primitive (jln.kernels._export): the
# kernel on the platforms of its target, the XLA body under jax.export and on other platforms.
# (Inside custom_partitioning, which must stay in the traced program: JAX gives its lowering
# the devices only when it sees it there.)
_fwd_p = _export.primitive(
    "jln_pallas_norm_fwd",
    lambda *args, spec: _norm.forward_nd(spec, args[: spec.n_x], args[spec.n_x :]),
    lambda *args, spec: _norm.forward_xla(spec, args[: spec.n_x], args[spec.n_x :]),
    _runs_on,
)


def _fwd_impl(spec: _norm.Spec, sig: Any, *args: Array) -> tuple[Array, ...]:
    del sig  # static only for the sharding decisions
    return tuple(_fwd_p.bind(*args, spec=spec))


def _fwd_shardings(spec: _norm.Spec, sig: Any, mesh: Any, arg_infos: Any) -> tuple[Any, Any]:
    rows = _row_entries(mesh, arg_infos[0])
    x_like = _like(mesh, rows, None)
    outs = (*[x_like] * spec.n_x, *[_like(mesh, rows, None)] * spec.n_stats)
    return outs, (*[x_like] * spec.n_x, *(_like(mesh, rows, s) for s in sig[1]))


def _fwd_partition(spec: _norm.Spec, sig: Any, mesh: Any, arg_infos: Any, result_infos: Any) -> Any:
    outs, args = _fwd_shardings(spec, sig, mesh, arg_infos)
    return mesh, functools.partial(_fwd_impl, spec, sig), outs, args


def _fwd_infer(spec: _norm.Spec, sig: Any, mesh: Any, arg_infos: Any, result_infos: Any) -> Any:
    return _fwd_shardings(spec, sig, mesh, arg_infos)[0]


_fwd_cp = custom_partitioning(_fwd_impl, static_argnums=(0, 1))
_fwd_cp.def_partition(
    partition=_fwd_partition,
    infer_sharding_from_operands=_fwd_infer,
    sharding_rule=lambda spec, sig, *_: _rule(sig, spec.n_stats, backward=False, n_x=spec.n_x),
)


def forward(spec: _norm.Spec, xs: tuple[Array, ...], ops: tuple[Array, ...]) -> tuple[Array, ...]:
    """:func:`jln.kernels._norm.forward_nd`, partitioned by rows; ``xs`` is ``(x,)``, or
    ``(x, residual)`` with a fused add."""
    nx = len(xs)

    @custom_vmap
    def fwd(*args: Array) -> tuple[Array, ...]:
        return tuple(_fwd_cp(spec, _signature(args[0], args[nx:]), *args))

    @fwd.def_vmap
    def fwd_batched(axis_size: int, in_batched: list[bool], *args: Array) -> Any:
        # the mapped axis is one more row axis: arrays laid out like x get it (broadcast where
        # unmapped); unmapped operands broadcast over it (size 1)
        xs_ = tuple(a if b else jnp.broadcast_to(a, (axis_size, *a.shape)) for a, b in zip(args[:nx], in_batched[:nx], strict=True))
        ops = tuple(o if b else o[None] for o, b in zip(args[nx:], in_batched[nx:], strict=True))
        out = fwd(*xs_, *ops)
        return out, (True,) * len(out)

    return tuple(fwd(*xs, *ops))


# ----------------------------------------------------------------------------- backward


def _bwd_kernel(spec: _norm.Spec, x: Array, dy: Array, *rest: Array) -> tuple[Array, ...]:
    ds, stats, ops = _norm.split_rest(spec, rest)
    return _norm.backward_nd(spec, x, dy, stats, ops, cast_params=False, ds=ds)


_bwd_p = _export.primitive(
    "jln_pallas_norm_bwd",
    lambda x, dy, *rest, spec: _bwd_kernel(spec, x, dy, *rest),
    lambda x, dy, *rest, spec: _norm.backward_xla(spec, x, dy, *rest),
    _runs_on,
)


def _bwd_local(spec: _norm.Spec, x: Array, dy: Array, *rest: Array) -> tuple[Array, ...]:
    """``(dx, *d_ops)`` of a device's rows, broadcast operands' gradients as float32 partial
    sums; ``rest``: ``ds`` with a fused add, the statistics, the operands."""
    return tuple(_bwd_p.bind(x, dy, *rest, spec=spec))


def _bwd_impl(spec: _norm.Spec, sig: Any, x: Array, dy: Array, *rest: Array) -> tuple[Array, ...]:
    del sig
    return _bwd_local(spec, x, dy, *rest)


def _bwd_shardings(spec: _norm.Spec, sig: Any, mesh: Any, arg_infos: Any) -> tuple[Any, Any, tuple[Any, ...]]:
    rows = _row_entries(mesh, arg_infos[0])
    x_like = _like(mesh, rows, None)
    op_sh = tuple(_like(mesh, rows, s) for s in sig[1])
    args = (*[x_like] * (1 + spec.n_x), *[_like(mesh, rows, None)] * spec.n_stats, *op_sh)
    return (x_like, *op_sh), args, rows


def _bwd_partition(spec: _norm.Spec, sig: Any, mesh: Any, arg_infos: Any, result_infos: Any) -> Any:
    outs, args, rows = _bwd_shardings(spec, sig, mesh, arg_infos)
    summed = [_summed_axes(rows, s) for s in sig[1]]

    def lower(x: Array, dy: Array, *rest: Array) -> tuple[Array, ...]:
        dx, *dops = _bwd_local(spec, x, dy, *rest)
        # each device summed its own rows: add the partial sums of the devices sharing a row
        # of the operand (only the small per-feature / per-group vectors travel)
        dops = [jax.lax.psum(d, ax) if ax else d for d, ax in zip(dops, summed, strict=True)]
        return (dx, *dops)

    return mesh, lower, outs, args


def _bwd_infer(spec: _norm.Spec, sig: Any, mesh: Any, arg_infos: Any, result_infos: Any) -> Any:
    return _bwd_shardings(spec, sig, mesh, arg_infos)[0]


_bwd_cp = custom_partitioning(_bwd_impl, static_argnums=(0, 1))
_bwd_cp.def_partition(
    partition=_bwd_partition,
    infer_sharding_from_operands=_bwd_infer,
    sharding_rule=lambda spec, sig, *_: _rule(sig, spec.n_stats, backward=True, n_x=spec.n_x),
)


def backward(
    spec: _norm.Spec, x: Array, dy: Array, stats: tuple[Array, ...], ops: tuple[Array, ...], ds: Array | None = None
) -> tuple[Array, ...]:
    """:func:`jln.kernels._norm.backward_nd`, partitioned by rows; broadcast operands'
    gradients cast to their dtype after the cross-device sum. With a fused add, ``x`` is the
    saved sum ``s`` and ``ds`` its cotangent, added to the result."""
    extra = () if ds is None else (ds,)

    @custom_vmap
    def bwd(x: Array, dy: Array, *rest: Array) -> tuple[Array, ...]:
        return tuple(_bwd_cp(spec, _signature(x, _norm.split_rest(spec, rest)[2]), x, dy, *rest))

    @bwd.def_vmap
    def bwd_batched(axis_size: int, in_batched: list[bool], *args: Array) -> Any:
        # every example needs its own operand gradients: give every argument the mapped axis
        # (an unmapped parameter becomes one group per example)
        args = tuple(a if b else jnp.broadcast_to(a, (axis_size, *a.shape)) for a, b in zip(args, in_batched, strict=True))
        out = bwd(*args)
        return out, (True,) * len(out)

    dx, *dops = bwd(x, dy, *extra, *stats, *ops)
    return (dx, *(d.astype(o.dtype) for d, o in zip(dops, ops, strict=True)))
