"""Per-head LayerNorm parameters: ``layer_norm(..., param_axes=...)`` and the LayerNorm module's
``param_axes``, and the transformers classes that convert onto them (StableLM's
``StableLmLayerNormPerHead``, Chameleon's ``ChameleonLayerNorm``, Cohere's per-head QK-norm).

Every expected value is torch's own output (torch 2.13 CPU, transformers as installed) from
random weights and inputs, or a float64 NumPy reference: float32 within 1e-5 of torch, bfloat16
and float16 bit-exact on >= 99.9% of elements and within 1 ulp, gradients within 1e-4. One case
of each check runs by default; the other classes and dtypes with --run-slow.
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

from jln.interop import from_torch, to_torch_state_dict  # noqa: E402
from tests.test_interop import _hf, _jax, parity  # noqa: E402

H, HD = 4, 32
_T = "transformers.models"
F32, BF16, F16 = torch.float32, torch.bfloat16, torch.float16
#: mode -> (weight dtype, input dtype)
MODES = {"f32": (F32, F32), "bf16": (BF16, BF16), "f16": (F16, F16), "f32w_bf16x": (F32, BF16)}


@dataclass(frozen=True)
class Case:
    id: str
    make: Callable[[], Any]
    options: dict[str, Any]  # what the converted module's config must say
    x_shape: tuple[int, ...]
    default: tuple[str, ...] = ()  # the modes run without --run-slow


def _stablelm(bias: bool) -> Callable[[], Any]:
    return lambda: _hf(f"{_T}.stablelm.modeling_stablelm", "StableLmLayerNormPerHead")(HD, H, eps=1e-5, bias=bias)


def _chameleon() -> Any:
    return _hf(f"{_T}.chameleon.modeling_chameleon", "ChameleonLayerNorm")((H, HD))


CASES = [
    Case("StableLmLayerNormPerHead", _stablelm(False),
         {"param_axes": (1, -1), "convention": "torch", "use_bias": False}, (2, H, 7, HD)),
    Case("StableLmLayerNormPerHead-bias", _stablelm(True),
         {"param_axes": (1, -1), "convention": "torch", "use_bias": True}, (2, H, 7, HD)),
    Case("ChameleonLayerNorm", _chameleon, {"param_axes": (-2, -1), "convention": "deberta", "eps": 1e-5},
         (2, 7, H, HD), default=("f32w_bf16x",)),
    Case("CohereLayerNorm-per-head", lambda: _hf(f"{_T}.cohere.modeling_cohere", "CohereLayerNorm")((H, HD)),
         {"param_axes": (-2, -1), "convention": "torch", "use_bias": False}, (2, 7, H, HD)),
]
BY_ID = {c.id: c for c in CASES}


def _build(case: Case, mode: str, seed: int = 0) -> tuple[Any, Any]:
    wdt, xdt = MODES[mode]
    m = case.make()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in m.named_parameters():
            r = torch.randn(p.shape, generator=g)
            p.copy_(1.0 + 0.5 * r if name.endswith("weight") else 0.5 * r)
    x = (2.0 * torch.randn(case.x_shape, generator=g) + 0.3).to(xdt)
    return m.eval().to(wdt), x


def _torch(m: Any, x: Any) -> Any:
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return m(x)


def _assert_matches(y: Any, ref: Any, x_dtype: Any) -> dict[str, float]:
    p = parity(y, ref)  # same dtype and shape
    if x_dtype in (BF16, F16):
        # half precision, or a float32 result of a row rounded to bfloat16 inside (Chameleon with
        # float32 parameters: torch's two float32 ops, which jln keeps apart): bit-exact but where
        # torch's and jln's float32 statistics round a value to neighbouring half-precision numbers
        assert p["frac_exact"] >= 0.999 and p["rel"] <= 2.0**-7, p
        if ref.dtype in (BF16, F16):
            assert p["max_ulp"] <= 1, p
    else:
        assert p["max_abs"] <= 1e-5 * max(1.0, p["ref_max"]), p
    return p


def _forward_params() -> list[Any]:
    return [
        pytest.param(c.id, mode, marks=() if mode in c.default else (pytest.mark.slow,), id=f"{c.id}-{mode}")
        for c in CASES for mode in MODES
    ]


@pytest.mark.parametrize(("case_id", "mode"), _forward_params())
def test_converted_per_head_norm_matches_torch(case_id: str, mode: str) -> None:
    case = BY_ID[case_id]
    m, x = _build(case, mode)
    lin, variables = from_torch(m)
    assert {k: getattr(lin.cfg, k) for k in case.options} == case.options
    ref = _torch(m, x)
    y = lin.apply(variables, _jax(x))
    _assert_matches(y, ref, x.dtype)
    n = from_torch(m, api="nnx")
    np.testing.assert_array_equal(np.asarray(n(_jax(x)), np.float32), np.asarray(y, np.float32))


@pytest.mark.slow  # (test_param_axes_matches_float64_and_torch checks a gradient by default)
@pytest.mark.parametrize("case_id", [c.id for c in CASES])
def test_converted_per_head_norm_gradients_match_torch(case_id: str) -> None:
    case = BY_ID[case_id]
    m, x = _build(case, "f32", seed=2)
    lin, variables = from_torch(m)
    ct = torch.randn(x.shape, generator=torch.Generator().manual_seed(5))
    xt = x.clone().requires_grad_(True)
    (m(xt) * ct).sum().backward()

    def loss(params: Any, a: Any) -> Any:
        return jnp.sum(lin.apply({"params": params}, a) * _jax(ct))

    g_params, g_x = jax.grad(loss, argnums=(0, 1))(variables["params"], _jax(x))
    np.testing.assert_allclose(np.asarray(g_x), xt.grad.numpy(), rtol=1e-4, atol=1e-4)
    # torch's per-parameter gradients, laid out as jln's (StableLM's per-head rows stacked)
    grads = {k: p.grad for k, p in m.named_parameters()}
    for jname, tname in (("scale", "weight"), ("bias", "bias")):
        rows = [grads[k] for k in sorted(grads) if k.endswith(tname)]
        if not rows:
            assert jname not in g_params
            continue
        want = rows[0] if len(rows) == 1 else torch.stack([grads[f"norms.{i}.{tname}"] for i in range(H)])
        np.testing.assert_allclose(np.asarray(g_params[jname]), want.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("case_id", [
    "StableLmLayerNormPerHead-bias", "ChameleonLayerNorm",
    *(pytest.param(c, marks=pytest.mark.slow) for c in ("StableLmLayerNormPerHead", "CohereLayerNorm-per-head")),
])
def test_state_dict_round_trip_loads_strictly(case_id: str) -> None:
    case = BY_ID[case_id]
    m, _ = _build(case, "bf16", seed=3)
    want = {k: v.clone() for k, v in m.state_dict().items()}
    lin, variables = from_torch(m)
    for sd in (to_torch_state_dict(variables, lin), to_torch_state_dict(from_torch(m, api="nnx"))):
        assert sorted(sd) == sorted(want)
        for k, v in sd.items():
            assert v.dtype == want[k].dtype and v.shape == want[k].shape, k
            assert torch.equal(v, want[k]), k
        fresh = case.make().to(BF16)
        fresh.load_state_dict(sd, strict=True)
    if case_id.startswith("StableLm"):
        assert "norms.3.weight" in sd and tuple(sd["norms.3.weight"].shape) == (HD,)


@pytest.mark.slow
@pytest.mark.parametrize(("case_id", "old"), [
    ("ChameleonLayerNorm", {"convention": "torch"}),
    ("StableLmLayerNormPerHead-bias", {"convention": "deberta"}),
])
def test_the_other_convention_misses(case_id: str, old: dict[str, Any]) -> None:
    # the checks above can fail: the other rounding differs from torch in bfloat16
    case = BY_ID[case_id]
    m, x = _build(case, "bf16")
    lin, variables = from_torch(m)
    p = parity(lin.clone(**old).apply(variables, _jax(x)), _torch(m, x))
    assert p["frac_exact"] < 0.98, p


# --------------------------------------------------------------------------- the function


def _ref64(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    """One LayerNorm per head in float64: x [B, H, S, D], w and b [H, D]."""
    x = x.astype(np.float64)
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * w[:, None].astype(np.float64) + b[:, None].astype(np.float64)


def test_param_axes_matches_float64_and_torch() -> None:
    rng = np.random.default_rng(0)
    x = (3 * rng.standard_normal((2, 3, 5, 16)) + 1).astype(np.float32)
    w, b = (1 + 0.5 * rng.standard_normal((3, 16))).astype(np.float32), rng.standard_normal((3, 16)).astype(np.float32)
    y, back = jax.vjp(lambda *a: jln.layer_norm(*a, param_axes=(1, -1)), *map(jnp.asarray, (x, w, b)))
    np.testing.assert_allclose(np.asarray(y), _ref64(x, w, b), rtol=0, atol=2e-6)
    # gradients of every input against torch's autograd through F.layer_norm and the broadcast affine
    ct = rng.standard_normal(x.shape).astype(np.float32)
    xt, wt, bt = (torch.from_numpy(a.copy()).requires_grad_(True) for a in (x, w, b))
    ((torch.nn.functional.layer_norm(xt, (16,)) * wt[:, None] + bt[:, None]) * torch.from_numpy(ct)).sum().backward()
    grads = back(jnp.asarray(ct))
    for g, t in zip(grads, (xt, wt, bt), strict=True):
        np.testing.assert_allclose(np.asarray(g), t.grad.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_param_axes_modules_linen_and_nnx_agree_with_the_function() -> None:
    rng = np.random.default_rng(0)
    x = jnp.asarray(3 * rng.standard_normal((2, 3, 5, 16)) + 1, jnp.float32)
    w, b = jnp.asarray(1 + 0.5 * rng.standard_normal((3, 16)), jnp.float32), jnp.asarray(rng.standard_normal((3, 16)), jnp.float32)
    y = jln.layer_norm(x, w, b, param_axes=(1, -1))
    # linen infers (heads, head_dim) from x, NNX is given it
    m = jnn.LayerNorm(param_axes=(1, 3))
    variables = m.init(jax.random.key(0), x)
    assert jax.tree.map(jnp.shape, variables["params"]) == {"scale": (3, 16), "bias": (3, 16)}
    params = {"params": {"scale": w, "bias": b}}
    n = jnnx.LayerNorm((3, 16), param_axes=[1, -1])
    n.scale[...], n.bias[...] = w, b
    for out in (m.apply(params, x), n(x)):
        np.testing.assert_array_equal(np.asarray(out), np.asarray(y))
    # param_axes equal to the normalized axes is today's layout
    np.testing.assert_array_equal(np.asarray(jln.layer_norm(x, w[0], param_axes=-1)), np.asarray(jln.layer_norm(x, w[0])))


def test_param_axes_bad_input_says_what_is_expected() -> None:
    x, w = jnp.ones((2, 3, 5, 8)), jnp.ones((3, 8))
    with pytest.raises(ValueError, match=r"`param_axes` must contain every normalized axis .* received "
                                         r"param_axes=\(1,\), .* without the normalized \[3\]\. Add them, e\.g\. "
                                         r"param_axes=\(1, 3\)"):
        jln.layer_norm(x, jnp.ones(3), axis=-1, param_axes=(1,))
    with pytest.raises(ValueError, match=r"axis 4 is out of range .* received param_axes=\(1, 4\)"):
        jln.layer_norm(x, w, param_axes=(1, 4))
    with pytest.raises(ValueError, match=r"`param_axes` repeats an axis"):
        jln.layer_norm(x, w, param_axes=(1, 1, 3))
    with pytest.raises(TypeError, match=r"`param_axes` must be an int or a tuple of ints; received 'heads'"):
        jln.layer_norm(x, w, param_axes="heads")
    with pytest.raises(ValueError, match=r"`scale` must have shape \(3, 8\), x's sizes along param_axes=\(1, 3\); "
                                         r"received scale.shape=\(8,\)"):
        jln.layer_norm(x, jnp.ones(8), param_axes=(1, -1))
    with pytest.raises(ValueError, match=r"pass param_axes=\(-2, -1\)"):  # a per-head weight without param_axes
        jln.layer_norm(jnp.ones((2, 5, 3, 8)), w)
    for impl in ("pallas", "native"):
        with pytest.raises(ValueError, match=rf"impl='{impl}' is not available here: parameters laid out over "
                                             rf"axes \(1, 3\) \(param_axes\).* only the XLA path broadcasts them\. "
                                             rf"Use impl='xla' or 'auto'"):
            jln.layer_norm(x, w, param_axes=(1, -1), impl=impl)
    with pytest.raises(TypeError, match=r"jln LayerNorm: `param_axes` must be None, an int or a non-empty tuple "
                                        r"of ints .* received 1\.5"):
        jnnx.LayerNorm((3, 8), param_axes=1.5)
    with pytest.raises(ValueError, match=r"built for num_features=\(3, 8\) at param_axes=\(1, -1\); received "
                                         r"x\.shape=\(2, 4, 5, 8\), which has \(4, 8\) there"):
        jnnx.LayerNorm((3, 8), param_axes=(1, -1))(jnp.ones((2, 4, 5, 8)))
    with pytest.raises(TypeError, match=r"got flax's argument 'feature_axes': jln calls it param_axes="):
        jnn.LayerNorm(feature_axes=(1, -1))
