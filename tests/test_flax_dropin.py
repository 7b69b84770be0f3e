"""jln.flax against flax itself: the same parameters, keys, dtypes and (within rounding) values.

Expected values come from flax's own classes (parameter trees, RNG draws, result dtypes,
checkpoints) and from a float64 two-pass reference (outputs). flax's own modules are run
under "standard" dtype promotion (they promote bfloat16 with float32 implicitly).
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import flax
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
import flax
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


# --- GroupNorm, InstanceNorm, BatchNorm --------------------------------------------------------

STAT_NORMS = ("GroupNorm", "InstanceNorm", "BatchNorm")
NORMS = ("LayerNorm", "RMSNorm", *STAT_NORMS)
STAT_SHAPE = (4, 3, 5, 16)  # [N, H, W, C]: flax's layout, the features last
TRAIN, EVAL = {"use_running_average": False}, {"use_running_average": True}
BF16 = jnp.bfloat16
INITS = {"scale_init": jax.nn.initializers.normal(0.5), "bias_init": jax.nn.initializers.normal(0.5)}

# (kind, constructor kwargs, call kwargs, apis, quick): the options of each class, on a rank-4
# input; the quick ones run by default (float32 x), all of them (and bfloat16 x) in the slow pass.
# Left out of NNX: BatchNorm over several feature axes (flax's NNX class keeps (num_features,)
# statistics and cannot update them), force_float32_reductions (linen only) and GroupNorm
# reduction axes that leave out a spatial axis (flax's NNX class mixes the groups up there:
# test_nnx_group_norm_partial_reduction_axes).
BOTH, LINEN = ("linen", "nnx"), ("linen",)
G4 = {"num_groups": 4}
STAT_OPTIONS: list[tuple[str, dict, dict, tuple[str, ...], bool]] = [
    ("GroupNorm", G4, {}, BOTH, True),
    ("GroupNorm", {"num_groups": None, "group_size": 8}, {}, BOTH, True),
    ("GroupNorm", {"num_groups": 1}, {}, BOTH, False),
    ("GroupNorm", {"num_groups": None, "group_size": 1}, {}, BOTH, False),
    ("GroupNorm", {"num_groups": 16}, {}, BOTH, False),
    ("GroupNorm", {**G4, "reduction_axes": (1, 2, 3)}, {}, BOTH, False),
    ("GroupNorm", {**G4, "reduction_axes": (2, 3)}, {}, LINEN, True),
    ("GroupNorm", {**G4, "reduction_axes": (0, 1, 2, 3)}, {}, LINEN, False),
    ("GroupNorm", {**G4, "epsilon": 1e-2}, {}, BOTH, False),
    ("GroupNorm", {**G4, "use_bias": False}, {}, BOTH, False),
    ("GroupNorm", {**G4, "use_scale": False}, {}, BOTH, False),
    ("GroupNorm", {**G4, "use_bias": False, "use_scale": False}, {}, BOTH, True),
    ("GroupNorm", {**G4, "dtype": BF16}, {}, BOTH, True),
    ("GroupNorm", {**G4, "param_dtype": BF16}, {}, BOTH, False),
    ("GroupNorm", {**G4, "dtype": jnp.float32, "param_dtype": BF16}, {}, BOTH, False),
    ("GroupNorm", {**G4, **INITS}, {}, BOTH, True),
    ("GroupNorm", {**G4, "use_fast_variance": False}, {}, BOTH, False),
    ("GroupNorm", {**G4, "force_float32_reductions": False}, {}, LINEN, False),
    ("InstanceNorm", {}, {}, BOTH, True),
    ("InstanceNorm", {"feature_axes": (1, -1)}, {}, BOTH, True),
    ("InstanceNorm", {"feature_axes": 2}, {}, BOTH, False),
    ("InstanceNorm", {"feature_axes": (1, 2, 3)}, {}, BOTH, False),
    ("InstanceNorm", {"epsilon": 1e-2}, {}, BOTH, False),
    ("InstanceNorm", {"use_bias": False}, {}, BOTH, False),
    ("InstanceNorm", {"use_scale": False}, {}, BOTH, False),
    ("InstanceNorm", {"dtype": BF16}, {}, BOTH, True),
    ("InstanceNorm", {"param_dtype": BF16}, {}, BOTH, True),
    ("InstanceNorm", {"dtype": jnp.float32, "param_dtype": BF16}, {}, BOTH, False),
    ("InstanceNorm", INITS, {}, BOTH, True),
    ("InstanceNorm", {"use_fast_variance": False}, {}, BOTH, False),
    ("BatchNorm", {}, TRAIN, BOTH, True),
    ("BatchNorm", {}, EVAL, BOTH, True),
    ("BatchNorm", TRAIN, {}, BOTH, False),
    ("BatchNorm", EVAL, {}, BOTH, False),
    ("BatchNorm", {"axis": 1}, TRAIN, BOTH, True),
    ("BatchNorm", {"axis": 1}, EVAL, BOTH, False),
    ("BatchNorm", {"axis": (1, 3)}, TRAIN, LINEN, True),
    ("BatchNorm", {"axis": (1, 3)}, EVAL, LINEN, False),
    ("BatchNorm", {"momentum": 0.9}, TRAIN, BOTH, True),
    ("BatchNorm", {"epsilon": 1e-3}, TRAIN, BOTH, False),
    ("BatchNorm", {"epsilon": 1e-3}, EVAL, BOTH, False),
    ("BatchNorm", {"use_bias": False}, TRAIN, BOTH, False),
    ("BatchNorm", {"use_scale": False}, TRAIN, BOTH, False),
    ("BatchNorm", {"dtype": BF16}, TRAIN, BOTH, True),
    ("BatchNorm", {"dtype": BF16}, EVAL, BOTH, False),
    ("BatchNorm", {"param_dtype": BF16}, TRAIN, BOTH, False),
    ("BatchNorm", {"param_dtype": BF16}, EVAL, BOTH, True),
    ("BatchNorm", INITS, TRAIN, BOTH, True),
    ("BatchNorm", {"use_fast_variance": False}, TRAIN, BOTH, False),
    ("BatchNorm", {"param_dtype": BF16, "force_float32_reductions": False}, TRAIN, LINEN, True),
    ("BatchNorm", {"param_dtype": BF16, "force_float32_reductions": False}, EVAL, LINEN, False),
]


def _case_id(kind: str, kw: dict, call: dict) -> str:
    def name(v: Any) -> str:
        return "init" if callable(v) and not isinstance(v, type) else str(getattr(v, "__name__", v))

    return f"{kind}-" + ",".join(f"{k}={name(v)}" for k, v in {**kw, **call}.items())


def _stat_cases(api: str) -> list:
    cases = []
    for kind, kw, call, apis, quick in STAT_OPTIONS:
        if api not in apis:
            continue
        for x_dtype in X_DTYPES:  # bfloat16 x: the defaults by default, every option in the slow pass
            fast = quick and (x_dtype == "float32" or {**kw, **call} in (G4, {}, TRAIN, EVAL))
            marks = () if fast else (pytest.mark.slow,)
            cases.append(pytest.param(kind, kw, call, x_dtype, id=_case_id(kind, kw, call) + f"-{x_dtype}", marks=marks))
    return cases


def _axes(axes: Any, ndim: int) -> tuple[int, ...]:
    return tuple(sorted({a % ndim for a in ((axes,) if isinstance(axes, int) else axes)}))


def _layout(kind: str, kw: dict, shape: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...], int | None]:
    """flax's ``(reduction axes, feature axes, groups)`` for ``kind`` on ``shape``."""
    nd = len(shape)
    if kind == "GroupNorm":
        g = kw.get("num_groups", 32)
        if kw.get("group_size") is not None:
            g = shape[-1] // kw["group_size"]
        ra = kw.get("reduction_axes")
        return (tuple(range(1, nd)) if ra is None else _axes(ra, nd)), (nd - 1,), g
    if kind == "InstanceNorm":
        faxes = _axes(kw.get("feature_axes", -1), nd)
        return tuple(a for a in range(1, nd) if a not in faxes), faxes, None
    faxes = _axes(kw.get("axis", -1), nd)
    return tuple(a for a in range(nd) if a not in faxes), faxes, None


