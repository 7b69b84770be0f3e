"""jln.affine, jln.{linen,nnx}.Affine / Standardize and their converters against torch (2.13,
CPU) and float64 NumPy.

Expected values: torch evaluating ``((x - c) * s) + b`` op by op on the same values (as
MobileBERT's ``NoNorm`` and Phi-4-multimodal's ``MeanVarianceNormLayer`` write it), and those
transformers classes themselves (as installed); float64 NumPy for the independent reference.
The bit-exact fractions asserted are the ones measured on these inputs (torch 2.13 CPU, XLA CPU).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import jln
from jln import linen as jnn
from jln import nnx as jnnx

torch = pytest.importorskip("torch")

_TDT = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16, "float16": torch.float16}
D = 80


def _inputs(shape=(4, 7, D), seed=0):
    rng = np.random.default_rng(seed)
    x = (3 * rng.standard_normal(shape) + 0.3).astype(np.float32)
    feat = shape[-1:]
    c = (0.5 * rng.standard_normal(feat)).astype(np.float32)
    s = (1 + 0.3 * rng.standard_normal(feat)).astype(np.float32)
    b = (0.3 * rng.standard_normal(feat)).astype(np.float32)
    return x, c, s, b


def _j(v, dtype):
    return jnp.asarray(v).astype(dtype)


def _t(v, dtype):
    """The same values as ``_j(v, dtype)``, as a torch tensor."""
    wide = _j(v, dtype).astype(jnp.float32 if dtype != "float64" else jnp.float64)
    return torch.from_numpy(np.array(wide)).to(_TDT[dtype])


def _np(y):
    return np.asarray(y.astype(jnp.float64) if y.dtype == jnp.float64 else y.astype(jnp.float32), np.float64)


def _tnp(t):
    return t.detach().to(torch.float64).numpy()


def _rel(y, ref):
    """The largest error relative to the largest value (float32's fused multiply-add is exact
    where torch rounds the product first: the difference is an ulp of the product, which
    dominates where ``x * s`` and ``b`` cancel)."""
    return float(np.abs(y - ref).max() / max(np.abs(ref).max(), 1e-30))


def _torch_affine(x, c=None, s=None, b=None):
    """torch's own evaluation, op by op, in the order jln.affine documents."""
    h = x
    if c is not None:
        h = h - c
    if s is not None:
        h = h * s
    if b is not None:
        h = h + b
    return h


# --------------------------------------------------------------------------- forward vs torch

#: which of center, scale, bias each case passes
OPERANDS = [("c", "s", "b"), ("s", "b"), ("c", "s"), ("s",), ("b",), ("c",)]
#: (x dtype, operand dtype)
DTYPES = [("float32", "float32"), ("bfloat16", "bfloat16"), ("float16", "float16"),
          ("bfloat16", "float32"), ("float32", "bfloat16"), ("bfloat16", "float16"), ("float64", "float64")]


def _call(which, x, c, s, b):
    return jln.affine(x, s if "s" in which else None, b if "b" in which else None,
                      center=c if "c" in which else None)


@pytest.mark.parametrize("which", OPERANDS, ids="".join)
@pytest.mark.parametrize(("xdt", "pdt"), DTYPES)
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_matches_torch(which, xdt, pdt, jit):
    with jax.enable_x64(xdt == "float64"):
        _matches_torch(which, xdt, pdt, jit)


def _matches_torch(which, xdt, pdt, jit):
    x, c, s, b = _inputs()
    args = (_j(x, xdt), _j(c, pdt), _j(s, pdt), _j(b, pdt))
    f = jax.jit(_call, static_argnums=0) if jit else _call
    y = f(which, *args)
    tx, tc, ts, tb = _t(x, xdt), _t(c, pdt), _t(s, pdt), _t(b, pdt)
    ref = _torch_affine(tx, tc if "c" in which else None, ts if "s" in which else None, tb if "b" in which else None)
    assert str(y.dtype) == str(ref.dtype).removeprefix("torch."), (y.dtype, ref.dtype)
    if y.dtype in (jnp.bfloat16, jnp.float16):
        np.testing.assert_array_equal(_np(y), _tnp(ref))  # bit for bit (measured: every element)
    else:  # float32/64: XLA may fuse x * s + b into one multiply-add where torch rounds twice
        # (measured float32: 1e-7 on 256x1024, every difference the fused multiply-add's)
        assert _rel(_np(y), _tnp(ref)) <= (1e-6 if y.dtype == jnp.float32 else 1e-15)


