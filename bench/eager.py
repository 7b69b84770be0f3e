"""Eager calls: jln's functions called outside ``jit``, as a porting user at a prompt or in a
parity test calls them, against the same functions jitted, run op by op (before jln compiled
eager calls whole, see jln/_eager.py), and torch's eager CPU kernels.

    taskset -c 0 python bench/eager.py OUT.md [--widths 256,4096] [--dtypes float32,bfloat16] [--reps 21]

Forwards only (an eager ``jax.vjp`` traces the function, so it runs op by op either way).
Timed as ``jln bench`` times (``jln.cli._bench.harness.time_interleaved``: samples in turns, each call
synced before the next, inputs rotated over four times the last-level cache), on the default
JAX device; the copy floor is torch's ``copy_`` of the same bytes, timed in the same turns.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import jax
import jax.numpy as jnp

import jln
from jln.cli._bench import harness as _bench
from jln.cli._bench import impls

OPS = ("layer_norm", "add_layer_norm", "rms_norm[torch]")
IMPLS = ("jln eager", "jln op by op", "jln jit", "torch eager")


def _case(op: str, rows: int, width: int, dtype: str, reps: int) -> dict[str, Any]:
    import torch

    itemsize = jnp.dtype(dtype).itemsize
    n_buffers = _bench.buffer_sets(rows * width * itemsize, 64)
    data = _bench.make_data(rows, width, dtype, n_buffers)
    inputs = [_bench.op_inputs(op, data, i)[0] for i in range(n_buffers)]
    f = impls.jax_op("jln", op)  # jln's public function as users call it (impl="auto")
    public = getattr(jln, impls.family(op))

    def unwrapped(p: dict[str, Any]) -> Any:  # f, with jln.<op> run op by op
        setattr(jln, impls.family(op), public.__wrapped__)
        try:
            return f(p)
        finally:
            setattr(jln, impls.family(op), public)

    jitted = jax.jit(f)
    tf = impls.torch_op(op)
    tin = [{k: _bench.to_torch(v, "cpu") for k, v in p.items()} for p in inputs]
    dst = torch.empty_like(tin[0]["x"])
    calls: dict[str, _bench.Timed] = {
        "jln eager": (lambda i: f(inputs[i]), n_buffers, jax.block_until_ready),
        "jln op by op": (lambda i: unwrapped(inputs[i]), n_buffers, jax.block_until_ready),
        "jln jit": (lambda i: jitted(inputs[i]), n_buffers, jax.block_until_ready),
        "torch eager": (lambda i: tf(tin[i]), n_buffers, lambda _: None),
        "copy": (lambda i: dst.copy_(tin[i]["x"]), n_buffers, lambda _: None),
    }
    tm = _bench.time_interleaved(calls, reps=reps, warmup=3, min_sample_s=0.02, in_flight=0)
    return {**{name: t.median_s * 1e6 for name, t in tm.items()},
            **{f"{name} faults": t.faults_per_call for name, t in tm.items()}}


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # no affinity on this OS: all of them
        return os.cpu_count() or 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="markdown file to write")
    ap.add_argument("--widths", default="256,4096")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--elements", type=int, default=1 << 20)
    ap.add_argument("--reps", type=int, default=21)
    a = ap.parse_args(argv)
    dev = _bench.device_info("cpu")
    lines = [
        "# jln eager calls",
        "",
        f"Device: **{dev['name'] if dev['platform'] == 'cpu' else dev['kind']}**, JAX platform `{dev['platform']}`, "
        f"{_cores()} of its {dev['cores']} cores given to the process; "
        f"versions: {', '.join(f'{k} {v}' for k, v in _bench.versions().items() if v)}.",
        "",
        f"Command: `python bench/eager.py {' '.join(arg for arg in (argv if argv is not None else sys.argv[1:]))}`",
        "",
        "Forwards, median µs per call (each call synced before the next; inputs rotated over four "
        "times the last-level cache). *jln eager*: the public function called outside `jit` "
        "(compiled whole, jln/_eager.py); *jln op by op*: the same function run op by op, as "
        "eager calls ran before; *jln jit*: under `jax.jit`; *copy*: torch's `copy_` of x's bytes. "
        "Page faults: the process's minor faults per timed call (see `jln bench`'s `faults_per_call`): "
        "an eager call and the jitted one run the same program, so where their times differ by more "
        "than this machine's noise, look there first.",
        "",
        "| op | shape | dtype | copy | " + " | ".join(IMPLS) + " | op by op ÷ eager | eager ÷ jit | eager ÷ torch "
        "| page faults per call, eager / jit |",
        "|---|---|---|---|" + "---|" * (len(IMPLS) + 4),
    ]
    for dtype in a.dtypes.split(","):
        for width in (int(w) for w in a.widths.split(",")):
            rows = a.elements // width
            for op in OPS:
                t = _case(op, rows, width, dtype, a.reps)
                cells = " | ".join(f"{t[i]:.0f}" for i in IMPLS)
                lines.append(
                    f"| {op} | {rows}×{width} | {dtype} | {t['copy']:.0f} | {cells} | "
                    f"{t['jln op by op'] / t['jln eager']:.2f} | {t['jln eager'] / t['jln jit']:.2f} | "
                    f"{t['jln eager'] / t['torch eager']:.2f} | {_bench._fmt(t['jln eager faults'], '.0f')} / "
                    f"{_bench._fmt(t['jln jit faults'], '.0f')} |")
                print(lines[-1], flush=True)
    with open(a.out, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
