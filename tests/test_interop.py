"""jln.interop against the real torch, transformers and diffusers classes.

Every expected value is the torch module's own output (torch 2.13 CPU, transformers and
diffusers as installed), computed in the test from random weights and inputs.
"""

from __future__ import annotations

import subprocess
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")

from jln._compare import to_numpy, ulp_distance  # noqa: E402
from jln.interop import from_torch, supported_modules, to_torch_state_dict  # noqa: E402

F32, BF16 = torch.float32, torch.bfloat16
# dtype modes: (module dtype, dtype of x). Conditions (emb) always take the module's dtype,
# as torch's Linear requires.
MODES = {
    "f32": (F32, F32),
    "bf16": (BF16, BF16),
    "bf16w_f32x": (BF16, F32),
    "f32w_bf16x": (F32, BF16),
}
D, COND = 32, 16


def _hf(path: str, name: str) -> Callable[..., Any]:
    mod = pytest.importorskip(path)
    return getattr(mod, name)


def _diffusers(name: str) -> Callable[..., Any]:
    return _hf("diffusers.models.normalization", name)


@dataclass(frozen=True)
class Case:
    """A torch module factory, how to call it, and the dtype modes torch itself accepts."""

    id: str
    make: Callable[[], Any]
    cond: int | None = None  # size of the conditioning input, if any
    call: Callable[[Any, Any, Any], Any] = lambda m, x, c: m(x) if c is None else m(x, c)
    modes: tuple[str, ...] = ("f32", "bf16", "bf16w_f32x", "f32w_bf16x")
    x_shape: tuple[int, ...] = (2, 5, D)
    # flax's Dense rounds x @ kernel to bf16 before adding the bias; torch's addmm rounds once,
    # so a plain Linear is only within bf16 rounding of torch (not bit-exact).
    bf16_exact: bool = True


def _llama(name: str) -> Callable[[], Any]:
    mod = name.lower().replace("rmsnorm", "")
    return lambda: _hf(f"transformers.models.{mod}.modeling_{mod}", name)(D, eps=1e-5)


def _gemma(name: str) -> Callable[[], Any]:
    mod = name.lower().replace("rmsnorm", "")
    return lambda: _hf(f"transformers.models.{mod}.modeling_{mod}", name)(D, eps=1e-6)


