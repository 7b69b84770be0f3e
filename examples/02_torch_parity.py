"""Torch parity, as in the seed's PyTorch guide: nn.LayerNorm(3) on a [4, 2, 3] tensor vs jln.

Run from the repository root:  python examples/02_torch_parity.py
Writes 02_torch_parity.png to the current directory and exits non-zero if a check fails.

1. ``torch.nn.LayerNorm(normalized_shape=3)`` vs ``jln.layer_norm`` and ``jln.linen.LayerNorm``:
   ``allclose`` is True, with default and with trained-looking (random) weight and bias.
2. The seed's own ``layer_norm_process`` (its torch code, verbatim) agrees with both.
3. ``normalized_shape=[2, 3]`` is ``axis=(-2, -1)`` in jln.
4. The seed's "common mistake": a wrong ``normalized_shape`` is an error in torch; the jln
   equivalents (a scale of the wrong shape, a wrong axis) are errors too, never a silent answer.
"""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import matplotlib
import numpy as np
import torch

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import jln  # noqa: E402
import jln.linen  # noqa: E402

FAILED: list[str] = []


def check(name: str, ok: bool) -> None:
    print(f"  [{'ok' if ok else 'FAIL'}] {name}")
    if not ok:
        FAILED.append(name)


def layer_norm_process(feature: torch.Tensor, beta=0.0, gamma=1.0, eps=1e-5):  # noqa: ANN001, ANN201
    """The seed's from-scratch LayerNorm, kept verbatim (torch) as the seed's own reference."""
    var_mean = torch.var_mean(feature, dim=-1, unbiased=False)
    mean = var_mean[1]
    var = var_mean[0]
    feature = (feature - mean[..., None]) / torch.sqrt(var[..., None] + eps)
    feature = feature * gamma + beta
    return feature


def show_error(label: str, fn) -> BaseException | None:  # noqa: ANN001
    try:
        fn()
    except Exception as e:  # noqa: BLE001  (we print whatever each library raises)
        msg = str(e).strip().splitlines()[0]
        print(f"   {label}:\n      {type(e).__name__}: {msg}")
        return e
    print(f"   {label}: no error (!)")
    return None