def test_float64_against_numpy():
    with jax.enable_x64(True):
        x, c, s, b = (v.astype(np.float64) for v in _inputs())
        y = jln.affine(jnp.asarray(x), jnp.asarray(s), jnp.asarray(b), center=jnp.asarray(c))
        assert y.dtype == jnp.float64
        np.testing.assert_allclose(np.asarray(y), (x - c) * s + b, rtol=1e-15, atol=1e-15)


@pytest.mark.parametrize(("xdt", "pdt", "out"), [("bfloat16", "float32", "float32"),
                                                 ("float16", "float32", "float32"),
                                                 ("float32", "bfloat16", "float32"),
                                                 ("bfloat16", "float16", "float32"),
                                                 ("bfloat16", "bfloat16", "bfloat16")])
def test_promotion_is_torchs(xdt, pdt, out):
    x, c, s, b = _inputs((2, 8))
    for kw in ({"scale": _j(s, pdt)}, {"bias": _j(b, pdt)}, {"center": _j(c, pdt)}):
        assert jln.affine(_j(x, xdt), **kw).dtype == jnp.dtype(out), kw
        t = {"scale": "s", "bias": "b", "center": "c"}
        args = {k: None for k in "csb"}
        args[t[next(iter(kw))]] = _t(next(iter(kw.values())), pdt)
        assert str(_torch_affine(_t(x, xdt), **args).dtype) == f"torch.{out}"
    # only x: its own dtype
    assert jln.affine(_j(x, "bfloat16")).dtype == jnp.bfloat16


def test_each_op_is_rounded_where_torch_rounds():
    """One rounding at the end instead of one per op misses torch's bfloat16 on many elements:
    the per-op roundings (kept under jit) are what makes jln bit-exact."""
    x, c, s, b = _inputs((64, D))
    xb, cb, sb, bb = (_j(v, "bfloat16") for v in (x, c, s, b))
    ref = _tnp(_torch_affine(*(_t(v, "bfloat16") for v in (x, c, s, b))))
    f64 = [_np(v) for v in (xb, cb, sb, bb)]
    once = ((f64[0] - f64[1]) * f64[2] + f64[3]).astype(np.float32)  # one rounding (to float32, then bf16)
    assert (_np(jnp.asarray(once).astype(jnp.bfloat16)) != ref).mean() > 0.05  # measured ~0.2
    y = jax.jit(lambda *a: jln.affine(a[0], a[2], a[3], center=a[1]))(xb, cb, sb, bb)
    np.testing.assert_array_equal(_np(y), ref)


def test_jit_rounds_a_fused_producer():
    """Under jit, XLA may fuse ``x + r`` into the affine and keep it unrounded; torch rounds it."""
    x, c, s, b = _inputs()
    r = _inputs(seed=1)[0]
    xb, rb, sb, bb = (_j(v, "bfloat16") for v in (x, r, s, b))
    y = jax.jit(lambda x, r, s, b: jln.affine(x + r, s, b))(xb, rb, sb, bb)
    ref = _torch_affine(_t(x, "bfloat16") + _t(r, "bfloat16"), None, _t(s, "bfloat16"), _t(b, "bfloat16"))
    np.testing.assert_array_equal(_np(y), _tnp(ref))


def test_two_axes_and_vmap():
    x, *_ = _inputs((3, 4, 6))
    rng = np.random.default_rng(2)
    s, b, c = (rng.standard_normal((4, 6)).astype(np.float32) for _ in range(3))
    y = jln.affine(jnp.asarray(x), jnp.asarray(s), jnp.asarray(b), center=jnp.asarray(c), axis=(-2, -1))
    np.testing.assert_allclose(np.asarray(y), (x - c) * s + b, rtol=1e-6, atol=1e-6)
    # the features on axis 1 of an NCT input (axis=1)
    z = jln.affine(jnp.asarray(x), jnp.asarray(s[:, 0]), axis=1)
    np.testing.assert_allclose(np.asarray(z), x * s[:, 0][None, :, None], rtol=1e-6)
    v = jax.vmap(lambda r: jln.affine(r, jnp.asarray(s), center=jnp.asarray(c), axis=(-2, -1)))(jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(v), (x - c) * s, rtol=1e-6, atol=1e-6)


def test_gradients_match_torch_autograd():
    x, c, s, b = _inputs((3, 5, 16))
    ct = np.random.default_rng(3).standard_normal(x.shape).astype(np.float32)
    g = jax.grad(lambda x, c, s, b: jnp.sum(jln.affine(x, s, b, center=c) * ct), argnums=(0, 1, 2, 3))(
        *(jnp.asarray(v) for v in (x, c, s, b)))
    leaves = [torch.tensor(v, requires_grad=True) for v in (x, c, s, b)]
    (_torch_affine(*leaves) * torch.from_numpy(ct)).sum().backward()
    for name, mine, theirs in zip("xcsb", g, leaves, strict=True):
        np.testing.assert_allclose(np.asarray(mine), theirs.grad.numpy(), rtol=1e-5, atol=1e-5, err_msg=name)


