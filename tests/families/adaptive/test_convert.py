"""The conditioned norms of diffusers' and transformers' model files (Sana, CogView4, EasyAnimate,
Flux.3, Mochi, PI0.5, EsmFold2...) that jln.interop converts by computation.

Each torch class is converted with ``jln.interop.from_torch`` (linen and nnx) and compared with
the class itself: float32 within the core's tolerance, bfloat16 bit-exact on >= 99.5% of
elements and never more than 1 ulp off; its gradients with torch autograd (float32); its
parameters round-trip into a strict ``load_state_dict``. The classes jln refuses are refused
with the reason.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jln

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")
pytest.importorskip("transformers")

from jln.interop import from_torch, to_torch_state_dict  # noqa: E402
from tests.families.adaptive.test_adaptive import (  # noqa: E402
    MODES,
    Case,
    _build,
    _cls,
    _grid,
    _jln_outs,
    _torch_out,
    assert_grads_match_torch,
)
from tests.test_interop import _jax, assert_same, parity  # noqa: E402

D, COND = 32, 16
_DT = "diffusers.models.transformers"
X, X2, C = ("x", (2, 5, D)), ("x", (2, 3, D)), ("cond", (2, COND))


def _d(module: str, name: str) -> Any:
    return _cls(f"{_DT}.{module}", name)


def _hf(model: str, name: str) -> Any:
    return _cls(f"transformers.models.{model}.modeling_{model}", name)


IMG = ("x", (2, D, 4, 4))
CASES = [
    Case("AdaGroupNorm", lambda: _cls("diffusers.models.normalization", "AdaGroupNorm")(COND, D, 4),
         (IMG, C), modes=("f32", "bf16", "bf16w_f32x")),
    Case("AdaGroupNorm(mish)", lambda: _cls("diffusers.models.normalization", "AdaGroupNorm")(COND, D, 8, "mish"),
         (IMG, C)),
    Case("AdaGroupNorm(gelu)", lambda: _cls("diffusers.models.normalization", "AdaGroupNorm")(COND, D, 2, "gelu"),
         (("x", (2, D, 2, 3)), C)),
    Case("Kandinsky3ConditionalGroupNorm",
         lambda: _cls("diffusers.models.unets.unet_kandinsky3", "Kandinsky3ConditionalGroupNorm")(4, D, COND),
         (IMG, C)),
    Case("AdaLayerNormShift", lambda: _d("hunyuan_transformer_2d", "AdaLayerNormShift")(D), (X, ("cond", (2, D))),
         modes=("f32", "bf16", "bf16w_f32x")),
    Case("AdaLayerNormShift(no affine)",
         lambda: _d("hunyuan_transformer_2d", "AdaLayerNormShift")(D, elementwise_affine=False, eps=1e-5),
         (X, ("cond", (2, D)))),
    Case("SanaModulatedNorm", lambda: _d("sana_transformer", "SanaModulatedNorm")(D),
         (X, ("cond", (2, D)), ("cond", (2, D))), modes=("f32", "bf16", "f32w_bf16x")),
    Case("SanaModulatedNorm(video)", lambda: _d("transformer_sana_video", "SanaModulatedNorm")(D),
         (X, ("cond", (2, 5, D)), ("cond", (2, D)))),
    Case("CogView4AdaLayerNormContinuous", lambda: _d("transformer_cogview4", "CogView4AdaLayerNormContinuous")(D, COND),
         (X, C), modes=("f32", "bf16")),
    Case("CogView4AdaLayerNormContinuous(rms_norm)",
         lambda: _d("transformer_cogview4", "CogView4AdaLayerNormContinuous")(D, COND, norm_type="rms_norm"), (X, C)),
    Case("CogView4AdaLayerNormZero", lambda: _d("transformer_cogview4", "CogView4AdaLayerNormZero")(COND, D),
         (X, X2, C)),
    Case("GlmImageAdaLayerNormContinuous",
         lambda: _d("transformer_glm_image", "GlmImageAdaLayerNormContinuous")(D, COND), (X, C)),
    Case("GlmImageAdaLayerNormZero", lambda: _d("transformer_glm_image", "GlmImageAdaLayerNormZero")(COND, D),
         (X, X2, C)),
    Case("EasyAnimateLayerNormZero", lambda: _d("transformer_easyanimate", "EasyAnimateLayerNormZero")(COND, D),
         (X, X2, C)),
    Case("EasyAnimateLayerNormZero(layer_norm)",
         lambda: _d("transformer_easyanimate", "EasyAnimateLayerNormZero")(COND, D, norm_type="layer_norm"),
         (X, X2, C)),
    Case("Flux3AdaLayerNorm", lambda: _d("transformer_flux3", "Flux3AdaLayerNorm")(D), (X, ("cond", (2, 5, D)))),
    Case("AudioDiTAdaLayerNormZeroFinal",
         lambda: _d("transformer_longcat_audio_dit", "AudioDiTAdaLayerNormZeroFinal")(D), (X, ("cond", (2, D)))),
    Case("MochiModulatedRMSNorm", lambda: _d("transformer_mochi", "MochiModulatedRMSNorm")(1e-5),
         (X, ("cond", (2, 1, D))), modes=("f32", "bf16", "bf16w_f32x", "f32w_bf16x")),
    Case("MochiModulatedRMSNorm(no scale)", lambda: _d("transformer_mochi", "MochiModulatedRMSNorm")(1e-6), (X,)),
    Case("QwenImage21AdaLayerNormContinuous",
         lambda: _d("transformer_qwenimage21", "QwenImage21AdaLayerNormContinuous")(D, COND), (X, C)),
    Case("PI05AdaptiveRMSNorm", lambda: _hf("pi05", "PI05AdaptiveRMSNorm")(D), (X, ("cond", (2, D))),
         modes=("f32", "bf16", "f32w_bf16x")),
    # EsmFold2 keeps its weights in float32 (torch refuses them in bfloat16 with float32 x)
    Case("EsmFold2AdaptiveLayerNorm", lambda: _hf("esmfold2", "EsmFold2AdaptiveLayerNorm")(D),
         (X, ("cond", (2, 5, D))), modes=("f32", "f32w_bf16x")),
    # MoVQ's SpatialNorm: zq (a feature map in the module's dtype) resized to x's spatial shape,
    # by an exact doubling, a non-integer ratio and not at all
    Case("SpatialNorm", lambda: _cls("diffusers.models.attention_processor", "SpatialNorm")(D, COND),
         (("x", (2, D, 8, 8)), ("cond", (2, COND, 4, 4)))),
    Case("Emu3VQVAESpatialNorm", lambda: _hf("emu3", "Emu3VQVAESpatialNorm")(COND, D),
         (("x", (2, D, 6, 10)), ("cond", (2, COND, 4, 3)))),
    Case("KVAEDecoderSpatialNorm2D",
         lambda: _cls("diffusers.models.autoencoders.autoencoder_kl_kvae", "KVAEDecoderSpatialNorm2D")(D, COND),
         (("x", (2, D, 5, 5)), ("cond", (2, COND, 5, 5)))),
]
CASE_BY_ID = {c.id: c for c in CASES}
#: the default run's slice: one class of each new jln module or option, in its bit-exact mode
FAST = {"SanaModulatedNorm": "bf16", "Emu3VQVAESpatialNorm": "bf16"}


@pytest.mark.parametrize(("case_id", "mode"), _grid([(c.id, mode) for c in CASES for mode in c.modes],
                                                   lambda i, mode: FAST.get(i) == mode))
def test_forward_parity(case_id: str, mode: str) -> None:
    case = CASE_BY_ID[case_id]
    m, args = _build(case, mode)
    expected = _torch_out(case, m, args)
    outs = _jln_outs(m, args)
    for got in outs.values():
        assert_same(got, expected, MODES[mode][1])
    for a, b in zip(outs["linen"], outs["nnx"], strict=True):  # the two faces: one computation
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.slow
def test_bfloat16_is_bit_exact_not_just_close() -> None:
    """The bfloat16 comparison can fail: the same conversion with the wrong modulation order
    (``1 + scale`` rounded in float32 instead of bfloat16) is off on many elements."""
    case = CASE_BY_ID["AdaGroupNorm"]
    m, (x, e) = _build(case, "bf16")
    (expected,) = _torch_out(case, m, [x, e])
    lin, variables = from_torch(m)
    got = lin.apply(variables, _jax(x), _jax(e))
    p = lin.cfg.proj_name
    h = jnp.asarray(_jax(e), jnp.float32) @ variables["params"][p]["kernel"].astype(jnp.float32)
    scale, shift = jnp.split(h + variables["params"][p]["bias"].astype(jnp.float32)[None], 2, axis=-1)
    n = jln.group_norm(_jax(x), 4).astype(jnp.float32)
    wrong = (n * (1 + scale[:, :, None, None]) + shift[:, :, None, None]).astype(jnp.bfloat16)
    assert parity(got, expected)["frac_exact"] >= 0.995
    assert parity(wrong, expected)["frac_exact"] < 0.95


#: round trips of the default run (all of them, the AdaGroupNorm and Kandinsky 3 layouts among them,
#: with --run-slow)
ROUND_TRIP = ("SpatialNorm",)


@pytest.mark.parametrize("case_id", _grid([(c.id,) for c in CASES], lambda i: i in ROUND_TRIP))
def test_round_trip(case_id: str) -> None:
    """from_torch -> to_torch_state_dict -> strict load into a fresh module: same tensors, outputs."""
    case = CASE_BY_ID[case_id]
    m, args = _build(case, "f32")
    ref = m.state_dict()
    lin, variables = from_torch(m)
    for sd in (to_torch_state_dict(variables, lin), to_torch_state_dict(from_torch(m, api="nnx"))):
        assert sorted(sd) == sorted(ref)
        for k, t in sd.items():
            assert t.dtype == ref[k].dtype and torch.equal(t, ref[k]), k
        fresh = case.make().eval()
        fresh.load_state_dict(sd, strict=True)
        for a, b in zip(_torch_out(case, fresh, args), _torch_out(case, m, args), strict=True):
            assert torch.equal(a, b)


GRAD_FAST = ("MochiModulatedRMSNorm",)


@pytest.mark.parametrize("case_id", _grid([(c.id,) for c in CASES], lambda i: i in GRAD_FAST))
def test_gradients(case_id: str) -> None:
    """d(sum of outputs * cotangents)/d(inputs and parameters) matches torch autograd (float32)."""
    assert_grads_match_torch(CASE_BY_ID[case_id])


def _bare(cls: type) -> Any:
    """An instance without its layers: enough for recognition by code (no config to build)."""
    m = cls.__new__(cls)
    torch.nn.Module.__init__(m)
    return m


@pytest.mark.parametrize(("model", "name", "says"), _grid([
    ("vibevoice", "VibeVoiceDiffusionHeadAdaLayerNorm", "residual layer, not a norm"),
    ("voxtral_realtime", "VoxtralRealtimeTextAdaRmsNorm", "it is an MLP"),
    ("gradium_phonon_tts", "GradiumPhononTTSTimestepNorm", "op by op in the input's dtype"),
    ("pocket_tts", "PocketTTSTimestepNorm", "unbiased variance"),
], lambda model, name, says: False))
def test_refused_with_the_reason(model: str, name: str, says: str) -> None:
    with pytest.raises(TypeError, match="cannot reproduce it") as e:
        from_torch(_bare(_hf(model, name)))
    assert says in str(e.value)


def test_refused_configurations() -> None:
    ada_group = _cls("diffusers.models.normalization", "AdaGroupNorm")(COND, D, 4, "silu")
    ada_group.act = torch.nn.Tanh()
    with pytest.raises(ValueError, match="its activation is Tanh"):
        from_torch(ada_group)
    esm = _hf("esmfold2", "EsmFold2AdaptiveLayerNorm")(D)
    esm.cond_norm.eps = 1e-3
    with pytest.raises(ValueError, match="Only the layers EsmFold2 builds"):
        from_torch(esm)


def test_module_errors() -> None:
    from jln.families.adaptive import conditioned as MC
    from jln.families.adaptive import module as MA

    with pytest.raises(ValueError, match="`num_groups` must divide `features`"):
        MC.AdaGroupNormConfig(features=8, num_groups=3)
    with pytest.raises(ValueError, match="`activation` must be None or one of"):
        MC.AdaGroupNormConfig(features=8, num_groups=2, activation="tanh")
    with pytest.raises(ValueError, match="layout='cogview4' splits the projection into 12 chunks"):
        MA.AdaLNZeroJointConfig(features=8, layout="cogview4")
    cfg = MC.AdaGroupNormConfig(features=8, num_groups=2)
    with pytest.raises(ValueError, match=r"`emb` must be \[B, cond_features\]"):
        MC.apply_group({}, jnp.ones((2, 8, 4, 4)), jnp.ones((2, 1, 3)), cfg)
    with pytest.raises(ValueError, match=r"`scale_shift_table` must be \[2, 8\]"):
        MC.apply_table({}, jnp.ones((2, 5, 8)), jnp.ones((2, 8)), jnp.zeros((3, 8)), MC.AdaLNTableConfig(features=8))
    dense = {"dense": {"kernel": jnp.ones((4, 24)), "bias": jnp.zeros(24)}}
    with pytest.raises(ValueError, match="must have a batch axis"):  # torch's [:, None, :] refuses it too
        MC.apply_ada_rms(dense, jnp.ones((2, 5, 8)), jnp.ones((4,)), MC.AdaRMSNormConfig(features=8))


@pytest.mark.parametrize(("n_in", "n_out"), [(4, 8), (4, 3), (3, 7), (5, 5), (7, 16), (16, 5), (1, 4), (6, 4)])
def test_spatial_norm_resizes_as_torch_nearest(n_in: int, n_out: int) -> None:
    from jln.families.adaptive.conditioned import nearest_indices

    src = torch.arange(n_in, dtype=torch.float32)[None, None]
    want = torch.nn.functional.interpolate(src, size=n_out, mode="nearest")[0, 0].long().numpy()
    np.testing.assert_array_equal(nearest_indices(n_in, n_out), want)


def test_spatial_norm_bad_inputs_and_configurations() -> None:
    from jln import linen as jnn
    from jln.families.adaptive import conditioned as MC

    with pytest.raises(ValueError, match="`num_groups` must divide `features`"):
        MC.SpatialNormConfig(features=8, num_groups=3)
    m = jnn.SpatialNorm(features=8, num_groups=2)
    x, zq = jnp.ones((2, 8, 4, 4)), jnp.ones((2, 3, 2, 2))
    variables = m.init(jax.random.key(0), x, zq)
    for bad_x, bad_zq, says in ((x, jnp.ones((2, 3, 2)), "same rank and batch"),
                                (x, jnp.ones((1, 3, 2, 2)), "same rank and batch"),
                                (jnp.ones((2, 6, 4, 4)), zq, "features=8"),
                                (x, jnp.ones((2, 3)), "channels first")):
        with pytest.raises(ValueError, match=says):
            m.apply(variables, bad_x, bad_zq)
    with pytest.raises(TypeError):
        m.apply(variables, x, jnp.ones((2, 3, 2, 2), jnp.int32))
    kvae = _cls("diffusers.models.autoencoders.autoencoder_kl_kvae", "KVAEDecoderSpatialNorm2D")(D, COND, add_conv=True)
    with pytest.raises(ValueError, match="add_conv=True"):
        from_torch(kvae)