CASES = [
    Case("torch.LayerNorm", lambda: torch.nn.LayerNorm(D), modes=("f32", "bf16", "f32w_bf16x")),
    Case(
        "torch.LayerNorm(2 axes, no bias)",
        lambda: torch.nn.LayerNorm((5, D), bias=False),
        modes=("f32", "bf16"),
    ),
    Case(
        "torch.LayerNorm(no affine)",
        lambda: torch.nn.LayerNorm(D, elementwise_affine=False),
        modes=("f32", "bf16"),
    ),
    Case("torch.RMSNorm(eps=None)", lambda: torch.nn.RMSNorm(D)),
    Case(
        "torch.RMSNorm(2 axes)", lambda: torch.nn.RMSNorm((5, D), eps=1e-6), modes=("f32", "bf16")
    ),
    Case("LlamaRMSNorm", _llama("LlamaRMSNorm")),
    Case("Qwen2RMSNorm", _llama("Qwen2RMSNorm"), modes=("f32", "bf16")),
    Case("MistralRMSNorm", _llama("MistralRMSNorm"), modes=("f32", "bf16")),
    Case("GemmaRMSNorm", _gemma("GemmaRMSNorm")),
    Case("Gemma2RMSNorm", _gemma("Gemma2RMSNorm"), modes=("f32", "bf16")),
    Case("Gemma3RMSNorm", _gemma("Gemma3RMSNorm"), modes=("f32", "bf16")),
    Case("T5LayerNorm", lambda: _hf("transformers.models.t5.modeling_t5", "T5LayerNorm")(D)),
    # classes recognised by their code (LLaMA's, Gemma's, T5's norm under another model's name)
    Case("Qwen3RMSNorm (LLaMA's code)", _llama("Qwen3RMSNorm")),
    Case("DeepseekV3RMSNorm (LLaMA's code)",
         lambda: _hf("transformers.models.deepseek_v3.modeling_deepseek_v3", "DeepseekV3RMSNorm")(D, eps=1e-6),
         modes=("f32", "bf16")),
    Case("Qwen3NextRMSNorm (Gemma's code)",
         lambda: _hf("transformers.models.qwen3_next.modeling_qwen3_next", "Qwen3NextRMSNorm")(D, eps=1e-6)),
    Case("MT5LayerNorm (T5's code)", lambda: _hf("transformers.models.mt5.modeling_mt5", "MT5LayerNorm")(D)),
    Case("Olmo2RMSNorm (torch's rms_norm)",
         lambda: _hf("transformers.models.olmo2.modeling_olmo2", "Olmo2RMSNorm")(D, eps=1e-6)),
    Case("GptOssRMSNorm (OLMo 2's code)",
         lambda: _hf("transformers.models.gpt_oss.modeling_gpt_oss", "GptOssRMSNorm")(D, eps=1e-6)),
    Case("diffusers.RMSNorm(bias)", lambda: _diffusers("RMSNorm")(D, eps=1e-6, bias=True)),
    Case(
        "diffusers.RMSNorm(no affine)",
        lambda: _diffusers("RMSNorm")(D, eps=1e-6, elementwise_affine=False),
        modes=("f32", "bf16"),
    ),
    Case(
        "AdaLayerNormZero",
        lambda: _diffusers("AdaLayerNormZero")(D),
        cond=D,
        call=lambda m, x, c: m(x, emb=c),
        modes=("f32", "bf16", "bf16w_f32x"),
    ),
    Case(
        "AdaLayerNormZeroSingle",
        lambda: _diffusers("AdaLayerNormZeroSingle")(D),
        cond=D,
        call=lambda m, x, c: m(x, emb=c),
        modes=("f32", "bf16"),
    ),
    Case(
        "AdaLayerNormContinuous",
        lambda: _diffusers("AdaLayerNormContinuous")(D, COND, elementwise_affine=True, eps=1e-6),
        cond=COND,
        modes=("f32", "bf16"),
    ),
    Case(
        "AdaLayerNormContinuous(rms_norm)",
        lambda: _diffusers("AdaLayerNormContinuous")(
            D, COND, elementwise_affine=True, eps=1e-6, norm_type="rms_norm"
        ),
        cond=COND,
        modes=("f32", "bf16"),
    ),
    Case(
        "AdaLayerNormContinuous(no affine, no bias)",
        lambda: _diffusers("AdaLayerNormContinuous")(
            D, COND, elementwise_affine=False, eps=1e-6, bias=False
        ),
        cond=COND,
        modes=("f32", "bf16"),
    ),
    Case("diffusers.DynamicTanh", lambda: _hf("diffusers.models.autoencoders.autoencoder_same", "DynamicTanh")(D)),
    Case("torch.Linear", lambda: torch.nn.Linear(D, COND), modes=("f32", "bf16"), bf16_exact=False),
]
CASE_BY_ID = {c.id: c for c in CASES}


def _randomise(m: Any, seed: int) -> Any:
    """Random weights (norm weights around 1, Gemma's around 0, projections small)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in m.named_parameters():
            r = torch.randn(p.shape, generator=g, dtype=torch.float32)
            if name.endswith("weight") and p.ndim == 1 and "Gemma" not in type(m).__name__:
                p.copy_(1.0 + 0.5 * r)
            else:
                p.copy_((0.5 if p.ndim == 1 else 0.3) * r)
    return m.eval()


def _build(case: Case, mode: str, seed: int = 0) -> tuple[Any, Any, Any]:
    wdt, xdt = MODES[mode]
    m = _randomise(case.make(), seed).to(wdt)
    g = torch.Generator().manual_seed(seed + 1)
    x = (2.0 * torch.randn(case.x_shape, generator=g) + 0.3).to(xdt)
    c = (
        None
        if case.cond is None
        else torch.randn((case.x_shape[0], case.cond), generator=g).to(wdt)
    )
    return m, x, c


def _jax(t: Any) -> Any:
    return None if t is None else jnp.asarray(to_numpy(t))


def _tuple(y: Any) -> tuple[Any, ...]:
    return tuple(y) if isinstance(y, (tuple, list)) else (y,)


def _torch_out(case: Case, m: Any, x: Any, c: Any) -> tuple[Any, ...]:
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch's mixed-dtype rms_norm notice
        return _tuple(case.call(m, x, c))


def _jln_outs(m: Any, x: Any, c: Any) -> dict[str, tuple[Any, ...]]:
    args = (_jax(x),) if c is None else (_jax(x), _jax(c))
    lin, variables = from_torch(m)
    nnx_mod = from_torch(m, api="nnx")
    return {"linen": _tuple(lin.apply(variables, *args)), "nnx": _tuple(nnx_mod(*args))}


def parity(jo: Any, to: Any) -> dict[str, float]:
    """max abs error, fraction bit-exact and max ulp of one jln output against torch's."""
    j, t = to_numpy(jo), to_numpy(to)
    assert str(j.dtype) == str(t.dtype), (j.dtype, t.dtype)
    assert j.shape == t.shape, (j.shape, t.shape)
    ulps = ulp_distance(j, t)
    err = np.abs(j.astype(np.float64) - t.astype(np.float64))
    scale = np.abs(t.astype(np.float64)).max() + 1e-30
    return {
        "max_abs": float(err.max()),
        "rel": float(err.max() / scale),
        "ref_max": float(scale),
        "frac_exact": float(np.mean(ulps == 0)),
        "max_ulp": int(ulps.max()),
    }


