"""diffusers' other adaptive norms, Qwen2.5-Omni's adaLN-Zero, adaptive RMSNorm (the global response and
Lp norms: tests/families/lp_norm/).

Each torch class is converted with ``jln.interop.from_torch`` (linen and nnx) and compared with
the class itself (float32: within the core's tolerance; bfloat16: bit-exact on >= 99.5% of
elements and never more than 1 ulp off), its gradients with torch autograd, and its
parameters round-trip into a strict ``load_state_dict``. The functions are checked against
the torch references in the families' ``reference.py`` and float64.
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
from jln import linen as jlinen
from jln import nnx as jnnx
from jln.families.adaptive import reference as adaptive_reference

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")

from jln._compare import to_numpy  # noqa: E402
from jln.interop import from_torch, to_torch_state_dict  # noqa: E402
from tests.test_interop import MODES as _MODES  # noqa: E402
from tests.test_interop import _jax, _randomise, _tuple, assert_same, parity  # noqa: E402

F32, BF16, F16 = torch.float32, torch.bfloat16, torch.float16
D, COND = 32, 16
MODES = {**_MODES, "f16": (F16, F16)}


def _cls(path: str, name: str) -> Any:
    return getattr(pytest.importorskip(path), name)


def _norm(name: str) -> Any:
    return _cls("diffusers.models.normalization", name)


def _mochi(name: str) -> Any:
    return _cls("diffusers.models.transformers.transformer_mochi", name)


def _omni(name: str) -> Any:
    return _cls("transformers.models.qwen2_5_omni.modeling_qwen2_5_omni", name)


@dataclass(frozen=True)
class Case:
    """A torch module factory, its inputs' shapes (``x`` first; ``"cond"`` entries take the
    module's dtype, as torch's Linear requires) and how to call it."""

    id: str
    make: Callable[[], Any]
    shapes: tuple[tuple[str, tuple[int, ...]], ...] = (("x", (2, 5, D)), ("cond", (2, COND)))
    call: Callable[..., Any] = lambda m, *a: m(*a)
    modes: tuple[str, ...] = ("f32", "bf16")


CASES = [
    Case("Qwen2_5_OmniAdaLayerNormZero", lambda: _omni("Qwen2_5_OmniAdaLayerNormZero")(D),
         (("x", (2, 5, D)), ("cond", (2, D))), lambda m, x, c: m(x, emb=c), ("f32", "bf16", "bf16w_f32x")),
    Case("Qwen2_5_OmniAdaLayerNormZero_Final", lambda: _omni("Qwen2_5_OmniAdaLayerNormZero_Final")(D),
         (("x", (2, 5, D)), ("cond", (2, D))), modes=("f32", "bf16", "bf16w_f32x", "f16")),
    Case("AdaLayerNorm(chunk_dim=1, affine)",
         lambda: _norm("AdaLayerNorm")(COND, output_dim=2 * D, norm_elementwise_affine=True, chunk_dim=1),
         call=lambda m, x, c: m(x, temb=c)),
    Case("AdaLayerNorm(chunk_dim=0)", lambda: _norm("AdaLayerNorm")(COND, output_dim=2 * D, norm_eps=1e-6),
         (("x", (2, 5, D)), ("cond", (COND,))), lambda m, x, c: m(x, temb=c), ("f32", "bf16", "bf16w_f32x")),
    Case("SD35AdaLayerNormZeroX", lambda: _norm("SD35AdaLayerNormZeroX")(D),
         (("x", (2, 5, D)), ("cond", (2, D))), lambda m, x, c: m(x, emb=c), ("f32", "bf16", "bf16w_f32x", "f16")),
    Case("LuminaRMSNormZero", lambda: _norm("LuminaRMSNormZero")(D, norm_eps=1e-5, norm_elementwise_affine=True),
         (("x", (2, 5, D)), ("cond", (2, D))), lambda m, x, c: m(x, emb=c),
         ("f32", "bf16", "bf16w_f32x", "f32w_bf16x", "f16")),
    Case("MochiRMSNormZero", lambda: _mochi("MochiRMSNormZero")(COND, 4 * D, eps=1e-5),
         modes=("f32", "bf16", "bf16w_f32x", "f32w_bf16x", "f16")),
    Case("MochiRMSNorm", lambda: _norm("MochiRMSNorm")(D, eps=1e-5), (("x", (2, 5, D)),),
         modes=("f32", "bf16", "bf16w_f32x", "f32w_bf16x", "f16")),
    Case("MochiRMSNorm(no weight)", lambda: _norm("MochiRMSNorm")(D, eps=1e-6, elementwise_affine=False),
         (("x", (2, 5, D)),)),
    Case("CogVideoXLayerNormZero", lambda: _norm("CogVideoXLayerNormZero")(COND, D),
         (("x", (2, 5, D)), ("x", (2, 3, D)), ("cond", (2, COND))), modes=("f32", "bf16", "f16")),
    Case("CogVideoXLayerNormZero(no affine, no bias)",
         lambda: _norm("CogVideoXLayerNormZero")(COND, D, elementwise_affine=False, bias=False),
         (("x", (2, 5, D)), ("x", (2, 3, D)), ("cond", (2, COND))), modes=("f32", "bf16", "bf16w_f32x")),
    Case("CogView3PlusAdaLayerNormZeroTextImage", lambda: _norm("CogView3PlusAdaLayerNormZeroTextImage")(COND, D),
         (("x", (2, 5, D)), ("x", (2, 3, D)), ("cond", (2, COND))), lambda m, x, t, c: m(x, t, emb=c),
         ("f32", "bf16", "bf16w_f32x", "f16")),
    Case("LuminaLayerNormContinuous(out_dim)",
         lambda: _norm("LuminaLayerNormContinuous")(D, COND, elementwise_affine=True, eps=1e-6, out_dim=8)),
    Case("LuminaLayerNormContinuous(rms_norm)",
         lambda: _norm("LuminaLayerNormContinuous")(D, COND, elementwise_affine=True, eps=1e-6,
                                                    norm_type="rms_norm", bias=False)),
    Case("MochiLayerNormContinuous", lambda: _mochi("MochiLayerNormContinuous")(D, COND), modes=("f32", "bf16", "f16")),
    Case("GlobalResponseNorm", lambda: _norm("GlobalResponseNorm")(D), (("x", (2, 4, 6, D)),),
         modes=("f32", "bf16", "f32w_bf16x", "f16")),
    Case("GlobalResponseNorm(Stable Cascade)",
         lambda: _cls("diffusers.models.unets.unet_stable_cascade", "GlobalResponseNorm")(D),
         (("x", (2, 4, 6, D)),)),
    Case("LpNorm", lambda: _norm("LpNorm")(), (("x", (2, 5, D)),), modes=("f32", "bf16", "f16")),
    Case("LpNorm(p=1, dim=1)", lambda: _norm("LpNorm")(p=1, dim=1), (("x", (2, 5, D)),)),
]
CASE_BY_ID = {c.id: c for c in CASES}
#: the default run's slice: one class of each new jln module or option, in its bit-exact mode;
#: every class in every mode torch accepts runs with --run-slow
FAST = {
    "AdaLayerNorm(chunk_dim=0)": "bf16", "SD35AdaLayerNormZeroX": "bf16",
    "LuminaRMSNormZero": "bf16", "MochiRMSNormZero": "bf16", "MochiRMSNorm": "bf16",
    "CogVideoXLayerNormZero(no affine, no bias)": "bf16", "MochiLayerNormContinuous": "bf16",
    "GlobalResponseNorm": "f32w_bf16x", "LpNorm": "bf16",
}
SLOW = pytest.mark.slow


def _grid(ids: list[tuple[str, ...]], fast: Callable[..., bool]) -> list[Any]:
    return [pytest.param(*i, marks=() if fast(*i) else (SLOW,)) for i in ids]


def _build(case: Case, mode: str, seed: int = 0) -> tuple[Any, list[Any]]:
    wdt, xdt = MODES[mode]
    m = _randomise(case.make(), seed).to(wdt)
    g = torch.Generator().manual_seed(seed + 1)
    args = []
    for kind, shape in case.shapes:
        t = torch.randn(shape, generator=g)
        args.append((2.0 * t + 0.3).to(xdt) if kind == "x" else t.to(wdt))
    return m, args


def _torch_out(case: Case, m: Any, args: list[Any]) -> tuple[Any, ...]:
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return _tuple(case.call(m, *args))


def _jln_outs(m: Any, args: list[Any]) -> dict[str, tuple[Any, ...]]:
    a = [_jax(t) for t in args]
    lin, variables = from_torch(m)
    return {"linen": _tuple(lin.apply(variables, *a)), "nnx": _tuple(from_torch(m, api="nnx")(*a))}


@pytest.mark.parametrize(("case_id", "mode"), _grid([(c.id, mode) for c in CASES for mode in c.modes],
                                                   lambda i, mode: FAST.get(i) == mode))
def test_forward_parity(case_id: str, mode: str) -> None:
    case = CASE_BY_ID[case_id]
    m, args = _build(case, mode)
    expected = _torch_out(case, m, args)
    outs = _jln_outs(m, args)
    for got in outs.values():
        if mode == "f16":  # float16 as bfloat16: the same rounding steps; the normed outputs
            # bit-exact, a Linear's [B, d] chunks within 1 ulp (torch's float16 addmm rounds
            # one element in 64 differently)
            for a, b in zip(got, expected, strict=True):
                p = parity(a, b)
                normed = a.ndim == args[0].ndim
                assert p["frac_exact"] >= (0.995 if normed else 0.95) and p["max_ulp"] <= 1, p
        else:
            assert_same(got, expected, MODES[mode][1])
    for a, b in zip(outs["linen"], outs["nnx"], strict=True):  # the two faces: one computation
        np.testing.assert_array_equal(to_numpy(a), to_numpy(b))


#: round trips of the default run: one per jln module or layout the classes convert to
ROUND_TRIP = ("SD35AdaLayerNormZeroX", "CogVideoXLayerNormZero(no affine, no bias)", "LuminaLayerNormContinuous(rms_norm)",
              "MochiLayerNormContinuous", "GlobalResponseNorm", "LpNorm", "MochiRMSNorm")


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


GRAD_CASES = ["SD35AdaLayerNormZeroX", "LuminaRMSNormZero", "MochiRMSNormZero", "CogVideoXLayerNormZero",
              "LuminaLayerNormContinuous(out_dim)", "MochiLayerNormContinuous", "AdaLayerNorm(chunk_dim=0)",
              "Qwen2_5_OmniAdaLayerNormZero_Final", "GlobalResponseNorm", "LpNorm(p=1, dim=1)",
              "CogView3PlusAdaLayerNormZeroTextImage"]


@pytest.mark.parametrize("case_id", _grid([(i,) for i in GRAD_CASES], lambda i: i == "MochiRMSNormZero"))
def test_gradients(case_id: str) -> None:
    """d(sum of outputs * cotangents)/d(inputs and parameters) matches torch autograd (float32)."""
    assert_grads_match_torch(CASE_BY_ID[case_id])


def assert_grads_match_torch(case: Case) -> None:
    """The converted linen module's gradients, w.r.t. the inputs and (in torch's layout) the
    parameters, equal torch autograd's for ``case`` in float32."""
    m, args = _build(case, "f32")
    xs = [t.clone().requires_grad_(True) for t in args]
    outs = _tuple(case.call(m, *xs))
    g = torch.Generator().manual_seed(7)
    cots = [torch.randn(o.shape, generator=g) for o in outs]
    params = dict(m.named_parameters())
    want = torch.autograd.grad(sum((o * c).sum() for o, c in zip(outs, cots, strict=True)),
                               xs + list(params.values()))
    lin, variables = from_torch(m)
    cj = [_jax(c) for c in cots]

    def loss(p: Any, *a: Any) -> Any:
        return sum(jnp.sum(o * c) for o, c in zip(_tuple(lin.apply({"params": p}, *a)), cj, strict=True))

    gp, *ga = jax.grad(loss, argnums=tuple(range(len(xs) + 1)))(variables["params"], *[_jax(t) for t in args])
    for gj, gt in zip(ga, want[: len(xs)], strict=True):
        np.testing.assert_allclose(np.asarray(gj), gt.numpy(), rtol=2e-4, atol=2e-4)
    sd = to_torch_state_dict({"params": gp}, lin)  # the parameter gradients in torch's layout
    for (name, _), gt in zip(params.items(), want[len(xs):], strict=True):
        np.testing.assert_allclose(sd[name].numpy(), gt.numpy(), rtol=2e-4, atol=2e-4, err_msg=name)