def main() -> int:
    torch.manual_seed(0)
    t = torch.rand(4, 2, 3)
    x = jnp.asarray(t.numpy())

    print("1. torch.nn.LayerNorm(3) vs jln on a [4, 2, 3] tensor")
    norm = torch.nn.LayerNorm(normalized_shape=t.shape[-1], eps=1e-5)
    with torch.no_grad():
        t1 = norm(t).numpy()
    y_fn = np.asarray(jln.layer_norm(x, eps=1e-5))
    mod = jln.linen.LayerNorm()
    params = mod.init(jax.random.key(0), x)
    y_mod = np.asarray(mod.apply(params, x))
    print(f"   params of jln.linen.LayerNorm: "
          f"{jax.tree_util.tree_map(lambda a: a.shape, params['params'])}")
    print(f"   allclose(torch, jln.layer_norm)       = {np.allclose(t1, y_fn, atol=1e-6)}  "
          f"max |diff| = {np.abs(t1 - y_fn).max():.1e}")
    print(f"   allclose(torch, jln.linen.LayerNorm)  = {np.allclose(t1, y_mod, atol=1e-6)}  "
          f"max |diff| = {np.abs(t1 - y_mod).max():.1e}")
    check("torch == jln.layer_norm", np.allclose(t1, y_fn, atol=1e-6))
    check("torch == jln.linen.LayerNorm", np.allclose(t1, y_mod, atol=1e-6))

    # with non-trivial weight and bias copied from torch (weight -> scale, bias -> bias)
    with torch.no_grad():
        norm.weight.normal_()
        norm.bias.normal_()
        t1w = norm(t).numpy()
    w, b = jnp.asarray(norm.weight.detach().numpy()), jnp.asarray(norm.bias.detach().numpy())
    y_fnw = np.asarray(jln.layer_norm(x, w, b))
    y_modw = np.asarray(mod.apply({"params": {"scale": w, "bias": b}}, x))
    print(f"   with random weight/bias: max |diff| function {np.abs(t1w - y_fnw).max():.1e}, "
          f"module {np.abs(t1w - y_modw).max():.1e}")
    check("torch == jln with copied weight and bias (function and module)",
          np.allclose(t1w, y_fnw, atol=1e-6) and np.allclose(t1w, y_modw, atol=1e-6))

    print("\n2. The seed's layer_norm_process (torch.var_mean, unbiased=False)")
    t2 = layer_norm_process(t, eps=1e-5).numpy()
    print(f"   torch.allclose(t1, t2) = {bool(np.allclose(t1, t2))}; allclose(jln, t2) = {np.allclose(y_fn, t2, atol=1e-6)}")
    check("seed's layer_norm_process == torch == jln", np.allclose(t1, t2) and np.allclose(y_fn, t2, atol=1e-6))

    print("\n3. normalized_shape=[2, 3] is axis=(-2, -1)")
    norm23 = torch.nn.LayerNorm([2, 3])
    with torch.no_grad():
        norm23.weight.normal_()
        t23 = norm23(t).numpy()
    y23 = np.asarray(jln.layer_norm(x, jnp.asarray(norm23.weight.detach().numpy()),
                                    jnp.asarray(norm23.bias.detach().numpy()), axis=(-2, -1)))
    mod23 = jln.linen.LayerNorm(axis=(-2, -1))
    shapes23 = jax.tree_util.tree_map(lambda a: a.shape, mod23.init(jax.random.key(0), x)["params"])
    print(f"   max |diff| = {np.abs(t23 - y23).max():.1e}; linen params {shapes23}")
    check("torch LayerNorm([2,3]) == jln axis=(-2,-1)", np.allclose(t23, y23, atol=1e-6))
    check("linen LayerNorm(axis=(-2,-1)) has [2, 3] parameters", shapes23["scale"] == (2, 3))

    print("\n4. The seed's common mistake: a normalized_shape that is not the trailing shape")
    e_torch = show_error("torch.nn.LayerNorm([2])(t) with t of shape [4, 2, 3]",
                         lambda: torch.nn.LayerNorm([2])(t))
    e_scale = show_error("jln.layer_norm(x, scale of shape (2,))",
                         lambda: jln.layer_norm(x, jnp.ones(2)))
    e_axis = show_error("jln.layer_norm(x, scale of shape (3,), axis=1)  (the wrong axis)",
                        lambda: jln.layer_norm(x, jnp.ones(3), axis=1))
    e_mod = show_error("jln.linen.LayerNorm(axis=1).apply(params made for axis=-1, x)",
                       lambda: jln.linen.LayerNorm(axis=1).apply(params, x))
    check("torch raises RuntimeError", isinstance(e_torch, RuntimeError))
    check("jln raises ValueError for a wrong scale shape", isinstance(e_scale, ValueError))
    check("jln raises ValueError for a wrong axis", isinstance(e_axis, ValueError))
    check("jln.linen raises for parameters of the wrong axis", e_mod is not None)

    fig, axs = plt.subplots(1, 2, figsize=(9, 3.6))
    axs[0].plot([-2, 2], [-2, 2], "k-", linewidth=0.6)
    axs[0].scatter(t1.ravel(), y_fn.ravel(), s=18, label="default affine")
    axs[0].scatter(t1w.ravel(), y_fnw.ravel(), s=18, marker="x", label="random weight/bias")
    axs[0].set_xlabel("torch.nn.LayerNorm(3)")
    axs[0].set_ylabel("jln.layer_norm")
    axs[0].set_title("24 outputs, [4, 2, 3] input")
    axs[0].legend(fontsize=8)
    diffs = {
        "jln.layer_norm": np.abs(t1 - y_fn).max(),
        "jln.linen": np.abs(t1 - y_mod).max(),
        "seed's\nlayer_norm_process": np.abs(t1 - t2).max(),
        "weights\n(fn)": np.abs(t1w - y_fnw).max(),
        "[2,3]\naxis=(-2,-1)": np.abs(t23 - y23).max(),
    }
    axs[1].bar(list(diffs), [max(v, 1e-9) for v in diffs.values()], color="tab:blue")
    axs[1].axhline(1e-6, color="tab:red", linestyle="--", label="allclose atol 1e-6")
    axs[1].set_yscale("log")
    axs[1].set_ylim(1e-9, 1e-4)
    axs[1].set_ylabel("max |diff| vs torch (float32)")
    axs[1].set_title("all differences are float32 rounding")
    axs[1].tick_params(axis="x", labelsize=7)
    axs[1].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig("02_torch_parity.png", dpi=85)
    print("\n   wrote 02_torch_parity.png")

    print(f"\n{'all checks passed' if not FAILED else f'{len(FAILED)} check(s) FAILED: {FAILED}'}")
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
