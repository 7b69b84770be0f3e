"""LayerNorm vs BatchNorm: the seed's comparison table, each row checked by running code.

Run from the repository root:  python examples/03_ln_vs_bn.py
Writes 03_ln_vs_bn.png to the current directory and exits non-zero if a check fails.

LayerNorm is ``jln`` (function and ``jln.linen.LayerNorm``); BatchNorm is ``flax.linen.BatchNorm``.
"""

from __future__ import annotations

import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import jln  # noqa: E402
import jln.linen  # noqa: E402

FAILED: list[str] = []
D = 8  # features / channels


def check(name: str, ok: bool) -> bool:
    print(f"  [{'ok' if ok else 'FAIL'}] {name}")
    if not ok:
        FAILED.append(name)
    return ok


def bn_train(x: jax.Array, variables: dict) -> tuple[jax.Array, dict]:
    """BatchNorm in training mode: batch statistics, running averages updated."""
    y, upd = nn.BatchNorm(use_running_average=False, momentum=0.9, epsilon=1e-5).apply(
        variables, x, mutable=["batch_stats"])
    return y, {**variables, **upd}


def bn_eval(x: jax.Array, variables: dict) -> jax.Array:
    return nn.BatchNorm(use_running_average=True, momentum=0.9, epsilon=1e-5).apply(variables, x)


