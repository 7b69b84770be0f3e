"""jln.flax against flax itself: the same parameters, keys, dtypes and (within rounding) values.

Expected values come from flax's own classes (parameter trees, RNG draws, result dtypes,
checkpoints) and from a float64 two-pass reference (outputs). flax's own modules are run
under "standard" dtype promotion (they promote bfloat16 with float32 implicitly).
"""

from __future__ import annotations

import os

import flax.linen as fnn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx as fnnx

from jln.flax import linen as jnn
from jln.flax import nnx as jnx

from . import _residuals

standard = jax.numpy_dtype_promotion("standard")


@pytest.fixture(autouse=True)
def _xla_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The XLA path (no native CPU build) except in tests that ask for the kernels."""
    if not request.node.name.startswith("test_kernels_path"):
        monkeypatch.setenv("JLN_NATIVE", "0")

SHAPE = (2, 3, 4, 6)

# one entry per option set: (kwargs, centered only). Axes are of a rank-4 input.
OPTIONS: list[tuple[dict, bool]] = [
    ({}, False),
    ({"epsilon": 1e-2}, False),
    ({"use_scale": False}, False),
    ({"use_bias": False}, True),
    ({"use_bias": False, "use_scale": False}, True),
    ({"use_fast_variance": False}, False),
    ({"reduction_axes": (1, 2, 3), "feature_axes": -1}, False),
    ({"reduction_axes": (1, 2), "feature_axes": -1}, False),
    ({"reduction_axes": -1, "feature_axes": (-2, -1)}, False),
    ({"reduction_axes": (-2, -1), "feature_axes": (-2, -1)}, False),
    ({"dtype": jnp.bfloat16}, False),
    ({"dtype": jnp.float32, "param_dtype": jnp.bfloat16}, False),
    ({"param_dtype": jnp.bfloat16}, False),
    ({"param_dtype": jnp.float16}, False),
    ({"scale_init": jax.nn.initializers.normal(0.5)}, False),
    ({"bias_init": jax.nn.initializers.normal(0.5)}, True),
]
CASES = [
    pytest.param(kind, kw, id=f"{kind}-" + ",".join(f"{k}={getattr(v, '__name__', v)}" for k, v in kw.items()))
    for kind in ("LayerNorm", "RMSNorm")
    for kw, centered_only in OPTIONS
    if kind == "LayerNorm" or not centered_only
]
X_DTYPES = ["float32", "bfloat16"]


def _x(dtype: str, offset: float = 0.0, seed: int = 0, shape: tuple[int, ...] = SHAPE) -> jax.Array:
    x = offset + 2.0 * jax.random.normal(jax.random.key(seed), shape, jnp.float32)
    return x.astype(dtype)


def _reference(x, scale, bias, kw: dict, centered: bool) -> np.ndarray:
    """float64 two-pass LayerNorm/RMSNorm with flax's axes and parameter layout."""
    x64 = np.asarray(x, np.float64)
    rank = x64.ndim
    raxes = kw.get("reduction_axes", -1)
    raxes = tuple(sorted({a % rank for a in ((raxes,) if isinstance(raxes, int) else raxes)}))
    faxes = kw.get("feature_axes", -1)
    faxes = tuple(sorted({a % rank for a in ((faxes,) if isinstance(faxes, int) else faxes)}))
    fshape = tuple(n if i in faxes else 1 for i, n in enumerate(x64.shape))
    mean = x64.mean(raxes, keepdims=True) if centered else 0.0
    var = ((x64 - mean) ** 2).mean(raxes, keepdims=True)
    y = (x64 - mean) / np.sqrt(var + kw.get("epsilon", 1e-6))
    if scale is not None:
        y = y * np.asarray(scale, np.float64).reshape(fshape)
    if bias is not None:
        y = y + np.asarray(bias, np.float64).reshape(fshape)
    return y


def _same_tree(a, b) -> None:
    """Same structure (boxes, Param types and metadata included) and bit-equal leaves."""
    la, ta = jax.tree.flatten(a)
    lb, tb = jax.tree.flatten(b)
    assert ta == tb, (ta, tb)
    for u, v in zip(la, lb, strict=True):
        if jax.dtypes.issubdtype(u.dtype, jax.dtypes.prng_key):
            u, v = jax.random.key_data(u), jax.random.key_data(v)
        assert u.dtype == v.dtype and u.shape == v.shape
        np.testing.assert_array_equal(np.asarray(u, np.float32), np.asarray(v, np.float32))