def assert_same(
    jln_out: tuple[Any, ...], torch_out: tuple[Any, ...], x_dtype: Any, *, bf16_exact: bool = True
) -> None:
    assert len(jln_out) == len(torch_out)
    for jo, to in zip(jln_out, torch_out, strict=True):
        p = parity(jo, to)
        dt = str(to_numpy(to).dtype)
        if dt == "bfloat16" and not bf16_exact:
            assert p["rel"] <= 2.0**-7, p
        elif dt == "bfloat16":
            assert p["frac_exact"] >= 0.995 and p["max_ulp"] <= 1, p
        elif p["max_abs"] > 1e-5 * max(1.0, p["ref_max"]):
            # float32 output of a value rounded to bf16 inside (LLaMA: bf16 x, f32 weight):
            # exact unless torch and jln rounded an intermediate to neighbouring bf16 values
            assert x_dtype == BF16 and p["frac_exact"] >= 0.995 and p["rel"] <= 2.0**-7, p


PARAMS = [(c.id, mode) for c in CASES for mode in c.modes]


@pytest.mark.parametrize(("case_id", "mode"), PARAMS)
def test_forward_parity(case_id: str, mode: str) -> None:
    case = CASE_BY_ID[case_id]
    m, x, c = _build(case, mode)
    expected = _torch_out(case, m, x, c)
    for outs in _jln_outs(m, x, c).values():
        assert_same(outs, expected, MODES[mode][1], bf16_exact=case.bf16_exact)


@pytest.mark.parametrize(
    ("case_id", "mode"),
    [(c.id, "f32") for c in CASES]
    + [
        ("LlamaRMSNorm", "bf16"),
        ("AdaLayerNormZero", "bf16"),
        ("diffusers.RMSNorm(bias)", "bf16"),
        ("torch.LayerNorm(2 axes, no bias)", "bf16"),
    ],
)
def test_round_trip(case_id: str, mode: str) -> None:
    """from_torch -> to_torch_state_dict -> strict load into a fresh module: same tensors, outputs."""
    case = CASE_BY_ID[case_id]
    m, x, c = _build(case, mode)
    ref = m.state_dict()
    lin, variables = from_torch(m)
    for sd in (to_torch_state_dict(variables, lin), to_torch_state_dict(from_torch(m, api="nnx"))):
        assert sorted(sd) == sorted(ref)
        for k, t in sd.items():
            assert t.dtype == ref[k].dtype and torch.equal(t, ref[k]), k
        fresh = case.make().to(MODES[mode][0]).eval()
        fresh.load_state_dict(sd, strict=True)
        for a, b in zip(_torch_out(case, fresh, x, c), _torch_out(case, m, x, c), strict=True):
            assert torch.equal(a, b)


def test_round_trip_after_update() -> None:
    """Changed jln parameters land in the right torch tensors (a transposition would show)."""
    m, x, c = _build(CASE_BY_ID["AdaLayerNormContinuous"], "f32")
    lin, variables = from_torch(m)
    p = jax.tree_util.tree_map(lambda a: a * 2.0, variables["params"])
    sd = to_torch_state_dict({"params": p}, lin)
    for k, t in m.state_dict().items():
        assert torch.equal(sd[k], 2.0 * t), k