# --------------------------------------------------------------------------- the functions


def _t(a: Any) -> Any:
    return torch.from_numpy(np.array(a, np.float32)).to(getattr(torch, str(a.dtype)))


def _x(shape: tuple[int, ...], dtype: str, seed: int = 0) -> Any:
    return jnp.asarray(2 * np.random.default_rng(seed).standard_normal(shape) + 0.3, dtype)


def _same(y: Any, t: Any) -> None:
    """Half outputs: bit-exact on >= 99.5% of elements; float32 outputs (half x with float32
    parameters): within a few float32 ulp (XLA may fuse a multiply-add)."""
    if str(y.dtype) == "float32":
        np.testing.assert_allclose(np.asarray(y), t.numpy(), rtol=4e-7, atol=4e-7 * float(t.abs().max()))
    else:
        assert _bits(y, t) >= 0.995


def _bits(a: Any, b: Any) -> float:
    """Fraction of elements equal bit for bit (NaN equal to NaN)."""
    a, b = to_numpy(a).astype(np.float64), to_numpy(b).astype(np.float64)
    return float(np.mean((a == b) | (np.isnan(a) & np.isnan(b))))


@pytest.mark.parametrize(("dtype", "pdt", "modulation"), _grid(
    [(d, p, m) for d, p in (("float32", "float32"), ("bfloat16", "bfloat16"), ("bfloat16", "float32"),
                            ("float16", "float16")) for m in ("rounded", "float32")],
    lambda d, p, m: d == p == "bfloat16"))
