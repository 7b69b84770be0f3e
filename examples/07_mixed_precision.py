"""Mixed precision: where naive LayerNorm/RMSNorm formulas break in fp16, bf16 and fp32, and jln doesn't.

Run from the repository root:  python examples/07_mixed_precision.py
Writes 07_mixed_precision.png to the current directory and exits non-zero if a check fails.

The seed warns that LayerNorm "needs special handling" in fp16 (``nn.LayerNorm(d).half()``).
This example writes the naive formulas on purpose (they are what fails) and compares them, flax's
default LayerNorm (``use_fast_variance=True``), torch's ``.half()`` module and jln against a
float64 torch reference:

* fp16, |x| ~ 300: ``x*x`` overflows float16 (max 65504) -> the naive variance is inf, outputs 0/NaN.
* fp32, x = 1e4 + N(0, 1): ``E[x^2] - E[x]^2`` cancels catastrophically (or goes negative -> NaN).
* bf16 statistics: a mean and variance accumulated in bf16 lose the row's detail.
"""

from __future__ import annotations

import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import matplotlib
import numpy as np
import torch

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import jln  # noqa: E402

FAILED: list[str] = []
ROWS, D = 64, 512


def check(name: str, ok: bool) -> None:
    print(f"  [{'ok' if ok else 'FAIL'}] {name}")
    if not ok:
        FAILED.append(name)


# ---- the naive formulas (the point of this example is that they fail) -------------------------
def naive_ln(x: jax.Array, eps: float = 1e-5) -> jax.Array:
    """Everything in x's dtype, one-pass variance E[x^2] - E[x]^2."""
    mean = jnp.mean(x, axis=-1, keepdims=True, dtype=x.dtype)
    var = jnp.mean(x * x, axis=-1, keepdims=True, dtype=x.dtype) - mean * mean
    return (x - mean) / jnp.sqrt(var + jnp.asarray(eps, x.dtype))


def naive_rms(x: jax.Array, eps: float = 1e-6) -> jax.Array:
    """RMSNorm without the fp32 upcast (the EasyLM bug)."""
    return x / jnp.sqrt(jnp.mean(x * x, axis=-1, keepdims=True, dtype=x.dtype) + jnp.asarray(eps, x.dtype))


def flax_ln(x: jax.Array) -> jax.Array:
    """flax.linen.LayerNorm with its defaults (use_fast_variance=True), eps set to torch's."""
    m = nn.LayerNorm(epsilon=1e-5, use_bias=False, use_scale=False, dtype=x.dtype)
    return m.apply({}, x)


# ---- float64 references (torch) ---------------------------------------------------------------
def ref_ln(x: np.ndarray) -> np.ndarray:
    t = torch.from_numpy(np.asarray(x, np.float64))
    return torch.nn.functional.layer_norm(t, (t.shape[-1],), eps=1e-5).numpy()


def ref_rms(x: np.ndarray) -> np.ndarray:
    t = torch.from_numpy(np.asarray(x, np.float64))
    return torch.nn.functional.rms_norm(t, (t.shape[-1],), eps=1e-6).numpy()


def err(y: jax.Array | np.ndarray | torch.Tensor, ref: np.ndarray) -> float:
    """max |y - ref|; inf when y has NaN/inf."""
    if isinstance(y, torch.Tensor):
        y = y.detach().float().numpy()
    y = np.asarray(jnp.asarray(y).astype(jnp.float32), np.float64)
    return float("inf") if not np.all(np.isfinite(y)) else float(np.abs(y - ref).max())


def fmt(e: float | None) -> str:
    return "-" if e is None else ("NaN/inf" if not np.isfinite(e) else f"{e:.2e}")