@pytest.mark.parametrize(
    "case_id",
    [
        "torch.LayerNorm",
        "LlamaRMSNorm",
        "GemmaRMSNorm",
        "AdaLayerNormZero",
        "AdaLayerNormContinuous",
    ],
)
def test_input_gradients(case_id: str) -> None:
    """d(sum of outputs * cotangents)/d(inputs) matches torch autograd (float32)."""
    case = CASE_BY_ID[case_id]
    m, x, c = _build(case, "f32")
    xs = [x] if c is None else [x, c]
    xs = [t.clone().requires_grad_(True) for t in xs]
    outs = _tuple(case.call(m, *xs) if c is not None else case.call(m, xs[0], None))
    g = torch.Generator().manual_seed(7)
    cots = [torch.randn(o.shape, generator=g) for o in outs]
    grads_t = torch.autograd.grad(sum((o * ct).sum() for o, ct in zip(outs, cots, strict=True)), xs)
    lin, variables = from_torch(m)
    nnx_mod = from_torch(m, api="nnx")
    cots_j = [_jax(ct) for ct in cots]

    def loss(fwd: Callable[..., Any]) -> Callable[..., Any]:
        def f(*args: Any) -> Any:
            return sum(jnp.sum(o * ct) for o, ct in zip(_tuple(fwd(*args)), cots_j, strict=True))

        return f

    args = [_jax(t.detach()) for t in xs]
    for fwd in (lambda *a: lin.apply(variables, *a), nnx_mod):
        grads_j = jax.grad(loss(fwd), argnums=tuple(range(len(args))))(*args)
        for gj, gt in zip(grads_j, grads_t, strict=True):
            np.testing.assert_allclose(np.asarray(gj), gt.numpy(), rtol=1e-4, atol=1e-4)


def test_llama_fp32_weight_bf16_input_gives_fp32() -> None:
    """LLaMA: float32 weight with bfloat16 activations returns float32, as transformers does."""
    m, x, _ = _build(CASE_BY_ID["LlamaRMSNorm"], "f32w_bf16x")
    lin, variables = from_torch(m)
    assert variables["params"]["scale"].dtype == jnp.float32
    y = lin.apply(variables, _jax(x))
    assert (
        y.dtype == jnp.float32
        and _torch_out(CASE_BY_ID["LlamaRMSNorm"], m, x, None)[0].dtype == F32
    )


def test_unsupported_module_lists_supported() -> None:
    with pytest.raises(TypeError, match="Supported modules") as e:
        from_torch(torch.nn.Dropout(0.1))  # (BatchNorm1d converts now)
    for line in supported_modules():
        assert line in str(e.value)
    assert any("LlamaRMSNorm" in s for s in supported_modules())


def test_subclass_with_own_forward_is_not_converted() -> None:
    class Scaled(torch.nn.LayerNorm):
        def forward(self, x: Any) -> Any:
            return 2 * super().forward(x)

    with pytest.raises(TypeError, match="no converter"):
        from_torch(Scaled(4))


def test_unsupported_configurations() -> None:
    with pytest.raises(ValueError, match="num_embeddings"):
        from_torch(_diffusers("AdaLayerNormZero")(D, num_embeddings=10))
    with pytest.raises(ValueError, match="activation"):
        from_torch(torch.nn.TransformerEncoderLayer(16, 2, 32, activation=torch.nn.SiLU()))
    mixed = torch.nn.TransformerEncoderLayer(16, 2, 32)
    mixed.linear1.bias = None
    with pytest.raises(ValueError, match="some of its layers have biases"):
        from_torch(mixed)
    with pytest.raises(ValueError, match="dim="):
        from_torch(_diffusers("RMSNorm")((4, D), eps=1e-6))
    with pytest.raises(ValueError, match="api"):
        from_torch(torch.nn.LayerNorm(4), api="haiku")


def test_to_torch_state_dict_errors() -> None:
    lin, variables = from_torch(torch.nn.LayerNorm(4))
    with pytest.raises(TypeError, match="nnx module alone"):
        to_torch_state_dict(variables)
    with pytest.raises(TypeError, match="no torch layout"):
        to_torch_state_dict(variables, object())
    with pytest.raises(ValueError, match="do not match"):
        to_torch_state_dict({"params": {}}, from_torch(_diffusers("AdaLayerNormZero")(D))[0])