def test_adaptive_rms_norm_matches_torch(dtype: str, pdt: str, modulation: str) -> None:
    x = _x((3, 5, 32), dtype)
    emb = _x((3, 4 * 32), dtype, 1) * 0.2
    w = None if modulation == "float32" else 1 + 0.2 * _x((32,), pdt, 2)
    y, chunks = jln.adaptive_rms_norm(x, emb, w, eps=1e-6, modulation=modulation)
    t = adaptive_reference.adaptive_rms_norm(_t(x), _t(emb), None if w is None else _t(w), order=jln.ORDERS["lumina_zero"],
                                     eps=1e-6, modulation=modulation)
    assert str(y.dtype) == str(t.dtype).removeprefix("torch.") and sorted(chunks)[0] == "gate_mlp"
    if dtype == "float32":
        np.testing.assert_allclose(np.asarray(y), t.numpy(), rtol=1e-6, atol=1e-6)
    else:
        _same(y, t)


def test_adaptive_layer_norm_without_shift() -> None:
    """``use=(None, "scale")``: ``LN(x) * (1 + scale)``; bf16 bit-exact with torch's order."""
    x = _x((2, 5, 16), "bfloat16")
    emb = _x((2, 16), "bfloat16", 1) * 0.3
    y, _ = jln.adaptive_layer_norm(x, emb, order="scale_only")
    t = torch.nn.functional.layer_norm(_t(x), (16,)) * (1 + _t(emb)[:, None])
    assert _bits(y, t) >= 0.995
    with pytest.raises(ValueError, match="no shift or scale chunk"):
        jln.adaptive_layer_norm(x, jnp.zeros((2, 16)), order=("gate",))


