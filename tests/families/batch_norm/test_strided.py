"""BatchNorm's ``convention="strided"`` against torch (2.13, CPU) on a strided input.

torch's CPU BatchNorm takes another path for an input that is neither contiguous nor
channels-last: ``bn(x.transpose(1, 2)).transpose(1, 2)`` on ``(B, L, C)``, as transformers'
PatchTST and PatchTSMixer call it. Every expected value here is torch's own output for that call
on the same values; half-precision results are compared bit for bit, float32 within 1e-6 (torch's
vectorized float32 ``sqrt`` of the running variance is not correctly rounded on this build, jln's
is: 1 ulp of ``invstd`` on some channels).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jln
from jln import linen as jnn
from jln import nnx as jnnx

torch = pytest.importorskip("torch")

_TDT = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
SHAPE = (4, 37, 64)
C = SHAPE[-1]
#: (x dtype, parameter dtype): own-dtype and torch's mixed-dtype path (float32 parameters)
DTYPES = [("float32", "float32"), ("bfloat16", "bfloat16"), ("float16", "float16"),
          ("bfloat16", "float32"), ("float16", "float32")]


def _t(a: np.ndarray | jax.Array) -> torch.Tensor:
    a = np.asarray(a)
    return torch.from_numpy(a.astype(np.float32)).to(_TDT[str(a.dtype)])


def _j(t: torch.Tensor) -> jax.Array:
    return jnp.asarray(t.detach().float().numpy()).astype(str(t.dtype).removeprefix("torch."))


def _np(a: torch.Tensor | jax.Array) -> np.ndarray:
    if isinstance(a, torch.Tensor):
        return a.detach().float().numpy()
    return np.asarray(a.astype(jnp.float32))


def _bn(seed: int, param_dtype: str, affine: bool = True) -> torch.nn.BatchNorm1d:
    """A BatchNorm1d with perturbed affine parameters and running statistics."""
    g = torch.Generator().manual_seed(seed)
    bn = torch.nn.BatchNorm1d(C, affine=affine)
    with torch.no_grad():
        if affine:
            bn.weight.copy_(torch.randn(C, generator=g))
            bn.bias.copy_(torch.randn(C, generator=g))
        bn.running_mean.copy_(torch.randn(C, generator=g))
        bn.running_var.copy_(torch.rand(C, generator=g) * 2 + 0.25)
    return bn.to(_TDT[param_dtype])


def _x(seed: int, dtype: str, shape: tuple[int, ...] = SHAPE) -> jax.Array:
    rng = np.random.default_rng(seed + 100)
    return jnp.asarray((2 * rng.standard_normal(shape) + 0.5).astype(np.float32)).astype(dtype)


def _torch_strided(bn: torch.nn.BatchNorm1d, x: jax.Array) -> torch.Tensor:
    xt = _t(x).transpose(1, 2)
    assert not xt.is_contiguous() and not xt.is_contiguous(memory_format=torch.channels_last)
    return bn(xt).transpose(1, 2).detach()


def _args(bn: torch.nn.BatchNorm1d) -> tuple[jax.Array | None, ...]:
    w, b = (None, None) if bn.weight is None else (_j(bn.weight), _j(bn.bias))
    return _j(bn.running_mean), _j(bn.running_var), w, b


def _check(got: jax.Array, want: torch.Tensor, dtype: str, what: object) -> None:
    g, w = _np(got), _np(want)
    assert got.dtype == jnp.dtype(dtype), what
    if dtype == "float32":
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6, err_msg=str(what))
    else:
        assert (g == w).all(), (what, float((g == w).mean()))


_jit_bn = jax.jit(jln.batch_norm, static_argnames=("training", "channel_axis", "convention", "momentum"))


@pytest.mark.parametrize(("dtype", "param_dtype"), DTYPES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_eval_matches_torch_on_strided_input(dtype: str, param_dtype: str, seed: int) -> None:
    bn = _bn(seed, param_dtype).eval()
    x = _x(seed, dtype)
    want = _torch_strided(bn, x)
    for name, f in (("eager", jln.batch_norm), ("jit", _jit_bn)):
        got, stats = f(x, *_args(bn), training=False, channel_axis=-1, convention="strided")
        _check(got, want, dtype, (name, dtype, param_dtype, seed))
        assert stats.mean is not None and (np.asarray(stats.mean) == np.asarray(_j(bn.running_mean))).all()


@pytest.mark.parametrize(("dtype", "param_dtype"), DTYPES)
@pytest.mark.parametrize("seed", [0, 1])
def test_training_step_matches_torch_on_strided_input(dtype: str, param_dtype: str, seed: int) -> None:
    """Output and running statistics after one training step (half-precision parameters:
    output and statistics bit for bit; float32 parameters: within float32 rounding, as torch
    sums the squared deviations serially and updates in float64)."""
    bn = _bn(seed, param_dtype).train()
    x = _x(seed, dtype)
    args = _args(bn)
    want = _torch_strided(bn, x)
    for name, f in (("eager", jln.batch_norm), ("jit", _jit_bn)):
        got, stats = f(x, *args, training=True, channel_axis=-1, convention="strided")
        if param_dtype == "float32" and dtype != "float32":  # torch's float32 statistics, then one rounding
            g, w = _np(got), _np(want)
            # (torch's float32 sums depend on its threads: a statistic 1 float32 ulp apart can flip
            # a half-precision rounding, so a floor on the exact share, not bit equality)
            assert np.abs(g - w).max() <= 4 * float(jnp.finfo(dtype).eps) * np.abs(w).max(), name
            assert (g == w).mean() > 0.99, (name, float((g == w).mean()))
        else:
            _check(got, want, dtype, (name, dtype, param_dtype, seed))
        for mine, theirs in ((stats.mean, bn.running_mean), (stats.var, bn.running_var)):
            if param_dtype == "float32":
                np.testing.assert_allclose(_np(mine), _np(theirs), rtol=4e-6, atol=4e-7)
            else:
                assert (_np(mine) == _np(theirs)).all(), (name, float((_np(mine) == _np(theirs)).mean()))


def test_without_affine_and_on_4d_input() -> None:
    """affine=False (torch's scalar 1 and 0 stand in) and a (B, N, L, C) input, both bf16."""
    bn = _bn(3, "bfloat16", affine=False).eval()
    x = _x(3, "bfloat16")
    got, _ = jln.batch_norm(x, *_args(bn), training=False, channel_axis=-1, convention="strided")
    _check(got, _torch_strided(bn, x), "bfloat16", "affine=False")
    bn = _bn(4, "bfloat16").eval()
    x4 = _x(4, "bfloat16", (2, 3, 11, C))
    want = _torch_strided(bn, x4.reshape(6, 11, C)).reshape(x4.shape)
    got, _ = _jit_bn(x4, *_args(bn), training=False, channel_axis=-1, convention="strided")
    _check(got, want, "bfloat16", "4-D")


def test_the_strided_path_is_what_differs() -> None:
    """The test can fail: the contiguous convention misses torch's strided bf16 output on many
    elements, and torch's two paths differ there too."""
    bn = _bn(0, "bfloat16").eval()
    x = _x(0, "bfloat16")
    want = _np(_torch_strided(bn, x))
    contiguous, _ = jln.batch_norm(x, *_args(bn), training=False, channel_axis=-1)
    assert (_np(contiguous) == want).mean() < 0.9
    torch_contiguous = _np(bn(_t(x).transpose(1, 2).contiguous()).transpose(1, 2))
    assert (torch_contiguous == want).mean() < 0.9


def test_gradient_is_the_float32_formula_s() -> None:
    bn = _bn(0, "float32")
    x = _x(0, "float32")
    args = _args(bn)

    def loss(x: jax.Array, convention: str, training: bool) -> jax.Array:
        y, _ = jln.batch_norm(x, *args, training=training, channel_axis=-1, convention=convention)  # type: ignore[arg-type]
        return jnp.sum(y * jnp.sin(x))

    for training in (False, True):
        g_s = jax.grad(loss)(x, "strided", training)
        g_t = jax.grad(loss)(x, "torch", training)
        np.testing.assert_allclose(np.asarray(g_s), np.asarray(g_t), rtol=1e-5, atol=1e-5)


def test_an_unknown_convention_is_refused() -> None:
    x = _x(0, "float32")
    with pytest.raises(ValueError, match="convention"):
        jln.batch_norm(x, training=True, channel_axis=-1, convention="transposed")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="convention"):
        jnnx.BatchNorm(C, channel_axis=-1, convention="transposed")


