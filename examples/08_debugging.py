"""Debugging LayerNorm in JAX: the seed's gradient checks and statistics monitoring, with jln.

Run from the repository root:  python examples/08_debugging.py
Writes 08_debugging.png to the current directory and exits non-zero if a check fails.

1. The seed's ``print(norm.weight.grad)`` / ``print(norm.bias.grad)`` in JAX: ``jax.grad`` with
   respect to ``jln.linen.LayerNorm``'s ``scale`` and ``bias``, equal to torch's ``.grad`` for the
   same loss; the seed's initialisation (gamma = 1, beta = 0) is the modules' default.
2. The seed's ``print(t.mean(), t.std())`` before and after LN as a Flax intermediate: every jln
   module built with ``monitor=True`` sows per-row in/out mean, variance and norm. A 4-layer
   Pre-LN encoder trains for a short run while the per-layer statistics are collected each step
   (``mutable=["intermediates"]``) and plotted: the residual stream entering each norm grows
   with depth (layer by layer), the norms' outputs stay at mean 0 and ||y|| / sqrt(d) ~ 1.
"""

from __future__ import annotations

import sys

import flax.linen as nn
import jax
import jax.numpy as jnp
import matplotlib
import numpy as np
import optax
import torch

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import jln.linen as jnn  # noqa: E402

FAILED: list[str] = []
B, T, D, LAYERS, STEPS = 16, 8, 32, 4, 150


def check(name: str, ok: bool) -> None:
    print(f"  [{'ok' if ok else 'FAIL'}] {name}")
    if not ok:
        FAILED.append(name)


class Encoder(nn.Module):
    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        h = nn.Dense(D)(x)
        for _ in range(LAYERS):
            h = jnn.TransformerEncoderLayer(d_model=D, nhead=4, dim_feedforward=64, dropout=0.0,
                                            norm_first=True, batch_first=True, monitor=True)(h)
        return nn.Dense(x.shape[-1])(jnn.LayerNorm(monitor=True)(h))