def main() -> int:
    key = jax.random.split(jax.random.key(0), 4)
    g = jax.random.normal(key[0], (ROWS, D))
    table = []  # (case, naive, flax, torch, jln, jln tolerance)

    # 1. fp16 with |x| ~ 300: x^2 overflows float16
    x = (300.0 * g).astype(jnp.float16)
    xr = np.array(x.astype(jnp.float32))  # a writable copy: torch.from_numpy warns on read-only arrays
    seed_half = torch.nn.LayerNorm(D).half()  # the seed's `.half()` module
    with torch.no_grad():
        t_half = seed_half(torch.from_numpy(xr).half())
    r = ref_ln(xr)
    table.append(("LN fp16, x ~ 300*N(0,1)", err(naive_ln(x), r), err(flax_ln(x), r), err(t_half, r),
                  err(jln.layer_norm(x), r), 4e-3))
    r = ref_rms(xr)
    table.append(("RMS fp16, x ~ 300*N(0,1)", err(naive_rms(x), r), None,
                  err(torch.nn.functional.rms_norm(torch.from_numpy(xr).half(), (D,)), r),
                  err(jln.rms_norm(x, eps=1e-6), r), 4e-3))
    print(f"fp16: fraction of x*x that overflows float16: {float(jnp.mean(jnp.isinf(x * x))):.1%}")

    # 2. fp32 with a large offset: catastrophic cancellation in E[x^2] - E[x]^2
    for off, sd in ((1e4, 1.0), (300.0, 0.03)):
        x = (off + sd * g).astype(jnp.float32)
        r = ref_ln(np.asarray(x))
        with torch.no_grad():
            t32 = torch.nn.LayerNorm(D)(torch.from_numpy(np.array(x)))
        table.append((f"LN fp32, x = {off:g} + {sd:g}*N(0,1)", err(naive_ln(x), r), err(flax_ln(x), r),
                      err(t32, r), err(jln.layer_norm(x), r), 1e-5))

    # 3. bf16 statistics: mean/variance accumulated in bfloat16
    x = (8.0 + g).astype(jnp.bfloat16)
    xr = np.array(x.astype(jnp.float32))  # a writable copy: torch.from_numpy warns on read-only arrays
    r = ref_ln(xr)
    with torch.no_grad():
        tb = torch.nn.LayerNorm(D).bfloat16()(torch.from_numpy(xr).bfloat16())
    table.append(("LN bf16, x = 8 + N(0,1)", err(naive_ln(x), r), err(flax_ln(x), r), err(tb, r),
                  err(jln.layer_norm(x), r), 3.2e-2))
    x = (2.0 * g).astype(jnp.bfloat16)
    xr = np.array(x.astype(jnp.float32))  # a writable copy: torch.from_numpy warns on read-only arrays
    r = ref_rms(xr)
    table.append(("RMS bf16, x = 2*N(0,1)", err(naive_rms(x), r), None,
                  err(torch.nn.functional.rms_norm(torch.from_numpy(xr).bfloat16(), (D,)), r),
                  err(jln.rms_norm(x, eps=1e-6), r), 3.2e-2))

    print(f"\nmax |error| vs a float64 torch reference, {ROWS} rows x {D} features")
    print(f"  {'case':<32}{'naive formula':>15}{'flax default':>15}{'torch':>12}{'jln':>12}")
    for case, nv, fx, tt, jj, _ in table:
        print(f"  {case:<32}{fmt(nv):>15}{fmt(fx):>15}{fmt(tt):>12}{fmt(jj):>12}")
    print("  (torch: nn.LayerNorm(d).half() / .bfloat16() as in the seed, F.rms_norm for RMS; both keep\n"
          "   fp32 statistics internally, which is why the seed's `.half()` works in torch)")
    print("  jln's error on fp16/bf16 output is the final rounding only: half an ulp of the output value\n"
          "  (fp16: 9.8e-4 for |y| in [2, 4); bf16: 7.8e-3 for |y| in [2, 4), 1.6e-2 in [4, 8))")
    for case, nv, _fx, _tt, jj, tol in table:
        check(f"{case}: jln error {fmt(jj)} <= {tol:g} (output rounding only)", jj <= tol)
        check(f"{case}: naive formula error {fmt(nv)} is at least 4x jln's", nv >= 4 * max(jj, 1e-7))
    check("flax's fast variance is off on x = 1e4 + N(0,1) (error > 1)", table[2][2] > 1.0)

    # error vs offset, fp32
    offsets = [1.0, 10.0, 100.0, 1e3, 1e4, 1e5]
    curves = {"naive E[x²]−E[x]²": [], "flax default": [], "torch": [], "jln": []}
    for off in offsets:
        x = (off + g).astype(jnp.float32)
        r = ref_ln(np.asarray(x))
        with torch.no_grad():
            t32 = torch.nn.LayerNorm(D)(torch.from_numpy(np.array(x)))
        for k, y in zip(curves, (naive_ln(x), flax_ln(x), t32, jln.layer_norm(x)), strict=True):
            curves[k].append(err(y, r))
    print("\nfp32 LayerNorm error as the offset grows (x = offset + N(0,1)):")
    print(f"  {'offset':<20}" + "".join(f"{o:>10g}" for o in offsets))
    for k, v in curves.items():
        print(f"  {k:<20}" + "".join(f"{fmt(e):>10}" for e in v))
    check("jln stays within 1e-5 of float64 at every offset up to 1e5",
          all(e <= 1e-5 for e in curves["jln"]))

    fig, axs = plt.subplots(1, 2, figsize=(11, 4))
    cap = 1e3
    labels = ["LN fp16\n|x|~300", "RMS fp16\n|x|~300", "LN fp32\n1e4+N(0,1)", "LN fp32\n300+0.03N",
              "LN bf16\n8+N(0,1)", "RMS bf16\n2N(0,1)"]
    idx = np.arange(len(table))
    for j, (name, col) in enumerate((("naive formula", 1), ("flax default", 2), ("torch", 3), ("jln", 4))):
        vals = [c[col] for c in table]
        h = [cap if (v is not None and not np.isfinite(v)) else (v if v is not None else np.nan) for v in vals]
        bars = axs[0].bar(idx + (j - 1.5) * 0.2, h, 0.2, label=name)
        for b, v in zip(bars, vals, strict=True):
            if v is not None and not np.isfinite(v):
                axs[0].text(b.get_x() + b.get_width() / 2, cap * 1.3, "NaN\ninf", ha="center", fontsize=6)
    axs[0].set_yscale("log")
    axs[0].set_ylim(1e-8, cap * 20)
    axs[0].set_xticks(idx, labels, fontsize=7)
    axs[0].set_ylabel("max |error| vs float64")
    axs[0].set_title("naive formulas vs jln (bars at the top: NaN/inf)")
    axs[0].legend(fontsize=7, loc="upper right", ncol=2)
    for (k, v), style in zip(curves.items(), ("x--", "o-", "s-", "^-"), strict=True):
        lab = k + (" (NaN at the cap)" if any(not np.isfinite(e) for e in v) else "")
        axs[1].plot(offsets, [min(e, cap) for e in v], style, label=lab, markersize=8 if style == "x--" else 5)
    axs[1].set_xscale("log")
    axs[1].set_yscale("log")
    axs[1].set_xlabel("offset (x = offset + N(0,1), fp32)")
    axs[1].set_ylabel("max |error| vs float64")
    axs[1].set_title("catastrophic cancellation in E[x²]−E[x]²")
    axs[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig("07_mixed_precision.png", dpi=85)
    print("\n   wrote 07_mixed_precision.png")

    print(f"\n{'all checks passed' if not FAILED else f'{len(FAILED)} check(s) FAILED: {FAILED}'}")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