def _check_output(y, y_flax, x, scale, bias, kw, centered) -> None:
    assert y.dtype == y_flax.dtype and y.shape == y_flax.shape
    ref = _reference(x, scale, bias, kw, centered)
    out = jnp.dtype(y.dtype)
    # one rounding to the result dtype (plus float32 statistics), against the same for flax's
    # two-pass: jln is within the result dtype's rounding of float64
    tol = 4 * float(jnp.finfo(out).eps) * (1 + np.abs(ref)) + 1e-5
    scale_mag = 1 if scale is None else 1 + float(np.abs(np.asarray(scale, np.float32)).max())
    np.testing.assert_array_less(np.abs(np.asarray(y, np.float64) - ref), tol * scale_mag)


@pytest.mark.parametrize("x_dtype", X_DTYPES)
@pytest.mark.parametrize("kind,kw", CASES)
def test_linen_matches_flax(kind: str, kw: dict, x_dtype: str) -> None:
    x = _x(x_dtype)
    flax_mod, jln_mod = getattr(fnn, kind)(**kw), getattr(jnn, kind)(**kw)
    with standard:
        v_flax = flax_mod.init(jax.random.key(3), x)
        y_flax = flax_mod.apply(v_flax, x)
    v_jln = jln_mod.init(jax.random.key(3), x)
    _same_tree(v_jln, v_flax)
    y = jln_mod.apply(v_flax, x)
    p = v_flax.get("params", {})
    _check_output(y, y_flax, x, p.get("scale"), p.get("bias"), kw, kind == "LayerNorm")


@pytest.mark.parametrize("x_dtype", X_DTYPES)
@pytest.mark.parametrize("kind,kw", CASES)
def test_nnx_matches_flax(kind: str, kw: dict, x_dtype: str) -> None:
    x = _x(x_dtype)
    faxes = kw.get("feature_axes", -1)
    num = int(np.prod([SHAPE[a] for a in ((faxes,) if isinstance(faxes, int) else faxes)]))
    rngs_f, rngs_j = fnnx.Rngs(7), fnnx.Rngs(7)
    m_flax = getattr(fnnx, kind)(num, rngs=rngs_f, **kw)
    m_jln = getattr(jnx, kind)(num, rngs=rngs_j, **kw)
    # the same state and the same next key: layers built after the norm see flax's keys
    _same_tree(fnnx.state(m_jln), fnnx.state(m_flax))
    np.testing.assert_array_equal(jax.random.key_data(rngs_j.params()), jax.random.key_data(rngs_f.params()))
    with standard:
        y_flax = m_flax(x)
    y = m_jln(x)
    scale = None if m_flax.scale is None else m_flax.scale[...]
    bias = None if kind == "RMSNorm" or m_flax.bias is None else m_flax.bias[...]
    if kw.get("dtype") is not None:  # nnx casts the parameters to dtype first
        scale = None if scale is None else scale.astype(kw["dtype"])
        bias = None if bias is None else bias.astype(kw["dtype"])
    _check_output(y, y_flax, x, scale, bias, kw, kind == "LayerNorm")


@pytest.mark.parametrize("api", ["linen", "nnx"])
@pytest.mark.parametrize("kind", ["LayerNorm", "RMSNorm"])
def test_offset_accuracy(api: str, kind: str) -> None:
    """At offset 1e4, jln.flax is within float32 rounding of float64; flax's default
    (E[x^2] - E[x]^2) is not, so this test can tell the two apart."""
    x = _x("float32", offset=1e4, shape=(16, 256))
    ref = _reference(x, None, None, {}, kind == "LayerNorm")

    def run(mod_api, **kw):
        if api == "linen":
            m = getattr(mod_api, kind)(**kw)
            return m.apply(m.init(jax.random.key(0), x), x)
        return getattr(mod_api, kind)(256, rngs=fnnx.Rngs(0), **kw)(x)

    err = float(np.abs(np.asarray(run(jnn if api == "linen" else jnx), np.float64) - ref).max())
    assert err < 1e-5
    if kind == "LayerNorm":
        err_flax = float(np.abs(np.asarray(run(fnn if api == "linen" else fnnx), np.float64) - ref).max())
        assert err_flax > 100 * err


