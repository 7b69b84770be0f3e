"""transformers' EsmFoldLayerNorm: with bfloat16 parameters (the only input torch then takes is
bfloat16) it is torch's LayerNorm and converts; with float32 ones its numbers depend on the
input's dtype and it is refused with the reason. The expected values are torch's."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from jln.interop import from_torch, to_torch_state_dict  # noqa: E402
from tests.test_interop import _jax, assert_same  # noqa: E402


def _esmfold() -> object:
    from transformers.models.esm.modeling_esmfold import EsmFoldLayerNorm

    m = EsmFoldLayerNorm(64)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        m.weight.copy_(torch.randn(64, generator=g))
        m.bias.copy_(torch.randn(64, generator=g))
    return m.eval()


def test_esmfold_layer_norm_with_bfloat16_parameters() -> None:
    m = _esmfold().bfloat16()
    x = torch.randn((2, 5, 64), generator=torch.Generator().manual_seed(0)).bfloat16()
    with torch.no_grad():
        want = m(x)
    lin, variables = from_torch(m)
    for got in (lin.apply(variables, _jax(x)), from_torch(m, api="nnx")(_jax(x))):
        assert_same((got,), (want,), torch.bfloat16)
    sd = to_torch_state_dict(variables, lin)
    assert sorted(sd) == ["bias", "weight"] and torch.equal(sd["weight"], m.weight)


def test_esmfold_layer_norm_with_float32_parameters_is_refused() -> None:
    with pytest.raises(ValueError, match="depend on the input's dtype"):
        from_torch(_esmfold())
