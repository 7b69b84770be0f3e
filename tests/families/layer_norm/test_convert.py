"""transformers' EsmFoldLayerNorm: ``F.layer_norm`` whose weight and bias are cast to bfloat16
for bfloat16 input only. It converts to ``LayerNorm(round_params_for_bf16=True)`` whatever its
parameters' dtype; the expected values are torch's."""

from __future__ import annotations

import jax
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import jax.numpy as jnp  # noqa: E402

from jln.interop import from_torch, to_torch_state_dict  # noqa: E402
from jln.linen import LayerNorm  # noqa: E402
from tests.test_interop import _jax  # noqa: E402


def _esmfold() -> object:
    from transformers.models.esm.modeling_esmfold import EsmFoldLayerNorm

    m = EsmFoldLayerNorm(64)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        m.weight.copy_(torch.randn(64, generator=g))
        m.bias.copy_(torch.randn(64, generator=g))
    return m.eval()


def _x(dtype: object) -> object:
    g = torch.Generator().manual_seed(0)
    return (0.5 + 2.0 * torch.randn((3, 7, 64), generator=g)).to(dtype)


# (bfloat16 parameters: torch's layer_norm then takes bfloat16 input only)
@pytest.mark.parametrize(("param_dtype", "x_dtype"), [
    (torch.float32, torch.float32), (torch.float32, torch.bfloat16), (torch.float32, torch.float16),
    (torch.bfloat16, torch.bfloat16),
])
def test_esmfold_layer_norm_matches_torch_for_every_input_dtype(param_dtype: object, x_dtype: object) -> None:
    m = _esmfold().to(param_dtype)
    x = _x(x_dtype)
    with torch.no_grad():
        want = m(x).float().numpy()
    lin, variables = from_torch(m)
    nnx_m = from_torch(m, api="nnx")
    xj = _jax(x)
    for got in (lin.apply(variables, xj), jax.jit(lin.apply)(variables, xj), nnx_m(xj)):
        assert got.dtype == xj.dtype
        got = np.asarray(got, np.float32)
        if x_dtype == torch.float32:
            np.testing.assert_allclose(got, want, rtol=0, atol=2e-6)
        else:  # bit for bit: bfloat16 through the rounded parameters, float16 through float32 ones
            np.testing.assert_array_equal(got, want)
    sd = to_torch_state_dict(variables, lin)
    assert sorted(sd) == ["bias", "weight"] and torch.equal(sd["weight"], m.weight)


def test_round_params_for_bf16_rounds_only_for_bfloat16_input() -> None:
    # the option's effect, checked against rounding the parameters by hand: an independent path
    w = jnp.asarray(np.random.default_rng(0).standard_normal(64), jnp.float32) * 0.3 + 1
    v = {"params": {"scale": w, "bias": w - 1}}
    x = jnp.asarray(np.random.default_rng(1).standard_normal((4, 64)), jnp.float32)
    on, off = LayerNorm(round_params_for_bf16=True), LayerNorm()
    v16 = jax.tree.map(lambda a: a.astype(jnp.bfloat16).astype(jnp.float32), v)
    for dt, ref_vars, differs in ((jnp.float32, v, False), (jnp.bfloat16, v16, True)):
        got = on.apply(v, x.astype(dt))
        np.testing.assert_array_equal(np.asarray(got, np.float32), np.asarray(off.apply(ref_vars, x.astype(dt)), np.float32))
        assert differs == bool(np.any(np.asarray(got) != np.asarray(off.apply(v, x.astype(dt)))))
