"""jln.linen / jln.nnx modules against torch.nn (forward and gradients), and linen == nnx.

Every torch module is built with torch.nn (or diffusers), its weights copied into the jln
parameter tree by hand with the contract's mapping (Linear.weight [out, in] -> kernel
[in, out]; norm weight -> scale), and compared on the same random inputs. Gradients are
compared for a fixed random cotangent ``g``: d/d(inputs, params) of ``sum(y * g)``.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jln import _monitor
from jln import linen as L
from jln import nnx as N

torch = pytest.importorskip("torch")

F32_TOL = dict(rtol=1e-5, atol=2e-5)
F64_TOL = dict(rtol=1e-10, atol=1e-11)


@pytest.fixture
def x64():
    with jax.enable_x64(True):
        yield


def rng(seed=0):
    return np.random.default_rng(seed)


def t(a, requires_grad=False):
    v = torch.from_numpy(np.asarray(a).copy())
    return v.requires_grad_(requires_grad)


def lin(layer):
    """torch nn.Linear -> {"kernel": [in, out], "bias": [out]} (numpy)."""
    p = {"kernel": layer.weight.detach().numpy().T.copy()}
    if layer.bias is not None:
        p["bias"] = layer.bias.detach().numpy().copy()
    return p


def torch_grads(module, inputs, out_fn, g):
    """Gradients of sum(out * g) w.r.t. the input tensors and named parameters of ``module``."""
    for p in module.parameters():
        p.grad = None
    out = out_fn(*inputs)
    (out * t(g)).sum().backward()
    return out.detach().numpy(), [i.grad.numpy() for i in inputs], {
        n: p.grad.numpy() for n, p in module.named_parameters()
    }


def jax_grads(fn, params, inputs, g):
    """(y, d inputs, d params) of sum(fn(params, *inputs) * g)."""
    y = fn(params, *inputs)

    def loss(p, *xs):
        return jnp.sum(fn(p, *xs) * g)

    gp, *gx = jax.grad(loss, argnums=tuple(range(len(inputs) + 1)))(params, *inputs)
    return y, gx, gp


def linen_fn(module, **kw):
    return lambda p, *xs: module.apply({"params": p}, *xs, **kw)


def nnx_fn(model):
    graphdef, _, rest = nnx.split(model, nnx.Param, ...)
    return lambda p, *xs: nnx.merge(graphdef, nnx.State(p), rest)(*xs)


def close(a, b, tol):
    np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), **tol)


def maxerr(a, b):
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))


def tree_close(a, b, tol):
    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    assert jax.tree.structure(jax.tree.map(np.asarray, a)) == jax.tree.structure(jax.tree.map(np.asarray, b))
    for u, v in zip(la, lb, strict=True):
        close(u, v, tol)


def to_jnp(tree, dtype=None):
    return jax.tree.map(lambda a: jnp.asarray(a, dtype), tree)


# ------------------------------------------------------------------------ LayerNorm / RMSNorm


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("normalized", [1, 2])
def test_layer_norm_matches_torch(dtype, normalized, request):
    if dtype == "float64":
        request.getfixturevalue("x64")
    r = rng(1)
    shape = (3, 5, 6)
    x = r.normal(size=shape).astype(dtype) * 3 + 1
    g = r.normal(size=shape).astype(dtype)
    tm = torch.nn.LayerNorm(shape[-normalized:], eps=1e-5, dtype=getattr(torch, dtype))
    with torch.no_grad():
        tm.weight.normal_()
        tm.bias.normal_()
    xt = t(x, True)
    ty, (tgx,), tgp = torch_grads(tm, [xt], tm, g)
    params = to_jnp({"scale": tm.weight.detach().numpy(), "bias": tm.bias.detach().numpy()})
    axis = tuple(range(-normalized, 0))
    tol = F32_TOL if dtype == "float32" else F64_TOL
    lm = L.LayerNorm(axis=axis, param_dtype=dtype)
    nm = N.LayerNorm(shape[-normalized:], axis=axis, param_dtype=dtype)
    for fn in (linen_fn(lm), nnx_fn(nm)):
        y, (gx,), gp = jax_grads(fn, params, [jnp.asarray(x)], jnp.asarray(g))
        assert y.dtype == jnp.dtype(dtype)
        close(y, ty, tol)
        close(gx, tgx, tol)
        close(gp["scale"], tgp["weight"], tol)
        close(gp["bias"], tgp["bias"], tol)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_rms_norm_matches_torch(dtype, request):
    if dtype == "float64":
        request.getfixturevalue("x64")
    r = rng(2)
    x = r.normal(size=(4, 3, 8)).astype(dtype)
    g = r.normal(size=x.shape).astype(dtype)
    tm = torch.nn.RMSNorm(8, dtype=getattr(torch, dtype))
    with torch.no_grad():
        tm.weight.normal_()
    ty, (tgx,), tgp = torch_grads(tm, [t(x, True)], tm, g)
    params = to_jnp({"scale": tm.weight.detach().numpy()})
    tol = F32_TOL if dtype == "float32" else F64_TOL
    for fn in (linen_fn(L.RMSNorm(param_dtype=dtype)), nnx_fn(N.RMSNorm(8, param_dtype=dtype))):
        y, (gx,), gp = jax_grads(fn, params, [jnp.asarray(x)], jnp.asarray(g))
        close(y, ty, tol)
        close(gx, tgx, tol)
        close(gp["scale"], tgp["weight"], tol)


@pytest.mark.parametrize("convention", ["torch", "llama", "gemma", "t5", "diffusers", "seed"])
@pytest.mark.parametrize("xdtype,pdtype", [("float32", "float32"), ("bfloat16", "float32"), ("bfloat16", "bfloat16")])
def test_rms_norm_modules_call_the_core(convention, xdtype, pdtype):
    """Module output (value and dtype) == jln.rms_norm with the same weight, every convention."""
    import jln

    r = rng(3)
    x = jnp.asarray(r.normal(size=(2, 3, 16)), xdtype)
    w = jnp.asarray(r.normal(size=(16,)), pdtype)
    b = jnp.asarray(r.normal(size=(16,)), pdtype)
    use_bias = convention == "diffusers"
    params = {"scale": w, "bias": b} if use_bias else {"scale": w}
    ref = jln.rms_norm(x, w, convention=convention, bias=b if use_bias else None)
    lm = L.RMSNorm(convention=convention, use_bias=use_bias, param_dtype=pdtype)
    nm = N.RMSNorm(16, convention=convention, use_bias=use_bias, param_dtype=pdtype)
    init = lm.init(jax.random.key(0), x)["params"]
    assert jax.tree.map(lambda a: (a.shape, a.dtype), init) == jax.tree.map(lambda a: (a.shape, a.dtype), params)
    assert jax.tree.map(lambda a: (a.shape, a.dtype), nnx.state(nm, nnx.Param).to_pure_dict()) == jax.tree.map(
        lambda a: (a.shape, a.dtype), params
    )
    for fn in (linen_fn(lm), nnx_fn(nm)):
        y = fn(params, x)
        assert y.dtype == ref.dtype
        np.testing.assert_array_equal(np.asarray(y, np.float32), np.asarray(ref, np.float32))


def test_norm_initial_params():
    x = jnp.ones((2, 5))
    p = L.LayerNorm().init(jax.random.key(0), x)["params"]
    np.testing.assert_array_equal(p["scale"], np.ones(5))
    np.testing.assert_array_equal(p["bias"], np.zeros(5))
    p = L.RMSNorm(convention="gemma").init(jax.random.key(0), x)["params"]
    np.testing.assert_array_equal(p["scale"], np.zeros(5))
    assert set(L.RMSNorm().init(jax.random.key(0), x)["params"]) == {"scale"}
    assert L.LayerNorm(use_scale=False, use_bias=False).init(jax.random.key(0), x) == {}
    assert set(nnx.state(N.LayerNorm(5, use_bias=False), nnx.Param).to_pure_dict()) == {"scale"}


@pytest.mark.parametrize("kind", ["layer", "rms/diffusers", "rms/gemma", "adaptive", "continuous"])
def test_norm_initializers(kind):
    # scale_init / bias_init as flax's: the norm's parameters start where the initializers put
    # them, the same in linen and nnx, and the modules then compute with them (the plain norms:
    # the core function with those parameters; the adaptive ones: linen and nnx alike on the
    # same parameter tree, whose norm/scale and norm/bias the initializers set)
    import jln

    x = jnp.asarray(rng(31).normal(size=(3, 5)), jnp.float32)
    c = jnp.asarray(rng(32).normal(size=(3, 2)), jnp.float32)
    inits = dict(scale_init=jax.nn.initializers.constant(2.0), bias_init=jax.nn.initializers.constant(0.5))
    keys, args, want = {"scale", "bias"}, (x,), None
    if kind == "layer":
        lm, nm = L.LayerNorm(**inits), N.LayerNorm(5, **inits, rngs=nnx.Rngs(0))
        want = jln.layer_norm(x, jnp.full(5, 2.0), jnp.full(5, 0.5))
    elif kind == "rms/diffusers":
        kw = dict(convention="diffusers", use_bias=True)
        lm, nm = L.RMSNorm(**kw, **inits), N.RMSNorm(5, **kw, **inits, rngs=nnx.Rngs(0))
        want = jln.rms_norm(x, jnp.full(5, 2.0), bias=jnp.full(5, 0.5), convention="diffusers")
    elif kind == "rms/gemma":  # gemma's default scale is 0 (it multiplies by 1 + scale)
        lm, nm = L.RMSNorm(convention="gemma", **inits), N.RMSNorm(5, convention="gemma", **inits, rngs=nnx.Rngs(0))
        want = jln.rms_norm(x, jnp.full(5, 2.0), convention="gemma")
        keys = {"scale"}
    elif kind == "adaptive":
        lm, nm = L.AdaptiveLayerNorm(features=5, **inits), N.AdaptiveLayerNorm(2, 5, **inits, rngs=nnx.Rngs(0))
        args = (x, c)
    else:
        lm, nm = L.AdaLNContinuous(features=5, **inits), N.AdaLNContinuous(2, 5, **inits, rngs=nnx.Rngs(0))
        args = (x, c)
    pl, pn = lm.init(jax.random.key(0), *args)["params"], nnx.state(nm, nnx.Param).to_pure_dict()
    norm_l, norm_n = (pl, pn) if want is not None else (pl["norm"], pn["norm"])
    assert set(norm_l) == set(norm_n) == keys
    for name, value in (("scale", 2.0), ("bias", 0.5)):
        if name in keys:
            np.testing.assert_array_equal(norm_l[name], np.full(5, value, np.float32))
            np.testing.assert_array_equal(norm_n[name], np.full(5, value, np.float32))
    if want is None:  # the adaptive modules: linen on nnx's parameter tree
        want = lm.apply({"params": pn}, *args)
    else:
        np.testing.assert_array_equal(lm.apply({"params": pl}, *args), want)
    np.testing.assert_array_equal(nm(*args), want)


@pytest.mark.parametrize("name", ["AdaptiveLayerNorm", "AdaLNZero", "AdaLNContinuous"])
def test_adaptive_projection_initializers(name):
    # the conditioning Dense (proj / linear) starts at its documented default, and its own
    # kernel/bias initializers replace that default, the same in linen and nnx
    prefix, group = ("proj", "proj") if name == "AdaptiveLayerNorm" else ("linear", "linear")
    d, c = 4, 16
    x, cond = jnp.ones((2, 3, d)), jnp.ones((2, c))

    def trees(**kw):
        lin = getattr(L, name)(features=d, **kw).init(jax.random.key(0), x, cond)["params"]
        nn_ = nnx.state(getattr(N, name)(c, d, **kw, rngs=nnx.Rngs(0)), nnx.Param).to_pure_dict()
        return lin[group], nn_[group]

    for tree in trees():
        assert tree["kernel"].shape == (c, (6 if name == "AdaLNZero" else 2) * d)
        if name == "AdaLNZero":  # adaLN-Zero
            np.testing.assert_array_equal(tree["kernel"], 0)
            np.testing.assert_array_equal(tree["bias"], 0)
        else:  # torch nn.Linear: kernel and bias U(±1/sqrt(fan_in)), fan_in = c
            bound = 1 / math.sqrt(c)
            for v in (tree["kernel"], tree["bias"]):
                assert 0 < float(jnp.max(jnp.abs(v))) <= bound
    inits = {f"{prefix}_kernel_init": jax.nn.initializers.constant(0.25),
             f"{prefix}_bias_init": jax.nn.initializers.constant(-0.5)}
    for tree in trees(**inits):
        np.testing.assert_array_equal(tree["kernel"], 0.25)
        np.testing.assert_array_equal(tree["bias"], -0.5)
    with pytest.raises(TypeError, match=rf"{name}.*{prefix}_kernel_init.*received 'xavier'"):
        getattr(N, name)(c, d, **{f"{prefix}_kernel_init": "xavier"}, rngs=nnx.Rngs(0))
    if name == "AdaLNZero":  # a random init needs rngs, as every nnx Dense does
        with pytest.raises(TypeError, match="rngs"):
            N.AdaLNZero(c, d, linear_kernel_init=jax.nn.initializers.normal(1.0))


def test_norm_initializers_take_keys_and_sharding_annotations():
    import flax.linen as nn

    x = jnp.ones((2, 4))
    normal = jax.nn.initializers.normal(1.0)
    # an initializer other than ones and zeros: linen draws from its params key, nnx from rngs
    # (required, as by flax's own nnx norms)
    a = L.LayerNorm(scale_init=normal).init(jax.random.key(0), x)["params"]["scale"]
    b = L.LayerNorm(scale_init=normal).init(jax.random.key(1), x)["params"]["scale"]
    assert a.shape == (4,) and not np.array_equal(a, b)
    with pytest.raises(TypeError, match="rngs"):
        N.LayerNorm(4, scale_init=normal)
    c = N.LayerNorm(4, scale_init=normal, rngs=nnx.Rngs(0)).scale[...]
    d = N.RMSNorm(4, scale_init=normal, rngs=nnx.Rngs(1)).scale[...]
    assert c.shape == (4,) and not np.array_equal(c, d)
    # sharding annotations, the way flax's own norms take them
    m = L.RMSNorm(scale_init=nn.with_logical_partitioning(nn.initializers.ones_init(), ("embed",)))
    v = m.init(jax.random.key(0), x)
    assert nn.get_partition_spec(v)["params"]["scale"] == jax.sharding.PartitionSpec("embed")
    # ones normalized: 1 / sqrt(1 + eps), eps torch's finfo(float32).eps
    np.testing.assert_allclose(m.apply(v, x), np.full((2, 4), 1 / np.sqrt(1 + np.finfo(np.float32).eps)), rtol=1e-7)
    with jax.set_mesh(jax.make_mesh((1,), ("embed",))):
        n = N.LayerNorm(4, bias_init=nnx.with_partitioning(nnx.initializers.zeros, ("embed",)), rngs=nnx.Rngs(0))
    spec = nnx.get_partition_spec(nnx.state(n, nnx.Param)).to_pure_dict()
    assert spec == {"scale": jax.sharding.PartitionSpec(), "bias": jax.sharding.PartitionSpec("embed")}
    # not an initializer: said at construction
    with pytest.raises(TypeError, match=r"scale_init.*received 2\.0"):
        N.LayerNorm(4, scale_init=2.0)
    with pytest.raises(TypeError, match=r"bias_init"):
        L.RMSNorm(convention="diffusers", use_bias=True, bias_init="zeros").init(jax.random.key(0), x)
    with pytest.raises(TypeError, match=r"AdaLNContinuous.*scale_init"):
        N.AdaLNContinuous(2, 4, scale_init=1, rngs=nnx.Rngs(0))


def test_norm_dtype_rules():
    r = rng(4)
    xb = jnp.asarray(r.normal(size=(2, 8)), jnp.bfloat16)
    xf = jnp.asarray(r.normal(size=(2, 8)), jnp.float32)
    # bf16 parameters are stored as bf16
    p = L.LayerNorm(param_dtype=jnp.bfloat16).init(jax.random.key(0), xf)["params"]
    assert p["scale"].dtype == jnp.bfloat16
    assert N.LayerNorm(8, param_dtype=jnp.bfloat16).scale[...].dtype == jnp.bfloat16
    for mk in (lambda **kw: L.LayerNorm(**kw), lambda **kw: N.LayerNorm(8, **kw)):
        # dtype=None: torch's rule, output in the input dtype (float32 params do not promote bf16)
        m = mk()
        fn = nnx_fn(m) if isinstance(m, nnx.Module) else linen_fn(m)
        params = {"scale": jnp.ones(8), "bias": jnp.zeros(8)}
        assert fn(params, xb).dtype == jnp.bfloat16
        assert fn(to_jnp(params, jnp.bfloat16), xf).dtype == jnp.float32
        # dtype=d: computes in and returns d
        m = mk(dtype=jnp.bfloat16)
        fn = nnx_fn(m) if isinstance(m, nnx.Module) else linen_fn(m)
        y = fn(params, xf)
        assert y.dtype == jnp.bfloat16
        import jln

        np.testing.assert_array_equal(
            np.asarray(y, np.float32), np.asarray(jln.layer_norm(xf.astype(jnp.bfloat16), *params.values()), np.float32)
        )
    # llama keeps its reference's rule: bf16 x, float32 weight -> float32
    m = L.RMSNorm(convention="llama")
    assert m.apply(m.init(jax.random.key(0), xb), xb).dtype == jnp.float32
    assert N.RMSNorm(8, convention="llama")(xb).dtype == jnp.float32
    assert N.RMSNorm(8, convention="llama", dtype=jnp.bfloat16)(xb).dtype == jnp.bfloat16


def test_norm_errors():
    x = jnp.ones((2, 4))
    with pytest.raises(ValueError, match="convention"):
        L.RMSNorm(convention="bogus").init(jax.random.key(0), x)
    with pytest.raises(ValueError, match="convention"):
        N.RMSNorm(4, convention="bogus")
    with pytest.raises(ValueError, match="use_bias"):
        N.RMSNorm(4, use_bias=True)
    with pytest.raises(ValueError, match="eps"):
        N.LayerNorm(4, eps=-1.0)
    with pytest.raises(ValueError, match="impl"):
        N.LayerNorm(4, impl="cuda")
    with pytest.raises(ValueError, match="num_features"):
        N.LayerNorm(0)
    with pytest.raises(ValueError, match=r"num_features=\(5,\)"):
        N.LayerNorm(5)(x)  # built for 5 features, called on 4
    with pytest.raises(TypeError, match="floating"):
        L.LayerNorm().init(jax.random.key(0), jnp.ones((2, 4), jnp.int32))
    with pytest.raises(ValueError, match="out of range"):
        L.LayerNorm(axis=3).init(jax.random.key(0), x)


# ------------------------------------------------------------------------ monitor


def np_row_stats(a, axes):
    a = np.asarray(a, np.float64)
    return a.mean(axis=axes), a.var(axis=axes), np.sqrt((a * a).sum(axis=axes))


def check_stats(stats, x, y, axes):
    assert set(stats) == set(_monitor.STAT_KEYS)
    for prefix, a in (("in", x), ("out", y)):
        mean, var, norm = np_row_stats(a, axes)
        for key, ref in (("mean", mean), ("var", var), ("norm", norm)):
            v = stats[f"{prefix}_{key}"]
            assert v.dtype == jnp.float32 and v.shape == ref.shape
            np.testing.assert_allclose(np.asarray(v), ref, rtol=2e-5, atol=2e-5)
    d = int(np.prod([np.shape(x)[a] for a in axes]))
    np.testing.assert_allclose(stats["sqrt_d"], np.sqrt(d), rtol=1e-7)


@pytest.mark.parametrize("kind", ["layer", "rms"])
def test_monitor_records_row_stats(kind):
    r = rng(5)
    x = jnp.asarray(r.normal(size=(3, 4, 6)) * 2 + 5, jnp.float32)
    axis = (-2, -1) if kind == "layer" else -1
    lm = L.LayerNorm(axis=axis, monitor=True) if kind == "layer" else L.RMSNorm(monitor=True)
    variables = lm.init(jax.random.key(0), x)
    assert "intermediates" not in variables or True
    y, state = lm.apply({"params": variables["params"]}, x, mutable=["intermediates"])
    (stats,) = state["intermediates"]["stats"]
    axes = tuple(a % 3 for a in np.atleast_1d(axis))
    check_stats(stats, x, y, axes)

    nm = N.LayerNorm((4, 6), axis=axis, monitor=True) if kind == "layer" else N.RMSNorm(6, monitor=True)
    y2, inter = nnx.capture(nm, nnx.Intermediate)(x)
    (nstats,) = inter["stats"]
    check_stats(nstats, x, y2, axes)
    tree_close(stats, nstats, dict(rtol=0, atol=0))
    # off by default: nothing recorded
    _, state = L.LayerNorm().apply(L.LayerNorm().init(jax.random.key(0), x), x, mutable=["intermediates"])
    assert not state.get("intermediates")


def test_monitor_does_not_change_gradients():
    x = jnp.asarray(rng(6).normal(size=(2, 8)), jnp.float32)
    on, off = L.LayerNorm(monitor=True), L.LayerNorm()
    p = off.init(jax.random.key(0), x)["params"]

    def loss(m):
        return lambda x: jnp.sum(m.apply({"params": p}, x, mutable=["intermediates"])[0] ** 3)

    np.testing.assert_array_equal(jax.grad(loss(on))(x), jax.grad(loss(off))(x))


# ------------------------------------------------------------------------ adaptive norms


def outputs_loss_fn(fn, gs):
    """Wrap a module fn returning an array or a tuple into one array-valued sum(out_i * g_i)."""

    def wrapped(p, *xs):
        out = fn(p, *xs)
        out = out if isinstance(out, tuple) else (out,)
        return sum(jnp.sum(o * g) for o, g in zip(out, gs, strict=True))

    return wrapped


def torch_tuple_grads(module, inputs, gs):
    for p in module.parameters():
        p.grad = None
    out = module(*inputs)
    out = out if isinstance(out, tuple) else (out,)
    sum((o * t(g)).sum() for o, g in zip(out, gs, strict=True)).backward()
    return [o.detach().numpy() for o in out], [i.grad.numpy() for i in inputs], {
        n: p.grad.numpy() for n, p in module.named_parameters()
    }


def jax_tuple_grads(fn, params, inputs, gs):
    out = fn(params, *inputs)
    out = out if isinstance(out, tuple) else (out,)
    loss = outputs_loss_fn(fn, [jnp.asarray(g) for g in gs])
    gp, *gx = jax.grad(loss, argnums=tuple(range(len(inputs) + 1)))(params, *inputs)
    return out, gx, gp


def randomize(module, scale=0.5):
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn_like(p) * scale)
    return module


class SeedAdaptiveLN(torch.nn.Module):
    """The seed's AdaptiveLN, as printed in the tutorial (torch)."""

    def __init__(self, d_model, condition_dim):
        super().__init__()
        self.proj = torch.nn.Linear(condition_dim, 2 * d_model)
        self.ln = torch.nn.LayerNorm(d_model)

    def forward(self, x, condition):
        gamma, beta = self.proj(condition).chunk(2, dim=-1)
        return self.ln(x) * (1 + gamma) + beta


