"""The seed's worked LayerNorm example ("猫吃鱼"), computed with jln, and its √d sphere geometry.

Run from the repository root:  python examples/01_worked_example.py
Writes 01_sphere.png to the current directory and exits non-zero if a check fails.

1. d=4, x = [2, -1, 3, 0]: mean 1.0, variance 2.5, std 1.581, x_norm [0.632, -1.265, 1.265, -0.632]
   and ||x_norm|| = 2 = sqrt(4), as the seed computes by hand.
2. The seed's d=8 three-token check: each normalized row has mean ~0, variance ~1, norm ~sqrt(8).
3. LayerNorm is not L2 normalization: LN puts rows at distance sqrt(d) on the plane sum(x) = 0,
   x / ||x|| puts them at distance 1 anywhere on the sphere.
4. For d=3 the picture: normalized vectors lie on the circle where the plane sum(x) = 0 meets the
   sphere of radius sqrt(3).
"""

from __future__ import annotations

import math
import sys

import jax
import jax.numpy as jnp
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import jln  # noqa: E402
from jln import _stats  # noqa: E402  (the core's row statistics: the same code layer_norm uses)

FAILED: list[str] = []


def check(name: str, ok: bool) -> None:
    print(f"  [{'ok' if ok else 'FAIL'}] {name}")
    if not ok:
        FAILED.append(name)


