"""Pallas kernels (interpret mode on CPU) against the XLA path: forward, gradients, transforms.

The XLA path (``impl="xla"``) is itself tested against torch and float64 references elsewhere;
here the claim is that the kernels implement the same contract, so every result is compared
with it, forward and reverse (dx, dscale, dbias, and the conditions' cotangents).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jln
from jln import kernels
from jln.families.layer_norm.spec import LayerNormSpec
from jln.kernels import _plan

F32, BF16, F16 = jnp.float32, jnp.bfloat16, jnp.float16
DTYPES = [F32, BF16, F16]
SHAPES = [(3, 5, 40), (4, 1), (0, 16)]


def _tol(dtype):
    # forward: one rounding of the output (the kernel's float32 sums may differ from XLA's in
    # their last bit, which can move a low-precision result by one ulp)
    return {F32: 2e-6, BF16: 1e-2, F16: 1e-3}[dtype]


def _grad_tol(dtype):
    return {F32: 2e-5, BF16: 3e-2, F16: 4e-3}[dtype]


def _data(shape, dtype, seed=0):
    k1, k2, k3, k4 = jax.random.split(jax.random.key(seed), 4)
    x = (1.5 * jax.random.normal(k1, shape) + 0.3).astype(dtype)
    d = shape[-1]
    scale = (1 + 0.3 * jax.random.normal(k2, (d,))).astype(dtype)
    bias = (0.2 * jax.random.normal(k3, (d,))).astype(dtype)
    probe = jax.random.normal(k4, shape)  # a fixed cotangent direction, float32
    return x, scale, bias, probe


def _close(a, b, tol, what):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    assert a.shape == b.shape, what
    scale = max(1.0, float(np.max(np.abs(b)))) if b.size else 1.0
    err = float(np.max(np.abs(a - b))) if a.size else 0.0
    assert err <= tol * scale, f"{what}: max |pallas - xla| = {err:.3g} > {tol * scale:.3g}"
    return err


def _compare(fn, args, dtype, probe, what):
    """Forward and every gradient of ``sum(fn(*args, impl) * probe)``, pallas vs xla."""
    outs = {impl: fn(*args, impl=impl) for impl in ("pallas", "xla")}
    assert outs["pallas"].dtype == outs["xla"].dtype, what
    _close(outs["pallas"], outs["xla"], _tol(dtype), f"{what} forward")

    def loss(impl, *a):
        return jnp.sum(fn(*a, impl=impl).astype(F32) * probe)

    argnums = tuple(range(len(args)))
    gp = jax.grad(lambda *a: loss("pallas", *a), argnums)(*args)
    gx = jax.grad(lambda *a: loss("xla", *a), argnums)(*args)
    for i, (p, x) in enumerate(zip(gp, gx, strict=True)):
        assert p.dtype == x.dtype and p.shape == x.shape
        _close(p, x, _grad_tol(dtype), f"{what} grad of arg {i}")


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: jnp.dtype(d).name)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_layer_norm(shape, dtype):
    x, scale, bias, probe = _data(shape, dtype)
    _compare(lambda x, s, b, impl: jln.layer_norm(x, s, b, impl=impl), (x, scale, bias), dtype, probe, "layer_norm")


def test_layer_norm_no_params_wide_row_and_offset():
    # 3000 columns (padded to 4096, masked), data far from zero (the pivot keeps precision)
    x = 3e4 + jax.random.normal(jax.random.key(1), (2, 3000))
    probe = jax.random.normal(jax.random.key(2), x.shape)
    _compare(lambda x, impl: jln.layer_norm(x, impl=impl), (x,), F32, probe, "layer_norm offset")


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: jnp.dtype(d).name)
@pytest.mark.parametrize("convention", ["torch", "llama", "gemma", "t5", "diffusers", "seed"])
@pytest.mark.slow
def test_rms_norm_conventions(convention, dtype):
    x, scale, bias, probe = _data((3, 5, 40), dtype)
    if convention == "diffusers":
        fn = lambda x, s, b, impl: jln.rms_norm(x, s, convention=convention, bias=b, impl=impl)  # noqa: E731
        args = (x, scale, bias)
    else:
        fn = lambda x, s, impl: jln.rms_norm(x, s, convention=convention, impl=impl)  # noqa: E731
        args = (x, scale)
    _compare(fn, args, dtype, probe, f"rms_norm {convention}")


@pytest.mark.parametrize("convention", ["llama", "t5", "seed"])
@pytest.mark.slow
def test_rms_norm_float32_weight_low_precision_input(convention):
    # the weight's dtype decides the output dtype in these conventions
    x, scale, _, probe = _data((4, 24), BF16)
    fn = lambda x, s, impl: jln.rms_norm(x, s, convention=convention, impl=impl)  # noqa: E731
    _compare(fn, (x, scale.astype(F32)), BF16, probe, f"rms_norm {convention} f32 weight")


@pytest.mark.parametrize("shape", [(4, 1), (0, 16)], ids=str)
def test_rms_norm_edge_shapes(shape):
    x, scale, _, probe = _data(shape, F32)
    _compare(lambda x, s, impl: jln.rms_norm(x, s, impl=impl), (x, scale), F32, probe, "rms_norm")


@pytest.mark.slow
def test_seed_clamped_rows():
    # an all-zero row is clamped to eps: value and gradient follow the clamp branch
    x = jnp.concatenate([jnp.zeros((1, 8)), jax.random.normal(jax.random.key(3), (2, 8))])
    probe = jax.random.normal(jax.random.key(4), x.shape)
    fn = lambda x, impl: jln.rms_norm(x, convention="seed", impl=impl)  # noqa: E731
    _compare(fn, (x,), F32, probe, "rms_norm seed clamp")


@pytest.mark.parametrize("dtype", [F32, BF16], ids=lambda d: jnp.dtype(d).name)
@pytest.mark.slow
def test_add_norms(dtype):
    x, scale, bias, probe = _data((2, 3, 24), dtype)
    r = jnp.flip(x, axis=-1)

    def add_ln(x, r, s, b, impl):
        y, s_ = jln.add_layer_norm(x, r, s, b, impl=impl)
        return y.astype(F32) + s_.astype(F32)

    def add_rms(x, r, s, impl):
        y, s_ = jln.add_rms_norm(x, r, s, convention="llama", residual_in_fp32=True, impl=impl)
        return y.astype(F32) + s_

    _compare(add_ln, (x, r, scale, bias), dtype, probe, "add_layer_norm")
    _compare(add_rms, (x, r, scale), dtype, probe, "add_rms_norm")


@pytest.mark.parametrize(
    "x_dtype, r_dtype, fp32", [(BF16, F32, False), (F16, F16, True), (BF16, BF16, True), (F16, BF16, False)], ids=str
)
@pytest.mark.slow
def test_fused_add_dtypes(x_dtype, r_dtype, fp32):
    # the kernel adds x and the residual itself: s in the promoted dtype (float32 with
    # residual_in_fp32), rounded as the XLA path's add; gradients of x and the residual in
    # their own dtypes; y and s checked apart (no sum that could hide one of them)
    x, scale, bias, probe = _data((3, 4, 40), x_dtype)
    r = (0.7 * jax.random.normal(jax.random.key(9), x.shape)).astype(r_dtype)
    tol = max(_tol(x_dtype), _tol(r_dtype))
    for which in (0, 1):

        def fn(x, r, s, b, impl, which=which):
            return jln.add_layer_norm(x, r, s, b, residual_in_fp32=fp32, impl=impl)[which]

        outs = {impl: fn(x, r, scale, bias, impl) for impl in ("pallas", "xla")}
        assert outs["pallas"].dtype == outs["xla"].dtype
        _close(outs["pallas"], outs["xla"], tol, f"add_layer_norm output {which}")
    def loss(impl, x, r, s):
        y, h = jln.add_rms_norm(x, r, s, residual_in_fp32=fp32, impl=impl)
        return jnp.sum(y.astype(F32) * probe) + jnp.sum(h.astype(F32) * probe[::-1])

    gp = jax.grad(lambda *a: loss("pallas", *a), (0, 1, 2))(x, r, scale)
    gx = jax.grad(lambda *a: loss("xla", *a), (0, 1, 2))(x, r, scale)
    for i, (p, q) in enumerate(zip(gp, gx, strict=True)):
        assert p.dtype == q.dtype
        _close(p, q, max(_grad_tol(x_dtype), _grad_tol(r_dtype)), f"add_rms_norm grad {i}")


@pytest.mark.slow
def test_fused_add_under_vmap_and_chunks(monkeypatch):
    _chunked(monkeypatch, 2)
    x, scale, bias, probe = _data((3, 7, 24), F32)
    r = x[::-1] * 0.5

    def f(impl):
        def one(x, r):
            y, s = jln.add_layer_norm(x, r, scale, bias, impl=impl)
            return jnp.sum(y * probe[0]) + jnp.sum(s * s)

        return jax.vmap(jax.grad(one, (0, 1)))(x, r)

    for p, q in zip(f("pallas"), f("xla"), strict=True):
        _close(p, q, 2e-5, "vmap(grad(add_layer_norm))")


# tokens=8: one condition row per block (a group operand); 5: materialized per row
@pytest.mark.parametrize("dtype, tokens", [(F32, 8), (BF16, 8), (F16, 8), (F32, 5)], ids=str)
@pytest.mark.slow
def test_adaptive_layer_norm(dtype, tokens):
    x, scale, bias, probe = _data((2, tokens, 16), dtype)
    emb = (0.5 * jax.random.normal(jax.random.key(5), (2, 6 * 16))).astype(dtype)

    def fn(x, emb, s, b, impl):
        return jln.adaptive_layer_norm(x, emb, s, b, order="dit", eps=1e-6, impl=impl)[0]

    _compare(fn, (x, emb, scale, bias), dtype, probe, "adaptive_layer_norm")


@pytest.mark.slow
def test_adaptive_layer_norm_shared_condition():
    # a [k*D] condition shared by every row (a per-feature operand)
    x, _, _, probe = _data((3, 4, 16), F32)
    emb = jax.random.normal(jax.random.key(6), (2 * 16,))
    fn = lambda x, e, impl: jln.adaptive_layer_norm(x, e, order="seed", impl=impl)[0]  # noqa: E731
    _compare(fn, (x, emb), F32, probe, "adaptive_layer_norm shared")


def test_jit_vmap_grad():
    x, scale, bias, probe = _data((3, 4, 16), F32)

    def f(impl):
        g = jax.jit(jax.vmap(jax.grad(lambda x, s: jnp.sum(jln.layer_norm(x, s, impl=impl) * x)), (0, None)))
        return g(x, scale)

    _close(f("pallas"), f("xla"), 2e-5, "jit(vmap(grad))")


@pytest.mark.slow
def test_tpu_layout_in_interpret_mode(monkeypatch):
    # the exact-width, 8-row-aligned TPU tiling with a partial last block
    monkeypatch.setattr(kernels, "INTERPRET_TARGET", "tpu")
    monkeypatch.setattr(_plan, "tpu_block_rows", lambda n: 8)
    x, scale, bias, probe = _data((20, 40), BF16)
    _compare(lambda x, s, b, impl: jln.layer_norm(x, s, b, impl=impl), (x, scale, bias), BF16, probe, "tpu ln")
    emb = jax.random.normal(jax.random.key(7), (2, 2 * 40))
    x3 = x.reshape(2, 10, 40)  # 10 rows per example: not 8-aligned, so materialized per row
    fn = lambda x, e, impl: jln.adaptive_layer_norm(x, e, impl=impl)[0]  # noqa: E731
    _compare(fn, (x3, emb), BF16, probe.reshape(x3.shape), "tpu adaptive")


def _chunked(monkeypatch, block_rows):
    # small blocks and few backward programs, so each program walks several blocks of rows
    # (the GPU layout at real sizes) and the last chunk runs past the end of x
    monkeypatch.setattr(_plan, "gpu_blocks", lambda n, dtype: (block_rows, 4))
    monkeypatch.setattr(_plan, "gpu_bwd_blocks", lambda n, dtype: (block_rows, 4))
    monkeypatch.setattr(_plan, "GPU_BWD_PROGRAMS", 2)


@pytest.mark.parametrize("dtype", [F32, BF16], ids=lambda d: jnp.dtype(d).name)
@pytest.mark.slow
def test_backward_walks_chunks_of_rows(monkeypatch, dtype):
    _chunked(monkeypatch, 2)
    x, scale, bias, probe = _data((3, 7, 40), dtype)  # 21 rows: 2 programs of 16, 8 blocks each
    plan = _plan.make_plan("gpu", True, 21, 40, dtype, (), backward=True)
    assert (plan.block_rows, plan.chunk, plan.num_chunks) == (2, 16, 2)
    _compare(lambda x, s, b, impl: jln.layer_norm(x, s, b, impl=impl), (x, scale, bias), dtype, probe, "ln chunks")
    fn = lambda x, s, impl: jln.rms_norm(x, s, convention="gemma", impl=impl)  # noqa: E731
    _compare(fn, (x, scale), dtype, probe, "rms chunks")
    fn = lambda x, s, impl: jln.rms_norm(x, s, convention="seed", eps=1e-2, impl=impl)  # noqa: E731
    _compare(fn, (x * jnp.asarray(0.0, dtype), scale), dtype, probe, "seed chunks, clamped rows")


@pytest.mark.slow
def test_backward_chunks_follow_condition_groups(monkeypatch):
    # per-example conditions: a chunk never straddles two examples' rows (8 tokens: one chunk
    # of 8 per example; 6 tokens: chunks of 2, three partials summed per example)
    _chunked(monkeypatch, 2)
    for tokens, chunk in ((8, 8), (6, 2)):
        x, scale, bias, probe = _data((4, tokens, 40), F32)
        emb = (0.5 * jax.random.normal(jax.random.key(5), (4, 6 * 40))).astype(F32)
        assert _plan.make_plan("gpu", True, 4 * tokens, 40, F32, (tokens,), backward=True).chunk == chunk

        def fn(x, emb, s, b, impl):
            return jln.adaptive_layer_norm(x, emb, s, b, order="dit", eps=1e-6, impl=impl)[0]

        _compare(fn, (x, emb, scale, bias), F32, probe, f"adaptive chunks, {tokens} tokens")


def test_auto_picks_the_kernels_on_gpus_only(monkeypatch):
    assert jax.default_backend() == "cpu"
    # GPUs (validated on an H200) up to the widest row measured there; TPUs once opted in;
    # JLN_PALLAS_AUTO=0 keeps XLA everywhere; never interpret mode on CPU
    monkeypatch.delenv("JLN_PALLAS_AUTO", raising=False)
    assert kernels.native("gpu", 4096) and kernels.native("gpu", 16384)
    assert not kernels.native("gpu", 16385) and not kernels.native("tpu", 4096) and not kernels.native("cpu", 64)
    monkeypatch.setenv("JLN_PALLAS_AUTO", "1")
    assert kernels.native("tpu", 4096) and not kernels.native("cpu", 64)
    monkeypatch.setenv("JLN_PALLAS_AUTO", "0")
    assert not kernels.native("gpu", 4096) and not kernels.native("tpu", 4096)
    x = jnp.ones((2, 8))

    def has_pallas(impl):  # (the kernel call's primitive, which holds the pallas_call)
        return "jln_pallas_norm_fwd" in str(jax.make_jaxpr(lambda x: jln.rms_norm(x, impl=impl))(x))

    assert not has_pallas("auto") and has_pallas("pallas")


FORWARD_MODE_OPS = {
    "layer_norm": lambda impl: lambda x, w, b: jln.layer_norm(x, w, b, impl=impl),
    "rms_norm gemma": lambda impl: lambda x, w, b: jln.rms_norm(x, w, convention="gemma", impl=impl),
    # the residual depends on x, so both addends carry tangents; y and s both checked
    "add_layer_norm": lambda impl: lambda x, w, b: jnp.stack(jln.add_layer_norm(x, jnp.cos(x), w, b, impl=impl)),
    "add_rms_norm": lambda impl: lambda x, w, b: jnp.stack(jln.add_rms_norm(jnp.cos(x), x, w, impl=impl)),
    "adaptive_layer_norm dit": lambda impl: lambda x, w, b: jln.adaptive_layer_norm(
        x, jnp.tile(b, (x.shape[0], 6)), w, b, order="dit", impl=impl)[0],
}


@pytest.mark.parametrize("op", list(FORWARD_MODE_OPS))
@pytest.mark.slow
def test_forward_mode_and_higher_derivatives(op):
    # the kernel path's tangent is the XLA body's JVP, its backward's derivative the XLA
    # body's VJP: jvp, jacfwd, grad-of-grad and vmap(jvp) equal the XLA path's
    x, w, b, _ = _data((3, 5, 40), F32)
    fp, fx = FORWARD_MODE_OPS[op]("pallas"), FORWARD_MODE_OPS[op]("xla")
    t = (jnp.sin(x), 0.1 * jnp.ones_like(w), jnp.cos(b))
    for p, q in zip(jax.jvp(fp, (x, w, b), t), jax.jvp(fx, (x, w, b), t), strict=True):
        _close(p, q, 2e-6, f"{op} jvp")
    _close(jax.jacfwd(lambda w: fp(x, w, b))(w), jax.jacfwd(lambda w: fx(x, w, b))(w), 2e-6, f"{op} jacfwd")

    def grad_of_grad(fn):
        return jax.grad(lambda w: jnp.sum(jax.grad(lambda x: jnp.sum(fn(x, w, b) ** 2))(x) ** 2))(w)

    _close(grad_of_grad(fp), grad_of_grad(fx), 2e-5, f"{op} grad of grad")

    def grad_of_jvp(fn):  # reverse over forward: a Hessian-vector product
        return jax.grad(lambda x, w: jnp.sum(jax.jvp(lambda z: fn(z, w, b), (x,), (t[0],))[1] ** 2), (0, 1))(x, w)

    for p, q in zip(grad_of_jvp(fp), grad_of_jvp(fx), strict=True):
        _close(p, q, 2e-5, f"{op} grad of jvp")

    def vmap_jvp(fn):
        return jax.vmap(lambda xx, tt: jax.jvp(lambda z: fn(z, w, b), (xx,), (tt,))[1])(x, t[0])

    _close(vmap_jvp(fp), vmap_jvp(fx), 2e-6, f"{op} vmap(jvp)")


def test_kernel_path_saves_x_and_row_statistics():
    # reverse mode through the tangent primitive keeps what the XLA path keeps: x (s with a
    # fused add) in its dtype, the parameters and per-row float32 statistics; no other
    # x-sized array
    from . import _residuals

    x, w, b, _ = _data((4, 8, 40), BF16)
    for fn in (lambda x, r, w, b: jln.layer_norm(x, w, b, impl="pallas"),
               lambda x, r, w, b: jln.add_layer_norm(x, r, w, b, impl="pallas")[0]):
        res = _residuals.saved_residuals(fn, x, x[::-1], w, b)
        big = [r for r in res if int(np.prod(r.shape)) >= x.size]
        assert len(big) == 1 and big[0].dtype == "bf16", res
        stats = [r for r in res if r.shape == (4, 8, 1)]
        assert len(stats) == 2 and all(r.dtype == "f32" for r in stats), res
        assert _residuals.residual_bytes_per_element(fn, x, x[::-1], w, b) <= 2 + 8 / 40 + 0.3, res


def test_gpu_without_the_triton_backend_stays_on_xla(monkeypatch):
    # a jax without Pallas's Triton backend (deprecated in jax 0.11): "auto" keeps XLA on a
    # GPU and impl="pallas" says why, instead of failing inside the kernel call
    monkeypatch.setattr(kernels, "_triton_available", lambda: False)
    x = jnp.ones((2, 8))
    spec = LayerNormSpec(axes=(1,), eps=1e-5, out_dtype=x.dtype)
    why = kernels.unsupported_reason(spec, x, (), "gpu")
    assert why is not None and "Triton" in why
    assert kernels.unsupported_reason(spec, x, (), "tpu") is None
