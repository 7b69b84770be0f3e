"""The converted adaptive norms called as their torch classes are: every condition shape torch
takes (its broadcasting, whatever the ranks), torch's keywords and call signatures, and the
weightless norms on the NNX face. The expected values are the torch modules' own outputs."""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("diffusers")
pytest.importorskip("transformers")

from jln.interop import from_torch  # noqa: E402
from tests.test_interop import _jax, assert_same  # noqa: E402

D, COND = 32, 16


def _perturbed(m: Any, dtype: Any = torch.float32) -> Any:
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
    return m.to(dtype).eval()


def _rand(shape: tuple[int, ...], dtype: Any, seed: int) -> Any:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _tuple(y: Any) -> tuple[Any, ...]:
    return tuple(y) if isinstance(y, (tuple, list)) else (y,)


def _check(m: Any, *args: Any, x_dtype: Any) -> None:
    """Both faces of the converted ``m`` on ``args``: torch's shapes, dtypes and numbers."""
    with torch.no_grad():
        want = _tuple(m(*args))
    lin, variables = from_torch(m)
    jargs = tuple(_jax(a) for a in args)
    for got in (_tuple(lin.apply(variables, *jargs)), _tuple(from_torch(m, api="nnx")(*jargs))):
        assert [tuple(g.shape) for g in got] == [tuple(w.shape) for w in want]
        assert_same(got, want, x_dtype)


def _lumina() -> Any:
    from diffusers.models.normalization import LuminaLayerNormContinuous

    return LuminaLayerNormContinuous(D, COND, out_dim=8)


def _mochi() -> Any:
    from diffusers.models.transformers.transformer_mochi import MochiLayerNormContinuous

    return MochiLayerNormContinuous(D, COND)


def _pi05() -> Any:
    from transformers.models.pi05.modeling_pi05 import PI05AdaptiveRMSNorm

    return PI05AdaptiveRMSNorm(D)


#: (x, cond) shapes torch takes: the usual [B, c], then conditions of more axes and inputs of
#: other ranks, which torch's `[:, None, :]` broadcasts into other shapes (a 3-D condition
#: gives [B, B, L, d])
CALLS = [((2, 7, D), (2, "c")), ((2, 7, D), (2, 7, "c")), ((2, 7, D), (2, 1, "c")), ((2, 2, 4, D), (2, "c")),
         ((2, D), (2, "c"))]


@pytest.mark.parametrize("make", [_lumina, _mochi, _pi05], ids=["Lumina", "Mochi", "PI05"])
@pytest.mark.parametrize(("xs", "cs"), CALLS, ids=str)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_every_condition_shape_torch_takes(make: Any, xs: tuple[int, ...], cs: tuple[Any, ...], dtype: str) -> None:
    dt = getattr(torch, dtype)
    m = _perturbed(make(), dt)
    c = COND if make is not _pi05 else D
    _check(m, _rand(xs, dt, 0), _rand(tuple(c if s == "c" else s for s in cs), dt, 2), x_dtype=dt)


@pytest.mark.parametrize("make", [_lumina, _pi05], ids=["Lumina", "PI05"])
def test_conditions_torch_refuses_are_refused(make: Any) -> None:
    m = _perturbed(make())
    c = COND if make is not _pi05 else D
    lin, variables = from_torch(m)
    for xs, cs in (((2, 7, D), (c,)), ((2, 3, D), (2, 5, c))):
        with pytest.raises((RuntimeError, IndexError)):
            m(torch.zeros(xs), torch.zeros(cs))
        with pytest.raises(ValueError, match="torch"):
            lin.apply(variables, jnp.zeros(xs), jnp.zeros(cs))


def test_native_ada_ln_scale_keeps_token_broadcasting() -> None:
    """jln's own AdaLNScale (broadcast="tokens") scales every token of a 4-D x by its example's
    condition; the converted one follows torch."""
    from jln import linen as jnn

    m = jnn.AdaLNScale(features=8)
    x, c = jnp.ones((2, 3, 4, 8)), jnp.arange(8.0).reshape(2, 4)
    v = m.init(__import__("jax").random.key(0), x, c)
    y = m.apply(v, x, c)
    assert y.shape == x.shape
    np.testing.assert_array_equal(np.asarray(y[:, 0]), np.asarray(y[:, 2]))