def test_both_faces_with_the_option() -> None:
    bn = _bn(1, "bfloat16").eval()
    x = _x(1, "bfloat16")
    want = _torch_strided(bn, x)
    lm = jnn.BatchNorm(channel_axis=-1, convention="strided", param_dtype=jnp.bfloat16)
    v = lm.init(jax.random.key(0), x)
    rm, rv, w, b = _args(bn)
    v = {"params": {"scale": w, "bias": b},
         "batch_stats": {**v["batch_stats"], "running_mean": rm, "running_var": rv}}
    _check(lm.apply(v, x), want, "bfloat16", "linen")
    nm = jnnx.BatchNorm(C, channel_axis=-1, convention="strided", param_dtype=jnp.bfloat16, rngs=jax.random.key(0))
    nm.scale[...], nm.bias[...] = w, b
    nm.running_mean[...], nm.running_var[...] = rm, rv
    nm.eval()
    _check(nm(x), want, "bfloat16", "nnx")


def _patchts_modules() -> list[tuple[torch.nn.Module, tuple[int, ...]]]:
    from transformers.models.patchtsmixer.modeling_patchtsmixer import (
        PatchTSMixerBatchNorm,
        PatchTSMixerConfig,
        PatchTSMixerNormLayer,
    )
    from transformers.models.patchtst.modeling_patchtst import PatchTSTBatchNorm, PatchTSTConfig

    mods = [(PatchTSTBatchNorm(PatchTSTConfig(d_model=C)), SHAPE),
            (PatchTSMixerBatchNorm(PatchTSMixerConfig(d_model=C)), SHAPE),
            (PatchTSMixerNormLayer(PatchTSMixerConfig(d_model=C, norm_mlp="BatchNorm")), (2, 3, 11, C))]
    g = torch.Generator().manual_seed(0)
    for m, _ in mods:
        bn = next(b for b in m.modules() if isinstance(b, torch.nn.BatchNorm1d))
        with torch.no_grad():
            bn.weight.copy_(torch.randn(C, generator=g))
            bn.bias.copy_(torch.randn(C, generator=g))
            bn.running_mean.copy_(torch.randn(C, generator=g))
            bn.running_var.copy_(torch.rand(C, generator=g) * 2 + 0.25)
            bn.num_batches_tracked.fill_(7)
    return mods


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_patchtst_and_patchtsmixer_convert_exactly(dtype: str) -> None:
    """The real transformers classes, converted with from_torch: float32 within 1e-6, bf16 bit
    for bit after module.bfloat16(); the state_dict loads strictly into the class."""
    from jln.interop import from_torch, to_torch_state_dict

    for i, (m, shape) in enumerate(_patchts_modules()):
        m = m.to(_TDT[dtype]).eval()
        x = _x(10 + i, dtype, shape)
        want = m(_t(x)).detach()
        lm, v = from_torch(m)
        assert lm.convention == "strided" and lm.channel_axis == -1
        nm = from_torch(m, api="nnx")
        for api, got, sd in (("linen", lm.apply(v, x), to_torch_state_dict(v, lm)),
                             ("nnx", nm(x), to_torch_state_dict(nm))):
            _check(got, want, dtype, (type(m).__name__, api))
            assert sorted(sd) == sorted(m.state_dict()), (type(m).__name__, api)
            for k, t in m.state_dict().items():
                assert torch.equal(sd[k].to(t.dtype), t), (type(m).__name__, k)
            m.load_state_dict(sd, strict=True)


def test_patchtsmixer_norm_layer_without_a_batch_norm_inside_is_refused() -> None:
    from transformers.models.patchtsmixer.modeling_patchtsmixer import (
        PatchTSMixerConfig,
        PatchTSMixerNormLayer,
    )

    from jln.interop import from_torch

    m = PatchTSMixerNormLayer(PatchTSMixerConfig(d_model=C, norm_mlp="BatchNorm"))
    m.norm = torch.nn.LayerNorm(C)
    with pytest.raises(ValueError, match="PatchTSMixerBatchNorm"):
        from_torch(m)
