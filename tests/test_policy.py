"""One test (or more) per line of the README's numerics table."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jln

from ._util import first_fast

torch = pytest.importorskip("torch")

RMS_CONVENTIONS = sorted(jln.CONVENTIONS)


# --- statistics dtype --------------------------------------------------------------------
def _reduction_dtypes(fn, *args):
    """dtypes of every reduce_sum in the printed jaxpr of fn(*args) (nested jaxprs included)."""
    text = str(jax.make_jaxpr(fn)(*args))
    return re.findall(r"(bf16|f16|f32|f64)\[[0-9,]*\] = reduce_sum", text)


@pytest.mark.parametrize("dtype,stats", [("float16", "float32"), ("bfloat16", "float32"), ("float32", "float32"), ("float64", "float64")])
def test_statistics_dtype(dtype, stats):
    with jax.enable_x64(dtype == "float64"):
        x = jnp.ones((4, 16), dtype)
        short = {"float32": "f32", "float64": "f64"}[stats]
        # the XLA path's reductions (the native CPU kernels reduce in float32 by construction;
        # tests/test_native.py holds them to the XLA path's results)
        fns = (lambda x: jln.layer_norm(x, impl="xla"), lambda x: jln.rms_norm(x, impl="xla"),
               lambda x: jln.rms_norm(x, convention="seed", impl="xla"))
        for fn in fns:
            dts = _reduction_dtypes(fn, x)
            assert dts and set(dts) == {short}, dts


def test_variance_never_negative_on_near_constant_rows():
    # rows where E[x^2] - E[x]^2 rounds negative in float32 (jax#30426): jln stays finite and
    # a constant row is exactly zero-variance
    base = np.float32(3.0e4) + np.float32(0.002) * np.arange(8, dtype=np.float32)
    x = jnp.asarray(np.stack([base, np.full(8, 3.0e4, np.float32), base[::-1]]))
    y = np.asarray(jln.layer_norm(x, eps=0.0 + 1e-12))
    assert np.isfinite(y).all()
    assert np.all(y[1] == 0)
    assert np.abs(y).max() <= np.sqrt(8) + 1e-5  # |LN(x)| <= sqrt(N - 1) for any row


# --- large offsets -------------------------------------------------------------------------
def _offset_data(c, shape=(16, 512), seed=0):
    return (np.float32(c) + np.random.default_rng(seed).standard_normal(shape).astype(np.float32)).astype(np.float32)


def _ln_err(x32, y):
    ref = torch.nn.functional.layer_norm(torch.from_numpy(x32.astype(np.float64)), (x32.shape[-1],)).numpy()
    return float(np.abs(np.asarray(y, np.float64) - ref).max())


@pytest.mark.parametrize("c", [0.0, 1e2, 1e4, 1e5, 3e5])
def test_large_offset_error_at_most_twice_torch(c):
    x = _offset_data(c)
    jln_err = _ln_err(x, jln.layer_norm(jnp.asarray(x)))
    torch_err = _ln_err(x, torch.nn.functional.layer_norm(torch.from_numpy(x), (x.shape[-1],)).numpy())
    assert jln_err <= 2 * torch_err + 1e-6, (jln_err, torch_err)


def test_flax_fast_variance_fails_on_offsets_and_jln_does_not():
    import flax.linen as nn

    x = _offset_data(1e4)
    fast = nn.LayerNorm(epsilon=1e-5)
    two_pass = nn.LayerNorm(epsilon=1e-5, use_fast_variance=False)
    v = fast.init(jax.random.key(0), jnp.asarray(x))
    flax_err = _ln_err(x, fast.apply(v, jnp.asarray(x)))
    flax2_err = _ln_err(x, two_pass.apply(v, jnp.asarray(x)))
    jln_err = _ln_err(x, jln.layer_norm(jnp.asarray(x)))
    assert flax_err > 100, flax_err  # measured: ~1e3 (REFERENCE: 1282 at this offset)
    assert flax2_err < 1e-2 and jln_err < 1e-3, (flax2_err, jln_err)


# --- output dtype -------------------------------------------------------------------------
@pytest.mark.parametrize(
    "conv,expected",
    [("torch", "bfloat16"), ("gemma", "bfloat16"), ("llama", "float32"), ("t5", "float32"), ("diffusers", "float32"), ("seed", "float32")],
)
def test_output_dtype_bf16_input_f32_weight(conv, expected):
    x = jnp.ones((2, 8), jnp.bfloat16)
    w = jnp.ones((8,), jnp.float32)
    assert jln.rms_norm(x, w, convention=conv).dtype == expected
    # and what the torch reference does
    from jln.families.rms_norm import reference as _reference

    t = _reference.rms_norm(torch.ones(2, 8, dtype=torch.bfloat16), torch.ones(8), convention=conv, eps=1e-6)
    assert str(t.dtype) == f"torch.{expected}"


def test_layer_norm_output_dtype_is_input_dtype_even_with_f32_params():
    for dt in ("bfloat16", "float16", "float32"):
        x = jnp.ones((2, 8), dt)
        y = jln.layer_norm(x, jnp.ones((8,), jnp.float32), jnp.zeros((8,), jnp.float32))
        assert y.dtype == dt
        y, s = jln.add_layer_norm(x, x, jnp.ones((8,), jnp.float32))
        assert y.dtype == dt and s.dtype == dt
        y, s = jln.add_layer_norm(x, x, residual_in_fp32=True)
        assert y.dtype == dt and s.dtype == jnp.float32


# --- float16 range ------------------------------------------------------------------------
# "eager" squares in float16 as its references do (x**2 overflows above 256, as in torch; its
# own test compares that with torch): every other convention keeps float16's extremes finite
@pytest.mark.parametrize("conv", [None, *(c for c in RMS_CONVENTIONS if c != "eager")])
def test_float16_extremes_are_finite_and_correct(conv):
    rng = np.random.default_rng(0)
    x = (rng.uniform(-6e4, 6e4, (8, 64))).astype(np.float16)
    x[0] = 6e4  # constant extreme row
    x[1, ::2], x[1, 1::2] = 6e4, -6e4
    xj = jnp.asarray(x)
    x64 = torch.from_numpy(x.astype(np.float64))
    if conv is None:
        y = jln.layer_norm(xj)
        ref = torch.nn.functional.layer_norm(x64, (64,)).numpy()
    else:
        y = jln.rms_norm(xj, convention=conv)
        from jln.families.rms_norm import reference as _reference

        ref = _reference.rms_norm(x64, convention=conv, eps={"torch": 1.2e-7, "seed": 1e-8}.get(conv, 1e-6)).numpy()
    y = np.asarray(y, np.float64)
    assert np.isfinite(y).all()
    np.testing.assert_allclose(y, ref, rtol=2e-3, atol=2e-3)


# --- degenerate rows ----------------------------------------------------------------------
def test_zero_variance_rows_give_bias_and_finite_grads():
    x = jnp.stack([jnp.full((16,), 7.25), jnp.linspace(-1, 1, 16), jnp.zeros((16,))])
    w = jnp.linspace(0.5, 1.5, 16)
    b = jnp.linspace(-1, 1, 16)
    y = jln.layer_norm(x, w, b)
    np.testing.assert_array_equal(np.asarray(y[0]), np.asarray(b))
    np.testing.assert_array_equal(np.asarray(y[2]), np.asarray(b))
    grads = jax.grad(lambda x, w, b: jnp.sum(jln.layer_norm(x, w, b) ** 3), argnums=(0, 1, 2))(x, w, b)
    assert all(np.isfinite(np.asarray(g)).all() for g in grads)


@pytest.mark.parametrize("impl", ["xla", "native"])
def test_rows_whose_sum_of_squares_overflows_give_bias_as_torch_and_flax(impl):
    # a known limit, shared with torch and flax: a float32 row whose squared deviations sum past
    # float32's range (spread ~1e19 at 16 wide) gets rstd = 1/sqrt(inf) = 0, so y = bias (RMSNorm:
    # 0) instead of the O(1) values the row normalizes to; a spread of 1e17 is still exact
    if impl == "native":
        from jln.kernels import _cpu

        if jax.default_backend() != "cpu" or _cpu.available() is not None:
            pytest.skip("no native CPU kernels here")
    import flax.linen as nn

    r = np.random.default_rng(3).standard_normal((2, 16))
    w, b = jnp.linspace(0.5, 1.5, 16), jnp.linspace(-1, 1, 16)
    x = jnp.asarray(r * 1e19, jnp.float32)
    y = jln.layer_norm(x, w, b, impl=impl)
    np.testing.assert_array_equal(np.asarray(y), np.broadcast_to(np.asarray(b), (2, 16)))
    np.testing.assert_array_equal(np.asarray(jln.rms_norm(x, w, impl=impl)), np.zeros((2, 16), np.float32))
    tx, tw, tb = (torch.tensor(np.asarray(a)) for a in (x, w, b))
    np.testing.assert_array_equal(torch.nn.functional.layer_norm(tx, (16,), tw, tb).numpy(), np.asarray(y))
    np.testing.assert_array_equal(torch.nn.functional.rms_norm(tx, (16,), tw).numpy(), np.zeros((2, 16), np.float32))
    flax_y = nn.LayerNorm(epsilon=1e-5).apply({"params": {"scale": w, "bias": b}}, x)
    np.testing.assert_array_equal(np.asarray(flax_y), np.asarray(y))
    x = jnp.asarray(r * 1e17, jnp.float32)  # below the limit: the normalized row, to float32 rounding
    ref = (r - r.mean(-1, keepdims=True)) / r.std(-1, keepdims=True)
    np.testing.assert_allclose(np.asarray(jln.layer_norm(x, impl=impl)), ref, rtol=0, atol=2e-6)


@pytest.mark.parametrize("conv", RMS_CONVENTIONS)
@pytest.mark.parametrize("dtype", first_fast("float32", "bfloat16", "float16"))
def test_all_zero_rows_rms(conv, dtype):
    x = jnp.zeros((3, 8), dtype).at[1].set(jnp.arange(8, dtype=dtype))
    w = jnp.ones((8,), dtype)
    # The seed form's derivative at x = 0 is exactly 1/eps: 1e8 for its default eps, beyond
    # float16's range (65504), so float16 needs eps >= 2e-5 there (see the next test).
    eps = 1e-4 if (conv, dtype) == ("seed", "float16") else None
    y = jln.rms_norm(x, w, convention=conv, eps=eps)
    assert np.isfinite(np.asarray(y, np.float32)).all()
    assert np.all(np.asarray(y[0], np.float32) == 0)
    g = jax.grad(lambda x, w: jnp.sum(jln.rms_norm(x, w, convention=conv, eps=eps).astype(jnp.float32)), argnums=(0, 1))(x, w)
    assert all(np.isfinite(np.asarray(gi, np.float32)).all() for gi in g)


def test_seed_form_gradient_at_zero_is_one_over_eps():
    x = jnp.zeros((1, 8), jnp.float32)
    g = jax.grad(lambda x: jnp.sum(jln.rms_norm(x, convention="seed") * jnp.arange(8.0)[None]))(x)
    np.testing.assert_allclose(np.asarray(g[0]), np.arange(8.0) / 1e-8, rtol=1e-6)


@pytest.mark.parametrize("bad", first_fast(np.nan, np.inf, -np.inf))
@pytest.mark.parametrize("fn", ["layer_norm", "rms_norm", "seed", "add_layer_norm"])
def test_nonfinite_row_is_contained(fn, bad):
    f = {
        "layer_norm": lambda x: jln.layer_norm(x, jnp.full((8,), 1.5), jnp.full((8,), 0.1)),
        "rms_norm": lambda x: jln.rms_norm(x, jnp.full((8,), 1.5), convention="llama"),
        "seed": lambda x: jln.rms_norm(x, convention="seed"),
        "add_layer_norm": lambda x: jln.add_layer_norm(x, x)[0],
    }[fn]
    x = jnp.asarray(np.random.default_rng(0).standard_normal((4, 8)), jnp.float32)
    xb = x.at[2, 3].set(bad)
    y, yb = f(x), f(xb)
    keep = np.array([0, 1, 3])
    np.testing.assert_array_equal(np.asarray(yb)[keep], np.asarray(y)[keep])
    gfun = jax.grad(lambda x: jnp.sum(f(x) * jnp.arange(8.0)[None]))
    g, gb = gfun(x), gfun(xb)
    np.testing.assert_array_equal(np.asarray(gb)[keep], np.asarray(g)[keep])


@pytest.mark.parametrize("impl", ["auto", "xla", "native", "pallas"])
@pytest.mark.parametrize("name", ["layer_norm", "rms_norm", "add_rms_norm", "adaptive_layer_norm"])
def test_zero_rows(name, impl):
    # an empty batch (or a zero-width axis) is an empty result on every impl, also one asked for
    # by name (impl="native" refused it once: "x is empty")
    fn = {
        "layer_norm": lambda x: jln.layer_norm(x, impl=impl),
        "rms_norm": lambda x: jln.rms_norm(x, impl=impl),
        "add_rms_norm": lambda x: jln.add_rms_norm(x, x, impl=impl)[0],
        "adaptive_layer_norm": lambda x: jln.adaptive_layer_norm(x, jnp.zeros(x.shape[:1] + (2 * x.shape[-1],)), impl=impl)[0],
    }[name]
    for shape in ((0, 8), (3, 0)):
        x = jnp.zeros(shape, jnp.bfloat16)
        assert fn(x).shape == shape
        g = jax.grad(lambda x: jnp.sum(fn(x).astype(jnp.float32)))(x)
        assert g.shape == shape
    # vmap over an empty axis: the kernels see no rows (the Pallas launcher once asserted)
    xs = jnp.zeros((0, 3, 8), jnp.bfloat16)
    assert jax.vmap(fn)(xs).shape == xs.shape
    g = jax.grad(lambda v: jnp.sum(jax.vmap(fn)(v).astype(jnp.float32)))(xs)
    assert g.shape == xs.shape


# --- bad input ----------------------------------------------------------------------------
def test_non_floating_input_is_a_type_error():
    with pytest.raises(TypeError, match=r"floating dtype.*int32"):
        jln.layer_norm(jnp.arange(8))
    with pytest.raises(TypeError, match="received list"):
        jln.rms_norm([1.0, 2.0])
    with pytest.raises(TypeError, match="`scale` must have a floating dtype"):
        jln.layer_norm(jnp.ones((2, 4)), jnp.ones((4,), jnp.int32))


def test_torch_tensors_scalars_and_string_eps_are_refused_clearly():
    with pytest.raises(TypeError, match=r"`x` is a torch.Tensor.*jnp.asarray\(x.detach\(\).cpu\(\).numpy\(\)\)"):
        jln.layer_norm(torch.ones(2, 8))
    with pytest.raises(TypeError, match="`scale` is a torch.Tensor"):
        jln.rms_norm(jnp.ones((2, 8)), torch.ones(8))
    with pytest.raises(ValueError, match=r"scalar \(rank 0\).*x\[None\]"):
        jln.layer_norm(jnp.float32(1.0))
    for eps in ("0.5", True, jnp.ones(2)):
        with pytest.raises(TypeError, match="`eps` must be a Python float"):
            jln.layer_norm(jnp.ones((2, 3)), eps=eps)
    with pytest.raises(TypeError, match="not a traced value"):
        jax.jit(lambda e: jln.layer_norm(jnp.ones((2, 3)), eps=e))(1e-5)
    assert jln.layer_norm(jnp.ones((2, 3)), eps=np.float32(1e-5)).shape == (2, 3)  # a NumPy scalar is a number


def test_param_shape_mismatch_is_a_value_error():
    x = jnp.ones((4, 2, 3))
    with pytest.raises(ValueError, match=r"must have shape \(3,\), x's sizes along the normalized axis 2; received scale.shape=\(2,\)"):
        jln.layer_norm(x, jnp.ones((2,)))
    with pytest.raises(ValueError, match="pass axis=\\(-2, -1\\)"):
        jln.layer_norm(x, jnp.ones((2, 3)))
    with pytest.raises(ValueError, match="bias"):
        jln.rms_norm(x, jnp.ones((3,)), bias=jnp.ones((3,)), convention="llama")
    # a per-feature scale with two normalized axes: broadcast it (never "normalize over fewer")
    with pytest.raises(ValueError, match=r"broadcast it: jnp.broadcast_to\(scale, \(2, 3\)\)") as info:
        jln.layer_norm(x, jnp.ones((3,)), axis=(-2, -1))
    assert "pass axis" not in str(info.value)


@pytest.mark.parametrize("axis,match", [(3, "out of range"), (-4, "out of range"), ((1, -2), "repeats"), ((), "at least one axis")])
def test_bad_axis_is_a_value_error(axis, match):
    for fn in (jln.layer_norm, jln.rms_norm):
        with pytest.raises(ValueError, match=match):
            fn(jnp.ones((4, 2, 3)), axis=axis)


def test_other_bad_options():
    with pytest.raises(ValueError, match="unknown convention"):
        jln.rms_norm(jnp.ones((2, 3)), convention="llama2")
    with pytest.raises(ValueError, match="eps"):
        jln.layer_norm(jnp.ones((2, 3)), eps=-1.0)
    with pytest.raises(ValueError, match="same shape"):
        jln.add_layer_norm(jnp.ones((2, 3)), jnp.ones((3, 2)))
    with pytest.raises(ValueError, match="6 equal chunks"):
        jln.adaptive_layer_norm(jnp.ones((2, 5, 4)), jnp.ones((2, 20)), order="dit")
    with pytest.raises(ValueError, match=r"\[B, D\].*\[1, T, D\]"):
        jln.modulate(jnp.ones((2, 5, 4)), jnp.ones((3, 4)), None)
    # a batch mismatch in emb is blamed on emb (the argument passed), not on its chunks' names
    with pytest.raises(ValueError, match=r"`emb` \(shape \(3, 8\).*x.shape=\(2, 5, 4\)"):
        jln.adaptive_layer_norm(jnp.ones((2, 5, 4)), jnp.ones((3, 8)))


def test_float16_subnormal_inputs_keep_their_gradient():
    """jln rounds inputs to their dtype explicitly (jit-proof); subnormals must stay differentiable."""
    x = np.array([[3e-6, 0.5, -1.0, 2.0]], np.float16)  # 3e-6 is a float16 subnormal
    g = jax.grad(lambda x: jnp.sum(jln.rms_norm(x).astype(jnp.float32) * jnp.arange(1.0, 5.0)[None]))(jnp.asarray(x))
    xt = torch.from_numpy(x).requires_grad_(True)
    (torch.nn.functional.rms_norm(xt, (4,)).float() * torch.arange(1.0, 5.0)).sum().backward()
    assert abs(float(g[0, 0])) > 0.1
    np.testing.assert_allclose(np.asarray(g, np.float32), xt.grad.float().numpy(), rtol=2e-3, atol=2e-3)


def _torch64_grad(fn, x, g):
    xt = torch.from_numpy(np.asarray(x, np.float64)).requires_grad_(True)
    (fn(xt) * torch.from_numpy(np.asarray(g, np.float64))).sum().backward()
    return xt.grad.numpy()


_TORCH_FORMS = {
    "layer_norm": (lambda x, impl: jln.layer_norm(x, impl=impl), lambda t: torch.nn.functional.layer_norm(t, t.shape[-1:])),
    "rms_norm": (lambda x, impl: jln.rms_norm(x, impl=impl),
                 lambda t: torch.nn.functional.rms_norm(t, t.shape[-1:], eps=float(np.finfo(np.float32).eps))),
    "add_layer_norm": (lambda x, impl: jln.add_layer_norm(x, x, impl=impl)[0],
                       lambda t: torch.nn.functional.layer_norm(2 * t, t.shape[-1:])),
}


@pytest.mark.parametrize("impl", first_fast("auto", "xla"))
@pytest.mark.parametrize("op", sorted(_TORCH_FORMS))
def test_small_float16_gradients_are_not_flushed(op, impl):
    # a float16 cotangent below float16's smallest normal (2**-14, e.g. an unscaled loss's
    # gradient) must come back as torch gives it, rounded to float16 with subnormals: the input
    # rounding's derivative once flushed every such value to 0 on the XLA path (half the entries)
    r = np.random.default_rng(11)
    x = r.standard_normal((8, 64)).astype(np.float16)
    g = (1e-4 * r.standard_normal((8, 64))).astype(np.float16)
    ours, theirs = _TORCH_FORMS[op]
    ref = _torch64_grad(theirs, x, g)
    dx = jax.vjp(lambda v: ours(v, impl), jnp.asarray(x))[1](jnp.asarray(g))[0]
    assert dx.dtype == jnp.float16
    dx = np.asarray(dx, np.float64)
    assert np.count_nonzero(dx) == np.count_nonzero(ref) == dx.size
    _within_float16_ulp(dx, ref)
    # forward mode: the tangent passes the input rounding unchanged (and is rounded to float16
    # with the output)
    tan = jax.jvp(lambda v: ours(v, impl), (jnp.asarray(x),), (jnp.asarray(g),))[1]
    _, t_tan = torch.func.jvp(theirs, (torch.from_numpy(x.astype(np.float64)),), (torch.from_numpy(g.astype(np.float64)),))
    assert tan.dtype == jnp.float16 and np.count_nonzero(np.asarray(tan)) == tan.size
    _within_float16_ulp(np.asarray(tan, np.float64), t_tan.numpy())


def _within_float16_ulp(got, ref):
    """``got`` is ``ref`` (float64) rounded to float16, subnormals kept, within two ulps of
    float16 (a gradient is rounded to float16 where the forward computes in it: at the output
    and, for add_*, at the residual sum, as torch's is)."""
    ulp = np.spacing(np.abs(ref).astype(np.float16)).astype(np.float64)
    assert np.all(np.abs(got - ref) <= 2 * ulp), np.max(np.abs(got - ref) / ulp)


@pytest.mark.parametrize(
    "scale,eps,impl", [(1e13, 1e-5, "xla"), (1e13, 1e-5, "auto"), (1e13, 1e-5, "pallas"), (1e-14, 0.0, "xla"), (1e-14, 0.0, "auto")]
)
def test_gradients_where_rstd_cubed_leaves_float32_range(scale, eps, impl):
    # d rstd/d var = -rstd^3/2: a row with std 1e13 (rstd^3 = 1e-39) or, with eps=0, 1e-14
    # (rstd^3 = 1e42) once gave dx 18% off or NaN on the XLA path and in forward mode
    r = np.random.default_rng(12)
    x = (r.standard_normal((2, 8)) * scale).astype(np.float32)
    g = r.standard_normal((2, 8)).astype(np.float32)
    for ours, theirs in (
        (lambda v: jln.layer_norm(v, eps=eps, impl=impl), lambda t: torch.nn.functional.layer_norm(t, (8,), eps=eps)),
        (lambda v: jln.rms_norm(v, eps=eps, impl=impl), lambda t: torch.nn.functional.rms_norm(t, (8,), eps=eps)),
    ):
        ref = _torch64_grad(theirs, x, g)
        loss = lambda v, ours=ours: jnp.sum(ours(v) * g)  # noqa: E731
        for got in (jax.grad(loss)(jnp.asarray(x)), jax.jacfwd(loss)(jnp.asarray(x))):
            np.testing.assert_allclose(np.asarray(got, np.float64), ref, rtol=0, atol=2e-6 * np.abs(ref).max())


def _torch64_jvp(fn, x, t):
    return torch.func.jvp(fn, (torch.from_numpy(np.asarray(x, np.float64)),), (torch.from_numpy(np.asarray(t, np.float64)),))[1].numpy()


def _over_4_devices(fn):
    """``fn(v, axis_name)`` with each row's features split over 4 vmapped "devices"."""

    def run(v):
        parts = jnp.moveaxis(v.reshape(v.shape[0], 4, -1), 1, 0)
        return jnp.moveaxis(jax.vmap(lambda u: fn(u, "i"), axis_name="i")(parts), 0, 1).reshape(v.shape)

    return run


@pytest.mark.parametrize("impl", first_fast("auto", "xla", "pallas"))
def test_gradients_of_rows_whose_squares_near_float32_overflow(impl):
    # rows with std 1e18 (n * var ~ 1e38): chained through var and rstd, d rstd = -rstd^3
    # mean(d dv) and var's cotangent scale as 1/std^2 ~ 1e-37, and XLA flushes what falls below
    # 2**-126 to 0: dx was 1-2% off in reverse mode on the XLA path and 0.4-0.9% in forward
    # mode on every impl (the kernels' forward mode is the XLA body's JVP)
    F = torch.nn.functional
    n, eps = 64, 1e-5
    r = np.random.default_rng(21)
    x = (r.standard_normal((64, n)) * 1e18).astype(np.float32)
    res = (r.standard_normal((64, n)) * 5e17).astype(np.float32)
    emb = (0.5 * r.standard_normal((64, 2 * n))).astype(np.float32)
    g, t = r.standard_normal((2, 64, n)).astype(np.float32)
    res64, (sc, sh) = torch.from_numpy(res.astype(np.float64)), torch.from_numpy(emb.astype(np.float64)).chunk(2, -1)
    forms = {
        "layer_norm": (lambda v: jln.layer_norm(v, eps=eps, impl=impl), lambda u: F.layer_norm(u, (n,), eps=eps)),
        "rms_norm": (lambda v: jln.rms_norm(v, eps=eps, impl=impl), lambda u: F.rms_norm(u, (n,), eps=eps)),
        "rms_norm llama": (lambda v: jln.rms_norm(v, eps=eps, convention="llama", impl=impl),
                           lambda u: F.rms_norm(u, (n,), eps=eps)),
        "add_layer_norm": (lambda v: jln.add_layer_norm(v, jnp.asarray(res), eps=eps, impl=impl)[0],
                           lambda u: F.layer_norm(u + res64, (n,), eps=eps)),
        "add_rms_norm": (lambda v: jln.add_rms_norm(v, jnp.asarray(res), eps=eps, impl=impl)[0],
                         lambda u: F.rms_norm(u + res64, (n,), eps=eps)),
        "adaptive_layer_norm": (lambda v: jln.adaptive_layer_norm(v, jnp.asarray(emb), eps=eps, impl=impl)[0],
                                lambda u: F.layer_norm(u, (n,), eps=eps) * (1 + sc) + sh),
    }
    if impl == "xla":  # rows split over a mapped axis: the rule's means are of the whole row
        forms["layer_norm axis_name"] = (_over_4_devices(lambda v, a: jln.layer_norm(v, eps=eps, axis_name=a)), forms["layer_norm"][1])
        forms["rms_norm axis_name"] = (_over_4_devices(lambda v, a: jln.rms_norm(v, eps=eps, axis_name=a)), forms["rms_norm"][1])
    errors = {}
    for name, (ours, theirs) in forms.items():
        want_dx, want_tan = _torch64_grad(theirs, x, g), _torch64_jvp(theirs, x, t)
        dx = jax.vjp(ours, jnp.asarray(x))[1](jnp.asarray(g))[0]
        tan = jax.jvp(ours, (jnp.asarray(x),), (jnp.asarray(t),))[1]
        for mode, got, want in (("vjp", dx, want_dx), ("jvp", tan, want_tan)):
            errors[name, mode] = float(np.abs(np.asarray(got, np.float64) - want).max() / np.abs(want).max())
    assert max(errors.values()) <= 1e-5, {k: f"{v:.1e}" for k, v in errors.items() if v > 1e-5}


@pytest.mark.parametrize("dtype", first_fast("bfloat16", "float32"))
def test_eps_zero_rows_below_float32_normal_variance(dtype):
    # with eps=0 a row with std ~1e-20 has squares below float32's smallest normal, which XLA
    # flushes to 0 (rstd = inf, y = inf); torch keeps subnormals and stays finite. jln scales
    # such rows by a power of two first (eps < 2**-101 only), so they normalize as in float64,
    # and so do rows whose squares overflow (std 1e30, which a default eps leaves at y = bias)
    r = np.random.default_rng(13).standard_normal((3, 16))
    for s in (1e-20, 1e-30, 1e30):
        x = jnp.asarray(r * s, dtype)
        x64 = np.asarray(x, np.float64)
        want_ln = (x64 - x64.mean(-1, keepdims=True)) / x64.std(-1, keepdims=True)
        want_rms = x64 / np.sqrt((x64 * x64).mean(-1, keepdims=True))
        tol = 4e-6 if dtype == "float32" else 8e-3
        for impl in ("auto", "xla"):
            np.testing.assert_allclose(np.asarray(jln.layer_norm(x, eps=0.0, impl=impl), np.float64), want_ln, atol=tol, rtol=0)
            np.testing.assert_allclose(np.asarray(jln.rms_norm(x, eps=0.0, impl=impl), np.float64), want_rms, atol=tol, rtol=0)
        if s == 1e-20 and dtype == "float32":  # torch is finite here (on subnormal squares), jln closer
            t = torch.nn.functional.layer_norm(torch.from_numpy(np.array(x)), (16,), eps=0.0).numpy()
            assert np.isfinite(t).all()
            err = np.abs(np.asarray(jln.layer_norm(x, eps=0.0), np.float64) - want_ln).max()
            assert err <= np.abs(t - want_ln).max()
        # gradients too, and across a split feature axis (axis_name: one pmax more)
        g = np.random.default_rng(14).standard_normal((3, 16))
        xt = torch.from_numpy(x64).requires_grad_(True)
        (torch.nn.functional.layer_norm(xt, (16,), eps=0.0) * torch.from_numpy(g)).sum().backward()
        want_dx = xt.grad.numpy() * s  # d/dx scales as 1/s: compare in the unit of x
        dx = jax.grad(lambda v, g=g: jnp.sum(jln.layer_norm(v, eps=0.0).astype(jnp.float32) * g))(x)
        np.testing.assert_allclose(np.asarray(dx, np.float64) * s, want_dx, atol=50 * tol, rtol=0)
        split = jnp.moveaxis(x.reshape(3, 4, 4), 1, 0)  # 4 "devices", each with 4 features
        sharded = jax.vmap(lambda v: jln.layer_norm(v, eps=0.0, axis_name="i"), axis_name="i")(split)
        np.testing.assert_allclose(np.asarray(jnp.moveaxis(sharded, 0, 1).reshape(3, 16), np.float64), want_ln, atol=tol, rtol=0)
        sharded = jax.vmap(lambda v: jln.rms_norm(v, eps=0.0, axis_name="i"), axis_name="i")(split)
        np.testing.assert_allclose(np.asarray(jnp.moveaxis(sharded, 0, 1).reshape(3, 16), np.float64), want_rms, atol=tol, rtol=0)
    # a row whose largest |x| is 2**126 or more: scaled by 2**-127, but never by a subnormal
    # factor (which XLA flushes: 0 * inf = NaN); its rstd is then below float32's normal range
    # and y is 0, as with the default eps and in torch
    big = jnp.asarray([[1e38, -2e38, 3e37, 5e37]], jnp.float32)
    for eps in (0.0, None):
        np.testing.assert_array_equal(np.asarray(jln.rms_norm(big, eps=eps)), np.zeros((1, 4), np.float32))
    # the kernels take eps >= 2**-101: asked for by name with a smaller eps, they refuse clearly
    for impl in ("native", "pallas"):
        with pytest.raises(ValueError, match=rf"impl='{impl}' is not available for eps=0\.0.*Use impl='xla' or 'auto'"):
            jln.layer_norm(jnp.ones((2, 8)), eps=0.0, impl=impl)


@pytest.mark.parametrize("impl", ["xla", "auto", "pallas"])
def test_llama_float16_backward_through_subnormal_h(impl):
    # h = x * rstd rounded to float16 has a straight-through derivative also where h is below
    # float16's smallest normal: a zero (padding) row, a row scaled by 1e-4, a single tiny
    # element. The Pallas kernels differentiate that rounding as written (no custom rule
    # there); its subnormal branch once gave them dx = 0 on such elements
    r = np.random.default_rng(15)
    x = r.standard_normal((3, 16)).astype(np.float16)
    x[0], x[1], x[2, 5] = 0, x[1] * np.float16(1e-4), np.float16(1e-5)
    w = (1 + 0.3 * r.standard_normal(16)).astype(np.float16)
    g = r.standard_normal((3, 16)).astype(np.float16)
    t = torch.from_numpy(x.copy()).requires_grad_(True)
    t32 = t.float()
    h = (t32 * torch.rsqrt(t32.pow(2).mean(-1, keepdim=True) + 1e-6)).half()
    (torch.from_numpy(w.copy()) * h).backward(torch.from_numpy(g.copy()))
    want = t.grad.float().numpy()
    dx = jax.vjp(lambda v: jln.rms_norm(v, jnp.asarray(w), convention="llama", impl=impl), jnp.asarray(x))[1](jnp.asarray(g))[0]
    dx = np.asarray(dx, np.float32)
    assert np.abs(want[2, 5]) > 0.5 and np.abs(want[0]).max() > 100
    np.testing.assert_allclose(dx, want, rtol=2e-3, atol=0)