def main() -> int:
    k = jax.random.split(jax.random.key(0), 4)
    print("1. Gradients of LayerNorm's scale (torch weight) and bias, as the seed inspects them")
    x = jax.random.normal(k[0], (4, 6, D)) * 3.0 + 1.0
    target = jax.random.normal(k[1], (4, 6, D))
    ln = jnn.LayerNorm()
    params = ln.init(k[2], x)
    init_ok = bool(jnp.all(params["params"]["scale"] == 1) and jnp.all(params["params"]["bias"] == 0))
    check("default init is the seed's: scale (gamma) = 1, bias (beta) = 0", init_ok)

    def loss(p: dict) -> jax.Array:
        return jnp.mean((ln.apply(p, x) - target) ** 2)

    grads = jax.grad(loss)(params)["params"]
    print(f"   grads['scale'][:6] = {np.array2string(np.asarray(grads['scale'][:6]), precision=4)}  "
          "(torch: norm.weight.grad)")
    print(f"   grads['bias'][:6]  = {np.array2string(np.asarray(grads['bias'][:6]), precision=4)}  "
          "(torch: norm.bias.grad)")
    norm = torch.nn.LayerNorm(D)
    torch.nn.functional.mse_loss(norm(torch.from_numpy(np.array(x))), torch.from_numpy(np.array(target))).backward()
    dw, db = norm.weight.grad.numpy(), norm.bias.grad.numpy()
    print(f"   max |jax - torch|: scale {np.abs(np.asarray(grads['scale']) - dw).max():.1e}, "
          f"bias {np.abs(np.asarray(grads['bias']) - db).max():.1e}")
    check("jax.grad of scale/bias == torch's weight.grad/bias.grad",
          np.allclose(grads["scale"], dw, atol=1e-6) and np.allclose(grads["bias"], db, atol=1e-6))
    gn = {n: float(jnp.linalg.norm(g)) for n, g in grads.items()}
    print(f"   gradient norms: scale {gn['scale']:.4f}, bias {gn['bias']:.4f} "
          "(all zeros or NaN here would be the red flag the seed means)")
    check("gradients are finite and non-zero", all(np.isfinite(v) and v > 0 for v in gn.values()))

    print("\n   the monitor's numbers are the plain statistics of the norm's input and output:")
    m = jnn.LayerNorm(monitor=True)
    y, st = m.apply(params, x, mutable=["intermediates"])
    s = st["intermediates"]["stats"][0]
    xn, yn = np.asarray(x, np.float64), np.asarray(y, np.float64)
    ref = {"in_mean": xn.mean(-1), "in_var": xn.var(-1), "in_norm": np.linalg.norm(xn, axis=-1),
           "out_mean": yn.mean(-1), "out_var": yn.var(-1), "out_norm": np.linalg.norm(yn, axis=-1)}
    errs = {key: float(np.abs(np.asarray(s[key]) - v).max()) for key, v in ref.items()}
    print("   " + ", ".join(f"{key} {e:.1e}" for key, e in errs.items()) + "  (max |monitor - numpy float64|)")
    check("monitor statistics match numpy float64 on the same rows", max(errs.values()) < 1e-4)

    print(f"\n2. Statistics monitor during training: {LAYERS}-layer Pre-LN encoder, d_model {D}, {STEPS} Adam steps")
    model = Encoder()
    xs = jnp.zeros((B, T, 8))
    variables = jax.jit(model.init)(k[3], xs)
    params = {"params": variables["params"]}
    opt = optax.adam(3e-3)

    def loss_fn(p: dict, xx: jax.Array) -> tuple[jax.Array, dict]:
        out, st = model.apply(p, xx, mutable=["intermediates"])
        yy = xx + 2.0 * jnp.mean(xx, axis=1, keepdims=True)
        return jnp.mean((out - yy) ** 2), st["intermediates"]

    def step(carry: tuple, key: jax.Array) -> tuple:
        p, s_ = carry
        xx = jax.random.normal(key, (B, T, 8))
        (loss, inter), g = jax.value_and_grad(loss_fn, has_aux=True)(p, xx)
        u, s_ = opt.update(g, s_, p)
        p = optax.apply_updates(p, u)
        # reduce each norm's per-row statistics to one number per step
        stats = {}
        for i in range(LAYERS):
            layer = inter[f"TransformerEncoderLayer_{i}"]["stats"][0]
            for nm in ("norm1", "norm2"):
                stats[f"L{i}.{nm}"] = {kk: jnp.mean(v) for kk, v in layer[nm].items()}
        stats["final"] = {kk: jnp.mean(v) for kk, v in inter["LayerNorm_0"]["stats"][0].items()}
        return (p, s_), (loss, stats)

    run = jax.jit(lambda p0: jax.lax.scan(step, (p0, opt.init(p0)), jax.random.split(jax.random.key(5), STEPS)))
    _, (losses, stats) = run(params)
    losses = np.asarray(losses)
    stats = jax.tree_util.tree_map(np.asarray, stats)
    names = list(stats)
    print(f"   loss {losses[0]:.3f} -> {losses[-10:].mean():.4f}")
    print(f"   {'norm':<10}{'in ||x||/√d step 0':>20}{'-> last':>10}{'in var last':>13}{'out mean last':>15}"
          f"{'out ||y||/√d last':>19}")
    for nm in names:
        r = stats[nm]
        ratio = r["in_norm"] / r["sqrt_d"]
        print(f"   {nm:<10}{ratio[0]:>20.3f}{ratio[-1]:>10.3f}{r['in_var'][-1]:>13.3f}{r['out_mean'][-1]:>15.3f}"
              f"{(r['out_norm'] / r['sqrt_d'])[-1]:>19.3f}")
    first = stats[names[0]]
    check("the model learns (final loss < 25% of the first)", losses[-10:].mean() < 0.25 * losses[0])
    check("at step 0 every norm's output has mean ~0 and ||y||/sqrt(d) ~1 (scale=1, bias=0)",
          all(abs(stats[n]["out_mean"][0]) < 1e-4 and abs(stats[n]["out_norm"][0] / stats[n]["sqrt_d"][0] - 1) < 1e-3
              for n in names))
    grow = [stats[n]["in_norm"][-1] / stats[n]["sqrt_d"][-1] for n in names if n.startswith("L")]
    check("the Pre-LN residual stream entering the norms grows with depth (last layer > first)",
          grow[-1] > grow[0])
    del first

    fig, axs = plt.subplots(1, 3, figsize=(13, 3.8))
    cmap = plt.get_cmap("viridis")
    for j, nm in enumerate(names):
        r = stats[nm]
        c = cmap(j / (len(names) - 1))
        axs[0].plot(r["in_mean"], color=c, label=nm)
        axs[0].plot(r["out_mean"], color=c, linestyle="--")
        axs[1].plot(r["in_var"], color=c)
        axs[1].plot(r["out_var"], color=c, linestyle="--")
        axs[2].plot(r["in_norm"] / r["sqrt_d"], color=c)
        axs[2].plot(r["out_norm"] / r["sqrt_d"], color=c, linestyle="--")
    axs[0].set_title("row mean (solid: norm input, dashed: output)", fontsize=9)
    axs[1].set_title("row variance", fontsize=9)
    axs[1].set_yscale("log")
    axs[2].set_title("||x|| / √d", fontsize=9)
    axs[2].set_yscale("log")
    for ax in axs:
        ax.set_xlabel("training step")
    axs[0].legend(fontsize=6, ncol=2)
    fig.suptitle(f"statistics monitor (monitor=True), {LAYERS}-layer Pre-LN encoder", fontsize=10)
    fig.tight_layout()
    fig.savefig("08_debugging.png", dpi=85)
    print("\n   wrote 08_debugging.png")

    print(f"\n{'all checks passed' if not FAILED else f'{len(FAILED)} check(s) FAILED: {FAILED}'}")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