def _stat_reference(x, kind: str, kw: dict, scale=None, bias=None, mask=None, running=None):
    """float64 GroupNorm/InstanceNorm/BatchNorm with flax's layout: ``(y, mean, var)``, the batch
    statistics (biased variance) of the feature axes' shape; with ``running = (mean, var)``
    (BatchNorm's eval mode) those normalize ``x``."""
    x64 = np.asarray(x, np.float64)
    nd, shape = x64.ndim, x64.shape
    raxes, faxes, groups = _layout(kind, kw, shape)
    eps = kw.get("epsilon", 1e-5 if kind == "BatchNorm" else 1e-6)
    fshape = tuple(n if i in faxes else 1 for i, n in enumerate(shape))
    if running is not None:
        mean, var = (np.asarray(r, np.float64).reshape(fshape) for r in running)
        y = (x64 - mean) / np.sqrt(var + eps)
    else:
        xg, axes = x64, raxes
        m = None if mask is None else np.broadcast_to(np.asarray(mask, bool), shape)
        if groups is not None:
            xg = x64.reshape(shape[:-1] + (groups, shape[-1] // groups))
            axes = tuple(a for a in raxes if a != nd - 1) + (nd,)
            m = None if m is None else m.reshape(xg.shape)
        if m is None:
            mean = xg.mean(axes, keepdims=True)
            var = ((xg - mean) ** 2).mean(axes, keepdims=True)
        else:
            n = m.sum(axes, keepdims=True)
            mean = np.where(m, xg, 0).sum(axes, keepdims=True) / n
            var = np.where(m, (xg - mean) ** 2, 0).sum(axes, keepdims=True) / n
        y = ((xg - mean) / np.sqrt(var + eps)).reshape(shape)
    if scale is not None:
        y = y * np.asarray(scale, np.float64).reshape(fshape)
    if bias is not None:
        y = y + np.asarray(bias, np.float64).reshape(fshape)
    return y, np.squeeze(mean), np.squeeze(var)


def _flax_running(old, batch, momentum: float) -> np.ndarray:
    """flax's update of a running statistic, in float64."""
    return momentum * np.asarray(old, np.float64) + (1 - momentum) * np.asarray(batch, np.float64).reshape(np.shape(old))


def _assert_near(y, ref, scale=None, what: str = "") -> None:
    """``y`` within its dtype's rounding (plus float32 statistics) of the float64 ``ref``."""
    tol = 4 * float(jnp.finfo(jnp.dtype(y.dtype)).eps) * (1 + np.abs(ref)) + 1e-5
    mag = 1 if scale is None else 1 + float(np.abs(np.asarray(scale, np.float32)).max())
    err = np.abs(np.asarray(y, np.float64) - ref)
    assert (err < tol * mag).all(), (what, float(err.max()))


def _perturbed(tree, seed: int):
    """``tree``'s leaves plus noise (non-trivial scale, bias and running statistics), each in
    its own dtype; variances kept positive."""
    leaves, treedef = jax.tree.flatten(tree)
    keys = jax.random.split(jax.random.key(seed), len(leaves))
    out = [
        (jnp.abs(jnp.asarray(v, jnp.float32) + 0.5 * jax.random.normal(k, v.shape)) + 0.1).astype(v.dtype)
        for v, k in zip(leaves, keys, strict=True)
    ]
    return jax.tree.unflatten(treedef, out)


@pytest.mark.parametrize("kind,kw,call,x_dtype", _stat_cases("linen"))
def test_linen_stat_norms_match_flax(kind: str, kw: dict, call: dict, x_dtype: str) -> None:
    """Same variables (names, shapes, dtypes, values: the same RNG draws) as flax's class; the
    output in flax's dtype, within rounding of float64 and of flax's two-pass variance; in
    training the updated ``batch_stats`` are flax's rule applied to the exact batch statistics."""
    x = _x(x_dtype, offset=1.5, shape=STAT_SHAPE)
    f_mod, j_mod = getattr(fnn, kind)(**kw), getattr(jnn, kind)(**kw)
    with standard:
        v_flax = f_mod.init(jax.random.key(3), x, **call)
    _same_tree(j_mod.init(jax.random.key(3), x, **call), v_flax)
    v = _perturbed(v_flax, seed=4)
    mutable = ["batch_stats"] if "batch_stats" in v else False
    y, updates = j_mod.apply(v, x, mutable=mutable, **call) if mutable else (j_mod.apply(v, x, **call), None)
    two_pass = getattr(fnn, kind)(**{**kw, "use_fast_variance": False})
    with standard:
        out_flax = two_pass.apply(v, x, mutable=mutable, **call)
    y_flax, up_flax = out_flax if mutable else (out_flax, None)
    p, stats = v.get("params", {}), v.get("batch_stats", {})
    running = call.get("use_running_average", kw.get("use_running_average"))
    ref, mean, var = _stat_reference(
        x, kind, kw, p.get("scale"), p.get("bias"),
        running=(stats["mean"], stats["var"]) if running else None,
    )
    assert y.dtype == y_flax.dtype and y.shape == y_flax.shape == x.shape
    _assert_near(y, ref, p.get("scale"), "vs float64")
    if kw.get("force_float32_reductions", True):  # (else flax reduces a bfloat16 x in bfloat16)
        _assert_near(y_flax, ref, p.get("scale"), "flax's own two-pass")  # the tolerance is fair
    if updates is None:
        return
    assert jax.tree.map(lambda a: (a.shape, a.dtype), updates) == jax.tree.map(lambda a: (a.shape, a.dtype), up_flax)
    m = kw.get("momentum", 0.99)
    for name, batch in (("mean", mean), ("var", var)):
        new = updates["batch_stats"][name]
        if running:
            np.testing.assert_array_equal(new, stats[name])  # eval mode: nothing changes
        else:
            _assert_near(new, _flax_running(stats[name], batch, m), what=name)


@pytest.mark.parametrize("kind,kw,call,x_dtype", _stat_cases("nnx"))
def test_nnx_stat_norms_match_flax(kind: str, kw: dict, call: dict, x_dtype: str) -> None:
    """Same state (``Param``/``BatchStat`` variables) and the same next key as flax's class;
    outputs and updated statistics as linen's test checks them."""
    x = _x(x_dtype, offset=1.5, shape=STAT_SHAPE)
    raxes, faxes, _ = _layout(kind, kw, STAT_SHAPE)
    num = int(np.prod([STAT_SHAPE[a] for a in faxes]))
    rngs_f, rngs_j = fnnx.Rngs(7), fnnx.Rngs(7)
    m_flax, m_jln = getattr(fnnx, kind)(num, rngs=rngs_f, **kw), getattr(jnx, kind)(num, rngs=rngs_j, **kw)
    _same_tree(fnnx.state(m_jln), fnnx.state(m_flax))
    np.testing.assert_array_equal(jax.random.key_data(rngs_j.params()), jax.random.key_data(rngs_f.params()))
    # non-trivial parameters and running statistics, the same in both
    fnnx.update(m_flax, _perturbed(fnnx.state(m_flax), seed=4))
    fnnx.update(m_jln, fnnx.state(m_flax))
    before = {n: np.asarray(getattr(m_flax, n)[...]) for n in ("scale", "bias", "mean", "var") if getattr(m_flax, n, None) is not None}
    y = m_jln(x, **call)
    m_flax.use_fast_variance = False
    with standard:
        y_flax = m_flax(x, **call)
    assert y.dtype == y_flax.dtype and y.shape == x.shape

    value = before.get
    scale, bias = value("scale"), value("bias")
    xin = x
    dtype = kw.get("dtype")
    if dtype is not None:  # nnx casts x, the parameters and the running statistics to dtype first
        xin = x.astype(dtype)
        scale = None if scale is None else np.asarray(jnp.asarray(scale).astype(dtype))
        bias = None if bias is None else np.asarray(jnp.asarray(bias).astype(dtype))
    running = call.get("use_running_average", kw.get("use_running_average", False))
    rstats = None
    if kind == "BatchNorm" and running:
        rstats = tuple(np.asarray(jnp.asarray(value(n)).astype(dtype or jnp.float32)) for n in ("mean", "var"))
    ref, mean, var = _stat_reference(xin, kind, kw, scale, bias, running=rstats)
    _assert_near(y, ref, scale, "vs float64")
    _assert_near(y_flax, ref, scale, "flax's own two-pass")
    if kind == "BatchNorm":
        for name, batch in (("mean", mean), ("var", var)):
            new, new_flax = getattr(m_jln, name)[...], getattr(m_flax, name)[...]
            assert new.dtype == new_flax.dtype and new.shape == new_flax.shape
            if running:
                np.testing.assert_array_equal(new, value(name))
            else:
                _assert_near(new, _flax_running(value(name), batch, kw.get("momentum", 0.99)), what=name)


def _run_stat(api: str, kind: str, x, kw: dict | None = None, mod_api=None, **call):
    """One call of ``kind`` from ``mod_api`` (flax's or jln's linen/nnx) on ``x``, default
    parameters (GroupNorm: 4 groups; BatchNorm: training); returns the output."""
    kw = dict(kw or {})
    if kind == "GroupNorm":
        kw.setdefault("num_groups", 4)
    if kind == "BatchNorm":
        call.setdefault("use_running_average", False)
    if api == "linen":
        m = getattr(mod_api, kind)(**kw)
        v = m.init(jax.random.key(0), x, **call)
        return m.apply(v, x, mutable=["batch_stats"], **call)[0] if "batch_stats" in v else m.apply(v, x, **call)
    _, faxes, _ = _layout(kind, kw, x.shape)
    return getattr(mod_api, kind)(int(np.prod([x.shape[a] for a in faxes])), rngs=fnnx.Rngs(0), **kw)(x, **call)


@pytest.mark.parametrize("api", ["linen", "nnx"])
@pytest.mark.parametrize("kind", STAT_NORMS)
def test_stat_norms_offset_accuracy(api: str, kind: str) -> None:
    """At offset 1e4 jln.flax stays within float32 rounding of float64, where flax's default
    (E[x^2] - E[x]^2) loses most digits: the test tells the two apart."""
    x = _x("float32", offset=1e4, shape=(8, 6, 6, 16))
    ref = _stat_reference(x, kind, {"num_groups": 4})[0]
    jln_api, flax_api = (jnn, fnn) if api == "linen" else (jnx, fnnx)
    err = float(np.abs(np.asarray(_run_stat(api, kind, x, mod_api=jln_api), np.float64) - ref).max())
    with standard:
        y_fast = _run_stat(api, kind, x, mod_api=flax_api)
    err_fast = float(np.abs(np.asarray(y_fast, np.float64) - ref).max())
    assert err < 2e-6
    assert err_fast > 100 * err


def _batches(steps: int, offset: float = 3.0) -> list[jax.Array]:
    return [_x("float32", offset=offset, seed=10 + i, shape=(16, 4, 8)) * (1 + 0.1 * i) for i in range(steps)]


@pytest.mark.parametrize("offset", [3.0, 1e4])
@pytest.mark.parametrize("momentum", [0.99, 0.9])
def test_linen_batch_norm_running_stats_over_steps(momentum: float, offset: float) -> None:
    """Five training steps (mask on the last): ``batch_stats`` follow flax's rule on the exact
    batch statistics (NumPy, float64); eval mode then normalizes with them."""
    bn, bn_flax = jnn.BatchNorm(momentum=momentum), fnn.BatchNorm(momentum=momentum, use_fast_variance=False)
    xs = _batches(5, offset)
    mask = jax.random.bernoulli(jax.random.key(2), 0.7, xs[0].shape)
    v = bn.init(jax.random.key(0), xs[0], use_running_average=False)
    v = {**v, "params": _perturbed(v["params"], 1)}
    v_flax = v
    ra = {k: np.asarray(a, np.float64) for k, a in v["batch_stats"].items()}
    for i, x in enumerate(xs):
        m = mask if i == 4 else None
        y, up = bn.apply(v, x, use_running_average=False, mask=m, mutable=["batch_stats"])
        with standard:
            _, up_flax = bn_flax.apply(v_flax, x, use_running_average=False, mask=m, mutable=["batch_stats"])
        _, mean, var = _stat_reference(x, "BatchNorm", {}, mask=m)
        ra = {"mean": _flax_running(ra["mean"], mean, momentum), "var": _flax_running(ra["var"], var, momentum)}
        v, v_flax = {**v, **up}, {**v_flax, **up_flax}
        for k in ra:
            assert up["batch_stats"][k].dtype == jnp.float32
            np.testing.assert_allclose(up["batch_stats"][k], ra[k], rtol=2e-6, atol=1e-6 * (1 + offset) * (1 - momentum))
    x = xs[0]
    y_eval = bn.apply(v, x, use_running_average=True)
    p = v["params"]
    ref = _stat_reference(x, "BatchNorm", {}, p["scale"], p["bias"], running=(ra["mean"], ra["var"]))[0]
    _assert_near(y_eval, ref, p["scale"], "eval")
    with standard:
        y_eval_flax = bn_flax.apply(v_flax, x, use_running_average=True)
    if offset < 100:  # flax's running statistics are its own two-pass ones: the same numbers
        np.testing.assert_allclose(y_eval, y_eval_flax, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("offset", [3.0, 1e4])
def test_nnx_batch_norm_running_stats_over_steps(offset: float) -> None:
    """As linen's, on NNX's ``BatchStat`` variables, switching modes with ``train()``/``eval()``."""
    bn = jnx.BatchNorm(8, momentum=0.9, rngs=fnnx.Rngs(0))
    ra = {"mean": np.zeros(8), "var": np.ones(8)}
    for x in _batches(5, offset):
        bn(x)
        _, mean, var = _stat_reference(x, "BatchNorm", {})
        ra = {"mean": _flax_running(ra["mean"], mean, 0.9), "var": _flax_running(ra["var"], var, 0.9)}
        for k in ra:
            np.testing.assert_allclose(getattr(bn, k)[...], ra[k], rtol=2e-6, atol=1e-6 * (1 + offset) * 0.1)
    bn.eval()
    assert bn.use_running_average is True
    x = _batches(1, offset)[0]
    frozen = np.asarray(bn.mean[...])
    ref = _stat_reference(x, "BatchNorm", {}, running=(ra["mean"], ra["var"]))[0]
    _assert_near(bn(x), ref, what="eval")
    np.testing.assert_array_equal(bn.mean[...], frozen)  # eval leaves the statistics
    bn.train()
    bn(x)
    assert not np.array_equal(bn.mean[...], frozen)
    view = fnnx.view(bn, use_running_average=True)  # flax's views set the mode as on flax's class
    np.testing.assert_array_equal(view(x), bn(x, use_running_average=True))
    with pytest.raises(ValueError, match="use_running_average"):
        jnx.BatchNorm(8, use_running_average=None, rngs=fnnx.Rngs(0))(x)


# flax's own normalization tests (flax.linen's and flax.nnx's test suites) check these
# behaviours of flax's classes; here they are checked on jln.flax's.


def test_flax_behaviour_batch_norm_init_and_first_update() -> None:
    """``init`` normalizes with the batch statistics without updating them; the first update
    with momentum 0.9 gives 0.1 of the batch mean and 0.9 + 0.1 of its biased variance."""
    x = jax.random.normal(jax.random.key(1), (4, 3, 2))
    bn = jnn.BatchNorm(momentum=0.9, use_running_average=False)
    y, v = bn.init_with_output(jax.random.key(2), x)
    np.testing.assert_allclose(y.mean((0, 1)), 0.0, atol=1e-6)
    np.testing.assert_allclose(y.var((0, 1)), 1.0, rtol=1e-4)
    np.testing.assert_array_equal(v["batch_stats"]["mean"], np.zeros(2))
    _, up = bn.apply(v, x, mutable=["batch_stats"])
    x64 = np.asarray(x, np.float64)
    np.testing.assert_allclose(up["batch_stats"]["mean"], 0.1 * x64.mean((0, 1)), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(up["batch_stats"]["var"], 0.9 + 0.1 * x64.var((0, 1)), rtol=1e-6)
    with pytest.raises(flax.errors.ModifyScopeVariableError):  # training needs mutable batch_stats
        bn.apply(v, x)
    with pytest.raises(ValueError, match="use_running_average"):  # flax's merge_param
        jnn.BatchNorm().apply(v, x)


def test_flax_behaviour_batch_norm_axis_name_is_optional_at_init() -> None:
    """A BatchNorm with ``axis_name`` initializes outside any mapping (flax drops the axis name
    during init), and one layer called twice shares its variables, left as initialized."""

    def twice(api):
        class Twice(api.Module):
            @api.compact
            def __call__(self, x):
                norm = api.BatchNorm(name="norm", use_running_average=False, axis_name="batch")
                x = norm(x)
                return x, norm(x)

        return Twice()

    x = _x("float32", offset=1.0, shape=(6, 4))
    (y1, y2), v = twice(jnn).init_with_output(jax.random.key(0), x)
    with standard:
        (f1, f2), v_flax = twice(fnn).init_with_output(jax.random.key(0), x)
    _same_tree(v, v_flax)
    np.testing.assert_array_equal(v["batch_stats"]["norm"]["var"], np.ones(4))
    np.testing.assert_allclose(y1, f1, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(y2, f2, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("api", ["linen", "nnx"])
def test_flax_behaviour_batch_norm_axis_name_across_devices(api: str) -> None:
    """The batch split across a mapped axis (``vmap`` with ``axis_name``, as ``pmap`` splits it
    across devices): the statistics, and the running statistics, are the whole batch's."""
    x = _x("float32", offset=2.0, shape=(4, 8, 6))  # 4 devices x 8 samples x 6 features
    whole = x.reshape(32, 6)
    if api == "linen":
        bn = jnn.BatchNorm(use_running_average=False, axis_name="devices", momentum=0.9)
        v = bn.init(jax.random.key(0), x[0])
        y, up = jax.vmap(lambda xb: bn.apply(v, xb, mutable=["batch_stats"]), axis_name="devices")(x)
        new_mean = up["batch_stats"]["mean"][0]
        np.testing.assert_allclose(up["batch_stats"]["mean"], jnp.broadcast_to(new_mean, (4, 6)), rtol=1e-6)
    else:
        bn = jnx.BatchNorm(6, axis_name="devices", momentum=0.9, rngs=fnnx.Rngs(0))
        graphdef, state = fnnx.split(bn)

        def step(state, xb):
            m = fnnx.merge(graphdef, state)
            return m(xb), m.mean[...]

        y, means = jax.vmap(step, in_axes=(None, 0), axis_name="devices")(state, x)
        new_mean = means[0]
    ref, mean, _ = _stat_reference(whole, "BatchNorm", {})
    np.testing.assert_allclose(np.asarray(y).reshape(32, 6), ref, atol=2e-6)
    np.testing.assert_allclose(new_mean, 0.1 * mean, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("api", ["linen", "nnx"])
def test_flax_behaviour_group_norm_groups_and_sizes(api: str) -> None:
    """GroupNorm(num_groups=2) of 32 channels is the reshaped statistics over each half of the
    channels and every non-batch axis; ``group_size=16`` is the same layer; one group is a
    LayerNorm over every non-batch axis; groups of one channel are an InstanceNorm, itself a
    LayerNorm over the spatial axes (and a GroupNorm with as many groups as channels)."""
    x = jax.random.normal(jax.random.key(0), (2, 5, 4, 4, 32))
    kw = {"use_bias": False, "use_scale": False, "epsilon": 1e-5}
    x_gr = np.asarray(x, np.float64).reshape(2, 5, 4, 4, 2, 16)
    mu, var = x_gr.mean((1, 2, 3, 5), keepdims=True), x_gr.var((1, 2, 3, 5), keepdims=True)
    expected = ((x_gr - mu) / np.sqrt(var + 1e-5)).reshape(x.shape)

    def run(kind: str, **options):
        if api == "linen":
            m = getattr(jnn, kind)(**options)
            return m.apply(m.init(jax.random.key(1), x), x)
        return getattr(jnx, kind)(32, **options, rngs=fnnx.Rngs(0))(x)

    by_groups = run("GroupNorm", num_groups=2, **kw)
    assert by_groups.dtype == x.dtype and by_groups.shape == x.shape
    np.testing.assert_allclose(by_groups, expected, atol=2e-6)
    np.testing.assert_array_equal(run("GroupNorm", num_groups=None, group_size=16, **kw), by_groups)
    np.testing.assert_allclose(run("GroupNorm", num_groups=1, **kw), run("LayerNorm", reduction_axes=(1, 2, 3, 4), feature_axes=-1, **kw), atol=2e-6)
    instance = run("InstanceNorm", **kw)
    np.testing.assert_allclose(run("GroupNorm", num_groups=None, group_size=1, **kw), instance, atol=2e-6)
    np.testing.assert_allclose(run("GroupNorm", num_groups=32, **kw), instance, atol=2e-6)
    np.testing.assert_allclose(run("LayerNorm", reduction_axes=(1, 2, 3), feature_axes=-1, **kw), instance, atol=2e-6)


def test_flax_behaviour_group_norm_errors() -> None:
    """flax raises ValueError for a group count that does not divide the channels, for both or
    neither of num_groups and group_size, and for reduction axes without the channels."""
    x = jnp.ones((2, 4, 4, 32))
    bad = [
        {"num_groups": 3}, {"num_groups": None, "group_size": 5}, {"num_groups": 4, "group_size": 8},
        {"num_groups": None}, {"num_groups": 0}, {"num_groups": 4, "reduction_axes": (1, 2)},
    ]
    for kw in bad:
        for cls in (fnn.GroupNorm, jnn.GroupNorm):
            with pytest.raises(ValueError):
                cls(**kw).init(jax.random.key(0), x)
    with pytest.raises(ValueError, match="jln.flax.nnx.GroupNorm: the reduction axes must include the last"):
        jnx.GroupNorm(32, num_groups=4, reduction_axes=(1, 2), rngs=fnnx.Rngs(0))(x)
    with pytest.raises(ValueError, match="jln.flax.nnx.GroupNorm: x's last axis must hold the 32 channels"):
        jnx.GroupNorm(32, num_groups=4, rngs=fnnx.Rngs(0))(jnp.ones((2, 16)))
    with pytest.raises(ValueError, match="Number of groups"):  # flax's constructor check, kept
        jnx.GroupNorm(32, num_groups=3, rngs=fnnx.Rngs(0))


def test_flax_behaviour_instance_norm_feature_axes() -> None:
    """InstanceNorm's parameters span ``feature_axes`` and every other non-batch axis is
    reduced; the batch axis cannot be a feature axis."""
    x = _x("float32", offset=1.0, shape=(2, 3, 4, 5))
    for faxes in (-1, 1, (1, -1), (-2, -1), (1, 2, 3)):
        m = jnn.InstanceNorm(feature_axes=faxes, **INITS)
        v = m.init(jax.random.key(0), x)
        sizes = tuple(x.shape[a] for a in _axes(faxes, 4))
        assert v["params"]["scale"].shape == v["params"]["bias"].shape == sizes
        p = v["params"]
        ref = _stat_reference(x, "InstanceNorm", {"feature_axes": faxes}, p["scale"], p["bias"])[0]
        _assert_near(m.apply(v, x), ref, p["scale"], str(faxes))
    for cls in (fnn.InstanceNorm, jnn.InstanceNorm):
        with pytest.raises(ValueError):
            cls(feature_axes=(0, -1)).init(jax.random.key(0), x)
    with pytest.raises(ValueError, match="jln.flax.nnx.InstanceNorm: feature_axes may not include axis 0"):
        jnx.InstanceNorm(5, feature_axes=0, rngs=fnnx.Rngs(0))(x)


@pytest.mark.parametrize("api", ["linen", pytest.param("nnx", marks=pytest.mark.slow)])
@pytest.mark.parametrize("kind", STAT_NORMS)
@pytest.mark.parametrize("offset", [0.0, 1e4])
def test_stat_norms_mask(api: str, kind: str, offset: float) -> None:
    """``mask``: the statistics (and BatchNorm's running statistics) of the selected elements,
    every element normalized with them; against float64 and flax's two-pass."""
    x = _x("float32", offset=offset, shape=(4, 6, 16))
    mask = jax.random.bernoulli(jax.random.key(9), 0.6, x.shape).at[:, 0].set(True)
    kw = {"num_groups": 4} if kind == "GroupNorm" else {}
    call = {"use_running_average": False} if kind == "BatchNorm" else {}
    ref, mean, var = _stat_reference(x, kind, kw, mask=mask)
    if api == "linen":
        m_j, m_f = getattr(jnn, kind)(**kw), getattr(fnn, kind)(use_fast_variance=False, **kw)
        v = m_f.init(jax.random.key(0), x, **call)
        mut = ["batch_stats"] if kind == "BatchNorm" else False
        y = m_j.apply(v, x, mask=mask, mutable=mut, **call)
        with standard:
            y_flax = m_f.apply(v, x, mask=mask, mutable=mut, **call)
        if mut:
            (y, up), (y_flax, _) = y, y_flax
            np.testing.assert_allclose(up["batch_stats"]["mean"], 0.01 * mean, rtol=1e-5, atol=1e-9 * (1 + offset))
            np.testing.assert_allclose(up["batch_stats"]["var"], 0.99 + 0.01 * var, rtol=1e-6)
    else:
        m_j = getattr(jnx, kind)(16, rngs=fnnx.Rngs(0), **kw)
        m_f = getattr(fnnx, kind)(16, use_fast_variance=False, rngs=fnnx.Rngs(0), **kw)
        y = m_j(x, mask=mask, **call)
        with standard:
            y_flax = m_f(x, mask=mask, **call)
        if kind == "BatchNorm":
            np.testing.assert_allclose(m_j.mean[...], 0.01 * mean, rtol=1e-5, atol=1e-9 * (1 + offset))
    assert y.dtype == y_flax.dtype
    assert np.abs(np.asarray(y, np.float64) - ref).max() < 1e-5 * (1 + np.abs(ref).max())
    if offset == 0.0:
        np.testing.assert_allclose(y, y_flax, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", STAT_NORMS)
def test_stat_norms_gradients_match_flax(kind: str) -> None:
    """Reverse mode through jln.flax equals flax's two-pass (x, scale and bias)."""
    x = _x("float32", offset=1.0, shape=(4, 5, 16))
    kw = {"num_groups": 4} if kind == "GroupNorm" else {}
    call = {"use_running_average": False} if kind == "BatchNorm" else {}
    m_j, m_f = getattr(jnn, kind)(**kw), getattr(fnn, kind)(use_fast_variance=False, **kw)
    v = m_f.init(jax.random.key(0), x, **call)
    params, rest = _perturbed(v["params"], 2), {k: a for k, a in v.items() if k != "params"}
    ct = jax.random.normal(jax.random.key(5), x.shape)

    def grads(m):
        def loss(x, p):
            if rest:
                out = m.apply({"params": p, **rest}, x, mutable=list(rest), **call)[0]
            else:
                out = m.apply({"params": p}, x)
            return jnp.sum(out * ct)

        return jax.grad(loss, argnums=(0, 1))(x, params)

    with standard:
        g_f = grads(m_f)
    for a, b in zip(jax.tree.leaves(grads(m_j)), jax.tree.leaves(g_f), strict=True):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("kind", ["GroupNorm", pytest.param("InstanceNorm", marks=pytest.mark.slow)])
def test_stat_norms_axis_name_vmap(kind: str) -> None:
    """Each sample's rows split across a mapped axis (the spatial axis, by blocks): the
    statistics are the whole row's, as flax's pmean gives."""
    x = _x("float32", offset=1.0, shape=(4, 2, 6, 8))  # 4 blocks of the spatial axis of (2, 24, 8)
    kw = {"num_groups": 2} if kind == "GroupNorm" else {}
    v = getattr(fnn, kind)(**kw).init(jax.random.key(0), x[0])

    def apply(cls, **more):
        m = cls(axis_name="blocks", **kw, **more)
        return jax.vmap(lambda xb: m.apply(v, xb), axis_name="blocks")(x)

    with standard:
        y_flax = apply(getattr(fnn, kind), use_fast_variance=False)
    y = apply(getattr(jnn, kind))
    np.testing.assert_allclose(y, y_flax, rtol=1e-5, atol=1e-5)
    whole = jnp.moveaxis(x, 0, 2).reshape(2, 24, 8)
    ref = _stat_reference(whole, kind, kw)[0]
    np.testing.assert_allclose(np.asarray(jnp.moveaxis(y, 0, 2).reshape(2, 24, 8)), ref, atol=2e-6)
    m_n = getattr(jnx, kind)(8, axis_name="blocks", rngs=fnnx.Rngs(0), **kw)
    np.testing.assert_allclose(jax.vmap(lambda xb: m_n(xb), axis_name="blocks")(x), y, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("api", ["linen", "nnx"])
@pytest.mark.parametrize("kind", STAT_NORMS)
def test_stat_norms_float64_where_flax_computes_in_float64(api: str, kind: str) -> None:
    """float64 input (or dtype=float64) under x64: float64 statistics, result and (BatchNorm)
    running statistics, as flax."""
    with jax.enable_x64(True):
        x = 1e6 + jax.random.normal(jax.random.key(0), (8, 4, 16), jnp.float64)
        for kw in ({}, {"dtype": jnp.float64}):
            xin = x if not kw else x.astype(jnp.float32)
            full = {"num_groups": 4, **kw} if kind == "GroupNorm" else kw
            y = _run_stat(api, kind, xin, full, mod_api=jnn if api == "linen" else jnx)
            with standard:
                flax_kw = {**full, "use_fast_variance": False}
                y_flax = _run_stat(api, kind, xin, flax_kw, mod_api=fnn if api == "linen" else fnnx)
            assert y.dtype == y_flax.dtype == jnp.float64
            ref = _stat_reference(xin, kind, full)[0]
            assert np.abs(np.asarray(y) - ref).max() < 1e-9


@pytest.mark.parametrize("kind", STAT_NORMS)
def test_stat_norms_integer_and_complex_inputs_follow_flax(kind: str) -> None:
    """Integer input is normalized in float32 (flax's dtype); complex input is flax's own
    ``__call__`` (jln's statistics are real), BatchNorm's running statistics included."""
    kw = {"num_groups": 2} if kind == "GroupNorm" else {}
    call = {"use_running_average": False} if kind == "BatchNorm" else {}
    mut = ["batch_stats"] if kind == "BatchNorm" else False
    xi = jnp.arange(48, dtype=jnp.int32).reshape(2, 6, 4) % 7
    with standard:
        v = getattr(fnn, kind)(**kw).init(jax.random.key(0), xi, **call)
        y_flax = getattr(fnn, kind)(use_fast_variance=False, **kw).apply(v, xi, mutable=mut, **call)
    y = getattr(jnn, kind)(**kw).apply(v, xi, mutable=mut, **call)
    y, y_flax = (y[0], y_flax[0]) if mut else (y, y_flax)
    assert y.dtype == y_flax.dtype == jnp.float32
    np.testing.assert_allclose(y, y_flax, rtol=1e-5, atol=1e-5)
    xc = jax.lax.complex(xi.astype(jnp.float32), xi[::-1].astype(jnp.float32))
    with standard:
        vc = getattr(fnn, kind)(**kw).init(jax.random.key(0), xc, **call)
        out_j = getattr(jnn, kind)(**kw).apply(vc, xc, mutable=mut, **call)
        out_f = getattr(fnn, kind)(**kw).apply(vc, xc, mutable=mut, **call)
        for a, b in zip(jax.tree.leaves(out_j), jax.tree.leaves(out_f), strict=True):
            np.testing.assert_array_equal(a, b)
        n = getattr(jnx, kind)(4, rngs=fnnx.Rngs(0), **kw)
        with warnings.catch_warnings():  # flax's NNX BatchNorm stores complex statistics in float32
            warnings.simplefilter("ignore", np.exceptions.ComplexWarning)
            np.testing.assert_array_equal(n(xc, **call), getattr(fnnx, kind)(4, rngs=fnnx.Rngs(0), **kw)(xc, **call))


def test_nnx_group_norm_partial_reduction_axes() -> None:
    """Reduction axes that leave out a spatial axis: jln.flax.nnx takes each group of
    consecutive channels, as flax.linen (and jln.flax.linen) do; flax.nnx's own GroupNorm
    spreads its statistics over the wrong channels there, so it is not the reference."""
    x = _x("float32", offset=1.0, shape=STAT_SHAPE) + jnp.arange(16.0)[None, None, None]  # channels apart
    kw = {"num_groups": 4, "reduction_axes": (2, 3)}
    y = jnx.GroupNorm(16, rngs=fnnx.Rngs(0), **kw)(x)
    ref = _stat_reference(x, "GroupNorm", kw)[0]
    _assert_near(y, ref)
    lin = jnn.GroupNorm(**kw)
    np.testing.assert_array_equal(y, lin.apply(lin.init(jax.random.key(0), x), x))
    with standard:
        y_flax_nnx = fnnx.GroupNorm(16, rngs=fnnx.Rngs(0), use_fast_variance=False, **kw)(x)
    assert np.abs(np.asarray(y_flax_nnx, np.float64) - ref).max() > 0.1


def test_stat_norms_compute_as_jln_core_functions() -> None:
    """In torch's layout terms, jln.flax's GroupNorm, InstanceNorm and BatchNorm are jln's core
    functions (jln.group_norm, jln.instance_norm, jln.batch_norm) with flax's epsilon: the same
    outputs, bit for bit."""
    import jln

    x = _x("float32", offset=3.0, shape=(4, 6, 5, 16))
    scale, bias = 1 + 0.1 * _x("float32", seed=1, shape=(16,)), _x("float32", seed=2, shape=(16,))
    params = {"params": {"scale": scale, "bias": bias}}
    # both jitted (the core functions compile eagerly called code; op by op rounds otherwise)
    g = jax.jit(jnn.GroupNorm(num_groups=4).apply)(params, x)
    np.testing.assert_array_equal(g, jln.group_norm(x, 4, scale, bias, eps=1e-6, channel_axis=-1))
    i = jax.jit(jnn.InstanceNorm().apply)(params, x)
    np.testing.assert_array_equal(i, jln.instance_norm(x, None, None, scale, bias, eps=1e-6, channel_axis=-1)[0])
    stats = {"batch_stats": {"mean": jnp.zeros(16), "var": jnp.ones(16)}}
    b, _ = jax.jit(lambda v, x: jnn.BatchNorm(use_running_average=False).apply(v, x, mutable=["batch_stats"]))({**params, **stats}, x)
    b_core, core_stats = jln.batch_norm(x, jnp.zeros(16), jnp.ones(16), scale, bias, training=True, momentum=0.01, channel_axis=-1)
    np.testing.assert_array_equal(b, b_core)
    # the running variance is where the two conventions part: torch's unbiased, flax's biased
    _, up = jnn.BatchNorm(use_running_average=False).apply({**params, **stats}, x, mutable=["batch_stats"])
    n = x.size // 16
    np.testing.assert_allclose((np.asarray(core_stats.var) - 0.99) * (n - 1) / n, np.asarray(up["batch_stats"]["var"]) - 0.99, rtol=1e-4)


# --- the whole of flax's namespace -------------------------------------------------------------


@pytest.mark.parametrize("api", ["linen", "nnx"])
def test_namespace_is_flax_with_jln_norms(api: str) -> None:
    """``jln.flax.<api>`` has every public name of ``flax.<api>`` and no other; all are flax's
    own objects but the five norms, subclasses of flax's; and the names type checkers read
    (its ``TYPE_CHECKING`` imports) are the installed flax's (update them with flax)."""
    import ast
    import importlib
    import inspect

    theirs, ours = importlib.import_module(f"flax.{api}"), importlib.import_module(f"jln.flax.{api}")

    def public(m) -> set[str]:
        return {k for k in vars(m) if not k.startswith("_")}

    assert public(ours) == public(theirs)
    assert all(getattr(ours, k) is getattr(theirs, k) for k in public(theirs) - set(NORMS))
    for kind in NORMS:
        assert getattr(ours, kind).__bases__ == (getattr(theirs, kind),)
    tree = ast.parse(inspect.getsource(ours))
    (block,) = [n for n in tree.body if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test)]
    listed = {a.name for n in block.body if isinstance(n, ast.ImportFrom) for a in n.names if a.asname == a.name}
    missing, stale = public(theirs) - set(NORMS) - listed, listed - public(theirs)
    assert not missing and not stale, f"jln/flax/{api}.py's TYPE_CHECKING list: add {sorted(missing)}, drop {sorted(stale)}"


def _resnet(nn, **norm_kw):
    """A small ResNet-style network written against a ``linen`` namespace ``nn``: a stem conv,
    BatchNorm, a residual block with GroupNorm, pooling and a Dense head."""

    class Block(nn.Module):
        features: int

        @nn.compact
        def __call__(self, x, train: bool):
            h = nn.Conv(self.features, (3, 3), use_bias=False)(x)
            h = nn.BatchNorm(use_running_average=not train, **norm_kw)(h)
            h = nn.Conv(self.features, (3, 3))(nn.relu(h))
            h = nn.GroupNorm(num_groups=4, **norm_kw)(h)
            return nn.relu(x + h)

    class Net(nn.Module):
        @nn.compact
        def __call__(self, x, train: bool = False):
            x = nn.Conv(16, (3, 3))(x)
            x = nn.relu(nn.BatchNorm(use_running_average=not train, momentum=0.9, **norm_kw)(x))
            x = Block(16)(x, train)
            x = nn.LayerNorm(**norm_kw)(jnp.mean(x, axis=(1, 2)))
            x = nn.Dropout(0.5, deterministic=not train)(x)
            return nn.Dense(10)(x)

    return Net()


@pytest.mark.parametrize("offset", [pytest.param(0.0, marks=pytest.mark.slow), 1e3])
def test_linen_resnet_import_swap(offset: float) -> None:
    """The same network from ``from jln.flax import linen as nn`` and from flax: the same
    variables from the same key, training steps with the same outputs and batch statistics
    (flax's two-pass), evaluation too, at an input offset too."""
    x = _x("float32", offset=offset, shape=(8, 8, 8, 3))
    net_j, net_f = _resnet(jnn), _resnet(fnn, use_fast_variance=False)
    v_j = net_j.init(jax.random.key(0), x)
    with standard:
        v_f = net_f.init(jax.random.key(0), x)
    _same_tree(v_j, v_f)
    assert jax.tree.map(jnp.shape, v_j["batch_stats"]) == {
        "BatchNorm_0": {"mean": (16,), "var": (16,)}, "Block_0": {"BatchNorm_0": {"mean": (16,), "var": (16,)}}}
    rngs = {"dropout": jax.random.key(1)}

    def step(net):
        return jax.jit(lambda v, x: net.apply(v, x, train=True, rngs=rngs, mutable=["batch_stats"]))

    step_j, step_f = step(net_j), step(net_f)
    for _ in range(3):
        y_j, up_j = step_j(v_j, x)
        with standard:
            y_f, up_f = step_f(v_f, x)
        np.testing.assert_allclose(y_j, y_f, rtol=1e-4, atol=1e-4)
        for a, b in zip(jax.tree.leaves(up_j), jax.tree.leaves(up_f), strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4 * (1 + offset))
        v_j, v_f = {**v_j, **up_j}, {**v_f, **up_f}
    with standard:
        y_eval_f = net_f.apply(v_f, x)
    np.testing.assert_allclose(net_j.apply(v_j, x), y_eval_f, rtol=1e-4, atol=1e-4)


def _nnx_resnet(nnx, rngs, **norm_kw):
    """The NNX twin of :func:`_resnet`, written against an ``nnx`` namespace."""

    class Net(nnx.Module):
        def __init__(self, rngs):
            self.stem = nnx.Conv(3, 16, (3, 3), rngs=rngs)
            self.bn0 = nnx.BatchNorm(16, momentum=0.9, rngs=rngs, **norm_kw)
            self.conv1 = nnx.Conv(16, 16, (3, 3), use_bias=False, rngs=rngs)
            self.bn1 = nnx.BatchNorm(16, rngs=rngs, **norm_kw)
            self.conv2 = nnx.Conv(16, 16, (3, 3), rngs=rngs)
            self.gn = nnx.GroupNorm(16, num_groups=4, rngs=rngs, **norm_kw)
            self.ln = nnx.LayerNorm(16, rngs=rngs, **norm_kw)
            self.drop = nnx.Dropout(0.5, rngs=rngs)
            self.head = nnx.Linear(16, 10, rngs=rngs)

        def __call__(self, x):
            x = nnx.relu(self.bn0(self.stem(x)))
            h = self.gn(self.conv2(nnx.relu(self.bn1(self.conv1(x)))))
            x = self.ln(jnp.mean(nnx.relu(x + h), axis=(1, 2)))
            return self.head(self.drop(x))

    return Net(rngs)


def test_nnx_resnet_import_swap() -> None:
    """The NNX network from ``from jln.flax import nnx`` and from flax: the same state and the
    same keys left in ``Rngs``; training and evaluation agree with flax's two-pass."""
    x = _x("float32", offset=1.0, shape=(8, 8, 8, 3))
    r_j, r_f = fnnx.Rngs(0), fnnx.Rngs(0)
    net_j, net_f = _nnx_resnet(jnx, r_j), _nnx_resnet(fnnx, r_f, use_fast_variance=False)
    _same_tree(fnnx.state(net_j), fnnx.state(net_f))
    for stream in ("params", "dropout"):
        np.testing.assert_array_equal(jax.random.key_data(getattr(r_j, stream)()), jax.random.key_data(getattr(r_f, stream)()))
    assert type(net_j.gn) is jnx.GroupNorm and type(net_j.stem) is fnnx.Conv
    for _ in range(3):
        y_j = net_j(x)
        with standard:
            y_f = net_f(x)
        np.testing.assert_allclose(y_j, y_f, rtol=1e-4, atol=1e-4)
    for a, b in zip(jax.tree.leaves(fnnx.state(net_j, fnnx.BatchStat)), jax.tree.leaves(fnnx.state(net_f, fnnx.BatchStat)), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
    net_j.eval()
    net_f.eval()
    with standard:
        y_f = net_f(x)
    np.testing.assert_allclose(net_j(x), y_f, rtol=1e-4, atol=1e-4)


F16_SLOW = pytest.param(jnp.float16, marks=pytest.mark.slow)


@pytest.mark.parametrize("kind", NORMS)
@pytest.mark.parametrize("dtype", [jnp.float32, F16_SLOW])
@pytest.mark.parametrize("param_dtype", [jnp.float32, F16_SLOW])
@pytest.mark.parametrize("masked", [False, True])
def test_flax_behaviour_nnx_and_linen_agree(kind: str, dtype, param_dtype, masked: bool) -> None:
    """A norm then a Dense layer, built with jln.flax's linen and NNX classes from the same
    parameters: the same outputs (flax's NNX casts ``x`` to ``dtype`` before the statistics
    where linen takes them from ``x``, so with float16 the two differ by float16's rounding,
    as flax's own classes do)."""
    n = 6
    extra = {"num_groups": 3} if kind == "GroupNorm" else {}
    call = {"use_running_average": False} if kind == "BatchNorm" else {}
    x = jax.random.normal(jax.random.key(0), (10, n))
    mask = np.array([True, False] * 3) if masked else None
    if masked and kind == "InstanceNorm":  # one value per row: a masked-out row has no statistics
        mask = np.ones((10, n), bool)
    opts = {"dtype": dtype, "param_dtype": param_dtype}

    class Lin(jnn.Module):
        @jnn.compact
        def __call__(self, x, mask=None):
            return jnn.Dense(4, **opts)(getattr(jnn, kind)(**opts, **extra, **call)(x, mask=mask))

    lm = Lin()
    v = lm.init(jax.random.key(1), x)
    y_lin = lm.apply(v, x, mask=mask, mutable=["batch_stats"])[0] if kind == "BatchNorm" else lm.apply(v, x, mask=mask)
    rngs = fnnx.Rngs(42)
    norm = getattr(jnx, kind)(n, rngs=rngs, **opts, **extra)
    dense = jnx.Linear(n, 4, rngs=rngs, **opts)
    dense.kernel[...] = v["params"]["Dense_0"]["kernel"]
    dense.bias[...] = v["params"]["Dense_0"]["bias"]
    y_nnx = dense(norm(x, mask=mask, **call))
    assert y_nnx.dtype == y_lin.dtype
    if dtype == jnp.float32:
        np.testing.assert_array_equal(y_nnx, y_lin)
    else:
        np.testing.assert_allclose(np.asarray(y_nnx, np.float32), np.asarray(y_lin, np.float32), rtol=2e-2, atol=2e-2)


def test_stat_norm_errors_name_the_class() -> None:
    x = jnp.ones((2, 4, 8))
    with pytest.raises(ValueError, match="jln.flax.linen.BatchNorm"):
        jnn.BatchNorm(use_running_average=False, axis=5).init(jax.random.key(0), x)
    with pytest.raises(ValueError, match="jln.flax.linen.GroupNorm"):
        jnn.GroupNorm(num_groups=2, epsilon=-1.0).init(jax.random.key(0), x)
    with pytest.raises(ValueError, match="jln.flax.nnx.InstanceNorm"):
        jnx.InstanceNorm(8, epsilon=-1.0, rngs=fnnx.Rngs(0))(x)
    with pytest.raises(ValueError, match="jln.flax.nnx.BatchNorm"):
        jnx.BatchNorm(8, epsilon=-1.0, rngs=fnnx.Rngs(0))(x)
