"""jln.lp_normalize and jln.global_response_norm against torch (``F.normalize``; diffusers' and
ConvNeXt-V2's GRN, restated in the family's ``reference.py``) and float64."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jln
from jln.families.lp_norm import reference as lp_reference

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")

from tests.families.adaptive.test_adaptive import SLOW, _bits, _grid, _same, _t, _x  # noqa: E402


@pytest.mark.parametrize(("dtype", "p", "axis"), _grid(
    [(d, p, a) for d in ("float32", "bfloat16", "float16") for p, a in ((2.0, -1), (1.0, -1), (3.0, (1, 2)),
                                                                         (float("inf"), 1))],
    lambda d, p, a: d == "bfloat16" and p == 2.0))
def test_lp_normalize_matches_torch(dtype: str, p: float, axis: Any) -> None:
    x = _x((3, 4, 40), dtype)
    x = x.at[0, 0].set(0)  # an all-zero row (p=2, axis=-1): the eps floor
    y = jln.lp_normalize(x, p=p, axis=axis)
    t = lp_reference.lp_normalize(_t(x), p=p, axis=axis)
    assert y.dtype == x.dtype
    if dtype == "float32":
        ref = lp_reference.lp_normalize(_t(x).double(), p=p, axis=axis).numpy()
        np.testing.assert_allclose(np.asarray(y), ref, rtol=0, atol=3e-7)
    else:
        assert _bits(y, t) == 1.0


def test_lp_normalize_float16_zero_row_is_nan_as_torch() -> None:
    """float16 rounds eps=1e-12 to 0, so torch divides 0 by 0; jln does the same."""
    x = jnp.zeros((2, 4), jnp.float16).at[1].set(1e-4)
    y = jln.lp_normalize(x)
    t = torch.nn.functional.normalize(_t(x), dim=-1)
    assert np.isnan(np.asarray(y[0], np.float32)).all() and _bits(y, t) == 1.0
    assert not np.isnan(np.asarray(jln.lp_normalize(x.astype(jnp.float32)))).any()


@pytest.mark.parametrize("p", _grid([(2.0,), (1.0,), (3.0,), (float("inf"),)], lambda p: p == 1.0))
def test_lp_normalize_gradients(p: float) -> None:
    x = _x((3, 24), "float32").at[2].set(0)
    ct = _x((3, 24), "float32", seed=1)
    g = jax.grad(lambda v: jnp.sum(jln.lp_normalize(v, p=p) * ct))(x)
    xt = _t(x).requires_grad_(True)
    (torch.nn.functional.normalize(xt, p=p, dim=-1) * _t(ct)).sum().backward()
    assert np.isfinite(np.asarray(g)).all()
    np.testing.assert_allclose(np.asarray(g), xt.grad.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("dtype", "pdt"), _grid([("float32", "float32"), ("bfloat16", "bfloat16"),
                                                  ("bfloat16", "float32"), ("float16", "float16")],
                                                 lambda d, p: d == p == "bfloat16"))
def test_global_response_norm_matches_torch(dtype: str, pdt: str) -> None:
    x = _x((2, 5, 7, 24), dtype)
    gamma, beta = _x((24,), pdt, 1) * 0.3, _x((24,), pdt, 2) * 0.3
    y = jln.global_response_norm(x, gamma, beta)
    t = lp_reference.global_response_norm(_t(x), _t(gamma), _t(beta))
    assert str(y.dtype) == str(t.dtype).removeprefix("torch.")
    if dtype == "float32":
        args = [_t(v).double() for v in (x, gamma, beta)]
        ref = lp_reference.global_response_norm(*args).numpy()
        np.testing.assert_allclose(np.asarray(y), ref, rtol=0, atol=2e-5 * np.abs(ref).max())
    else:
        _same(y, t)


@SLOW
def test_global_response_norm_identity_at_init_and_gradients() -> None:
    x = _x((2, 3, 4, 8), "float32")
    z = jnp.zeros(8)
    assert (jln.global_response_norm(x, z, z) == x).all()
    gamma, beta, ct = _x((8,), "float32", 1), _x((8,), "float32", 2), _x(x.shape, "float32", 3)
    gj = jax.grad(lambda a, g, b: jnp.sum(jln.global_response_norm(a, g, b) * ct), argnums=(0, 1, 2))(x, gamma, beta)
    ts = [_t(v).requires_grad_(True) for v in (x, gamma, beta)]
    (lp_reference.global_response_norm(*ts) * _t(ct)).sum().backward()
    for a, b in zip(gj, ts, strict=True):
        np.testing.assert_allclose(np.asarray(a), b.grad.numpy(), rtol=1e-4, atol=1e-4)
