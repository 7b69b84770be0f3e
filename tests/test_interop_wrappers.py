"""from_torch on the model files' GroupNorm / LayerNorm / RMSNorm wrappers (per-frame video
GroupNorms, GroupNorm + activation, tensors under other names) against the torch classes
themselves (torch 2.13 CPU, transformers and diffusers as installed), and the refusals.

Expected values are the torch module's own outputs and gradients on the same values (float32:
within 1e-5 relative; bfloat16, module and input cast as a user would: bit for bit), and its
``state_dict`` (``to_torch_state_dict`` must load back with ``strict=True``).
"""

from __future__ import annotations

import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jln
from jln import nnx as jnnx

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("diffusers")
from jln.interop import from_torch, to_torch_state_dict  # noqa: E402

_T, _D = "transformers.models.", "diffusers.models.autoencoders."


def _cls(path):
    mod, name = path.rsplit(".", 1)
    return getattr(importlib.import_module(mod), name)


def _bit(act):
    from transformers.models.bit.configuration_bit import BitConfig

    return lambda: _cls(_T + "bit.modeling_bit.BitGroupNormActivation")(BitConfig(num_groups=8, hidden_act=act), 32)


def _mixer(norm_mlp):
    from transformers.models.patchtsmixer.configuration_patchtsmixer import PatchTSMixerConfig

    return lambda: _cls(_T + "patchtsmixer.modeling_patchtsmixer.PatchTSMixerNormLayer")(
        PatchTSMixerConfig(d_model=32, norm_mlp=norm_mlp))


V5, I4, S3 = (2, 32, 3, 4, 4), (2, 32, 4, 4), (2, 32, 7)
_BN_KEYS = ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")
#: name -> (build the torch module, input shape, expected state_dict keys)
CASES = {
    "CosmosCausalGroupNorm(1 group)": (lambda: _cls(_D + "autoencoder_kl_cosmos.CosmosCausalGroupNorm")(32, 1), V5,
                                       {"norm.weight", "norm.bias"}),
    "CosmosCausalGroupNorm(8 groups)": (lambda: _cls(_D + "autoencoder_kl_cosmos.CosmosCausalGroupNorm")(32, 8), V5,
                                        {"norm.weight", "norm.bias"}),
    "KVAECachedGroupNorm": (lambda: _cls(_D + "autoencoder_kl_kvae_video.KVAECachedGroupNorm")(32), I4,
                            {"norm_layer.weight", "norm_layer.bias"}),
    "MiniMaxH3VideoGroupNorm": (lambda: _cls(_D + "autoencoder_kl_minimax_h3.MiniMaxH3VideoGroupNorm")(8, 32), V5,
                                {"weight", "bias"}),
    "MochiChunkedGroupNorm3D": (lambda: _cls(_D + "autoencoder_kl_mochi.MochiChunkedGroupNorm3D")(32, 8, chunk_size=2),
                                V5, {"norm_layer.weight", "norm_layer.bias"}),
    "BitGroupNormActivation(relu)": (_bit("relu"), I4, {"weight", "bias"}),
    "BitGroupNormActivation(gelu)": (_bit("gelu"), I4, {"weight", "bias"}),
    "BitGroupNormActivation(silu)": (_bit("silu"), I4, {"weight", "bias"}),
    "PeAudioMaskedGroupNorm": (lambda: _cls(_T + "pe_audio.modeling_pe_audio.PeAudioMaskedGroupNorm")(4, 32), S3,
                               {"weight", "bias"}),
    "PeAudioVideoMaskedGroupNorm": (
        lambda: _cls(_T + "pe_audio_video.modeling_pe_audio_video.PeAudioVideoMaskedGroupNorm")(4, 32), S3,
        {"weight", "bias"}),
    "PeVideoMaskedGroupNorm": (lambda: _cls(_T + "pe_video.modeling_pe_video.PeVideoMaskedGroupNorm")(4, 32), S3,
                               {"weight", "bias"}),
    "VidTokLayerNorm(4-D)": (lambda: _cls(_D + "autoencoder_vidtok.VidTokLayerNorm")(32), I4, {"norm.weight", "norm.bias"}),
    "VidTokLayerNorm(5-D)": (lambda: _cls(_D + "autoencoder_vidtok.VidTokLayerNorm")(32), V5, {"norm.weight", "norm.bias"}),
    "PatchTSMixerNormLayer": (_mixer("LayerNorm"), (2, 3, 5, 32), {"norm.weight", "norm.bias"}),
    "PatchTSMixerNormLayer(BatchNorm)": (_mixer("BatchNorm"), (2, 3, 5, 32),
                                         {f"norm.batchnorm.{k}" for k in _BN_KEYS}),
    "PatchTSTBatchNorm": (lambda: _cls(_T + "patchtst.modeling_patchtst.PatchTSTBatchNorm")(
        _cls(_T + "patchtst.configuration_patchtst.PatchTSTConfig")(d_model=32)), (2, 7, 32),
                          {f"batchnorm.{k}" for k in _BN_KEYS}),
    "StableAudio3RMSNorm": (lambda: _cls("diffusers.models.transformers.transformer_stable_audio3.StableAudio3RMSNorm")(32),
                            (2, 5, 32), {"gamma"}),
}
#: one class by default: importing diffusers' model files alone takes ~5 s here, a transformers
#: model file ~1-3 s (the jln options each class maps onto are tested below against torch's functions)
DEFAULT = ("PatchTSMixerNormLayer",)


