"""Adaptive LayerNorm: the seed's AdaptiveLN and DiT's adaLN-Zero on a small conditional task.

Run from the repository root:  python examples/06_adaptive_ln.py
Writes 06_adaptive_ln.png to the current directory and exits non-zero if a check fails.

1. ``jln.linen.AdaptiveLayerNorm`` is the seed's ``AdaptiveLN`` (``LN(x) * (1 + gamma) + beta``,
   ``gamma, beta = proj(cond).chunk(2)``): same numbers as the seed's torch class with copied
   weights, and exactly a LayerNorm when the projection is zero.
2. DiT's adaLN-Zero: ``AdaLNZero`` returns LN(x) and zero gates at init; ``DiTBlock`` is the
   identity at init.
3. A class-conditional regression (target ``LN(x) * s_k + t_k`` for class k): a plain LayerNorm
   cannot see the class; the seed's AdaptiveLN and a DiT block stack learn it.
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

import jln  # noqa: E402
import jln.linen as jnn  # noqa: E402

FAILED: list[str] = []
B, T, D, CLASSES, STEPS = 32, 8, 16, 4, 200


def check(name: str, ok: bool) -> None:
    print(f"  [{'ok' if ok else 'FAIL'}] {name}")
    if not ok:
        FAILED.append(name)


class SeedAdaptiveLN(torch.nn.Module):
    """The seed's AdaptiveLN, verbatim except that cond broadcasts over the token axis."""

    def __init__(self, d_model: int, condition_dim: int) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(condition_dim, 2 * d_model)
        self.ln = torch.nn.LayerNorm(d_model)

    def forward(self, x: torch.Tensor, condition: torch.Tensor) -> torch.Tensor:
        gamma, beta = self.proj(condition).chunk(2, dim=-1)
        return self.ln(x) * (1 + gamma[:, None]) + beta[:, None]


class Plain(nn.Module):
    """No conditioning: LayerNorm then Dense (cannot know the class)."""

    @nn.compact
    def __call__(self, x: jax.Array, k: jax.Array) -> jax.Array:
        del k
        return nn.Dense(D)(jnn.LayerNorm()(x))


class SeedAdaLN(nn.Module):
    """The seed's AdaptiveLN conditioned on a class embedding, then Dense."""

    @nn.compact
    def __call__(self, x: jax.Array, k: jax.Array) -> jax.Array:
        c = nn.Embed(CLASSES, 8)(k)
        return nn.Dense(D)(jnn.AdaptiveLayerNorm(features=D)(x, c))


class DiT(nn.Module):
    """Two DiT blocks (adaLN-Zero) conditioned on a class embedding, then Dense."""

    @nn.compact
    def __call__(self, x: jax.Array, k: jax.Array) -> jax.Array:
        c = nn.Embed(CLASSES, D)(k)
        for _ in range(2):
            x = jnn.DiTBlock(hidden_size=D, num_heads=2, mlp_ratio=2.0)(x, c)
        return nn.Dense(D)(x)