def check_against_torch(tm, fns, params, inputs, tol, errors=None, key=None):
    """Forward and all gradients of every jln fn against the torch module (numpy inputs)."""
    r = rng(11)
    tin = [t(a, True) for a in inputs]
    with torch.no_grad():
        probe = tm(*[t(a) for a in inputs])
    probe = probe if isinstance(probe, tuple) else (probe,)
    gs = [r.normal(size=o.shape).astype(inputs[0].dtype) for o in probe]
    touts, tgx, tgp = torch_tuple_grads(tm, tin, gs)
    results = []
    for fn in fns:
        outs, gx, gp = jax_tuple_grads(fn, params, [jnp.asarray(a) for a in inputs], gs)
        for o, to in zip(outs, touts, strict=True):
            close(o, to, tol)
        for a, b in zip(gx, tgx, strict=True):
            close(a, b, tol)
        results.append((outs, gx, gp))
        if errors is not None:
            errors[key] = max(errors.get(key, 0.0), *(maxerr(o, to) for o, to in zip(outs, touts, strict=True)))
    return tgp, results


@pytest.mark.parametrize("cond_per_token", [True, False])
def test_adaptive_layer_norm_matches_seed(cond_per_token):
    r = rng(7)
    d, c = 8, 5
    x = r.normal(size=(2, 4, d)).astype("float32")
    cond = r.normal(size=(2, 4, c) if cond_per_token else (2, c)).astype("float32")
    tm = randomize(SeedAdaptiveLN(d, c))
    tref = tm if cond_per_token else _PerExample(tm)
    params = to_jnp({"proj": lin(tm.proj), "norm": {"scale": tm.ln.weight.detach().numpy(), "bias": tm.ln.bias.detach().numpy()}})
    fns = [linen_fn(L.AdaptiveLayerNorm(features=d)), nnx_fn(N.AdaptiveLayerNorm(c, d, rngs=nnx.Rngs(0)))]
    tgp, results = check_against_torch(tref, fns, params, [x, cond], F32_TOL)
    for _, _, gp in results:
        close(gp["proj"]["kernel"], tgp["proj.weight"].T if "proj.weight" in tgp else tgp["m.proj.weight"].T, F32_TOL)
        gpw = {k.removeprefix("m."): v for k, v in tgp.items()}
        close(gp["proj"]["bias"], gpw["proj.bias"], F32_TOL)
        close(gp["norm"]["scale"], gpw["ln.weight"], F32_TOL)
        close(gp["norm"]["bias"], gpw["ln.bias"], F32_TOL)