def test_to_torch_state_dict_names_every_wrong_parameter() -> None:
    # nothing is dropped or passed through silently: torch-style names, wrong shapes and extra
    # entries are each named
    lin, variables = from_torch(torch.nn.LayerNorm(8))
    with pytest.raises(ValueError, match=r"missing 'scale'.*unexpected 'weight'"):
        to_torch_state_dict({"params": {"weight": jnp.ones(8), "bias": jnp.zeros(8)}}, lin)
    with pytest.raises(ValueError, match=r"'bias' has shape \(8,\), expected \(5,\)"):
        to_torch_state_dict({"params": {"scale": jnp.ones(5), "bias": jnp.zeros(8)}}, lin)
    with pytest.raises(ValueError, match=r"unexpected 'extra'"):
        to_torch_state_dict({"params": {**variables["params"], "extra": jnp.ones(3)}}, lin)
    with pytest.raises(ValueError, match="normalizes over 1 axis"):
        to_torch_state_dict({"params": {"scale": jnp.ones((2, 4)), "bias": jnp.ones((2, 4))}}, lin)
    blk, bv = from_torch(torch.nn.TransformerEncoderLayer(16, 4, 32))
    bad = jax.tree.map(lambda a: a, bv)
    bad["params"]["self_attn"]["key"]["kernel"] = jnp.ones((16, 8))
    del bad["params"]["self_attn"]["key"]["bias"]
    with pytest.raises(ValueError) as info:
        to_torch_state_dict(bad, blk)
    msg = str(info.value)
    assert "'self_attn/key/kernel' has shape (16, 8), expected (16, 16)" in msg
    assert "missing 'self_attn/key/bias' (shape (16,))" in msg
    dense, dv = from_torch(torch.nn.Linear(4, 3))
    with pytest.raises(ValueError, match=r"'bias' has shape \(4,\), expected \(3,\)"):
        to_torch_state_dict({"params": {"kernel": jnp.ones((4, 3)), "bias": jnp.ones(4)}}, dense)
    # the right trees still convert (linen and nnx)
    assert sorted(to_torch_state_dict(bv, blk)) == sorted(torch.nn.TransformerEncoderLayer(16, 4, 32).state_dict())


def test_float64_weights_need_x64() -> None:
    if jax.dtypes.canonicalize_dtype(jnp.float64) == jnp.float64:
        pytest.skip("this process runs with jax_enable_x64")
    with pytest.raises(ValueError, match="jax_enable_x64"):
        from_torch(torch.nn.LayerNorm(4).double())


