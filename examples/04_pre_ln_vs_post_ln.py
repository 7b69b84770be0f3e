"""Pre-LN vs Post-LN: small encoders from the seed's TransformerEncoderLayer, with and without warm-up.

Run from the repository root:  python examples/04_pre_ln_vs_post_ln.py
Writes 04_pre_ln_vs_post_ln.png to the current directory and exits non-zero if a check fails.

The seed's encoder layer is Post-LN (``x = LN(x + SA(x))``) and notes that Pre-LN
(``x = x + SA(LN(x))``, GPT-2, the first seed) is now preferred because it trains more stably.
Here stacks of ``jln.linen.TransformerEncoderLayer`` (norm_first False / True; d_model 32,
4 heads) at depths 2, 6 and 12 learn a synthetic task (each of 8 random vectors plus twice the
sequence mean) with Adam at a largish learning rate (2e-2), with a linear warm-up and without one. Layers are stacked
with ``nn.scan`` and the whole run is one ``lax.scan`` (both schedules ``vmap``-ed), so each
(depth, variant) compiles once.
"""

from __future__ import annotations

import sys
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import matplotlib
import numpy as np
import optax

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import jln.linen as jnn  # noqa: E402

FAILED: list[str] = []
T, F, D, HEADS, FF = 8, 8, 32, 4, 64
BATCH, STEPS, WARMUP = 16, 200, 100
PEAK_LR = 2e-2


def TARGET(x: jax.Array) -> jax.Array:  # noqa: N802
    """Each position's target: its own vector plus twice the sequence mean (needs attention)."""
    return x + 2.0 * jnp.mean(x, axis=1, keepdims=True)

DEPTHS = (2, 6, 12)


def check(name: str, ok: bool) -> None:
    print(f"  [{'ok' if ok else 'FAIL'}] {name}")
    if not ok:
        FAILED.append(name)


class Block(nn.Module):
    norm_first: bool

    @nn.compact
    def __call__(self, h: jax.Array, active: jax.Array) -> tuple[jax.Array, None]:
        layer = jnn.TransformerEncoderLayer(
            d_model=D, nhead=HEADS, dim_feedforward=FF, dropout=0.0, norm_first=self.norm_first, batch_first=True
        )
        # layers past the model's depth pass h through (and get zero gradients)
        return jnp.where(active, layer(h), h), None


class Encoder(nn.Module):
    """Up to ``max(DEPTHS)`` encoder layers; ``active`` [L] switches the deeper ones off."""

    norm_first: bool

    @nn.compact
    def __call__(self, x: jax.Array, active: jax.Array) -> jax.Array:
        pos = self.param("pos", nn.initializers.normal(0.02), (T, D))
        h = nn.Dense(D)(x) + pos
        stack = nn.scan(Block, variable_axes={"params": 0}, split_rngs={"params": True}, length=max(DEPTHS))
        h, _ = stack(self.norm_first)(h, active)
        if self.norm_first:  # Pre-LN stacks end with a final LayerNorm (GPT-2)
            h = jnn.LayerNorm()(h)
        return nn.Dense(F)(h)


def batch(key: jax.Array) -> tuple[jax.Array, jax.Array]:
    x = jax.random.normal(key, (BATCH, T, F))
    return x, TARGET(x)


def run(norm_first: bool, masks: jax.Array, schedules: jax.Array) -> jax.Array:
    """Train one model per (depth mask, schedule) pair, all vmapped in one compiled scan.

    Every run starts from the same initial parameters (deeper layers of shallow models unused).
    Returns losses [n_depths, n_schedules, STEPS].
    """
    model = Encoder(norm_first)
    params = jax.jit(model.init)(jax.random.key(0), jnp.zeros((1, T, F)), jnp.ones(max(DEPTHS), bool))
    adam = optax.scale_by_adam()

    def loss_fn(p: dict, active: jax.Array, x: jax.Array, y: jax.Array) -> jax.Array:
        return jnp.mean((model.apply(p, x, active) - y) ** 2)

    def train(active: jax.Array, lrs: jax.Array) -> jax.Array:
        def step(carry: tuple, inp: tuple) -> tuple:
            p, s = carry
            key, lr = inp
            loss, g = jax.value_and_grad(loss_fn)(p, active, *batch(key))
            u, s = adam.update(g, s, p)
            p = jax.tree_util.tree_map(lambda a, b: a - lr * b, p, u)
            return (p, s), loss

        keys = jax.random.split(jax.random.key(1), STEPS)
        _, losses = jax.lax.scan(step, (params, adam.init(params)), (keys, lrs))
        return losses

    per_schedule = jax.vmap(train, in_axes=(None, 0))
    return jax.jit(jax.vmap(per_schedule, in_axes=(0, None)))(masks, schedules)


