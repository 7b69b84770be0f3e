"""BatchNorm, InstanceNorm, GroupNorm and FrozenBatchNorm2d against torch (2.13, CPU) and float64.

Each expected value comes from torch's own modules/functions run on the same values, or from a
float64 NumPy computation of the textbook formula; bfloat16/float16 results are compared bit for
bit where torch's CPU kernel is reproduced exactly (stated per case).
"""

from __future__ import annotations

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jln
from jln import linen as jnn
from jln import nnx as jnnx

torch = pytest.importorskip("torch")
F = torch.nn.functional

_TDT = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "float64": torch.float64}


def _x(shape, seed=0, dtype="float32", offset=0.5):
    rng = np.random.default_rng(seed)
    return (2 * rng.standard_normal(shape) + offset).astype(np.float32).astype(jnp.dtype(dtype))


def _t(a):
    a = np.asarray(a)
    return torch.from_numpy(a.astype(np.float64 if a.dtype == np.float64 else np.float32)).to(_TDT[str(a.dtype)])


def _np(t):
    return t.detach().to(torch.float64).numpy()


def _ref64(x, axes, w=None, b=None, c=1):
    x = np.asarray(x, np.float64)
    mu = x.mean(axis=axes, keepdims=True)
    var = ((x - mu) ** 2).mean(axis=axes, keepdims=True)
    y = (x - mu) / np.sqrt(var + 1e-5)
    shape = [1] * x.ndim
    shape[c] = -1
    if w is not None:
        y = y * np.asarray(w, np.float64).reshape(shape) + np.asarray(b, np.float64).reshape(shape)
    return y


SHAPES = {"1d-2": (16, 3), "1d": (4, 3, 9), "2d": (4, 3, 5, 6), "3d": (2, 3, 3, 4, 5)}


@pytest.mark.parametrize("dim", [d if d == "2d" else pytest.param(d, marks=pytest.mark.slow) for d in SHAPES])
def test_batch_norm_training_steps_match_torch(dim: str) -> None:
    """Outputs, gradients of x/weight/bias, and the running statistics after 3 steps."""
    shape = SHAPES[dim]
    c = shape[1]
    cls = {2: torch.nn.BatchNorm1d, 3: torch.nn.BatchNorm1d, 4: torch.nn.BatchNorm2d, 5: torch.nn.BatchNorm3d}[len(shape)]
    for momentum in (0.1, None):
        tm = cls(c, momentum=momentum)
        with torch.no_grad():
            tm.weight.copy_(torch.linspace(0.5, 1.5, c))
            tm.bias.copy_(torch.linspace(-0.2, 0.3, c))
        rm, rv, nbt = jnp.zeros(c), jnp.ones(c), jnp.zeros((), jnp.int32)
        w, b = jnp.asarray(_np(tm.weight), jnp.float32), jnp.asarray(_np(tm.bias), jnp.float32)
        for step in range(3):
            x = _x(shape, seed=step)
            xt = _t(x).requires_grad_(True)
            yt = tm(xt)
            ct = _x(shape, seed=10 + step)
            yt.backward(_t(ct))
            y, st = jln.batch_norm(x, rm, rv, w, b, training=True, momentum=momentum, num_batches_tracked=nbt)
            axes = tuple(a for a in range(len(shape)) if a != 1)
            assert np.abs(np.asarray(y) - _ref64(x, axes, w, b)).max() < 4e-6
            assert np.abs(np.asarray(y) - _np(yt)).max() < 4e-6

            def loss(x, w, b, rm=rm, rv=rv, nbt=nbt, ct=ct, momentum=momentum):
                y, _ = jln.batch_norm(x, rm, rv, w, b, training=True, momentum=momentum, num_batches_tracked=nbt)
                return jnp.sum(y * ct)

            gx, gw, gb = jax.grad(loss, argnums=(0, 1, 2))(x, w, b)
            assert np.abs(np.asarray(gx) - _np(xt.grad)).max() < 2e-5
            assert np.abs(np.asarray(gw) - _np(tm.weight.grad)).max() < 1e-4 * np.sqrt(x.size)
            assert np.abs(np.asarray(gb) - _np(tm.bias.grad)).max() < 1e-4 * np.sqrt(x.size)
            tm.weight.grad = tm.bias.grad = None
            rm, rv, nbt = st
            np.testing.assert_allclose(np.asarray(rm), _np(tm.running_mean), rtol=1e-6, atol=1e-7)
            np.testing.assert_allclose(np.asarray(rv), _np(tm.running_var), rtol=1e-6, atol=1e-7)
            assert int(nbt) == int(tm.num_batches_tracked) == step + 1
        tm.eval()
        x = _x(shape, seed=99)
        y, st2 = jln.batch_norm(x, rm, rv, w, b, training=False)
        assert np.abs(np.asarray(y) - _np(tm(_t(x)))).max() < 4e-6
        np.testing.assert_array_equal(np.asarray(st2.mean), np.asarray(rm))  # eval changes nothing