# --------------------------------------------------------------------------- modules and interop


def _nonorm(dim=64):
    mod = pytest.importorskip("transformers.models.mobilebert.modeling_mobilebert")
    m = mod.NoNorm(dim)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        m.weight.copy_(1 + 0.3 * torch.randn(dim, generator=g))
        m.bias.copy_(0.3 * torch.randn(dim, generator=g))
    return m


def _phi4(dim=80, seed=0):
    mod = pytest.importorskip("transformers.models.phi4_multimodal.modeling_phi4_multimodal")
    from transformers import Phi4MultimodalAudioConfig

    m = mod.Phi4MultimodalAudioMeanVarianceNormLayer(Phi4MultimodalAudioConfig(input_size=dim))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        m.global_mean.copy_(0.5 * torch.randn(dim, generator=g))
        m.global_invstd.copy_(0.5 + torch.rand(dim, generator=g))
    return m


#: (module dtype, x dtype): float32; bfloat16 throughout; a float32 module on bfloat16 input
MIXES = [(torch.float32, torch.float32), (torch.bfloat16, torch.bfloat16), (torch.float32, torch.bfloat16)]


@pytest.mark.parametrize(("make", "cls", "dim"), [(_nonorm, "Affine", 64), (_phi4, "Standardize", 80)],
                         ids=["NoNorm", "Phi4MeanVarianceNorm"])
@pytest.mark.parametrize(("wdt", "xdt"), MIXES, ids=["f32", "bf16", "f32-on-bf16"])
@pytest.mark.parametrize("api", ["linen", "nnx"])
def test_from_torch_matches_transformers(make, cls, dim, wdt, xdt, api):
    from jln.interop import from_torch

    m = make(dim).to(wdt)
    xt = (3 * torch.randn(4, 9, dim, generator=torch.Generator().manual_seed(1))).to(xdt)
    with torch.no_grad():
        ref = m(xt)
    x = jnp.asarray(xt.float().numpy()).astype(str(xdt).removeprefix("torch."))
    if api == "linen":
        lin, variables = from_torch(m)
        assert type(lin) is getattr(jnn, cls)
        y = lin.apply(variables, x)
    else:
        nm = from_torch(m, api="nnx")
        assert type(nm) is getattr(jnnx, cls)
        y = nm(x)
    assert str(y.dtype) == str(ref.dtype).removeprefix("torch.")
    if ref.dtype == torch.bfloat16:
        np.testing.assert_array_equal(_np(y), _tnp(ref))  # measured: every element
    else:
        assert _rel(_np(y), _tnp(ref)) <= 1e-6


def test_standardize_holds_buffers_as_state():
    from jln.interop import from_torch

    m = _phi4()
    lin, variables = from_torch(m)
    assert variables["params"] == {} and sorted(variables["batch_stats"]) == ["inv_std", "mean"]
    np.testing.assert_array_equal(np.asarray(variables["batch_stats"]["mean"]), m.global_mean.numpy())
    x = jnp.asarray(np.random.default_rng(0).standard_normal((2, 80)), jnp.float32)
    # a training-style call changes nothing
    y, upd = lin.apply(variables, x, mutable=["batch_stats"])
    np.testing.assert_array_equal(np.asarray(upd["batch_stats"]["inv_std"]), m.global_invstd.numpy())
    nm = from_torch(m, api="nnx")
    assert not nnx.state(nm, nnx.Param) and set(nnx.to_pure_dict(nnx.state(nm, nnx.BatchStat))) == {"mean", "inv_std"}
    np.testing.assert_array_equal(np.asarray(nm(x)), np.asarray(y))


@pytest.mark.parametrize(("make", "cls", "names"), [(_nonorm, "Affine", {"weight", "bias"}),
                                                    (_phi4, "Standardize", {"global_mean", "global_invstd"})],
                         ids=["NoNorm", "Phi4MeanVarianceNorm"])
@pytest.mark.parametrize("wdt", [torch.float32, torch.bfloat16])
def test_to_torch_state_dict_round_trip(make, cls, names, wdt):
    from jln.interop import from_torch, to_torch_state_dict

    m = make().to(wdt)
    lin, variables = from_torch(m)
    for sd in (to_torch_state_dict(variables, lin), to_torch_state_dict(from_torch(m, api="nnx"))):
        assert set(sd) == names
        fresh = make().to(wdt)
        with torch.no_grad():
            for t in fresh.state_dict().values():
                t.zero_()
        fresh.load_state_dict(sd, strict=True)
        for k, v in m.state_dict().items():
            assert fresh.state_dict()[k].dtype == v.dtype and torch.equal(fresh.state_dict()[k], v), k
    # and from NNX modules built in jln: the identity
    fresh = make()
    n = next(iter(fresh.state_dict().values())).shape[0]
    fresh.load_state_dict(to_torch_state_dict(getattr(jnnx, cls)(n)), strict=True)
    x = torch.randn(2, n)
    assert torch.equal(fresh(x), x)