def main() -> int:
    t0 = time.perf_counter()
    steps = jnp.arange(STEPS)
    schedules = jnp.stack([
        jnp.minimum(1.0, (steps + 1) / WARMUP) * PEAK_LR,  # linear warm-up, then constant
        jnp.full((STEPS,), PEAK_LR),                         # no warm-up
    ])
    names = ("warm-up", "no warm-up")
    results = {}
    print(f"Adam, peak lr {PEAK_LR}, {STEPS} steps, linear warm-up over {WARMUP} steps or none; "
          f"batch {BATCH}; task: y_t = x_t + 2 mean_s(x_s), MSE")
    masks = jnp.arange(max(DEPTHS))[None, :] < jnp.array(DEPTHS)[:, None]
    for norm_first in (False, True):
        out = np.asarray(run(norm_first, masks, schedules))
        for j, depth in enumerate(DEPTHS):
            results[(depth, norm_first)] = out[j]
    print(f"  {'depth':<7}{'variant':<9}{'schedule':<12}{'first-5 loss':>13}{'final loss':>12}{'max after 50':>14}")
    for depth in DEPTHS:
        for norm_first in (False, True):
            losses = results[(depth, norm_first)]
            for i, nm in enumerate(names):
                print(f"  {depth:<7}{'Pre-LN' if norm_first else 'Post-LN':<9}{nm:<12}{losses[i, :5].mean():>13.3f}"
                      f"{losses[i, -20:].mean():>12.4f}{losses[i, 50:].max():>14.3f}")
    print(f"  ({time.perf_counter() - t0:.1f} s for {len(results) * 2} training runs; final = mean of the last 20 steps)")

    print("\nWhat happened:")
    final = {k: v[:, -20:].mean(axis=1) for k, v in results.items()}
    start = {k: v[:, :5].mean(axis=1) for k, v in results.items()}
    for depth in DEPTHS:
        for nf in (False, True):
            fin, st = final[(depth, nf)], start[(depth, nf)]
            tag = f"{'Pre-LN' if nf else 'Post-LN'} depth {depth:2d} without warm-up:"
            if not np.isfinite(fin[1]) or fin[1] > 0.5 * st[1]:
                print(f"  {tag} FAILS (diverged or stalled: {fin[1]:.3f}; with warm-up {fin[0]:.3f})")
            elif fin[1] > 1.5 * fin[0]:
                print(f"  {tag} clearly worse than with warm-up ({fin[1]:.3f} vs {fin[0]:.3f})")
            else:
                print(f"  {tag} fine ({fin[1]:.3f}; with warm-up {fin[0]:.3f})")
    deep = max(DEPTHS)
    for depth in DEPTHS:
        fin, st = final[(depth, True)], start[(depth, True)]
        check(f"Pre-LN depth {depth} learns with and without warm-up (final < 10% of the first loss)",
              bool(np.all(np.isfinite(fin)) and np.all(fin < 0.1 * st)))
    check(f"depth {deep}: warm-up rescues Post-LN (final loss with warm-up < half of without)",
          bool(final[(deep, False)][0] < 0.5 * final[(deep, False)][1]))
    check(f"depth {deep}, no warm-up: Pre-LN ends below Post-LN (seed: Pre-LN is more stable)",
          bool(final[(deep, True)][1] < final[(deep, False)][1]))

    fig, axs = plt.subplots(1, len(DEPTHS), figsize=(12, 3.6), sharey=True)
    for ax, depth in zip(axs, DEPTHS, strict=True):
        for nf, color in ((False, "tab:red"), (True, "tab:blue")):
            for i, (nm, ls) in enumerate(zip(names, ("-", "--"), strict=True)):
                lab = f"{'Pre' if nf else 'Post'}-LN, {nm}"
                ax.plot(np.minimum(results[(depth, nf)][i], 10.0), ls, color=color, label=lab, linewidth=1.2)
        ax.set_yscale("log")
        ax.set_title(f"{depth} layers, d_model {D}")
        ax.set_xlabel("step")
        ax.axvline(WARMUP, color="gray", linewidth=0.6, linestyle=":")
    axs[0].set_ylabel("training MSE")
    axs[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig("04_pre_ln_vs_post_ln.png", dpi=85)
    print("\n   wrote 04_pre_ln_vs_post_ln.png")

    print(f"\n{'all checks passed' if not FAILED else f'{len(FAILED)} check(s) FAILED: {FAILED}'}")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