def main() -> int:
    keys = jax.random.split(jax.random.key(0), 8)

    print("1. The seed's AdaptiveLN")
    x = jax.random.normal(keys[0], (B, T, D)) * 2.0 + 0.5
    cond = jax.random.normal(keys[1], (B, 8))
    m = jnn.AdaptiveLayerNorm(features=D)
    p = m.init(keys[2], x, cond)
    print(f"   params: {jax.tree_util.tree_map(lambda a: a.shape, p['params'])}")
    torch.manual_seed(0)
    tm = SeedAdaptiveLN(D, 8)
    with torch.no_grad():
        tm.ln.weight.normal_()
        tm.ln.bias.normal_()
        ref = tm(torch.from_numpy(np.array(x)), torch.from_numpy(np.array(cond))).numpy()
    tp = {"params": {
        "proj": {"kernel": jnp.asarray(tm.proj.weight.detach().numpy().T), "bias": jnp.asarray(tm.proj.bias.detach().numpy())},
        "norm": {"scale": jnp.asarray(tm.ln.weight.detach().numpy()), "bias": jnp.asarray(tm.ln.bias.detach().numpy())},
    }}
    y = np.asarray(m.apply(tp, x, cond))
    print(f"   vs the seed's torch AdaptiveLN with the same weights: max |diff| = {np.abs(y - ref).max():.1e}")
    check("jln.linen.AdaptiveLayerNorm == the seed's AdaptiveLN (torch)", np.allclose(y, ref, atol=1e-5))
    zp = jax.tree_util.tree_map(jnp.zeros_like, p)
    zp["params"]["norm"] = p["params"]["norm"]
    y0 = m.apply(zp, x, cond)
    check("with a zero projection it is exactly LayerNorm", bool(jnp.allclose(y0, jln.layer_norm(x), atol=1e-6)))

    print("\n2. DiT's adaLN-Zero at initialisation")
    emb = jax.random.normal(keys[3], (B, D))
    z = jnn.AdaLNZero(features=D)
    zv = z.init(keys[4], x, emb)
    x_mod, gate_msa, shift_mlp, scale_mlp, gate_mlp = z.apply(zv, x, emb)
    print(f"   AdaLNZero: linear kernel all zero: {bool(jnp.all(zv['params']['linear']['kernel'] == 0))}; "
          f"|gates| max {float(jnp.abs(jnp.stack([gate_msa, gate_mlp])).max()):.1e}")
    check("AdaLNZero at init: x_mod == LN(x) (eps 1e-6, no affine), gates == 0",
          bool(jnp.allclose(x_mod, jln.layer_norm(x, eps=1e-6), atol=1e-6))
          and bool(jnp.all(gate_msa == 0)) and bool(jnp.all(gate_mlp == 0)))
    blk = jnn.DiTBlock(hidden_size=D, num_heads=2)
    bv = blk.init(keys[5], x, emb)
    out = blk.apply(bv, x, emb)
    print(f"   DiTBlock at init: max |block(x) - x| = {float(jnp.abs(out - x).max()):.1e}")
    check("DiTBlock is the identity at init", bool(jnp.array_equal(out, x)))

    print(f"\n3. Class-conditional regression: y = LN(x) * s_k + t_k, {CLASSES} classes, d={D}, {STEPS} Adam steps")
    s_k = 1.0 + jax.random.normal(keys[6], (CLASSES, D))
    t_k = jax.random.normal(keys[7], (CLASSES, D))

    def data(key: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        k1, k2 = jax.random.split(key)
        xx = jax.random.normal(k1, (B, T, D))
        kk = jax.random.randint(k2, (B,), 0, CLASSES)
        return xx, kk, jln.layer_norm(xx) * s_k[kk][:, None] + t_k[kk][:, None]

    curves, gate_norms = {}, None
    for name, model in (("plain LayerNorm", Plain()), ("seed AdaptiveLN", SeedAdaLN()), ("2 x DiTBlock (adaLN-Zero)", DiT())):
        params = jax.jit(model.init)(jax.random.key(1), jnp.zeros((B, T, D)), jnp.zeros((B,), jnp.int32))
        opt = optax.adam(1e-2)

        def loss_fn(pp: dict, xx: jax.Array, kk: jax.Array, yy: jax.Array, model: nn.Module = model) -> jax.Array:
            return jnp.mean((model.apply(pp, xx, kk) - yy) ** 2)

        def step(carry: tuple, key: jax.Array, opt: optax.GradientTransformation = opt, loss_fn=loss_fn) -> tuple:  # noqa: ANN001
            pp, st = carry
            loss, g = jax.value_and_grad(loss_fn)(pp, *data(key))
            u, st = opt.update(g, st, pp)
            pp = optax.apply_updates(pp, u)
            mod = [v for path, v in jax.tree_util.tree_leaves_with_path(pp)
                   if "adaLN_modulation" in jax.tree_util.keystr(path) and path[-1].key == "kernel"]
            gn = jnp.sqrt(sum(jnp.sum(v * v) for v in mod)) if mod else jnp.zeros(())
            return (pp, st), (loss, gn)

        run = jax.jit(lambda p0, opt=opt, step=step: jax.lax.scan(step, (p0, opt.init(p0)), jax.random.split(jax.random.key(2), STEPS)))
        _, (losses, gn) = run(params)
        curves[name] = np.asarray(losses)
        if "DiT" in name:
            gate_norms = np.asarray(gn)
        print(f"   {name:<27} first loss {curves[name][0]:.3f}   final loss {curves[name][-20:].mean():.4f}")
    fin = {k: v[-20:].mean() for k, v in curves.items()}
    check("the plain LayerNorm cannot fit the class-dependent target (final > 0.5)", fin["plain LayerNorm"] > 0.5)
    check("the seed's AdaptiveLN fits it (final < 10% of the plain model's)",
          fin["seed AdaptiveLN"] < 0.1 * fin["plain LayerNorm"])
    check("the DiT stack fits it (final < 10% of the plain model's)",
          fin["2 x DiTBlock (adaLN-Zero)"] < 0.1 * fin["plain LayerNorm"])
    check("adaLN-Zero's modulation weights start at 0 and grow", gate_norms is not None and gate_norms[-1] > 0.1)

    fig, axs = plt.subplots(1, 2, figsize=(10, 3.6))
    for k, v in curves.items():
        axs[0].plot(v, label=k)
    axs[0].set_yscale("log")
    axs[0].set_xlabel("step")
    axs[0].set_ylabel("training MSE")
    axs[0].set_title("y = LN(x)·s_k + t_k: conditioning through the norm")
    axs[0].legend(fontsize=8)
    axs[1].plot(np.concatenate([[0.0], gate_norms]), color="tab:green")
    axs[1].set_xlabel("step")
    axs[1].set_ylabel("||adaLN_modulation kernels||")
    axs[1].set_title("adaLN-Zero: starts at 0 (block = identity)")
    fig.tight_layout()
    fig.savefig("06_adaptive_ln.png", dpi=85)
    print("\n   wrote 06_adaptive_ln.png")

    print(f"\n{'all checks passed' if not FAILED else f'{len(FAILED)} check(s) FAILED: {FAILED}'}")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
