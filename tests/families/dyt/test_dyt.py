"""jln.dyt, jln.{linen,nnx}.DyT and the DynamicTanh converter against torch (2.13, CPU) and
float64 NumPy.

Expected values: diffusers' ``DynamicTanh`` itself (as installed) and the torch restatement of
Liger's formula in ``jln.families.dyt.reference``, on the same values; ``np.tanh`` in float64 for
the independent reference; torch autograd for the gradients. The bit-exact fractions asserted
are the ones measured on these inputs (torch 2.13 CPU, XLA CPU).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jln
from jln import linen as jnn
from jln import nnx as jnnx
from jln.families.dyt import reference

torch = pytest.importorskip("torch")

_TDT = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16, "float16": torch.float16}
D = 96


def _inputs(shape=(4, 7, D), seed=0):
    rng = np.random.default_rng(seed)
    x = (3 * rng.standard_normal(shape) + 0.3).astype(np.float32)
    feat = shape[-1:]
    a = np.asarray([0.5 + 0.3 * rng.standard_normal()], np.float32)
    g = (1 + 0.3 * rng.standard_normal(feat)).astype(np.float32)
    b = (0.3 * rng.standard_normal(feat)).astype(np.float32)
    return x, a, g, b


def _j(v, dtype):
    return jnp.asarray(v).astype(dtype)


def _t(v, dtype):
    """The same values as ``_j(v, dtype)``, as a torch tensor."""
    wide = _j(v, dtype).astype(jnp.float32 if dtype != "float64" else jnp.float64)
    return torch.from_numpy(np.array(wide)).to(_TDT[dtype])


def _np(y):
    return np.asarray(y.astype(jnp.float64) if y.dtype == jnp.float64 else y.astype(jnp.float32), np.float64)


def _tnp(t):
    return t.detach().to(torch.float64).numpy()


def _rel(y, ref):
    return float(np.abs(y - ref).max() / np.abs(ref).max())


# --------------------------------------------------------------------------- forward vs torch

#: (convention, x dtype, parameter dtype, measured bit-exact fraction vs torch (half output) or None)
CASES = [
    ("torch", "float32", "float32", None),
    ("torch", "bfloat16", "bfloat16", 1.0),
    ("torch", "float16", "float16", 1.0),
    ("torch", "bfloat16", "float32", None),  # float32 output: torch promotes with the [1] alpha
    ("float32", "float32", "float32", None),
    # rounded once from float32: XLA's float32 tanh is within ~2 ulp, torch's ~0.5, so a rare
    # element lands on the other side of a half-precision rounding boundary (measured: bfloat16
    # 1.0 here and 0.99995 on 64x1024, float16 0.99926 here)
    ("float32", "bfloat16", "bfloat16", 0.9995),
    ("float32", "bfloat16", "float32", 0.9995),
    ("float32", "float16", "float16", 0.999),
]


@pytest.mark.parametrize(("convention", "xdt", "pdt", "exact"), CASES)
def test_matches_torch(convention, xdt, pdt, exact):
    x, a, g, b = _inputs()
    y = jln.dyt(_j(x, xdt), _j(a, pdt), _j(g, pdt), _j(b, pdt), convention=convention)
    ref = reference.dyt(_t(x, xdt), _t(a, pdt), _t(g, pdt), _t(b, pdt), convention=convention)
    assert str(y.dtype) == str(ref.dtype).removeprefix("torch.")
    if exact is None:
        assert _rel(_np(y), _tnp(ref)) <= 1e-6
    else:
        assert (_np(y) == _tnp(ref)).mean() >= exact


def test_float64_against_numpy():
    with jax.enable_x64(True):
        x, a, g, b = (v.astype(np.float64) for v in _inputs())
        want = g * np.tanh(a[0] * x) + b
        for conv in ("torch", "float32"):
            y = jln.dyt(jnp.asarray(x), jnp.asarray(a), jnp.asarray(g), jnp.asarray(b), convention=conv)
            assert y.dtype == jnp.float64
            assert _rel(np.asarray(y), want) <= 1e-14
    # float32 against the float64 truth on the float32 values
    x, a, g, b = _inputs()
    want = g.astype(np.float64) * np.tanh(np.float64(a[0]) * x.astype(np.float64)) + b.astype(np.float64)
    y = np.asarray(jln.dyt(jnp.asarray(x), jnp.asarray(a), jnp.asarray(g), jnp.asarray(b)), np.float64)
    assert _rel(y, want) <= 1e-6


def test_op_by_op_rounding_is_what_makes_bf16_exact():
    # the two conventions disagree on bf16: the test above would fail if "torch" rounded once
    x, a, g, b = _inputs()
    args = (_j(x, "bfloat16"), _j(a, "bfloat16"), _j(g, "bfloat16"), _j(b, "bfloat16"))
    torch_ref = _tnp(reference.dyt(*(_t(v, "bfloat16") for v in (x, a, g, b))))
    once = _np(jln.dyt(*args, convention="float32"))
    assert (once == torch_ref).mean() < 0.9
    assert (_np(jln.dyt(*args, convention="diffusers")) == torch_ref).all()  # the alias


def test_without_scale_or_bias_and_two_axes():
    x, a, g, b = _inputs((3, 5, 8))
    xs = jnp.asarray(x)
    np.testing.assert_allclose(np.asarray(jln.dyt(xs, jnp.asarray(a))), np.tanh(a[0] * x), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(np.asarray(jln.dyt(xs, jnp.asarray(a[0]), jnp.asarray(g))),
                               g * np.tanh(a[0] * x), rtol=1e-6, atol=1e-7)
    g2 = (1 + 0.1 * np.arange(40, dtype=np.float32)).reshape(5, 8)
    y = jln.dyt(xs, jnp.asarray(a), jnp.asarray(g2), axis=(-2, -1))
    np.testing.assert_allclose(np.asarray(y), g2 * np.tanh(a[0] * x), rtol=1e-6, atol=1e-6)
    # a channels-first layout: the parameters over axis 1
    gc = jnp.asarray(g2[:, 0])
    yc = jln.dyt(xs, jnp.asarray(a), gc, axis=1)
    np.testing.assert_allclose(np.asarray(yc), g2[:, 0][None, :, None] * np.tanh(a[0] * x), rtol=1e-6, atol=1e-6)


# --------------------------------------------------------------------------- gradients


@pytest.mark.parametrize("convention", ["torch", "float32"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gradients_match_torch_autograd(convention, dtype):
    with jax.enable_x64(dtype == "float64"):
        x, a, g, b = (v.astype(dtype) for v in _inputs((3, 5, 64)))
        ct = np.random.default_rng(9).uniform(-2, 2, x.shape).astype(dtype)
        fn = lambda *p: jnp.vdot(jln.dyt(*p, convention=convention), jnp.asarray(ct))  # noqa: E731
        grads = jax.jit(jax.grad(fn, argnums=(0, 1, 2, 3)))(*(jnp.asarray(v) for v in (x, a, g, b)))
        ts = [torch.from_numpy(v.copy()).requires_grad_(True) for v in (x, a, g, b)]
        reference.dyt(*ts, convention=convention).backward(torch.from_numpy(ct))
        rtol = 1e-5 if dtype == "float32" else 1e-12
        for name, gj, t in zip(("x", "alpha", "scale", "bias"), grads, ts, strict=True):
            tg = t.grad.numpy()
            assert gj.shape == tg.shape, name
            err = np.abs(np.asarray(gj, np.float64) - tg).max() / max(np.abs(tg).max(), 1e-30)
            assert err <= rtol, (name, err)
        # alpha's gradient is one sum over every element: sum(ct * gamma * x * sech^2(alpha x))
        x64, a64 = x.astype(np.float64), np.float64(a[0])
        exact = np.sum(ct * g * x64 / np.cosh(a64 * x64) ** 2)
        assert abs(float(grads[1][0]) - exact) <= (1e-5 if dtype == "float32" else 1e-12) * np.abs(ct * x64).sum()


def test_gradient_in_bfloat16_follows_torch():
    x, a, g, b = _inputs((2, 6, 32))
    ct = np.random.default_rng(3).uniform(-1, 1, x.shape).astype(np.float32)
    args = [_j(v, "bfloat16") for v in (x, a, g, b)]
    grads = jax.grad(lambda *p: jnp.vdot(jln.dyt(*p).astype(jnp.float32), jnp.asarray(ct)), argnums=(0, 1, 2, 3))(*args)
    ts = [_t(v, "bfloat16").requires_grad_(True) for v in (x, a, g, b)]
    reference.dyt(*ts).backward(_t(ct, "bfloat16"))
    for gj, t in zip(grads, ts, strict=True):
        assert gj.dtype == jnp.bfloat16
        # the cotangents differ by torch's bf16 rounding of ct; the sums (alpha, gamma, beta) in bf16
        assert _rel(_np(gj), _tnp(t.grad)) <= 3e-2


def test_forward_mode_and_second_derivative():
    x = jnp.linspace(-3.0, 3.0, 7)
    a = jnp.asarray([0.7])
    _, tangent = jax.jvp(lambda v: jln.dyt(v, a), (x,), (jnp.ones_like(x),))
    np.testing.assert_allclose(np.asarray(tangent), 0.7 / np.cosh(0.7 * np.asarray(x)) ** 2, rtol=1e-6)
    d2 = jax.grad(jax.grad(lambda s: jln.dyt(s[None], a)[0]))(jnp.asarray(0.4))
    t = np.tanh(0.28)
    np.testing.assert_allclose(float(d2), -2 * 0.49 * t * (1 - t * t), rtol=1e-5)


# --------------------------------------------------------------------------- transformations


def test_jit_and_vmap():
    x, a, g, b = _inputs((5, 3, 16))
    args = [jnp.asarray(v) for v in (x, a, g, b)]
    for dt in ("float32", "bfloat16"):
        cargs = [v.astype(dt) for v in args]
        eager = jln.dyt(*cargs)
        jitted = jax.jit(jln.dyt)(*cargs)
        np.testing.assert_array_equal(_np(jitted), _np(eager))
        # (jitted: an op-by-op float32 evaluation rounds g * t + b twice where XLA's fusion may
        # contract it, one float32 ulp apart)
        mapped = jax.jit(jax.vmap(jln.dyt, in_axes=(0, None, None, None)))(*cargs)
        loop = jnp.stack([jln.dyt(cargs[0][i], *cargs[1:]) for i in range(5)])
        np.testing.assert_array_equal(_np(mapped), _np(loop))
    # a per-example alpha through vmap
    alphas = jnp.asarray([[0.2], [0.5], [0.9], [1.3], [2.0]])
    ys = jax.vmap(lambda v, al: jln.dyt(v, al))(args[0], alphas)
    np.testing.assert_allclose(np.asarray(ys), np.tanh(np.asarray(alphas)[:, :, None] * x), rtol=1e-6, atol=1e-7)


# --------------------------------------------------------------------------- modules and interop


def _dynamic_tanh(dim, init_alpha=0.8):
    mod = pytest.importorskip("diffusers.models.autoencoders.autoencoder_same")
    m = mod.DynamicTanh(dim, init_alpha=init_alpha)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        m.gamma.copy_(1 + 0.3 * torch.randn(dim, generator=g))
        m.beta.copy_(0.3 * torch.randn(dim, generator=g))
    return m


@pytest.mark.parametrize(("wdt", "xdt", "exact"), [(torch.float32, torch.float32, None),
                                                   (torch.bfloat16, torch.bfloat16, 1.0),
                                                   (torch.float32, torch.bfloat16, None)])
def test_from_torch_matches_diffusers_dynamic_tanh(wdt, xdt, exact):
    from jln.interop import from_torch

    m = _dynamic_tanh(D).to(wdt)
    xt = (3 * torch.randn(4, 9, D, generator=torch.Generator().manual_seed(1))).to(xdt)
    with torch.no_grad():
        ref = m(xt)
    lin, variables = from_torch(m)
    assert isinstance(lin, jnn.DyT) and lin.convention == "torch"
    assert lin.init_alpha == float(m.alpha.detach().float()[0])  # 0.8 in the module's dtype
    x = jnp.asarray(xt.float().numpy()).astype(str(xdt).removeprefix("torch."))
    y_lin = lin.apply(variables, x)
    y_nnx = from_torch(m, api="nnx")(x)
    np.testing.assert_array_equal(_np(y_lin), _np(y_nnx))
    assert str(y_lin.dtype) == str(ref.dtype).removeprefix("torch.")
    if exact is None:
        assert _rel(_np(y_lin), _tnp(ref)) <= 1e-6
    else:
        assert (_np(y_lin) == _tnp(ref)).mean() >= exact


def test_to_torch_state_dict_round_trip():
    from jln.interop import from_torch, to_torch_state_dict

    m = _dynamic_tanh(16)
    lin, variables = from_torch(m)
    sd = to_torch_state_dict(variables, lin)
    assert set(sd) == {"alpha", "gamma", "beta"} and tuple(sd["alpha"].shape) == (1,)
    fresh = _dynamic_tanh(16, init_alpha=3.0)
    fresh.load_state_dict(sd, strict=True)
    for k, v in m.state_dict().items():
        assert torch.equal(fresh.state_dict()[k], v), k
    # and from an NNX module built in jln
    nm = jnnx.DyT(16, init_alpha=1.5)
    fresh.load_state_dict(to_torch_state_dict(nm), strict=True)
    assert fresh.alpha.detach().item() == 1.5 and torch.equal(fresh.gamma, torch.ones(16))


def test_linen_and_nnx_agree():
    x = jnp.asarray(_inputs((2, 3, 12))[0])
    for kw in ({}, {"init_alpha": 2.0, "use_bias": False}, {"convention": "liger", "use_scale": False},
               {"dtype": jnp.bfloat16}, {"param_dtype": jnp.bfloat16}):
        lin = jnn.DyT(**kw)
        variables = lin.init(jax.random.key(0), x)
        nm = jnnx.DyT(12, **kw)
        params = variables["params"]
        assert sorted(params) == sorted(k for k in ("alpha", "scale", "bias") if getattr(nm, k) is not None), kw
        for k, v in params.items():
            np.testing.assert_array_equal(np.asarray(getattr(nm, k)[...]), np.asarray(v))
        y = lin.apply(variables, x)
        np.testing.assert_array_equal(_np(y), _np(nm(x)))
        assert y.dtype == nm(x).dtype
    assert jnn.DyT(dtype=jnp.bfloat16).apply(jnn.DyT().init(jax.random.key(0), x), x).dtype == jnp.bfloat16
    y = jnn.DyT(param_dtype=jnp.bfloat16).apply({"params": {"alpha": jnp.ones((1,), jnp.bfloat16),
                                                            "scale": jnp.ones(12, jnp.bfloat16),
                                                            "bias": jnp.zeros(12, jnp.bfloat16)}},
                                                x.astype(jnp.bfloat16))
    assert y.dtype == jnp.bfloat16


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("call", "exc", "words"),
    [
        (lambda: jln.dyt(jnp.ones((2, 4)), 0.5), TypeError, "`alpha` must be an array"),
        (lambda: jln.dyt(jnp.ones((2, 4)), jnp.ones(2)), ValueError, "alpha.shape=(2,)"),
        (lambda: jln.dyt(jnp.ones((2, 4)), jnp.ones((), jnp.int32)), TypeError, "`alpha` must have a floating dtype"),
        (lambda: jln.dyt(jnp.ones((2, 4), jnp.int32), jnp.ones(())), TypeError, "`x` must have a floating dtype"),
        (lambda: jln.dyt(jnp.ones((2, 4)), jnp.ones(()), jnp.ones(3)), ValueError, "`scale` must have shape (4,)"),
        (lambda: jln.dyt(jnp.ones((2, 4)), jnp.ones(()), None, jnp.ones(5)), ValueError, "`bias` must have shape (4,)"),
        (lambda: jln.dyt(jnp.ones((2, 4)), jnp.ones(()), convention="llama"), ValueError, "`convention` must be one of"),
        (lambda: jln.dyt(jnp.ones((2, 4)), jnp.ones(()), axis=2), ValueError, "out of range"),
        (lambda: jnnx.DyT(4, init_alpha=float("nan")), ValueError, "`init_alpha` must be a finite"),
        (lambda: jnnx.DyT(4, init_alpha="0.5"), TypeError, "`init_alpha` must be a finite"),
        (lambda: jnn.DyT(convention="eager").init(jax.random.key(0), jnp.ones((2, 4))), ValueError,
         "`convention` must be one of"),
        (lambda: jnnx.DyT(4)(jnp.ones((2, 5))), ValueError, "num_features=(4,)"),
        (lambda: jnnx.DyT(4, epsilon=1e-5), TypeError, "DyT has no such option"),
    ],
)
def test_bad_input(call, exc, words):
    with pytest.raises(exc, match=words.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        call()