# --------------------------------------------------------------------------- refusals, checks


def test_refused_configurations() -> None:
    m = _norm("AdaLayerNorm")(8, num_embeddings=10)
    with pytest.raises(ValueError, match="num_embeddings"):
        from_torch(m)
    with pytest.raises(ValueError, match="last axis only"):
        from_torch(_norm("MochiRMSNorm")((4, 8), eps=1e-5))
    with pytest.raises(ValueError, match="positive"):
        from_torch(_norm("LpNorm")(p=0))


def test_function_errors() -> None:
    x = jnp.ones((2, 3, 4, 5))
    with pytest.raises(ValueError, match="channel"):
        jln.global_response_norm(x, spatial_axes=(1, 3))
    with pytest.raises(ValueError, match="`p` must be"):
        jln.lp_normalize(x, p=-1)
    with pytest.raises(ValueError, match="modulation"):
        jln.adaptive_rms_norm(x, jnp.zeros((2, 20)), modulation="bf16")
    with pytest.raises(ValueError, match="num_chunks"):
        jlinen.AdaLNZero(features=5, num_chunks=5).init(jax.random.key(0), x[:, 0], jnp.ones((2, 5)))
    with pytest.raises(ValueError, match="fp32_rms_norm"):
        jnnx.AdaLNScale(4, 8, norm_type="fp32_rms_norm", elementwise_affine=True)
    with pytest.raises(ValueError, match="4 channels"):
        jnnx.GlobalResponseNorm(4)(x)