@pytest.mark.parametrize("api", ["linen", "nnx"])
@pytest.mark.parametrize("kind", ["LayerNorm", "RMSNorm"])
@pytest.mark.parametrize("offset", [0.0, 1e4])
def test_mask(api: str, kind: str, offset: float) -> None:
    x = _x("float32", offset=offset, shape=(4, 5, 32))
    mask = jax.random.bernoulli(jax.random.key(9), 0.6, (4, 5, 32)).at[..., 0].set(True)
    flax_api, jln_api = (fnn, jnn) if api == "linen" else (fnnx, jnx)
    if api == "linen":
        m_f, m_j = getattr(flax_api, kind)(use_fast_variance=False), getattr(jln_api, kind)()
        v = m_f.init(jax.random.key(0), x)
        y_flax, y = m_f.apply(v, x, mask=mask), m_j.apply(v, x, mask=mask)
    else:
        m_f = getattr(flax_api, kind)(32, use_fast_variance=False, rngs=fnnx.Rngs(0))
        y_flax, y = m_f(x, mask=mask), getattr(jln_api, kind)(32, rngs=fnnx.Rngs(0))(x, mask=mask)
    # float64 masked reference
    x64, m = np.asarray(x, np.float64), np.asarray(mask)
    n = m.sum(-1, keepdims=True)
    mean = (np.where(m, x64, 0).sum(-1, keepdims=True) / n) if kind == "LayerNorm" else 0.0
    var = np.where(m, (x64 - mean) ** 2, 0).sum(-1, keepdims=True) / n
    ref = (x64 - mean) / np.sqrt(var + 1e-6)
    assert y.dtype == y_flax.dtype
    assert np.abs(np.asarray(y, np.float64) - ref).max() < 1e-5 * (1 + np.abs(ref).max())
    if offset == 0.0:
        np.testing.assert_allclose(y, y_flax, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["LayerNorm", "RMSNorm"])
def test_axis_name_vmap(kind: str) -> None:
    """Rows split across a vmapped axis (``axis_name``): the statistics are the whole row's,
    as flax's pmean gives."""
    x = _x("float32", shape=(4, 3, 8))  # 4 blocks of each row of 32

    v = getattr(fnn, kind)().init(jax.random.key(0), x[0])

    def apply(cls, **kw):
        m = cls(axis_name="blocks", **kw)
        return jax.vmap(lambda xb: m.apply(v, xb), axis_name="blocks")(x)

    y_flax, y = apply(getattr(fnn, kind), use_fast_variance=False), apply(getattr(jnn, kind))
    np.testing.assert_allclose(y, y_flax, rtol=1e-5, atol=1e-5)
    whole = jnp.moveaxis(x, 0, 1).reshape(3, 32)
    ref = _reference(whole, None, None, {}, kind == "LayerNorm")
    np.testing.assert_allclose(np.asarray(jnp.moveaxis(y, 0, 1).reshape(3, 32)), ref, atol=1e-5)
    # nnx, same mapping
    ln = getattr(jnx, kind)(8, axis_name="blocks", rngs=fnnx.Rngs(0))
    y_nnx = jax.vmap(lambda xb: ln(xb), axis_name="blocks")(x)
    np.testing.assert_allclose(y_nnx, y, rtol=1e-6, atol=1e-6)


class _LinenModel(fnn.Module):
    norm_cls: type
    rms_cls: type

    @fnn.compact
    def __call__(self, x):
        x = self.norm_cls(scale_init=fnn.with_partitioning(fnn.initializers.ones, ("embed",)))(x)
        x = fnn.Dense(16)(x)
        x = self.rms_cls()(x)
        return fnn.Dense(4)(x)


