"""Tile choices of jln's Pallas GPU kernels, timed on the device (one prepared run).

    python bench/gpu_tune.py OUT.json [--rows 32768] [--width 4096] [--dtype bfloat16]

For one shape it times, in one process and on the same buffers:
  * a copy of x (read x, write y: the memory floor, 2·M·N·b bytes), elementwise through XLA
    and with torch's device-to-device copy where torch sees the GPU (the faster is the floor);
  * layer_norm and rms_norm through ``impl="xla"`` (jln's XLA path), forward and backward;
  * the same through ``impl="pallas"`` for each forward tiling ``(block_rows, num_warps)`` in
    FWD_TILES and each backward ``(programs, block_rows, num_warps)`` in BWD_TILES.
The backward is timed alone, from saved residuals, counting 3·M·N·b bytes (read x and dy,
write dx). Each record holds median µs, GB/s and % of the copy's GB/s; the best tiling per
kernel is printed last. ``jln.kernels._plan.gpu_blocks`` and ``GPU_BWD_PROGRAMS`` are
replaced for the duration of each case, which is what the defaults there should be set from.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import jax
import jax.numpy as jnp

import jln
from jln.cli._bench import harness as _bench
from jln.kernels import _plan

FWD_TILES = [(1, 4), (1, 8), (2, 8), (2, 16)]  # (block_rows, num_warps)
BWD_TILES = [(512, 1, 8), (512, 1, 16), (256, 1, 8), (1024, 1, 8), (512, 2, 8)]  # (programs, rows, warps)
OPS = {
    "layer_norm": lambda x, s, b, impl: jln.layer_norm(x, s, b, impl=impl),
    "rms_norm": lambda x, s, b, impl: jln.rms_norm(x, s, impl=impl),
}


def _timed(fn: Any, args: list[tuple[Any, ...]], reps: int) -> float:
    compiled = jax.jit(fn).lower(*args[0]).compile()
    tm = _bench.time_calls(lambda i: compiled(*args[i]), len(args), jax.block_until_ready,
                           reps=reps, warmup=3, min_sample_s=5e-3)
    return tm.median_s


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--rows", type=int, default=32768)
    p.add_argument("--width", type=int, default=4096)
    p.add_argument("--dtype", default="bfloat16")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--buffers", type=int, default=3)
    p.add_argument("--ops", default=",".join(OPS), help="comma list from " + ",".join(OPS))
    p.add_argument("--fwd-tiles", help="forward tiles as ROWSxWARPS,... (default: FWD_TILES; 'none' skips)")
    p.add_argument("--bwd-tiles", help="backward tiles as PROGRAMSxROWSxWARPS,... (default: BWD_TILES; 'none' skips)")
    a = p.parse_args(argv)

    def tiles(text: str | None, default: list[Any]) -> list[Any]:
        if text is None:
            return default
        return [] if text == "none" else [tuple(int(v) for v in t.split("x")) for t in text.split(",")]

    fwd_tiles_all, bwd_tiles_all = tiles(a.fwd_tiles, FWD_TILES), tiles(a.bwd_tiles, BWD_TILES)
    ops = {k: OPS[k] for k in a.ops.split(",")}
    m, n, dt = a.rows, a.width, jnp.dtype(a.dtype)
    keys = jax.random.split(jax.random.key(0), 3 * a.buffers + 2)
    xs = [jax.random.normal(keys[i], (m, n), jnp.float32).astype(dt) for i in range(a.buffers)]
    dys = [jax.random.normal(keys[a.buffers + i], (m, n), jnp.float32).astype(dt) for i in range(a.buffers)]
    scale = (1 + 0.1 * jax.random.normal(keys[-2], (n,))).astype(dt)
    bias = (0.1 * jax.random.normal(keys[-1], (n,))).astype(dt)
    nb = m * n * dt.itemsize
    records: list[dict[str, Any]] = []
    saved = (_plan.gpu_blocks, _plan.gpu_bwd_blocks, _plan.GPU_BWD_PROGRAMS)

    def record(kind: str, op: str, impl: str, tile: Any, sec: float, nbytes: int, copy_gbps: float) -> None:
        gbps = nbytes / sec / 1e9
        rec = {"kind": kind, "op": op, "impl": impl, "tile": tile, "median_us": sec * 1e6, "gbps": gbps,
               "pct_of_copy": 100 * gbps / copy_gbps, "shape": [m, n], "dtype": str(dt)}
        records.append(rec)
        print(f"{kind:4} {op:10} {impl:6} {tile!s:12} {sec * 1e6:9.1f} us {gbps:8.1f} GB/s "
              f"{rec['pct_of_copy']:6.1f}% of copy", flush=True)

    t_copy = _timed(lambda x: -x, [(x,) for x in xs], a.reps)
    copies = {"xla": t_copy}
    try:  # torch's device-to-device copy, where torch sees the GPU: the floor is the faster
        import torch

        if torch.cuda.is_available():
            srcs = [torch.from_dlpack(x) for x in xs]
            dsts = [torch.empty_like(t) for t in srcs]
            copies["torch"] = _bench.time_calls(
                lambda i: dsts[i].copy_(srcs[i]), len(xs), lambda _: torch.cuda.synchronize(),
                reps=a.reps, warmup=3, min_sample_s=5e-3).median_s
    except ImportError:
        pass
    copy_gbps = 2 * nb / min(copies.values()) / 1e9
    for via, t in copies.items():
        record("copy", "copy", via, None, t, 2 * nb, copy_gbps)
    for op, f in ops.items():
        for impl in ("xla", "pallas"):
            fwd_tiles = fwd_tiles_all if impl == "pallas" else [None]
            for tile in fwd_tiles:
                try:
                    if tile is not None:
                        _plan.gpu_blocks = lambda n_, d_, t=tile: t  # noqa: E731
                    sec = _timed(lambda x, s, b, f=f, impl=impl: f(x, s, b, impl), [(x, scale, bias) for x in xs], a.reps)
                    record("fwd", op, impl, tile, sec, 2 * nb, copy_gbps)
                except Exception as e:  # noqa: BLE001 - a tiling that fails to compile is reported
                    print(f"fwd  {op} {impl} {tile}: {type(e).__name__}: {str(e)[:200]}", flush=True)
                finally:
                    _plan.gpu_blocks = saved[0]
            bwd_tiles = bwd_tiles_all if impl == "pallas" else [None]
            for tile in bwd_tiles:
                try:
                    if tile is not None:
                        programs, rows, warps = tile
                        _plan.gpu_bwd_blocks = lambda n_, d_, t=(rows, warps): t  # noqa: E731
                        _plan.GPU_BWD_PROGRAMS = programs
                    pull = jax.jit(lambda x, s, b, f=f, impl=impl: jax.vjp(lambda x, s, b: f(x, s, b, impl), x, s, b)[1])
                    args = [(pull(x, scale, bias), dy) for x, dy in zip(xs, dys, strict=True)]
                    sec = _timed(lambda pb, dy: pb(dy), args, a.reps)
                    record("bwd", op, impl, tile, sec, 3 * nb, copy_gbps)
                    del args
                except Exception as e:  # noqa: BLE001
                    print(f"bwd  {op} {impl} {tile}: {type(e).__name__}: {str(e)[:200]}", flush=True)
                finally:
                    _plan.gpu_blocks, _plan.gpu_bwd_blocks, _plan.GPU_BWD_PROGRAMS = saved
    best = {}
    for r in records:
        k = (r["kind"], r["op"], r["impl"], r["dtype"], r["shape"][1])
        if k not in best or r["gbps"] > best[k]["gbps"]:
            best[k] = r
    print("\nbest per kernel:")
    for (kind, op, impl, dtype, width), r in sorted(best.items()):
        print(f"  {kind:4} {op:10} {impl:6} {dtype:8} {width:6} {r['tile']!s:12} {r['gbps']:8.1f} GB/s "
              f"{r['pct_of_copy']:6.1f}% of copy")
    with open(a.out, "w") as fh:
        json.dump({"device": str(jax.devices()[0].device_kind), "jax": jax.__version__,
                   "time": time.strftime("%Y-%m-%d %H:%M:%S"), "records": records}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