def test_batch_norm_without_running_stats_uses_the_batch() -> None:
    x = _x((6, 3, 5))
    tm = torch.nn.BatchNorm1d(3, track_running_stats=False, affine=False).eval()
    y, st = jln.batch_norm(x, training=False)
    assert st == jln.RunningStats(None, None, None)
    assert np.abs(np.asarray(y) - _np(tm(_t(x)))).max() < 4e-6


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_dtype_flow(dtype: str) -> None:
    """float32 parameters (torch's mixed path): statistics float32, one rounding: bit-exact.
    Same-dtype parameters: torch rounds its statistics to the half dtype (jln's rule in
    ``BatchStatSpec._rounded_stats``): float16 bit-exact; bfloat16 bit-exact here (rows of 9
    and 32 per channel; before the variance was rounded too, 83% for BatchNorm and 88% for
    InstanceNorm); GroupNorm ~all (a float16 tie may round the other way)."""
    shape = (8, 4, 9)
    x = _x(shape, dtype=dtype)
    w32, b32 = _x((4,), 1) * 0.1 + 1, _x((4,), 2) * 0.1
    for pd in ("float32", dtype):
        w, b = w32.astype(pd), b32.astype(pd)
        rm, rv = np.zeros(4, pd), np.ones(4, pd)
        trm, trv = _t(rm), _t(rv)
        yt = F.batch_norm(_t(x), trm, trv, _t(w), _t(b), True, 0.1, 1e-5)
        y, st = jln.batch_norm(jnp.asarray(x), jnp.asarray(rm), jnp.asarray(rv), jnp.asarray(w), jnp.asarray(b), training=True)
        assert y.dtype == jnp.dtype(dtype) and st.mean.dtype == jnp.dtype(pd)
        same = (np.asarray(y.astype(jnp.float32)) == _np(yt)).mean()
        ulp = float(jnp.finfo(dtype).eps) * 4  # |y| < 4
        assert same == 1.0
        assert np.abs(np.asarray(y.astype(jnp.float32)) - _np(yt)).max() <= ulp
        np.testing.assert_allclose(np.asarray(st.var.astype(jnp.float32)), _np(trv), rtol=8e-3)
        # eval mode on torch's updated statistics (a bfloat16 update may differ from torch's by an ulp)
        rm_t, rv_t = (jnp.asarray(_np(t)).astype(pd) for t in (trm, trv))
        ye, _ = jln.batch_norm(jnp.asarray(x), rm_t, rv_t, jnp.asarray(w), jnp.asarray(b), training=False)
        yte = F.batch_norm(_t(x), trm, trv, _t(w), _t(b), False, 0.1, 1e-5)
        assert (np.asarray(ye.astype(jnp.float32)) == _np(yte)).all()
        for fn, tfn in ((lambda x, w, b: jln.group_norm(x, 2, w, b), lambda x, w, b: F.group_norm(x, 2, w, b)),
                        (lambda x, w, b: jln.instance_norm(x, None, None, w, b)[0],
                         lambda x, w, b: F.instance_norm(x, None, None, w, b))):
            got = np.asarray(fn(jnp.asarray(x), jnp.asarray(w), jnp.asarray(b)).astype(jnp.float32))
            want = _np(tfn(_t(x), _t(w), _t(b)))
            assert (got == want).mean() > 0.99
            assert np.abs(got - want).max() <= ulp
    # rank 4, no parameters: the statistics rounded as torch's kernel does, bit-exact
    x4 = _x((4, 3, 5, 6), dtype=dtype)
    yt = _np(F.batch_norm(_t(x4), None, None, None, None, True, 0.1, 1e-5))
    y, _ = jln.batch_norm(jnp.asarray(x4), training=True)
    assert (np.asarray(y.astype(jnp.float32)) == yt).all()


def test_bfloat16_short_rows_round_the_mean_as_torch() -> None:
    """Rows of 5-7 bfloat16 values often have a mean exactly halfway between two bfloat16
    numbers; torch rounds its sum / n, so jln does too (the corrected two-pass mean, a float32
    ulp off, flipped whole rows: 98.4% of elements matched on (2, 64, 6) before)."""
    for shape in ((2, 64, 6), (4, 32, 5), (3, 16, 7)):
        x = _x(shape, seed=3, dtype="bfloat16", offset=0.0)
        want = _np(F.instance_norm(_t(x)))
        got = np.asarray(jln.instance_norm(jnp.asarray(x))[0].astype(jnp.float32))
        assert (got == want).all(), (shape, (got == want).mean())
        want_bn = _np(F.batch_norm(_t(x).movedim(1, 0).reshape(1, shape[1], -1), None, None, training=True))
        got_bn, _ = jln.batch_norm(jnp.asarray(x).swapaxes(0, 1).reshape(1, shape[1], -1), training=True)
        assert (np.asarray(got_bn.astype(jnp.float32)) == want_bn).all(), shape


