"""The Pallas kernels lowered for a TPU (Mosaic) on this CPU-only machine.

As ``tests/test_kernels_lowering.py`` does for NVIDIA GPUs: interpret mode checks what the
kernels compute, not whether Pallas's Mosaic lowering accepts them (block shapes, primitives
with a TPU rule). Here every op is traced for the TPU target (the exact-width layout) and
lowered with ``lowering_platforms=("tpu",)``: a lowering error fails the test, and the module
holds exactly the Mosaic calls expected (one forward, one backward). What libtpu then compiles
and computes needs a TPU, which no run has had.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

import jln
from jln import kernels

from ._util import kernel_ops, kernel_programs

F32, BF16 = jnp.float32, jnp.bfloat16
MOSAIC = "tpu_custom_call"


@pytest.fixture(autouse=True)
def tpu_target(monkeypatch):
    monkeypatch.setattr(kernels, "_target", lambda x: ("tpu", False))
    # some Mosaic rules (lax.sign's) ask the local device which TPU they lower for; name one
    # (a v5e) instead
    try:
        from jax._src.pallas.mosaic import tpu_info
    except ImportError:  # a jax without it lowers without asking
        return
    info = tpu_info._get_tpu_info_impl(tpu_info.ChipVersion.TPU_V5E, 1)
    monkeypatch.setattr(tpu_info, "get_tpu_info", lambda: info)


def _lower(fn, *args, platforms=("tpu",)):
    return jax.jit(fn).trace(*args).lower(lowering_platforms=platforms).as_text()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("op", kernel_ops(), ids=lambda op: op.name)
@pytest.mark.slow
def test_every_parity_op_lowers_for_tpu(op, dtype):
    # every op and convention, forward and the gradient of every input: rows narrower than a
    # lane tile (40), per-example condition groups (24 rows of 256), and a 1000-wide row
    for shape in ((4, 3, 40), (2, 24, 256), (5, 1000)):
        fwd, grad, args = kernel_programs(op, shape, dtype)
        assert _lower(fwd, *args).count(MOSAIC) == 1, shape
        assert _lower(grad, *args).count(MOSAIC) == 2, shape


def test_tpu_export_and_the_cpu_branch_take_the_xla_body():
    # exported for a TPU and the CPU at once, the kernels' calls become the XLA body (Mosaic
    # calls carry a compatibility guarantee, but the kernels are untested on a TPU); jitted
    # and lowered for both, the TPU's branch keeps the kernel
    x = (2.0 + jax.random.normal(jax.random.key(0), (4, 6, 128), F32)).astype(BF16)
    w = jnp.linspace(0.5, 1.5, 128, dtype=BF16)

    def f(x):
        return jln.layer_norm(x, w, w, impl="pallas")

    assert _lower(f, x, platforms=("tpu", "cpu")).count(MOSAIC) == 1
    exported = jax.export.export(jax.jit(f), platforms=("tpu", "cpu"))(x)
    assert MOSAIC not in exported.mlir_module()
    want = jln.layer_norm(x, w, w, impl="xla")
    got = exported.call(x)
    assert got.dtype == want.dtype and bool(jnp.all(got == want))


@pytest.mark.parametrize("op", [
    pytest.param(op, marks=() if op.name in ("layer_norm", "add_rms_norm[torch]") else pytest.mark.slow)
    for op in kernel_ops()
], ids=lambda op: op.name)
def test_wide_rows_lower_for_tpu(op):
    # rows wider than 16384: 8-row blocks read in static chunks of 8192 lanes (20000 = 2 x 8192
    # + 3616), every op and convention, per-example condition groups (2 x 8 rows)
    fwd, grad, args = kernel_programs(op, (2, 8, 20000), "float32")
    assert _lower(fwd, *args).count(MOSAIC) == 1
    assert _lower(grad, *args).count(MOSAIC) == 2