class _PerExample(torch.nn.Module):
    """Seed AdaptiveLN with a per-example condition [B, C] broadcast over tokens (DiT-style)."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x, cond):
        gamma, beta = self.m.proj(cond).chunk(2, dim=-1)
        return self.m.ln(x) * (1 + gamma[:, None]) + beta[:, None]


@pytest.mark.parametrize("num_chunks", [6, 3])
def test_ada_ln_zero_matches_diffusers(num_chunks):
    from diffusers.models.normalization import AdaLayerNormZero, AdaLayerNormZeroSingle

    r = rng(8)
    d = 8
    x = r.normal(size=(2, 5, d)).astype("float32")
    emb = r.normal(size=(2, d)).astype("float32")
    dm = AdaLayerNormZero(d) if num_chunks == 6 else AdaLayerNormZeroSingle(d)
    randomize(dm)

    class Wrap(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.dm = dm

        def forward(self, x, e):
            return tuple(self.dm(x, emb=e)) if num_chunks == 6 else tuple(self.dm(x, e))

    params = to_jnp({"linear": lin(dm.linear)})
    fns = [
        linen_fn(L.AdaLNZero(features=d, num_chunks=num_chunks)),
        nnx_fn(N.AdaLNZero(d, d, num_chunks=num_chunks)),
    ]
    tgp, results = check_against_torch(Wrap(), fns, params, [x, emb], F32_TOL)
    for outs, _, gp in results:
        assert len(outs) == (5 if num_chunks == 6 else 2)
        close(gp["linear"]["kernel"], tgp["dm.linear.weight"].T, F32_TOL)
        close(gp["linear"]["bias"], tgp["dm.linear.bias"], F32_TOL)


@pytest.mark.parametrize("norm_type", ["layer_norm", "rms_norm"])
@pytest.mark.parametrize("affine", [True, False])
def test_ada_ln_continuous_matches_diffusers(norm_type, affine):
    from diffusers.models.normalization import AdaLayerNormContinuous

    r = rng(9)
    d, c = 8, 6
    x = r.normal(size=(2, 5, d)).astype("float32")
    cond = r.normal(size=(2, c)).astype("float32")
    dm = randomize(AdaLayerNormContinuous(d, c, elementwise_affine=affine, eps=1e-5, norm_type=norm_type))
    params = {"linear": lin(dm.linear)}
    if affine:
        params["norm"] = {"scale": dm.norm.weight.detach().numpy()}
        if norm_type == "layer_norm":
            params["norm"]["bias"] = dm.norm.bias.detach().numpy()
    params = to_jnp(params)
    kw = dict(elementwise_affine=affine, norm_type=norm_type)
    lm, nm = L.AdaLNContinuous(features=d, **kw), N.AdaLNContinuous(c, d, rngs=nnx.Rngs(0), **kw)
    assert jax.tree.map(jnp.shape, lm.init(jax.random.key(0), x, cond)["params"]) == jax.tree.map(jnp.shape, params)
    assert jax.tree.map(jnp.shape, nnx.state(nm, nnx.Param).to_pure_dict()) == jax.tree.map(jnp.shape, params)
    tgp, results = check_against_torch(dm, [linen_fn(lm), nnx_fn(nm)], params, [x, cond], F32_TOL)
    for _, _, gp in results:
        close(gp["linear"]["kernel"], tgp["linear.weight"].T, F32_TOL)
        if affine:
            close(gp["norm"]["scale"], tgp["norm.weight"], F32_TOL)


def test_ada_ln_zero_starts_as_plain_layer_norm():
    import jln

    r = rng(10)
    x = jnp.asarray(r.normal(size=(2, 5, 8)), jnp.float32)
    emb = jnp.asarray(r.normal(size=(2, 8)), jnp.float32)
    ref = jln.layer_norm(x, eps=1e-6)
    m = L.AdaLNZero(features=8)
    outs_l = m.apply(m.init(jax.random.key(0), x, emb), x, emb)
    outs_n = N.AdaLNZero(8, 8)(x, emb)
    for outs in (outs_l, outs_n):
        np.testing.assert_array_equal(outs[0], ref)
        for gate_or_mod in outs[1:]:
            np.testing.assert_array_equal(gate_or_mod, np.zeros((2, 8)))


# ------------------------------------------------------------------------ TransformerEncoderLayer


def encoder_params_from_torch(tm):
    d = tm.self_attn.embed_dim
    w = tm.self_attn.in_proj_weight.detach().numpy()
    b = tm.self_attn.in_proj_bias.detach().numpy()
    attn = {
        name: {"kernel": w[i * d : (i + 1) * d].T.copy(), "bias": b[i * d : (i + 1) * d].copy()}
        for i, name in enumerate(("query", "key", "value"))
    }
    attn["out"] = lin(tm.self_attn.out_proj)
    norm = lambda n: {"scale": n.weight.detach().numpy(), "bias": n.bias.detach().numpy()}  # noqa: E731
    return {
        "self_attn": attn,
        "linear1": lin(tm.linear1),
        "linear2": lin(tm.linear2),
        "norm1": norm(tm.norm1),
        "norm2": norm(tm.norm2),
    }


def encoder_grads_to_torch_names(gp):
    """jln param-tree gradients in torch's names and layouts."""
    a = gp["self_attn"]
    return {
        "self_attn.in_proj_weight": np.concatenate([np.asarray(a[n]["kernel"]).T for n in ("query", "key", "value")]),
        "self_attn.in_proj_bias": np.concatenate([np.asarray(a[n]["bias"]) for n in ("query", "key", "value")]),
        "self_attn.out_proj.weight": np.asarray(a["out"]["kernel"]).T,
        "self_attn.out_proj.bias": a["out"]["bias"],
        "linear1.weight": np.asarray(gp["linear1"]["kernel"]).T,
        "linear1.bias": gp["linear1"]["bias"],
        "linear2.weight": np.asarray(gp["linear2"]["kernel"]).T,
        "linear2.bias": gp["linear2"]["bias"],
        "norm1.weight": gp["norm1"]["scale"],
        "norm1.bias": gp["norm1"]["bias"],
        "norm2.weight": gp["norm2"]["scale"],
        "norm2.bias": gp["norm2"]["bias"],
    }


