"""The Pallas kernels' wide-row path (column chunks inside a program), in interpret mode on CPU.

Rows of at least ``_plan.WIDE_FROM`` elements are read in column chunks: statistics passes,
then the normalize pass; backward, the row reductions, then dx and the parameter-gradient
partials chunk by chunk. Here the threshold and the chunks are shrunk (``wide`` fixture) so
that rows of a few hundred elements take that path, with a masked last chunk on the GPU
tiling and a shorter static last chunk on the TPU tiling; forward and every gradient are
compared with the XLA path (``impl="xla"``, same dtype) and with the XLA path in float64.
Lowering for a GPU and a TPU at real widths: tests/test_kernels_lowering*.py.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jln
from jln import kernels
from jln.kernels import _norm, _plan

from ._util import kernel_ops

F32, BF16 = jnp.float32, jnp.bfloat16

# the shipped thresholds, read before any fixture shrinks them
SHIPPED = (_plan.WIDE_FROM, _plan.MAX_WIDE_WIDTH, _plan.MAX_WIDTH, kernels.AUTO_MAX_WIDTH)

OPS = {op.name: op for op in kernel_ops()}
# the fast subset (interpret mode takes seconds per case); the rest: test_every_op_and_convention
FAST_CASES = [("layer_norm", "float32"), ("layer_norm", "bfloat16"), ("rms_norm[torch]", "bfloat16"),
              ("rms_norm[seed]", "float32"), ("add_layer_norm", "bfloat16"), ("add_rms_norm[llama]", "float32"),
              ("adaptive_layer_norm[dit]", "float32")]


@pytest.fixture
def wide(monkeypatch):
    """Rows of 64 elements and more take the wide path, in chunks of 64 columns (GPU tiling:
    4 rows per forward block, 2 per backward block) or 128 (TPU tiling); records the plans."""
    monkeypatch.setenv("JLN_NATIVE", "0")
    monkeypatch.setattr(_plan, "WIDE_FROM", 64)
    monkeypatch.setattr(_plan, "GPU_WIDE_FWD", (4, 64, 4))
    monkeypatch.setattr(_plan, "GPU_WIDE_BWD", (2, 64, 4))
    monkeypatch.setattr(_plan, "GPU_BWD_PROGRAMS", 2)  # keep the block rows on a few rows
    monkeypatch.setattr(_plan, "TPU_WIDE_CHUNK", 128)
    plans: list[tuple[str, _plan.Plan]] = []
    for name in ("_wide_fwd_kernel", "_wide_bwd_kernel", "_fwd_kernel", "_bwd_kernel"):
        kernel = getattr(_norm, name)

        @functools.wraps(kernel)
        def spy(spec, *refs, kernel=kernel):
            plans.append((kernel.__name__, spec.plan))
            return kernel(spec, *refs)

        monkeypatch.setattr(_norm, name, spy)
    jax.clear_caches()
    yield plans
    jax.clear_caches()


def _err(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    assert a.shape == b.shape
    return float(np.max(np.abs(a - b))) / max(1.0, float(np.max(np.abs(b))))


def _fwd_grads(op, inputs, impl, cts):
    names = list(inputs)
    floats = [n for n in names if jnp.issubdtype(inputs[n].dtype, jnp.floating)]

    def f(*arrays):
        return op.call_jln({**inputs, **dict(zip(floats, arrays, strict=True))}, 1, impl=impl)

    outs, vjp = jax.vjp(f, *[inputs[n] for n in floats])
    grads = vjp(tuple(jnp.asarray(c, o.dtype) for c, o in zip(cts, outs, strict=True)))
    return outs, dict(zip(floats, grads, strict=True))


def _check_op(name, shape, dtype, plans, tol, grad_tol):
    """``op`` through the wide kernels against the XLA path (same dtype) and float64 XLA."""
    op = OPS[name]
    raw = op.make_inputs(shape, 1, dtype)
    inputs = {n: jnp.asarray(v) for n, v in raw.items()}
    n_out = len(op.call_jln(inputs, 1, impl="xla"))
    rng = np.random.default_rng(3)
    cts = [rng.standard_normal(shape).astype(np.float32) for _ in range(n_out)]
    plans.clear()
    outs, grads = _fwd_grads(op, inputs, "pallas", cts)
    assert {(p.wide, p.target) for _, p in plans} == {(True, kernels.INTERPRET_TARGET)}, f"{name}: {plans}"
    assert {k for k, _ in plans} == {"_wide_fwd_kernel", "_wide_bwd_kernel"}, f"{name}: {plans}"
    ref_outs, ref_grads = _fwd_grads(op, inputs, "xla", cts)
    for o, r in zip(outs, ref_outs, strict=True):
        assert o.dtype == r.dtype
        assert _err(o, r) <= tol, f"{name} forward vs xla: {_err(o, r):.3g}"
    for key, g in grads.items():
        assert g.dtype == ref_grads[key].dtype and g.shape == ref_grads[key].shape
        assert _err(g, ref_grads[key]) <= grad_tol, f"{name} d{key} vs xla: {_err(g, ref_grads[key]):.3g}"
    with jax.enable_x64(True):
        wide64 = {n: jnp.asarray(np.asarray(v, np.float64)) for n, v in raw.items()}
        outs64, grads64 = _fwd_grads(op, wide64, "xla", [c.astype(np.float64) for c in cts])
        outs64 = [np.asarray(o) for o in outs64]
        grads64 = {k: np.asarray(v) for k, v in grads64.items()}
    # float64 bounds: the input and output roundings of the dtype (the XLA path's own error)
    tol64 = 4e-6 if dtype == "float32" else 2e-2
    for o, r in zip(outs, outs64, strict=True):
        assert _err(o, r) <= tol64, f"{name} forward vs float64: {_err(o, r):.3g}"
    for key, g in grads.items():
        assert _err(g, grads64[key]) <= 10 * tol64, f"{name} d{key} vs float64: {_err(g, grads64[key]):.3g}"


TOL = {"float32": (2e-6, 2e-5), "bfloat16": (1e-2, 3e-2)}


@pytest.mark.parametrize(("name", "dtype"), FAST_CASES)
@pytest.mark.slow
def test_ops_match_xla_and_float64(wide, name, dtype):
    # 300 columns: chunks of 64, the fifth masked (44 valid); 2 x 4 rows (per-example groups)
    _check_op(name, (2, 4, 300), dtype, wide, *TOL[dtype])


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("name", sorted(OPS))
def test_every_op_and_convention(wide, name, dtype):
    tol = TOL.get(dtype, (1e-3, 4e-3))
    _check_op(name, (2, 4, 300), dtype, wide, *tol)  # conditions per group of rows
    _check_op(name, (2, 3, 256), dtype, wide, *tol)  # width a multiple of the chunk; rows past the end


@pytest.mark.parametrize("name", [
    "layer_norm", "add_rms_norm[torch]",
    pytest.param("rms_norm[seed]", marks=pytest.mark.slow),
    pytest.param("adaptive_layer_norm[seed]", marks=pytest.mark.slow),
])
@pytest.mark.slow
def test_tpu_layout(wide, monkeypatch, name):
    # the exact-width layout: static chunks of 128, 128 and 44 columns; 8-row blocks
    monkeypatch.setattr(kernels, "INTERPRET_TARGET", "tpu")
    _check_op(name, (2, 8, 300), "float32", wide, *TOL["float32"])


def test_rows_far_from_zero_keep_the_pivot(wide):
    # LayerNorm of rows at 3e4 + N(0, 1): the statistics are taken about each row's first
    # element, as on the one-tile path; without it float32 loses about 3 digits here
    x = 3e4 + jax.random.normal(jax.random.key(1), (6, 1000), F32)
    s = jnp.linspace(0.5, 1.5, 1000, dtype=F32)
    got = jln.layer_norm(x, s, s, impl="pallas")
    assert {p.wide for _, p in wide} == {True}
    with jax.enable_x64(True):
        x64 = np.asarray(x, np.float64)
        ref = (x64 - x64.mean(-1, keepdims=True)) / np.sqrt(x64.var(-1, keepdims=True) + 1e-5)
        ref = ref * np.asarray(s, np.float64) + np.asarray(s, np.float64)
    assert _err(got, ref) <= 1e-5
    assert _err(got, jln.layer_norm(x, s, s, impl="xla")) <= 2e-6


@pytest.mark.slow
def test_wide_and_one_tile_paths_agree(wide, monkeypatch):
    x = (2 + jax.random.normal(jax.random.key(2), (5, 700), F32)).astype(BF16)
    w = jnp.linspace(0.5, 1.5, 700, dtype=BF16)

    def run():
        y, vjp = jax.vjp(lambda x, w: jln.rms_norm(x, w, convention="gemma", impl="pallas"), x, w)
        return (y, *vjp(jnp.ones_like(y)))

    got = run()
    monkeypatch.setattr(_plan, "WIDE_FROM", 10**9)
    jax.clear_caches()
    wide.clear()
    one_tile = run()
    assert {k for k, _ in wide} == {"_fwd_kernel", "_bwd_kernel"}
    for a, b in zip(got, one_tile, strict=True):
        assert a.dtype == b.dtype
        assert _err(a, b) <= (1e-2 if a.dtype == BF16 else 2e-5)


def test_shipped_thresholds():
    wide_from, max_wide, max_width, auto_max = SHIPPED
    # the one-tile kernels keep every width measured on hardware; the wide path starts above
    assert wide_from == auto_max + 1 == 16385
    assert not _plan.make_plan("gpu", False, 4096, 16384, BF16, ()).wide
    plan = _plan.make_plan("gpu", False, 4096, 16385, BF16, ())
    assert plan.wide and plan.width == 32768 and plan.col_chunk == 2048 and plan.masked_columns
    bwd = _plan.make_plan("gpu", False, 8192, 65536, F32, (), backward=True)
    assert bwd.wide and bwd.chunk == bwd.block_rows == 8 and bwd.num_col_chunks == 64
    # few rows: blocks shrink so that the programs still spread over the device
    assert _plan.make_plan("gpu", False, 64, 2**20, F32, (), backward=True).block_rows == 1
    tpu = _plan.make_plan("tpu", False, 64, 20000, F32, ())
    assert tpu.wide and tpu.width == 20000 and tpu.col_chunk == 8192 and tpu.block_rows == 8
    assert (max_wide, max_width) == (2**20, 65536)
    # impl="auto" keeps rows above 16384 on XLA until the wide path is measured on a GPU
    assert kernels.native("gpu", 16384) and not kernels.native("gpu", 16385)


@pytest.mark.parametrize(("target", "widest"), [("gpu", 2**20), ("tpu", 65536)])
def test_rows_past_the_widest_raise(monkeypatch, target, widest):
    monkeypatch.setattr(kernels, "INTERPRET_TARGET", target)

    def shape(n):
        return jax.ShapeDtypeStruct((2, n), BF16)

    def f(x):
        return jln.layer_norm(x, impl="pallas")

    assert jax.eval_shape(f, shape(widest)).shape == (2, widest)
    with pytest.raises(ValueError, match=rf"rows of {widest + 1} elements exceed the widest .* \({widest};"):
        jax.eval_shape(f, shape(widest + 1))
    assert jax.eval_shape(lambda x: jln.layer_norm(x, impl="auto"), shape(widest + 1)).shape == (2, widest + 1)


@pytest.mark.parametrize("name", ["layer_norm", "rms_norm[seed]"])
@pytest.mark.slow
def test_tpu_partial_last_block(wide, monkeypatch, name):
    # 12 rows in blocks of 8: the second block's last 4 rows lie past the array (unspecified
    # on a TPU); they must not reach the parameter gradients' partial sums
    monkeypatch.setattr(kernels, "INTERPRET_TARGET", "tpu")
    monkeypatch.setattr(_plan, "tpu_block_rows", lambda n: 8)
    _check_op(name, (12, 300), "float32", wide, *TOL["float32"])
