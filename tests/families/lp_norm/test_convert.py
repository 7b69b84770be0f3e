"""The converted GRNs (diffusers' ``GlobalResponseNorm``, transformers' ``ConvNextV2GRN``) on
every input layout torch takes: the channels-last ``[N, H, W, C]``, more spatial axes, a 3-D
``[N, L, C]`` (torch's ``dim=(1, 2)`` then holds the channels and its ``[1, 1, 1, C]``
parameters make the result 4-D) and a channel axis of 1 (broadcast to ``C``). The expected
values are the torch modules' own outputs."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")
pytest.importorskip("transformers")

from jln.interop import from_torch, to_torch_state_dict  # noqa: E402
from tests.test_interop import _jax, assert_same  # noqa: E402

C = 8
SHAPES = [(2, 3, 4, C), (2, 3, 4, 5, C), (2, 3, C), (2, 3, 4, 1), (2, 3, 4, C, 1), (2, 1, 1, C)]


def _grn(name: str) -> Any:
    if name == "diffusers":
        from diffusers.models.normalization import GlobalResponseNorm

        return GlobalResponseNorm(C)
    from transformers.models.convnextv2.modeling_convnextv2 import ConvNextV2GRN

    return ConvNextV2GRN(C)


def _perturbed(name: str, dtype: Any) -> Any:
    m = _grn(name)
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(generator=torch.Generator().manual_seed(1))
    return m.to(dtype).eval()


@pytest.mark.parametrize("name", ["diffusers", "transformers"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_every_layout_torch_takes(name: str, shape: tuple[int, ...], dtype: str) -> None:
    dt = getattr(torch, dtype)
    m = _perturbed(name, dt)
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0)).to(dt)
    with torch.no_grad():
        want = m(x)
    lin, variables = from_torch(m)
    nnx_mod = from_torch(m, api="nnx")
    for got in (lin.apply(variables, _jax(x)), nnx_mod(_jax(x))):
        assert got.shape == tuple(want.shape)
        assert_same((got,), (want,), dt)


@pytest.mark.parametrize("name", ["diffusers", "transformers"])
def test_inputs_torch_refuses_are_refused(name: str) -> None:
    m = _perturbed(name, torch.float32)
    lin, variables = from_torch(m)
    nnx_mod = from_torch(m, api="nnx")
    for shape in ((2, C), (2, 3, 4, 5)):  # no axis 2; 5 channels against 8
        with pytest.raises((RuntimeError, IndexError)):
            m(torch.zeros(shape))
        with pytest.raises(ValueError, match="GlobalResponseNorm"):
            lin.apply(variables, jnp.zeros(shape))
        with pytest.raises(ValueError, match="GlobalResponseNorm"):
            nnx_mod(jnp.zeros(shape))


def test_convnextv2_grn_converts_and_round_trips() -> None:
    m = _perturbed("transformers", torch.float32)
    lin, variables = from_torch(m)
    assert lin.broadcast_rank == 4
    sd = to_torch_state_dict(variables, lin)
    assert sorted(sd) == ["bias", "weight"]
    fresh = _grn("transformers")
    fresh.load_state_dict(sd, strict=True)
    assert torch.equal(fresh.weight, m.weight) and torch.equal(fresh.bias, m.bias)
