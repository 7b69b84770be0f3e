"""The dtype-flow variants of LayerNorm and RMSNorm: ``layer_norm(convention="deberta" |
"eager")`` and ``rms_norm(convention="eager" | "round_rstd")``, and the model files' norms that
convert onto them (DeBERTa, VitDet, MoonshineStreaming, ImageGPT, LTX-2, QwenImage 2.1,
DeepSeek-V4, GLM-5-Next, MuseSpark's input-scaled RMSNorm); and ``rms_norm(convention=
"input_scaled")``.

Every expected value is torch's own output (torch 2.13 CPU; transformers and diffusers as
installed) from random weights and inputs: float32 within 1e-5 of torch, bfloat16 and float16
bit-exact on >= 99.5% of elements and within 1 ulp, gradients within 1e-4. One case of each
check runs by default; the other classes and dtypes with --run-slow.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jln
from jln import linen as jnn
from jln import nnx as jnnx

torch = pytest.importorskip("torch")

from jln.interop import from_torch  # noqa: E402
from tests.test_interop import _hf, _jax, _randomise, parity  # noqa: E402

D = 32
_T = "transformers.models"
F32, BF16, F16 = torch.float32, torch.bfloat16, torch.float16
#: mode -> (weight dtype, input dtype)
MODES = {"f32": (F32, F32), "bf16": (BF16, BF16), "f16": (F16, F16), "f32w_bf16x": (F32, BF16)}


@dataclass(frozen=True)
class Case:
    id: str
    make: Callable[[], Any]
    options: dict[str, Any]  # what the converted module's config must say
    x_shape: tuple[int, ...] = (4, 6, D)
    weighted: bool = True  # has parameters (so the mixed-dtype mode applies and nnx knows the width)
    default: str | None = None  # the mode run without --run-slow


def _t(path: str, name: str, *args: Any, **kw: Any) -> Callable[[], Any]:
    return lambda: _hf(f"{_T}.{path}", name)(*args, **kw)


def _d(path: str, name: str, *args: Any, **kw: Any) -> Callable[[], Any]:
    return lambda: _hf(f"diffusers.models.{path}", name)(*args, **kw)


CASES = [
    Case("DebertaLayerNorm", _t("deberta.modeling_deberta", "DebertaLayerNorm", D, eps=1e-7),
         {"convention": "deberta"}, default="bf16"),
    Case("VitDetLayerNorm", _t("vitdet.modeling_vitdet", "VitDetLayerNorm", D),
         {"convention": "eager", "axis": 1}, x_shape=(2, D, 3, 5)),
    Case("MoonshineStreamingLayerNorm",
         _t("moonshine_streaming.modeling_moonshine_streaming", "MoonshineStreamingLayerNorm", D),
         {"convention": "deberta", "zero_centered": True}),
    Case("ImageGPTLayerNorm", _t("imagegpt.modeling_imagegpt", "ImageGPTLayerNorm", D),
         {"convention": "eager"}),
    Case("PerChannelRMSNorm", _d("autoencoders.autoencoder_kl_ltx2", "PerChannelRMSNorm"),
         {"convention": "eager", "axis": 1, "use_scale": False}, x_shape=(2, D, 3, 5), weighted=False),
    Case("LTX2AudioPixelNorm", _d("autoencoders.autoencoder_kl_ltx2_audio", "LTX2AudioPixelNorm"),
         {"convention": "eager", "axis": 1, "use_scale": False}, x_shape=(2, D, 7), weighted=False),
    Case("QwenImage21ZeroCenterRMSNorm",
         _d("transformers.transformer_qwenimage21", "QwenImage21ZeroCenterRMSNorm", D),
         {"convention": "gemma"}),
    Case("DeepseekV4UnweightedRMSNorm", _t("deepseek_v4.modeling_deepseek_v4", "DeepseekV4UnweightedRMSNorm"),
         {"convention": "round_rstd", "use_scale": False}, weighted=False, default="bf16"),
    Case("Glm5NextTextUnweightedRMSNorm", _t("glm5_next.modeling_glm5_next", "Glm5NextTextUnweightedRMSNorm"),
         {"convention": "round_rstd", "use_scale": False}, weighted=False),
    Case("MuseSparkTextInputScaledRMSNorm",
         _t("muse_spark.modeling_muse_spark", "MuseSparkTextInputScaledRMSNorm", D),
         {"convention": "input_scaled"}),
]
BY_ID = {c.id: c for c in CASES}


def _build(case: Case, mode: str, seed: int = 0) -> tuple[Any, Any]:
    wdt, xdt = MODES[mode]
    m = _randomise(case.make(), seed).to(wdt)
    g = torch.Generator().manual_seed(seed + 1)
    return m, (2.0 * torch.randn(case.x_shape, generator=g) + 0.3).to(xdt)


def _torch(m: Any, x: Any) -> Any:
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return m(x)


def _assert_matches(y: Any, ref: Any, x_dtype: Any) -> dict[str, float]:
    p = parity(y, ref)  # same dtype and shape
    if ref.dtype in (BF16, F16):
        assert p["frac_exact"] >= 0.995 and p["max_ulp"] <= 1, p
    elif p["max_abs"] > 1e-5 * max(1.0, p["ref_max"]):
        # float32 output of a value rounded to half precision inside (float32 weight, bf16 x):
        # exact unless torch and jln rounded an intermediate to neighbouring values
        assert x_dtype != F32 and p["frac_exact"] >= 0.995 and p["rel"] <= 2.0**-7, p
    return p


def _forward_params() -> list[Any]:
    return [
        pytest.param(c.id, mode, marks=() if mode == c.default else (pytest.mark.slow,), id=f"{c.id}-{mode}")
        for c in CASES for mode in MODES if c.weighted or mode != "f32w_bf16x"
    ]


@pytest.mark.parametrize(("case_id", "mode"), _forward_params())
def test_converted_variant_matches_torch(case_id: str, mode: str) -> None:
    case = BY_ID[case_id]
    m, x = _build(case, mode)
    lin, variables = from_torch(m)
    assert {k: getattr(lin.cfg, k) for k in case.options} == case.options
    ref = _torch(m, x)
    _assert_matches(lin.apply(variables, _jax(x)), ref, x.dtype)
    if case.weighted:  # nnx needs the width, which a weightless class does not record
        _assert_matches(from_torch(m, api="nnx")(_jax(x)), ref, x.dtype)


@pytest.mark.parametrize("case_id", [
    pytest.param(c.id, marks=() if c.id == "DeepseekV4UnweightedRMSNorm" else (pytest.mark.slow,)) for c in CASES
])
def test_converted_variant_gradients_match_torch(case_id: str) -> None:
    case = BY_ID[case_id]
    m, x = _build(case, "f32", seed=2)
    lin, variables = from_torch(m)
    ct = torch.randn(x.shape, generator=torch.Generator().manual_seed(5))
    xt = x.clone().requires_grad_(True)
    (m(xt) * ct).sum().backward()

    def loss(params: Any, a: Any) -> Any:
        return jnp.sum(lin.apply({"params": params}, a) * _jax(ct))

    params = variables.get("params", {})
    g_params, g_x = jax.grad(loss, argnums=(0, 1))(params, _jax(x))
    np.testing.assert_allclose(np.asarray(g_x), xt.grad.numpy(), rtol=1e-4, atol=1e-4)
    torch_grads = [p.grad.numpy() for _, p in m.named_parameters()]  # weight (or gamma), then bias
    mine = [np.asarray(g_params[k]) for k in ("scale", "bias") if k in g_params]
    assert len(mine) == len(torch_grads)
    for g, t in zip(mine, torch_grads, strict=True):
        np.testing.assert_allclose(g, t, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("case_id", "old"), [
    ("DebertaLayerNorm", {"convention": "torch"}),
    pytest.param("ImageGPTLayerNorm", {"convention": "llama"}, marks=pytest.mark.slow),
    pytest.param("DeepseekV4UnweightedRMSNorm", {"convention": "torch"}, marks=pytest.mark.slow),
    pytest.param("MuseSparkTextInputScaledRMSNorm", {"convention": "gemma"}, marks=pytest.mark.slow),
])
def test_the_previous_nearest_convention_misses(case_id: str, old: dict[str, Any]) -> None:
    # the check above can fail: the convention jln had before differs from torch in half precision
    case = BY_ID[case_id]
    m, x = _build(case, "bf16")
    lin, variables = from_torch(m)
    other = lin.clone(**old)
    p = parity(other.apply(variables, _jax(x)), _torch(m, x))
    assert p["frac_exact"] < 0.98, p


# --------------------------------------------------------------------------- the functions


def _x(shape: tuple[int, ...], dtype: Any, seed: int = 0) -> Any:
    return jnp.asarray(2 * np.random.default_rng(seed).standard_normal(shape) + 0.3, dtype)


@pytest.mark.parametrize(("fn", "convention"), [
    (jln.layer_norm, "eager"), *(pytest.param(f, c, marks=pytest.mark.slow) for f, c in (
        (jln.layer_norm, "deberta"), (jln.rms_norm, "eager"), (jln.rms_norm, "round_rstd"),
        (jln.rms_norm, "input_scaled"))),
])
def test_kernels_refuse_the_xla_only_conventions(fn: Any, convention: str) -> None:
    x = _x((4, 64), jnp.bfloat16)
    for impl in ("pallas", "native"):
        with pytest.raises(ValueError, match=rf"impl='{impl}' is not available here: the '{convention}' "
                                             rf".* only the XLA path implements\. Use impl='xla' or 'auto'"):
            fn(x, convention=convention, impl=impl)
    np.testing.assert_array_equal(np.asarray(fn(x, convention=convention), np.float32),
                                  np.asarray(fn(x, convention=convention, impl="xla"), np.float32))


@pytest.mark.slow
def test_aliases_name_the_same_computation() -> None:
    x, w = _x((3, 16), jnp.float16), _x((16,), jnp.float16, 1)
    pairs = [
        (jln.layer_norm, "vitdet", "eager"), (jln.layer_norm, "moonshine", "deberta"),
        (jln.rms_norm, "imagegpt", "eager"), (jln.rms_norm, "ltx2", "eager"),
        (jln.rms_norm, "deepseek_v4", "round_rstd"), (jln.rms_norm, "glm5_next", "round_rstd"),
        (jln.rms_norm, "muse_spark_input", "input_scaled"),
    ]
    for fn, alias, name in pairs:
        np.testing.assert_array_equal(np.asarray(fn(x, w, convention=alias, eps=1e-5)),
                                      np.asarray(fn(x, w, convention=name, eps=1e-5)))


@pytest.mark.slow
@pytest.mark.parametrize("dtype", [jnp.bfloat16, jnp.float16])
@pytest.mark.parametrize("convention", ["eager", "deberta"])
def test_layer_norm_conventions_match_their_torch_code(convention: str, dtype: Any) -> None:
    # the torch code each convention names, written here for a float32 weight and bias (promotion)
    x = _x((8, 48), dtype)
    w, b = _x((48,), jnp.float32, 1), _x((48,), jnp.float32, 2)
    xt = torch.from_numpy(np.array(x, np.float32)).to({jnp.bfloat16: BF16, jnp.float16: F16}[dtype])
    wt, bt = torch.from_numpy(np.array(w)), torch.from_numpy(np.array(b))
    h = xt.float() if convention == "deberta" else xt
    u = h.mean(-1, keepdim=True)
    h = ((h - u) / torch.sqrt((h - u).pow(2).mean(-1, keepdim=True) + 1e-5)).to(xt.dtype)
    ref = wt * h + bt
    y = jln.layer_norm(x, w, b, convention=convention)
    _assert_matches(y, ref, xt.dtype)


@pytest.mark.slow
def test_eager_float16_overflows_as_torch() -> None:
    # x**2 overflows float16 above 256: torch then gives 0 (x / inf); so does the eager convention
    x = jnp.asarray([[300.0, 1.0, -2.0, 4.0]], jnp.float16)
    ref = _hf(f"{_T}.imagegpt.modeling_imagegpt", "ImageGPTLayerNorm")(4)
    with torch.no_grad():
        ref.weight.fill_(1.0)
    want = _torch(ref.half(), torch.from_numpy(np.array(x, np.float32)).half())
    y = jln.rms_norm(x, jnp.ones(4, jnp.float16), eps=1e-5, convention="eager")
    np.testing.assert_array_equal(np.asarray(y, np.float32), want.float().numpy())


# --------------------------------------------------------------------------- modules and errors


def test_module_convention_linen_and_nnx_agree() -> None:
    x = _x((2, 5, 8), jnp.bfloat16)
    m = jnn.LayerNorm(convention="vitdet")
    variables = m.init(jax.random.key(0), x)
    y = m.apply(variables, x)
    assert y.dtype == jnp.float32  # float32 parameters promote, as torch's weight * h
    n = jnnx.LayerNorm(8, convention="vitdet")
    np.testing.assert_array_equal(np.asarray(n(x)), np.asarray(y))
    np.testing.assert_array_equal(np.asarray(y), np.asarray(jln.layer_norm(x, jnp.ones(8), jnp.zeros(8),
                                                                           convention="eager")))


def test_bad_conventions_say_what_is_expected() -> None:
    x = jnp.ones((2, 4))
    with pytest.raises(ValueError, match=r"jln.layer_norm: unknown LayerNorm convention 'llama'; expected one of "
                                         r"\['deberta', 'eager', 'moonshine', 'torch', 'vitdet'\]"):
        jln.layer_norm(x, convention="llama")
    with pytest.raises(ValueError, match=r"jln LayerNorm: unknown LayerNorm convention 'x'"):
        jnn.LayerNorm(convention="x").init(jax.random.key(0), x)
    with pytest.raises(ValueError, match=r"unknown convention 'rstd'; expected one of .*'round_rstd'"):
        jln.rms_norm(x, convention="rstd")


@pytest.mark.slow
def test_pocket_tts_flow_layer_norm_is_refused_with_the_reason() -> None:
    cls = _hf(f"{_T}.pocket_tts.modeling_pocket_tts", "PocketTTSFlowLayerNorm")
    with pytest.raises(TypeError, match=r"cannot reproduce it: .*rsqrt is not correctly rounded"):
        from_torch(cls(D))