def test_linen_and_nnx_agree():
    x = jnp.asarray(_inputs((2, 3, 12))[0])
    for kw in ({}, {"use_bias": False}, {"use_scale": False}, {"dtype": jnp.bfloat16},
               {"param_dtype": jnp.bfloat16}, {"scale_init": jax.nn.initializers.constant(2.0)}):
        lin = jnn.Affine(**kw)
        variables = lin.init(jax.random.key(0), x)
        nm = jnnx.Affine(12, **kw, rngs=nnx.Rngs(0))
        params = variables["params"]
        assert sorted(params) == sorted(k for k in ("scale", "bias") if getattr(nm, k) is not None), kw
        for k, v in params.items():
            np.testing.assert_array_equal(np.asarray(getattr(nm, k)[...]), np.asarray(v))
        y = lin.apply(variables, x)
        np.testing.assert_array_equal(_np(y), _np(nm(x)))
        assert y.dtype == nm(x).dtype
    for kw in ({}, {"dtype": jnp.bfloat16}, {"param_dtype": jnp.bfloat16}):
        lin = jnn.Standardize(**kw)
        variables = lin.init(jax.random.key(0), x)
        assert "params" not in variables or not variables["params"]
        nm = jnnx.Standardize(12, **kw)
        np.testing.assert_array_equal(np.asarray(nm.inv_std[...]), np.asarray(variables["batch_stats"]["inv_std"]))
        y = lin.apply(variables, x)
        np.testing.assert_array_equal(_np(y), _np(nm(x)))
        assert y.dtype == nm(x).dtype == (kw.get("dtype") or jnp.float32)
    assert jnn.Affine(dtype=jnp.bfloat16).apply(jnn.Affine().init(jax.random.key(0), x), x).dtype == jnp.bfloat16


# --------------------------------------------------------------------------- errors


def _re(words):
    return words.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")


@pytest.mark.parametrize(
    ("call", "exc", "words"),
    [
        (lambda: jln.affine(jnp.ones((2, 4)), jnp.ones(3)), ValueError, "`scale` must have shape (4,)"),
        (lambda: jln.affine(jnp.ones((2, 4)), None, jnp.ones(5)), ValueError, "`bias` must have shape (4,)"),
        (lambda: jln.affine(jnp.ones((2, 4)), center=jnp.ones((2, 4))), ValueError, "`center` must have shape (4,)"),
        (lambda: jln.affine(jnp.ones((2, 4), jnp.int32), jnp.ones(4)), TypeError, "`x` must have a floating dtype"),
        (lambda: jln.affine(jnp.ones((2, 4)), jnp.ones(4, jnp.int32)), TypeError, "`scale` must have a floating dtype"),
        (lambda: jln.affine(jnp.ones((2, 4)), center=jnp.ones(4, jnp.int32)), TypeError,
         "`center` must have a floating dtype"),
        (lambda: jln.affine(jnp.ones((2, 4)), 2.0), TypeError, "`scale` must be an array"),
        (lambda: jln.affine(torch.ones(2, 4)), TypeError, "is a torch.Tensor"),
        (lambda: jln.affine(jnp.ones((2, 4)), axis=2), ValueError, "out of range"),
        (lambda: jnnx.Affine(4)(jnp.ones((2, 5))), ValueError, "num_features=(4,)"),
        (lambda: jnnx.Standardize(4)(jnp.ones((2, 5))), ValueError, "num_features=(4,)"),
        (lambda: jnnx.Affine(4, scale_init=1.0), TypeError, "`scale_init` must be an initializer"),
        (lambda: jnnx.Standardize(4, dtype=jnp.int32), TypeError, "`dtype` must be a floating dtype"),
        (lambda: jnnx.Affine(4, epsilon=1e-5), TypeError, "Affine has no such option"),
    ],
)
def test_bad_input(call, exc, words):
    with pytest.raises(exc, match=_re(words)):
        call()


def test_converter_refuses_mixed_dtypes():
    from jln.interop import from_torch

    m = _nonorm(8)
    m.bias.data = m.bias.data.to(torch.bfloat16)
    with pytest.raises(ValueError, match="different dtypes"):
        from_torch(m)
