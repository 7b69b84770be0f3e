"""``QKL2Norm`` against transformers' ``ZayaQKNorm`` itself: the converted module (linen and
NNX, eager and jitted) on ``[B, S, heads, head_dim]`` queries and keys, the state dict back to
torch, and the inputs it refuses. The expected values are the torch module's own outputs."""

from __future__ import annotations

import copy
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from jln import linen as jnn  # noqa: E402
from jln import nnx as jnnx  # noqa: E402
from jln.families.lp_norm.module import QK_L2_NORM as kind  # noqa: E402
from jln.interop import from_torch, to_torch_state_dict  # noqa: E402
from tests.test_interop import _jax, parity  # noqa: E402

KV_HEADS, Q_HEADS = 3, 6


def _zaya(head_dim: int = 16, seed: int = 1) -> Any:
    from transformers import ZayaConfig
    from transformers.models.zaya.modeling_zaya import ZayaQKNorm

    cfg = ZayaConfig(head_dim=head_dim, num_key_value_heads=KV_HEADS, num_attention_heads=Q_HEADS,
                     hidden_size=head_dim * Q_HEADS)
    m = ZayaQKNorm(cfg)
    with torch.no_grad():  # zeros at init would zero the key: a random per-head scale instead
        m.temp.copy_(torch.randn(KV_HEADS, generator=torch.Generator().manual_seed(seed)))
    return m.eval()


def _qk(head_dim: int, dtype: Any, offset: float = 0.5) -> tuple[Any, Any]:
    g = torch.Generator().manual_seed(0)
    q = 2 * torch.randn((2, 5, Q_HEADS, head_dim), generator=g) + offset
    k = 3 * torch.randn((2, 5, KV_HEADS, head_dim), generator=g)
    return q.to(dtype), k.to(dtype)


def _jln_outputs(m: Any, q: Any, k: Any) -> dict[str, tuple[Any, Any]]:
    lin, variables = from_torch(m)
    nnx_mod = from_torch(m, api="nnx")
    qj, kj = _jax(q), _jax(k)
    return {
        "linen": lin.apply(variables, qj, kj),
        "linen-jit": jax.jit(lambda a, b: lin.apply(variables, a, b))(qj, kj),
        "nnx": nnx_mod(qj, kj),
        "nnx-jit": jax.jit(lambda a, b: nnx_mod(a, b))(qj, kj),
    }


# (module dtype, input dtype): bf16 weights and inputs, float16 likewise, float32 weights with
# bf16 inputs (the key's product with temp then promotes to float32, as torch's)
DTYPES = [(torch.float32, torch.float32), (torch.bfloat16, torch.bfloat16), (torch.float16, torch.float16),
          (torch.float32, torch.bfloat16)]


@pytest.mark.parametrize("head_dim", [16, 12])  # sqrt(12) is not a float32 number
@pytest.mark.parametrize(("mdt", "xdt"), DTYPES, ids=str)
def test_zaya_qk_norm_matches_torch(head_dim: int, mdt: Any, xdt: Any) -> None:
    m = _zaya(head_dim).to(mdt)
    q, k = _qk(head_dim, xdt)
    with torch.no_grad():
        want = m(q, k)
    outs = _jln_outputs(m, q, k)
    for face, got in outs.items():
        assert isinstance(got, tuple) and len(got) == 2, face
        for g, w in zip(got, want, strict=True):
            p = parity(g, w)
            assert g.shape == tuple(w.shape) and str(g.dtype) == str(w.dtype).removeprefix("torch."), (face, g.dtype)
            if xdt == torch.float32:
                assert p["max_abs"] <= 1e-6 * max(1.0, p["ref_max"]), (face, p)
            else:  # every element, every rounding as torch's
                assert p["frac_exact"] == 1.0, (face, p)


def test_zero_rows_are_floored_at_the_querys_eps() -> None:
    m = _zaya()
    q, k = _qk(16, torch.bfloat16)
    q[0, 0, 0] = 0
    k[1, 2, 1] = 0
    q[0, 1, 2] = 1e-3  # a norm under finfo(bf16).eps: the floor shows
    mb = copy.deepcopy(m).to(torch.bfloat16)
    with torch.no_grad():
        want = mb(q, k)
    for got in _jln_outputs(mb, q, k).values():
        for g, w in zip(got, want, strict=True):
            assert parity(g, w)["frac_exact"] == 1.0


def test_converts_to_qk_l2_norm_and_round_trips() -> None:
    m = _zaya(12)
    lin, variables = from_torch(m)
    assert type(lin).__name__ == "QKL2Norm" and lin.head_axis == 2 and lin.multiplier == 12**0.5
    assert lin.eps is None  # finfo(query.dtype).eps at the call, as torch
    np.testing.assert_array_equal(np.asarray(variables["params"]["key_scale"]), m.temp.detach().numpy())
    q, k = _qk(12, torch.bfloat16)
    for sd in (to_torch_state_dict(variables, lin), to_torch_state_dict(from_torch(m, api="nnx"))):
        assert sorted(sd) == ["temp"] and torch.equal(sd["temp"], m.temp)
        fresh = _zaya(12, seed=5)
        fresh.load_state_dict(sd, strict=True)
        with torch.no_grad():
            for a, b in zip(fresh.to(torch.bfloat16)(q, k), copy.deepcopy(m).to(torch.bfloat16)(q, k), strict=True):
                assert torch.equal(a, b)