def test_import_does_not_import_torch() -> None:
    code = (
        "import sys, jln.interop\n"
        "bad = [m for m in ('torch', 'transformers', 'diffusers') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def _encoder_layer(norm_first: bool, batch_first: bool, activation: str, bias: bool = True) -> Any:
    m = torch.nn.TransformerEncoderLayer(
        D, 4, 48, dropout=0.1, activation=activation, batch_first=batch_first, norm_first=norm_first, bias=bias
    )
    return _randomise(m, 3)


@pytest.mark.parametrize(
    ("norm_first", "batch_first", "activation", "bias"),
    [(False, False, "relu", True), (True, True, "gelu", True), (False, True, "gelu", True), (True, False, "relu", True),
     (False, True, "relu", False), (True, False, "gelu", False)],
)
@pytest.mark.slow
def test_transformer_encoder_layer(norm_first: bool, batch_first: bool, activation: str, bias: bool) -> None:
    """Eval outputs (with and without a key padding mask) and a strict round trip, float32;
    ``bias=False``: no biases in the Linear layers and the LayerNorms (none in the trees)."""
    m = _encoder_layer(norm_first, batch_first, activation, bias)
    g = torch.Generator().manual_seed(5)
    b, t = 2, 6
    x = torch.randn((b, t, D) if batch_first else (t, b, D), generator=g)
    pad = torch.zeros(b, t, dtype=torch.bool)
    pad[1, -2:] = True  # True = ignored key, as torch
    lin, variables = from_torch(m)
    nnx_mod = from_torch(m, api="nnx")
    xj = _jax(x)
    for mask in (None, pad):
        with torch.no_grad():
            expected = m(x, src_key_padding_mask=mask)
        mj = None if mask is None else jnp.asarray(mask.numpy())
        for y in (
            lin.apply(variables, xj, src_key_padding_mask=mj),
            nnx_mod(xj, src_key_padding_mask=mj),
        ):
            assert y.dtype == jnp.float32
            np.testing.assert_allclose(np.asarray(y), expected.numpy(), rtol=1e-5, atol=2e-5)
    leaves = jax.tree_util.tree_flatten_with_path(variables)[0]
    assert any("bias" in jax.tree_util.keystr(k) for k, _ in leaves) == bias
    fresh = torch.nn.TransformerEncoderLayer(
        D, 4, 48, activation=activation, batch_first=batch_first, norm_first=norm_first, bias=bias
    )
    for sd in (to_torch_state_dict(variables, lin), to_torch_state_dict(nnx_mod)):
        fresh.load_state_dict(sd, strict=True)
        for k, v in m.state_dict().items():
            assert torch.equal(sd[k], v), k


def test_transformer_encoder_layer_bf16() -> None:
    """bfloat16 weights and input: bfloat16 output within a few bf16 ulps of torch.

    Not bit-exact: torch's CPU attention and jln's round the score/softmax/value products at
    different points; the bound is 2^-5 of the output's largest magnitude.
    """
    m = _encoder_layer(True, True, "gelu").to(BF16)
    x = torch.randn((2, 6, D), generator=torch.Generator().manual_seed(5)).to(BF16)
    with torch.no_grad():
        expected = m(x)
    lin, variables = from_torch(m)
    assert all(a.dtype == jnp.bfloat16 for a in jax.tree_util.tree_leaves(variables))
    y = lin.apply(variables, _jax(x))
    p = parity(y, expected)
    assert p["rel"] <= 2.0**-5, p


@pytest.mark.slow
def test_ada_continuous_float32_condition_with_bf16_module() -> None:
    """diffusers casts SiLU(cond) to x's dtype (HunyuanDiT passes a float32 condition)."""
    case = CASE_BY_ID["AdaLayerNormContinuous"]
    m, x, c = _build(case, "bf16")
    c = c.float() + 0.01 * torch.randn(c.shape, generator=torch.Generator().manual_seed(9))
    expected = _torch_out(case, m, x, c)
    for outs in _jln_outs(m, x, c).values():
        assert_same(outs, expected, BF16)


def test_a_norm_with_other_code_is_not_taken_for_llamas() -> None:
    # CohereLayerNorm has LLaMA's attributes (weight, variance_epsilon) but subtracts the mean:
    # it becomes a LayerNorm, never an RMSNorm (recognition reads the code, not the attributes)
    cohere = _hf("transformers.models.cohere.modeling_cohere", "CohereLayerNorm")(D, eps=1e-5)
    assert type(from_torch(cohere)[0]).__name__ == "LayerNorm"
    # and a class named like a supported one keeps being recognised by its name
    assert "any transformers class whose code is LlamaRMSNorm's" in " ".join(supported_modules())


def test_linen_shape_errors_are_jlns_not_flaxs() -> None:
    """A converted linen module applied to an input of the wrong width: jln's ValueError, naming
    the input's shape and the size the parameters were created for (not flax's
    ScopeParamShapeError)."""
    ln, v = from_torch(torch.nn.LayerNorm(D))
    with pytest.raises(ValueError, match=r"x\.shape=\(2, 5, 16\).*num_features=16|num_features=32.*x\.shape=\(2, 5, 16\)"):
        ln.apply(v, jnp.zeros((2, 5, 16)))
    ada, v = from_torch(_diffusers("AdaLayerNormContinuous")(D, COND))
    with pytest.raises(ValueError, match=r"cond_features=16 .*cond\.shape=\(2, 7\)"):
        ada.apply(v, jnp.zeros((2, 5, D)), jnp.zeros((2, 7)))
    rms, v = from_torch(torch.nn.RMSNorm(D))
    with pytest.raises(ValueError, match="jln.linen.RMSNorm") as e:
        rms.apply(v, jnp.zeros((3, 8)))
    assert "ScopeParamShapeError" not in repr(e.value)
