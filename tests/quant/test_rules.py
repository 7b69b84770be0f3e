"""jln's quantization rules alone (jln._quant) against independent torch / float64 references:
codes bit for bit, scales exactly, edge rows, and Quant's validation."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import jln
from jln import _quant
from tests.quant import reference as ref

DTYPES = ["float8_e4m3fn", "float8_e5m2", "int8"]


def rows(seed: int = 0, shape: tuple[int, int] = (48, 256)) -> np.ndarray:
    """Rows of very different magnitudes (1e-6 .. 1e4), so every exponent range is hit."""
    rng = np.random.default_rng(seed)
    mag = 10.0 ** rng.uniform(-6, 4, size=(shape[0], 1))
    return (rng.standard_normal(shape) * mag).astype(np.float32)


def edge_rows() -> np.ndarray:
    r = np.zeros((8, 64), np.float32)
    r[1] = 1e-30  # tiny: the scale floor
    r[2, :5] = [np.inf, -np.inf, 1.0, -2.0, 3.0]
    r[3, :4] = [np.nan, 1.0, -1.0, 0.5]
    r[4] = np.nan
    r[5] = np.linspace(-3e38, 3e38, 64, dtype=np.float32)  # near float32's max
    r[6, :] = 0.5 + np.arange(64)  # int8 ties at x.5 after scaling by 1
    r[7] = -0.0
    return r


def codes_of(q: jln.Quantized) -> np.ndarray:
    return np.asarray(jax.lax.bitcast_convert_type(q.values, jnp.uint8))


def assert_codes(q: jln.Quantized, codes: torch.Tensor) -> None:
    """Bit for bit, NaN aside: a NaN must be a NaN code in both (jax writes e5m2's NaN as 0x7E,
    torch as 0x7F; both are NaN)."""
    mine = np.asarray(q.values.astype(jnp.float32))
    theirs = codes.float().numpy()
    np.testing.assert_array_equal(np.isnan(mine), np.isnan(theirs))
    keep = ~np.isnan(mine)
    np.testing.assert_array_equal(codes_of(q)[keep], ref.bits(codes)[keep])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("scaling", ["static", "tensor", "row"])
@pytest.mark.parametrize("data", ["random", "edge"])
def test_codes_match_torch(dtype: str, scaling: str, data: str) -> None:
    y = rows() if data == "random" else edge_rows()
    kw = {"scale": 0.0123} if scaling == "static" else {}
    quant = jln.Quant(dtype=dtype, scaling=scaling, **kw)  # type: ignore[arg-type]
    q = _quant.quantize(jnp.asarray(y), quant, (1,))
    codes, scale = ref.quantize(torch.from_numpy(y), dtype, scaling, **kw)
    assert_codes(q, codes)
    np.testing.assert_array_equal(np.asarray(q.scale), scale.numpy())
    assert np.isfinite(np.asarray(q.scale)).all() and (np.asarray(q.scale) > 0).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_scale_ub_matches_torch(dtype: str) -> None:
    y = rows(1)
    q = _quant.quantize(jnp.asarray(y), jln.Quant(dtype=dtype, scaling="row", scale_ub=0.5), (1,))  # type: ignore[arg-type]
    codes, scale = ref.quantize(torch.from_numpy(y), dtype, "row", scale_ub=0.5)
    assert_codes(q, codes)
    np.testing.assert_array_equal(np.asarray(q.scale), scale.numpy())


def test_edge_rows_defined() -> None:
    """All-zero rows: codes 0, scale the floor; inf saturates, NaN stays NaN (fp8) or 0 (int8),
    the scale of a row holding them is that of its finite values."""
    y = jnp.asarray(edge_rows())
    q = _quant.quantize(y, jln.Quant(scaling="row"), (1,))
    v = np.asarray(q.values.astype(jnp.float32))
    s = np.asarray(q.scale)[:, 0]
    assert (v[0] == 0).all() and s[0] == np.float32(1 / (448 * 512))
    assert v[2, 0] == 448 and v[2, 1] == -448 and s[2] == np.float32(3.0) / np.float32(448)
    assert np.isnan(v[3, 0]) and np.isnan(v[4]).all() and s[4] == s[0]
    qi = _quant.quantize(y, jln.Quant(dtype="int8", scaling="row"), (1,))
    assert (np.asarray(qi.values)[4] == 0).all()
    assert np.isfinite(np.asarray(q.dequantize())[[0, 1, 2, 5, 6, 7]]).all()


@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2"])
@pytest.mark.parametrize("data", ["random", "edge"])
def test_mxfp8_matches_float64(dtype: str, data: str) -> None:
    y = rows(2) if data == "random" else edge_rows()
    q = _quant.quantize(jnp.asarray(y), jln.Quant(dtype=dtype, scaling="mxfp8"), (1,))  # type: ignore[arg-type]
    codes, x = ref.mxfp8(y, dtype)
    assert_codes(q, codes)
    assert q.scale.dtype == jnp.float8_e8m0fnu and q.scale.shape == (y.shape[0], y.shape[1] // 32)
    e8m0 = np.asarray(jax.lax.bitcast_convert_type(q.scale, jnp.uint8)).astype(np.float64)
    np.testing.assert_array_equal(e8m0 - 127, np.log2(x))


@pytest.mark.parametrize("algo", ["max", "most_recent"])
@pytest.mark.parametrize("dtype", ["float8_e4m3fn", "float8_e5m2"])
def test_delayed_matches_torch(algo: str, dtype: str) -> None:
    quant = jln.Quant(dtype=dtype, scaling="delayed", margin=1, amax_compute=algo)  # type: ignore[arg-type]
    hist = jnp.zeros(4, jnp.float32)
    thist = torch.zeros(4)
    for step in range(6):
        y = rows(10 + step, (8, 64)) * np.float32(step + 1)
        q = _quant.quantize(jnp.asarray(y), quant, (1,), hist)
        codes, scale, thist = ref.delayed(torch.from_numpy(y), thist, dtype, 1, algo)
        assert_codes(q, codes)
        np.testing.assert_array_equal(np.asarray(q.scale), scale.numpy())
        assert q.amax_history is not None
        np.testing.assert_array_equal(np.asarray(q.amax_history), thist.numpy())
        hist = q.amax_history


def test_dequantize_within_half_ulp() -> None:
    y = rows(3)
    for dtype, rel in (("float8_e4m3fn", 2.0**-4), ("float8_e5m2", 2.0**-3), ("int8", None)):
        q = _quant.quantize(jnp.asarray(y), jln.Quant(dtype=dtype, scaling="row"), (1,))  # type: ignore[arg-type]
        err = np.abs(np.asarray(q.dequantize(), np.float64) - y)
        s = np.asarray(q.scale, np.float64)
        if rel is None:  # int8: half a step of the scale (plus the float32 products' rounding)
            assert (err <= 0.5 * s * (1 + 1e-6) + 1e-6 * np.abs(y)).all()
        else:  # fp8: half an ulp relative, or half the smallest subnormal step absolute
            sub = {"float8_e4m3fn": 2.0**-9, "float8_e5m2": 2.0**-16}[dtype]
            assert (err <= rel * np.abs(y) * (1 + 1e-6) + 0.5 * sub * s).all()


def test_straight_through_gradient() -> None:
    y = jnp.asarray(rows(4, (4, 64)))
    w = jnp.asarray(np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32))
    for quant in (jln.Quant(dtype="int8"), jln.Quant(), jln.Quant(scaling="mxfp8")):
        g = jax.grad(lambda y, quant=quant: (_quant.quantize(y, quant, (1,)).dequantize() * w).sum())(y)
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


def test_jit_and_vmap() -> None:
    y = jnp.asarray(rows(5, (6, 64)))
    quant = jln.Quant(scaling="row")
    eager = _quant.quantize(y, quant, (1,))
    jitted = jax.jit(lambda y: _quant.quantize(y, quant, (1,)))(y)
    mapped = jax.vmap(lambda r: _quant.quantize(r, quant, (0,)))(y)
    for other in (jitted, mapped):
        np.testing.assert_array_equal(codes_of(other), codes_of(eager))
        np.testing.assert_array_equal(np.asarray(other.scale).ravel(), np.asarray(eager.scale).ravel())


def test_hashable_and_pytree() -> None:
    assert hash(jln.Quant()) == hash(jln.Quant(dtype="float8_e4m3fn", scaling="row"))
    q = _quant.quantize(jnp.ones((2, 32)), jln.Quant(scaling="mxfp8"), (1,))
    leaves, tree = jax.tree_util.tree_flatten(q)
    back = jax.tree_util.tree_unflatten(tree, leaves)
    assert back.block == 32 and back.shape == (2, 32)
    bare = q.detach()
    assert bare.carrier is None and len(jax.tree_util.tree_leaves(bare)) == 2
    np.testing.assert_array_equal(np.asarray(bare.dequantize()), np.asarray(q.dequantize()))


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"dtype": "float8"}, ValueError, "unknown dtype 'float8'; expected one of"),
        ({"dtype": "float4_e2m1fn"}, ValueError, "not supported yet"),
        ({"dtype": 8}, TypeError, "`dtype` must be a string"),
        ({"scaling": "block"}, ValueError, "unknown scaling 'block'"),
        ({"scaling": "static"}, ValueError, "needs `scale`"),
        ({"scaling": "static", "scale": 0.0}, ValueError, "finite float > 0; received 0.0"),
        ({"scaling": "static", "scale": jnp.float32(1)}, TypeError, "must be a Python float"),
        ({"scale": 0.5}, ValueError, "only read by scaling='static'"),
        ({"scaling": "mxfp8", "scale_ub": 3.0}, ValueError, "`scale_ub` bounds a dynamic amax"),
        ({"scaling": "mxfp8", "dtype": "int8"}, ValueError, "stores fp8 data"),
        ({"margin": 2}, ValueError, "read by scaling='delayed' only"),
        ({"scaling": "delayed", "margin": -1}, ValueError, "`margin` must be >= 0"),
        ({"source": "f32"}, ValueError, "unknown source 'f32'"),
    ],
)
def test_quant_validation(kwargs: dict, exc: type, match: str) -> None:
    with pytest.raises(exc, match=match):
        jln.Quant(**kwargs)
