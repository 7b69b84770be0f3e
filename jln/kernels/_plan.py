"""Block sizes and the layout each backend's kernels use (one small function per target)."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

#: Widest row a one-row-block-per-program kernel keeps in registers; wider rows use XLA.
MAX_WIDTH = 65536

#: Rows at least this wide take the wide path: each program loops over its rows in column
#: chunks (statistics over the chunks, then the normalize pass), so no program holds a whole
#: row. Rows up to 16384 keep the one-tile-per-row kernels (measured on hardware); the wide
#: path is unmeasured there, so it starts just above.
WIDE_FROM = 16385

#: Widest row the wide path takes on GPUs (the rows are read in chunks, so the bound is not
#: registers but the row's int32 offsets and the partial-gradient bytes); TPUs keep whole row
#: blocks in VMEM and stay at :data:`MAX_WIDTH`.
MAX_WIDE_WIDTH = 2**20

#: GPU tiles of the wide path, ``(block_rows, column chunk, num_warps)``: about 32 values of a
#: tile per thread forward and 16 backward (as the measured one-row tiles at 4096 and 16384),
#: more rows per backward program so the float32 partial sums of the parameter gradients
#: (one row of ``n`` per program) stay a fraction of ``x``'s bytes. Untuned.
GPU_WIDE_FWD = (4, 2048, 8)
GPU_WIDE_BWD = (8, 1024, 16)

#: Column chunk of the wide path on TPUs (lanes; a multiple of 128).
TPU_WIDE_CHUNK = 8192

#: About how many programs the GPU backward launches. Each program walks a chunk of rows and
#: keeps its parameter-gradient partials in registers, so the partials written are
#: ``programs x n`` float32 values instead of one row of them per block of rows (which, at one
#: row per block, is twice the bytes of a bfloat16 ``x``). A few programs per multiprocessor
#: keep enough loads in flight (32768x4096 bf16: 256, 512 and 1024 programs within 5%,
#: 128 programs 35% slower; ``bench/gpu_tune.py``, bench/results/h200.md).
GPU_BWD_PROGRAMS = 512


def next_power_of_2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


@dataclasses.dataclass(frozen=True)
class Plan:
    """How one call is tiled.

    ``target`` is ``"gpu"`` (Triton: every tile a power of two, so the width is padded to
    ``width`` and loads/stores are masked) or ``"tpu"`` (Mosaic: tiles span the exact row,
    block rows a multiple of 8, partial last blocks handled by the pipeline).
    """

    target: str
    interpret: bool
    rows: int
    n: int
    width: int
    block_rows: int
    num_warps: int | None
    chunk_rows: int = 0  # rows one backward program walks (a multiple of block_rows); 0: block_rows
    col_chunk: int = 0  # wide path: columns one loop step reads (GPU: a power of two); 0: the whole row

    @property
    def wide(self) -> bool:
        """Whether programs loop over their rows in column chunks (see :data:`WIDE_FROM`)."""
        return self.col_chunk > 0

    @property
    def num_col_chunks(self) -> int:
        return -(-self.n // self.col_chunk) if self.col_chunk else 1

    @property
    def num_blocks(self) -> int:
        return -(-self.rows // self.block_rows)

    @property
    def chunk(self) -> int:
        return self.chunk_rows or self.block_rows

    @property
    def num_chunks(self) -> int:
        return -(-self.rows // self.chunk)

    @property
    def masked_columns(self) -> bool:
        return self.width != self.n


#: GPU tiles ``(block_rows, num_warps)`` measured best on a GPU (``bench/gpu_tune.py``;
#: bench/results/h200/27e0cbf and 1288d89), keyed by (padded width, itemsize). Other widths
#: and dtypes take :func:`_tile_rule`, which reproduces all of these but the two at 4096.
MEASURED_FWD = {
    (1024, 2): (4, 4),  # 3.34 TB/s; (8, 8) 3.10, (16, 8) 2.45
    (4096, 2): (2, 8),  # 3.2-3.4 TB/s; (1, 4) 3.17-3.28, (2, 16) 2.5-3.1, (4, 8) 2.9
    (16384, 2): (1, 16),  # 1.99 TB/s; (1, 32) 1.94
    (16384, 4): (1, 16),  # 2.51 TB/s; (1, 32) 2.44
}
MEASURED_BWD = {
    (1024, 2): (4, 4),  # 2.41 TB/s; (4, 8) 1.78, (8, 8) 1.39
    (4096, 2): (1, 8),  # 2.72-2.84 TB/s; (1, 16) 2.68, (2, 8) 1.97
    (16384, 2): (1, 16),  # 1.45 TB/s; (1, 32) 1.28
    (16384, 4): (1, 32),  # 1.61 TB/s; (1, 16) 0.43: registers spill
}


def _tile_rule(width: int, itemsize: int, max_warps: int) -> tuple[int, int]:
    """About 4K values per block (narrow rows batched up to 64 per program) and 64 bytes of
    the input per thread (32 bfloat16 or 16 float32 values, four 16-byte loads)."""
    block_rows = max(1, min(64, 4096 // width))
    per_thread = max(1, 64 // itemsize)
    num_warps = next_power_of_2(max(1, (block_rows * width) // (32 * per_thread)))
    return block_rows, max(1, min(max_warps, num_warps))


def gpu_blocks(n: int, dtype: object) -> tuple[int, int]:
    """``(block_rows, num_warps)`` of a forward program for rows of ``n`` elements of
    ``dtype`` on a GPU: :data:`MEASURED_FWD` where measured, else :func:`_tile_rule`."""
    width = next_power_of_2(n)
    itemsize: int = jnp.dtype(dtype).itemsize  # type: ignore[call-overload]
    return MEASURED_FWD.get((width, itemsize)) or _tile_rule(width, itemsize, 16)


def gpu_bwd_blocks(n: int, dtype: object) -> tuple[int, int]:
    """``(block_rows, num_warps)`` of one backward loop step on a GPU: :data:`MEASURED_BWD`
    where measured, else :func:`_tile_rule` (up to 32 warps: a wide float32 row in fewer
    threads spills registers, 4x slower at 16384)."""
    width = next_power_of_2(n)
    itemsize: int = jnp.dtype(dtype).itemsize  # type: ignore[call-overload]
    return MEASURED_BWD.get((width, itemsize)) or _tile_rule(width, itemsize, 32)


def gpu_chunk_rows(rows: int, block_rows: int, group_rows: tuple[int, ...]) -> int:
    """Rows one GPU backward program walks: ``block_rows`` times a power of two, so that about
    :data:`GPU_BWD_PROGRAMS` programs cover ``rows``, and never straddling a group of rows that
    shares a condition (each chunk divides every group's row count)."""
    chunk = block_rows
    while chunk * GPU_BWD_PROGRAMS < rows and all(t % (2 * chunk) == 0 for t in group_rows):
        chunk *= 2
    return chunk


def max_width(target: str) -> int:
    """Widest row the kernels take on ``target`` (``"gpu"`` or ``"tpu"``)."""
    return MAX_WIDE_WIDTH if target == "gpu" else MAX_WIDTH


def is_wide(n: int) -> bool:
    """Whether rows of ``n`` elements take the wide (column-chunked) path."""
    return n >= WIDE_FROM


def gpu_wide_blocks(rows: int, backward: bool) -> tuple[int, int, int]:
    """``(block_rows, col_chunk, num_warps)`` of the wide path on a GPU: :data:`GPU_WIDE_FWD`
    or :data:`GPU_WIDE_BWD`, with block rows halved while fewer than about
    ``GPU_BWD_PROGRAMS / 2`` programs would cover ``rows`` (a few rows of a very wide row
    should still spread over the multiprocessors)."""
    block_rows, chunk, warps = GPU_WIDE_BWD if backward else GPU_WIDE_FWD
    while block_rows > 1 and rows < block_rows * (GPU_BWD_PROGRAMS // 2):
        block_rows //= 2
    return block_rows, chunk, warps


def tpu_block_rows(n: int) -> int:
    """Block rows for a TPU: a multiple of 8 sublanes, about 512 KiB of float32 per tile."""
    lanes = -(-n // 128) * 128
    rows = (512 * 1024) // (4 * lanes)
    return max(8, min(1024, rows // 8 * 8))


def make_plan(
    target: str, interpret: bool, rows: int, n: int, dtype: object, group_rows: tuple[int, ...],
    backward: bool = False,
) -> Plan:
    """The tiling for ``rows x n`` on ``target`` (GPU tiles differ between the forward and the
    backward, whose programs loop over blocks).

    ``group_rows`` lists the row counts of per-group conditions (DiT's ``[B, 1, D]`` shift is
    one group of T rows per example): a block must not straddle two groups, so block rows are
    cut to divide each (the caller materializes groups for which :func:`group_block_ok` fails).
    """
    wide = is_wide(n)
    if target == "gpu":
        col_chunk = 0
        if wide:
            block_rows, col_chunk, num_warps = gpu_wide_blocks(rows, backward)
            col_chunk = min(col_chunk, next_power_of_2(n))
        else:
            block_rows, num_warps = (gpu_bwd_blocks if backward else gpu_blocks)(n, dtype)
        block_rows = min(block_rows, next_power_of_2(rows))
        for t in group_rows:
            while t % block_rows:
                block_rows //= 2
        # the wide backward writes each program's partial sums chunk by chunk: one block per program
        chunk = block_rows if wide else gpu_chunk_rows(rows, block_rows, group_rows)
        return Plan(target, interpret, rows, n, next_power_of_2(n), block_rows, num_warps, chunk, col_chunk)
    block_rows = tpu_block_rows(n)
    if group_rows:
        for t in group_rows:
            block_rows = min(block_rows, t)
            while t % block_rows:
                block_rows -= 8
    elif rows <= block_rows:
        block_rows = rows  # a block equal to the full dimension is always legal
    col_chunk = min(TPU_WIDE_CHUNK, n) if wide else 0
    return Plan(target, interpret, rows, n, n, block_rows, None, 0, col_chunk)


def unplanned(target: str, interpret: bool, n: int) -> Plan:
    """A call's target and row width before its tiles are chosen: the kernels plan each call
    once, for the shapes they receive (a device's block, a vmapped batch)."""
    return Plan(target, interpret, 0, n, n, 0, None)


def group_block_ok(target: str, t: int, n: int, dtype: object) -> bool:
    """Whether a condition shared by groups of ``t`` rows can be read one block per program
    without shrinking blocks below 8 rows (or below the default, if that is smaller)."""
    if target == "tpu":
        return t % 8 == 0
    default = GPU_WIDE_FWD[0] if is_wide(n) else gpu_blocks(n, dtype)[0]
    return t & -t >= min(8, default)  # t & -t: largest power of 2 dividing t