@pytest.mark.parametrize("shape,groups", [pytest.param((2, 6, 7), 3, marks=pytest.mark.slow), ((2, 8, 4, 5), 4), pytest.param((3, 4, 2, 3, 3), 1, marks=pytest.mark.slow),
                                          pytest.param((2, 4, 5), 4, marks=pytest.mark.slow)])
def test_group_norm_matches_torch(shape: tuple[int, ...], groups: int) -> None:
    x = _x(shape)
    c = shape[1]
    tm = torch.nn.GroupNorm(groups, c)
    with torch.no_grad():
        tm.weight.copy_(torch.linspace(0.5, 1.5, c))
        tm.bias.copy_(torch.linspace(-0.2, 0.3, c))
    w, b = jnp.asarray(_np(tm.weight), jnp.float32), jnp.asarray(_np(tm.bias), jnp.float32)
    xt = _t(x).requires_grad_(True)
    ct = _x(shape, seed=5)
    yt = tm(xt)
    yt.backward(_t(ct))
    y = jln.group_norm(x, groups, w, b)
    xg = np.asarray(x, np.float64).reshape(shape[0], groups, -1)
    ref = ((xg - xg.mean(-1, keepdims=True)) / np.sqrt(xg.var(-1, keepdims=True) + 1e-5)).reshape(shape)
    ref = ref * np.asarray(w, np.float64).reshape((1, c) + (1,) * (len(shape) - 2)) + np.asarray(b, np.float64).reshape((1, c) + (1,) * (len(shape) - 2))
    assert np.abs(np.asarray(y) - ref).max() < 4e-6
    assert np.abs(np.asarray(y) - _np(yt)).max() < 4e-6
    gx, gw, gb = jax.grad(lambda x, w, b: jnp.sum(jln.group_norm(x, groups, w, b) * ct), argnums=(0, 1, 2))(x, w, b)
    assert np.abs(np.asarray(gx) - _np(xt.grad)).max() < 2e-5
    assert np.abs(np.asarray(gw) - _np(tm.weight.grad)).max() < 1e-4
    assert np.abs(np.asarray(gb) - _np(tm.bias.grad)).max() < 1e-4
    # channels last: the same numbers
    y_last = jln.group_norm(jnp.moveaxis(x, 1, -1), groups, w, b, channel_axis=-1)
    assert np.abs(np.asarray(jnp.moveaxis(y_last, -1, 1)) - np.asarray(y)).max() < 4e-6


def test_group_norm_keeps_accuracy_at_a_large_offset() -> None:
    x = _x((2, 4, 64), offset=1e4) * 0.01 + np.float32(0)
    y = jln.group_norm(jnp.asarray(x), 2)
    xg = np.asarray(x, np.float64).reshape(2, 2, -1)
    ref = ((xg - xg.mean(-1, keepdims=True)) / np.sqrt(xg.var(-1, keepdims=True) + 1e-5)).reshape(x.shape)
    assert np.abs(np.asarray(y) - ref).max() < 1e-3


