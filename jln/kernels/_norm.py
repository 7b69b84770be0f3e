"""The Pallas forward and backward kernels.

Layout: ``x`` is viewed as ``[rows, n]`` (the normalized axes are trailing and contiguous) and
each forward program owns one block of ``block_rows`` rows (see :mod:`jln.kernels._plan`). Each
backward program walks a chunk of such blocks (``plan.chunk`` rows; on GPUs about
``GPU_BWD_PROGRAMS`` programs in all) and sums its parameter-gradient partials in float32
registers, so it writes one partial row per program, not per block. Per-feature
parameters arrive as ``[1, 1, n]``, per-example conditions (DiT's ``shift[:, None]``) as
``[groups, 1, n]`` with each block inside one group, and conditions with ``x``'s own shape as
``[rows, n]``. Rows of at least ``_plan.WIDE_FROM`` elements take the wide path (see "wide
rows" below): the same blocks, read in column chunks inside each program.

Numerics: the statistics restate :func:`jln._stats.centered`, :func:`jln._stats.inv_std` and
:func:`jln._stats.mean_square` with column masking (the only place the kernels restate a core
formula; tests compare them with the XLA path): :func:`_ln_centered_stats` on whole rows and
:func:`_wide_ln_stats` over column chunks (a change to LayerNorm's centred statistics goes in
both), the sums of squares inline. Everything after the statistics is the family
spec's own ``tail`` (and the seed convention's ``seed_denominator``) from :mod:`jln._contract`,
run through :func:`jln.kernels._portable.portable`, and
the backward takes their cotangents with ``jax.vjp`` inside the kernel, so no convention's
rounding is written twice.

Residuals: reverse mode keeps ``x`` (own dtype), per-row float32 statistics (the row mean
rounded to one float, as the core saves it, and rstd; the seed convention's clamped
denominator) and the parameters, the same budget as the XLA path.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

from jln._contract import NormSpec, add_in
from jln.kernels import _ad
from jln.kernels._plan import Plan, group_block_ok, make_plan
from jln.kernels._portable import portable

Array = jax.Array
F32 = jnp.float32

#: Operand kinds: one row of parameters for all rows, one row per group of ``t`` rows, or
#: one row per row of ``x``.
PARAM, GROUP, ROW = "param", "group", "row"


@dataclasses.dataclass(frozen=True)
class Spec:
    """Everything static about one kernel call (hashable: it is a ``nondiff_argnum``)."""

    family: NormSpec  # the contract on the kernel layout (normalized over the last axis)
    plan: Plan
    names: tuple[str, ...]  # which optional operands are present, in slot order
    kinds: tuple[tuple[str, int], ...]  # (kind, rows per group) per present operand (see localize)
    # fused residual add: (s dtype, x dtype, residual dtype); the kernel reads x and the
    # residual, writes s = x + residual and normalizes s (the backward adds ds to ds's
    # cotangent from the norm)
    add: tuple[Any, Any, Any] | None = None

    @property
    def op(self) -> str:
        """The statistics the kernels compute: ``"ln"`` (centred) or ``"rms"``."""
        return "ln" if self.family.centered else "rms"

    @property
    def eps(self) -> float:
        return self.family.eps

    @property
    def seed(self) -> bool:
        """The seed RMSNorm convention: a clamped denominator instead of rstd."""
        return getattr(self.family, "convention", None) == "seed"

    @property
    def n_stats(self) -> int:
        """Per-row statistics the forward saves: LayerNorm's mean and rstd, RMSNorm's rstd."""
        return 2 if self.op == "ln" else 1

    @property
    def pre(self) -> bool:
        """Whether the family computes a row from ``x`` and its operands before the statistics
        (:meth:`jln._contract.NormSpec.pre`: gated RMSNorm's gate first)."""
        return self.family.has_pre(self.names)

    @property
    def n_x(self) -> int:
        """Inputs laid out like ``x``: ``x`` (and the residual, with a fused add)."""
        return 1 if self.add is None else 2


# ----------------------------------------------------------------------------- memory access


def _masks(plan: Plan, first_row: Any = None) -> tuple[Array, Array | None]:
    """``(rows_ok [br, 1], cols_ok [1, W] or None)`` for the block of ``block_rows`` rows that
    starts at row ``first_row`` (default: this program's forward block)."""
    br = plan.block_rows
    if first_row is None:
        first_row = pl.program_id(0) * br
    rows = first_row + lax.broadcasted_iota(jnp.int32, (br, 1), 0)
    cols = None
    if plan.masked_columns:
        cols = lax.broadcasted_iota(jnp.int32, (1, plan.width), 1) < plan.n
    return rows < plan.rows, cols


def _and(a: Array | None, b: Array | None) -> Array | None:
    if a is None or b is None:
        return a if b is None else b
    return a & b


def _load(plan: Plan, ref: Any, mask: Array | None) -> Array:
    """Read a block, zero where ``mask`` is false (padding columns, rows past the end)."""
    shape = ref.shape
    if plan.target == "gpu" and mask is not None:
        from jax.experimental.pallas import triton as plt

        zero = jnp.zeros((), ref.dtype)
        return plt.load(ref, mask=jnp.broadcast_to(mask, shape), other=zero)
    v = ref[...]
    if mask is not None:  # TPU: a partial last block holds unspecified rows
        v = jnp.where(jnp.broadcast_to(mask, shape), v, jnp.zeros((), v.dtype))
    return v


def _store(plan: Plan, ref: Any, v: Array, mask: Array | None) -> None:
    v = v.astype(ref.dtype)
    if plan.target == "gpu" and mask is not None:
        from jax.experimental.pallas import triton as plt

        plt.store(ref, v, mask=jnp.broadcast_to(mask, ref.shape))
    else:  # TPU's pipeline drops the rows of a partial last block itself
        ref[...] = v


def _zero_outside(mask: Array | None, v: Array) -> Array:
    return v if mask is None else jnp.where(mask, v, jnp.zeros((), v.dtype))


def _row_sum(v: Array) -> Array:
    return jnp.sum(v, axis=1, keepdims=True)


def _load_operands(spec: Spec, refs: Any, rows_ok: Array, cols_ok: Array | None) -> list[Array]:
    """Present operands as float32 blocks: ``[1, W]`` for param/group, ``[br, W]`` for row."""
    out = []
    for ref, (kind, _) in zip(refs, spec.kinds, strict=True):
        mask = _and(rows_ok, cols_ok) if kind == ROW else cols_ok
        out.append(_load(spec.plan, ref, mask).astype(F32))
    return out


# ----------------------------------------------------------------------------- statistics


def _first_column(plan: Plan, ref: Any, x: Array, rows_ok: Array, rows: Any = None) -> Array:
    """Each row's first element as float32 ``[br, 1]``: the pivot of :func:`jln._stats._pivot`.

    Triton tiles cannot be sliced, and a masked row sum would cost one more cross-warp
    reduction per row, so on GPUs the column is read again from ``ref`` (a cached line); on
    TPUs the loaded block is sliced. ``rows`` selects the block's rows of ``ref`` (one
    indexer: Triton refs take no chained ``.at``)."""
    if plan.target == "gpu":
        return _load(plan, ref.at[slice(None) if rows is None else rows, pl.ds(0, 1)], rows_ok).astype(F32)
    return x[:, :1]


def _ln_centered_stats(
    x: Array, pivot: Array, cols_ok: Array | None, n: int
) -> tuple[Array, Array, Array]:
    """``(hi, d, var)`` over the ``n`` valid columns: mirrors :func:`jln._stats.centered`.

    ``hi = pivot + mean(x - pivot)`` is the row mean rounded to one float (what the core saves
    as ``jln.mean``), then :func:`_ln_about` gives ``d = (x - hi) - c`` and
    ``var = mean((x - hi)^2) - c^2`` with ``c = mean(x - hi)``.
    """
    hi = pivot + _row_sum(_zero_outside(cols_ok, x - pivot)) / n
    d, sq, c = _ln_about(x, hi, cols_ok, n)
    return hi, d, jnp.maximum(sq - c * c, 0.0)


def _ln_about(x: Array, hi: Array, cols_ok: Array | None, n: int) -> tuple[Array, Array, Array]:
    """``(d, mean(e^2), c)`` for ``e = x - hi`` (zero outside the valid columns) and its row
    mean ``c``: the centred row ``d = e - c`` (mirrors :func:`jln._stats._about`; the backward
    recomputes ``c`` from ``x`` and the saved ``hi``)."""
    e = _zero_outside(cols_ok, x - hi)
    c = _row_sum(e) / n
    return _zero_outside(cols_ok, e - c), _row_sum(e * e) / n, c


def _rstd(var: Array, eps: float) -> Array:
    return lax.rsqrt(var + eps)  # mirrors jln._stats.inv_std (same value; its JVP rule is not needed here)


# ----------------------------------------------------------------------------- the core's tails


def _slots(spec: Spec, ops: tuple[Array, ...]) -> list[Any]:
    """The family's operand slots in order: the present operands, ``None`` for the absent."""
    got = dict(zip(spec.names, ops, strict=True))
    return [got.get(name) for name in spec.family.operands]


def _tail(spec: Spec) -> Any:
    """The contract's epilogue after the statistics, taking ``(y, *present_operands)``."""

    def tail(y: Array, *ops: Array) -> Array:
        return spec.family.tail(y, *_slots(spec, ops))

    return portable(tail)


def _pre(spec: Spec) -> Any:
    """The contract's step before the statistics, taking ``(x, *present_operands)``."""

    def pre(x: Array, *ops: Array) -> Array:
        return spec.family.pre(x, *_slots(spec, ops))

    return portable(pre)


def _seed_denominator(spec: Spec, sum_sq: Array) -> Array:
    return portable(functools.partial(spec.family.seed_denominator, n=spec.plan.n))(sum_sq)  # type: ignore[attr-defined]


# ----------------------------------------------------------------------------- kernels


def _round(v: Array, dtype: Any) -> Array:
    """``v`` rounded to ``dtype`` and widened back (inside a kernel a cast round trip is kept)."""
    return v if jnp.dtype(dtype).itemsize >= 4 else v.astype(dtype).astype(F32)


def _fwd_kernel(spec: Spec, *refs: Any) -> None:
    plan, k, nx = spec.plan, len(spec.kinds), spec.n_x
    x_refs, op_refs, out_refs = refs[:nx], refs[nx : nx + k], refs[nx + k :]
    rows_ok, cols_ok = _masks(plan)
    # GPU: rows past the end must not be read; TPU: their (unspecified) values are never stored
    mask = _and(rows_ok, cols_ok) if plan.target == "gpu" else None
    x = _load(plan, x_refs[0], mask).astype(F32)
    pivot = _first_column(plan, x_refs[0], x, rows_ok) if spec.op == "ln" else None
    if spec.add is not None:  # s = x + residual, rounded to s's dtype as the XLA path's add
        s_dtype = spec.add[0]
        r = _load(plan, x_refs[1], mask).astype(F32)
        x = _round(x + r, s_dtype)
        if pivot is not None:
            pivot = _round(pivot + _first_column(plan, x_refs[1], r, rows_ok), s_dtype)
        s_ref, out_refs = out_refs[1], (out_refs[0], *out_refs[2:])
        _store(plan, s_ref, x, _and(rows_ok, cols_ok))
    ops = _load_operands(spec, op_refs, rows_ok, cols_ok)
    if spec.op == "ln":
        assert pivot is not None
        m, d, var = _ln_centered_stats(x, pivot, cols_ok, plan.n)
        rstd = _rstd(var, spec.eps)
        y = _tail(spec)(d * rstd, *ops)
        y_ref, m_ref, rstd_ref = out_refs
        _store(plan, m_ref, m, rows_ok)
    else:
        if spec.pre:  # (gated RMSNorm, the gate first: the gated row's statistics)
            x = _pre(spec)(x, *ops)
        sum_sq = _row_sum(x * x)
        if spec.seed:
            rstd = _seed_denominator(spec, sum_sq)  # the clamped denominator, saved as is
            h = x / rstd
        else:
            rstd = _rstd(sum_sq / plan.n, spec.eps)  # mirrors jln._stats.mean_square
            h = x * rstd
        y = _tail(spec)(h, *ops)
        y_ref, rstd_ref = out_refs
    _store(plan, y_ref, y, _and(rows_ok, cols_ok))
    _store(plan, rstd_ref, rstd, rows_ok)


def _bwd_block(spec: Spec, refs: Any, r0: Any, first_row: Any) -> list[Array | None]:
    """The backward of the ``block_rows`` rows at offset ``r0`` of this program's chunk: stores
    dx (and per-row operand cotangents), returns the partial sums of the broadcast operands'
    cotangents (``[1, W]`` float32; ``None`` for per-row operands)."""
    plan, k = spec.plan, len(spec.kinds)
    n_stats = spec.n_stats
    n_in = 2 if spec.add is None else 3  # x (s with a fused add), dy (and ds)
    br = plan.block_rows
    rows = None if plan.chunk == br else pl.ds(r0, br)

    def at(ref: Any) -> Any:  # this block's rows of a per-row ref
        return ref if rows is None else ref.at[rows, :]

    x_ref, dy_ref = at(refs[0]), at(refs[1])
    stat_refs = [at(r) for r in refs[n_in : n_in + n_stats]]
    op_refs = [at(r) if kind == ROW else r for r, (kind, _) in zip(refs[n_in + n_stats : n_in + n_stats + k], spec.kinds, strict=True)]
    dx_ref, dop_refs = at(refs[n_in + n_stats + k]), refs[n_in + 1 + n_stats + k :]
    rows_ok, cols_ok = _masks(plan, first_row)
    valid = _and(rows_ok, cols_ok)
    # rows past the end are zeroed (x, dy, statistics), so they add nothing to the partials
    x = _load(plan, x_ref, valid).astype(F32)
    dy = _load(plan, dy_ref, valid)
    ops = _load_operands(spec, op_refs, rows_ok, cols_ok)
    pre_vjp = None
    if spec.pre:
        x, pre_vjp = jax.vjp(_pre(spec), x, *ops)
    seed = spec.op == "rms" and spec.seed
    stats = [_load(plan, r, rows_ok) for r in stat_refs]
    if spec.op == "ln":
        hi, rstd = stats
        d, _, _ = _ln_about(x, hi, cols_ok, plan.n)  # (its unused row sum of squares is dropped)
        xhat = d * rstd
    elif seed:
        (denom,) = stats
        denom = jnp.where(rows_ok, denom, 1.0)
        xhat = x / denom
    else:
        (rstd,) = stats
        xhat = x * rstd
    _, vjp = jax.vjp(_tail(spec), xhat, *ops)
    g, *dops = vjp(dy)
    # d xhat / d x, the derivative of the core's statistics (the XLA path's rule, jln._stats._normalized):
    # LN:  rstd * (g - mean(g) - xhat * mean(g * xhat));  RMS: rstd * (g - xhat * mean(g * xhat))
    g = _zero_outside(cols_ok, g)
    proj = xhat * (_row_sum(g * xhat) / plan.n)
    if spec.op == "ln":
        dx = rstd * (g - _row_sum(g) / plan.n - proj)
    elif seed:  # a clamped row's denominator is the constant eps
        dx = jnp.where(denom > spec.eps, g - proj, g) / denom
    else:
        dx = rstd * (g - proj)
    if pre_vjp is not None:  # through the step before the statistics, to x and its operands
        dx, *d_pre = pre_vjp(dx)
        dops = [a + b for a, b in zip(dops, d_pre, strict=True)]
    if spec.add is not None:  # s's cotangent: the norm's, rounded to s's dtype, plus ds
        dx = _round(dx, spec.add[0]) + _load(plan, at(refs[2]), valid).astype(F32)
    _store(plan, dx_ref, dx, valid)
    partials: list[Array | None] = []
    for ref, dop, (kind, _) in zip(dop_refs, dops, spec.kinds, strict=True):
        if kind == ROW:
            _store(plan, at(ref), dop, valid)
            partials.append(None)
        else:
            partials.append(dop.astype(F32))
    return partials


def _bwd_kernel(spec: Spec, *refs: Any) -> None:
    """One program's chunk of rows (``plan.chunk``, a multiple of ``block_rows``): the blocks
    are walked in a loop and the broadcast operands' cotangents summed in float32 registers,
    then written once as this program's partial (a ``[1, W]`` row per operand)."""
    plan = spec.plan
    br, steps = plan.block_rows, plan.chunk // plan.block_rows
    first = pl.program_id(0) * plan.chunk
    dop_refs = refs[len(refs) - len(spec.kinds) :]
    partials: list[Array | None]
    if steps == 1:
        partials = _bwd_block(spec, refs, 0, first)
    else:
        init = tuple(jnp.zeros((1, plan.width), F32) for kind, _ in spec.kinds if kind != ROW)

        def step(j: Any, acc: tuple[Array, ...]) -> tuple[Array, ...]:
            r0 = pl.multiple_of(j * br, br)
            parts = [p for p in _bwd_block(spec, refs, r0, first + r0) if p is not None]
            return tuple(a + p for a, p in zip(acc, parts, strict=True))

        summed = iter(lax.fori_loop(0, steps, step, init))
        partials = [None if kind == ROW else next(summed) for kind, _ in spec.kinds]
    _, cols_ok = _masks(plan, first)
    for ref, part in zip(dop_refs, partials, strict=True):
        if part is not None:
            _store(plan, ref, part, cols_ok)


# ----------------------------------------------------------------------------- wide rows
#
# Rows of at least ``_plan.WIDE_FROM`` elements: a program owns a block of rows as above, but
# reads it in column chunks of ``plan.col_chunk`` inside a loop, so no value spans a whole row.
# Forward: the statistics take one pass over the chunks per row sum (LayerNorm: the mean about
# the pivot, then the residual mean and sum of squares about it; RMSNorm: the sum of squares),
# then one pass normalizes each chunk and stores it. Backward: (LayerNorm: one pass for the
# residual mean,) one pass sums the two row reductions of the normalized row's derivative, a
# second stores dx chunk by chunk and writes this program's
# partial sums of the broadcast operands' cotangents, one chunk at a time. The chunks are
# re-read from memory in each pass (a fused add re-reads x and the residual). Numerics: the
# same float32 formulas as the one-tile kernels, summed chunk by chunk.


def _col_mask(plan: Plan, c0: Any, size: int) -> Array | None:
    """Valid columns ``[1, size]`` of the chunk at ``c0`` (GPU, when the width is not a
    multiple of the chunk); None where every column is valid (TPU slices are exact)."""
    if plan.target != "gpu" or plan.n % size == 0:
        return None
    return c0 + lax.broadcasted_iota(jnp.int32, (1, size), 1) < plan.n


def _over_chunks(plan: Plan, body: Any, init: Any) -> Any:
    """``body(c0, size, cols_ok, carry) -> carry`` over the row's column chunks. GPU: a loop
    over power-of-two chunks at dynamic offsets, the last masked; TPU: the chunks unrolled at
    static offsets (Mosaic slices a VMEM block statically), the last one shorter."""
    c = plan.col_chunk
    if plan.target == "gpu":

        def step(j: Any, carry: Any) -> Any:
            c0 = pl.multiple_of(j * c, c)
            return body(c0, c, _col_mask(plan, c0, c), carry)

        return lax.fori_loop(0, plan.num_col_chunks, step, init)
    carry = init
    for c0 in range(0, plan.n, c):
        carry = body(c0, min(c, plan.n - c0), None, carry)
    return carry


def _chunk(plan: Plan, ref: Any, c0: Any, size: int, mask: Array | None) -> Array:
    """The chunk ``[:, c0:c0+size]`` of a block, zero where ``mask`` is false."""
    return _load(plan, ref.at[:, pl.ds(c0, size)], mask)


def _put(plan: Plan, ref: Any, c0: Any, size: int, v: Array, mask: Array | None) -> None:
    _store(plan, ref.at[:, pl.ds(c0, size)], v, mask)


def _wide_input(spec: Spec, x_refs: Any, c0: Any, size: int, mask: Array | None) -> Array:
    """The normalized input's chunk as float32: ``x``, or with a fused add ``s = x + residual``
    rounded to ``s``'s dtype as the XLA path's add."""
    plan = spec.plan
    x = _chunk(plan, x_refs[0], c0, size, mask).astype(F32)
    if spec.add is not None:
        x = _round(x + _chunk(plan, x_refs[1], c0, size, mask).astype(F32), spec.add[0])
    return x


def _wide_pivot(spec: Spec, x_refs: Any, rows_ok: Array) -> Array:
    """Each row's pivot ``[br, 1]``: its first element, of ``s = x + residual`` when
    ``x_refs`` holds both (the forward of a fused add), else of ``x_refs[0]``."""
    plan = spec.plan
    if len(x_refs) == 1:
        spec = dataclasses.replace(spec, add=None)  # the backward reads s itself
    if plan.target == "gpu":
        return _wide_input(spec, x_refs, 0, 1, rows_ok)
    # TPU: zero on the unspecified rows of a partial last block, as the backward's other loads,
    # so that they add nothing to the partial sums
    return _wide_input(spec, x_refs, 0, min(plan.col_chunk, plan.n), rows_ok)[:, :1]


def _wide_operands(spec: Spec, refs: Any, c0: Any, size: int, rows_ok: Array, cols_ok: Array | None) -> list[Array]:
    out = []
    for ref, (kind, _) in zip(refs, spec.kinds, strict=True):
        mask = _and(rows_ok, cols_ok) if kind == ROW else cols_ok
        out.append(_chunk(spec.plan, ref, c0, size, mask).astype(F32))
    return out


def _wide_ln_stats(spec: Spec, x_refs: Any, pivot: Array, rows_ok: Array) -> tuple[Array, Array, Array]:
    """LayerNorm's ``(hi, c, var)`` over column chunks: :func:`_ln_centered_stats` summed chunk
    by chunk. ``hi = pivot + mean(x - pivot)`` is the row mean rounded to one float (saved, as
    on whole rows); a second pass over ``e = x - hi`` gives its mean ``c`` and
    ``var = mean(e^2) - c^2``; the centred row is ``e - c``."""
    plan = spec.plan
    mask0 = rows_ok if plan.target == "gpu" else None
    zero = jnp.zeros((plan.block_rows, 1), F32)

    def mean_step(c0: Any, size: int, cols: Array | None, acc: Array) -> Array:
        x = _wide_input(spec, x_refs, c0, size, _and(mask0, cols))
        return acc + _row_sum(_zero_outside(cols, x - pivot))

    hi = pivot + _over_chunks(plan, mean_step, zero) / plan.n
    c, sq = _wide_about(spec, x_refs, hi, rows_ok)
    return hi, c, jnp.maximum(sq - c * c, 0.0)


def _wide_about(spec: Spec, x_refs: Any, hi: Array, rows_ok: Array) -> tuple[Array, Array]:
    """``(mean(e), mean(e^2))`` over column chunks for ``e = x - hi``: :func:`_ln_about`'s row
    sums (the backward recomputes ``c`` from ``x`` and the saved ``hi``)."""
    plan = spec.plan
    if len(x_refs) == 1:
        spec = dataclasses.replace(spec, add=None)  # the backward reads s itself
    zero = jnp.zeros((plan.block_rows, 1), F32)

    # rows past the end read as zero on every target: the backward's partial sums take c
    def step(c0: Any, size: int, cols: Array | None, acc: tuple[Array, Array]) -> tuple[Array, Array]:
        x = _wide_input(spec, x_refs, c0, size, _and(rows_ok, cols))
        e = _zero_outside(cols, x - hi)
        return acc[0] + _row_sum(e), acc[1] + _row_sum(e * e)

    se, sq = _over_chunks(plan, step, (zero, zero))
    return se / plan.n, sq / plan.n


def _wide_fwd_kernel(spec: Spec, *refs: Any) -> None:
    plan, k, nx = spec.plan, len(spec.kinds), spec.n_x
    x_refs, op_refs, out_refs = refs[:nx], refs[nx : nx + k], refs[nx + k :]
    rows_ok, _ = _masks(plan)
    gpu = plan.target == "gpu"
    s_ref = None
    if spec.add is not None:
        s_ref, out_refs = out_refs[1], (out_refs[0], *out_refs[2:])
    zero = jnp.zeros((plan.block_rows, 1), F32)

    def read(c0: Any, size: int, cols: Array | None) -> tuple[Array, list[Array]]:
        """The chunk of the row the statistics are taken of, and the operands' chunks."""
        x = _wide_input(spec, x_refs, c0, size, _and(rows_ok, cols) if gpu else None)
        ops = _wide_operands(spec, op_refs, c0, size, rows_ok, cols)
        return (_pre(spec)(x, *ops) if spec.pre else x), ops

    m = c = None
    if spec.op == "ln":
        m, c, var = _wide_ln_stats(spec, x_refs, _wide_pivot(spec, x_refs, rows_ok), rows_ok)
        rstd = _rstd(var, spec.eps)
        y_ref, m_ref, rstd_ref = out_refs
        _store(plan, m_ref, m, rows_ok)
    else:

        def sq_step(c0: Any, size: int, cols: Array | None, acc: Array) -> Array:
            x, _ = read(c0, size, cols)
            return acc + _row_sum(x * x)

        sum_sq = _over_chunks(plan, sq_step, zero)
        rstd = _seed_denominator(spec, sum_sq) if spec.seed else _rstd(sum_sq / plan.n, spec.eps)
        y_ref, rstd_ref = out_refs

    def apply_step(c0: Any, size: int, cols: Array | None, carry: Any) -> Any:
        x, ops = read(c0, size, cols)
        valid = _and(rows_ok, cols)
        if s_ref is not None:  # s is written here, once, in the pass that writes y
            _put(plan, s_ref, c0, size, x, valid)
        if m is not None and c is not None:  # (x - hi) - c, as on whole rows
            h = _zero_outside(cols, (x - m) - c) * rstd
        else:
            h = x / rstd if spec.seed else x * rstd
        _put(plan, y_ref, c0, size, _tail(spec)(h, *ops), valid)
        return carry

    _over_chunks(plan, apply_step, jnp.zeros((), jnp.int32))
    _store(plan, rstd_ref, rstd, rows_ok)


def _wide_bwd_kernel(spec: Spec, *refs: Any) -> None:
    """One block of rows (``plan.chunk == block_rows``): the row reductions over the chunks,
    then dx and the operand cotangents chunk by chunk; the broadcast operands' partial sums of
    this block are written to this program's partial row, one chunk at a time."""
    plan, k = spec.plan, len(spec.kinds)
    n_stats = spec.n_stats
    n_in = 2 if spec.add is None else 3
    x_ref, dy_ref = refs[0], refs[1]
    stat_refs = refs[n_in : n_in + n_stats]
    op_refs = refs[n_in + n_stats : n_in + n_stats + k]
    dx_ref, dop_refs = refs[n_in + n_stats + k], refs[n_in + 1 + n_stats + k :]
    rows_ok, _ = _masks(plan)
    seed = spec.op == "rms" and spec.seed
    stats = [_load(plan, r, rows_ok) for r in stat_refs]
    c = _wide_about(spec, (x_ref,), stats[0], rows_ok)[0] if spec.op == "ln" else None
    if seed:
        stats = [jnp.where(rows_ok, stats[0], 1.0)]
    zero = jnp.zeros((plan.block_rows, 1), F32)

    def local(c0: Any, size: int, cols: Array | None) -> tuple[Any, ...]:
        """This chunk's xhat, the tail's cotangents (g, *d_ops), the mask of valid values and the
        pullback of the step before the statistics (``None`` without one)."""
        valid = _and(rows_ok, cols)
        x = _chunk(plan, x_ref, c0, size, valid).astype(F32)
        dy = _chunk(plan, dy_ref, c0, size, valid)
        ops = _wide_operands(spec, op_refs, c0, size, rows_ok, cols)
        pre_vjp = None
        if spec.pre:
            x, pre_vjp = jax.vjp(_pre(spec), x, *ops)
        if c is not None:
            hi, rstd = stats
            xhat = _zero_outside(cols, (x - hi - c) * rstd)
        else:
            xhat = x / stats[0] if seed else x * stats[0]
        _, vjp = jax.vjp(_tail(spec), xhat, *ops)
        g, *dops = vjp(dy)
        return xhat, _zero_outside(cols, g), dops, valid, pre_vjp

    def sums_step(c0: Any, size: int, cols: Array | None, acc: tuple[Array, Array]) -> tuple[Array, Array]:
        xhat, g, _, _, _ = local(c0, size, cols)
        return acc[0] + _row_sum(g), acc[1] + _row_sum(g * xhat)

    sum_g, sum_gx = _over_chunks(plan, sums_step, (zero, zero))
    mean_g, mean_gx = sum_g / plan.n, sum_gx / plan.n

    def dx_step(c0: Any, size: int, cols: Array | None, carry: Any) -> Any:
        xhat, g, dops, valid, pre_vjp = local(c0, size, cols)
        proj = xhat * mean_gx
        if c is not None:
            dx = stats[1] * (g - mean_g - proj)
        elif seed:  # a clamped row's denominator is the constant eps
            denom = stats[0]
            dx = jnp.where(denom > spec.eps, g - proj, g) / denom
        else:
            dx = stats[0] * (g - proj)
        if pre_vjp is not None:
            dx, *d_pre = pre_vjp(dx)
            dops = [a + b for a, b in zip(dops, d_pre, strict=True)]
        if spec.add is not None:
            dx = _round(dx, spec.add[0]) + _chunk(plan, refs[2], c0, size, valid).astype(F32)
        _put(plan, dx_ref, c0, size, dx, valid)
        for ref, dop, (kind, _) in zip(dop_refs, dops, spec.kinds, strict=True):
            _put(plan, ref, c0, size, dop if kind == ROW else dop.astype(F32), valid if kind == ROW else cols)
        return carry

    _over_chunks(plan, dx_step, jnp.zeros((), jnp.int32))


# ----------------------------------------------------------------------------- pallas_call


def _row_spec(plan: Plan, rows: int = 0) -> pl.BlockSpec:
    """Blocks of ``rows`` rows (default ``block_rows``; the backward passes ``plan.chunk``)."""
    return pl.BlockSpec((rows or plan.block_rows, plan.width), lambda i: (i, 0))


def _stat_spec(plan: Plan, rows: int = 0) -> pl.BlockSpec:
    return pl.BlockSpec((rows or plan.block_rows, 1), lambda i: (i, 0))


def _operand_spec(plan: Plan, kind: str, t: int, rows: int = 0) -> pl.BlockSpec:
    if kind == ROW:
        return _row_spec(plan, rows)
    if kind == PARAM:  # one row of parameters, read by every program
        return pl.BlockSpec((None, 1, plan.width), lambda i: (0, 0, 0))
    br = rows or plan.block_rows
    return pl.BlockSpec((None, 1, plan.width), lambda i: ((i * br) // t, 0, 0))


def _partial_spec(plan: Plan) -> pl.BlockSpec:
    return pl.BlockSpec((None, 1, plan.width), lambda i: (i, 0, 0))


def _check_blocks(bs: pl.BlockSpec, shape: tuple[int, ...], grid: int, where: str) -> None:
    """Trace-time guard: every program's block starts inside its array.

    Interpret mode (and Mosaic) clamp an out-of-range block index, so a wrong index map still
    computes the right numbers there, while a GPU reads past the array's end. The index maps
    are affine in the program id, so checking the first and the last program covers them all.
    """
    index_map: Any = bs.index_map
    block_shape: Any = bs.block_shape
    for i in {0, grid - 1}:
        idx = index_map(i)
        for d, (b, blk, size) in enumerate(zip(idx, block_shape, shape, strict=True)):
            start = int(b) * (1 if blk is None else int(blk))
            if not 0 <= start < max(size, 1):
                raise AssertionError(
                    f"jln kernel {where}: program {i} of {grid} reads block {tuple(idx)} of shape "
                    f"{bs.block_shape}, past the array's {shape} (axis {d}); a wrong index map"
                )


def _pallas(
    spec: Spec, kernel: Any, grid: int, in_specs: list[Any], out_specs: list[Any], out_shape: list[Any],
    in_shapes: list[Any],
) -> Any:
    plan = spec.plan
    kwargs: dict[str, Any] = {}
    if plan.interpret:
        kwargs["interpret"] = True
    elif plan.target == "gpu":
        from jax.experimental.pallas import triton as plt

        kwargs["compiler_params"] = plt.CompilerParams(num_warps=plan.num_warps, num_stages=1)
    else:
        from jax.experimental.pallas import tpu as pltpu

        kwargs["compiler_params"] = pltpu.CompilerParams(dimension_semantics=("parallel",))
    for bs, sd in zip(in_specs + out_specs, in_shapes + out_shape, strict=True):
        _check_blocks(bs, sd.shape, grid, kernel.__name__)
    return pl.pallas_call(
        functools.partial(kernel, spec),
        grid=(grid,),
        in_specs=in_specs,
        out_specs=out_specs,
        out_shape=out_shape,
        name=f"jln_{spec.op}_{kernel.__name__.strip('_')}",
        **kwargs,
    )


def _forward(spec: Spec, xs: tuple[Array, ...], ops: tuple[Array, ...]) -> tuple[Array, ...]:
    plan = spec.plan
    n_stats = spec.n_stats
    stat = jax.ShapeDtypeStruct((plan.rows, 1), F32)
    x_like = [jax.ShapeDtypeStruct((plan.rows, plan.n), spec.family.result_dtype)]
    if spec.add is not None:
        x_like.append(jax.ShapeDtypeStruct((plan.rows, plan.n), spec.add[0]))
    outs = _pallas(
        spec,
        _wide_fwd_kernel if plan.wide else _fwd_kernel,
        plan.num_blocks,
        [_row_spec(plan)] * len(xs) + [_operand_spec(plan, kd, t) for kd, t in spec.kinds],
        [_row_spec(plan)] * len(x_like) + [_stat_spec(plan)] * n_stats,
        x_like + [stat] * n_stats,
        [*xs, *ops],
    )(*xs, *ops)
    return tuple(outs)


def _backward(
    spec: Spec, x: Array, stats: list[Array], ops: tuple[Array, ...], dy: Array, cast_params: bool = True,
    ds: Array | None = None,
) -> tuple[Array, ...]:
    plan = spec.plan
    c = plan.chunk
    dys = [x, dy] + ([] if ds is None else [ds])
    partial = jax.ShapeDtypeStruct((plan.num_chunks, 1, plan.n), F32)
    out_shape = [jax.ShapeDtypeStruct(x.shape, x.dtype)]
    out_specs = [_row_spec(plan, c)]
    for op, (kind, _) in zip(ops, spec.kinds, strict=True):
        out_shape.append(jax.ShapeDtypeStruct(op.shape, op.dtype) if kind == ROW else partial)
        out_specs.append(_row_spec(plan, c) if kind == ROW else _partial_spec(plan))
    outs = _pallas(
        spec,
        _wide_bwd_kernel if plan.wide else _bwd_kernel,
        plan.num_chunks,
        [_row_spec(plan, c)] * len(dys)
        + [_stat_spec(plan, c)] * len(stats)
        + [_operand_spec(plan, kd, t, c) for kd, t in spec.kinds],
        out_specs,
        out_shape,
        [*dys, *stats, *ops],
    )(*dys, *stats, *ops)
    dx, parts = outs[0], outs[1:]
    grads = []
    for op, part, (kind, t) in zip(ops, parts, spec.kinds, strict=True):
        if kind == PARAM:
            part = jnp.sum(part, axis=0, keepdims=True)
        elif kind == GROUP:  # chunks never straddle groups: sum each group's t/chunk partials
            part = jnp.sum(part.reshape(op.shape[0], t // plan.chunk, 1, plan.n), axis=1)
        # float32 partial sums stay float32 when the caller still reduces them across devices
        grads.append(part if (kind != ROW and not cast_params) else part.astype(op.dtype))
    return (dx, *grads)


# ----------------------------------------------------------------------------- any number of row axes


def localize(
    spec: Spec, x_shape: tuple[int, ...], op_shapes: list[tuple[int, ...]], dtype: Any, backward: bool = False
) -> tuple[Spec, tuple[bool, ...]]:
    """``spec`` for ``x [*lead, n]`` and operands broadcastable against it (``[*lead', n]``,
    ``lead'`` entries equal to ``lead``'s or 1), with operand kinds and plan derived from these
    shapes (a device's block under partitioning, a vmapped batch), and for each operand whether
    it must be materialized per row (a broadcast the kernels cannot read per block).
    """
    plan = spec.plan
    lead = tuple(x_shape[:-1])
    rows = math.prod(lead)
    kinds: list[tuple[str, int]] = []
    materialize: list[bool] = []
    for shape in op_shapes:
        ol = tuple(shape[:-1])
        groups = math.prod(ol)
        j = 0
        while j < len(lead) and ol[j] == lead[j]:
            j += 1
        grouped = all(d == 1 for d in ol[j:])  # one row per group of the trailing row axes
        if groups == 1:
            kind = (PARAM, 1)
        elif ol == lead or (grouped and groups == rows):
            kind = (ROW, 1)
        elif grouped and group_block_ok(plan.target, rows // groups, plan.n, dtype):
            kind = (GROUP, rows // groups)
        else:
            kind = (ROW, 1)
        kinds.append(kind)
        materialize.append(kind[0] == ROW and math.prod(shape) != math.prod(x_shape))
    groups_rows = tuple(t for kd, t in kinds if kd == GROUP)
    plan = make_plan(plan.target, plan.interpret, rows, plan.n, dtype, groups_rows, backward)
    return dataclasses.replace(spec, plan=plan, kinds=tuple(kinds)), tuple(materialize)


def _flat_op(spec: Spec, op: Array, kind: str, materialize: bool, x_shape: tuple[int, ...]) -> Array:
    n = spec.plan.n
    if materialize:
        op = jnp.broadcast_to(op, x_shape)
    if kind == ROW:
        return op.reshape(-1, n)
    return op.reshape(-1, 1, n)  # param [1, 1, n] or group [G, 1, n]


def forward_nd(spec: Spec, xs: tuple[Array, ...], ops: tuple[Array, ...]) -> tuple[Array, ...]:
    """``(y, [s,] *stats)`` for ``xs``: ``(x,)`` or, with a fused add, ``(x, residual)``, each
    ``[*lead, n]``, and operands broadcastable against them (see :func:`localize`); statistics
    are ``[*lead, 1]``."""
    x = xs[0]
    if x.size == 0:  # no rows (vmap over an empty axis): no kernel grid to launch
        return forward_xla(spec, xs, ops)
    lead = x.shape[:-1]
    spec, mat = localize(spec, x.shape, [o.shape for o in ops], x.dtype)
    flat = tuple(_flat_op(spec, o, kd, m, x.shape) for o, (kd, _), m in zip(ops, spec.kinds, mat, strict=True))
    outs = _forward(spec, tuple(a.reshape(-1, spec.plan.n) for a in xs), flat)
    n_x = spec.n_x
    return (*(o.reshape(x.shape) for o in outs[:n_x]), *(st.reshape(lead + (1,)) for st in outs[n_x:]))


def backward_nd(
    spec: Spec, x: Array, dy: Array, stats: tuple[Array, ...], ops: tuple[Array, ...], cast_params: bool = True,
    ds: Array | None = None,
) -> tuple[Array, ...]:
    """``(dx, *d_ops)`` for the layout of :func:`forward_nd`, each ``d_op`` of its operand's
    shape; gradients of broadcast operands are this call's float32 partial sums (summed over
    this call's rows only) when ``cast_params`` is False."""
    if x.size == 0:  # no rows: every gradient is zero
        return (jnp.zeros_like(x), *(jnp.zeros(o.shape, o.dtype if cast_params else F32) for o in ops))
    spec, mat = localize(spec, x.shape, [o.shape for o in ops], x.dtype, backward=True)
    n = spec.plan.n
    flat = tuple(_flat_op(spec, o, kd, m, x.shape) for o, (kd, _), m in zip(ops, spec.kinds, mat, strict=True))
    outs = _backward(
        spec, x.reshape(-1, n), [st.reshape(-1, 1) for st in stats], flat, dy.reshape(-1, n), cast_params,
        None if ds is None else ds.reshape(-1, n),
    )
    dops = []
    for d, o, m in zip(outs[1:], ops, mat, strict=True):
        if m:  # per-row cotangents of a broadcast operand: sum them over its broadcast axes
            d = d.reshape(x.shape).astype(F32)
            axes = tuple(i for i in range(x.ndim - 1) if o.shape[i] == 1 and x.shape[i] != 1)
            d = jnp.sum(d, axis=axes, keepdims=True)
            d = d if not cast_params else d.astype(o.dtype)
        dops.append(d.reshape(o.shape))
    return (outs[0].reshape(x.shape), *dops)


# ----------------------------------------------------------------------------- differentiation
#
# jln.kernels._ad makes the kernel calls (through jln.kernels._partition, so XLA's partitioner
# can split the rows across devices) one differentiable function: forward mode is the XLA
# body's JVP, reverse mode the backward kernel, which reads only x (s with a fused add), the
# operands and the per-row statistics: the residuals of the XLA path.


def _body(spec: Spec, x: Array, *ops: Array) -> Array:
    """The XLA body these kernels implement, on the kernel layout (``x [*lead, n]``, operands
    ``[*lead', n]``): the reference for forward mode and higher derivatives."""
    return spec.family.on_rows(x.ndim).body(x, *_slots(spec, ops))


def forward_xla(spec: Spec, xs: tuple[Array, ...], ops: tuple[Array, ...]) -> tuple[Array, ...]:
    """:func:`forward_nd`'s results from the XLA body, where the kernel is not taken (jax.export,
    another platform: see :mod:`jln.kernels._export`): ``y`` (and ``s``), and zeros for the
    statistics, which only the backward kernel reads (there the backward is
    :func:`backward_xla`)."""
    s = xs[0] if spec.add is None else add_in(xs[0], xs[1], spec.add[0])
    stats = (jnp.zeros(s.shape[:-1] + (1,), F32),) * spec.n_stats
    y = _body(spec, s, *ops)
    return (y, *stats) if spec.add is None else (y, s, *stats)


def split_rest(spec: Spec, rest: tuple[Any, ...]) -> tuple[Any, tuple[Any, ...], tuple[Any, ...]]:
    """A backward call's operands after ``(x, dy)``: ``ds`` (None without a fused add), the
    statistics, the operands."""
    ds = rest[0] if spec.add is not None else None
    k = (spec.add is not None) + spec.n_stats
    return ds, tuple(rest[k - spec.n_stats : k]), tuple(rest[k:])


def backward_xla(spec: Spec, x: Array, dy: Array, *rest: Array) -> tuple[Array, ...]:
    """:func:`backward_nd`'s ``(dx, *d_ops)`` from the XLA body's VJP, where the kernel is not
    taken; ``rest``: ``ds`` with a fused add, the statistics (unread), the operands."""
    ds, _, ops = split_rest(spec, rest)
    d_x, *d_ops = jax.vjp(functools.partial(_body, spec), x, *ops)[1](dy)
    return (d_x if ds is None else d_x + ds, *d_ops)


def _kernel_forward(spec: Spec, *args: Array) -> tuple[Array, ...]:
    from jln.kernels import _partition

    return tuple(_partition.forward(spec, args[: spec.n_x], args[spec.n_x :]))


def _kernel_backward(spec: Spec, base: Array, ct_y: Array, ct_s: Array | None, stats: tuple[Array, ...],
                     ops: tuple[Array, ...]) -> tuple[Array, ...]:
    from jln.kernels import _partition

    return tuple(_partition.backward(spec, base, ct_y, stats, ops, ds=ct_s))


BACKEND = _ad.Backend(_kernel_forward, _kernel_backward, _body, broadcast=False)


def call(spec: Spec, x: Array, *ops: Array) -> Array:
    """The kernel path on ``x [*lead, n]`` and operands broadcastable against it ``[*lead', n]``."""
    return _ad.apply(BACKEND, spec, x, *ops)[0]


def call_add(spec: Spec, x: Array, residual: Array, *ops: Array) -> tuple[Array, Array]:
    """The fused residual step ``s = x + residual``, ``y = norm(s)``: returns ``(y, s)``.
    Reverse mode keeps ``s`` (not ``x`` and the residual), its statistics and the operands."""
    outs = _ad.apply(BACKEND, spec, x, residual, *ops)
    return outs[0], outs[1]
