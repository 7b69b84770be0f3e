"""LayerNorm and RMSNorm variants: zero-centred gamma, channels-first LayerNorm, and the model
files' norms that convert onto them (float32 flows, weightless RMSNorm...).

Every expected value is torch's own output (torch 2.13 CPU; transformers and diffusers as
installed), computed here from random weights and inputs: float32 within 1e-5 of torch,
bfloat16 bit-exact on >= 99.5% of elements and within 1 ulp, gradients within 1e-4.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jln
from jln import linen as jnn
from jln import nnx as jnnx

torch = pytest.importorskip("torch")

from jln._compare import to_numpy, ulp_distance  # noqa: E402
from jln.interop import from_torch, supported_modules, to_torch_state_dict  # noqa: E402
from tests.test_interop import (  # noqa: E402
    BF16,
    MODES,
    Case,
    _build,
    _diffusers,
    _hf,
    _jax,
    _torch_out,
    _tuple,
    assert_same,
)

D = 32
_T = "transformers.models"
LN_MODES = ("f32", "bf16", "f32w_bf16x")  # torch's layer_norm refuses bfloat16 weights with float32 x


def _t(path: str, name: str, *args: Any, **kw: Any) -> Any:
    return lambda: _hf(f"{_T}.{path}", name)(*args, **kw)


# --------------------------------------------------------------------------- zero_centered


def _zc_inputs(dtype: Any, wdtype: Any, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = torch.from_numpy(2 * rng.standard_normal((4, 16, 64)) + 0.5).to(dtype)
    w = torch.from_numpy(0.2 * rng.standard_normal(64)).to(wdtype)
    b = torch.from_numpy(0.1 * rng.standard_normal(64)).to(wdtype)
    return x, w, b


@pytest.mark.parametrize(("impl", "xdt", "wdt"), [
    ("xla", torch.float32, torch.float32), ("xla", BF16, BF16), ("xla", BF16, torch.float32),
    pytest.param("pallas", BF16, BF16, marks=pytest.mark.slow),
])
def test_zero_centered_matches_torch_weight_plus_one(impl: str, xdt: Any, wdt: Any) -> None:
    # Nemotron's LayerNorm1P: F.layer_norm(x, ..., weight + 1, bias), weight + 1 in the
    # weight's dtype (a bfloat16 weight rounds 1 + w to bfloat16; unrounded, about 30% of the
    # bfloat16 outputs would differ)
    x, w, b = _zc_inputs(xdt, wdt)
    ref = torch.nn.functional.layer_norm(x, (64,), w + 1.0, b)
    y = jln.layer_norm(_jax(x), _jax(w), _jax(b), zero_centered=True, impl=impl)
    assert_same((y,), (ref,), xdt)
    if xdt == BF16:  # as plain LayerNorm: all but the rare last-bit difference of the reductions
        assert float(np.mean(ulp_distance(to_numpy(y), to_numpy(ref)) == 0)) >= 0.999


def test_zero_centered_gradients_match_torch() -> None:
    x, w, b = _zc_inputs(torch.float32, torch.float32)
    xt, wt, bt = (t.clone().requires_grad_(True) for t in (x, w, b))
    ct = torch.randn(x.shape, generator=torch.Generator().manual_seed(3))
    (torch.nn.functional.layer_norm(xt, (64,), wt + 1.0, bt) * ct).sum().backward()

    def loss(a: Any, s: Any, c: Any) -> Any:
        return jnp.sum(jln.layer_norm(a, s, c, zero_centered=True) * _jax(ct))

    grads = jax.grad(loss, argnums=(0, 1, 2))(_jax(x), _jax(w), _jax(b))
    for g, t in zip(grads, (xt, wt, bt), strict=True):
        np.testing.assert_allclose(np.asarray(g), t.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_zero_centered_bad_arguments() -> None:
    x = jnp.ones((2, 4))
    with pytest.raises(ValueError, match=r"zero_centered=True multiplies by `1 \+ scale`, but no `scale`"):
        jln.layer_norm(x, zero_centered=True)
    with pytest.raises(TypeError, match="`zero_centered` must be a bool; received 'yes'"):
        jln.layer_norm(x, jnp.zeros(4), zero_centered="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="needs use_scale=True"):
        jnn.LayerNorm(zero_centered=True, use_scale=False).init(jax.random.key(0), x)


def test_zero_centered_modules_start_at_the_identity() -> None:
    x = jnp.asarray(np.random.default_rng(0).standard_normal((3, 8)), jnp.float32)
    m = jnn.LayerNorm(zero_centered=True)
    variables = m.init(jax.random.key(0), x)
    assert not np.any(np.asarray(variables["params"]["scale"]))  # 1 + 0
    want = jln.layer_norm(x)
    np.testing.assert_array_equal(np.asarray(m.apply(variables, x)), np.asarray(want))
    n = jnnx.LayerNorm(8, zero_centered=True)
    assert not np.any(np.asarray(n.scale[...]))
    np.testing.assert_array_equal(np.asarray(n(x)), np.asarray(want))


def test_channels_first_is_channels_last_transposed() -> None:
    x = jnp.asarray(np.random.default_rng(1).standard_normal((2, 8, 3, 5)), jnp.bfloat16)
    w = jnp.asarray(np.random.default_rng(2).standard_normal(8), jnp.float32)
    cf = jln.layer_norm(x, w, w, axis=1)
    cl = jln.layer_norm(jnp.moveaxis(x, 1, -1), w, w)
    np.testing.assert_array_equal(np.asarray(cf, np.float32), np.asarray(jnp.moveaxis(cl, -1, 1), np.float32))


# --------------------------------------------------------------------------- converters

# (case, jln class the converter gives, options it must set)
CASES: list[tuple[Case, str, dict[str, Any]]] = [
    (Case("ConvNextLayerNorm(channels_first)",
          _t("convnext.modeling_convnext", "ConvNextLayerNorm", D, data_format="channels_first"),
          x_shape=(2, D, 3, 4), modes=LN_MODES), "LayerNorm", {"axis": 1}),
    (Case("ConvNextLayerNorm(channels_last)", _t("convnext.modeling_convnext", "ConvNextLayerNorm", D),
          modes=("f32", "bf16"), x_shape=(2, 3, 4, D)), "LayerNorm", {"axis": -1}),
    (Case("Sam2LayerNorm(channels_first: ConvNext's code)",
          _t("sam2.modeling_sam2", "Sam2LayerNorm", D, data_format="channels_first"),
          modes=("f32", "bf16"), x_shape=(2, D, 4, 4)), "LayerNorm", {"axis": 1}),
    (Case("EomtLayerNorm2d", _t("eomt.modeling_eomt", "EomtLayerNorm2d", D), x_shape=(2, D, 3, 3), modes=LN_MODES),
     "LayerNorm", {"axis": 1}),
    (Case("SqueezeBertLayerNorm (NCW)", _t("squeezebert.modeling_squeezebert", "SqueezeBertLayerNorm", D),
          modes=("f32", "bf16"), x_shape=(2, D, 7)), "LayerNorm", {"axis": 1}),
    (Case("NemotronLayerNorm1P", _t("nemotron.modeling_nemotron", "NemotronLayerNorm1P", D), modes=LN_MODES),
     "LayerNorm", {"zero_centered": True}),
    (Case("VideoPrismLayerNorm (weight + 1)", _t("videoprism.modeling_videoprism", "VideoPrismLayerNorm", D),
          modes=("f32", "bf16")), "LayerNorm", {"zero_centered": True}),
    (Case("OlmoLayerNorm", _t("olmo.modeling_olmo", "OlmoLayerNorm", D), modes=("f32", "bf16")),
     "LayerNorm", {"use_scale": False, "use_bias": False}),
    (Case("CohereLayerNorm", _t("cohere.modeling_cohere", "CohereLayerNorm", D)),
     "LayerNorm", {"use_bias": False}),
    (Case("diffusers FP32LayerNorm", lambda: _diffusers("FP32LayerNorm")(D, eps=1e-6)),
     "LayerNorm", {}),
    (Case("Gemma3nRMSNorm", _t("gemma3n.modeling_gemma3n", "Gemma3nRMSNorm", D)),
     "RMSNorm", {"convention": "torch"}),
    (Case("Gemma3nRMSNorm(with_scale=False)", _t("gemma3n.modeling_gemma3n", "Gemma3nRMSNorm", D, with_scale=False),
          modes=("f32", "bf16")), "RMSNorm", {"convention": "torch", "use_scale": False}),
    (Case("Gemma4RMSNorm (Gemma 3n's code)", _t("gemma4.modeling_gemma4", "Gemma4RMSNorm", D),
          modes=("f32", "bf16")), "RMSNorm", {"convention": "torch"}),
    (Case("MoshiRMSNorm", _t("moshi.modeling_moshi", "MoshiRMSNorm", D)), "RMSNorm", {"convention": "torch"}),
    (Case("KyutaiSpeechToTextRMSNorm (Moshi's code)",
          _t("kyutai_speech_to_text.modeling_kyutai_speech_to_text", "KyutaiSpeechToTextRMSNorm", D),
          modes=("f32", "bf16")), "RMSNorm", {"convention": "torch"}),
    (Case("HeliumRMSNorm", _t("helium.modeling_helium", "HeliumRMSNorm", D)), "RMSNorm", {"convention": "torch"}),
    (Case("Llama4TextL2Norm (weightless)", _t("llama4.modeling_llama4", "Llama4TextL2Norm"),
          modes=("f32", "bf16")), "RMSNorm", {"convention": "torch", "use_scale": False}),
    (Case("FalconMambaWeightlessRMSNorm", _t("falcon_mamba.modeling_falcon_mamba", "FalconMambaWeightlessRMSNorm", D),
          modes=("f32", "bf16")), "RMSNorm", {"use_scale": False}),
    (Case("Llama4TextRMSNorm (cast, then weight)", _t("llama4.modeling_llama4", "Llama4TextRMSNorm", D)),
     "RMSNorm", {"convention": "llama"}),
    (Case("Qwen4ExpTextRMSNorm (1 + w)", _t("qwen4_exp.modeling_qwen4_exp", "Qwen4ExpTextRMSNorm", D)),
     "RMSNorm", {"convention": "gemma"}),
    (Case("MuseSparkTextCenteredRMSNorm (float32 weight)",
          _t("muse_spark.modeling_muse_spark", "MuseSparkTextCenteredRMSNorm", D), modes=("f32", "f32w_bf16x")),
     "RMSNorm", {"convention": "gemma"}),
    (Case("diffusers MochiRMSNorm", lambda: _diffusers("MochiRMSNorm")(D, eps=1e-6)),
     "RMSNorm", {"convention": "torch"}),
]
BY_ID = {c.id: (c, cls, opts) for c, cls, opts in CASES}
WIDTHLESS = {"Llama4TextL2Norm (weightless)", "Gemma3nRMSNorm(with_scale=False)"}


def _outs(case_id: str, m: Any, x: Any) -> dict[str, tuple[Any, ...]]:
    lin, variables = from_torch(m)
    outs = {"linen": _tuple(lin.apply(variables, _jax(x)))}
    if case_id not in WIDTHLESS:
        outs["nnx"] = _tuple(from_torch(m, api="nnx")(_jax(x)))
    return outs


def _modes() -> list[Any]:
    """Each case in bfloat16 (where the dtype flow shows) by default; every mode under --run-slow."""
    out = []
    for c, _, _ in CASES:
        first = "bf16" if "bf16" in c.modes else c.modes[-1]
        out += [(c.id, m) if m == first else pytest.param(c.id, m, marks=pytest.mark.slow) for m in c.modes]
    return out


@pytest.mark.parametrize(("case_id", "mode"), _modes())
def test_variant_forward_parity(case_id: str, mode: str) -> None:
    case, cls, opts = BY_ID[case_id]
    m, x, _ = _build(case, mode)
    lin, _ = from_torch(m)
    assert type(lin).__name__ == cls
    assert {k: getattr(lin.cfg, k) for k in opts} == opts
    expected = _torch_out(case, m, x, None)
    for outs in _outs(case_id, m, x).values():
        assert_same(outs, expected, MODES[mode][1])


@pytest.mark.parametrize("case_id", [c.id for c, _, _ in CASES if c.id not in WIDTHLESS])
def test_variant_round_trip(case_id: str) -> None:
    case, _, _ = BY_ID[case_id]
    m, x, _ = _build(case, "f32")
    lin, variables = from_torch(m)
    sd = to_torch_state_dict(variables, lin)
    ref = m.state_dict()
    assert sorted(sd) == sorted(ref)
    fresh = case.make().eval()
    fresh.load_state_dict(sd, strict=True)
    for a, b in zip(_torch_out(case, fresh, x, None), _torch_out(case, m, x, None), strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize("case_id", ["ConvNextLayerNorm(channels_first)", "NemotronLayerNorm1P", "CohereLayerNorm",
                                     "Gemma3nRMSNorm", "Llama4TextRMSNorm (cast, then weight)"])
def test_variant_gradients(case_id: str) -> None:
    """d(sum(out * ct))/d(x, weights) against torch autograd, float32."""
    case, _, _ = BY_ID[case_id]
    m, x, _ = _build(case, "f32")
    xt = x.clone().requires_grad_(True)
    out = m(xt)
    ct = torch.randn(out.shape, generator=torch.Generator().manual_seed(5))
    weights = [p for _, p in sorted(m.named_parameters())]
    grads_t = torch.autograd.grad((out * ct).sum(), [xt, *weights])
    lin, variables = from_torch(m)
    params = variables["params"]

    def loss(a: Any, p: Any) -> Any:
        return jnp.sum(lin.apply({"params": p}, a) * _jax(ct))

    gx, gp = jax.grad(loss, argnums=(0, 1))(_jax(x), params)
    np.testing.assert_allclose(np.asarray(gx), grads_t[0].numpy(), rtol=1e-4, atol=1e-4)
    names = dict(zip(("bias", "weight"), ("bias", "scale"), strict=True))
    for (name, _), g in zip(sorted(m.named_parameters()), grads_t[1:], strict=True):
        np.testing.assert_allclose(np.asarray(gp[names[name]]), g.numpy(), rtol=1e-4, atol=1e-4)


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(("make", "message"), [
    (_t("qwen4_exp.modeling_qwen4_exp", "Qwen4ExpTextRMSNorm", D, group_size=8), "statistics are per group of 8"),
    (_t("nemotron.modeling_nemotron", "NemotronLayerNorm1P", D, elementwise_affine=False), "it has no weight"),
])
def test_variants_jln_cannot_reproduce_are_refused(make: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        from_torch(make())


def test_a_weightless_norm_without_its_width_works_on_nnx() -> None:
    """No parameters, so nothing needs the width: the NNX module takes num_features=None."""
    m = _hf(f"{_T}.llama4.modeling_llama4", "Llama4TextL2Norm")()
    mod = from_torch(m, api="nnx")
    x = torch.randn((2, 5, D), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        want = m(x)
    np.testing.assert_allclose(np.asarray(mod(jnp.asarray(x.numpy()))), want.numpy(), rtol=0, atol=1e-6)


def test_variants_are_listed() -> None:
    listed = " ".join(supported_modules())
    for name in ("ConvNextLayerNorm", "NemotronLayerNorm1P", "OlmoLayerNorm", "Gemma3nRMSNorm", "Llama4TextL2Norm"):
        assert name in listed


@pytest.mark.parametrize(("path", "name", "args", "message"), [
    ("pocket_tts.modeling_pocket_tts", "PocketTTSFlowLayerNorm", (D,), "rsqrt is not correctly rounded"),
    ("hy_v4.modeling_hy_v4", "HYV4UnweightedRMSNorm", (), "returns only the statistic"),
])
def test_refusals_say_what_differs_from_the_nearest_family(path: str, name: str, args: Any, message: str) -> None:
    with pytest.raises(TypeError, match=f"no converter for .*{name}. jln recognises its computation but cannot "
                                        f"reproduce it: .*{message}"):
        from_torch(_hf(f"{_T}.{path}", name)(*args))


def test_an_unknown_norm_gets_the_nearest_families() -> None:
    class MyRMSNorm(torch.nn.Module):
        def forward(self, x: Any) -> Any:
            return x / x.norm(dim=-1, keepdim=True)

    MyRMSNorm.__module__ = "transformers.models.mine.modeling_mine"
    with pytest.raises(TypeError, match="matches none of the computations jln recognises.*nearest families"):
        from_torch(MyRMSNorm())
    with pytest.raises(TypeError) as info:  # no such hint for modules that are no LayerNorm/RMSNorm
        from_torch(torch.nn.Softmax(dim=-1))
    assert "nearest families" not in str(info.value)
