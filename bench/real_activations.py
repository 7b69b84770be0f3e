"""The norms of tiny transformers and diffusers models against torch, on the model's own activations.

Runs the measurement ``tests/test_real_activations.py`` asserts (each model built from a tiny
config with random weights, every norm hooked in one float32 forward pass, then converted with
``jln.interop.from_torch`` and run on the captured inputs, linen and nnx faces) and writes it
as a table: per family the norm modules hooked and their classes, the worst float32 error
relative to ``max|torch|``, and the lowest bfloat16 fraction of bit-identical elements.

Usage::

    PYTHONPATH=. python bench/real_activations.py [--only FAMILY,...] [--out bench/results]

Writes ``real_activations.md``.
"""

from __future__ import annotations

import argparse
import platform
import time
from pathlib import Path
from typing import Any


def _row(family: str, f32: Any, bf16: Any) -> list[str]:
    classes, b = f32.classes, bf16.classes
    modules = sum(m.modules for m in classes.values())
    calls = sum(m.calls for m in classes.values())
    worst = max(classes.items(), key=lambda kv: kv[1].rel)
    lowest = min(b.items(), key=lambda kv: kv[1].exact)
    differ = sum(m.differ for m in b.values())
    elements = sum(m.elements for m in b.values())
    return [
        family,
        str(modules),
        str(calls),
        "<br>".join(f"{k} ({m.modules})" for k, m in classes.items()),
        f"{worst[1].rel:.3g} ({worst[0].split(' ->')[0]})",
        f"{lowest[1].exact:.4%} ({lowest[0].split(' ->')[0]})",
        f"{differ} / {elements}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated families (default: all)")
    parser.add_argument("--out", default="bench/results")
    args = parser.parse_args()

    import diffusers
    import jax
    import torch
    import transformers

    from tests import test_real_activations as T

    families = [f for f in args.only.split(",") if f] or list(T.FAMILIES)
    rows, details, start = [], [], time.perf_counter()
    for family in families:
        f32, bf16 = T.measure(family, "float32"), T.measure(family, "bfloat16")
        rows.append(_row(family, f32, bf16))
        for key, m in f32.classes.items():
            b = bf16.classes[key]
            known = [dt for dt in ("float32", "bfloat16") if (family, dt, key) in T.KNOWN]
            details.append([
                family, key, str(m.modules), str(m.calls), f"{m.rel:.3g}", f"{b.exact:.4%}",
                f"{b.differ} / {b.elements}", str(b.max_ulp), ", ".join(known) or "",
            ])
        print(" | ".join(rows[-1][:3] + rows[-1][4:]), flush=True)

    header = [
        "family", "norm modules", "calls", "classes (torch -> jln, modules)",
        "worst float32 rel. error", "lowest bfloat16 bit-identical", "bfloat16 elements differing (both faces)",
    ]
    detail_header = [
        "family", "class", "modules", "calls", "float32 rel. error", "bfloat16 bit-identical",
        "differing (both faces)", "max ulp", "known (xfail)",
    ]

    def table(head: list[str], body: list[list[str]]) -> list[str]:
        return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + [
            "| " + " | ".join(r) + " |" for r in body
        ]

    lines = [
        "# Norms on real model activations",
        "",
        f"torch {torch.__version__} ({torch.backends.cpu.get_cpu_capability()}), transformers "
        f"{transformers.__version__}, diffusers {diffusers.__version__}, jax {jax.__version__}, "
        f"{platform.machine()}; {time.perf_counter() - start:.0f} s. Written by "
        "`bench/real_activations.py`; asserted by `tests/test_real_activations.py`.",
        "",
        "Float32 error: `max|jln - torch| / max|torch|` over every call and output (bar 5e-7). "
        "Bfloat16: the module and its captured inputs cast to bfloat16, torch run again; the "
        "lowest fraction of bit-identical elements of any call (bar 100%, GroupNorm 99.9%). "
        "Both jln faces (linen, nnx) count.",
        "",
        *table(header, rows),
        "",
        "## Per class",
        "",
        *table(detail_header, details),
        "",
    ]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "real_activations.md").write_text("\n".join(lines))
    print(f"wrote {out / 'real_activations.md'}")


if __name__ == "__main__":
    main()