ENC_ERRORS: dict = {}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.slow
def test_encoder_layer_matches_torch(norm_first, batch_first, activation, dtype, request):
    if dtype == "float64":
        request.getfixturevalue("x64")
    torch.manual_seed(0)
    r = rng(12)
    d, h, f, b, s = 8, 2, 16, 2, 5
    tm = torch.nn.TransformerEncoderLayer(
        d, h, f, dropout=0.1, activation=activation, batch_first=batch_first, norm_first=norm_first,
        dtype=getattr(torch, dtype),
    )
    randomize(tm, 0.4)
    tm.eval()
    shape = (b, s, d) if batch_first else (s, b, d)
    src = r.normal(size=shape).astype(dtype)
    mask = np.zeros((b, s), bool)
    mask[1, -2:] = True  # example 1 has two padding tokens

    class Wrap(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.tm = tm

        def forward(self, x):
            return self.tm(x, src_key_padding_mask=torch.from_numpy(mask))

    params = to_jnp(encoder_params_from_torch(tm))
    kw = dict(dim_feedforward=f, activation=activation, norm_first=norm_first, batch_first=batch_first)
    lm = L.TransformerEncoderLayer(d_model=d, nhead=h, param_dtype=dtype, **kw)
    nm = N.TransformerEncoderLayer(d, h, param_dtype=dtype, rngs=nnx.Rngs(0), **kw)
    nm.eval()
    jmask = jnp.asarray(mask)
    fns = [
        lambda p, x: lm.apply({"params": p}, x, src_key_padding_mask=jmask),
        lambda p, x: nnx_fn_kw(nm, src_key_padding_mask=jmask)(p, x),
    ]
    tol = F32_TOL if dtype == "float32" else F64_TOL
    tgp, results = check_against_torch(Wrap(), fns, params, [src], tol, ENC_ERRORS, (dtype, norm_first))
    for _, _, gp in results:
        named = encoder_grads_to_torch_names(gp)
        for name, g in tgp.items():
            close(named[name.removeprefix("tm.")], g, tol)


def nnx_fn_kw(model, **kw):
    graphdef, _, rest = nnx.split(model, nnx.Param, ...)
    return lambda p, *xs: nnx.merge(graphdef, nnx.State(p), rest)(*xs, **kw)


@pytest.mark.slow
def test_encoder_layer_dropout():
    r = rng(13)
    src = jnp.asarray(r.normal(size=(5, 2, 8)), jnp.float32)
    m = L.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16, dropout=0.3)
    v = m.init(jax.random.key(0), src)
    det = m.apply(v, src)
    a = m.apply(v, src, deterministic=False, rngs={"dropout": jax.random.key(1)})
    b = m.apply(v, src, deterministic=False, rngs={"dropout": jax.random.key(2)})
    a2 = m.apply(v, src, deterministic=False, rngs={"dropout": jax.random.key(1)})
    assert not np.allclose(a, det) and not np.allclose(a, b)
    np.testing.assert_array_equal(a, a2)
    with pytest.raises(Exception, match="dropout"):
        m.apply(v, src, deterministic=False)  # training needs the "dropout" rng stream
    m0 = L.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16, dropout=0.0)
    np.testing.assert_array_equal(m0.apply(v, src, deterministic=False), det)

    n = N.TransformerEncoderLayer(8, 2, 16, 0.3, rngs=nnx.Rngs(0))
    nnx.update(n, nnx.State(v["params"]))
    n.train()
    t1, t2 = n(src), n(src)
    assert not np.allclose(t1, t2)  # the dropout stream advances between calls
    n.eval()
    np.testing.assert_array_equal(n(src), det)
    n0 = N.TransformerEncoderLayer(8, 2, 16, 0.0, rngs=nnx.Rngs(0))
    nnx.update(n0, nnx.State(v["params"]))
    n0.train()
    np.testing.assert_array_equal(n0(src), det)
    # dropout is inverted (scaled by 1/(1-p)): the training mean stays near eval's
    mm = L.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16, dropout=0.3, norm_first=True)
    v2 = mm.init(jax.random.key(0), src)
    outs = jnp.stack([
        mm.apply(v2, src, deterministic=False, rngs={"dropout": jax.random.key(i)}) for i in range(40)
    ])
    assert float(jnp.abs(outs.mean(0) - mm.apply(v2, src)).mean()) < 0.25


