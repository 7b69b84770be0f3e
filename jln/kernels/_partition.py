"""Row partitioning of the kernels for XLA's partitioner (``AxisType.Auto`` meshes).

A ``pallas_call`` is opaque to XLA's SPMD partitioner, which would gather its operands onto
every device. The forward and the backward kernel calls are therefore each wrapped in a
``jax.experimental.custom_partitioning`` (it has no differentiation rule, so it sits inside
:func:`jln.kernels._norm.call`'s ``custom_vjp``, once per direction):

* ``x [*lead, n]``, per-row operands and the saved statistics ``[*lead, 1]`` keep the
  sharding of ``x``'s row axes (``lead``); each device runs the kernels on its block of rows
  with a plan sized for that block. No collective touches the activation.
* The normalized axis ``n`` and the per-feature parameters ``[1, 1, n]`` are replicated: when
  ``n`` arrives split over mesh axes, XLA all-gathers that axis only (each device keeps its
  rows), runs the kernel, and slices the result back. That gather moves the activation;
  ``impl="xla"`` (or an explicit mesh, where jln merges per-row statistics instead) avoids it.
* The backward's per-feature parameter gradients are each device's float32 partial sums,
  all-reduced over the mesh axes that split the rows (one ``[1, 1, n]`` vector per
  parameter), then cast to the parameter's dtype.
* A row axis whose size the mesh axes do not divide evenly is replicated rather than padded
  (padded rows would add garbage to the parameter gradients).

Outside a multi-device computation (one device, or inside ``jax.shard_map`` where every axis
is manual) ``custom_partitioning`` inlines the kernels unchanged. Under ``jax.vmap`` the
forward folds the mapped axis into the rows (still partitioned); the backward, whose
parameter gradients must stay per example, runs the kernels' own batching on the global
arrays (``custom_partitioning`` has no batching rule).
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

from jln.kernels import _norm

Array = jax.Array


def _n_stats(spec: _norm.Spec) -> int:
    return 2 if spec.op == "ln" else 1


# ----------------------------------------------------------------------------- sharding decisions


def _entries(sharding: Any, ndim: int) -> tuple[Any, ...]:
    spec = tuple(getattr(sharding, "spec", ()))
    return spec + (None,) * (ndim - len(spec))


def _names(entry: Any) -> tuple[Any, ...]:
    if entry is None:
        return ()
    return tuple(entry) if isinstance(entry, tuple) else (entry,)


def _row_layout(mesh: Any, x_info: Any) -> tuple[PartitionSpec, tuple[Any, ...]]:
    """``(spec of x, mesh axes splitting the rows)``: x's row-axis sharding where it divides
    evenly, the normalized (last) axis replicated."""
    shape = tuple(x_info.shape)
    if not isinstance(x_info.sharding, NamedSharding):  # no mesh to name axes with: replicate
        return PartitionSpec(*(None,) * len(shape)), ()
    sizes = dict(mesh.shape)
    rows: list[Any] = []
    for dim, entry in zip(shape[:-1], _entries(x_info.sharding, len(shape))[:-1], strict=True):
        split = math.prod(sizes[a] for a in _names(entry))
        rows.append(entry if entry is not None and dim % split == 0 else None)
    axes = tuple(a for e in rows for a in _names(e))
    return PartitionSpec(*rows, None), axes


def _shardings(mesh: Any, x_spec: PartitionSpec) -> tuple[Any, Any, Any]:
    """``(x-like, statistics, replicated)`` NamedShardings for the row layout ``x_spec``."""
    stat = PartitionSpec(*tuple(x_spec)[:-1], None)
    return NamedSharding(mesh, x_spec), NamedSharding(mesh, stat), NamedSharding(mesh, PartitionSpec())


def _op_shardings(spec: _norm.Spec, x_like: Any, rep: Any) -> list[Any]:
    return [x_like if kind == _norm.ROW else rep for kind, _ in spec.kinds]


def _rule(spec: _norm.Spec, ndim: int, backward: bool) -> str:
    """Shardy rule: row factors shared by x, row operands, statistics and dx; one factor for
    the normalized axis; size-1 axes of parameters and statistics get factors of their own."""
    rows = [f"r{i}" for i in range(ndim - 1)]
    x = " ".join(rows + ["n"])
    stat = " ".join(rows + ["s"])
    ops = [x if kind == _norm.ROW else f"p{i} q{i} n" for i, (kind, _) in enumerate(spec.kinds)]
    if not backward:
        return f"{', '.join([x, *ops])} -> {', '.join([x] + [stat] * _n_stats(spec))}"
    args = [x, x] + [stat] * _n_stats(spec) + ops
    outs = [x] + [x if kind == _norm.ROW else f"g{i} h{i} n" for i, (kind, _) in enumerate(spec.kinds)]
    return f"{', '.join(args)} -> {', '.join(outs)}"


# ----------------------------------------------------------------------------- forward


def _fwd_impl(spec: _norm.Spec, ndim: int, x: Array, *ops: Array) -> tuple[Array, ...]:
    del ndim  # static only for the sharding rule
    return _norm.forward_nd(spec, x, ops)


def _fwd_partition(spec: _norm.Spec, ndim: int, mesh: Any, arg_infos: Any, result_infos: Any) -> Any:
    x_spec, _ = _row_layout(mesh, arg_infos[0])
    x_like, stat, rep = _shardings(mesh, x_spec)
    lower = functools.partial(_fwd_impl, spec, ndim)
    return mesh, lower, (x_like, *[stat] * _n_stats(spec)), (x_like, *_op_shardings(spec, x_like, rep))


def _fwd_infer(spec: _norm.Spec, ndim: int, mesh: Any, arg_infos: Any, result_infos: Any) -> Any:
    x_spec, _ = _row_layout(mesh, arg_infos[0])
    x_like, stat, _ = _shardings(mesh, x_spec)
    return (x_like, *[stat] * _n_stats(spec))


_fwd_cp = custom_partitioning(_fwd_impl, static_argnums=(0, 1))
_fwd_cp.def_partition(
    partition=_fwd_partition,
    infer_sharding_from_operands=_fwd_infer,
    sharding_rule=lambda spec, ndim, *_: _rule(spec, ndim, backward=False),
)


def forward(spec: _norm.Spec, x: Array, ops: tuple[Array, ...]) -> tuple[Array, ...]:
    """:func:`jln.kernels._norm.forward_nd`, partitioned by rows."""

    @custom_vmap
    def fwd(x: Array, *ops: Array) -> tuple[Array, ...]:
        return _fwd_cp(spec, x.ndim, x, *ops)

    @fwd.def_vmap
    def fwd_batched(axis_size: int, in_batched: list[bool], x: Array, *ops: Array) -> Any:
        params_batched = any(b for b, (kd, _) in zip(in_batched[1:], spec.kinds, strict=True) if kd != _norm.ROW)
        if in_batched[0] and not params_batched:  # the mapped axis is one more row axis
            ops = tuple(
                jnp.broadcast_to(o, x.shape) if kd == _norm.ROW and not b else o
                for o, b, (kd, _) in zip(ops, in_batched[1:], spec.kinds, strict=True)
            )
            out = fwd(x, *ops)
        else:
            axes = [0 if b else None for b in in_batched]
            out = jax.vmap(functools.partial(_norm.forward_nd, spec), in_axes=(axes[0], tuple(axes[1:])))(x, ops)
        return tuple(out), (True,) * len(out)

    return tuple(fwd(x, *ops))


# ----------------------------------------------------------------------------- backward


def _bwd_local(spec: _norm.Spec, x: Array, dy: Array, *rest: Array) -> tuple[Array, ...]:
    k = _n_stats(spec)
    return _norm.backward_nd(spec, x, dy, tuple(rest[:k]), tuple(rest[k:]), cast_params=False)


def _bwd_impl(spec: _norm.Spec, ndim: int, x: Array, dy: Array, *rest: Array) -> tuple[Array, ...]:
    del ndim
    return _bwd_local(spec, x, dy, *rest)


def _bwd_partition(spec: _norm.Spec, ndim: int, mesh: Any, arg_infos: Any, result_infos: Any) -> Any:
    x_spec, row_axes = _row_layout(mesh, arg_infos[0])
    x_like, stat, rep = _shardings(mesh, x_spec)
    kinds = [kind for kind, _ in spec.kinds]

    def lower(x: Array, dy: Array, *rest: Array) -> tuple[Array, ...]:
        dx, *dops = _bwd_local(spec, x, dy, *rest)
        if row_axes:  # each device summed its own rows: add the blocks' per-feature partials
            dops = [d if kd == _norm.ROW else jax.lax.psum(d, row_axes) for d, kd in zip(dops, kinds, strict=True)]
        return (dx, *dops)

    op_sh = _op_shardings(spec, x_like, rep)
    args = (x_like, x_like, *[stat] * _n_stats(spec), *op_sh)
    return mesh, lower, (x_like, *op_sh), args


def _bwd_infer(spec: _norm.Spec, ndim: int, mesh: Any, arg_infos: Any, result_infos: Any) -> Any:
    x_spec, _ = _row_layout(mesh, arg_infos[0])
    x_like, _, rep = _shardings(mesh, x_spec)
    return (x_like, *_op_shardings(spec, x_like, rep))


_bwd_cp = custom_partitioning(_bwd_impl, static_argnums=(0, 1))
_bwd_cp.def_partition(
    partition=_bwd_partition,
    infer_sharding_from_operands=_bwd_infer,
    sharding_rule=lambda spec, ndim, *_: _rule(spec, ndim, backward=True),
)


def backward(spec: _norm.Spec, x: Array, dy: Array, stats: tuple[Array, ...], ops: tuple[Array, ...]) -> tuple[Array, ...]:
    """:func:`jln.kernels._norm.backward_nd`, partitioned by rows; parameter gradients cast
    to their dtype after the cross-device sum."""

    @custom_vmap
    def bwd(x: Array, dy: Array, *rest: Array) -> tuple[Array, ...]:
        return _bwd_cp(spec, x.ndim, x, dy, *rest)

    @bwd.def_vmap
    def bwd_batched(axis_size: int, in_batched: list[bool], *args: Array) -> Any:
        # per-example parameter gradients: the kernels' own batching on the global arrays
        axes = [0 if b else None for b in in_batched]
        out = jax.vmap(functools.partial(_bwd_local, spec), in_axes=axes, axis_size=axis_size)(*args)
        return tuple(out), (True,) * len(out)

    dx, *dops = bwd(x, dy, *stats, *ops)
    return (dx, *(d.astype(o.dtype) for d, o in zip(dops, ops, strict=True)))
