"""Converted RMSNorms whose weight dtype decides the computation: MuseSpark's centered RMSNorm
and Krea 2's form ``1 + weight`` in the weight's dtype (``"gemma"`` for a float32 weight,
``"gemma_rounded"`` for a half one); and the refused classes, refused with the reason. The
expected values are the torch modules' own outputs."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("diffusers")

from jln.interop import from_torch, to_torch_state_dict  # noqa: E402
from tests.test_interop import _jax, assert_same  # noqa: E402

D = 64


def _centered(name: str) -> Any:
    if name == "MuseSpark":
        from transformers.models.muse_spark.modeling_muse_spark import MuseSparkTextCenteredRMSNorm

        return MuseSparkTextCenteredRMSNorm(D)
    from diffusers.models.transformers.transformer_krea2 import Krea2RMSNorm

    return Krea2RMSNorm(D)


@pytest.mark.parametrize("name", ["MuseSpark", "Krea2"])
@pytest.mark.parametrize(("w_dtype", "x_dtype"), [("bfloat16", "bfloat16"), ("float16", "float16"),
                                                  ("bfloat16", "float32"), ("float32", "bfloat16")])
def test_one_plus_weight_in_the_weights_dtype(name: str, w_dtype: str, x_dtype: str) -> None:
    wd, xd = getattr(torch, w_dtype), getattr(torch, x_dtype)
    m = _centered(name)
    with torch.no_grad():
        m.weight.copy_(torch.randn(D, generator=torch.Generator().manual_seed(1)))
    m = m.to(wd).eval()
    x = torch.randn((4, 9, D), generator=torch.Generator().manual_seed(0)).to(xd)
    with torch.no_grad():
        want = m(x)
    lin, variables = from_torch(m)
    assert lin.convention == ("gemma" if w_dtype == "float32" else "gemma_rounded")
    for got in (lin.apply(variables, _jax(x)), from_torch(m, api="nnx")(_jax(x))):
        assert_same((got,), (want,), xd)
    sd = to_torch_state_dict(variables, lin)
    assert sd["weight"].dtype == wd and torch.equal(sd["weight"], m.weight)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_mochi_weightless_rms_norm_on_nnx(dtype: str) -> None:
    """Mochi's RMSNorm(0, eps, False) records no width: the NNX module takes num_features=None
    (a module without parameters) and any width, with torch's numbers."""
    from diffusers.models.normalization import RMSNorm

    dt = getattr(torch, dtype)
    m = RMSNorm(0, 1e-5, False).eval()
    mod = from_torch(m, api="nnx")
    assert mod.num_features is None
    for width in (48, 16):
        x = torch.randn((2, 5, width), generator=torch.Generator().manual_seed(width)).to(dt)
        with torch.no_grad():
            want = m(x)
        assert_same((mod(_jax(x)),), (want,), dt)


def test_num_features_none_needs_a_module_without_parameters() -> None:
    from jln import nnx as jnnx

    with pytest.raises(ValueError, match="without parameters"):
        jnnx.RMSNorm(None)
    with pytest.raises(ValueError, match="num_features"):
        jnnx.LayerNorm(None)  # type: ignore[arg-type]


@pytest.mark.parametrize(("w_dtype", "x_dtype"), [("float32", "float32"), ("float32", "bfloat16"),
                                                  ("bfloat16", "bfloat16")])
def test_xlstm_rms_norm_is_llamas(w_dtype: str, x_dtype: str) -> None:
    from transformers.models.xlstm.modeling_xlstm import xLSTMRMSNorm

    wd, xd = getattr(torch, w_dtype), getattr(torch, x_dtype)
    m = xLSTMRMSNorm(D)
    with torch.no_grad():
        m.weight.copy_(torch.randn(D, generator=torch.Generator().manual_seed(1)))
    m = m.to(wd).eval()
    x = torch.randn((2, 5, D), generator=torch.Generator().manual_seed(0)).to(xd)
    with torch.no_grad():
        want = m(x)
    lin, variables = from_torch(m)
    assert lin.convention == "llama"
    for got in (lin.apply(variables, _jax(x)), from_torch(m, api="nnx")(_jax(x))):
        assert_same((got,), (want,), xd)
    for changes, says in (({"force_float32_reductions": False}, "op by op"), ({"use_bias": True}, "bias")):
        with pytest.raises(ValueError, match=says):
            from_torch(xLSTMRMSNorm(D, **changes))


def _bare(cls: type) -> Any:
    m = cls.__new__(cls)
    torch.nn.Module.__init__(m)
    return m


@pytest.mark.parametrize(("module", "name", "says"), [
    ("hy_v4.modeling_hy_v4", "HYV4UnweightedRMSNorm", "returns only the statistic"),
    ("hy_v4_vl.modeling_hy_v4_vl", "HYV4VLUnweightedRMSNorm", "returns only the statistic"),
    ("pocket_tts.modeling_pocket_tts", "PocketTTSFlowLayerNorm", "not correctly rounded"),
    ("gradium_phonon_tts.modeling_gradium_phonon_tts", "GradiumPhononTTSFlowLayerNorm", "not correctly rounded"),
])
def test_refused_with_the_reason(module: str, name: str, says: str) -> None:
    import importlib

    cls = getattr(importlib.import_module(f"transformers.models.{module}"), name)
    with pytest.raises(TypeError, match="cannot reproduce it") as e:
        from_torch(_bare(cls))
    assert says in str(e.value)


def test_qwen4exp_grouped_rms_norm_is_refused_with_the_reason() -> None:
    from transformers.models.qwen4_exp.modeling_qwen4_exp import Qwen4ExpTextRMSNorm

    with pytest.raises(ValueError, match="per group"):
        from_torch(Qwen4ExpTextRMSNorm(D, group_size=16))
