"""QuantizedRMSNorm / QuantizedLayerNorm: linen and NNX give the function's codes, train under
jit (20 steps, per-row fp8 outputs feeding a matmul) and refuse what they cannot hold."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import jln
from jln import linen as jnn
from jln import nnx as jnnx


def bits(a: jax.Array) -> np.ndarray:
    return np.asarray(jax.lax.bitcast_convert_type(a, jnp.uint8))


X = jnp.asarray(np.random.default_rng(0).standard_normal((8, 64)).astype(np.float32)).astype(jnp.bfloat16)


@pytest.mark.parametrize("name", ["QuantizedRMSNorm", "QuantizedLayerNorm"])
@pytest.mark.parametrize("quant", [None, jln.Quant(dtype="int8", scaling="tensor"), jln.Quant(scaling="mxfp8")])
def test_linen_nnx_function_agree(name: str, quant: jln.Quant | None) -> None:
    lin = getattr(jnn, name)(quantize=quant)
    q_lin = lin.apply(lin.init(jax.random.key(0), X), X)
    q_nnx = getattr(jnnx, name)(64, quantize=quant)(X)
    fn = jln.rms_norm if name == "QuantizedRMSNorm" else jln.layer_norm
    w = jnp.ones(64, jnp.float32)
    q_fn = fn(X, w, quantize=quant or jln.Quant()) if name == "QuantizedRMSNorm" else fn(
        X, w, jnp.zeros(64, jnp.float32), quantize=quant or jln.Quant())
    for q in (q_lin, q_nnx):
        assert isinstance(q, jln.Quantized)
        np.testing.assert_array_equal(bits(q.values), bits(q_fn.values))
        np.testing.assert_array_equal(np.asarray(q.scale.astype(jnp.float32)), np.asarray(q_fn.scale.astype(jnp.float32)))


def test_module_options_checked() -> None:
    with pytest.raises(ValueError, match="`amax_history_len` must be an int >= 1"):
        jnn.QuantizedRMSNorm(quantize=jln.Quant(scaling="delayed"), amax_history_len=0)
    with pytest.raises(TypeError, match="must be a jln.Quant or None"):
        jnnx.QuantizedLayerNorm(64, quantize="fp8")  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["QuantizedRMSNorm", "QuantizedLayerNorm"])
def test_delayed_state_linen_and_nnx(name: str) -> None:
    """The amax history is state: linen updates it in a mutable apply, NNX in training mode;
    both give the function's codes, scales and histories step by step."""
    quant = jln.Quant(scaling="delayed")
    fn = jln.rms_norm if name == "QuantizedRMSNorm" else jln.layer_norm
    lin = getattr(jnn, name)(quantize=quant, amax_history_len=4)
    variables = lin.init(jax.random.key(0), X)
    assert variables["batch_stats"]["amax_history"].shape == (4,)
    mod = getattr(jnnx, name)(64, quantize=quant, amax_history_len=4)
    hist = jnp.zeros(4, jnp.float32)
    for step in range(3):
        x = X * (step + 1.0)
        q_fn = fn(x, jnp.ones(64, jnp.float32), quantize=quant, amax_history=hist)
        q_lin, updates = lin.apply(variables, x, mutable=["batch_stats"])
        variables = {**variables, **updates}
        q_nnx = mod(x)
        assert q_fn.amax_history is not None
        for q in (q_lin, q_nnx):
            np.testing.assert_array_equal(bits(q.values), bits(q_fn.values))
            np.testing.assert_array_equal(np.asarray(q.scale), np.asarray(q_fn.scale))
        np.testing.assert_array_equal(np.asarray(variables["batch_stats"]["amax_history"]), np.asarray(q_fn.amax_history))
        np.testing.assert_array_equal(np.asarray(mod.amax_history[...]), np.asarray(q_fn.amax_history))
        hist = q_fn.amax_history
    # eval: the history is read, not updated
    before = np.asarray(mod.amax_history[...])
    mod.eval()
    mod(X)
    np.testing.assert_array_equal(np.asarray(mod.amax_history[...]), before)
    lin.apply(variables, X)  # not mutable: uses the history, no error


def test_nnx_training_loop_row_fp8() -> None:
    """20 jitted steps of an NNX model whose norm hands per-row e4m3 codes to a Dense."""
    rng = np.random.default_rng(1)
    x = jnp.asarray(rng.standard_normal((32, 64)).astype(np.float32)).astype(jnp.bfloat16)
    target = jnp.asarray(rng.standard_normal((32, 16)).astype(np.float32))

    class Model(nnx.Module):
        def __init__(self, rngs: nnx.Rngs):
            self.norm = jnnx.QuantizedRMSNorm(64, convention="llama")
            self.proj = nnx.Linear(64, 16, rngs=rngs)

        def __call__(self, x: jax.Array) -> jax.Array:
            return self.proj(self.norm(x).dequantize())

    model = Model(nnx.Rngs(0))
    graphdef, params = nnx.split(model, nnx.Param)

    @jax.jit
    def step(params):  # type: ignore[no-untyped-def]
        def loss(p):  # type: ignore[no-untyped-def]
            return jnp.mean((nnx.merge(graphdef, p)(x) - target) ** 2)

        value, g = jax.value_and_grad(loss)(params)
        return jax.tree.map(lambda a, b: a - 0.05 * b, params, g), value, g

    losses = []
    for _ in range(20):
        params, value, g = step(params)
        assert all(bool(jnp.isfinite(v).all()) for v in jax.tree.leaves(g))
        losses.append(float(value))
    assert losses[-1] < 0.9 * losses[0]
    # the norm's scale learns (a gradient reached it straight through the codes)
    assert float(jnp.abs(params["norm"]["scale"][...] - 1).max()) > 0


def test_nnx_training_loop_delayed_state_under_jit() -> None:
    """20 jitted steps (nnx.jit) with delayed scaling: the model learns, and its amax history
    (state) holds the last 8 steps' amaxes, newest first."""
    rng = np.random.default_rng(2)
    x = jnp.asarray(rng.standard_normal((32, 64)).astype(np.float32)).astype(jnp.bfloat16)
    target = jnp.asarray(rng.standard_normal((32, 16)).astype(np.float32))

    class Model(nnx.Module):
        def __init__(self, rngs: nnx.Rngs):
            self.norm = jnnx.QuantizedRMSNorm(64, quantize=jln.Quant(scaling="delayed"), amax_history_len=8)
            self.proj = nnx.Linear(64, 16, rngs=rngs)

        def __call__(self, x: jax.Array) -> jax.Array:
            return self.proj(self.norm(x).dequantize())

    model = Model(nnx.Rngs(0))

    @nnx.jit
    def step(model: Model) -> jax.Array:
        def loss(m: Model) -> jax.Array:
            return jnp.mean((m(x) - target) ** 2)

        value, g = nnx.value_and_grad(loss)(model)
        nnx.update(model, jax.tree.map(lambda a, b: a - 0.05 * b, nnx.state(model, nnx.Param), g))
        return value

    losses, firsts = [], []
    for _ in range(20):
        losses.append(float(step(model)))
        firsts.append(float(model.norm.amax_history[...][0]))
    assert losses[-1] < 0.9 * losses[0]
    hist = np.asarray(model.norm.amax_history[...])
    np.testing.assert_array_equal(hist, np.asarray(firsts[::-1][:8], np.float32))
    assert (hist > 0).all()