def test_encoder_layer_fully_masked_row_is_finite():
    src = jnp.asarray(rng(14).normal(size=(2, 3, 8)), jnp.float32)
    m = N.TransformerEncoderLayer(8, 2, 16, batch_first=True, rngs=nnx.Rngs(0))
    m.eval()
    y = m(src, src_key_padding_mask=jnp.ones((2, 3), bool))
    assert bool(jnp.isfinite(y).all())


def test_encoder_layer_errors():
    with pytest.raises(ValueError, match="divisible"):
        N.TransformerEncoderLayer(10, 3, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="activation"):
        N.TransformerEncoderLayer(8, 2, activation="swish", rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="dropout"):
        N.TransformerEncoderLayer(8, 2, dropout=1.0, rngs=nnx.Rngs(0))
    with pytest.raises(TypeError, match="rngs"):
        N.TransformerEncoderLayer(8, 2)
    m = N.TransformerEncoderLayer(8, 2, 16, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match=r"\[seq, batch, d_model\]"):
        m(jnp.ones((5, 2, 6)))
    with pytest.raises(ValueError, match="src_key_padding_mask"):
        m(jnp.ones((5, 2, 8)), src_key_padding_mask=jnp.zeros((5, 2), bool))
    with pytest.raises(TypeError, match="src_key_padding_mask"):
        m(jnp.ones((5, 2, 8)), src_key_padding_mask=jnp.zeros((2, 5), jnp.int32))


@pytest.mark.slow
def test_encoder_layer_dtypes():
    src32 = jnp.asarray(rng(15).normal(size=(5, 2, 8)), jnp.float32)
    m = L.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16, param_dtype=jnp.bfloat16)
    v = m.init(jax.random.key(0), src32)
    assert all(a.dtype == jnp.bfloat16 for a in jax.tree.leaves(v))
    assert m.apply(v, src32).dtype == jnp.float32  # computes in the input dtype
    assert m.apply(v, src32.astype(jnp.bfloat16)).dtype == jnp.bfloat16
    mb = L.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16, dtype=jnp.bfloat16)
    vb = mb.init(jax.random.key(0), src32)
    assert all(a.dtype == jnp.float32 for a in jax.tree.leaves(vb))
    yb = mb.apply(vb, src32)
    assert yb.dtype == jnp.bfloat16
    # bf16 compute stays close to the float32 result on the same weights
    y32 = m.clone(param_dtype=jnp.float32).apply(vb, src32)
    assert float(jnp.abs(yb.astype(jnp.float32) - y32).max()) < 0.1


# ------------------------------------------------------------------------ DiT block


class TorchDiTBlock(torch.nn.Module):
    """DiT's block (Peebles and Xie) written directly in torch for the comparison."""

    def __init__(self, d, heads, mlp_ratio=4.0):
        super().__init__()
        self.heads = heads
        self.norm1 = torch.nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.norm2 = torch.nn.LayerNorm(d, elementwise_affine=False, eps=1e-6)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.proj = torch.nn.Linear(d, d)
        hidden = int(d * mlp_ratio)
        self.fc1 = torch.nn.Linear(d, hidden)
        self.fc2 = torch.nn.Linear(hidden, d)
        self.ada = torch.nn.Linear(d, 6 * d)

    def attn(self, x):
        b, n, d = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        o = torch.nn.functional.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2])
        return self.proj(o.transpose(1, 2).reshape(b, n, d))

    def forward(self, x, c):
        sh1, sc1, g1, sh2, sc2, g2 = self.ada(torch.nn.functional.silu(c)).chunk(6, dim=1)
        h = self.norm1(x) * (1 + sc1[:, None]) + sh1[:, None]
        x = x + g1[:, None] * self.attn(h)
        h = self.norm2(x) * (1 + sc2[:, None]) + sh2[:, None]
        m = self.fc2(torch.nn.functional.gelu(self.fc1(h), approximate="tanh"))
        return x + g2[:, None] * m


def dit_params_from_torch(tm):
    d = tm.proj.in_features
    w, b = tm.qkv.weight.detach().numpy(), tm.qkv.bias.detach().numpy()
    attn = {n: {"kernel": w[i * d : (i + 1) * d].T.copy(), "bias": b[i * d : (i + 1) * d].copy()} for i, n in enumerate(("query", "key", "value"))}
    attn["out"] = lin(tm.proj)
    return {"adaLN_modulation": lin(tm.ada), "attn": attn, "mlp": {"fc1": lin(tm.fc1), "fc2": lin(tm.fc2)}}


DIT_ERRORS: dict = {}


@pytest.mark.slow  # torch DiT forward and backward in three dtypes
def test_dit_block_matches_torch():
    torch.manual_seed(1)
    r = rng(16)
    d, heads = 8, 2
    tm = randomize(TorchDiTBlock(d, heads), 0.4)
    x = r.normal(size=(2, 5, d)).astype("float32")
    c = r.normal(size=(2, d)).astype("float32")
    params = to_jnp(dit_params_from_torch(tm))
    fns = [linen_fn(L.DiTBlock(hidden_size=d, num_heads=heads)), nnx_fn(N.DiTBlock(d, heads, rngs=nnx.Rngs(0)))]
    tgp, results = check_against_torch(tm, fns, params, [x, c], F32_TOL, DIT_ERRORS, "dit")
    # weight gradients sum over every token through attention and the MLP, where torch's and
    # XLA's float32 matmuls add in different orders (seen: 3e-5 on values of 0.3-0.8)
    grad_tol = dict(rtol=1e-4, atol=1e-4)
    for _, _, gp in results:
        close(gp["adaLN_modulation"]["kernel"], tgp["ada.weight"].T, grad_tol)
        close(gp["mlp"]["fc1"]["kernel"], tgp["fc1.weight"].T, grad_tol)
        qkv = np.concatenate([np.asarray(gp["attn"][n]["kernel"]).T for n in ("query", "key", "value")])
        close(qkv, tgp["qkv.weight"], grad_tol)


def test_dit_block_is_identity_at_init():
    r = rng(17)
    x = jnp.asarray(r.normal(size=(2, 5, 8)) * 3, jnp.float32)
    c = jnp.asarray(r.normal(size=(2, 8)), jnp.float32)
    m = L.DiTBlock(hidden_size=8, num_heads=2)
    v = m.init(jax.random.key(0), x, c)
    np.testing.assert_array_equal(m.apply(v, x, c), x)
    np.testing.assert_array_equal(N.DiTBlock(8, 2, rngs=nnx.Rngs(3))(x, c), x)
    # ...and only the adaLN Dense starts at zero: the attention and MLP are live
    assert float(jnp.abs(v["params"]["attn"]["query"]["kernel"]).sum()) > 0
    np.testing.assert_array_equal(v["params"]["adaLN_modulation"]["kernel"], np.zeros((8, 48)))
    # the first step moves it: the gradient w.r.t. the adaLN kernel is nonzero
    g = jax.grad(lambda p: jnp.sum(m.apply({"params": p}, x, c) ** 2))(v["params"])
    assert float(jnp.abs(g["adaLN_modulation"]["kernel"]).sum()) > 0


# ------------------------------------------------------------------------ linen == nnx, every module


def module_pairs():
    r = rng(18)
    x3 = jnp.asarray(r.normal(size=(2, 5, 8)), jnp.float32)
    c = jnp.asarray(r.normal(size=(2, 6)), jnp.float32)
    c8 = jnp.asarray(r.normal(size=(2, 8)), jnp.float32)
    k = nnx.Rngs(0)
    return {
        "LayerNorm": (L.LayerNorm(), N.LayerNorm(8), (x3,)),
        "RMSNorm": (L.RMSNorm(convention="gemma"), N.RMSNorm(8, convention="gemma"), (x3,)),
        "AdaptiveLayerNorm": (L.AdaptiveLayerNorm(features=8), N.AdaptiveLayerNorm(6, 8, rngs=k), (x3, c)),
        "AdaLNZero": (L.AdaLNZero(features=8), N.AdaLNZero(8, 8), (x3, c8)),
        "AdaLNContinuous": (L.AdaLNContinuous(features=8, norm_type="rms_norm"), N.AdaLNContinuous(6, 8, norm_type="rms_norm", rngs=k), (x3, c)),
        "TransformerEncoderLayer": (
            L.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16, norm_first=True),
            N.TransformerEncoderLayer(8, 2, 16, norm_first=True, rngs=k),
            (x3,),
        ),
        "DiTBlock": (L.DiTBlock(hidden_size=8, num_heads=2), N.DiTBlock(8, 2, rngs=k), (x3, c8)),
    }