def _build(name, dtype=torch.float32):
    make, shape, keys = CASES[name]
    torch.manual_seed(0)
    m = make().eval()
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return m.to(dtype), shape, keys


def _x(shape, seed=0):
    return (2 * np.random.default_rng(seed).standard_normal(shape) + 0.5).astype(np.float32)


def _check(name, grads=False):
    m, shape, keys = _build(name)
    x = _x(shape)
    lin, variables = from_torch(m)
    ref = m(torch.from_numpy(x)).detach().numpy()
    y = np.asarray(lin.apply(variables, jnp.asarray(x)))
    assert y.dtype == ref.dtype and y.shape == ref.shape
    assert np.abs(y - ref).max() <= 1e-5 * max(np.abs(ref).max(), 1.0)
    # state_dict: the class's own names, loaded strictly, bit for bit
    sd = to_torch_state_dict(variables, lin)
    assert set(sd) == keys
    fresh = _build(name)[0]
    fresh.load_state_dict(sd, strict=True)
    for k, v in m.state_dict().items():
        assert torch.equal(fresh.state_dict()[k], v)
    nm = from_torch(m, api="nnx")
    np.testing.assert_array_equal(np.asarray(nm(jnp.asarray(x))), y)
    assert set(to_torch_state_dict(nm)) == keys
    # bfloat16: module and input cast to bfloat16, bit for bit
    mb = _build(name, torch.bfloat16)[0]
    xb = torch.from_numpy(x).to(torch.bfloat16)
    refb = mb(xb).detach().to(torch.float32).numpy()
    linb, vb = from_torch(mb)
    yb = linb.apply(vb, jnp.asarray(x).astype(jnp.bfloat16))
    assert yb.dtype == jnp.bfloat16
    exact = float((np.asarray(yb.astype(jnp.float32)) == refb).mean())
    assert exact >= (0.99 if "gelu" in name else 1.0), exact
    if grads:
        ct = _x(shape, seed=1)
        _, vjp = jax.vjp(lambda v, p: lin.apply({**variables, "params": p}, v), jnp.asarray(x), variables["params"])
        gx, gp = vjp(jnp.asarray(ct))
        t = torch.from_numpy(x).requires_grad_(True)
        m(t).backward(torch.from_numpy(ct))
        np.testing.assert_allclose(np.asarray(gx), t.grad.numpy(), rtol=1e-4, atol=1e-5)
        tp = dict(m.named_parameters())
        for jname, tname in (("scale", "weight"), ("bias", "bias")):
            if jname not in gp:
                continue
            torch_name = next(k for k in tp if k.split(".")[-1] in (tname, "gamma" if tname == "weight" else tname))
            np.testing.assert_allclose(np.asarray(gp[jname]), tp[torch_name].grad.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", DEFAULT)
def test_converts_exactly(name):
    _check(name)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(set(CASES) - set(DEFAULT)))