@SLOW
def test_new_modules_init_as_torch() -> None:
    """AdaLNZero with 9 and 4 chunks starts as the identity on its gates (zero Dense)."""
    x, c = _x((2, 5, 8), "float32"), _x((2, 8), "float32", 1)
    for n in (9, 4):
        outs = jnnx.AdaLNZero(8, 8, num_chunks=n, norm_type="rms_norm" if n == 4 else "layer_norm")(x, c)
        assert len(outs) == {9: 7, 4: 4}[n] and all((o == 0).all() for o in outs[1:] if o.ndim == 2)


# --------------------------------------------------------------------------- AdaLayerNormSingle


def _single(add: bool, dt: Any) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    m = _randomise(_norm("AdaLayerNormSingle")(48, use_additional_conditions=add), 0).to(dt)
    t = torch.tensor([3.0, 999.0, 250.5])
    res, ar = torch.tensor([[1024.0, 1024.0], [512.0, 768.0], [256.0, 256.0]]), torch.tensor([[1.0], [0.66], [1.0]])
    tk = {"added_cond_kwargs": {"resolution": res, "aspect_ratio": ar}} if add else {}
    jk = {"resolution": _jax(res), "aspect_ratio": _jax(ar)} if add else {}
    return m, {"timestep": t, "batch_size": 3, "hidden_dtype": dt, **tk}, {"timestep": _jax(t), **jk,
                                                                           "hidden_dtype": jnp.dtype(str(dt)[6:])}


@pytest.mark.parametrize(("add", "dt"), _grid([(a, d) for a in (False, True) for d in ("float32", "bfloat16")],
                                              lambda a, d: not a and d == "bfloat16"))
def test_ada_layer_norm_single(add: bool, dt: str) -> None:
    """PixArt's adaLN-single: bfloat16 bit-exact; float32 within the sinusoid's float32 error
    (torch's exp, sin and cos differ from XLA's in the last bit: ~3e-5 at t = 999)."""
    m, tk, jk = _single(add, getattr(torch, dt))
    with torch.no_grad():
        want = m(**tk)
    lin, variables = from_torch(m)
    outs = [lin.apply(variables, **jk), from_torch(m, api="nnx")(**jk)]
    for got in outs:
        for a, b in zip(got, want, strict=True):
            if dt == "bfloat16":
                assert_same((a,), (b,), BF16)
            else:
                np.testing.assert_allclose(np.asarray(a), b.numpy(), rtol=0, atol=2e-5 * float(b.abs().max()))
    for a, b in zip(*outs, strict=True):
        np.testing.assert_array_equal(to_numpy(a), to_numpy(b))
    sd = to_torch_state_dict(variables, lin)
    fresh = _norm("AdaLayerNormSingle")(48, use_additional_conditions=add).to(getattr(torch, dt))
    fresh.load_state_dict(sd, strict=True)
    assert all(torch.equal(sd[k], v) for k, v in m.state_dict().items())