@pytest.mark.parametrize("name", [n if n not in ("TransformerEncoderLayer", "DiTBlock") else pytest.param(n, marks=pytest.mark.slow)
                                  for n in module_pairs()])
def test_linen_equals_nnx(name):
    lm, nm, inputs = module_pairs()[name]
    if isinstance(nm, N.TransformerEncoderLayer):
        nm.eval()
    params = lm.init(jax.random.key(0), *inputs)["params"]
    # same tree (names, shapes, dtypes) from both front-ends
    spec = lambda tree: jax.tree.map(lambda a: (a.shape, a.dtype), tree)  # noqa: E731
    assert spec(params) == spec(nnx.state(nm, nnx.Param).to_pure_dict())
    # random values everywhere (zero-initialised Dense layers too)
    leaves, tdef = jax.tree.flatten(params)
    keys = jax.random.split(jax.random.key(1), len(leaves))
    params = jax.tree.unflatten(tdef, [0.3 * jax.random.normal(k_, a.shape, a.dtype) for k_, a in zip(keys, leaves, strict=True)])
    out_l = linen_fn(lm)(params, *inputs)
    out_n = nnx_fn(nm)(params, *inputs)
    tree_close(out_l, out_n, dict(rtol=0, atol=0))
    gs = [jnp.ones_like(o) for o in (out_l if isinstance(out_l, tuple) else (out_l,))]
    gl = jax.grad(outputs_loss_fn(linen_fn(lm), gs), argnums=(0, 1))(params, *inputs)
    gn = jax.grad(outputs_loss_fn(nnx_fn(nm), gs), argnums=(0, 1))(params, *inputs)
    tree_close(gl, gn, dict(rtol=0, atol=0))


# ------------------------------------------------------------------------ monitor in blocks, transforms


def test_encoder_layer_monitor():
    r = rng(19)
    src = jnp.asarray(r.normal(size=(5, 2, 8)) * 2 + 1, jnp.float32)
    m = L.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16, norm_first=True, monitor=True)
    v = m.init(jax.random.key(0), src)
    _, st = m.apply({"params": v["params"]}, src, mutable=["intermediates"])
    (stats,) = st["intermediates"]["stats"]
    assert set(stats) == {"norm1", "norm2"}
    import jln

    p = v["params"]["norm1"]
    xb = jnp.swapaxes(src, 0, 1)  # rows are [batch, seq] inside the layer
    check_stats(stats["norm1"], xb, jln.layer_norm(xb, p["scale"], p["bias"]), (2,))
    n = N.TransformerEncoderLayer(8, 2, 16, norm_first=True, monitor=True, rngs=nnx.Rngs(0))
    n.eval()
    nnx.update(n, nnx.State(v["params"]))
    _, inter = nnx.capture(n, nnx.Intermediate)(src)
    tree_close(inter["stats"][0], stats, dict(rtol=0, atol=0))


@pytest.mark.slow
def test_jit_grad_and_scan_over_layers():
    """jax.jit and jax.grad through both front-ends; lax.scan over a stack of linen layers."""
    r = rng(20)
    x = jnp.asarray(r.normal(size=(2, 5, 8)), jnp.float32)
    m = L.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16, norm_first=True, batch_first=True)
    layers = [m.init(jax.random.key(i), x)["params"] for i in range(3)]
    stacked = jax.tree.map(lambda *a: jnp.stack(a), *layers)

    def run_scan(p, x):
        return jax.lax.scan(lambda h, lp: (m.apply({"params": lp}, h), None), x, p)[0]

    def run_loop(p, x):
        for lp in layers_of(p):
            x = m.apply({"params": lp}, x)
        return x

    def layers_of(p):
        return [jax.tree.map(lambda a, i=i: a[i], p) for i in range(3)]

    y_scan = jax.jit(run_scan)(stacked, x)
    close(y_scan, run_loop(stacked, x), dict(rtol=1e-6, atol=1e-6))
    g_scan = jax.jit(jax.grad(lambda p, x: jnp.sum(run_scan(p, x) ** 2)))(stacked, x)
    g_loop = jax.grad(lambda p, x: jnp.sum(run_loop(p, x) ** 2))(stacked, x)
    tree_close(g_scan, g_loop, dict(rtol=1e-5, atol=1e-6))

    # nnx: nnx.jit + nnx.grad on a model (with the monitor's sow inside jit off)
    n = N.DiTBlock(8, 2, rngs=nnx.Rngs(0))
    c = jnp.asarray(r.normal(size=(2, 8)), jnp.float32)
    grads = nnx.jit(nnx.grad(lambda mod: jnp.sum(mod(x, c) ** 2)))(n)
    assert float(jnp.abs(grads["adaLN_modulation"]["kernel"][...]).sum()) > 0
    close(nnx.jit(lambda mod, x, c: mod(x, c))(n, x, c), x, dict(rtol=0, atol=0))


def test_shard_chunks_gives_each_device_its_block_of_every_chunk():
    """Device i's slice of the reordered axis is [chunk_0 block i, ..., chunk_{k-1} block i]."""
    from jln._distributed import shard_chunks

    k, s, b, c = 3, 4, 2, 5
    w = rng(30).normal(size=(c, k * s * b)).astype(np.float32)
    out = np.asarray(shard_chunks(jnp.asarray(w), k, s))
    for i in range(s):
        want = np.concatenate([w[:, j * s * b + i * b: j * s * b + (i + 1) * b] for j in range(k)], axis=1)
        np.testing.assert_array_equal(out[:, i * k * b: (i + 1) * k * b], want)
    np.testing.assert_array_equal(np.asarray(shard_chunks(out, k, s, inverse=True)), w)
    np.testing.assert_array_equal(np.asarray(shard_chunks(jnp.asarray(w.T), k, s, axis=0)), out.T)
    with pytest.raises(ValueError, match="not divisible"):
        shard_chunks(jnp.ones((4, 10)), 3, 2)
    with pytest.raises(ValueError, match="positive int"):
        shard_chunks(jnp.ones(8), 0, 2)


@pytest.mark.parametrize("kind", ["AdaptiveLayerNorm", "AdaLNZero", "AdaLNContinuous"])
@pytest.mark.slow
def test_adaptive_modules_take_axis_name(kind):
    """axis_name/axis_index_groups reach the core in both front-ends: inside vmap with the
    feature axis split into 2 blocks, the result equals the unsplit module (chunks laid out by
    shard_chunks); an unbound name raises the core's NameError in linen and nnx alike."""
    from jln._distributed import shard_chunks

    r = rng(31)
    x = jnp.asarray(r.normal(size=(2, 3, 8)), jnp.float32)
    c = jnp.asarray(r.normal(size=(2, 4)), jnp.float32)
    k = {"AdaptiveLayerNorm": 2, "AdaLNZero": 6, "AdaLNContinuous": 2}[kind]
    glob = getattr(L, kind)(features=8)
    p = glob.init(jax.random.key(0), x, c)["params"]
    p = jax.tree.map(lambda a: a + jnp.asarray(0.3 * r.normal(size=a.shape), a.dtype), p)
    ref = glob.apply({"params": p}, x, c)
    ref = ref if isinstance(ref, tuple) else (ref,)

    def split(path, a):
        if getattr(path[0], "key", "") in ("proj", "linear"):
            a = shard_chunks(a, k, 2)
        return jnp.stack(jnp.split(a, 2, axis=-1))  # [2 devices, ..., local]

    pl = jax.tree_util.tree_map_with_path(split, p)
    xl = jnp.stack(jnp.split(x, 2, axis=-1))
    local = getattr(L, kind)(features=4, axis_name="d")
    nmod = getattr(N, kind)(4, 4, axis_name="d", rngs=nnx.Rngs(0))
    for run in (linen_fn(local), nnx_fn(nmod)):
        got = jax.vmap(lambda p, x, run=run: run(p, x, c), axis_name="d")(pl, xl)
        got = got if isinstance(got, tuple) else (got,)
        for g, want in zip(got, ref, strict=True):
            close(jnp.concatenate(list(g), axis=-1), want, F32_TOL)
        with pytest.raises(NameError):
            run(jax.tree.map(lambda a: a[0], pl), xl[0], c)