def test_linen_model_params_and_checkpoints() -> None:
    x = _x("float32", shape=(2, 8))
    flax_model = _LinenModel(fnn.LayerNorm, fnn.RMSNorm)
    jln_model = _LinenModel(jnn.LayerNorm, jnn.RMSNorm)
    v_flax = flax_model.init(jax.random.key(42), x)
    v_jln = jln_model.init(jax.random.key(42), x)
    _same_tree(v_jln, v_flax)  # Partitioned box and every Dense kernel identical
    assert isinstance(v_jln["params"]["LayerNorm_0"]["scale"], fnn.Partitioned)
    # checkpoints both ways: each model runs on the other's parameters
    y_ff = flax_model.apply(v_flax, x)
    np.testing.assert_allclose(jln_model.apply(v_flax, x), y_ff, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(flax_model.apply(v_jln, x), y_ff, rtol=1e-5, atol=1e-5)


class _NnxModel(fnnx.Module):
    """Gemma-shaped: embedding-like Linear, norms between other layers, all from one Rngs."""

    def __init__(self, api, rngs: fnnx.Rngs):
        self.inp = fnnx.Linear(8, 16, rngs=rngs)
        self.norm1 = api.RMSNorm(16, rngs=rngs, scale_init=fnnx.with_metadata(fnnx.initializers.ones_init(), tag="w"))
        self.mid = fnnx.Linear(16, 16, rngs=rngs)
        self.norm2 = api.LayerNorm(16, rngs=rngs, scale_metadata={"tag": "embed"})
        self.out = fnnx.Linear(16, 4, rngs=rngs)
        self.drop = fnnx.Dropout(0.1, rngs=rngs)

    def __call__(self, x):
        return self.out(self.norm2(self.mid(self.norm1(self.inp(x)))))


def test_nnx_model_params_seeds_and_checkpoints() -> None:
    x = _x("float32", shape=(2, 8))
    rf, rj = fnnx.Rngs(42), fnnx.Rngs(42)
    m_flax, m_jln = _NnxModel(fnnx, rf), _NnxModel(jnx, rj)
    s_flax, s_jln = fnnx.state(m_flax), fnnx.state(m_jln)
    _same_tree(s_jln, s_flax)  # every Linear after the norms drew flax's keys
    assert s_jln["norm2"]["scale"].get_metadata().get("tag") == "embed"
    assert s_jln["norm1"]["scale"].get_metadata().get("tag") == "w"
    for stream in ("params", "dropout"):
        np.testing.assert_array_equal(jax.random.key_data(getattr(rj, stream)()), jax.random.key_data(getattr(rf, stream)()))
    y_ff = m_flax(x)
    # flax's checkpoint into the jln model, and back
    m_j2 = _NnxModel(jnx, fnnx.Rngs(0))
    fnnx.update(m_j2, fnnx.state(m_flax))
    np.testing.assert_allclose(m_j2(x), y_ff, rtol=1e-5, atol=1e-5)
    m_f2 = _NnxModel(fnnx, fnnx.Rngs(1))
    fnnx.update(m_f2, fnnx.state(m_jln))
    np.testing.assert_allclose(m_f2(x), y_ff, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["LayerNorm", "RMSNorm"])
def test_bf16_residuals(kind: str) -> None:
    """Reverse mode of a bfloat16 input with float32 params keeps x (2 bytes/element) and
    per-row statistics; flax keeps several float32 copies."""
    x = _x("bfloat16", shape=(64, 512))
    m_j = getattr(jnn, kind)()
    v = m_j.init(jax.random.key(0), x)

    def loss(mod):
        return lambda x, v: jnp.sum(mod.apply(v, x).astype(jnp.float32))

    jln_bytes = _residuals.residual_bytes_per_element(loss(m_j), x, v)
    with standard:
        flax_bytes = _residuals.residual_bytes_per_element(loss(getattr(fnn, kind)()), x, v)
    assert jln_bytes < 2.2
    assert flax_bytes > 2 * jln_bytes
    m_n = getattr(jnx, kind)(512, rngs=fnnx.Rngs(0))
    graphdef, state = fnnx.split(m_n)
    nnx_bytes = _residuals.residual_bytes_per_element(
        lambda x, s: jnp.sum(fnnx.merge(graphdef, s)(x).astype(jnp.float32)), x, state
    )
    assert nnx_bytes < 2.2


@pytest.mark.parametrize("kind", ["LayerNorm", "RMSNorm"])
def test_gradients_match_float64(kind: str) -> None:
    x = _x("float32", shape=(4, 32))
    m_j, m_f = getattr(jnn, kind)(), getattr(fnn, kind)(use_fast_variance=False)
    v = m_f.init(jax.random.key(0), x)
    ct = jax.random.normal(jax.random.key(5), x.shape)

    def grads(m):
        return jax.grad(lambda x, v: jnp.sum(m.apply(v, x) * ct), argnums=(0, 1))(x, v)

    g_j, g_f = grads(m_j), grads(m_f)
    for a, b in zip(jax.tree.leaves(g_j), jax.tree.leaves(g_f), strict=True):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-5)