def row_stats(x: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Per-row mean and biased variance from jln's statistics core (what layer_norm divides by)."""
    mean, _, var = _stats.centered(x, (x.ndim - 1,))
    return mean[..., 0], var[..., 0]


def main() -> int:
    # ---- 1. the worked example, d = 4 -------------------------------------------------------
    print("1. The seed's worked example: d_model = 4, x = [2.0, -1.0, 3.0, 0.0]")
    x = jnp.array([2.0, -1.0, 3.0, 0.0], dtype=jnp.float32)
    mean, var = row_stats(x)
    std = jnp.sqrt(var)
    x_norm = jln.layer_norm(x)  # torch defaults: eps = 1e-5 inside the square root
    length = jnp.linalg.norm(x_norm)
    print(f"   mean      = {float(mean):.3f}")
    print(f"   variance  = {float(var):.3f}")
    print(f"   std       = {float(std):.3f}")
    print(f"   x_norm    = [{', '.join(f'{v:.3f}' for v in x_norm.tolist())}]")
    print(f"   sum       = {float(x_norm.sum()):.3f}   (the plane: components sum to 0)")
    print(f"   ||x_norm|| = {float(length):.3f} = sqrt(4) = {math.sqrt(4):.3f}   (the sphere of radius sqrt(d))")
    seed = {"mean": 1.0, "variance": 2.5, "std": 1.581}
    got = {"mean": float(mean), "variance": float(var), "std": float(std)}
    for k, v in seed.items():
        check(f"{k} rounds to the seed's {v}", round(got[k], 3) == v)
    seed_norm = [0.632, -1.265, 1.265, -0.632]
    check(
        f"x_norm rounds to the seed's {seed_norm}",
        [round(v, 3) for v in x_norm.tolist()] == seed_norm,
    )
    check("||x_norm|| rounds to 2.000", round(float(length), 3) == 2.0)
    # gamma and beta: LN(x) = gamma * x_norm + beta, "the model gets the control back"
    gamma = jnp.array([1.0, 2.0, 0.5, 1.0])
    beta = jnp.array([0.0, 0.0, 1.0, -1.0])
    y = jln.layer_norm(x, gamma, beta)
    print(f"   with gamma={gamma.tolist()}, beta={beta.tolist()}: y = [{', '.join(f'{v:.3f}' for v in y.tolist())}]")
    check("layer_norm(x, gamma, beta) == gamma * x_norm + beta", bool(jnp.allclose(y, gamma * x_norm + beta, atol=1e-6)))

    # ---- 2. the seed's d = 8 three-token check ----------------------------------------------
    print("\n2. The seed's check: 3 tokens, d_model = 8 (random input), no gamma/beta")
    x8 = jax.random.normal(jax.random.key(42), (1, 3, 8), dtype=jnp.float32)
    n8 = jln.layer_norm(x8)
    m8, v8 = row_stats(n8)
    l8 = jnp.linalg.norm(n8, axis=-1)
    print(f"   row means     (~0):          {[f'{v:+.1e}' for v in m8[0].tolist()]}")
    print(f"   row variances (~1):          {[f'{v:.5f}' for v in v8[0].tolist()]}")
    print(f"   row norms     (~sqrt(8)={math.sqrt(8):.3f}): {[f'{v:.4f}' for v in l8[0].tolist()]}")
    check("row means are ~0", bool(jnp.all(jnp.abs(m8) < 1e-6)))
    check("row variances are ~1", bool(jnp.all(jnp.abs(v8 - 1) < 1e-4)))
    check("row norms are ~sqrt(8)", bool(jnp.all(jnp.abs(l8 - math.sqrt(8)) < 1e-3)))

    # ---- 3. not the same as L2 normalization ------------------------------------------------
    print("\n3. LayerNorm is not L2 normalization (x / ||x||)")
    l2 = x8 / jnp.linalg.norm(x8, axis=-1, keepdims=True)  # the other operation, on purpose
    ml2, _ = row_stats(l2)
    print(f"   L2:  norms {[f'{v:.3f}' for v in jnp.linalg.norm(l2, axis=-1)[0].tolist()]}, "
          f"means {[f'{v:+.3f}' for v in ml2[0].tolist()]}")
    print(f"   LN:  norms {[f'{v:.3f}' for v in l8[0].tolist()]}, "
          f"means {[f'{v:+.3f}' for v in m8[0].tolist()]}")
    check("L2 rows have norm 1, LN rows have norm sqrt(d)",
          bool(jnp.allclose(jnp.linalg.norm(l2, axis=-1), 1.0, atol=1e-6)) and not bool(jnp.allclose(l8, 1.0)))
    check("L2 keeps the mean (rows are not centred), LN removes it", bool(jnp.max(jnp.abs(ml2)) > 1e-3))

    # ---- 4. the d = 3 picture ---------------------------------------------------------------
    print("\n4. d = 3: normalized vectors lie on the circle {sum(x) = 0} ∩ {||x|| = sqrt(3)}")
    x3 = 1.5 * jax.random.normal(jax.random.key(0), (24, 3)) + jnp.array([0.5, 1.0, -0.5])
    n3 = jln.layer_norm(x3, eps=0.0)
    l23 = x3 / jnp.linalg.norm(x3, axis=-1, keepdims=True)
    dist = jnp.linalg.norm(n3, axis=-1)
    plane = n3.sum(-1)
    print(f"   24 random vectors: max |sum| = {float(jnp.max(jnp.abs(plane))):.1e}, "
          f"norms in [{float(dist.min()):.4f}, {float(dist.max()):.4f}] (sqrt(3) = {math.sqrt(3):.4f})")
    check("all d=3 normalized vectors are on the circle",
          bool(jnp.max(jnp.abs(plane)) < 1e-5) and bool(jnp.max(jnp.abs(dist - math.sqrt(3))) < 1e-5))

    fig = plt.figure(figsize=(10, 5))
    ax = fig.add_subplot(1, 2, 1, projection="3d")
    r = math.sqrt(3)
    u, v = jnp.meshgrid(jnp.linspace(0, 2 * math.pi, 40), jnp.linspace(0, math.pi, 20))
    ax.plot_wireframe(r * jnp.cos(u) * jnp.sin(v), r * jnp.sin(u) * jnp.sin(v), r * jnp.cos(v),
                      color="lightgray", linewidth=0.3, alpha=0.6)
    # the circle: orthonormal basis of the plane sum(x) = 0
    e1 = jnp.array([1.0, -1.0, 0.0]) / math.sqrt(2)
    e2 = jnp.array([1.0, 1.0, -2.0]) / math.sqrt(6)
    t = jnp.linspace(0, 2 * math.pi, 200)[:, None]
    circ = r * (jnp.cos(t) * e1 + jnp.sin(t) * e2)
    ax.plot(circ[:, 0], circ[:, 1], circ[:, 2], color="tab:blue", linewidth=2, label="plane ∩ sphere r=√3")
    for p in n3:
        ax.plot([0, p[0]], [0, p[1]], [0, p[2]], color="tab:blue", alpha=0.4, linewidth=0.8)
    ax.scatter(n3[:, 0], n3[:, 1], n3[:, 2], color="tab:blue", s=14, label="jln.layer_norm(x)")
    ax.scatter(l23[:, 0], l23[:, 1], l23[:, 2], color="tab:red", s=10, marker="^", label="x / ||x|| (L2)")
    ax.set_title("d=3: LayerNorm outputs lie on a great circle")
    ax.set_xlabel("x1")
    ax.set_ylabel("x2")
    ax.set_zlabel("x3")
    ax.legend(loc="upper left", fontsize=7)
    for setlim in (ax.set_xlim, ax.set_ylim, ax.set_zlim):
        setlim(-1.9, 1.9)
    ax.set_box_aspect((1, 1, 1))
    ax.view_init(elev=28, azim=15)

    ax2 = fig.add_subplot(1, 2, 2)
    ds = [2, 3, 4, 8, 16, 64, 256]
    means = []
    for d in ds:
        xd = jax.random.normal(jax.random.key(d), (256, d)) * 3.0 + 2.0
        means.append(float(jnp.linalg.norm(jln.layer_norm(xd), axis=-1).mean()))
    ax2.plot(ds, [math.sqrt(d) for d in ds], "k--", label="√d")
    ax2.plot(ds, means, "o", color="tab:blue", label="mean ||layer_norm(x)||")
    ax2.plot(ds, [1.0] * len(ds), "^-", color="tab:red", label="||x / ||x|| || = 1")
    ax2.set_xscale("log", base=2)
    ax2.set_yscale("log", base=2)
    ax2.set_xlabel("d_model")
    ax2.set_ylabel("row norm")
    ax2.set_title("LN fixes the norm at √d, L2 at 1")
    ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig("01_sphere.png", dpi=85)
    check("norm of LN rows equals sqrt(d) for every d",
          all(abs(m - math.sqrt(d)) < 1e-3 * math.sqrt(d) for m, d in zip(means, ds, strict=True)))
    print("   wrote 01_sphere.png")

    print(f"\n{'all checks passed' if not FAILED else f'{len(FAILED)} check(s) FAILED: {FAILED}'}")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