def _pixart(add: bool, dtype: Any) -> Any:
    from diffusers.models.normalization import AdaLayerNormSingle

    return _perturbed(AdaLayerNormSingle(48, use_additional_conditions=add), dtype)


@pytest.mark.parametrize("add", [False, True])
def test_ada_layer_norm_single_takes_diffusers_call(add: bool) -> None:
    """forward(timestep, added_cond_kwargs=None, batch_size=None, hidden_dtype=None), by position
    and by keyword, hidden_dtype a torch or a JAX dtype: torch's dtypes and numbers."""
    bf16 = torch.bfloat16
    m = _pixart(add, bf16)
    t = torch.tensor([3.0, 999.0, 250.5])
    res, ar = torch.tensor([[1024.0, 1024.0], [512.0, 768.0], [256.0, 256.0]]), torch.tensor([[1.0], [0.66], [1.0]])
    kw = {"resolution": res, "aspect_ratio": ar} if add else None
    jkw = {k: _jax(v) for k, v in kw.items()} if kw else None
    with torch.no_grad():
        want = m(t, kw, 3, bf16)
    lin, variables = from_torch(m)
    nnx_mod = from_torch(m, api="nnx")
    jt = _jax(t)
    calls = [lambda f: f(jt, jkw, 3, bf16), lambda f: f(jt, added_cond_kwargs=jkw, batch_size=3, hidden_dtype=bf16),
             lambda f: f(jt, jkw, hidden_dtype=jnp.bfloat16)]
    for call in calls:
        for f in (lambda *a, **k: lin.apply(variables, *a, **k), nnx_mod):
            got = call(f)
            assert [str(g.dtype) for g in got] == ["bfloat16", "bfloat16"]
            assert_same(tuple(got), tuple(want), bf16)


def test_ada_layer_norm_single_float32_hidden_dtype_keyword() -> None:
    m = _pixart(False, torch.float32)
    t = torch.tensor([3.0, 999.0])
    with torch.no_grad():
        want = m(t, batch_size=2, hidden_dtype=torch.float32)
    got = from_torch(m, api="nnx")(_jax(t), batch_size=2, hidden_dtype=torch.float32)
    for a, b in zip(got, want, strict=True):
        assert str(a.dtype) == "float32"
        np.testing.assert_allclose(np.asarray(a), b.numpy(), rtol=0, atol=2e-5 * float(b.abs().max()))


def _cogvideox_norm_out() -> Any:
    from diffusers.models.normalization import AdaLayerNorm

    # as CogVideoXTransformer3DModel builds its norm_out
    return AdaLayerNorm(embedding_dim=COND, output_dim=2 * D, norm_elementwise_affine=True, norm_eps=1e-5,
                        chunk_dim=1)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_cogvideox_norm_out_takes_temb(dtype: str) -> None:
    """diffusers calls CogVideoX's final AdaLayerNorm as ``norm(x, temb=temb)``; the positional
    call still works."""
    dt = getattr(torch, dtype)
    m = _perturbed(_cogvideox_norm_out(), dt)
    x, temb = _rand((2, 7, D), dt, 0), _rand((2, COND), dt, 2)
    with torch.no_grad():
        want = m(x, temb=temb)
    lin, variables = from_torch(m)
    nnx_mod = from_torch(m, api="nnx")
    jx, jt = _jax(x), _jax(temb)
    for got in (lin.apply(variables, jx, temb=jt), nnx_mod(jx, temb=jt), lin.apply(variables, jx, jt), nnx_mod(jx, jt)):
        assert_same((got,), (want,), dt)
    with pytest.raises(TypeError, match="once"):
        nnx_mod(jx, jt, temb=jt)
    with pytest.raises(TypeError, match="temb"):
        nnx_mod(jx)
