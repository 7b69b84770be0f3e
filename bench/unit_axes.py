"""A size-1 axis among the rows: ``(B, D)`` against ``(B, 1, D)`` and ``(1, B, D)``.

XLA:CPU's reverse mode of a norm ran several times slower when the rows carry a size-1 axis
(the shape a decoder step or a batch of one gives); jln's contract body now drops such axes.
This times the jitted forward and forward+backward of the XLA path for the three shapes of the
same data, interleaved in one process (the minimum of ``--reps`` samples), next to an
elementwise copy of the same bytes (the memory floor of a pass that reads ``x`` and writes
``y``), and writes ``bench/results/unit_axes.md``.

Usage::

    PYTHONPATH=. python bench/unit_axes.py [--rows 4096] [--width 1024] [--reps 7] [--label L] [--append]
"""

from __future__ import annotations

import argparse
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

import jln


def _time(f: Callable[..., Any], args: tuple[Any, ...], reps: int, inner: int) -> float:
    """The minimum over ``reps`` samples of the mean of ``inner`` calls, in seconds."""
    jax.block_until_ready(f(*args))
    best = float("inf")
    for _ in range(reps):
        start = time.perf_counter()
        for _ in range(inner):
            out = f(*args)
        jax.block_until_ready(out)
        best = min(best, (time.perf_counter() - start) / inner)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=4096)
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--inner", type=int, default=10)
    ap.add_argument("--out", default="bench/results")
    ap.add_argument("--label", default="", help="a heading for this run (e.g. the commit timed)")
    ap.add_argument("--append", action="store_true", help="append to the results file instead of replacing it")
    a = ap.parse_args()
    b, d = a.rows, a.width
    w, bias = jnp.ones(d), jnp.zeros(d)
    norms: dict[str, Callable[..., Any]] = {
        "layer_norm": lambda x: jln.layer_norm(x, w, bias, impl="xla"),
        "rms_norm": lambda x: jln.rms_norm(x, w, impl="xla"),
    }
    shapes = [(b, d), (b, 1, d), (1, b, d)]
    data = np.random.default_rng(0).standard_normal((b, d)).astype(np.float32)
    xs = {s: jnp.asarray(data.reshape(s)) for s in shapes}
    nbytes = data.nbytes
    copy = jax.jit(lambda x: x * 1.5)
    copy_bwd = jax.jit(jax.grad(lambda x: jnp.vdot(x * 1.5, x)))
    rows = []
    for name, fn in norms.items():
        fwd = jax.jit(fn)
        both = jax.jit(jax.grad(lambda x, fn=fn: jnp.vdot(fn(x), x)))
        for s in shapes:
            floor = _time(copy, (xs[s],), a.reps, a.inner)
            floor_b = _time(copy_bwd, (xs[s],), a.reps, a.inner)
            t_f = _time(fwd, (xs[s],), a.reps, a.inner)
            t_b = _time(both, (xs[s],), a.reps, a.inner)
            rows.append((name, s, t_f, floor, t_b, floor_b))
    base = {(r[0], "fwd"): r[2] for r in rows if len(r[1]) == 2} | {(r[0], "bwd"): r[4] for r in rows if len(r[1]) == 2}
    lines = [
        f"## {a.label}" if a.label else "# A size-1 axis among the rows (XLA path)",
        "",
        f"jax {jax.__version__}, {jax.devices()[0].device_kind} ({platform.machine()}, {platform.processor() or 'cpu'}), "
        f"float32, {b} rows of {d}; min of {a.reps} samples of {a.inner} calls. Written by `bench/unit_axes.py`.",
        "GB/s counts x read and y written (forward) or x read twice and dx written (forward+backward, "
        "vdot(y, x) as the loss); the copy floor is an elementwise op on the same bytes, timed in the same run.",
        "",
        "| norm | shape | fwd µs | fwd GB/s | fwd % of copy | fwd vs (B, D) | fwd+bwd µs | fwd+bwd % of copy | fwd+bwd vs (B, D) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, s, t_f, floor, t_b, floor_b in rows:
        lines.append(
            f"| {name} | {s} | {t_f * 1e6:.0f} | {2 * nbytes / t_f / 1e9:.1f} | {100 * floor / t_f:.0f}% | "
            f"{t_f / base[(name, 'fwd')]:.2f} | {t_b * 1e6:.0f} | {100 * floor_b / t_b:.0f}% | {t_b / base[(name, 'bwd')]:.2f} |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "unit_axes.md"
    if a.append and path.exists():
        text = path.read_text() + "\n" + text
    path.write_text(text)


if __name__ == "__main__":
    main()
