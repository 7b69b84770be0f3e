"""The converted GRNs (diffusers' ``GlobalResponseNorm``, transformers' ``ConvNextV2GRN``, LongCat's
``AudioDiTGRN`` over the time axis) on
every input layout torch takes: the channels-last ``[N, H, W, C]``, more spatial axes, a 3-D
``[N, L, C]`` (torch's ``dim=(1, 2)`` then holds the channels and its ``[1, 1, 1, C]``
parameters make the result 4-D) and a channel axis of 1 (broadcast to ``C``). The expected
values are the torch modules' own outputs."""

from __future__ import annotations

from typing import Any

import jax
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


AUDIO_SHAPES = [(2, 9, C), (2, 9, 1), (9, C), (2, 3, 4, C)]


def _audio_grn(dtype: Any) -> Any:
    from diffusers.models.transformers.transformer_longcat_audio_dit import AudioDiTGRN

    m = AudioDiTGRN(C)
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(generator=torch.Generator().manual_seed(2))
    return m.to(dtype).eval()


@pytest.mark.parametrize("shape", AUDIO_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_audio_dit_grn_over_the_time_axis(shape: tuple[int, ...], dtype: str) -> None:
    # LongCat's GRN: torch.norm over dim=1 of [B, T, C], [1, 1, C] parameters (a 2-D input
    # becomes [1, T, C]; a 4-D one keeps its axes 2.. as they are)
    dt = getattr(torch, dtype)
    m = _audio_grn(dt)
    x = torch.randn(shape, generator=torch.Generator().manual_seed(3)).to(dt)
    with torch.no_grad():
        want = m(x)
    lin, variables = from_torch(m)
    assert (lin.broadcast_rank, tuple(lin.spatial_axes)) == (3, (1,))
    for got in (lin.apply(variables, _jax(x)), jax.jit(lin.apply)(variables, _jax(x)),
                from_torch(m, api="nnx")(_jax(x))):
        assert got.shape == tuple(want.shape)
        assert_same((got,), (want,), dt)
    sd = to_torch_state_dict(variables, lin)
    assert {k: tuple(v.shape) for k, v in sd.items()} == {"gamma": (1, 1, C), "beta": (1, 1, C)}
    fresh = _audio_grn(torch.float32)
    fresh.load_state_dict(sd, strict=True)
    assert torch.equal(fresh.gamma.to(dt), m.gamma)
    assert {k: tuple(v.shape) for k, v in to_torch_state_dict(from_torch(m, api="nnx")).items()} == {
        "gamma": (1, 1, C), "beta": (1, 1, C)}


# --------------------------------------------------------------------------- Kandinsky 6, Dory

import copy  # noqa: E402

import numpy as np  # noqa: E402

from jln import linen as jnn  # noqa: E402
from jln import nnx as jnnx  # noqa: E402
from tests.test_interop import parity  # noqa: E402

F32, BF16, F16 = torch.float32, torch.bfloat16, torch.float16
#: (module dtype, x dtype): the dtypes torch takes together (float32 parameters promote half x)
DTYPES = [(F32, F32), (BF16, BF16), (F16, F16), (F32, BF16), (F32, F16)]
KANDINSKY = {
    "vae": ("diffusers.models.autoencoders.autoencoder_kandinsky6_sr", "Kandinsky6VAERMSNorm"),
    "upscaler": ("diffusers.models.latent_upscaler.latent_upscaler_kandinsky6_sr", "Kandinsky6SRLatentUpscalerRMSNorm"),
}


def _kandinsky(which: str, channels: int = 16) -> Any:
    import importlib

    module, name = KANDINSKY[which]
    m = getattr(importlib.import_module(module), name)(channels)
    with torch.no_grad():
        m.gamma.copy_(1 + 0.5 * torch.randn(m.gamma.shape, generator=torch.Generator().manual_seed(3)))
    return m


def _dory() -> Any:
    from transformers.models.dory.modeling_dory import DoryL2Norm

    return DoryL2Norm(1e-6)


def _check(got: Any, want: Any, x_dtype: Any) -> None:
    """float32 from float32: within 5e-7 of torch's largest |output|; a half output bit-exact; a
    float32 output of half x (float32 parameters) exact but where torch and jln rounded an
    intermediate to neighbouring half values."""
    p = parity(got, want.detach())
    if want.dtype == F32 and x_dtype == F32:
        assert p["rel"] <= 5e-7, p
    elif want.dtype != F32:
        assert p["frac_exact"] >= 0.995 and p["max_ulp"] <= 1, p
    else:
        assert p["frac_exact"] >= 0.995 and p["rel"] <= 2.0 ** -7, p


def _outputs(m: Any, x: Any) -> list[Any]:
    lin, variables = from_torch(m)
    nnx_mod = from_torch(m, api="nnx")
    xj = _jax(x)
    return [lin.apply(variables, xj), nnx_mod(xj), jax.jit(lambda a: lin.apply(variables, a))(xj)]


@pytest.mark.parametrize("which", sorted(KANDINSKY))
@pytest.mark.parametrize(("mdt", "xdt"), DTYPES, ids=str)
@pytest.mark.parametrize("offset", [0.0, 3.0])
def test_kandinsky6_rms_norms_match_torch(which: str, mdt: Any, xdt: Any, offset: float) -> None:
    m = _kandinsky(which, 12).to(mdt)  # sqrt(12): the product with it rounds
    x = (2 * torch.randn((2, 12, 2, 3, 5), generator=torch.Generator().manual_seed(0)) + offset).to(xdt)
    with torch.no_grad():
        want = m(x)
    for got in _outputs(m, x):
        assert got.shape == tuple(want.shape)
        _check(got, want, xdt)


@pytest.mark.parametrize("which", sorted(KANDINSKY))
def test_kandinsky6_converts_to_scaled_lp_norm_and_round_trips(which: str) -> None:
    m = _kandinsky(which, 12)  # sqrt(12) is not a float32 number: the multiplier's rounding shows
    lin, variables = from_torch(m)
    assert type(lin).__name__ == "ScaledLpNorm" and lin.axis == 1 and lin.multiplier == 12**0.5
    x = torch.randn((2, 12, 3, 2, 2), generator=torch.Generator().manual_seed(1)).to(BF16)
    for sd in (to_torch_state_dict(variables, lin), to_torch_state_dict(from_torch(m, api="nnx"))):
        assert sorted(sd) == ["gamma"] and torch.equal(sd["gamma"], m.gamma)
        fresh = _kandinsky(which, 12)
        with torch.no_grad():
            fresh.gamma.zero_()
        fresh.load_state_dict(sd, strict=True)
        with torch.no_grad():
            assert torch.equal(fresh.to(BF16)(x), copy.deepcopy(m).to(BF16)(x))


def _grads(m: Any, x: Any, params: tuple[str, ...]) -> None:
    """d(sum(out * cot))/d(x, parameters): jln (linen and NNX) against torch autograd, float32."""
    xt = x.clone().requires_grad_(True)
    out = m(xt)
    cot = torch.randn(out.shape, generator=torch.Generator().manual_seed(7))
    want = torch.autograd.grad((out * cot).sum(), [xt, *(getattr(m, n) for n in params)])
    lin, variables = from_torch(m)
    cj = _jax(cot)

    def lin_loss(v: Any, a: Any) -> Any:
        return jnp.sum(lin.apply(v, a) * cj)

    gv, gx = jax.grad(lin_loss, argnums=(0, 1))(variables, _jax(x))
    got = [gx, *(jax.tree_util.tree_leaves(gv["params"]) if params else [])]
    nnx_mod = from_torch(m, api="nnx")
    gx_nnx = jax.grad(lambda a: jnp.sum(nnx_mod(a) * cj))(_jax(x))
    for gj, gt in zip([*got, gx_nnx], [*want, want[0]], strict=True):
        gt = gt.detach().numpy()
        np.testing.assert_allclose(np.asarray(gj).reshape(gt.shape), gt, rtol=1e-5, atol=1e-6 * np.abs(gt).max())


@pytest.mark.parametrize("which", sorted(KANDINSKY))
def test_kandinsky6_gradients_match_torch(which: str) -> None:
    _grads(_kandinsky(which), torch.randn((2, 16, 2, 3, 3), generator=torch.Generator().manual_seed(2)), ("gamma",))


@pytest.mark.parametrize(("mdt", "xdt"), [d for d in DTYPES if d[0] == d[1]], ids=str)
@pytest.mark.parametrize("offset", [0.0, 3.0])
def test_dory_l2_norm_matches_torch(mdt: Any, xdt: Any, offset: float) -> None:
    m = _dory().to(mdt)
    x = (2 * torch.randn((2, 5, 64), generator=torch.Generator().manual_seed(0)) + offset).to(xdt)
    with torch.no_grad():
        want = m(x)
    lin, _ = from_torch(m)
    assert type(lin).__name__ == "LpNorm" and lin.eps_mode == "root" and lin.eps == 1e-6
    for got in _outputs(m, x):
        _check(got, want, xdt)


def test_dory_l2_norm_eps_is_under_the_root() -> None:
    # a row of tiny values: x / sqrt(sum + eps) is far from x / max(||x||, eps) there
    m = _dory()
    x = torch.full((1, 4), 1e-4)
    lin, variables = from_torch(m)
    got = np.asarray(lin.apply(variables, _jax(x)))
    np.testing.assert_allclose(got, m(x).numpy(), rtol=1e-6)
    assert not np.allclose(got, np.asarray(jln_lp(x)), rtol=1e-2)
    assert to_torch_state_dict(variables, lin) == {} == m.state_dict()


def jln_lp(x: Any) -> Any:
    import jln

    return jln.lp_normalize(_jax(x), eps=1e-6)


def test_dory_gradients_match_torch() -> None:
    _grads(_dory(), torch.randn((2, 5, 64), generator=torch.Generator().manual_seed(2)), ())


def test_new_options_are_checked() -> None:
    with pytest.raises(ValueError, match="eps_mode"):
        jnn.LpNorm(eps_mode="inside").apply({}, jnp.ones((2, 3)))
    with pytest.raises(ValueError, match="p=3"):
        jnnx.LpNorm(p=3, eps_mode="root")
    with pytest.raises(TypeError, match="one int"):
        jnnx.ScaledLpNorm(4, axis=(1, 2))
    with pytest.raises(TypeError, match="multiplier"):
        jnnx.ScaledLpNorm(4, multiplier="2")
    with pytest.raises(ValueError, match="4 channels"):
        jnnx.ScaledLpNorm(4, axis=1)(jnp.ones((2, 3, 5)))


def test_kandinsky6_with_a_reshaped_gamma_is_refused() -> None:
    m = _kandinsky("vae")
    m.gamma = torch.nn.Parameter(torch.ones(16))
    with pytest.raises(ValueError, match=r"expected \(C, 1, 1, 1\)"):
        from_torch(m)
