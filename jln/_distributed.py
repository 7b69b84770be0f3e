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
values, never an all-gather of the activation), and the Pallas kernels carry their own
``custom_partitioning`` rule (:mod:`jln.kernels._partition`: split rows stay local, a split
normalized axis is all-gathered).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
from jax.sharding import AxisType, NamedSharding, PartitionSpec

Array = jax.Array

#: Why a kernel does not take a call whose statistics span devices (said by every kernel family).
CROSS_DEVICE_REASON = (
    "statistics across devices (axis_name=, or a normalized axis of x split over mesh axes) run on "
    "the XLA path only"
)


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

    # Only the rows split (hidden None) means a Pallas kernel: its pallas_call declares no
    # varying-manual-axes types, so it runs with check_vma=False; shard_map's transpose still
    # sums the parameters' cotangents over the row axes they are replicated on.
    mapped = jax.shard_map(local, mesh=mesh, in_specs=(x_spec, *specs), out_specs=x_spec, check_vma=hidden is not None)
    return mapped(x, *args)


def wants_local(layout: tuple[Any, tuple[Any, ...]] | None, axes: tuple[int, ...], pallas: bool) -> bool:
    """Whether to run under :func:`run_local`: a normalized axis is sharded, or a Pallas
    kernel (which XLA cannot partition) would otherwise see the global array."""
    if layout is None:
        return False
    return bool(hidden_axis_names(layout[1], axes)) or pallas


def shard_chunks(a: Any, num_chunks: int, num_shards: int, *, axis: int = -1, inverse: bool = False) -> Array:
    """Reorder a chunked axis so that an even split gives each device its block of every chunk.

    A projection whose output is ``k`` chunks of ``d`` features (adaLN's ``(shift, scale,
    ...)``) lays its axis out chunk-major: ``[c_0 | c_1 | ... | c_{k-1}]``, each ``c_j`` of
    size ``d``. When ``x``'s feature axis is split over ``num_shards`` devices (tensor
    parallelism), device ``i`` needs block ``i`` (size ``d / num_shards``) of every chunk, in
    chunk order. This returns the device-major layout
    ``[c_0[blk 0], ..., c_{k-1}[blk 0], c_0[blk 1], ...]``, so that sharding the result evenly
    along ``axis`` (``PartitionSpec(..., axis_name)``) hands each device exactly its local
    ``[k * d / num_shards]`` projection. ``inverse=True`` undoes it.

    Args:
      a: array whose ``axis`` has ``num_chunks * d`` entries (a Dense kernel ``[c, k*d]``,
        its bias ``[k*d]``, or a projected condition).
      num_chunks: k, the number of chunks (2 for seed/continuous, 6 for DiT, 3 for single).
      num_shards: the number of devices the feature axis is split over.
      axis: the chunked axis (default: the last).
      inverse: map the device-major layout back to the chunk-major one.

    Returns:
      An array of ``a``'s shape and dtype with ``axis`` permuted.

    Raises:
      ValueError: ``axis`` is not divisible by ``num_chunks * num_shards``, or a count is
        not a positive integer.

    Example:
      >>> import jax.numpy as jnp
      >>> import jln
      >>> jln.shard_chunks(jnp.arange(8), 2, 2).tolist()  # chunks [0 1 2 3], [4 5 6 7]
      [0, 1, 4, 5, 2, 3, 6, 7]
    """
    import jax.numpy as jnp

    fn = "jln.shard_chunks"
    for name, v in (("num_chunks", num_chunks), ("num_shards", num_shards)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{fn}: `{name}` must be a positive int; received {v!r}.")
    a = jnp.asarray(a)
    if a.ndim == 0 or not -a.ndim <= axis < a.ndim:
        raise ValueError(f"{fn}: `axis`={axis} is out of range for an array of shape {a.shape}.")
    ax = axis % a.ndim
    size = a.shape[ax]
    if size % (num_chunks * num_shards):
        raise ValueError(
            f"{fn}: axis {axis} has {size} entries, not divisible by num_chunks * num_shards = "
            f"{num_chunks} * {num_shards}; each of the {num_chunks} chunks must split evenly into "
            f"{num_shards} device blocks."
        )
    block = size // (num_chunks * num_shards)
    outer, inner = (num_shards, num_chunks) if inverse else (num_chunks, num_shards)

    def permute(v: Array) -> Array:
        v = v.reshape(v.shape[:ax] + (outer, inner, block) + v.shape[ax + 1 :])
        return jnp.swapaxes(v, ax, ax + 1).reshape(a.shape)

    layout = explicit_layout(a)
    if layout is None:
        return permute(a)
    # sharded over explicit mesh axes (a sharded kernel, or its gradient): the reshapes have no
    # sharding of their own to take there, so they run with the axes left to XLA and the result
    # keeps a's sharding
    mesh, entries = layout
    return jax.sharding.auto_axes(permute, out_sharding=NamedSharding(mesh, PartitionSpec(*entries)))(a)
