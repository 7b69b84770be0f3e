"""``LowRankGatedRMSNorm`` against transformers' own ``AXK2GatedRMSNorm`` (LLaMA's RMSNorm, then
``y * sigmoid(fc2(silu(fc1(y))))``), converted with ``jln.interop.from_torch``: float32 close,
bfloat16 bit for bit on (nearly) every element, eager and jitted, both faces; each step of the
gate against torch's own ops; the state dict round trip; the errors.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jln import linen as jnn
from jln import nnx as jnnx
from jln._compare import ulp_distance
from jln._modules import dense
from jln.families.gated_rms_norm.module import low_rank_gate
from jln.families.gated_rms_norm.spec import activate
from jln.interop import from_torch, to_torch_state_dict

torch = pytest.importorskip("torch")
axk2 = pytest.importorskip("transformers.models.axk2.modeling_axk2")
from transformers.models.axk2.configuration_axk2 import AXK2Config  # noqa: E402

#: the floor of the bfloat16 bit-exact fraction: measured 100.0% over the seeds, shapes and ranks
#: below (XLA's and torch's float32 sums of the rank/width products agree here); a flipped last
#: bit from a different summation order would be legitimate, a wrong rounding step would cost
#: far more than this leaves
BF16_FLOOR = 0.995
SHAPES = ((2, 5), (3, 17), (1, 64))  # leading shapes of x; the width is hidden_size
RANKS = (4, 16)


def _torch_module(rank: int, seed: int, eps: float = 1e-5, hidden: int = 64) -> object:
    torch.manual_seed(seed)
    cfg = AXK2Config(hidden_size=hidden, gated_norm_rank=rank, rms_norm_eps=eps)
    m = axk2.AXK2GatedRMSNorm(cfg).eval()
    with torch.no_grad():  # away from ones and from the default init, so every parameter matters
        m.norm.weight.add_(0.3 * torch.randn_like(m.norm.weight))
        m.mlp.fc1.weight.mul_(4.0).add_(0.05 * torch.randn_like(m.mlp.fc1.weight))
        m.mlp.fc2.weight.mul_(4.0).add_(0.05 * torch.randn_like(m.mlp.fc2.weight))
    return m


def _x(lead: tuple[int, ...], seed: int, hidden: int = 64) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal((*lead, hidden)) * 2.0).astype(np.float32)


def _jln_fn(m: object, api: str):
    if api == "linen":
        module, variables = from_torch(m, api="linen")
        return lambda a: module.apply(variables, a)
    return from_torch(m, api="nnx")


def _torch_out(m: object, x: np.ndarray, dt: object) -> np.ndarray:
    with torch.no_grad():
        return m(torch.from_numpy(x).to(dt)).float().numpy()


def _as_jax(x: np.ndarray, dt: object) -> jax.Array:
    return jnp.asarray(x).astype(jnp.bfloat16 if dt == torch.bfloat16 else jnp.float32)


@pytest.mark.parametrize("api", ["linen", "nnx"])
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_float32_matches_transformers(api: str, jit: bool) -> None:
    for seed, (lead, rank) in enumerate(zip(SHAPES, (*RANKS, 8), strict=True)):
        m = _torch_module(rank, seed)
        x = _x(lead, seed)
        f = _jln_fn(m, api)
        got = (jax.jit(f) if jit else f)(jnp.asarray(x))
        want = _torch_out(m, x, torch.float32)
        assert got.dtype == jnp.float32 and got.shape == want.shape
        err = float(np.max(np.abs(np.asarray(got) - want)) / np.max(np.abs(want)))
        assert err <= 1e-5, (lead, rank, err)


@pytest.mark.parametrize("api", ["linen", "nnx"])
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_bfloat16_is_bit_exact(api: str, jit: bool) -> None:
    """The module and x in bfloat16 (``m.to(torch.bfloat16)``): the Linears round in bfloat16, the
    gate and product are float32, the output bfloat16, bit for bit on >= BF16_FLOOR of elements
    for every seed, shape and rank."""
    same = total = 0
    for seed in range(3):
        for lead in SHAPES:
            for rank in RANKS:
                m = _torch_module(rank, 10 * seed + rank).to(torch.bfloat16)
                x = _x(lead, seed)
                f = _jln_fn(m, api)
                got = (jax.jit(f) if jit else f)(_as_jax(x, torch.bfloat16))
                assert got.dtype == jnp.bfloat16
                want = _torch_out(m, x, torch.bfloat16)
                eq = np.asarray(got.astype(jnp.float32)) == want
                assert eq.mean() >= BF16_FLOOR, (seed, lead, rank, eq.mean())
                same, total = same + int(eq.sum()), total + eq.size
    assert same / total >= BF16_FLOOR


def test_float32_module_on_bfloat16_input_computes_in_float32() -> None:
    """LLaMA's RMSNorm promotes: a bfloat16 x and float32 weights give a float32 y, so the gate
    MLP runs in float32 and the output is float32, as in torch."""
    m = _torch_module(8, 3)
    x = _x((4, 9), 3)
    xb = torch.from_numpy(x).to(torch.bfloat16)
    with torch.no_grad():
        want = m(xb)
    assert want.dtype == torch.float32
    got = _jln_fn(m, "nnx")(_as_jax(x, torch.bfloat16))
    assert got.dtype == jnp.float32
    np.testing.assert_allclose(np.asarray(got), want.numpy(), rtol=0, atol=1e-5 * float(want.abs().max()))


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_each_step_of_the_gate_rounds_as_torch(jit: bool) -> None:
    """Every intermediate of the bfloat16 gate against torch's own op on the same bfloat16
    input: fc1, SiLU, fc2 and the product bit for bit; the float32 sigmoid within 2 ulps (torch's
    vectorized exp and XLA's differ in the last bits of ~0.5% of float32 values; measured: the
    bfloat16 product rounds it away)."""
    m = _torch_module(16, 7).to(torch.bfloat16)
    x = _x((3, 11), 7)
    with torch.no_grad():
        y = m.norm(torch.from_numpy(x).to(torch.bfloat16))
        h1 = m.mlp.fc1(y)
        a = m.mlp.activation_fn(h1)
        h2 = m.mlp.fc2(a)
        gate = torch.sigmoid(h2.float())
        out = (y * gate).to(y.dtype)
    k1 = jnp.asarray(m.mlp.fc1.weight.detach().float().numpy().T).astype(jnp.bfloat16)
    k2 = jnp.asarray(m.mlp.fc2.weight.detach().float().numpy().T).astype(jnp.bfloat16)

    def jnp_of(t: object) -> jax.Array:
        return jnp.asarray(t.float().numpy()).astype(jnp.bfloat16 if t.dtype == torch.bfloat16 else jnp.float32)

    def run(f, *args):
        return (jax.jit(f) if jit else f)(*args)

    yj = jnp_of(y)
    steps = (
        (lambda v: dense({"kernel": k1}, v, jnp.bfloat16), yj, h1),
        (lambda v: activate("silu", v.astype(jnp.float32)).astype(jnp.bfloat16), jnp_of(h1), a),
        (lambda v: dense({"kernel": k2}, v, jnp.bfloat16), jnp_of(a), h2),
        (lambda v: activate("sigmoid", v.astype(jnp.float32)), jnp_of(h2), gate),
        (lambda v: low_rank_gate(v, k1, k2), yj, out),
    )
    for i, (f, arg, want) in enumerate(steps):
        got = run(f, arg)
        assert str(got.dtype) == str(want.dtype).removeprefix("torch."), i
        if want.dtype == torch.float32:  # the sigmoid
            ulps = ulp_distance(np.asarray(got), want.numpy())
            assert ulps.max() <= 2 and ulps.mean() < 0.02, (i, ulps.max(), ulps.mean())
        else:
            np.testing.assert_array_equal(np.asarray(got.astype(jnp.float32)), want.float().numpy(), err_msg=f"step {i}")


@pytest.mark.parametrize("dt", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("api", ["linen", "nnx"])
def test_state_dict_round_trip_is_strict(api: str, dt: object) -> None:
    m = _torch_module(8, 1).to(dt)
    ref = m.state_dict()
    if api == "linen":
        lin, variables = from_torch(m, api="linen")
        sd = to_torch_state_dict(variables, lin)
        assert variables["params"]["mlp"]["fc1"]["kernel"].shape == (64, 8)
        assert variables["params"]["mlp"]["fc2"]["kernel"].shape == (8, 64)
    else:
        sd = to_torch_state_dict(from_torch(m, api="nnx"))
    assert sorted(sd) == ["mlp.fc1.weight", "mlp.fc2.weight", "norm.weight"]
    for k, t in sd.items():
        assert t.dtype == ref[k].dtype and torch.equal(t, ref[k]), k
    fresh = _torch_module(8, 99).to(dt)
    fresh.load_state_dict(sd, strict=True)
    x = _x((2, 5), 1)
    np.testing.assert_array_equal(_torch_out(fresh, x, dt), _torch_out(m, x, dt))


def test_converted_options() -> None:
    m = _torch_module(4, 2, eps=3e-6)
    lin, variables = from_torch(m, api="linen")
    assert isinstance(lin, jnn.LowRankGatedRMSNorm)
    assert (lin.rank, lin.eps, lin.param_dtype) == (4, 3e-6, jnp.float32)
    n = from_torch(m, api="nnx")
    assert isinstance(n, jnnx.LowRankGatedRMSNorm) and n.num_features == 64
    assert n.mlp.fc1.kernel[...].shape == (64, 4) and n.norm.scale[...].shape == (64,)


@pytest.mark.parametrize("api", ["linen", "nnx"])
def test_fresh_modules_have_the_parameters_and_init(api: str) -> None:
    x = jnp.asarray(_x((2, 3), 0, hidden=12))
    if api == "linen":
        mod = jnn.LowRankGatedRMSNorm(rank=5)
        params = mod.init(jax.random.key(0), x)["params"]
        out = mod.apply({"params": params}, x)
        k1 = params["mlp"]["fc1"]["kernel"]
        scale = params["norm"]["scale"]
    else:
        mod = jnnx.LowRankGatedRMSNorm(12, rank=5, rngs=nnx.Rngs(0))
        out = mod(x)
        k1, scale = mod.mlp.fc1.kernel[...], mod.norm.scale[...]
    assert out.shape == x.shape and out.dtype == jnp.float32
    assert k1.shape == (12, 5) and bool(jnp.all(scale == 1.0))
    # flax Dense's default: lecun_normal, std 1/sqrt(fan_in) (truncated normal), not zeros
    assert 0.05 < float(jnp.std(k1)) < 0.6


@pytest.mark.parametrize("api", ["linen", "nnx"])
def test_wrong_width_names_the_module(api: str) -> None:
    x = jnp.ones((2, 64))
    bad = jnp.ones((2, 32))
    if api == "linen":
        mod, variables = from_torch(_torch_module(8, 0), api="linen")
        with pytest.raises(ValueError, match=r"jln\.linen\.LowRankGatedRMSNorm.*num_features=64.*\(2, 32\)"):
            mod.apply(variables, bad)
        assert mod.apply(variables, x).shape == (2, 64)
    else:
        mod = from_torch(_torch_module(8, 0), api="nnx")
        with pytest.raises(ValueError, match=r"jln\.nnx\.LowRankGatedRMSNorm: the module was built for "
                                             r"num_features=64.*received x\.shape=\(2, 32\)"):
            mod(bad)


def test_bad_options_and_inputs() -> None:
    with pytest.raises(ValueError, match=r"jln LowRankGatedRMSNorm: `rank` must be a positive int; received 0"):
        jnn.LowRankGatedRMSNorm(rank=0)
    with pytest.raises(ValueError, match=r"LowRankGatedRMSNorm.*eps"):
        jnnx.LowRankGatedRMSNorm(8, rank=2, eps=-1.0)
    with pytest.raises(TypeError, match=r"jln LowRankGatedRMSNorm: `kernel_init` must be an initializer"):
        jnn.LowRankGatedRMSNorm(rank=2, kernel_init="lecun")
    with pytest.raises(TypeError, match="LowRankGatedRMSNorm"):
        jnnx.LowRankGatedRMSNorm(8, rank=2, kernel_init=jax.nn.initializers.zeros)(jnp.ones((2, 8), jnp.int32))


def test_a_gate_mlp_with_biases_is_refused() -> None:
    m = _torch_module(4, 0)
    m.mlp.fc1 = torch.nn.Linear(64, 4, bias=True)
    with pytest.raises(ValueError, match=r"AXK2GatedRMSNorm: its gate MLP's Linears have biases"):
        from_torch(m)


def test_linen_equals_nnx_forward_and_backward() -> None:
    """The same tree from both faces; with the same (random) parameters the same outputs and
    gradients, to the bit; the NNX GraphDef is a static jit argument."""
    x = jnp.asarray(_x((2, 5), 4, hidden=16))
    lm, nm = jnn.LowRankGatedRMSNorm(rank=3), jnnx.LowRankGatedRMSNorm(16, rank=3, rngs=nnx.Rngs(0))
    params = lm.init(jax.random.key(0), x)["params"]
    shapes = lambda tree: jax.tree.map(lambda a: (a.shape, a.dtype), tree)  # noqa: E731
    assert shapes(params) == shapes(nnx.state(nm, nnx.Param).to_pure_dict())
    leaves, tdef = jax.tree.flatten(params)
    keys = jax.random.split(jax.random.key(1), len(leaves))
    params = jax.tree.unflatten(tdef, [1.0 + 0.3 * jax.random.normal(k, a.shape, a.dtype) for k, a in zip(keys, leaves, strict=True)])
    gdef, _ = nnx.split(nm)

    def linen_loss(p, v):
        return jnp.sum(lm.apply({"params": p}, v) ** 2)

    def nnx_loss(p, v):
        return jnp.sum(nnx.merge(gdef, nnx.State(p))(v) ** 2)

    # (both jitted: the same program for the loss's sum)
    assert float(jax.jit(linen_loss)(params, x)) == float(jax.jit(nnx_loss)(params, x))
    np.testing.assert_array_equal(lm.apply({"params": params}, x), nnx.merge(gdef, nnx.State(params))(x))
    gl = jax.jit(jax.grad(linen_loss, argnums=(0, 1)))(params, x)
    gn = jax.jit(jax.grad(nnx_loss, argnums=(0, 1)))(params, x)
    jax.tree.map(np.testing.assert_array_equal, gl, gn)
    assert all(bool(jnp.all(jnp.isfinite(g))) for g in jax.tree.leaves(gl))


def test_float32_gradients_match_torch() -> None:
    """Reverse mode through the norm, both Dense layers, SiLU and the sigmoid: the gradients of
    x and of every parameter against torch's autograd on the same module."""
    m = _torch_module(8, 5)
    x = _x((3, 7), 5)
    ct = np.random.default_rng(6).standard_normal(x.shape).astype(np.float32)
    xt = torch.from_numpy(x).requires_grad_(True)
    (m(xt) * torch.from_numpy(ct)).sum().backward()
    mod, variables = from_torch(m, api="linen")
    gp, gx = jax.grad(lambda p, v: jnp.sum(mod.apply({"params": p}, v) * ct), argnums=(0, 1))(
        variables["params"], jnp.asarray(x))
    got = {"x": gx, **{k: v for k, v in to_torch_state_dict({"params": gp}, mod).items()}}
    want = {"x": xt.grad, **{k: p.grad for k, p in m.named_parameters()}}
    assert sorted(got) == sorted(want)
    for k, w in want.items():
        w = w.numpy()
        g = np.asarray(got[k].detach().numpy() if isinstance(got[k], torch.Tensor) else got[k])
        err = float(np.max(np.abs(g - w)) / np.max(np.abs(w)))
        assert err <= 1e-5, (k, err)