#: NNX arguments linen infers from the first call's inputs (shapes), not fields
NNX_SHAPE_ARGS = {"num_features", "cond_features"}
MODULE_PAIRS = ["LayerNorm", "RMSNorm", "AdaptiveLayerNorm", "AdaLNZero", "AdaLNContinuous",
                "TransformerEncoderLayer", "DiTBlock"]


@pytest.mark.parametrize("name", MODULE_PAIRS)
def test_linen_and_nnx_take_the_same_options(name):
    # the two APIs must not drift apart: every linen field is an NNX argument of the same name,
    # in the same order and with the same default, and NNX adds only the shapes linen infers
    # (and rngs)
    import dataclasses
    import inspect

    fields = [f for f in dataclasses.fields(getattr(L, name)) if f.name not in ("parent", "name")]
    params = [p for p in inspect.signature(getattr(N, name).__init__).parameters.values()
              if p.name not in ("self", "rngs") and p.name not in NNX_SHAPE_ARGS]
    assert [f.name for f in fields] == [p.name for p in params]
    for f, p in zip(fields, params, strict=True):
        assert f.default is dataclasses.MISSING or f.default == p.default, (f.name, f.default, p.default)


@pytest.mark.parametrize("name", MODULE_PAIRS)
def test_nnx_graphdef_is_a_static_jit_argument(name):
    # the functional NNX pattern: split once, pass the GraphDef as a static argument of
    # jax.jit (it must hash, as flax's own modules' do) and the state as an array argument
    _, nm, inputs = module_pairs()[name]
    if isinstance(nm, N.TransformerEncoderLayer):
        nm.eval()
    gdef, state = nnx.split(nm)
    assert hash(gdef) == hash(nnx.split(nm)[0])
    run = jax.jit(lambda g, s, *a: nnx.merge(g, s)(*a), static_argnums=0)
    tree_close(run(gdef, state, *inputs), nm(*inputs), dict(rtol=0, atol=0))
    # list-valued options (axis_index_groups, axis) are kept as tuples, hashable too
    hash(nnx.split(N.LayerNorm(8, axis=[-1], axis_name="m", axis_index_groups=[[0, 1]]))[0])


def test_sizes_take_numpy_integers():
    # sizes computed with NumPy (np.prod of a shape, a config file) work in both APIs
    d, c = np.int64(8), np.int32(6)
    x = jnp.ones((2, 5, 8), jnp.float32)
    assert N.LayerNorm(d).num_features == (8,) and N.RMSNorm((d,)).num_features == (8,)
    assert N.AdaptiveLayerNorm(c, d, rngs=nnx.Rngs(0))(x, jnp.ones((2, 6))).shape == x.shape
    assert N.TransformerEncoderLayer(d, np.int64(2), np.int64(16), rngs=nnx.Rngs(0)).cfg.d_model == 8
    assert N.DiTBlock(d, np.int64(2), rngs=nnx.Rngs(0))(x, jnp.ones((2, 8))).shape == x.shape
    m = L.TransformerEncoderLayer(d_model=d, nhead=np.int64(2), dim_feedforward=np.int64(16))
    assert m.apply(m.init(jax.random.key(0), x), x).shape == x.shape
    # a float is still refused, saying what was received
    with pytest.raises(ValueError, match=r"num_features.*8\.0"):
        N.LayerNorm(8.0)
    with pytest.raises(ValueError, match=r"d_model.*8\.0"):
        N.TransformerEncoderLayer(8.0, 2)


def test_dit_block_mlp_size_error_names_the_hidden_size():
    with pytest.raises(ValueError, match=r"int\(hidden_size \* mlp_ratio\).*hidden_size=8, mlp_ratio=0\.01.*give 0"):
        N.DiTBlock(8, 2, mlp_ratio=0.01)
    with pytest.raises(ValueError, match="give 0"):
        L.DiTBlock(hidden_size=8, num_heads=2, mlp_ratio=0.01).init(
            jax.random.key(0), jnp.ones((1, 2, 8)), jnp.ones((1, 8)))


@pytest.mark.parametrize("api", ["linen", "nnx"])
@pytest.mark.slow
def test_encoder_layer_attention_masks_and_unbatched_input_match_torch(api):
    # torch's forward(src, src_mask, src_key_padding_mask, is_causal): every argument, checked
    # with jln.testing against torch itself (forward and the gradient w.r.t. src)
    from jln.interop import from_torch
    from jln.testing import assert_module_matches_torch

    torch.manual_seed(0)
    d, h, b, s = 8, 2, 2, 5
    tm = torch.nn.TransformerEncoderLayer(d, h, 16, dropout=0.0, batch_first=True)
    randomize(tm, 0.4)
    jm = from_torch(tm, api=api)
    r = rng(31)
    src = r.normal(size=(b, s, d)).astype(np.float32)
    causal = np.triu(np.ones((s, s), bool), k=1)
    per_head = r.random((b * h, s, s)) < 0.4
    per_head[:, :, 0] = False  # every query sees some key
    additive = (r.normal(size=(s, s)) * 2).astype(np.float32)
    pad = np.zeros((b, s), bool)
    pad[1, -2:] = True
    cases = {
        "causal bool": dict(src=src, src_mask=causal),
        "per-head bool and padding": dict(src=src, src_mask=per_head, src_key_padding_mask=pad),
        "additive float": dict(src=src, src_mask=additive),
        "unbatched": dict(src=src[0]),
        "unbatched, padding": dict(src=src[1], src_key_padding_mask=pad[1]),
    }
    for name, inputs in cases.items():
        res = assert_module_matches_torch(tm, jm, inputs=inputs, name=name)
        assert all(r_.passed for r_ in res) and {"out", "d src"} <= {r_.output for r_ in res}
    # is_causal=True alone applies the causal mask (torch wants the mask with the hint)
    if api == "linen":
        lmod, v = jm
        alone = lmod.apply(v, jnp.asarray(src), is_causal=True)
        with_mask = lmod.apply(v, jnp.asarray(src), jnp.asarray(causal))
    else:
        alone, with_mask = jm(jnp.asarray(src), is_causal=True), jm(jnp.asarray(src), jnp.asarray(causal))
    np.testing.assert_array_equal(alone, with_mask)
    want = tm(torch.from_numpy(src), torch.from_numpy(causal), is_causal=True).detach().numpy()
    np.testing.assert_allclose(alone, want, atol=2e-5, rtol=2e-5)
    # wrong mask shapes and dtypes say what torch accepts
    call = (lambda *a, **k: jm[0].apply(jm[1], *a, **k)) if api == "linen" else jm
    with pytest.raises(ValueError, match=r"\[seq, seq\] = \(5, 5\) or \[batch \* nhead, seq, seq\] = \(4, 5, 5\)"):
        call(jnp.asarray(src), jnp.zeros((3, 5, 5), bool))
    with pytest.raises(TypeError, match="src_mask.*bool array"):
        call(jnp.asarray(src), jnp.zeros((5, 5), jnp.int32))
    with pytest.raises(ValueError, match=r"\[seq\] = \(5,\)"):
        call(jnp.asarray(src[0]), src_key_padding_mask=jnp.zeros((2, 5), bool))


def test_nnx_norms_check_their_num_features():
    x = jnp.ones((2, 16), jnp.float32)
    for m in (N.LayerNorm(8), N.LayerNorm(8, use_scale=False, use_bias=False), N.RMSNorm(8, use_scale=False)):
        with pytest.raises(ValueError, match=r"built for num_features=\(8,\).*x.shape=\(2, 16\).*num_features=16"):
            m(x)
    with pytest.raises(ValueError, match=r"num_features=\(4, 16\)"):
        N.LayerNorm((3, 16), axis=(-2, -1))(jnp.ones((2, 4, 16)))
    assert N.LayerNorm((4, 16), axis=(-2, -1))(jnp.ones((2, 4, 16))).shape == (2, 4, 16)


def _std_close(a, want_std, rel, what):
    got = float(np.std(np.asarray(a, np.float64)))
    assert abs(got / want_std - 1) <= rel, f"{what}: std {got:.4g}, want {want_std:.4g}"


@pytest.mark.slow
def test_encoder_layer_initialises_as_torch():
    # every parameter drawn from torch's own distribution (checked against a torch-initialised
    # layer: same zeros, same spread; kernels have 128*128 draws, so 5% is ~10 standard errors)
    from jln.interop import from_torch

    d, f = 128, 256
    torch.manual_seed(0)
    _, tv = from_torch(torch.nn.TransformerEncoderLayer(d, 4, f))
    for params in (
        L.TransformerEncoderLayer(d_model=d, nhead=4, dim_feedforward=f).init(
            jax.random.key(0), jnp.ones((3, 1, d)))["params"],
        nnx.state(N.TransformerEncoderLayer(d, 4, f, rngs=nnx.Rngs(1)), nnx.Param).to_pure_dict(),
    ):
        flat_j = dict(jax.tree_util.tree_leaves_with_path(params))
        flat_t = dict(jax.tree_util.tree_leaves_with_path(tv["params"]))
        assert set(flat_j) == set(flat_t)
        for path, want in flat_t.items():
            got, what = flat_j[path], jax.tree_util.keystr(path)
            want = np.asarray(want, np.float64)
            if np.all(want == want.flat[0]):  # ones/zeros (norms, attention biases)
                np.testing.assert_array_equal(got, np.full(got.shape, want.flat[0]), err_msg=what)
                continue
            bound = np.max(np.abs(want))
            assert float(jnp.max(jnp.abs(got))) <= bound * 1.02, what
            _std_close(got, np.std(want), 0.05 if want.ndim == 2 else 0.25, what)