def test_integer_and_complex_inputs_follow_flax() -> None:
    xi = jnp.arange(24, dtype=jnp.int32).reshape(4, 6)
    with standard:
        v = fnn.LayerNorm().init(jax.random.key(0), xi)
        y_flax = fnn.LayerNorm(use_fast_variance=False).apply(v, xi)
    y = jnn.LayerNorm().apply(v, xi)
    assert y.dtype == y_flax.dtype == jnp.float32
    np.testing.assert_allclose(y, y_flax, rtol=1e-5, atol=1e-5)
    xc = jax.lax.complex(xi.astype(jnp.float32), xi[::-1].astype(jnp.float32))
    with standard:
        vc = fnn.LayerNorm().init(jax.random.key(0), xc)
        np.testing.assert_array_equal(jnn.LayerNorm().apply(vc, xc), fnn.LayerNorm().apply(vc, xc))


def test_errors_name_the_class() -> None:
    x = jnp.ones((2, 4))
    with pytest.raises(ValueError, match="jln.flax.linen.LayerNorm"):
        jnn.LayerNorm(reduction_axes=5).init(jax.random.key(0), x)
    with pytest.raises(ValueError, match="jln.flax.nnx.RMSNorm"):
        jnx.RMSNorm(4, epsilon=-1.0, rngs=fnnx.Rngs(0))(x)


_SHARD_SCRIPT = r"""
import os, json
os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
os.environ["JAX_PLATFORMS"] = "cpu"
os.environ["JLN_NATIVE"] = "0"
import jax, jax.numpy as jnp, numpy as np
import flax.linen as fnn
from flax import nnx as fnnx
from jax.sharding import PartitionSpec as P
from jln.flax import linen as jnn, nnx as jnx
mesh = jax.make_mesh((4,), ("tp",), axis_types=(jax.sharding.AxisType.Auto,))
x = 5.0 + 2.0 * jax.random.normal(jax.random.key(0), (8, 64))
out = {}
for kind in ("LayerNorm", "RMSNorm"):
    for groups in (None, ((0, 1), (2, 3))):
        blocks = 4 if groups is None else 2
        v = getattr(fnn, kind)().init(jax.random.key(1), x[:, :16])
        def run(cls, **kw):
            m = cls(axis_name="tp", axis_index_groups=groups, **kw)
            f = jax.shard_map(lambda xb: m.apply(v, xb), mesh=mesh, in_specs=P(None, "tp"),
                              out_specs=P(None, "tp"), check_vma=False)
            return np.asarray(f(x), np.float64)
        y_j, y_f = run(getattr(jnn, kind)), run(getattr(fnn, kind), use_fast_variance=False)
        g = jax.shard_map(
            lambda xb: getattr(jnx, kind)(16, axis_name="tp", axis_index_groups=groups, rngs=fnnx.Rngs(0))(xb),
            mesh=mesh, in_specs=P(None, "tp"), out_specs=P(None, "tp"), check_vma=False)
        y_n = np.asarray(g(x), np.float64)
        x64 = np.asarray(x, np.float64).reshape(8, 4 // blocks, 16 * blocks)
        mu = x64.mean(-1, keepdims=True) if kind == "LayerNorm" else 0.0
        ref = ((x64 - mu) / np.sqrt(((x64 - mu) ** 2).mean(-1, keepdims=True) + 1e-6)).reshape(8, 64)
        key = f"{kind}-{'groups' if groups else 'all'}"
        out[key] = {"jln_vs_ref": float(np.abs(y_j - ref).max()), "flax_vs_ref": float(np.abs(y_f - ref).max()),
                    "nnx_vs_linen": float(np.abs(y_n - y_j).max())}
print(json.dumps(out))
"""


@pytest.mark.slow  # a subprocess on 4 host devices: about a minute and a half on 2 busy cores
def test_axis_name_shard_map() -> None:
    """Rows split over 4 host devices by ``shard_map`` (and over groups of 2 with
    ``axis_index_groups``): jln.flax gives the whole row's statistics, as flax does."""
    import json
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-c", _SHARD_SCRIPT], capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(results) == {f"{k}-{g}" for k in ("LayerNorm", "RMSNorm") for g in ("all", "groups")}
    for key, r in results.items():
        assert r["flax_vs_ref"] < 1e-5, (key, r)  # the reference is the grouping flax computes
        assert r["jln_vs_ref"] < 1e-5, (key, r)
        assert r["nnx_vs_linen"] < 1e-6, (key, r)


