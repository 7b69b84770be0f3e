"""jln.poly_norm and jln.{linen,nnx}.PolyNorm against torch (2.13, CPU) and float64 NumPy.

Expected values: the torch restatement of Liger's / vLLM's formula in
``jln.families.poly_norm.reference`` (no torch class in transformers or diffusers computes
PolyNorm), evaluated on the same values; NumPy in float64 for the independent reference (and
where plain float32 overflows); torch autograd for the gradients. The bit-exact fractions
asserted are the ones measured on these inputs (torch 2.13 CPU, XLA CPU).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jln
from jln import linen as jnn
from jln import nnx as jnnx
from jln.families.poly_norm import reference

torch = pytest.importorskip("torch")

_TDT = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16, "float16": torch.float16}
W = np.asarray([0.3, 0.45, 0.2], np.float32)
B = np.asarray(0.1, np.float32)


def _x(shape=(6, 5, 128), scale=1.0, seed=0):
    rng = np.random.default_rng(seed)
    return (scale * (2 * rng.standard_normal(shape) + 0.5)).astype(np.float32)


def _np64(x, w=W, b=B, eps=1e-6, axes=(-1,)):
    """The formula in float64 NumPy, as written."""
    v = np.asarray(x, np.float64)

    def n(u):
        return u / np.sqrt(np.mean(u * u, axis=axes, keepdims=True) + eps)

    w = np.asarray(w, np.float64)
    return w[0] * n(v**3) + w[1] * n(v**2) + w[2] * n(v) + float(b)


def _t(v, dtype):
    wide = jnp.asarray(v).astype(dtype).astype(jnp.float64 if dtype == "float64" else jnp.float32)
    return torch.from_numpy(np.array(wide)).to(_TDT[dtype])


def _f64(y):
    return np.asarray(y.astype(jnp.float64) if y.dtype == jnp.float64 else y.astype(jnp.float32), np.float64)


def _rel(y, ref):
    return float(np.abs(y - ref).max() / np.abs(ref).max())


def _call(x, dtype, w=W, b=B, **kw):
    return jln.poly_norm(jnp.asarray(x).astype(dtype), jnp.asarray(w).astype(dtype), jnp.asarray(b).astype(dtype), **kw)


# --------------------------------------------------------------------------- forward


@pytest.mark.parametrize(("dtype", "exact"), [("float32", None), ("bfloat16", 0.9995), ("float16", 0.999)])
def test_matches_torch(dtype, exact):
    x = _x()
    y = _call(x, dtype)
    ref = reference.poly_norm(_t(x, dtype), _t(W, dtype), _t(B, dtype))
    assert y.dtype == jnp.dtype(dtype) and y.shape == x.shape
    r = ref.to(torch.float64).numpy()
    if exact is None:
        assert _rel(_f64(y), r) <= 1e-6
        assert _rel(_f64(y), _np64(x)) <= 1e-6
    else:  # float32 inside, rounded once: the rare half-way neighbours of two float32 results
        assert (_f64(y) == r).mean() >= exact


def test_float64_against_numpy():
    with jax.enable_x64(True):
        x = _x().astype(np.float64)
        y = jln.poly_norm(jnp.asarray(x), jnp.asarray(W, jnp.float64), jnp.asarray(B, jnp.float64))
        assert y.dtype == jnp.float64
        assert _rel(np.asarray(y), _np64(x)) <= 1e-14


def _plain_float32(x, eps=1e-6):
    """The formula evaluated as written in float32 (no scaling), jitted as jln is."""
    def f(v):
        def n(u):
            return u * jax.lax.rsqrt(jnp.mean(u * u, axis=-1, keepdims=True) + eps)
        w = jnp.asarray(W)
        return w[0] * n(v * v * v) + w[1] * n(v * v) + w[2] * n(v) + jnp.asarray(B)
    return np.asarray(jax.jit(f)(jnp.asarray(x)), np.float64)


@pytest.mark.parametrize("scale", [1.0, 1e-3, 1e-8, 1e2, 1e4])
def test_scaling_by_a_power_of_two_changes_no_bit_where_float32_is_finite(scale):
    # measured: every element equal on these rows (the scale commutes with each rounding)
    x = _x(scale=scale)
    y = np.asarray(_call(x, "float32"), np.float64)
    assert np.isfinite(_plain_float32(x)).all()
    np.testing.assert_array_equal(y, _plain_float32(x))


@pytest.mark.parametrize("scale", [1e6, 1e10, 1e20, 1e30])
def test_large_inputs_stay_finite_and_accurate(scale):
    x = _x(scale=scale)
    y = np.asarray(_call(x, "float32"), np.float64)
    want = _np64(x)
    assert np.isfinite(y).all()
    assert _rel(y, want) <= 1e-6
    # plain float32 (and so torch's restatement of the peers) is off here: mean(x^6) overflows
    ref = reference.poly_norm(torch.from_numpy(x), torch.from_numpy(W), torch.from_numpy(B)).numpy()
    assert not (np.abs(ref - want).max() <= 1e-3 * np.abs(want).max())


def test_large_bfloat16_and_eps_zero():
    x = _x(scale=1e30)
    y = _f64(_call(x, "bfloat16"))
    xb = np.asarray(jnp.asarray(x).astype(jnp.bfloat16).astype(jnp.float32))
    assert np.isfinite(y).all() and _rel(y, _np64(xb)) <= 2**-8
    # eps = 0: n is scale-invariant; every row scaled, tiny rows included
    for scale in (1e-30, 1.0, 1e30):
        xs = _x(scale=scale)
        y0 = np.asarray(_call(xs, "float32", eps=0.0), np.float64)
        assert _rel(y0, _np64(xs, eps=0.0)) <= 1e-6
    # an all-zero row with eps = 0 is 0/0, as the peers
    z = np.asarray(_call(np.zeros((2, 8), np.float32), "float32", eps=0.0))
    assert np.isnan(z).all()
    np.testing.assert_array_equal(np.asarray(_call(np.zeros((2, 8), np.float32), "float32")), np.full((2, 8), B))


def test_axis_tuple_and_identities():
    x = _x((3, 4, 16))
    y = _call(x, "float32", axis=(-2, -1))
    assert _rel(_f64(y), _np64(x, axes=(-2, -1))) <= 1e-6
    # w = (0, 0, 1), b = 0 is an RMSNorm without weight (eps inside the root)
    y1 = _call(x, "float32", w=np.asarray([0.0, 0.0, 1.0], np.float32), b=np.asarray(0.0, np.float32))
    np.testing.assert_allclose(np.asarray(y1), np.asarray(jln.rms_norm(jnp.asarray(x), eps=1e-6)), rtol=2e-6, atol=1e-6)
    # torch's (1,)-shaped bias is taken too
    y2 = jln.poly_norm(jnp.asarray(x), jnp.asarray(W), jnp.asarray(B).reshape(1))
    np.testing.assert_array_equal(np.asarray(y2), np.asarray(_call(x, "float32")))


# --------------------------------------------------------------------------- gradients


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gradients_match_torch_autograd(dtype):
    with jax.enable_x64(dtype == "float64"):
        x = _x((3, 5, 64)).astype(dtype)
        w, b = W.astype(dtype), B.astype(dtype)
        ct = np.random.default_rng(9).uniform(-2, 2, x.shape).astype(dtype)
        fn = lambda *p: jnp.vdot(jln.poly_norm(*p), jnp.asarray(ct))  # noqa: E731
        grads = jax.jit(jax.grad(fn, argnums=(0, 1, 2)))(jnp.asarray(x), jnp.asarray(w), jnp.asarray(b))
        ts = [torch.from_numpy(np.array(v)).requires_grad_(True) for v in (x, w, b)]
        reference.poly_norm(*ts).backward(torch.from_numpy(ct))
        for name, gj, t in zip(("x", "weight", "bias"), grads, ts, strict=True):
            tg = t.grad.numpy()
            assert gj.shape == tg.shape, name
            # weight's and bias's gradients are sums over every element: relative to the sum of |terms|
            scale = np.abs(tg).max() if name == "x" else np.abs(ct).sum() * 4
            err = np.abs(np.asarray(gj, np.float64) - tg).max() / scale
            assert err <= (1e-5 if dtype == "float32" else 1e-12), (name, err)
        # bias's gradient is the sum of the cotangent; the weights' the sums of ct * n(x^p)
        tol = 1e-6 if dtype == "float32" else 1e-14
        assert abs(float(grads[2]) - ct.astype(np.float64).sum()) <= tol * np.abs(ct).sum()


def test_gradient_of_large_inputs_is_finite():
    x = jnp.asarray(_x((2, 32), scale=1e8))
    g = jax.grad(lambda v: jnp.sum(jln.poly_norm(v, jnp.asarray(W), jnp.asarray(B)) ** 2))(x)
    assert np.isfinite(np.asarray(g)).all()
    with jax.enable_x64(True):
        g64 = jax.grad(lambda v: jnp.sum(jln.poly_norm(v, jnp.asarray(W, jnp.float64), jnp.asarray(B, jnp.float64)) ** 2))(
            jnp.asarray(np.asarray(x), jnp.float64))
        np.testing.assert_allclose(np.asarray(g), np.asarray(g64), rtol=1e-4, atol=1e-4 * float(np.abs(g64).max()))


def test_forward_mode():
    x = jnp.asarray(_x((2, 16)))
    t = jnp.asarray(_x((2, 16), seed=1))
    w, b = jnp.asarray(W), jnp.asarray(B)
    _, jv = jax.jvp(lambda v: jln.poly_norm(v, w, b), (x,), (t,))
    _, vjp = jax.vjp(lambda v: jln.poly_norm(v, w, b), x)
    # <J t, u> == <t, J^T u>
    u = jnp.asarray(_x((2, 16), seed=2))
    np.testing.assert_allclose(float(jnp.vdot(jv, u)), float(jnp.vdot(t, vjp(u)[0])), rtol=1e-5)


# --------------------------------------------------------------------------- transformations, modules


def test_jit_and_vmap():
    x = jnp.asarray(_x((5, 3, 16)))
    w, b = jnp.asarray(W), jnp.asarray(B)
    eager = jln.poly_norm(x, w, b)
    np.testing.assert_array_equal(np.asarray(jax.jit(jln.poly_norm)(x, w, b)), np.asarray(eager))
    mapped = jax.jit(jax.vmap(lambda v: jln.poly_norm(v, w, b)))(x)
    loop = jnp.stack([jln.poly_norm(x[i], w, b) for i in range(5)])
    np.testing.assert_allclose(np.asarray(mapped), np.asarray(loop), rtol=1e-6, atol=1e-6)
    # per-example weights
    ws = jnp.asarray(np.random.default_rng(1).uniform(0, 1, (5, 3)).astype(np.float32))
    ys = jax.vmap(lambda v, wi: jln.poly_norm(v, wi, b))(x, ws)
    for i in range(5):
        assert _rel(np.asarray(ys[i], np.float64), _np64(np.asarray(x[i]), w=np.asarray(ws[i]))) <= 1e-6


def test_linen_and_nnx_agree_and_init_as_liger():
    x = jnp.asarray(_x((2, 3, 12)))
    lin = jnn.PolyNorm(eps=1e-5)
    variables = lin.init(jax.random.key(0), x)
    p = variables["params"]
    np.testing.assert_array_equal(np.asarray(p["weight"]), np.full(3, 1 / 3, np.float32))
    assert p["bias"].shape == () and float(p["bias"]) == 0.0
    nm = jnnx.PolyNorm(eps=1e-5)
    np.testing.assert_array_equal(np.asarray(nm.weight[...]), np.asarray(p["weight"]))
    np.testing.assert_array_equal(np.asarray(lin.apply(variables, x)), np.asarray(nm(x)))
    assert _rel(np.asarray(nm(x), np.float64), _np64(np.asarray(x), w=np.full(3, 1 / 3), b=0.0, eps=1e-5)) <= 1e-6
    y = jnn.PolyNorm(dtype=jnp.bfloat16).apply(variables, x)
    assert y.dtype == jnp.bfloat16 and jnnx.PolyNorm(dtype=jnp.bfloat16)(x).dtype == jnp.bfloat16


def test_to_torch_state_dict_has_ligers_names():
    from jln.interop import to_torch_state_dict

    nm = jnnx.PolyNorm()
    sd = to_torch_state_dict(nm)
    assert set(sd) == {"weight", "bias"} and tuple(sd["weight"].shape) == (3,) and tuple(sd["bias"].shape) == ()
    x = _x((2, 8))
    ref = reference.poly_norm(torch.from_numpy(x), sd["weight"], sd["bias"]).numpy()
    assert _rel(np.asarray(nm(jnp.asarray(x)), np.float64), ref) <= 1e-6


def test_no_torch_class_to_convert():
    from jln.interop import supported_modules

    assert not any("PolyNorm" in str(row) for row in supported_modules())


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("call", "exc", "words"),
    [
        (lambda: jln.poly_norm(jnp.ones((2, 4)), jnp.ones(2), jnp.zeros(())), ValueError, "weight.shape=(2,)"),
        (lambda: jln.poly_norm(jnp.ones((2, 4)), jnp.ones(3), jnp.zeros(2)), ValueError, "bias.shape=(2,)"),
        (lambda: jln.poly_norm(jnp.ones((2, 4)), jnp.ones(3), 0.0), TypeError, "`bias` must be an array"),
        (lambda: jln.poly_norm(jnp.ones((2, 4)), [1, 1, 1], jnp.zeros(())), TypeError, "`weight` must be an array"),
        (lambda: jln.poly_norm(jnp.ones((2, 4), jnp.int32), jnp.ones(3), jnp.zeros(())), TypeError,
         "`x` must have a floating dtype"),
        (lambda: jln.poly_norm(jnp.ones((2, 4)), jnp.ones(3, jnp.int32), jnp.zeros(())), TypeError,
         "`weight` must have a floating dtype"),
        (lambda: jln.poly_norm(jnp.ones((2, 4)), jnp.ones(3), jnp.zeros(()), eps=-1.0), ValueError, "eps=-1.0"),
        (lambda: jln.poly_norm(jnp.ones((2, 4)), jnp.ones(3), jnp.zeros(()), axis=(0, 0)), ValueError, "repeats an axis"),
        (lambda: jnnx.PolyNorm(eps=float("inf")), ValueError, "`eps` must be finite"),
        (lambda: jnnx.PolyNorm(weight_init=1.0), TypeError, "`weight_init` must be an initializer"),
        (lambda: jnn.PolyNorm(epsilon=1e-6), TypeError, "jln calls it eps="),
    ],
)
def test_bad_input(call, exc, words):
    with pytest.raises(exc, match=words.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        call()
