"""The Pallas kernels lowered for an NVIDIA GPU (Triton) on this CPU-only machine.

Interpret mode (tests/test_kernels.py) checks what the kernels compute; it does not run the
Triton lowering, which rejects some programs interpret mode accepts (tile shapes, dynamic
slices, primitives without a Triton rule). Here every kernel configuration is traced for the
GPU target and lowered with ``lowering_platforms=("cuda",)``: a lowering error fails the test,
and the module must hold exactly the Triton calls expected (one forward, one backward). What
the GPU then compiles and computes is checked by ``bench/gpu_check.py`` on a GPU.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jln
from jln import kernels
from jln.kernels import _plan

from ._util import kernel_ops, kernel_programs

F32, BF16, F16 = jnp.float32, jnp.bfloat16, jnp.float16
TRITON = "__gpu$xla.gpu.triton"


@pytest.fixture(autouse=True)
def gpu_target(monkeypatch):
    monkeypatch.setattr(kernels, "_target", lambda x: ("gpu", False))
    # jax >= 0.11 asks the local device which GPU it lowers for; name one (an H200) instead
    try:
        from jax._src.pallas.triton import gpu_info, pallas_call_registration
    except ImportError:  # older jax lowers without asking
        return
    info = gpu_info.get_gpu_info_from_version(gpu_info.GpuVersion.H200)
    monkeypatch.setattr(pallas_call_registration.gpu_info_lib, "get_gpu_info", lambda: info)


def _lower(fn, *avals):
    return jax.jit(fn).trace(*avals).lower(lowering_platforms=("cuda",)).as_text()


def _sds(shape, dtype):
    return jax.ShapeDtypeStruct(shape, dtype)


def _check(fn, shape, dtype, n_params, param_shape=None):
    """``fn(x, *params)`` lowered alone (one Triton call) and under ``grad`` of every input
    (two: the forward and the backward kernel)."""
    x = _sds(shape, dtype)
    params = [_sds(param_shape or shape[-1:], dtype)] * n_params
    assert _lower(fn, x, *params).count(TRITON) == 1

    def loss(*a):
        return jnp.sum(fn(*a).astype(F32))

    text = _lower(jax.grad(loss, argnums=tuple(range(1 + n_params))), x, *params)
    assert text.count(TRITON) == 2


WIDTHS = [40, 1000, 4096, 16384]


@pytest.mark.parametrize("dtype", [F32, BF16, F16], ids=lambda d: jnp.dtype(d).name)
@pytest.mark.parametrize("n", WIDTHS)
@pytest.mark.slow
def test_layer_norm_lowers(n, dtype):
    _check(lambda x, s, b: jln.layer_norm(x, s, b, impl="pallas"), (3, 5, n), dtype, 2)
    _check(lambda x: jln.layer_norm(x, impl="pallas"), (7, n), dtype, 0)


@pytest.mark.parametrize("convention", ["torch", "llama", "gemma", "t5", "diffusers", "seed"])
def test_rms_norm_lowers(convention):
    def fn(x, s):
        return jln.rms_norm(x, s, convention=convention, impl="pallas")

    _check(fn, (4, 1000), BF16, 1)


def test_add_norms_lower():
    def add_ln(x, r, s, b):
        y, h = jln.add_layer_norm(x, r, s, b, impl="pallas")
        return y + h

    def add_rms(x, r, s):
        y, h = jln.add_rms_norm(x, r, s, impl="pallas")
        return y + h

    for fn, k in ((add_ln, 2), (add_rms, 1)):
        x = _sds((4, 1000), BF16)
        params = [_sds((1000,), BF16)] * k
        text = _lower(fn, x, x, *params)
        assert text.count(TRITON) == 1
        # the add is fused: the kernel reads x and the residual (and the parameters) itself
        call = re.search(re.escape(TRITON) + r"\(([^)]*)\)", text)
        assert call is not None and len(call.group(1).split(",")) == 2 + k
        grad = jax.grad(lambda *a, fn=fn: jnp.sum(fn(*a).astype(F32)), argnums=tuple(range(2 + k)))
        assert _lower(grad, x, x, *params).count(TRITON) == 2


@pytest.mark.parametrize("tokens", [256, 6])
def test_adaptive_layer_norm_lowers(tokens):
    # 256 tokens per example: per-group conditions; 6: materialized per row
    def fn(x, emb, s, b):
        return jln.adaptive_layer_norm(x, emb, s, b, order="dit", eps=1e-6, impl="pallas")[0]

    x, emb, p = _sds((2, tokens, 512), BF16), _sds((2, 6 * 512), BF16), _sds((512,), BF16)
    assert _lower(fn, x, emb, p, p).count(TRITON) == 1
    grad = jax.grad(lambda *a: jnp.sum(fn(*a).astype(F32)), argnums=(0, 1, 2, 3))
    assert _lower(grad, x, emb, p, p).count(TRITON) == 2


def test_backward_loop_over_chunks_lowers():
    # the benchmark's shape: each backward program walks 64 rows in a loop
    plan = _plan.make_plan("gpu", False, 32768, 4096, BF16, (), backward=True)
    assert (plan.block_rows, plan.num_warps, plan.chunk, plan.num_chunks) == (1, 8, 64, 512)
    _check(lambda x, s, b: jln.layer_norm(x, s, b, impl="pallas"), (32768, 4096), BF16, 2)
    _check(lambda x, s: jln.rms_norm(x, s, impl="pallas"), (32768, 4096), BF16, 1)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("op", kernel_ops(), ids=lambda op: op.name)
@pytest.mark.slow
def test_every_parity_op_lowers(op, dtype):
    # what `jln parity --impl pallas` runs on a GPU, lowered here: every op and convention,
    # forward and the gradient of every input, with parameters in x's dtype and in float32
    for param_dtype in (None, "float32") if dtype != "float32" else (None,):
        fwd, grad, args = kernel_programs(op, (4, 3, 40), dtype, param_dtype)
        assert _lower(fwd, *args).count(TRITON) == 1
        assert _lower(grad, *args).count(TRITON) == 2


def test_forward_mode_lowers():
    # jvp: the forward kernel for the primal, the XLA body's JVP for the tangent (no second
    # kernel); grad of a jvp (a Hessian-vector product) adds the backward kernel
    x, p = _sds((64, 1000), BF16), _sds((1000,), BF16)

    def f(x, s, b):
        return jln.layer_norm(x, s, b, impl="pallas")

    def jvp(x, s, b):
        return jax.jvp(f, (x, s, b), (x, s, b))

    assert _lower(jvp, x, p, p).count(TRITON) == 1
    hvp = jax.grad(lambda x, s, b: jnp.sum(jvp(x, s, b)[1].astype(F32)))
    assert _lower(hvp, x, p, p).count(TRITON) >= 1


EXPORT_CASES = {
    "layer_norm": lambda x, w, b, impl: jln.layer_norm(x, w, b, impl=impl),
    "add_layer_norm": lambda x, w, b, impl: jnp.stack(jln.add_layer_norm(x, jnp.flip(x, -1), w, b, impl=impl)),
    "rms_norm/llama": lambda x, w, b, impl: jln.rms_norm(x, w, convention="llama", impl=impl),
    "adaptive/dit_final": lambda x, w, b, impl: jln.adaptive_layer_norm(
        x, jnp.concatenate([1 + 0.1 * x[:, 0], 0.2 * x[:, 1]], -1), order="dit_final", impl=impl)[0],
}


@pytest.mark.parametrize("name", list(EXPORT_CASES))
@pytest.mark.slow
def test_export_and_other_platforms_take_the_xla_body(name):
    # A Triton call has no compatibility guarantee, so jax.export refused every computation
    # traced with the GPU kernels, and they had no lowering for another platform (a jitted
    # function traced on a GPU machine and lowered for its CPU). Each kernel call now lowers to
    # the Triton kernel for the GPU only; under jax.export and on other platforms to the XLA
    # body it implements: the XLA path's forward bit for bit, its gradients up to sums' order.
    f = EXPORT_CASES[name]
    key = jax.random.split(jax.random.key(3), 3)
    x = (2.0 + jax.random.normal(key[0], (3, 4, 96), F32)).astype(BF16)
    w = (1 + 0.2 * jax.random.normal(key[1], (96,), F32)).astype(BF16)
    b = (0.1 * jax.random.normal(key[2], (96,), F32)).astype(BF16)
    fwd = jax.jit(lambda x: f(x, w, b, "pallas"))
    grad = jax.jit(jax.grad(lambda x: jnp.sum(jnp.sin(f(x, w, b, "pallas").astype(F32)))))
    want_y = f(x, w, b, "xla")
    want_dx = jax.grad(lambda x: jnp.sum(jnp.sin(f(x, w, b, "xla").astype(F32))))(x)
    for fn, calls in ((fwd, 1), (grad, 2)):
        traced = fn.trace(x)
        assert traced.lower(lowering_platforms=("cuda",)).as_text().count(TRITON) == calls, name
        # both platforms in one module: the kernels in the GPU's branch only
        assert traced.lower(lowering_platforms=("cuda", "cpu")).as_text().count(TRITON) == calls, name
        on_cpu = traced.lower(lowering_platforms=("cpu",))
        assert "custom_call" not in on_cpu.as_text(), name
        exported = jax.export.export(fn, platforms=("cuda", "cpu"))(x)
        assert "custom_call" not in exported.mlir_module(), name
        for got in (on_cpu.compile()(x), exported.call(x)):  # (the CPU branch, run here)
            if fn is fwd:
                assert got.dtype == want_y.dtype and bool(jnp.all(got == want_y)), f"{name}: y is not the XLA path's"
            else:
                np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want_dx, np.float32),
                                           rtol=8e-3, atol=1e-3, err_msg=f"{name}: dx")


@pytest.mark.slow
def test_symbolic_shapes_take_the_xla_path(monkeypatch):
    # jax.export with a symbolic batch (shape polymorphism): kernels are tiled for concrete
    # row counts, so "auto" on a GPU takes the XLA path (planning a kernel for `b*t` rows
    # raised InconclusiveDimensionOperation), and impl="pallas" says why it cannot run
    from jln import _dispatch

    monkeypatch.setattr(_dispatch, "platform_of", lambda x: "gpu")
    b, t = jax.export.symbolic_shape("b, t")
    x = jax.ShapeDtypeStruct((b, t, 96), BF16)
    w = jnp.linspace(0.5, 1.5, 96, dtype=BF16)
    data = jnp.linspace(-3, 5, 6 * 96, dtype=F32).reshape(2, 3, 96).astype(BF16)
    for name, f in EXPORT_CASES.items():
        exported = jax.export.export(jax.jit(lambda x, f=f: f(x, w, w, "auto")), platforms=("cuda", "cpu"))(x)
        assert TRITON not in exported.mlir_module(), name  # (its shape assertions are custom calls)
        assert bool(jnp.all(exported.call(data) == f(data, w, w, "xla"))), name
        with pytest.raises(ValueError, match=r"impl='pallas' is not available here: .*symbolic dimensions"):
            jax.export.export(jax.jit(lambda x, f=f: f(x, w, w, "pallas")), platforms=("cuda",))(x)
    # with concrete shapes, "auto" takes the kernels there
    assert _lower(lambda x: jln.layer_norm(x, w, w), _sds((2, 3, 96), BF16)).count(TRITON) == 1


def _wide_programs(n, dtype):
    def ln(x, s, b):
        return jln.layer_norm(x, s, b, impl="pallas")

    def add_rms(x, r, s):
        y, h = jln.add_rms_norm(x, r, s, impl="pallas")
        return y + h

    return ln, add_rms


@pytest.mark.parametrize(("n", "dtype"), [
    (20000, BF16),  # chunks of 2048 over a row padded to 32768, the last one masked
    (65536, F32),
    (2**20, BF16),  # the widest row the GPU kernels take
])
def test_wide_rows_lower(n, dtype):
    # rows wider than 16384 loop over column chunks inside each program
    plan = _plan.make_plan("gpu", False, 64, n, dtype, ())
    assert plan.wide and plan.num_col_chunks == -(-n // 2048)
    ln, add_rms = _wide_programs(n, dtype)
    _check(ln, (64, n), dtype, 2)
    x, p = _sds((64, n), dtype), _sds((n,), dtype)
    assert _lower(add_rms, x, x, p).count(TRITON) == 1
    grad = jax.grad(lambda *a: jnp.sum(add_rms(*a).astype(F32)), argnums=(0, 1, 2))
    assert _lower(grad, x, x, p).count(TRITON) == 2


@pytest.mark.slow
@pytest.mark.parametrize("op", kernel_ops(), ids=lambda op: op.name)
def test_every_op_lowers_on_wide_rows(op):
    # every op and convention, per-example condition groups (2 x 8 rows) at 20000 wide
    fwd, grad, args = kernel_programs(op, (2, 8, 20000), "bfloat16")
    assert _lower(fwd, *args).count(TRITON) == 1
    assert _lower(grad, *args).count(TRITON) == 2