@pytest.mark.slow  # may build jln's native CPU kernels (minutes on a cold cache)
@pytest.mark.parametrize("kind", ["LayerNorm", "RMSNorm"])
@pytest.mark.parametrize("x_dtype", X_DTYPES)
def test_kernels_path_matches_xla(kind: str, x_dtype: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """impl="auto" (jln's kernels where they apply) gives the XLA body's result within one
    rounding of the result dtype, in flax's result dtype."""
    from jln import _dispatch

    x = _x(x_dtype, offset=3.0, shape=(64, 256))
    orig = _dispatch.apply

    def xla_apply(fn, impl, *args, **kwargs):
        return orig(fn, "xla", *args, **kwargs)

    for kw in ({}, {"dtype": jnp.bfloat16}, {"param_dtype": jnp.bfloat16}):
        m = getattr(jnn, kind)(**kw)
        v = jax.tree.map(lambda p: p + jnp.asarray(0.1, p.dtype), m.init(jax.random.key(1), x))
        y_auto = m.apply(v, x)
        monkeypatch.setattr(_dispatch, "apply", xla_apply)
        y_xla = m.apply(v, x)
        monkeypatch.setattr(_dispatch, "apply", orig)
        assert y_auto.dtype == y_xla.dtype
        ulp = float(jnp.finfo(y_auto.dtype).eps) * 4
        np.testing.assert_allclose(np.asarray(y_auto, np.float32), np.asarray(y_xla, np.float32), rtol=ulp, atol=ulp)


def test_force_float32_reductions_false_is_accepted() -> None:
    """flax then reduces a bfloat16 input in bfloat16; jln keeps float32 statistics, so its
    result is the closer one to float64 (and the dtype is flax's)."""
    x = _x("bfloat16", offset=4.0, shape=(8, 256))
    m_f, m_j = fnn.LayerNorm(force_float32_reductions=False), jnn.LayerNorm(force_float32_reductions=False)
    with standard:
        v = m_f.init(jax.random.key(0), x)
        y_flax = m_f.apply(v, x)
    y = m_j.apply(v, x)
    assert y.dtype == y_flax.dtype
    ref = _reference(x, None, None, {}, True)
    err = np.abs(np.asarray(y, np.float64) - ref).max()
    assert err < 1e-5
    assert err <= np.abs(np.asarray(y_flax, np.float64) - ref).max()


@pytest.mark.parametrize("api", ["linen", "nnx"])
def test_float64_where_flax_computes_in_float64(api: str) -> None:
    """float64 input (or dtype=float64) under x64: float64 statistics and result, as flax."""
    with jax.enable_x64(True):
        x = 1e6 + jax.random.normal(jax.random.key(0), (4, 64), jnp.float64)
        for kw in ({}, {"dtype": jnp.float64}):
            xin = x if not kw else x.astype(jnp.float32)
            if api == "linen":
                m, f = jnn.LayerNorm(**kw), fnn.LayerNorm(use_fast_variance=False, **kw)
                v = m.init(jax.random.key(1), xin)
                y = m.apply(v, xin)
                with standard:
                    y_flax = f.apply(v, xin)
            else:
                y = jnx.LayerNorm(64, rngs=fnnx.Rngs(0), **kw)(xin)
                with standard:
                    y_flax = fnnx.LayerNorm(64, use_fast_variance=False, rngs=fnnx.Rngs(0), **kw)(xin)
            assert y.dtype == y_flax.dtype == jnp.float64
            ref = _reference(xin, None, None, {}, True)
            assert np.abs(np.asarray(y) - ref).max() < 1e-9


@pytest.mark.parametrize("kind", ["LayerNorm", "RMSNorm"])
def test_mask_gradients_match_flax(kind: str) -> None:
    x = _x("float32", shape=(4, 32))
    mask = jax.random.bernoulli(jax.random.key(9), 0.6, x.shape).at[:, 0].set(True)
    m_j, m_f = getattr(jnn, kind)(), getattr(fnn, kind)(use_fast_variance=False)
    v = jax.tree.map(lambda p: p + 0.5, m_f.init(jax.random.key(0), x))
    ct = jax.random.normal(jax.random.key(5), x.shape)

    def grads(m):
        return jax.grad(lambda x, v: jnp.sum(m.apply(v, x, mask=mask) * ct), argnums=(0, 1))(x, v)

    for a, b in zip(jax.tree.leaves(grads(m_j)), jax.tree.leaves(grads(m_f)), strict=True):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-5)