def test_masked_group_norm_takes_statistics_over_the_mask_only() -> None:
    # (N, C, T) with the last frames of each sample padded: statistics over the kept frames (a
    # float64 reference), every element normalized with them; jit, grad and errors as unmasked
    n, c, t, g = 3, 8, 20, 4
    x = _x((n, c, t), offset=3.0)
    keep = np.arange(t)[None, :] < np.array([20, 13, 6])[:, None]  # (N, T)
    mask = keep[:, None, :]  # broadcasts over channels
    w, b = _x((c,), seed=1), _x((c,), seed=2)
    y = jax.jit(jln.group_norm, static_argnums=1)(jnp.asarray(x), g, jnp.asarray(w), jnp.asarray(b), mask=jnp.asarray(mask))
    xg = np.asarray(x, np.float64).reshape(n, g, c // g, t)
    mg = np.broadcast_to(mask, x.shape).reshape(xg.shape)
    cnt = mg.sum(axis=(2, 3), keepdims=True)
    mu = np.where(mg, xg, 0).sum(axis=(2, 3), keepdims=True) / cnt
    var = np.where(mg, (xg - mu) ** 2, 0).sum(axis=(2, 3), keepdims=True) / cnt
    ref = ((xg - mu) / np.sqrt(var + 1e-5)).reshape(x.shape) * w[:, None] + b[:, None]
    assert np.abs(np.asarray(y, np.float64) - ref).max() <= 2e-6 * np.abs(ref).max()
    # padded elements change nothing in the kept ones; an all-true mask is the plain GroupNorm
    x2 = np.where(mask, x, 1e3).astype(np.float32)
    y2 = jln.group_norm(jnp.asarray(x2), g, jnp.asarray(w), jnp.asarray(b), mask=mask)
    assert np.array_equal(np.asarray(y2)[np.broadcast_to(mask, x.shape)], np.asarray(y)[np.broadcast_to(mask, x.shape)])
    full = jln.group_norm(jnp.asarray(x), g, jnp.asarray(w), jnp.asarray(b), mask=np.ones(x.shape, bool))
    assert np.abs(np.asarray(full) - np.asarray(jln.group_norm(jnp.asarray(x), g, jnp.asarray(w), jnp.asarray(b)))).max() < 4e-6
    # the gradient: float64 torch through the same masked formula
    xt = torch.from_numpy(np.asarray(x, np.float64)).requires_grad_(True)
    mt = torch.from_numpy(np.array(mg))
    xgt = xt.reshape(xg.shape)
    mut = torch.where(mt, xgt, 0).sum((2, 3), keepdim=True) / mt.sum((2, 3), keepdim=True)
    vt = torch.where(mt, (xgt - mut) ** 2, 0).sum((2, 3), keepdim=True) / mt.sum((2, 3), keepdim=True)
    yt = ((xgt - mut) / torch.sqrt(vt + 1e-5)).reshape(x.shape) * torch.from_numpy(w.astype(np.float64))[:, None]
    torch.sin(yt).sum().backward()
    gx = jax.grad(lambda x: jnp.sum(jnp.sin(jln.group_norm(x, g, jnp.asarray(w), mask=mask))))(jnp.asarray(x))
    assert np.abs(np.asarray(gx, np.float64) - _np(xt.grad)).max() <= 1e-5 * np.abs(_np(xt.grad)).max()
    with pytest.raises(ValueError, match=r"`mask` must broadcast to x.shape=\(3, 8, 20\); received mask.shape=\(3, 20\)"):
        jln.group_norm(jnp.asarray(x), g, mask=keep)
    with pytest.raises(TypeError, match="`mask` must be a boolean or numeric array"):
        jln.group_norm(jnp.asarray(x), g, mask=[True, False])


@pytest.mark.parametrize("dtype,floor", [("bfloat16", 0.9995), ("float16", 0.9980)])
def test_group_norm_half_precision_on_offset_inputs_rounds_as_torch(dtype: str, floor: float) -> None:
    # torch's CPU GroupNorm applies x * s + (bias - mean * s), s = rstd * weight per channel; the
    # textbook order rounded differently on 120 of 163,840 bfloat16 elements here (99.927%) and
    # float16 ~99.7%. What still differs is torch's statistics: a vectorized Welford cascade
    # whose lane count follows the CPU (1 ulp, measured 40 elements for bfloat16).
    same = total = 0
    for seed in range(10):
        torch.manual_seed(seed)
        x = (0.5 + 0.05 * torch.randn(2, 32, 16, 16)).to(_TDT[dtype])
        w = (1 + 0.1 * torch.randn(32)).to(_TDT[dtype])
        b = (0.1 * torch.randn(32)).to(_TDT[dtype])
        want = _np(F.group_norm(x, 8, w, b, 1e-5))
        xj, wj, bj = (jnp.asarray(_np(t)).astype(dtype) for t in (x, w, b))
        got = np.asarray(jln.group_norm(xj, 8, wj, bj).astype(jnp.float32))
        same += int((got == want).sum())
        total += got.size
        ulp = float(jnp.finfo(dtype).eps) * 4  # |y| < 4
        assert np.abs(got - want).max() <= ulp
        if seed == 0:  # the derivative stays the whole formula's (the statistics' terms included)
            x64 = x.double().requires_grad_(True)
            torch.sin(F.group_norm(x64, 8, w.double(), b.double(), 1e-5)).sum().backward()
            gx = jax.grad(lambda x, w, b: jnp.sum(jnp.sin(jln.group_norm(x, 8, w, b).astype(jnp.float32))))(xj, wj, bj)
            g64 = _np(x64.grad)
            assert np.abs(np.asarray(gx, np.float64) - g64).max() <= 0.02 * np.abs(g64).max()
    assert same / total >= floor, f"{same}/{total}"


@pytest.mark.parametrize("shape", [(3, 2, 7), (2, 3, 4, 5), (2, 2, 3, 3, 4)])
def test_instance_norm_matches_torch_with_and_without_running_stats(shape: tuple[int, ...]) -> None:
    c = shape[1]
    cls = {3: torch.nn.InstanceNorm1d, 4: torch.nn.InstanceNorm2d, 5: torch.nn.InstanceNorm3d}[len(shape)]
    plain = cls(c)
    x = _x(shape)
    y, st = jln.instance_norm(x)
    assert st.mean is None and np.abs(np.asarray(y) - _np(plain(_t(x)))).max() < 4e-6
    tm = cls(c, affine=True, track_running_stats=True)
    rm, rv = jnp.zeros(c), jnp.ones(c)
    for step in range(2):
        x = _x(shape, seed=step)
        xt = _t(x).requires_grad_(True)
        yt = tm(xt)
        yt.backward(_t(np.ones(shape, np.float32)))
        y, (rm, rv, nbt) = jln.instance_norm(x, rm, rv, jnp.ones(c), jnp.zeros(c), training=True)
        assert nbt is None
        assert np.abs(np.asarray(y) - _np(yt)).max() < 4e-6
        np.testing.assert_allclose(np.asarray(rm), _np(tm.running_mean), rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(np.asarray(rv), _np(tm.running_var), rtol=1e-6)
    tm.eval()
    y, _ = jln.instance_norm(x, rm, rv, jnp.ones(c), jnp.zeros(c), training=False)
    assert np.abs(np.asarray(y) - _np(tm(_t(x)))).max() < 4e-6


def _detr_frozen():
    from transformers.models.detr.modeling_detr import DetrFrozenBatchNorm2d

    m = DetrFrozenBatchNorm2d(4)
    g = torch.Generator().manual_seed(0)
    for name, base in (("weight", 1.0), ("bias", 0.0), ("running_mean", 0.0), ("running_var", 1.0)):
        getattr(m, name).copy_(base + 0.3 * torch.rand(4, generator=g))
    return m


@pytest.mark.parametrize("dtype", ["bfloat16", pytest.param("float32", marks=pytest.mark.slow)])
def test_frozen_batch_norm_matches_detr(dtype: str) -> None:
    m = _detr_frozen()
    x = _x((2, 4, 5, 5), dtype=dtype)
    want = m(_t(x))
    bufs = [jnp.asarray(_np(getattr(m, n)), jnp.float32) for n in ("running_mean", "running_var", "weight", "bias")]
    got = jln.frozen_batch_norm(jnp.asarray(x), *bufs)
    assert got.dtype == jnp.float32 and want.dtype == torch.float32  # bfloat16 x promotes, as torch
    # op by op as torch (no fused multiply-add, torch's 1/sqrt): bit-exact
    np.testing.assert_array_equal(np.asarray(got), _np(want).astype(np.float32))
    g = jax.grad(lambda x: jnp.sum(jln.frozen_batch_norm(x, *bufs) ** 2))(jnp.asarray(x, jnp.float32))
    xt = _t(np.asarray(x, np.float32)).requires_grad_(True)
    (m(xt) ** 2).sum().backward()
    np.testing.assert_allclose(np.asarray(g), _np(xt.grad), rtol=1e-6, atol=1e-6)


def test_jit_vmap_grad_and_channels_last() -> None:
    x = _x((4, 3, 6))
    rm, rv = jnp.zeros(3), jnp.ones(3)
    eager = jln.batch_norm(x, rm, rv, training=True)
    jitted = jax.jit(lambda x, rm, rv: jln.batch_norm(x, rm, rv, training=True))(jnp.asarray(x), rm, rv)
    for a, b in zip(jax.tree.leaves(eager), jax.tree.leaves(jitted), strict=True):
        # (XLA may fuse the two programs differently: within an ulp)
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=3e-7, atol=1.2e-7)
    xs = np.stack([x, _x((4, 3, 6), seed=3)])
    ys = jax.vmap(lambda v: jln.group_norm(v, 3))(jnp.asarray(xs))
    for i in range(2):
        # (a batched reduction may sum in another order: within an ulp or two)
        np.testing.assert_allclose(np.asarray(ys[i]), np.asarray(jln.group_norm(jnp.asarray(xs[i]), 3)), atol=5e-7)
    last, st_last = jln.batch_norm(jnp.moveaxis(x, 1, -1), rm, rv, training=True, channel_axis=-1)
    np.testing.assert_allclose(np.asarray(jnp.moveaxis(last, -1, 1)), np.asarray(eager[0]), atol=1e-6)
    np.testing.assert_allclose(np.asarray(st_last.var), np.asarray(eager[1].var), rtol=1e-6)
    # running statistics carry no gradient; the output's gradient sums to 0 over the batch
    g = jax.grad(lambda x: jnp.sum(jln.batch_norm(x, rm, rv, training=True)[1].mean))(jnp.asarray(x))
    assert not np.asarray(g).any()


def test_sync_batch_norm_through_axis_name_under_vmap() -> None:
    """SyncBatchNorm: the batch split into 4 blocks mapped over axis "d"; statistics (and the
    running statistics) are those of the whole batch."""
    x = _x((8, 3, 5))
    rm, rv = jnp.zeros(3), jnp.ones(3)
    whole, st = jln.batch_norm(x, rm, rv, jnp.full(3, 1.5), jnp.zeros(3), training=True)

    def per_device(xb):
        return jln.batch_norm(xb, rm, rv, jnp.full(3, 1.5), jnp.zeros(3), training=True, axis_name="d")

    ys, sts = jax.vmap(per_device, axis_name="d")(jnp.asarray(x).reshape(4, 2, 3, 5))
    np.testing.assert_allclose(np.asarray(ys).reshape(x.shape), np.asarray(whole), atol=2e-6)
    np.testing.assert_allclose(np.asarray(sts.var[0]), np.asarray(st.var), rtol=1e-6)


@pytest.mark.slow
def test_sync_batch_norm_gradient_is_the_whole_batch_s() -> None:
    x = _x((8, 3, 5))
    rm, rv = jnp.zeros(3), jnp.ones(3)

    def per_device(xb):
        return jln.batch_norm(xb, rm, rv, jnp.full(3, 1.5), jnp.zeros(3), training=True, axis_name="d")

    gw = jax.grad(lambda x: jnp.sum(jax.vmap(per_device, axis_name="d")(x)[0] ** 3))(jnp.asarray(x).reshape(4, 2, 3, 5))
    g1 = jax.grad(lambda x: jnp.sum(jln.batch_norm(x, rm, rv, jnp.full(3, 1.5), jnp.zeros(3), training=True)[0] ** 3))(jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(gw).reshape(x.shape), np.asarray(g1), atol=1e-4)


@pytest.mark.slow
def test_sync_batch_norm_under_shard_map_on_4_devices() -> None:
    code = (
        "import os; os.environ['XLA_FLAGS']='--xla_force_host_platform_device_count=4'\n"
        "import jax, jax.numpy as jnp, numpy as np, jln\n"
        "from jax.sharding import PartitionSpec as P\n"
        "mesh = jax.make_mesh((4,), ('d',))\n"
        "x = jnp.asarray(np.random.default_rng(0).standard_normal((8, 3, 5)), jnp.float32)\n"
        "xs = jax.device_put(x, jax.sharding.NamedSharding(mesh, P('d')))\n"
        "f = lambda x: jln.batch_norm(x, jnp.zeros(3), jnp.ones(3), training=True, axis_name='d')\n"
        "y, st = jax.shard_map(f, mesh=mesh, in_specs=P('d'), out_specs=(P('d'), P()), check_vma=False)(xs)\n"
        "w, sw = jln.batch_norm(x, jnp.zeros(3), jnp.ones(3), training=True)\n"
        "print(float(jnp.abs(y - w).max()), float(jnp.abs(st.var - sw.var).max()))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env["JAX_PLATFORMS"] = "cpu"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    dy, dv = map(float, out.stdout.split())
    assert dy < 2e-6 and dv < 2e-6


def test_linen_and_nnx_agree_with_torch_after_steps() -> None:
    shape = (4, 3, 5, 5)
    tm = torch.nn.BatchNorm2d(3)
    lm = jnn.BatchNorm()
    x0 = _x(shape)
    variables = lm.init(jax.random.key(0), x0)
    nm = jnnx.BatchNorm(3)
    for step in range(3):
        x = _x(shape, seed=step)
        yt = tm(_t(x))
        yl, upd = lm.apply(variables, x, mutable=["batch_stats"])
        variables = {**variables, **upd}
        yn = nm(x)
        np.testing.assert_array_equal(np.asarray(yl), np.asarray(yn))
        assert np.abs(np.asarray(yl) - _np(yt)).max() < 4e-6
    bs = variables["batch_stats"]
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        np.testing.assert_array_equal(np.asarray(bs[name]), np.asarray(getattr(nm, name)[...]))
        np.testing.assert_allclose(np.asarray(bs[name]), _np(getattr(tm, name)), rtol=1e-6)
    tm.eval()
    nm.eval()
    x = _x(shape, seed=7)
    ye = lm.apply(variables, x, use_running_average=True)
    np.testing.assert_array_equal(np.asarray(ye), np.asarray(nm(x)))
    assert np.abs(np.asarray(ye) - _np(tm(_t(x)))).max() < 4e-6
    np.testing.assert_array_equal(np.asarray(lm.apply(variables, x)), np.asarray(ye))  # not mutable: eval
    with pytest.raises(ValueError, match="mutable"):
        lm.apply(variables, x, use_running_average=False)


def test_errors_say_what_to_do() -> None:
    x = jnp.ones((4, 3, 5))
    with pytest.raises(ValueError, match="no native kernels"):
        jln.batch_norm(x, training=True, impl="native")
    with pytest.raises(ValueError, match="pallas"):
        jln.group_norm(x, 3, impl="pallas")
    with pytest.raises(ValueError, match="divides"):
        jln.group_norm(x, 2)
    with pytest.raises(ValueError, match="num_batches_tracked"):
        jln.batch_norm(x, jnp.zeros(3), jnp.ones(3), training=True, momentum=None)
    with pytest.raises(ValueError, match="more than 1 value"):
        jln.batch_norm(jnp.ones((1, 3)), jnp.zeros(3), jnp.ones(3), training=True)
    # without running statistics too, as torch's F.batch_norm (track_running_stats=False)
    with pytest.raises(ValueError, match="more than 1 value"):
        jln.batch_norm(jnp.ones((1, 3)), training=True)
    with pytest.raises(ValueError, match="more than 1 value"):
        torch.nn.functional.batch_norm(torch.ones(1, 3), None, None, training=True)
    with pytest.raises(ValueError, match=r"shape \(3,\)"):
        jln.batch_norm(x, jnp.zeros(4), jnp.ones(4), training=True)
    with pytest.raises(ValueError, match="both"):
        jln.batch_norm(x, jnp.zeros(3), training=True)
    with pytest.raises(ValueError, match="batch axis"):
        jln.batch_norm(x, training=True, channel_axis=0)
    with pytest.raises(ValueError, match="momentum"):
        jnnx.BatchNorm(3, momentum=1.5)
    with pytest.raises(ValueError, match="num_features=3"):
        jnnx.BatchNorm(3)(jnp.ones((2, 4)))
    # flax's argument names say what jln (torch) calls them
    with pytest.raises(TypeError, match=r"\.eval\(\) and \.train\(\).*momentum=0\.01"):
        jnnx.BatchNorm(3, use_running_average=True)
    with pytest.raises(TypeError, match="affine="):
        jnn.BatchNorm(use_scale=False)
    with pytest.raises(TypeError, match="channel_axis="):
        jnn.InstanceNorm(axis=-1)


_FROZEN_COPIES = ("conditional_detr.ConditionalDetr", "deformable_detr.DeformableDetr", "rt_detr.RTDetr",
                  "table_transformer.TableTransformer", "grounding_dino.GroundingDino", "d_fine.DFine")


def _torch_modules():
    import importlib

    mods = [torch.nn.BatchNorm2d(3), torch.nn.BatchNorm1d(3, momentum=None), torch.nn.SyncBatchNorm(3),
            torch.nn.InstanceNorm2d(3), torch.nn.InstanceNorm1d(3, affine=True, track_running_stats=True),
            torch.nn.GroupNorm(3, 6), torch.nn.BatchNorm3d(3, affine=False, track_running_stats=False)]
    for copy in _FROZEN_COPIES:
        model, prefix = copy.split(".")
        cls = getattr(importlib.import_module(f"transformers.models.{model}.modeling_{model}"), f"{prefix}FrozenBatchNorm2d")
        m = cls(3)
        m.running_var.copy_(torch.rand(3) + 0.5)
        mods.append(m)
    return mods


def test_interop_round_trip_with_running_statistics() -> None:
    """Two training steps in torch, then convert: eval outputs match, the running statistics and
    the counter come back in the state_dict, which loads strictly into a fresh torch module."""
    from jln.interop import from_torch, to_torch_state_dict

    torch.manual_seed(0)
    for m in _torch_modules():
        c = 6 if isinstance(m, torch.nn.GroupNorm) else 3
        shape = (4, c, 5) if "1d" in type(m).__name__ else (4, c, 3, 4) if "3d" not in type(m).__name__ else (2, c, 2, 3, 4)
        frozen = "Frozen" in type(m).__name__
        if not frozen:
            m.train()
            for _ in range(2):
                m(torch.randn(shape))
        m.eval()
        x = torch.randn(shape)
        with torch.no_grad():
            want = m(x).numpy()
        for api in ("linen", "nnx"):
            if api == "linen":
                jm, v = from_torch(m)
                kw = {} if type(jm).__name__ in ("GroupNorm", "FrozenBatchNorm") else {"use_running_average": True}
                got, sd = jm.apply(v, jnp.asarray(x.numpy()), **kw), to_torch_state_dict(v, jm)
            else:
                nm = from_torch(m, api="nnx")
                got, sd = nm(jnp.asarray(x.numpy())), to_torch_state_dict(nm)
            assert np.abs(np.asarray(got) - want).max() <= (0 if frozen else 1e-6), (type(m).__name__, api)
            assert sorted(sd) == sorted(m.state_dict()), type(m).__name__
            for k, t in m.state_dict().items():
                assert torch.equal(sd[k].to(t.dtype), t), (type(m).__name__, k)
            fresh = type(m)(*([3, 6] if isinstance(m, torch.nn.GroupNorm) else [3]))
            if hasattr(fresh, "track_running_stats"):
                fresh = type(m)(3, affine=m.affine, track_running_stats=m.track_running_stats)
            fresh.load_state_dict(sd, strict=True)


def test_a_frozen_batch_norm_with_other_code_is_refused() -> None:
    from transformers.models.detr.modeling_detr import DetrFrozenBatchNorm2d

    from jln.interop import from_torch

    class OtherFrozenBatchNorm2d(DetrFrozenBatchNorm2d):
        __module__ = "transformers.models.other.modeling_other"

        def forward(self, x):  # eps 1e-3: not the DETR computation
            scale = self.weight.reshape(1, -1, 1, 1) * (self.running_var.reshape(1, -1, 1, 1) + 1e-3).rsqrt()
            return x * scale

    with pytest.raises(TypeError, match="no converter"):
        from_torch(OtherFrozenBatchNorm2d(3))
    with pytest.raises(ValueError, match="bias=False"):
        from_torch(torch.nn.BatchNorm2d(3, bias=False))


@pytest.mark.parametrize("name", ["BatchNorm", "InstanceNorm", "GroupNorm", "FrozenBatchNorm"])
def test_linen_and_nnx_take_the_same_options_and_jit_as_static(name: str) -> None:
    import dataclasses
    import inspect

    from flax import nnx

    lin, nn_ = getattr(jnn, name), getattr(jnnx, name)
    fields = [f.name for f in dataclasses.fields(lin) if f.name not in ("parent", "name")]
    params = [p for p in inspect.signature(nn_.__init__).parameters if p not in ("self", "rngs", "num_features")]
    assert fields == params
    for api, section in ((lin, "Attributes:"), (nn_, "Args:")):
        doc = inspect.getdoc(api) or ""
        for option in fields:
            assert f"\n  {option}: " in doc.split(section)[1], (name, option)
    m = nn_(2, 4) if name == "GroupNorm" else nn_(4)
    x = _x((2, 4, 3))
    gdef, state = nnx.split(m)
    y = jax.jit(lambda g, s, x: nnx.merge(g, s)(x), static_argnums=0)(gdef, state, jnp.asarray(x))
    np.testing.assert_allclose(np.asarray(y), np.asarray(m(jnp.asarray(x))), atol=1e-6)


def test_nnx_step_under_jit_updates_batch_stats() -> None:
    """The functional NNX pattern: a jitted training step returns the updated state."""
    from flax import nnx

    m = jnnx.BatchNorm(3)
    x = jnp.asarray(_x((8, 3)))

    @nnx.jit
    def step(m, x):
        return m(x)

    step(m, x)
    step(m, x)
    assert int(m.num_batches_tracked[...]) == 2
    tm = torch.nn.BatchNorm1d(3)
    tm(_t(np.asarray(x)))
    tm(_t(np.asarray(x)))
    np.testing.assert_allclose(np.asarray(m.running_var[...]), _np(tm.running_var), rtol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("cls", ["BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "InstanceNorm1d", "InstanceNorm2d"])
@pytest.mark.parametrize("momentum", [0.1, 0.3, None])
@pytest.mark.parametrize("affine,track", [(True, True), (False, True), (True, False)])
@pytest.mark.parametrize("channels_last", [False, True])
def test_module_grid_training_then_eval_matches_torch(cls: str, momentum: float | None, affine: bool, track: bool,
                                                      channels_last: bool) -> None:
    """linen and NNX against the torch module: 3 training steps then eval, every option."""
    ndim = {"1": 3, "2": 4, "3": 5}[cls[-2]]
    shape = (4, 3, 5, 4, 3)[:ndim]
    tm = getattr(torch.nn, cls)(3, momentum=momentum, affine=affine, track_running_stats=track)
    name = "BatchNorm" if cls.startswith("Batch") else "InstanceNorm"
    ca = -1 if channels_last else 1
    lm = getattr(jnn, name)(momentum=momentum, affine=affine, track_running_stats=track, channel_axis=ca)
    nm = getattr(jnnx, name)(3, momentum=momentum, affine=affine, track_running_stats=track, channel_axis=ca)

    def jx(x):
        return jnp.moveaxis(jnp.asarray(x), 1, -1) if channels_last else jnp.asarray(x)

    def back(y):
        return np.asarray(jnp.moveaxis(y, -1, 1) if channels_last else y)

    variables = lm.init(jax.random.key(0), jx(_x(shape)))
    for step in range(3):
        x = _x(shape, seed=step)
        yt = _np(tm(_t(x)))
        yl, upd = lm.apply(variables, jx(x), mutable=["batch_stats"])
        variables = {**variables, **upd}
        yn = nm(jx(x))
        assert np.abs(back(yl) - yt).max() < 4e-6 and np.abs(back(yn) - yt).max() < 4e-6
    for k, v in variables.get("batch_stats", {}).items():
        np.testing.assert_allclose(np.asarray(v), _np(getattr(tm, k)), rtol=2e-6, atol=1e-7)
        np.testing.assert_array_equal(np.asarray(v), np.asarray(getattr(nm, k)[...]))
    tm.eval()
    nm.eval()
    x = _x(shape, seed=9)
    yt = _np(tm(_t(x)))
    assert np.abs(back(lm.apply(variables, jx(x))) - yt).max() < 4e-6
    assert np.abs(back(nm(jx(x))) - yt).max() < 4e-6
