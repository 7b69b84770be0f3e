"""``quantize=``/``return_stats=`` on add_rms_norm, add_layer_norm and gated_rms_norm: vLLM's
and flashinfer's fused residual add + quantized RMSNorm in torch, the rule applied to each
function's own output, statistics against float64, straight-through gradients."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch.nn.functional as F

import jln
from jln import _quant
from tests.quant import reference as ref
from tests.quant.test_norms import (
    DT,
    EPS,
    FP8,
    STATIC,
    assert_agrees,
    data,
    flashinfer_norm,
    tt,
    vllm_norm,
)


def bits(a: jax.Array) -> np.ndarray:
    return np.asarray(jax.lax.bitcast_convert_type(a, jnp.uint8))


@pytest.mark.parametrize("dtype", list(DT))
@pytest.mark.parametrize("fmt", FP8)
def test_vllm_fused_add_static(dtype: str, fmt: str) -> None:
    """vLLM: ``residual <- x + residual`` in T, then its static-fp8 RMSNorm of the sum."""
    x, w, _ = data(dtype, seed=20)
    r, _, _ = data(dtype, seed=21)
    q, s = jln.add_rms_norm(x, r, w, eps=EPS, convention="llama",
                            quantize=jln.Quant(dtype=fmt, scaling="static", scale=STATIC))  # type: ignore[arg-type]
    ts = tt(x) + tt(r)
    np.testing.assert_array_equal(np.asarray(s.astype(jnp.float32)), ts.float().numpy())
    codes, _ = ref.quantize(vllm_norm(ts, tt(w), EPS), fmt, "static", scale=STATIC)
    assert_agrees(q, codes, dtype)


@pytest.mark.parametrize("dtype", list(DT))
def test_flashinfer_fused_add(dtype: str) -> None:
    x, w, _ = data(dtype, seed=22)
    r, _, _ = data(dtype, seed=23)
    q, _ = jln.add_rms_norm(x, r, w, eps=EPS, quantize=jln.Quant(scaling="static", scale=STATIC, source="float32"))
    codes, _ = ref.quantize(flashinfer_norm(tt(x) + tt(r), tt(w), EPS), "float8_e4m3fn", "static", scale=STATIC)
    assert_agrees(q, codes, dtype)


@pytest.mark.parametrize("dtype", list(DT))
def test_add_layer_norm_row(dtype: str) -> None:
    x, w, b = data(dtype, seed=24)
    r, _, _ = data(dtype, seed=25)
    q, s, st = jln.add_layer_norm(x, r, w, b, quantize=jln.Quant(scaling="row"), return_stats=True)
    ts = tt(x) + tt(r)
    codes, _ = ref.quantize(F.layer_norm(ts, (x.shape[-1],), tt(w), tt(b), 1e-5).float(), "float8_e4m3fn", "row")
    assert_agrees(q, codes, dtype)
    s64 = ts.double().numpy()
    assert st.mean is not None
    np.testing.assert_allclose(np.asarray(st.mean), s64.mean(-1, keepdims=True), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("norm_before_gate", [False, True])
@pytest.mark.parametrize("group_size", [None, 32])
def test_gated_quantizes_its_own_output(norm_before_gate: bool, group_size: int | None) -> None:
    x, w, _ = data("bfloat16", (16, 128), seed=26)
    z, _, _ = data("bfloat16", (16, 128), seed=27)
    kw = dict(norm_before_gate=norm_before_gate, group_size=group_size)
    y = jln.gated_rms_norm(x, z, w, **kw)  # type: ignore[arg-type]
    for quant in (jln.Quant(), jln.Quant(dtype="int8", scaling="tensor"), jln.Quant(scaling="mxfp8")):
        q, st = jln.gated_rms_norm(x, z, w, quantize=quant, return_stats=True, **kw)  # type: ignore[arg-type]
        np.testing.assert_array_equal(bits(q.values), bits(_quant.quantize(y, quant, (1,)).values))
    x64 = np.asarray(x.astype(jnp.float32), np.float64)
    z64 = np.asarray(z.astype(jnp.float32), np.float64)
    v = x64 if norm_before_gate else x64 * (z64 / (1 + np.exp(-z64)))
    if group_size is None:
        expect = 1 / np.sqrt((v**2).mean(-1, keepdims=True) + 1e-6)
    else:
        expect = 1 / np.sqrt((v.reshape(16, 4, 32) ** 2).mean(-1) + 1e-6)
    np.testing.assert_allclose(np.asarray(st.rstd), expect, rtol=2e-5)


@pytest.mark.parametrize("fn", ["add_rms_norm", "add_layer_norm"])
def test_fused_straight_through(fn: str) -> None:
    x, w, _ = data("bfloat16", (8, 128), seed=28)
    r, _, _ = data("bfloat16", (8, 128), seed=29)
    c = jnp.asarray(np.random.default_rng(30).standard_normal((8, 128)).astype(np.float32))
    norm = getattr(jln, fn)

    def quantized(x, r, w):  # type: ignore[no-untyped-def]
        q, s = norm(x, r, w, quantize=jln.Quant())
        return (q.dequantize() * c).sum() + s.astype(jnp.float32).sum()

    # the same cotangents reach the unquantized norm: c rounded to y's dtype, 1 on s
    gq = jax.grad(quantized, argnums=(0, 1, 2))(x, r, w)
    y, vjp = jax.vjp(lambda x, r, w: norm(x, r, w), x, r, w)
    gu = vjp((c.astype(y[0].dtype), jnp.ones_like(y[1])))
    for a, e in zip(gq, gu, strict=True):
        np.testing.assert_array_equal(np.asarray(a.astype(jnp.float32)), np.asarray(e.astype(jnp.float32)))
