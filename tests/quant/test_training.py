"""Quantized norms inside a training step under jit: per-row fp8 outputs feeding a matmul for
20 steps, and delayed scaling carrying its amax history from step to step."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import jln


def problem(seed: int = 0) -> tuple[dict[str, jax.Array], jax.Array, jax.Array]:
    rng = np.random.default_rng(seed)
    x = jnp.asarray(rng.standard_normal((64, 128)).astype(np.float32)).astype(jnp.bfloat16)
    target = jnp.asarray(rng.standard_normal((64, 32)).astype(np.float32))
    params = {"w": jnp.ones(128, jnp.float32), "proj": jnp.asarray(0.05 * rng.standard_normal((128, 32)).astype(np.float32))}
    return params, x, target


def train(quant: jln.Quant | None, steps: int = 20) -> list[float]:
    params, x, target = problem()

    def loss(p: dict[str, jax.Array]) -> jax.Array:
        if quant is None:
            h = jln.rms_norm(x, p["w"], convention="llama").astype(jnp.float32)
        else:
            h = jln.rms_norm(x, p["w"], convention="llama", quantize=quant).dequantize()
        return jnp.mean((h @ p["proj"] - target) ** 2)

    @jax.jit
    def step(p: dict[str, jax.Array]) -> tuple[dict[str, jax.Array], jax.Array]:
        value, g = jax.value_and_grad(loss)(p)
        return jax.tree.map(lambda a, b: a - 0.1 * b, p, g), value

    losses = []
    for _ in range(steps):
        params, value = step(params)
        assert all(bool(jnp.isfinite(v).all()) for v in jax.tree.leaves(params))
        losses.append(float(value))
    return losses


def test_row_fp8_training_tracks_unquantized() -> None:
    q = train(jln.Quant(dtype="float8_e4m3fn", scaling="row"))
    ref = train(None)
    assert q[-1] < 0.8 * q[0]  # it learns
    # e4m3's 2**-4 relative rounding of the activations moves the loss by a few percent at most
    np.testing.assert_allclose(q, ref, rtol=0.05)


def test_delayed_scaling_history_across_steps() -> None:
    _, x, _ = problem(1)
    quant = jln.Quant(dtype="float8_e4m3fn", scaling="delayed", amax_compute="max")

    @jax.jit
    def step(w: jax.Array, hist: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
        q = jln.rms_norm(x, w, quantize=quant, amax_history=hist)
        y = jln.rms_norm(x, w)
        assert q.amax_history is not None
        return q.amax_history, q.scale, jnp.max(jnp.abs(y.astype(jnp.float32))), w * 1.1

    w, hist = jnp.ones(128, jnp.float32), jnp.zeros(4, jnp.float32)
    amaxes: list[float] = []
    for i in range(8):
        new_hist, scale, amax, w = step(w, hist)
        # the scale of step i comes from the amaxes of steps i-4 .. i-1 (1 at the start)
        expect = 1.0 if not amaxes else max(amaxes[-4:]) / 448.0
        np.testing.assert_allclose(float(scale), expect, rtol=1e-6)
        amaxes.append(float(amax))
        np.testing.assert_array_equal(np.asarray(new_hist), np.asarray(amaxes[::-1][:4] + [0.0] * (4 - min(4, i + 1)), np.float32))
        hist = new_hist
