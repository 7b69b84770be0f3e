"""The wide-row path of jln's Pallas GPU kernels against the one-tile kernels, XLA and a copy.

    python bench/gpu_wide.py OUT.json [--md OUT.md] [--widths 1024,...,65536] [--elements 2**26]

For each width (rows = elements / width) and dtype it times, in one process:
  * a copy of x (read x, write y: the memory floor, 2·M·N·b bytes), elementwise through XLA
    and with torch's device-to-device copy where torch sees the GPU (the faster is the floor);
  * layer_norm and rms_norm (with scale; layer_norm with bias), forward and backward, through
    ``impl="xla"``, the Pallas one-tile kernels (``pallas-row``: ``_plan.WIDE_FROM`` set past
    the width, up to ``_plan.MAX_WIDTH``) and the Pallas wide path (``pallas-wide``:
    ``WIDE_FROM`` set to 1, so every width loops over column chunks).
The backward is timed alone, from saved residuals, counting 3·M·N·b bytes (read x and dy,
write dx); the forward counts 2·M·N·b. Each record holds median µs, GB/s and % of the copy's
GB/s, and, for the kernels, the largest difference from the XLA path on that shape (y, and dx
relative to its largest value): the wide path is checked at full width on the device here.
Cases past ``--budget-s`` are recorded as skipped; a case that fails is recorded with its error.
``--wide-tiles FROWSxCHUNKxWARPS/BROWSxCHUNKxWARPS`` replaces ``GPU_WIDE_FWD``/``GPU_WIDE_BWD``.
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
from jln import _bench
from jln.kernels import _plan

OPS = {
    "layer_norm": lambda x, s, b, impl: jln.layer_norm(x, s, b, impl=impl),
    "rms_norm": lambda x, s, b, impl: jln.rms_norm(x, s, impl=impl),
}
#: impl label -> (jln impl, WIDE_FROM while it runs)
IMPLS = {"xla": ("xla", None), "pallas-row": ("pallas", 10**9), "pallas-wide": ("pallas", 1)}


def _timed(fn: Any, args: list[tuple[Any, ...]], reps: int) -> tuple[float, Any]:
    """Median seconds of ``fn`` over the argument sets, and its result on the first."""
    compiled = jax.jit(fn).lower(*args[0]).compile()
    tm = _bench.time_calls(lambda i: compiled(*args[i]), len(args), jax.block_until_ready,
                           reps=reps, warmup=3, min_sample_s=5e-3)
    return tm.median_s, compiled(*args[0])


def _rel(a: Any, b: Any) -> float:
    a, b = jnp.asarray(a, jnp.float32), jnp.asarray(b, jnp.float32)
    return float(jnp.max(jnp.abs(a - b)) / jnp.maximum(1.0, jnp.max(jnp.abs(b))))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--md", help="also write a markdown table here")
    p.add_argument("--widths", default="16384,32768,65536,4096,1024", help="in the order they are run")
    p.add_argument("--elements", type=int, default=2**26, help="rows x width of every shape")
    p.add_argument("--dtypes", default="bfloat16,float32")
    p.add_argument("--ops", default=",".join(OPS))
    p.add_argument("--impls", default=",".join(IMPLS))
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--buffers", type=int, default=2)
    p.add_argument("--row-max", type=int, default=16384,
                   help="widest row timed on the one-tile kernels (the widest they are measured at; a "
                        "wider one-row tile spills registers and may compile slowly)")
    p.add_argument("--budget-s", type=float, default=240.0)
    p.add_argument("--wide-tiles", help="FROWSxCHUNKxWARPS/BROWSxCHUNKxWARPS (default: the plan's)")
    a = p.parse_args(argv)
    if a.wide_tiles:
        f_t, b_t = (tuple(int(v) for v in t.split("x")) for t in a.wide_tiles.split("/"))
        _plan.GPU_WIDE_FWD, _plan.GPU_WIDE_BWD = f_t, b_t  # type: ignore[assignment]
    start = time.perf_counter()
    records: list[dict[str, Any]] = []
    saved_from = _plan.WIDE_FROM
    device = str(jax.devices()[0].device_kind)

    def record(**rec: Any) -> None:
        records.append(rec)
        if rec.get("skipped") or rec.get("error"):
            print(f"{rec['kind']:4} {rec['op']:10} {rec['impl']:11} {rec['dtype']:8} {rec['width']:6} "
                  f"{rec.get('error') or 'skipped'}", flush=True)
            return
        err = "" if rec.get("err_vs_xla") is None else f"  |diff vs xla| {rec['err_vs_xla']:.2g}"
        print(f"{rec['kind']:4} {rec['op']:10} {rec['impl']:11} {rec['dtype']:8} {rec['width']:6} "
              f"{rec['median_us']:9.1f} us {rec['gbps']:8.1f} GB/s {rec['pct_of_copy']:6.1f}% of copy{err}",
              flush=True)

    for width in (int(w) for w in a.widths.split(",")):
        for dtype in a.dtypes.split(","):
            dt = jnp.dtype(dtype)
            m = max(1, a.elements // width)
            base = {"width": width, "rows": m, "dtype": dtype}
            if time.perf_counter() - start > a.budget_s:
                for op in ["copy", *a.ops.split(",")]:
                    record(kind="all", op=op, impl="-", skipped=True, **base)
                continue
            keys = jax.random.split(jax.random.key(width), 2 * a.buffers + 2)
            xs = [(0.5 + jax.random.normal(keys[i], (m, width), jnp.float32)).astype(dt) for i in range(a.buffers)]
            dys = [jax.random.normal(keys[a.buffers + i], (m, width), jnp.float32).astype(dt) for i in range(a.buffers)]
            scale = (1 + 0.1 * jax.random.normal(keys[-2], (width,))).astype(dt)
            bias = (0.1 * jax.random.normal(keys[-1], (width,))).astype(dt)
            nb = m * width * dt.itemsize
            copies = {"xla": _timed(lambda x: -x, [(x,) for x in xs], a.reps)[0]}
            try:  # torch's device-to-device copy, where torch sees the GPU: the floor is the faster
                import torch

                if torch.cuda.is_available():
                    srcs = [torch.from_dlpack(x) for x in xs]
                    dsts = [torch.empty_like(t) for t in srcs]
                    def copy(i: int, d: Any = dsts, s: Any = srcs) -> Any:
                        return d[i].copy_(s[i])

                    copies["torch"] = _bench.time_calls(
                        copy, len(xs), lambda _: torch.cuda.synchronize(),
                        reps=a.reps, warmup=3, min_sample_s=5e-3).median_s
                    del srcs, dsts
            except ImportError:
                pass
            copy_gbps = 2 * nb / min(copies.values()) / 1e9
            for via, t in copies.items():
                record(kind="copy", op="copy", impl=via, median_us=t * 1e6, gbps=2 * nb / t / 1e9,
                       pct_of_copy=100 * 2 * nb / t / 1e9 / copy_gbps, **base)
            for op in a.ops.split(","):
                f = OPS[op]
                ref_y = ref_dx = None
                for label in a.impls.split(","):
                    impl, wide_from = IMPLS[label]
                    for kind in ("fwd", "bwd"):
                        if time.perf_counter() - start > a.budget_s:
                            record(kind=kind, op=op, impl=label, skipped=True, **base)
                            continue
                        if label == "pallas-row" and width > min(a.row_max, _plan.MAX_WIDTH):
                            record(kind=kind, op=op, impl=label, skipped=True, **base)
                            continue
                        try:
                            if wide_from is not None:
                                _plan.WIDE_FROM = wide_from
                                jax.clear_caches()

                            def fwd(x: Any, s: Any, b: Any, f: Any = f, impl: str = impl) -> Any:
                                return f(x, s, b, impl)

                            if kind == "fwd":
                                sec, out = _timed(fwd, [(x, scale, bias) for x in xs], a.reps)
                                nbytes = 2 * nb
                            else:
                                pull = jax.jit(lambda x, s, b, fwd=fwd: jax.vjp(fwd, x, s, b)[1])
                                args = [(pull(x, scale, bias), dy) for x, dy in zip(xs, dys, strict=True)]
                                sec, grads = _timed(lambda pb, dy: pb(dy), args, a.reps)
                                out = grads[0]  # dx
                                nbytes = 3 * nb
                                del args
                            err = None
                            if label == "xla":
                                if kind == "fwd":
                                    ref_y = out
                                else:
                                    ref_dx = out
                            else:
                                ref = ref_y if kind == "fwd" else ref_dx
                                err = None if ref is None else _rel(out, ref)
                            gbps = nbytes / sec / 1e9
                            record(kind=kind, op=op, impl=label, median_us=sec * 1e6, gbps=gbps,
                                   pct_of_copy=100 * gbps / copy_gbps, err_vs_xla=err,
                                   plan_wide_from=_plan.WIDE_FROM, **base)
                        except Exception as e:  # noqa: BLE001 - a case that fails is reported
                            record(kind=kind, op=op, impl=label, error=f"{type(e).__name__}: {str(e)[:300]}", **base)
                        finally:
                            _plan.WIDE_FROM = saved_from
            del xs, dys
    result = {"device": device, "jax": jax.__version__, "time": time.strftime("%Y-%m-%d %H:%M:%S"),
              "elements": a.elements, "wide_fwd": _plan.GPU_WIDE_FWD, "wide_bwd": _plan.GPU_WIDE_BWD,
              "seconds": time.perf_counter() - start, "records": records}
    with open(a.out, "w") as fh:
        json.dump(result, fh, indent=1)
    if a.md:
        with open(a.md, "w") as fh:
            fh.write(_markdown(result))
    print(f"gpu_wide: {len(records)} records in {result['seconds']:.0f} s")
    return 0


def _markdown(result: dict[str, Any]) -> str:
    """One row per (kind, op, dtype, width): % of the copy floor for each impl."""
    impls = list(IMPLS)
    rows: dict[tuple[Any, ...], dict[str, str]] = {}
    for r in result["records"]:
        if r["kind"] not in ("fwd", "bwd"):
            continue
        cell = ("skipped" if r.get("skipped") else "error" if r.get("error")
                else f"{r['pct_of_copy']:.0f}% ({r['median_us']:.0f} us)")
        rows.setdefault((r["kind"], r["op"], r["dtype"], r["width"]), {})[r["impl"]] = cell
    lines = [f"# jln wide rows: {result['device']}, {result['elements']} elements per shape",
             "", f"wide tiles fwd {result['wide_fwd']}, bwd {result['wide_bwd']}; % of the copy floor (median)", "",
             "| kind | op | dtype | width | " + " | ".join(impls) + " |",
             "|---" * (4 + len(impls)) + "|"]
    for (kind, op, dtype, width), cells in sorted(rows.items()):
        lines.append(f"| {kind} | {op} | {dtype} | {width} | " + " | ".join(cells.get(i, "") for i in impls) + " |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
