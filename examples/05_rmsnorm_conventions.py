"""RMSNorm vs LayerNorm, and the RMSNorm conventions side by side in bfloat16.

Run from the repository root:  python examples/05_rmsnorm_conventions.py
Writes 05_rmsnorm_conventions.png to the current directory and exits non-zero if a check fails.

1. RMSNorm (the seed's "no mean centring") vs LayerNorm: equal on zero-mean rows, different once
   rows carry an offset; LN is shift-invariant, RMSNorm only scale-invariant.
2. The same bf16 input and weight (stored in fp32, then in bf16 as a bf16 checkpoint) through
   torch's ``F.rms_norm``, LLaMA, Gemma, T5 and the seed's clamp form. Each jln convention is compared with its reference, computed here with
   torch (``F.rms_norm`` and the transformers formulas written out in torch), and the
   conventions are compared with each other: they disagree on a large share of bf16 elements
   while each jln convention matches its own reference on (almost) all of them.
"""

from __future__ import annotations

import sys
import warnings

import jax
import jax.numpy as jnp
import matplotlib
import numpy as np
import torch

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import jln  # noqa: E402

FAILED: list[str] = []
# torch warns that a bf16 input with an fp32 weight cannot use its fused kernel; expected here.
warnings.filterwarnings("ignore", message="Mismatch dtype between input and weight")
EPS = 1e-6
B, T, D = 4, 64, 1024


def check(name: str, ok: bool) -> None:
    print(f"  [{'ok' if ok else 'FAIL'}] {name}")
    if not ok:
        FAILED.append(name)


# ---- torch references (the formulas each library ships, restated in torch) ------------------
def ref_torch(x, w):  # noqa: ANN001, ANN201
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), w, EPS)  # fp32 w, output x.dtype


def ref_llama(x, w):  # noqa: ANN001, ANN201  transformers LlamaRMSNorm
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS)
    return w * h.to(x.dtype)


def ref_gemma(x, w):  # noqa: ANN001, ANN201  transformers GemmaRMSNorm (w starts at 0)
    o = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + EPS)
    return (o * (1.0 + w.float())).type_as(x)


def ref_t5(x, w):  # noqa: ANN001, ANN201  transformers T5LayerNorm
    var = x.to(torch.float32).pow(2).mean(-1, keepdim=True)
    h = x * torch.rsqrt(var + EPS)
    if w.dtype in (torch.float16, torch.bfloat16):
        h = h.to(w.dtype)
    return w * h


def ref_seed(x, w):  # noqa: ANN001, ANN201  the seed's RMSNorm.forward (eps=1e-8 in the seed)
    norm = torch.norm(x, dim=-1, keepdim=True) * x.shape[-1] ** -0.5
    return x / norm.clamp(min=EPS) * w


def wdt_j(wdt: torch.dtype) -> jnp.dtype:
    return jnp.dtype(jnp.bfloat16) if wdt == torch.bfloat16 else jnp.dtype(jnp.float32)


def to_np(t: torch.Tensor) -> np.ndarray:
    return t.float().numpy()


def mismatches(y: jax.Array, r: torch.Tensor) -> int:
    """Elements where jln and the reference differ: exactly for bf16 outputs; by more than 4 ulp
    for float32 outputs (two frameworks' float32 reductions never agree in every last bit)."""
    yj, rr = np.asarray(y.astype(jnp.float32)), to_np(r)
    if r.dtype == torch.bfloat16:
        return int(np.sum(yj != rr))
    return int(np.sum(np.abs(yj - rr) > 4 * np.spacing(np.abs(rr).astype(np.float32))))


