"""jln against the seeds' own torch classes, and the seeds' worked numbers."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

import jln

torch = pytest.importorskip("torch")
from . import seed_reference as seed  # noqa: E402


def _t(a, dtype=torch.float32):
    return torch.from_numpy(np.asarray(a, np.float32)).to(dtype)


def test_worked_example_numbers():
    """Seed 1's d=4 example; the expected numbers follow from the definition (and MyLayerNorm)."""
    x = np.array([2.0, -1.0, 3.0, 0.0], np.float32)
    y = np.asarray(jln.layer_norm(jnp.asarray(x)))
    ref = seed.MyLayerNorm(4)(_t(x)).detach().numpy()
    np.testing.assert_allclose(y, ref, rtol=1e-6, atol=1e-6)
    # the seed prints [0.632, -1.265, 1.265, -0.632]: (x - 1) / sqrt(2.5 + 1e-5)
    np.testing.assert_allclose(y.round(3), [0.632, -1.265, 1.265, -0.632])
    assert abs(float(np.linalg.norm(y)) - 2.0) < 1e-5  # ||x_norm|| = sqrt(d)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_my_layer_norm_and_layer_norm_process(dtype):
    torch.manual_seed(42)
    x = torch.randn(1, 3, 8, dtype=dtype)  # the seed's three-token, d_model=8 check
    m = seed.MyLayerNorm(8).to(dtype)
    with torch.no_grad():
        m.gamma.copy_(torch.linspace(0.5, 1.5, 8))
        m.beta.copy_(torch.linspace(-1, 1, 8))
    dt = "float64" if dtype == torch.float64 else "float32"
    import jax

    with jax.enable_x64(dt == "float64"):
        y = jln.layer_norm(jnp.asarray(x.numpy()), jnp.asarray(m.gamma.detach().numpy()), jnp.asarray(m.beta.detach().numpy()))
        tol = 1e-12 if dt == "float64" else 2e-6
        np.testing.assert_allclose(np.asarray(y), m(x).detach().numpy(), rtol=tol, atol=tol)
        y2 = jln.layer_norm(jnp.asarray(x.numpy()))
        np.testing.assert_allclose(np.asarray(y2), seed.layer_norm_process(x).numpy(), rtol=tol, atol=tol)
        # mean ~ 0, variance ~ 1, norm ~ sqrt(8)
        np.testing.assert_allclose(np.asarray(y2).mean(-1), 0, atol=1e-6)
        np.testing.assert_allclose(np.linalg.norm(np.asarray(y2), axis=-1), np.sqrt(8) * np.sqrt(1 / (1 + 1e-5 / np.asarray(x.numpy()).var(-1))), rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_seed_rmsnorm(dtype):
    torch.manual_seed(0)
    m = seed.RMSNorm(64).to(dtype)
    with torch.no_grad():
        m.g.copy_(1 + 0.1 * torch.randn(64))
    x = (torch.randn(4, 16, 64) * 3).to(dtype)
    jdt = str(dtype).removeprefix("torch.")
    xj = jnp.asarray(x.float().numpy()).astype(jdt)
    gj = jnp.asarray(m.g.detach().float().numpy()).astype(jdt)
    y = jln.rms_norm(xj, gj, convention="seed")
    t = m(x).detach()
    from jln import _compare

    rep = _compare.compare(y, t, None, exact=True)
    if dtype == torch.float32:
        assert rep.max_abs_err < 2e-6, rep
    else:
        assert rep.frac_bitexact >= 0.995 and rep.max_ulp_elementwise <= 1, rep


def test_adaptive_ln_module():
    torch.manual_seed(0)
    m = seed.AdaptiveLN(16, 8)
    x, c = torch.randn(2, 5, 16), torch.randn(2, 1, 8)
    emb = m.proj(c)  # [2, 1, 32]: the seed keeps the token axis in the condition
    y = jln.adaptive_layer_norm(
        jnp.asarray(x.numpy()),
        jnp.asarray(emb.detach().numpy()),
        jnp.asarray(m.ln.weight.detach().numpy()),
        jnp.asarray(m.ln.bias.detach().numpy()),
        order="seed",
    )[0]
    np.testing.assert_allclose(np.asarray(y), m(x, c).detach().numpy(), rtol=2e-6, atol=2e-6)
