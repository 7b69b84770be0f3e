"""Norms of arrays whose sharding is known at trace time (explicit mesh axes).

Under ``jax.jit`` with a mesh whose axes are ``AxisType.Explicit`` (``jax.make_mesh``'s
default), the sharding of ``x`` is part of its type. When a normalized axis is sharded there,
jln runs its body inside ``jax.shard_map`` over the mesh and passes the mesh axes that split
the normalized axes as ``axis_name``: the statistics then take one collective each way (an
all_gather of 3 values per row forward, its reduce-scatter backward; one psum for RMSNorm)
instead of XLA's several all-reduces, and the activation is never gathered. The same wrapper
lets a Pallas kernel, which XLA cannot partition, run on the local blocks when only the rows
are sharded.

Under ``AxisType.Auto`` axes the sharding is decided after tracing, so nothing here applies:
XLA's partitioner splits the XLA body's reductions itself (several all-reduces of per-row
values, never an all-gather of the activation).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
from jax.sharding import AxisType, NamedSharding, PartitionSpec

Array = jax.Array


def _names(entry: Any) -> tuple[Any, ...]:
    if entry is None:
        return ()
    return tuple(entry) if isinstance(entry, tuple) else (entry,)


def explicit_layout(x: Any) -> tuple[Any, tuple[Any, ...]] | None:
    """``(mesh, spec entries)`` when ``x`` is sharded over explicit mesh axes, else None."""
    try:
        sharding = jax.typeof(x).sharding
    except (TypeError, AttributeError):
        return None
    mesh = getattr(sharding, "mesh", None)
    spec = getattr(sharding, "spec", None)
    if mesh is None or spec is None or getattr(mesh, "empty", True):
        return None
    entries = tuple(spec) + (None,) * (x.ndim - len(spec))
    used = {n for e in entries for n in _names(e)}
    types = dict(zip(mesh.axis_names, mesh.axis_types, strict=True))
    if not used or any(types.get(n) != AxisType.Explicit for n in used):
        return None  # replicated, or Auto/Manual axes: XLA (or the caller) partitions it
    return mesh, entries


def hidden_axis_names(entries: tuple[Any, ...], axes: tuple[int, ...]) -> tuple[Any, ...]:
    """The mesh axes that split the normalized axes, in major-to-minor order."""
    return tuple(n for a in axes for n in _names(entries[a]))


def _spec_like(a: Array, x_shape: tuple[int, ...], entries: tuple[Any, ...], axes: tuple[int, ...]) -> PartitionSpec:
    """Spec of a broadcastable operand: follow x's sharding on each dim it shares with x."""
    out = []
    for i, n in enumerate(a.shape):
        same = n == x_shape[i] and n != 1
        out.append(entries[i] if same or (i in axes and n != 1) else None)
    return PartitionSpec(*out)


def run_local(
    body: Callable[..., Array],
    layout: tuple[Any, tuple[Any, ...]],
    axes: tuple[int, ...],
    x: Array,
    *operands: Array | None,
) -> Array:
    """Run ``body(x, *operands, axis_name=...)`` on the local blocks under ``jax.shard_map``.

    ``axis_name`` is the tuple of mesh axes splitting the normalized axes, or None when only
    the rows are sharded. Operands (per-feature parameters, conditions) are resharded to
    follow ``x`` on the dimensions they share with it; they are small next to ``x``.
    """
    mesh, entries = layout
    hidden = hidden_axis_names(entries, axes) or None
    present = [i for i, o in enumerate(operands) if o is not None]
    specs = [_spec_like(operands[i], x.shape, entries, axes) for i in present]  # type: ignore[arg-type]
    args = [jax.sharding.reshard(operands[i], NamedSharding(mesh, s)) for i, s in zip(present, specs, strict=True)]
    x_spec = PartitionSpec(*entries)

    def local(xl: Array, *ops: Array) -> Array:
        full: list[Array | None] = [None] * len(operands)
        for i, o in zip(present, ops, strict=True):
            full[i] = o
        return body(xl, *full, axis_name=hidden)

    mapped = jax.shard_map(local, mesh=mesh, in_specs=(x_spec, *specs), out_specs=x_spec)
    return mapped(x, *args)


def wants_local(layout: tuple[Any, tuple[Any, ...]] | None, axes: tuple[int, ...], pallas: bool) -> bool:
    """Whether to run under :func:`run_local`: a normalized axis is sharded, or a Pallas
    kernel (which XLA cannot partition) would otherwise see the global array."""
    if layout is None:
        return False
    return bool(hidden_axis_names(layout[1], axes)) or pallas