def test_converts_exactly_all(name):
    _check(name)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_gradients(name):
    _check(name, grads=True)


def test_pe_masked_group_norm_takes_torch_s_padding_mask():
    # PE's encoders call norm(x, padding_mask=mask expanded to x): statistics over the unpadded
    # frames, the padded ones zeroed. Converted, the module takes the same call
    m, shape, _ = _build("PeAudioMaskedGroupNorm")
    x = _x(shape)
    pm = np.ones((2, 7), np.int64)
    pm[0, 4:] = 0
    pmx = np.broadcast_to(pm[:, None, :], shape).copy()
    xt = torch.from_numpy(x).requires_grad_(True)
    ref = m(xt, padding_mask=torch.from_numpy(pmx))
    ct = _x(shape, seed=1)
    ref.backward(torch.from_numpy(ct))
    lin, variables = from_torch(m)
    y, vjp = jax.vjp(lambda v: lin.apply(variables, v, padding_mask=jnp.asarray(pmx)), jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(y), ref.detach().numpy(), rtol=1e-5, atol=1e-5)
    assert (np.asarray(y)[0, :, 4:] == 0).all()
    np.testing.assert_allclose(np.asarray(vjp(jnp.asarray(ct))[0]), xt.grad.numpy(), rtol=1e-4, atol=1e-5)
    nm = from_torch(m, api="nnx")
    y_nnx = nm(jnp.asarray(x), padding_mask=jnp.asarray(pm[:, None, :]))  # a mask that broadcasts
    np.testing.assert_allclose(np.asarray(y_nnx), np.asarray(y), rtol=1e-6, atol=1e-6)
    # unmasked samples: the plain GroupNorm's numbers
    np.testing.assert_allclose(np.asarray(y)[1], m(torch.from_numpy(x)).detach().numpy()[1], rtol=1e-5, atol=1e-6)
    # bfloat16: torch takes the masked statistics op by op in bfloat16, jln in float32 rounded
    # once; jln's error against float64 is the smaller (measured 2-4x)
    mb = _build("PeAudioMaskedGroupNorm", torch.bfloat16)[0]
    xb = torch.from_numpy(x).to(torch.bfloat16)
    refb = mb(xb, padding_mask=torch.from_numpy(pmx)).detach().double().numpy()
    linb, vb = from_torch(mb)
    yb = linb.apply(vb, jnp.asarray(x).astype(jnp.bfloat16), padding_mask=jnp.asarray(pmx))
    assert yb.dtype == jnp.bfloat16
    xd = xb.double().view(2, 4, 8, 7)
    mk = torch.from_numpy(pmx).reshape(2, 4, 8, 7).bool()
    n = mk.sum((2, 3), keepdim=True)
    mu = (xd * mk).sum((2, 3), keepdim=True) / n
    var = ((xd - mu) ** 2 * mk).sum((2, 3), keepdim=True) / n
    w, b = (t.detach().double().view(1, -1, 1) for t in (mb.weight, mb.bias))
    ref64 = (((xd - mu) / torch.sqrt(var + mb.eps)).view(shape) * w + b).numpy() * pmx
    assert np.abs(np.asarray(yb, np.float64) - ref64).max() <= np.abs(refb - ref64).max()
    with pytest.raises(ValueError, match="padding_mask` must broadcast to x.shape=\\(2, 32, 7\\)"):
        lin.apply(variables, jnp.asarray(x), padding_mask=jnp.ones((3, 7)))


def test_group_norm_frame_axis_is_per_frame():
    # float64 reference: statistics per (sample, group, frame)
    x = _x((2, 4, 3, 5))
    y = np.asarray(jln.group_norm(jnp.asarray(x), 2, eps=1e-5, frame_axis=2), np.float64)
    g = x.astype(np.float64).reshape(2, 2, 2, 3, 5)
    mu, var = g.mean(axis=(2, 4), keepdims=True), g.var(axis=(2, 4), keepdims=True)
    ref = ((g - mu) / np.sqrt(var + 1e-5)).reshape(x.shape)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)
    # and torch's GroupNorm on the frames folded into the batch (the video VAEs' code), bfloat16
    xb = torch.from_numpy(x).to(torch.bfloat16)
    folded = torch.nn.functional.group_norm(xb.permute(0, 2, 1, 3).flatten(0, 1), 2)
    refb = folded.unflatten(0, (2, 3)).permute(0, 2, 1, 3).float().numpy()
    yb = jln.group_norm(jnp.asarray(x).astype(jnp.bfloat16), 2, frame_axis=2)
    np.testing.assert_array_equal(np.asarray(yb.astype(jnp.float32)), refb)