@pytest.mark.slow
def test_dit_block_initialises_as_dit_and_takes_initializers():
    d, h = 128, 512
    x, c = jnp.ones((1, 2, d)), jnp.ones((1, d))
    p = L.DiTBlock(hidden_size=d, num_heads=4).init(jax.random.key(0), x, c)["params"]
    pn = nnx.state(N.DiTBlock(d, 4, rngs=nnx.Rngs(0)), nnx.Param).to_pure_dict()
    for tree in (p, pn):
        np.testing.assert_array_equal(tree["adaLN_modulation"]["kernel"], 0)
        xavier = {  # DiT's initialize_weights: xavier_uniform, the qkv Linear packed [3d, d]
            ("attn", "query"): (d, 3 * d), ("attn", "key"): (d, 3 * d), ("attn", "value"): (d, 3 * d),
            ("attn", "out"): (d, d), ("mlp", "fc1"): (d, h), ("mlp", "fc2"): (h, d),
        }
        for (a, b), (fan_in, fan_out) in xavier.items():
            bound = math.sqrt(6 / (fan_in + fan_out))
            k = tree[a][b]["kernel"]
            assert float(jnp.max(jnp.abs(k))) <= bound
            _std_close(k, bound / math.sqrt(3), 0.05, f"{a}/{b}")
            np.testing.assert_array_equal(tree[a][b]["bias"], 0)
    # kernel_init / bias_init replace every Dense init but adaLN_modulation's (linen and nnx)
    inits = dict(kernel_init=jax.nn.initializers.constant(0.5), bias_init=jax.nn.initializers.constant(-1.0))
    for tree in (L.DiTBlock(hidden_size=8, num_heads=2, **inits).init(jax.random.key(0), x[..., :8], c[..., :8])["params"],
                 nnx.state(N.DiTBlock(8, 2, **inits, rngs=nnx.Rngs(0)), nnx.Param).to_pure_dict()):
        np.testing.assert_array_equal(tree["adaLN_modulation"]["kernel"], 0)
        for a, b in (("attn", "query"), ("attn", "out"), ("mlp", "fc2")):
            np.testing.assert_array_equal(tree[a][b]["kernel"], 0.5)
            np.testing.assert_array_equal(tree[a][b]["bias"], -1.0)
    enc = L.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16, **inits).init(
        jax.random.key(0), jnp.ones((3, 1, 8)))["params"]
    np.testing.assert_array_equal(enc["linear1"]["kernel"], 0.5)
    np.testing.assert_array_equal(enc["self_attn"]["value"]["bias"], -1.0)
    np.testing.assert_array_equal(enc["norm1"]["scale"], 1.0)
    with pytest.raises(TypeError, match="kernel_init"):
        N.DiTBlock(8, 2, kernel_init="xavier", rngs=nnx.Rngs(0))


@pytest.mark.parametrize("name", MODULE_PAIRS)
def test_linen_and_nnx_expose_the_same_options(name):
    # one way to read a module's options on both faces: the same `.cfg`, and one attribute per
    # option reading the same value (an NNX module kept `.cfg.convention` only, linen `.convention`)
    import dataclasses

    lm, nm, _ = module_pairs()[name]
    assert lm.cfg == nm.cfg
    names = [f.name for f in dataclasses.fields(nm.cfg)]
    assert names == [f.name for f in dataclasses.fields(getattr(L, name)) if f.name not in ("parent", "name")]
    for option in names:
        assert getattr(lm, option) == getattr(nm, option) == getattr(nm.cfg, option), option
    # read-only on NNX: options change by building a new module, as a linen module's do
    with pytest.raises(AttributeError):
        setattr(nm, names[-1], None)


def test_module_docstrings_document_every_option():
    import dataclasses
    import inspect

    for name in MODULE_PAIRS:
        for api, section in ((L, "Attributes:"), (N, "Args:")):
            doc = inspect.getdoc(getattr(api, name)) or ""
            listed = doc.split(section)[1].split("Returns")[0]
            options = [f.name for f in dataclasses.fields(getattr(L, name)) if f.name not in ("parent", "name")]
            for option in options:
                assert f"\n  {option}: " in listed, (api.__name__, name, option)
            assert "Raises:" in doc and "Example:" in doc


@pytest.mark.parametrize("api", ["linen", "nnx"])
@pytest.mark.parametrize(
    "cls, flax_arg, says",
    [
        ("LayerNorm", "epsilon", r"jln calls it eps=\.\.\.; for flax's exact signature and defaults use jln\.flax\.{api}\.LayerNorm"),
        ("RMSNorm", "epsilon", r"jln calls it eps=\.\.\..*jln\.flax\.{api}\.RMSNorm"),
        ("BatchNorm", "epsilon", r"jln calls it eps=\.\.\..*jln\.flax\.{api}\.BatchNorm"),
        ("GroupNorm", "epsilon", r"jln calls it eps=\.\.\..*jln\.flax\.{api}\.GroupNorm"),
        ("InstanceNorm", "epsilon", r"jln calls it eps=\.\.\..*jln\.flax\.{api}\.InstanceNorm"),
        ("LayerNorm", "reduction_axes", r"jln calls it axis=\.\.\."),
        ("RMSNorm", "feature_axes", r"jln calls it axis=\.\.\. \(jln's scale and bias"),
        ("LayerNorm", "use_fast_variance", r"jln's LayerNorm has no such option \(.*squared deviations.*drop it\)"),
        ("LayerNorm", "force_float32_reductions", r"jln's LayerNorm has no such option \(jln always reduces in float32"),
        ("LayerNorm", "scale_metadata", r"jln calls it scale_init=\.\.\. \(wrap the initializer"),
        ("AdaLNZero", "epsilon", r"jln calls it eps=\.\.\.\.$"),
        ("TransformerEncoderLayer", "epsilon", r"jln calls it layer_norm_eps=\.\.\.\.$"),
        ("DiTBlock", "epsilon", r"jln's DiTBlock has no such option\.$"),
    ],
)
def test_flax_argument_names_say_what_jln_calls_them(api, cls, flax_arg, says):
    # a flax user's argument names get a TypeError that names jln's option (and jln.flax for
    # flax's own signature, where flax has the module), not Python's bare "unexpected keyword"
    sizes = {"LayerNorm": (8,), "RMSNorm": (8,), "BatchNorm": (8,), "GroupNorm": (2, 8), "InstanceNorm": (8,),
             "AdaLNZero": (8, 8), "TransformerEncoderLayer": (8, 2),
             "DiTBlock": (8, 2)}[cls]
    fields = {"AdaLNZero": dict(features=8), "GroupNorm": dict(num_groups=2, num_channels=8),
              "TransformerEncoderLayer": dict(d_model=8, nhead=2),
              "DiTBlock": dict(hidden_size=8, num_heads=2)}.get(cls, {})
    with pytest.raises(TypeError, match=f"jln.{api}.{cls} got flax's argument '{flax_arg}': " + says.format(api=api)):
        if api == "linen":
            getattr(L, cls)(**fields, **{flax_arg: 1e-6})
        else:
            getattr(N, cls)(*sizes, **{flax_arg: 1e-6}, rngs=nnx.Rngs(0))
    # flax's names that jln shares (use_bias, use_scale, scale_init, param_dtype...) are taken
    L.LayerNorm(use_bias=False, use_scale=False, param_dtype=jnp.bfloat16)
    N.RMSNorm(8, use_scale=False, param_dtype=jnp.bfloat16)
    # other unknown names keep Python's own TypeError
    with pytest.raises(TypeError, match="unexpected keyword argument 'epsilonn'"):
        N.LayerNorm(8, epsilonn=1e-6)


def test_linen_sizes_are_checked_like_nnx():
    # `features` is an option of both faces now, checked the same way when linen builds its cfg
    x, c = jnp.ones((2, 5, 8)), jnp.ones((2, 3))
    with pytest.raises(ValueError, match=r"`features` must be a positive int; received 0"):
        L.AdaptiveLayerNorm(features=0).init(jax.random.key(0), x, c)
    with pytest.raises(ValueError, match=r"`features` must be a positive int; received 0"):
        N.AdaptiveLayerNorm(3, 0, rngs=nnx.Rngs(0))
    assert L.AdaptiveLayerNorm(features=np.int64(8)).cfg.features == 8
