"""Property tests (hypothesis): invariances and transformation equivalences."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import jln

SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])

rows = st.integers(1, 4)
width = st.integers(2, 33)


@st.composite
def matrices(draw, lo=-50.0, hi=50.0):
    m, n = draw(rows), draw(width)
    a = draw(arrays(np.float64, (m, n), elements=st.floats(lo, hi, allow_nan=False, width=64)))
    # keep rows away from zero variance so invariances are well conditioned
    a = a + np.linspace(0, 1, n)[None, :] * (1 + np.abs(a).max())
    return a


@SETTINGS
@given(matrices(), st.floats(-1e3, 1e3), st.floats(0.01, 100))
def test_layer_norm_shift_and_scale_invariance(x, shift, scale):
    with jax.enable_x64(True):
        x = jnp.asarray(x)
        base = jln.layer_norm(x, eps=0.0)
        np.testing.assert_allclose(jln.layer_norm(x + shift, eps=0.0), base, atol=1e-8)
        np.testing.assert_allclose(jln.layer_norm(x * scale, eps=0.0), base, atol=1e-8)


@SETTINGS
@given(matrices(), st.floats(0.01, 100), st.sampled_from(sorted(jln.CONVENTIONS)))
def test_rms_norm_scale_invariance(x, scale, conv):
    with jax.enable_x64(True):
        x = jnp.asarray(x)
        np.testing.assert_allclose(
            jln.rms_norm(x * scale, eps=0.0, convention=conv), jln.rms_norm(x, eps=0.0, convention=conv), atol=1e-8
        )


@pytest.mark.slow
@SETTINGS
@given(matrices(-3, 3))
def test_vmap_equals_python_loop_and_jit_equals_eager(x):
    x = jnp.asarray(x, jnp.float32)
    w = jnp.linspace(0.5, 1.5, x.shape[-1])
    for f in (
        lambda r: jln.layer_norm(r, w, w),
        lambda r: jln.rms_norm(r, w, convention="llama"),
        lambda r: jln.add_rms_norm(r, r, w)[0],
    ):
        looped = jnp.stack([f(r) for r in x])
        np.testing.assert_allclose(jax.vmap(f)(x), looped, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(jax.jit(f)(x), f(x), rtol=1e-6, atol=1e-6)


@SETTINGS
@given(matrices(-3, 3), st.sampled_from(["seed", "dit", "continuous", "dit_final"]))
def test_adaptive_ln_with_zero_condition_is_layer_norm(x, order):
    x = jnp.asarray(x, jnp.float32)[None]  # [1, T, D]
    k = len(jln.ORDERS[order])
    y, _ = jln.adaptive_layer_norm(x, jnp.zeros((1, k * x.shape[-1])), order=order, eps=1e-6)
    np.testing.assert_array_equal(y, jln.layer_norm(x, eps=1e-6))
