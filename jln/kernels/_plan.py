"""Block sizes and the layout each backend's kernels use (one small function per target)."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp

#: Widest row a one-row-block-per-program kernel keeps in registers; wider rows use XLA.
MAX_WIDTH = 65536

#: About how many programs the GPU backward launches. Each program walks a chunk of rows and
#: keeps its parameter-gradient partials in registers, so the partials written are
#: ``programs x n`` float32 values instead of one row of them per block of rows (which, at one
#: row per block, is twice the bytes of a bfloat16 ``x``). A few programs per multiprocessor
#: keep enough loads in flight; ``bench/gpu_tune.py`` measures the choice.
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


def gpu_blocks(n: int, dtype: object) -> tuple[int, int]:
    """``(block_rows, num_warps)`` for a row of ``n`` elements of ``dtype`` on a GPU.

    A forward program holds about 8K values (two rows of 4096; narrow rows are batched up to
    64 per program), and each thread about four 16-byte loads of it. Measured on an H200 at
    32768x4096 bfloat16 (``bench/gpu_tune.py``, bench/results/h200): two rows with 8 warps ran
    at 3.2-3.3 TB/s, within the spread of one row with 4 (3.2) and ahead of four rows (2.9-3.0).
    """
    width = next_power_of_2(n)
    block_rows = max(1, min(64, 8192 // width))
    itemsize: int = jnp.dtype(dtype).itemsize  # type: ignore[call-overload]
    per_thread = 4 * max(1, 16 // itemsize)  # elements in four 16-byte loads
    num_warps = next_power_of_2(max(1, (block_rows * width) // (32 * per_thread)))
    return block_rows, max(1, min(16, num_warps))


def gpu_bwd_blocks(n: int, dtype: object) -> tuple[int, int]:
    """``(block_rows, num_warps)`` of one backward loop step on a GPU: about 4K values (one row
    of 4096), each thread two 16-byte loads per tensor. Measured on an H200 at 32768x4096
    bfloat16: one row with 8 warps, 2.7 TB/s; two rows per step, 1.8-2.0 TB/s; 16 warps, 2.4.
    """
    width = next_power_of_2(n)
    block_rows = max(1, min(64, 4096 // width))
    itemsize: int = jnp.dtype(dtype).itemsize  # type: ignore[call-overload]
    per_thread = 2 * max(1, 16 // itemsize)
    num_warps = next_power_of_2(max(1, (block_rows * width) // (32 * per_thread)))
    return block_rows, max(1, min(16, num_warps))


def gpu_chunk_rows(rows: int, block_rows: int, group_rows: tuple[int, ...]) -> int:
    """Rows one GPU backward program walks: ``block_rows`` times a power of two, so that about
    :data:`GPU_BWD_PROGRAMS` programs cover ``rows``, and never straddling a group of rows that
    shares a condition (each chunk divides every group's row count)."""
    chunk = block_rows
    while chunk * GPU_BWD_PROGRAMS < rows and all(t % (2 * chunk) == 0 for t in group_rows):
        chunk *= 2
    return chunk


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
    if target == "gpu":
        block_rows, num_warps = (gpu_bwd_blocks if backward else gpu_blocks)(n, dtype)
        block_rows = min(block_rows, next_power_of_2(rows))
        for t in group_rows:
            while t % block_rows:
                block_rows //= 2
        chunk = gpu_chunk_rows(rows, block_rows, group_rows)
        return Plan(target, interpret, rows, n, next_power_of_2(n), block_rows, num_warps, chunk)
    block_rows = tpu_block_rows(n)
    if group_rows:
        for t in group_rows:
            block_rows = min(block_rows, t)
            while t % block_rows:
                block_rows -= 8
    elif rows <= block_rows:
        block_rows = rows  # a block equal to the full dimension is always legal
    return Plan(target, interpret, rows, n, n, block_rows, None)


def group_block_ok(target: str, t: int, n: int, dtype: object) -> bool:
    """Whether a condition shared by groups of ``t`` rows can be read one block per program
    without shrinking blocks below 8 rows (or below the default, if that is smaller)."""
    if target == "tpu":
        return t % 8 == 0
    return t & -t >= min(8, gpu_blocks(n, dtype)[0])  # t & -t: largest power of 2 dividing t