@pytest.mark.parametrize("activation", ["relu", pytest.param("silu", marks=pytest.mark.slow), "gelu"])
def test_group_norm_activation_matches_torch(activation):
    x = _x((2, 8, 5))
    w, b = 1 + 0.3 * _x((8,), seed=2), 0.3 * _x((8,), seed=3)  # a GroupNorm's output: mostly within +-5
    fn = {"relu": torch.relu, "silu": torch.nn.functional.silu, "gelu": torch.nn.functional.gelu}[activation]
    for dtype, tdt in ((jnp.float32, torch.float32), (jnp.bfloat16, torch.bfloat16)):
        t = [torch.from_numpy(a).to(tdt) for a in (x, w, b)]
        ref = fn(torch.nn.functional.group_norm(t[0], 4, t[1], t[2])).float().numpy()
        xj, wj, bj = (jnp.asarray(a).astype(dtype) for a in (x, w, b))
        y = jln.group_norm(xj, 4, wj, bj, activation=activation)
        y = np.asarray(y.astype(jnp.float32))
        if dtype == jnp.float32:
            np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)
        else:  # torch's bfloat16 GELU rounds a few tiny values otherwise
            assert (y == ref).mean() >= (0.99 if activation == "gelu" else 1.0)


@pytest.mark.parametrize(
    ("call", "exc", "words"),
    [
        (lambda: jln.group_norm(jnp.ones((2, 4, 3)), 2, frame_axis=1), ValueError, "not the batch axis 0 nor the channel"),
        (lambda: jln.group_norm(jnp.ones((2, 4, 3)), 2, frame_axis=1.0), TypeError, "`frame_axis` must be an int"),
        (lambda: jln.group_norm(jnp.ones((2, 4, 3)), 2, activation="tanh"), ValueError, "`activation` must be one of"),
        (lambda: jnnx.LayerNorm(4, torch_names="weight"), TypeError, "`torch_names` must be None or"),
        (lambda: jnnx.GroupNorm(2, 4, activation="gelu_new"), ValueError, "`activation` must be one of"),
    ],
)
def test_bad_options(call, exc, words):
    with pytest.raises(exc, match=words):
        call()


def test_torch_names_unknown_name_is_refused():
    m = jnnx.LayerNorm(4, use_bias=False, torch_names={"weight": "norm.weight", "bias": "norm.bias"})
    with pytest.raises(ValueError, match=r"renames \['bias'\], which its torch layout does not produce"):
        to_torch_state_dict(m)


@pytest.mark.parametrize(
    ("make", "exc", "words"),
    [
        pytest.param(
            lambda: _cls("diffusers.models.transformers.transformer_stable_audio3.StableAudio3RMSNorm")(8, force_fp32=False),
            ValueError, "force_fp32=False", marks=pytest.mark.slow),
        pytest.param(_bit("gelu_new"), ValueError, "its activation is NewGELUActivation", marks=pytest.mark.slow),
    ],
)
def test_refused_precisely(make, exc, words):
    with pytest.raises(exc, match=words):
        from_torch(make())


@pytest.mark.slow
def test_group_norm_frame_axis_channels_last():
    # the same statistics with the channels last: [N, T, H, W, C] with frame_axis=1
    x = jnp.asarray(_x((2, 4, 3, 5, 6)))
    first = jln.group_norm(x, 2, frame_axis=2)
    last = jln.group_norm(jnp.moveaxis(x, 1, -1), 2, channel_axis=-1, frame_axis=1)
    np.testing.assert_allclose(np.asarray(jnp.moveaxis(last, -1, 1)), np.asarray(first), rtol=1e-5, atol=1e-5)