def main() -> int:
    k = jax.random.split(jax.random.key(0), 4)
    sample = 3.0 + 2.0 * jax.random.normal(k[0], (1, D))          # the sample we follow
    others = 5.0 * jax.random.normal(k[1], (64, D)) - 1.0           # possible batch companions
    bn_vars = nn.BatchNorm(use_running_average=False).init(k[2], others[:4])
    print(f"BatchNorm variables: {jax.tree_util.tree_map(lambda a: a.shape, bn_vars)}")
    rows: list[tuple[str, str, str, bool]] = []

    # Row 1: which axis is normalized
    print("\nRow 1. Normalized axis")
    batch = jnp.concatenate([sample, others[:15]])
    ln_y = jln.layer_norm(batch)
    bn_y, _ = bn_train(batch, bn_vars)
    ok = check("LN: every sample (row) has mean 0, var 1 over its features",
               bool(jnp.allclose(ln_y.mean(1), 0, atol=1e-5) and jnp.allclose(ln_y.var(1), 1, atol=1e-3)))
    ok &= check("BN: every feature (column) has mean 0, var 1 over the batch",
                bool(jnp.allclose(bn_y.mean(0), 0, atol=1e-5) and jnp.allclose(bn_y.var(0), 1, atol=1e-3)))
    rows.append(("normalized axis", "features (per sample)", "batch (per feature)", ok))

    # Row 2: sensitivity to the batch and its size
    print("\nRow 2. Sensitivity to the batch (the same sample, different companions / batch sizes)")
    sizes = [2, 4, 8, 16, 32, 64]
    ln_out, bn_out = [], []
    for n in sizes:
        b = jnp.concatenate([sample, others[: n - 1]])
        ln_out.append(np.asarray(jln.layer_norm(b)[0]))
        bn_out.append(np.asarray(bn_train(b, bn_vars)[0][0]))
    ln_out, bn_out = np.stack(ln_out), np.stack(bn_out)
    alone = np.asarray(jln.layer_norm(sample)[0])
    ln_spread = float(np.abs(ln_out - alone).max())
    bn_spread = float(np.abs(bn_out - bn_out[-1]).max())
    bn1 = np.asarray(bn_train(sample, bn_vars)[0][0])
    print(f"   LN output of the sample: max change over batch sizes {sizes} (and alone) = {ln_spread:.1e}")
    print(f"   BN output of the sample: max change over the same batches = {bn_spread:.3f}")
    print(f"   BN with a batch of 1: output = {[f'{float(u):.3f}' for u in bn1]} (all information gone)")
    ok = check("LN output of a sample does not depend on the batch", ln_spread < 1e-6)
    ok &= check("BN output of a sample changes with the batch", bn_spread > 0.1)
    ok &= check("BN with batch size 1 outputs zeros", bool(np.abs(bn1).max() < 1e-3))
    rows.append(("batch-size sensitivity", "none", "strong (bs=1: zeros)", ok))

    # Row 3: variable-length sequences (padding)
    print("\nRow 3. Variable-length sequences: [B=2, T=6, D] with the second sequence padded from 3 to 6")
    seq = jax.random.normal(k[3], (2, 6, D)) + 1.0
    pad_a = seq.at[1, 3:].set(0.0)          # zero padding
    pad_b = seq.at[1, 3:].set(7.0)          # some other padding value
    ln_a, ln_b = jln.layer_norm(pad_a), jln.layer_norm(pad_b)
    flat = lambda z: z.reshape(-1, D)  # noqa: E731  BN over (batch, time) positions
    bn_a = bn_train(flat(pad_a), bn_vars)[0].reshape(2, 6, D)
    bn_b = bn_train(flat(pad_b), bn_vars)[0].reshape(2, 6, D)
    ln_d = float(jnp.abs(ln_a[0] - ln_b[0]).max())
    bn_d = float(jnp.abs(bn_a[0] - bn_b[0]).max())
    print(f"   real tokens of sequence 0 when sequence 1's padding changes: LN max change {ln_d:.1e}, BN {bn_d:.3f}")
    ok = check("LN is unaffected by padding in other sequences", ln_d < 1e-6)
    ok &= check("BN's statistics see the padding", bn_d > 0.1)
    rows.append(("use case", "RNN / Transformer (variable length)", "CNN (fixed-size input)", ok))

    # Row 4: training vs inference
    print("\nRow 4. Training vs inference")
    v = bn_vars
    for i in range(20):  # a few training steps update BN's running averages
        _, v = bn_train(others[(i * 8) % 56:(i * 8) % 56 + 8], v)
    test = jnp.concatenate([sample, others[:7]])
    bn_tr = bn_train(test, v)[0][0]
    bn_ev = bn_eval(test, v)[0]
    lnm = jln.linen.LayerNorm()
    lnp = lnm.init(k[0], test)
    ln_tr = lnm.apply(lnp, test)[0]
    ln_ev = lnm.apply(lnp, test)[0]
    fmt = lambda z: "[" + ", ".join(f"{float(u):+.3f}" for u in z[:4]) + ", ...]"  # noqa: E731
    print(f"   BN sample 0: train {fmt(bn_tr)}  eval (running stats) {fmt(bn_ev)}")
    print(f"   LN sample 0: train {fmt(ln_tr)}  eval {fmt(ln_ev)}")
    ok = check("LN: train and inference outputs are identical", bool(jnp.array_equal(ln_tr, ln_ev)))
    ok &= check("BN: inference uses running averages, so outputs differ", float(jnp.abs(bn_tr - bn_ev).max()) > 0.1)
    rows.append(("train / inference", "identical", "running averages at inference", ok))

    # Row 5: parameter count
    print("\nRow 5. Parameters")
    n_ln = sum(a.size for a in jax.tree_util.tree_leaves(lnp["params"]))
    n_bn = sum(a.size for a in jax.tree_util.tree_leaves(bn_vars["params"]))
    print(f"   LN params {n_ln} = 2 x {D} features; BN params {n_bn} = 2 x {D} channels")
    ok = check("both have 2 x features learnable parameters", n_ln == 2 * D and n_bn == 2 * D)
    rows.append(("parameters", "2 x features", "2 x channels", ok))

    # Row 6: state to store
    print("\nRow 6. Memory / state")
    n_state = sum(a.size for a in jax.tree_util.tree_leaves(bn_vars["batch_stats"]))
    ln_cols = sorted(lnp)
    print(f"   LN variable collections {ln_cols}; BN also keeps batch_stats: {n_state} running numbers "
          "that must be updated every step and saved with the model")
    ok = check("LN keeps no running statistics, BN keeps 2 x channels",
               ln_cols == ["params"] and n_state == 2 * D)
    rows.append(("memory", "lower (no batch statistics)", "higher (stores batch statistics)", ok))

    print("\nThe seed's table, each row checked above:")
    w = (24, 37, 34)
    print(f"  {'property':<{w[0]}}{'LayerNorm':<{w[1]}}{'BatchNorm':<{w[2]}}checked")
    for name, ln_txt, bn_txt, ok in rows:
        print(f"  {name:<{w[0]}}{ln_txt:<{w[1]}}{bn_txt:<{w[2]}}{'✓' if ok else '✗'}")

    fig, axs = plt.subplots(1, 2, figsize=(10, 3.8))
    f = 0
    axs[0].plot(sizes, ln_out[:, f], "o-", label="LayerNorm (jln)")
    axs[0].plot(sizes, bn_out[:, f], "s-", label="BatchNorm (train mode)")
    axs[0].set_xscale("log", base=2)
    axs[0].set_xlabel("batch size (same sample, other companions)")
    axs[0].set_ylabel(f"output feature {f} of the sample")
    axs[0].set_title("LN ignores the batch, BN does not")
    axs[0].legend(fontsize=8)
    idx = np.arange(D)
    axs[1].bar(idx - 0.2, np.asarray(bn_tr), 0.4, label="BN train (batch stats)")
    axs[1].bar(idx + 0.2, np.asarray(bn_ev), 0.4, label="BN eval (running stats)")
    axs[1].plot(idx, np.asarray(ln_tr), "k*", markersize=10, label="LN train = eval")
    axs[1].set_xlabel("feature")
    axs[1].set_title("train vs inference, same sample")
    axs[1].set_ylim(top=float(max(bn_tr.max(), bn_ev.max())) + 1.2)
    axs[1].legend(fontsize=7, loc="upper center", ncol=2)
    fig.tight_layout()
    fig.savefig("03_ln_vs_bn.png", dpi=85)
    print("\n   wrote 03_ln_vs_bn.png")

    print(f"\n{'all checks passed' if not FAILED else f'{len(FAILED)} check(s) FAILED: {FAILED}'}")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