def main() -> int:
    # ---- 1. RMSNorm vs LayerNorm ----------------------------------------------------------
    print("1. RMSNorm vs LayerNorm (float32, d = 64)")
    z = jax.random.normal(jax.random.key(0), (256, 64))
    z = z - z.mean(-1, keepdims=True)  # zero-mean rows
    offsets = [0.0, 0.1, 0.3, 1.0, 3.0, 10.0]
    gaps = []
    for c in offsets:
        gaps.append(float(jnp.abs(jln.rms_norm(z + c, eps=EPS) - jln.layer_norm(z + c, eps=EPS)).max()))
        print(f"   row offset {c:5.1f}: max |RMSNorm - LayerNorm| = {gaps[-1]:.2e}")
    check("RMSNorm == LayerNorm on zero-mean rows", gaps[0] < 1e-5)
    check("they differ once rows carry an offset", gaps[-1] > 0.5)
    sh_ln = float(jnp.abs(jln.layer_norm(z + 5.0) - jln.layer_norm(z)).max())
    sh_rms = float(jnp.abs(jln.rms_norm(z + 5.0) - jln.rms_norm(z)).max())
    sc_rms = float(jnp.abs(jln.rms_norm(3.0 * z) - jln.rms_norm(z)).max())
    print(f"   shift x+5: LN changes by {sh_ln:.1e}, RMSNorm by {sh_rms:.2f};  scale 3x: RMSNorm changes by {sc_rms:.1e}")
    check("LN is shift-invariant, RMSNorm is not; RMSNorm is scale-invariant",
          sh_ln < 1e-4 and sh_rms > 0.5 and sc_rms < 1e-5)

    # ---- 2. conventions in bf16 ------------------------------------------------------------
    print(f"\n2. RMSNorm conventions on the same bf16 input [{B}, {T}, {D}], eps={EPS}")
    torch.manual_seed(0)
    xt = (torch.randn(B, T, D) * 2.0 + 0.3).to(torch.bfloat16)
    x = jnp.asarray(xt.float().numpy()).astype(jnp.bfloat16)  # exact: bf16 -> f32 -> bf16
    wg32 = 0.1 * torch.randn(D)  # a trained-looking weight stored Gemma's way (w = 0 is identity)
    n = x.size
    results = {}
    for wdt in (torch.float32, torch.bfloat16):
        wg = wg32.to(wdt)
        wt = (1.0 + wg.float()).to(wdt)  # the same effective weight for the other conventions
        w, wgj = jnp.asarray(wt.float().numpy()).astype(wdt_j(wdt)), jnp.asarray(wg.float().numpy()).astype(wdt_j(wdt))
        print(f"\n   weights stored in {str(wdt).replace('torch.', '')}:")
        cases = {  # name: (jln output, torch reference)
            "torch": (jln.rms_norm(x, w, eps=EPS, convention="torch"), ref_torch(xt, wt)),
            "llama": (jln.rms_norm(x, w, eps=EPS, convention="llama"), ref_llama(xt, wt)),
            "gemma": (jln.rms_norm(x, wgj, eps=EPS, convention="gemma"), ref_gemma(xt, wg)),
            "t5": (jln.rms_norm(x, w, eps=EPS, convention="t5"), ref_t5(xt, wt)),
            "seed": (jln.rms_norm(x, w, eps=EPS, convention="seed"), ref_seed(xt, wt)),
        }
        print(f"   {'convention':<11}{'jln dtype':<11}{'ref dtype':<16}{'mismatches vs ref*':<24}"
              f"{'max |diff| vs ref':<19}{'bf16 elements differing from torch order'}")
        base = to_np(cases["torch"][1].to(torch.bfloat16))
        vs_ref, vs_torch = {}, {}
        for name, (y, r) in cases.items():
            mism = mismatches(y, r)
            vs_ref[name] = mism
            # cast to bf16 (what the next bf16 layer sees) and count differences to torch's order
            yb = np.asarray(y.astype(jnp.bfloat16).astype(jnp.float32))
            vs_torch[name] = int(np.sum(yb != base))
            maxd = np.abs(np.asarray(y.astype(jnp.float32)) - to_np(r)).max()
            print(f"   {name:<11}{str(y.dtype):<11}{str(r.dtype):<16}{mism:>8} / {n} ({100 * mism / n:5.3f}%)  "
                  f"{maxd:<19.2e}{vs_torch[name]:>8} ({100 * vs_torch[name] / n:4.1f}%)")
            dtype_ok = str(y.dtype) == str(r.dtype).replace("torch.", "")
            check(f"{name}: output dtype {y.dtype} matches the reference's", dtype_ok)
            check(f"{name}: matches its reference on >= 99.99% of elements", mism <= n * 1e-4)
        results[wdt] = (vs_ref, vs_torch)
    print("   * exact for bf16 outputs; more than 4 ulp for float32 outputs (float32 reductions in two\n"
          "     frameworks differ in the last bits)")
    vs_ref, vs_torch = results[torch.bfloat16]
    check("LLaMA's order (cast, then weight) differs from torch's on > 10% of bf16 elements",
          results[torch.float32][1]["llama"] > 0.10 * n and vs_torch["llama"] > 0.10 * n)
    check("bf16 checkpoint: Gemma's (1 + w) differs from a folded torch weight on > 10% of elements",
          vs_torch["gemma"] > 0.10 * n)

    fig, axs = plt.subplots(1, 2, figsize=(10, 3.8))
    axs[0].plot(offsets, [max(g, 1e-8) for g in gaps], "o-")
    axs[0].set_xscale("symlog", linthresh=0.1)
    axs[0].set_yscale("log")
    axs[0].set_xlabel("offset added to zero-mean rows")
    axs[0].set_ylabel("max |RMSNorm(x) - LayerNorm(x)|")
    axs[0].set_title("RMSNorm = LayerNorm only without a mean")
    names = list(cases)
    idx = np.arange(len(names))
    axs[1].bar(idx - 0.2, [100 * vs_torch[k] / n for k in names], 0.4, label="differs from torch.nn.functional.rms_norm")
    axs[1].bar(idx + 0.2, [100 * vs_ref[k] / n for k in names], 0.4, label="jln differs from its own reference")
    for i, k in enumerate(names):
        axs[1].text(i + 0.2, 100 * vs_ref[k] / n + 0.5, str(vs_ref[k]), ha="center", fontsize=8)
    axs[1].set_xticks(idx, names)
    axs[1].set_ylabel(f"% of {n} elements")
    axs[1].set_title("bf16 x, bf16 weights: conventions differ,\neach jln convention matches its reference")
    axs[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig("05_rmsnorm_conventions.png", dpi=85)
    print("\n   wrote 05_rmsnorm_conventions.png")

    print(f"\n{'all checks passed' if not FAILED else f'{len(FAILED)} check(s) FAILED: {FAILED}'}")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