@SLOW
def test_ltx2_ada_layer_norm_single_is_recognised_by_its_code() -> None:
    cls = _cls("diffusers.models.transformers.transformer_ltx2", "LTX2AdaLayerNormSingle")
    m = _randomise(cls(48, num_mod_params=2), 0).to(BF16)
    t = torch.tensor([3.0, 999.0])
    with torch.no_grad():
        want = m(t, batch_size=2, hidden_dtype=BF16)
    mod = from_torch(m, api="nnx")
    assert mod.cfg.num_chunks == 2
    assert_same(tuple(mod(_jax(t), hidden_dtype=jnp.bfloat16)), tuple(want), BF16)
    assert sorted(to_torch_state_dict(mod)) == sorted(m.state_dict())


def test_ada_layer_norm_single_checks() -> None:
    m, _, jk = _single(True, F32)
    lin, variables = from_torch(m)
    with pytest.raises(ValueError, match="resolution"):
        lin.apply(variables, jk["timestep"])
    with pytest.raises(ValueError, match="1-D"):
        lin.apply(variables, jk["timestep"][:, None], resolution=jk["resolution"], aspect_ratio=jk["aspect_ratio"])
    with pytest.raises(TypeError, match="added_cond_kwargs"):  # diffusers' second argument is the dict
        lin.apply(variables, jk["timestep"], jk["resolution"], jk["aspect_ratio"])
    with pytest.raises(ValueError, match="multiple of 3"):
        jnnx.AdaLNSingle(8, use_additional_conditions=True, rngs=jax_rngs())
    m.emb.time_proj.flip_sin_to_cos = False
    with pytest.raises(ValueError, match="PixArt"):
        from_torch(m)


def jax_rngs() -> Any:
    from flax import nnx

    return nnx.Rngs(0)


@pytest.mark.parametrize("convention", ["deberta", "eager"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_adaptive_layer_norm_takes_the_layer_norm_conventions(convention: str, dtype: str) -> None:
    # the norm rounded op by op as the convention says, its affine, then the modulation: torch's
    # reference of the same flow (it took no convention= before)
    x = _x((3, 5, 32), dtype)
    emb = _x((3, 64), dtype, seed=1) * 0.3
    w, b = 1 + 0.1 * _x((32,), dtype, seed=2), 0.1 * _x((32,), dtype, seed=3)
    y, _ = jln.adaptive_layer_norm(x, emb, w, b, order="seed", convention=convention)
    t = adaptive_reference.adaptive_layer_norm(_t(x), _t(emb), _t(w), _t(b), order=jln.ORDERS["seed"],
                                               convention=convention)
    assert str(y.dtype) == str(t.dtype).removeprefix("torch.")
    if dtype == "float32":
        np.testing.assert_allclose(np.asarray(y), t.numpy(), rtol=0, atol=2e-6 * float(t.abs().max()))
    else:
        assert _bits(y, t) >= 0.999


def test_a_wrong_width_is_named_in_the_modules_terms() -> None:
    # AdaLNZero(features=32) on 64-wide x named jln.adaptive_layer_norm and a chunk shape the
    # user never passed; the module now says its own name, features and x's shape
    from flax import nnx

    x, c = jnp.ones((2, 5, 64)), jnp.ones((2, 8))
    with pytest.raises(ValueError, match=r"^jln\.linen\.AdaLNZero: the module was built for features=32 .* "
                                         r"x\.shape=\(2, 5, 64\), which has 64 there"):
        jlinen.AdaLNZero(features=32).init(jax.random.key(0), x, c)
    with pytest.raises(ValueError, match=r"^jln\.nnx\.AdaLNZero: the module was built for features=32"):
        jnnx.AdaLNZero(8, 32)(x, c)
    with pytest.raises(ValueError, match=r"^jln\.nnx\.AdaGroupNorm: the module was built for features=16 at axis 1"):
        jnnx.AdaGroupNorm(8, 16, num_groups=4, rngs=nnx.Rngs(0))(jnp.ones((2, 8, 3, 3)), c)