def test_key_scale_starts_at_zero_as_torch() -> None:
    q, k = jnp.ones((1, 2, 4, 16)), jnp.ones((1, 2, 2, 16))
    m = jnn.QKL2Norm()
    v = m.init(jax.random.key(0), q, k)
    assert v["params"]["key_scale"].shape == (2,) and not np.asarray(v["params"]["key_scale"]).any()
    nnx_mod = jnnx.QKL2Norm(2)
    np.testing.assert_array_equal(np.asarray(nnx_mod.key_scale[...]), np.zeros(2, np.float32))
    yq, yk = nnx_mod(q, k)
    np.testing.assert_array_equal(np.asarray(yq), np.ones((1, 2, 4, 16), np.float32))  # sqrt(16) / ||1|| = 1/4
    assert not np.asarray(yk).any()


def test_gradients_match_torch() -> None:
    m = _zaya(12)
    q, k = _qk(12, torch.float32)
    qt, kt = q.clone().requires_grad_(True), k.clone().requires_grad_(True)
    oq, ok = m(qt, kt)
    g = torch.Generator().manual_seed(7)
    cq, ck = torch.randn(oq.shape, generator=g), torch.randn(ok.shape, generator=g)
    want = torch.autograd.grad((oq * cq).sum() + (ok * ck).sum(), [qt, kt, m.temp])
    lin, variables = from_torch(m)

    def loss(v: Any, a: Any, b: Any) -> Any:
        yq, yk = lin.apply(v, a, b)
        return jnp.sum(yq * _jax(cq)) + jnp.sum(yk * _jax(ck))

    gv, gq, gk = jax.grad(loss, argnums=(0, 1, 2))(variables, _jax(q), _jax(k))
    for gj, gt in zip([gq, gk, gv["params"]["key_scale"]], want, strict=True):
        gt = gt.detach().numpy()
        np.testing.assert_allclose(np.asarray(gj), gt, rtol=1e-5, atol=1e-5 * np.abs(gt).max())


def test_a_key_with_other_heads_is_refused() -> None:
    m = _zaya()
    lin, variables = from_torch(m)
    nnx_mod = from_torch(m, api="nnx")
    q = jnp.ones((2, 5, Q_HEADS, 16))
    bad = jnp.ones((2, 5, KV_HEADS + 1, 16))
    with pytest.raises(ValueError, match=r"3 key heads.*key.shape=\(2, 5, 4, 16\)"):
        nnx_mod(q, bad)
    with pytest.raises(ValueError, match=r"key_scale.*\(2, 5, 4, 16\)"):
        lin.apply(variables, q, bad)
    with pytest.raises(ValueError, match=r"key_scale` has shape \(3,\); key.shape=\(2, 5, 4, 16\) needs \(4,\)"):
        kind.apply(variables["params"], q, bad, lin.cfg)  # parameters the face did not check
    with pytest.raises(ValueError, match="head_axis"):
        nnx_mod(q, jnp.ones((16,)))  # no axis 2
    with pytest.raises(TypeError, match="query"):
        nnx_mod(jnp.ones((2, 5, Q_HEADS, 16), jnp.int32), jnp.ones((2, 5, KV_HEADS, 16)))


def test_options_are_checked() -> None:
    with pytest.raises(TypeError, match="head_axis"):
        jnnx.QKL2Norm(2, head_axis=(1, 2))
    with pytest.raises(TypeError, match="multiplier"):
        jnnx.QKL2Norm(2, multiplier="4")
    with pytest.raises(ValueError, match="eps"):
        jnnx.QKL2Norm(2, eps=-1.0)
    with pytest.raises(ValueError, match="num_heads"):
        jnnx.QKL2Norm(0)


def test_head_axis_places_the_key_scale() -> None:
    # [B, heads, S, head_dim]: the same numbers as the transformers layout, transposed
    m = _zaya()
    q, k = _qk(16, torch.float32)
    with torch.no_grad():
        wq, wk = m(q, k)
    mod = jnnx.QKL2Norm(KV_HEADS, head_axis=1)
    mod.key_scale[...] = _jax(m.temp.detach())
    yq, yk = mod(_jax(q.transpose(1, 2)), _jax(k.transpose(1, 2)))
    np.testing.assert_allclose(np.asarray(yk), wk.transpose(1, 2).numpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(np.asarray(yq), wq.transpose(1, 2).numpy(), rtol=1e-6, atol=1e-6)
