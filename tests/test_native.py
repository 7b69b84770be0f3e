"""jln's native CPU kernels (``impl="native"``, and ``"auto"`` on CPU) against the XLA path.

The XLA path is the contract; it is itself checked against torch and float64 elsewhere
(tests/test_parity_torch.py). Here every supported op, convention and dtype is compared
elementwise, forward and backward, through every transform, and the fallbacks are checked.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import shutil
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jln
from jln.kernels import _cpu, _cpu_build

from ._util import first_fast

pytestmark = pytest.mark.skipif(
    jax.default_backend() != "cpu" or _cpu.available() is not None,
    reason=f"native CPU kernels not available here: {_cpu.available() if jax.default_backend() == 'cpu' else 'not a CPU backend'}",
)

DTYPES = (jnp.float32, jnp.bfloat16, jnp.float16)
Array = jax.Array


def _ops(dt: Any) -> dict[str, Callable[..., Any]]:
    """Every native op: f(x, w, b, impl) -> y, with parameters in the op's natural dtypes."""
    return {
        "layer_norm": lambda x, w, b, impl: jln.layer_norm(x, w, b, impl=impl),
        "layer_norm/no-params": lambda x, w, b, impl: jln.layer_norm(x, impl=impl),
        "layer_norm/f32-params": lambda x, w, b, impl: jln.layer_norm(x, w.astype(jnp.float32), b.astype(jnp.float32), impl=impl),
        "add_layer_norm": lambda x, w, b, impl: jln.add_layer_norm(x, jnp.flip(x, -1), w, b, impl=impl)[0],
        "add_layer_norm/fp32-residual": lambda x, w, b, impl: jln.add_layer_norm(
            x, jnp.flip(x, -1), w, b, residual_in_fp32=True, impl=impl)[0],
        "rms/torch": lambda x, w, b, impl: jln.rms_norm(x, w, impl=impl),
        "rms/torch-f32-weight": lambda x, w, b, impl: jln.rms_norm(x, w.astype(jnp.float32), impl=impl),
        "rms/llama": lambda x, w, b, impl: jln.rms_norm(x, w, convention="llama", impl=impl),
        "rms/llama-f32-weight": lambda x, w, b, impl: jln.rms_norm(x, w.astype(jnp.float32), convention="llama", impl=impl),
        "rms/gemma": lambda x, w, b, impl: jln.rms_norm(x, w, convention="gemma", impl=impl),
        "rms/t5": lambda x, w, b, impl: jln.rms_norm(x, w, convention="t5", impl=impl),
        "rms/t5-no-weight": lambda x, w, b, impl: jln.rms_norm(x, convention="t5", impl=impl),
        "rms/diffusers-bias": lambda x, w, b, impl: jln.rms_norm(x, w, bias=b, convention="diffusers", impl=impl),
        "add_rms_norm/llama": lambda x, w, b, impl: jln.add_rms_norm(x, jnp.flip(x, -1), w, convention="llama", impl=impl)[0],
        # adaptive LayerNorm: per-example shift/scale chunks of a condition [B, 2D] (DiT's final layer).
        # The conditions are held constant: through them x's half-precision gradient gains a second
        # term, and the sum of the two terms rounds differently once XLA fuses it with the norm's
        # backward (up to 26% of a row's elements one ulp apart, the same error against float64),
        # a difference of the surrounding graph, not of the kernel.
        "adaptive/dit_final": lambda x, w, b, impl: jln.adaptive_layer_norm(
            x, jax.lax.stop_gradient(jnp.concatenate([jnp.sin(x[:, 0]), jnp.cos(x[:, 1])], -1)),
            order="dit_final", impl=impl)[0],
        "adaptive/seed-with-affine": lambda x, w, b, impl: jln.adaptive_layer_norm(
            x, jax.lax.stop_gradient(jnp.concatenate([x[:, 0] * 0.1, x[:, 2]], -1).astype(jnp.float32)), w, b,
            order="seed", impl=impl)[0],
    }


def _inputs(dt: Any, shape: tuple[int, ...] = (3, 5, 96), offset: float = 0.0) -> tuple[jax.Array, ...]:
    k = jax.random.split(jax.random.key(7), 4)
    x = (jax.random.normal(k[0], shape, jnp.float32) * 1.5 + offset).astype(dt)
    w = (1.0 + 0.3 * jax.random.normal(k[1], shape[-1:], jnp.float32)).astype(dt)
    b = (0.2 * jax.random.normal(k[2], shape[-1:], jnp.float32)).astype(dt)
    ct = jax.random.normal(k[3], shape, jnp.float32)
    return x, w, b, ct


def _ulp(dtype: Any) -> float:
    return float(jnp.finfo(dtype).eps)


def _close(a: Array, b: Array, what: str, rel_ulps: float = 8.0) -> None:
    """Equal up to a few units in the last place of the values' scale (float32 reductions in
    another order), in the arrays' own dtype."""
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    assert a.dtype == b.dtype and a.shape == b.shape, (what, a.dtype, b.dtype, a.shape, b.shape)
    scale = max(1.0, float(np.max(np.abs(b64))))
    tol = rel_ulps * _ulp(a.dtype) * scale
    err = float(np.max(np.abs(a64 - b64))) if a.size else 0.0
    assert err <= tol, f"{what}: max |native - xla| = {err:.3g} > {tol:.3g}"


def _mostly_bit_identical(a: Array, b: Array, what: str, at_least: float = 0.98) -> None:
    """A half-precision result is a float32 value rounded once, so the native kernel and the
    XLA path agree bit for bit except where their float32 row sums (summed in other orders)
    straddle a rounding boundary: measured at least 98.96% of each gradient bit-identical over
    ``_ops`` (1 of 96 elements off at worst). A skipped or extra rounding step inside the
    kernel (of ``c * w`` for LLaMA, of the modulation's cotangent) moves many more elements by
    one ulp, within :func:`_close`'s tolerance but not within this rule's."""
    if a.dtype not in (jnp.bfloat16, jnp.float16) or not a.size:
        return
    same = float(jnp.mean((a == b).astype(jnp.float32)))
    assert same >= at_least, f"{what}: only {same:.4%} bit-identical to the XLA path (want >= {at_least:.0%})"


@pytest.mark.parametrize("dt", first_fast(*DTYPES), ids=lambda d: jnp.dtype(d).name)
def test_forward_matches_xla_path(dt: Any) -> None:
    x, w, b, _ = _inputs(dt)
    for name, f in _ops(dt).items():
        y_native = jax.jit(f, static_argnums=3)(x, w, b, "native")
        y_xla = jax.jit(f, static_argnums=3)(x, w, b, "xla")
        _close(y_native, y_xla, f"{name} {jnp.dtype(dt).name}", rel_ulps=4)
        if y_xla.dtype != jnp.float32:
            # a half-precision output is the float32 value rounded once: bit-identical unless the
            # two float32 reductions straddle a rounding boundary (measured: never here)
            same = float(jnp.mean((y_native == y_xla).astype(jnp.float32)))
            assert same >= 0.999, f"{name}: only {same:.4%} bit-identical"


@pytest.mark.parametrize("dt", first_fast(jnp.bfloat16, jnp.float32, jnp.float16), ids=lambda d: jnp.dtype(d).name)
def test_backward_matches_xla_path(dt: Any) -> None:
    x, w, b, ct = _inputs(dt)
    for name, f in _ops(dt).items():
        def vjp(impl: str, f: Callable[..., Any] = f) -> tuple[Array, ...]:
            y, pull = jax.vjp(lambda x, w, b: f(x, w, b, impl), x, w, b)
            return pull(ct.astype(y.dtype))

        g_native = jax.jit(vjp, static_argnums=0)("native")
        g_xla = jax.jit(vjp, static_argnums=0)("xla")
        for gn, gx, arg in zip(g_native, g_xla, ("dx", "dscale", "dbias"), strict=True):
            # dx of a half x is rounded once from float32; parameter gradients sum 15 rows
            _close(gn, gx, f"{name} {jnp.dtype(dt).name} {arg}", rel_ulps=16 if dt == jnp.float32 else 2)
            _mostly_bit_identical(gn, gx, f"{name} {jnp.dtype(dt).name} {arg}")


def test_auto_takes_native_kernels_and_xla_does_not() -> None:
    x, w, b, _ = _inputs(jnp.bfloat16)

    def hlo(impl: str) -> str:
        f = jax.grad(lambda x, w, b: jnp.sum(jln.layer_norm(x, w, b, impl=impl).astype(jnp.float32)), argnums=(0, 1, 2))
        return jax.jit(f).lower(x, w, b).as_text()

    from jln import _dispatch
    from jln.families.layer_norm.spec import LayerNormSpec

    spec = LayerNormSpec(axes=(2,), eps=1e-5, out_dtype=x.dtype)
    path = _dispatch.choose("t", "auto", spec, x, (w, b, None, None))
    why = _cpu.unsupported_reason(spec, x, (w, b, None, None))
    assert path == "native", (path, why, jax.device_count(), jax.default_backend())
    auto = hlo("auto")
    assert "jln_cpu_norm_fwd" in auto and "jln_cpu_norm_bwd" in auto
    assert "jln_cpu_norm" not in hlo("xla")


ADD_OPS: dict[str, Callable[..., Any]] = {
    "add_layer_norm": lambda x, r, w, b, impl: jln.add_layer_norm(x, r, w, b, impl=impl),
    "add_layer_norm/no-params": lambda x, r, w, b, impl: jln.add_layer_norm(x, r, impl=impl),
    "add_rms_norm/llama": lambda x, r, w, b, impl: jln.add_rms_norm(x, r, w, convention="llama", impl=impl),
    "add_rms_norm/torch": lambda x, r, w, b, impl: jln.add_rms_norm(x, r, w, impl=impl),
    # half x and residual, s in float32: XLA adds, the kernel normalizes s (for float32 inputs,
    # the same as without)
    "add_layer_norm/fp32-residual": lambda x, r, w, b, impl: jln.add_layer_norm(x, r, w, b, residual_in_fp32=True, impl=impl),
    "add_rms_norm/llama-fp32-residual": lambda x, r, w, b, impl: jln.add_rms_norm(
        x, r, w, convention="llama", residual_in_fp32=True, impl=impl),
    "add_rms_norm/torch-fp32-residual": lambda x, r, w, b, impl: jln.add_rms_norm(
        x, r, w, residual_in_fp32=True, impl=impl),
}


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: jnp.dtype(d).name)
@pytest.mark.parametrize("name", list(ADD_OPS))
@pytest.mark.slow
def test_fused_residual_step_matches_xla_path(name: str, dt: Any) -> None:
    # the native kernel writes s = x + residual itself: s bit-identical to XLA's add, y as the
    # unfused kernel, and every derivative (cotangents on both y and s, forward mode, vmap)
    x, w, b, ct = _inputs(dt, (3, 5, 37), offset=2.0)
    r = jnp.flip(x, -1) * 0.5
    f = ADD_OPS[name]
    got, want = [], []
    for impl, out in (("native", got), ("xla", want)):
        (y, s), pull = jax.vjp(lambda x, r, w, b, impl=impl: f(x, r, w, b, impl), x, r, w, b)
        out += [y, s, *pull((ct.astype(y.dtype), (0.5 * ct[::-1]).astype(s.dtype)))]
        out += list(jax.jvp(lambda x, r, impl=impl: f(x, r, w, b, impl), (x, r), (ct.astype(dt), x))[1])
        out += list(jax.vmap(lambda x, r, impl=impl: f(x, r, w, b, impl))(x, r))
    np.testing.assert_array_equal(np.asarray(got[1], np.float32), np.asarray(want[1], np.float32))
    if dt != jnp.float32:  # y is the float32 value rounded once: bit-identical but for rare ties
        same = float(jnp.mean((got[0] == want[0]).astype(jnp.float32)))
        assert same >= 0.99, f"{name}: only {same:.4%} of y bit-identical"
    what = ("y", "s", "dx", "dresidual", "dscale", "dbias", "jvp y", "jvp s", "vmap y", "vmap s")
    for a, c, label in zip(got, want, what, strict=True):
        _close(a, c, f"{name} {jnp.dtype(dt).name} {label}", rel_ulps=16 if dt == jnp.float32 else 2)
        _mostly_bit_identical(a, c, f"{name} {jnp.dtype(dt).name} {label}")


def test_fused_residual_step_in_the_compiled_program() -> None:
    x, w, b, _ = _inputs(jnp.bfloat16)

    def hlo(f: Callable[..., Any], r: Array) -> str:
        g = jax.grad(lambda x, r: jnp.sum(f(x, r)[0].astype(jnp.float32)), argnums=(0, 1))
        return jax.jit(g).lower(x, r).compile().as_text()

    fwd_alone = 'custom_call_target="jln_cpu_norm_fwd"'
    # one kernel reads x and the residual and writes s and y; the backward is the shared kernel
    fused = hlo(lambda x, r: jln.add_layer_norm(x, r, w, b), x)
    assert "jln_cpu_norm_add_fwd" in fused and "jln_cpu_norm_bwd" in fused and fwd_alone not in fused
    # XLA adds, the kernel normalizes s: a float32 sum of bfloat16 inputs (residual_in_fp32;
    # fused, it was no faster: see the README), or x and the residual in two dtypes
    for f, r in ((lambda x, r: jln.add_layer_norm(x, r, w, b, residual_in_fp32=True), x),
                 (lambda x, r: jln.add_layer_norm(x, r, w, b), x.astype(jnp.float32))):
        mixed = hlo(f, r)
        assert "jln_cpu_norm_add_fwd" not in mixed and fwd_alone in mixed


def test_eager_cpu_array_runs_on_the_cpu_whatever_the_default_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    # on a GPU machine, an eager call on a CPU array must not pick the GPU kernels: the
    # platform comes from the array's devices; a traced value has none (the default decides)
    from jln import _dispatch, _platform
    from jln.families.layer_norm.spec import LayerNormSpec

    x, w, b, _ = _inputs(jnp.float32)
    want = jln.layer_norm(x, w, b, impl="xla")
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    spec = LayerNormSpec(axes=(2,), eps=1e-5, out_dtype=x.dtype)
    assert _platform.platform_of(x) == "cpu"
    assert _dispatch.choose("t", "auto", spec, x, (w, b, None, None)) == "native"
    _close(jln.layer_norm(x, w, b), want, "eager auto, default backend 'gpu'")
    # a forced impl="pallas" on that array runs the kernels in interpret mode, as on a CPU machine
    _close(jln.layer_norm(x, w, b, impl="pallas"), want, "eager pallas, default backend 'gpu'")
    seen: list[str] = []
    jax.make_jaxpr(lambda x: seen.append(_platform.platform_of(x)) or x)(x)
    assert seen == ["gpu"]
    assert _platform.platform_of(np.asarray(x)) == "gpu"  # a host array: the default backend


def test_large_offset_keeps_full_precision() -> None:
    # x = 3e5 + N(0, 1): the pivot makes the statistics exact; E[x^2] - E[x]^2 would lose all digits
    x = np.random.default_rng(0).standard_normal((16, 1024)) + 3e5
    y = np.asarray(jln.layer_norm(jnp.asarray(x, jnp.float32), impl="native"), np.float64)
    x32 = np.asarray(np.float32(x), np.float64)  # the float32 input the kernel sees
    ref = (x32 - x32.mean(-1, keepdims=True)) / np.sqrt(x32.var(-1, keepdims=True) + 1e-5)
    assert np.max(np.abs(y - ref)) < 2e-6


SHAPE_OPS = ("layer_norm", "rms/torch", "rms/llama")


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: jnp.dtype(d).name)
@pytest.mark.parametrize("shape", [(1, 1), (4, 1), (2, 3), (7, 17), (2, 2, 4097), (70, 1000)])
@pytest.mark.slow
def test_shapes_including_threaded_chunks(shape: tuple[int, ...], dt: Any) -> None:
    # widths below/above the 16-lane blocks (the scalar tails of every sweep, including the
    # half-precision scratch row), 70x1000 = 2+ row chunks (the thread-pool path), an offset
    # mean (the pivot), the fused simple sweep and the general one (llama's rounding steps)
    x, w, b, ct = _inputs(dt, shape, offset=3.0)
    ops = _ops(dt)
    for name in SHAPE_OPS:
        outs = []
        for impl in ("native", "xla"):
            y, pull = jax.vjp(lambda x, w, b, impl=impl, f=ops[name]: f(x, w, b, impl), x, w, b)
            outs.append((y, *pull(ct.astype(y.dtype))))
        for a, c, what in zip(outs[0], outs[1], ("y", "dx", "dscale", "dbias"), strict=True):
            _close(a, c, f"{name} {shape} {jnp.dtype(dt).name} {what}", rel_ulps=32 if dt == jnp.float32 else 4)


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: jnp.dtype(d).name)
@pytest.mark.parametrize("width", [200, 512, 513, 1024, 1033, 2049])
@pytest.mark.slow
def test_rows_on_every_side_of_the_scratch_row_rules(width: int, dt: Any) -> None:
    # half rows up to 512 wide and wider than 2048 are read in place (the rounded mean hi and
    # its residual c subtracted in every pass; up to 512 in the row pipeline's pairs); from 513
    # to 1024 they keep e = x - hi in their float32 scratch row and the output sweeps subtract
    # c; up to 2048 the scratch row keeps x and the sweeps subtract hi and c. Each side (513, 1033 and
    # 2049 with a scalar tail; 6 rows: 3 pairs, and a partial block of 8 for the scratch rows),
    # through the fused simple sweep (layer_norm, the residual step) and the general one
    # (adaptive LayerNorm's modulation, llama's rounding steps)
    x, w, b, ct = _inputs(dt, (2, 3, width), offset=3.0)
    ops = _ops(dt)
    for name in ("layer_norm", "add_layer_norm", "adaptive/dit_final", "rms/llama"):
        outs = []
        for impl in ("native", "xla"):
            y, pull = jax.vjp(lambda x, impl=impl, f=ops[name]: f(x, w, b, impl), x)
            outs.append((y, *pull(ct.astype(y.dtype))))
        for a, c, what in zip(outs[0], outs[1], ("y", "dx"), strict=True):
            _close(a, c, f"{name} {width} {jnp.dtype(dt).name} {what}", rel_ulps=32 if dt == jnp.float32 else 4)


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: jnp.dtype(d).name)
@pytest.mark.parametrize("width", [4096, 4100])
@pytest.mark.slow
def test_wide_rows_in_pairs(width: int, dt: Any) -> None:
    # rows 4096 or more wide run in pairs that share one output sweep: an odd row count (the
    # last row alone), a scalar tail (4100), and per-example parameters: 3 groups of 3 rows
    # (a pair would straddle two groups, so they run a row a step) and 3 groups of 32 rows
    # (pairs, modulated ones for adaptive LayerNorm; with 2+ threads the rows split into chunks
    # of 2**17 // width rows: 32 at 4096, every chunk pairs; 31 at 4100, where a chunk ending on
    # an odd row runs a row a step: rows 62..92 in pairs would pair 63 with 64, across groups)
    x, w, b, _ = _inputs(dt, (3, 3, width), offset=3.0)
    g = jnp.arange(3, dtype=jnp.float32).reshape(3, 1)
    wg = (w.astype(jnp.float32).reshape(1, width) * (1.0 + 0.5 * g)).astype(dt)  # one row per example
    bg = (b.astype(jnp.float32).reshape(1, width) + 0.25 * g).astype(dt)
    xa = _inputs(dt, (3, 32, width), offset=3.0)[0]

    def adaptive(x: Array, impl: str, affine: bool) -> Array:
        x32 = x.astype(jnp.float32)  # (the condition depends on x: dx carries its gradients)
        cond = jnp.concatenate([0.5 + 0.2 * jnp.sin(x32[:, 0]), 0.3 * jnp.cos(x32[:, 1])], -1).astype(dt)
        params = (w, b) if affine else ()
        return jln.adaptive_layer_norm(x, cond, *params, order="seed", impl=impl)[0]

    cases: dict[str, Callable[[Array, str], Array]] = {
        "layer_norm": lambda x, impl: jln.layer_norm(x, w, b, impl=impl),
        "layer_norm/odd-rows": lambda x, impl: jln.layer_norm(x[:2, :2].reshape(-1, width)[:3], w, b, impl=impl),
        "layer_norm/per-example": lambda x, impl: jax.vmap(
            lambda xi, wi, bi: jln.layer_norm(xi, wi, bi, impl=impl))(x, wg, bg),
        "rms_norm/per-example": lambda x, impl: jax.vmap(lambda xi, wi: jln.rms_norm(xi, wi, impl=impl))(x, wg),
        "add_layer_norm": lambda x, impl: jln.add_layer_norm(x, jnp.flip(x, -1), w, b, impl=impl)[0],
        "adaptive/per-example-pairs": lambda x, impl: adaptive(x, impl, affine=False),
        "adaptive/per-example-pairs-affine": lambda x, impl: adaptive(x, impl, affine=True),
    }
    for name, f in cases.items():
        outs = []
        for impl in ("native", "xla"):
            y, pull = jax.vjp(lambda x, impl=impl, f=f: f(x, impl), xa if name.startswith("adaptive") else x)
            outs.append((y, *pull((0.5 + jnp.sin(y.astype(jnp.float32))).astype(y.dtype))))
        for a, c, what in zip(outs[0], outs[1], ("y", "dx"), strict=True):
            _close(a, c, f"{name} {width} {jnp.dtype(dt).name} {what}", rel_ulps=32 if dt == jnp.float32 else 4)


def _cond(x: Array, scale: Array, shift: Array) -> Array:
    """An adaptive LayerNorm condition [2, 2N] (scale, shift) for x[:4] as 2 examples of 2 rows,
    depending on x."""
    x4 = x[:4].reshape(2, 2, -1).astype(jnp.float32)
    scale, shift = scale.astype(jnp.float32), shift.astype(jnp.float32)
    return jnp.concatenate([scale + 0.1 * jnp.sin(x4[:, 0]), shift + 0.1 * jnp.cos(x4[:, 1])], -1).astype(x.dtype)


@pytest.mark.parametrize(("width", "dt"), [(16, jnp.float32), (100, jnp.float32), (1024, jnp.float32),
                                           (4100, jnp.float32), (4100, jnp.bfloat16), (4100, jnp.float16),
                                           (1024, jnp.bfloat16), (2000, jnp.bfloat16), (100, jnp.bfloat16)],
                         ids=lambda v: jnp.dtype(v).name if not isinstance(v, int) else str(v))
@pytest.mark.slow
def test_row_pipeline_hands_each_row_its_statistics(width: int, dt: Any) -> None:
    # rows read in place run as a pipeline (each step's output sweep carries the next step's
    # first statistics pass, whose statistics it hands on; steps of two rows where the
    # parameters are one row each, an odd first row alone): 1 to 8 rows (no row to hand on,
    # one, several, an odd row before pairs, several pairs), rows whose scale and
    # offset differ a lot (statistics handed to the wrong row would show), the residual step
    # (the next row's sum s written while the current row's is read), per-example parameters
    # (2 rows per example: the parameter row changes inside the pipeline) and scalar tails;
    # llama's, t5's and gemma's RMSNorm take the same fused sweeps, forward and backward.
    # Half-precision rows from 1024 to 2048 wide are piped through float32 scratch rows (1024:
    # the scratch row holds d; 2000: x - p); shorter ones run in blocks through the same fused
    # output sweep (100 wide, bfloat16).
    base, w, b, _ = _inputs(dt, (8, width))
    r = jnp.arange(8, dtype=jnp.float32).reshape(8, 1)
    x = (base.astype(jnp.float32) * (1.0 + r) + 10.0 * r).astype(dt)
    g = jnp.arange(2, dtype=jnp.float32).reshape(2, 1)
    wg = (w.astype(jnp.float32).reshape(1, width) * (1.0 + 0.5 * g)).astype(dt)  # one row per example
    bg = (b.astype(jnp.float32).reshape(1, width) + 0.25 * g).astype(dt)
    cases: dict[str, Callable[[Array, str], Any]] = {
        "layer_norm": lambda x, impl: jln.layer_norm(x, w, b, impl=impl),
        "rms_norm": lambda x, impl: jln.rms_norm(x, w, impl=impl),
        # llama's and t5's rounding of h and gemma's 1 + w: the same fused sweeps
        "rms_norm/llama": lambda x, impl: jln.rms_norm(x, w, convention="llama", impl=impl),
        "rms_norm/t5": lambda x, impl: jln.rms_norm(x, w, convention="t5", impl=impl),
        "rms_norm/gemma": lambda x, impl: jln.rms_norm(x, w, convention="gemma", impl=impl),
        "layer_norm/no-params": lambda x, impl: jln.layer_norm(x, impl=impl),
        "add_layer_norm": lambda x, impl: jln.add_layer_norm(x, jnp.flip(x, 0), w, b, impl=impl),
        "add_rms_norm": lambda x, impl: jln.add_rms_norm(x, jnp.flip(x, 0), w, impl=impl),
        "layer_norm/per-example": lambda x, impl: jax.vmap(
            lambda xi, wi, bi: jln.layer_norm(xi, wi, bi, impl=impl))(x[:4].reshape(2, 2, width), wg, bg),
        "rms_norm/per-example": lambda x, impl: jax.vmap(
            lambda xi, wi: jln.rms_norm(xi, wi, impl=impl))(x[:4].reshape(2, 2, width), wg),
        # adaptive LayerNorm: per-example shift and scale (the modulated fused sweeps), with and
        # without an affine step first; the condition is made from x, so dx carries the
        # gradients of the shift and the scale too
        "adaptive/per-example": lambda x, impl: jln.adaptive_layer_norm(
            x[:4].reshape(2, 2, width), _cond(x, wg - 1.0, bg), order="seed", impl=impl)[0],
        "adaptive/per-example-affine": lambda x, impl: jln.adaptive_layer_norm(
            x[:4].reshape(2, 2, width), _cond(x, 0.5 * bg, bg), w, b, order="seed", impl=impl)[0],
    }
    for rows in (1, 2, 5, 8):
        xr = x[:rows]
        for name, f in cases.items():
            if "per-example" in name and rows != 5:  # (4 of the 5 rows, 2 examples)
                continue
            if rows == 8 and not name.startswith(("layer_norm", "rms_norm", "add_")):
                continue
            outs = []
            for impl in ("native", "xla"):
                y, pull = jax.vjp(lambda x, impl=impl, f=f: f(x, impl), xr)
                ct = jax.tree.map(lambda v: (0.5 + jnp.sin(v.astype(jnp.float32))).astype(v.dtype), y)
                outs.append((*jax.tree.leaves(y), *pull(ct)))
            for i, (a, c) in enumerate(zip(outs[0], outs[1], strict=True)):
                what = f"{name} rows={rows} {width} {jnp.dtype(dt).name} output {i}"
                _close(a, c, what, rel_ulps=32 if dt == jnp.float32 else 4)
                if dt != jnp.float32:
                    # a half-precision y or dx is the XLA path's bit for bit but where the two
                    # float32 row sums' summation orders round differently, which a few ulps
                    # allow; a rounding step skipped or added would alter many elements
                    same = float(np.mean(np.asarray(a, np.float32) == np.asarray(c, np.float32)))
                    assert same >= 0.98, f"{what}: only {same:.1%} of the elements equal the XLA path's"


@pytest.mark.slow
def test_kernel_harness_compiles() -> None:
    # bench/native_kernel.cc includes the kernels and calls their row functions directly, so a
    # change of their signatures breaks it without any other test noticing: compile it (syntax
    # and template instantiation only) with the flags jln builds the kernels with
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    flags = [f for f in _cpu_build.FLAGS if f not in ("-shared", "-fPIC")]
    cmd = [_cpu_build.compiler() or "c++", *flags, "-fsyntax-only", f"-I{jax.ffi.include_dir()}",
           os.path.join(root, "bench", "native_kernel.cc")]
    r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr[-4000:]


def test_forward_sweeps_keep_their_prefetches() -> None:
    # The forward's sweeps hint the rows ahead into L2 (prefetch_src, prefetch_dst): GCC 12
    # once deleted those calls from every pipeline sweep (they sat in a lambda inlined by
    # force), which no result shows, only the speed from memory. Every compiled sweep of the
    # three kinds that hint (each a function of its own, JLN_NOINLINE) must hold a prefetch.
    # Nor may a sweep call its per-vector steps: left to GCC, whether fused_out (the output
    # step) or vround was inlined changed with unrelated edits, and a call per 16 elements
    # costs the loop its speed, which again only a benchmark shows.
    objdump = shutil.which("objdump")
    if platform.machine() != "x86_64" or objdump is None:
        pytest.skip("reads x86-64 machine code with binutils' objdump")
    text = subprocess.run([objdump, "-d", "--no-show-raw-insn", str(_cpu.library())], capture_output=True,
                          text=True, check=True).stdout
    counts: dict[str, int] = {}
    calls: dict[str, list[str]] = {}
    name = ""
    for line in text.splitlines():
        if line.endswith(">:"):
            name = line[line.index("<") + 1:-2]
            counts[name] = 0
            calls[name] = []
        elif "prefetch" in line and name:
            counts[name] += 1
        elif "\tcall" in line and "<" in line and name:
            calls[name].append(line[line.index("<") + 1:line.rindex(">")])
    steps = ("9fused_out", "6vround", "4vsrc", "5vload", "6vstore")
    # the pipeline's sweeps, the first statistics pass, the one-row output sweep; at least one
    # compiled function per (x dtype, y dtype) pair and specialization
    for kind, least in (("11out_first_tI", 100), ("11stats_firstI", 9), ("10simple_outI", 9)):
        sweeps = {k: v for k, v in counts.items() if kind in k}
        assert len(sweeps) >= least, (kind, len(sweeps))
        lost = [k for k, v in sweeps.items() if v == 0]
        assert not lost, f"{len(lost)} of {len(sweeps)} {kind} sweeps have no prefetch, e.g. {lost[0]}"
        called = sorted({(k, c) for k in sweeps for c in calls[k] if any(step in c for step in steps)})
        assert not called, f"{len(called)} {kind} sweeps call a per-vector step, e.g. {called[0]}"


@pytest.mark.slow
def test_jax_export_takes_the_xla_body() -> None:
    # A custom call without a compatibility guarantee cannot be serialized, so jax.export
    # refused every computation holding a native kernel. Lowered for export, the kernels' calls
    # become the XLA body they implement: the exported forward is the XLA path's bit for bit,
    # its gradients the XLA path's up to the order of their sums, while jit keeps the kernels.
    x, w, b, ct = _inputs(jnp.bfloat16, (3, 4, 96), offset=2.0)
    cond = jnp.concatenate([0.5 + 0.1 * x[:, 0], 0.2 * x[:, 1]], -1)
    cases: dict[str, Callable[[Array, str], Any]] = {
        "layer_norm": lambda x, impl: jln.layer_norm(x, w, b, impl=impl),
        "add_layer_norm": lambda x, impl: jln.add_layer_norm(x, jnp.flip(x, -1), w, b, impl=impl),
        "rms/llama": lambda x, impl: jln.rms_norm(x, w, convention="llama", impl=impl),
        "adaptive/dit_final": lambda x, impl: jln.adaptive_layer_norm(x, cond, order="dit_final", impl=impl)[0],
    }
    for name, f in cases.items():
        fwd = jax.jit(lambda x, f=f: f(x, "auto"))
        assert "custom_call @jln_cpu_norm" in fwd.lower(x).as_text(), name  # jit: the native kernels

        def loss(x: Array, impl: str, f: Callable[[Array, str], Any] = f) -> Array:
            return sum(jnp.vdot(ct, v.astype(jnp.float32)) for v in jax.tree.leaves(f(x, impl)))

        grad = jax.jit(jax.grad(lambda x, loss=loss: loss(x, "auto")))
        for fn, want in ((fwd, lambda x, f=f: f(x, "xla")), (grad, jax.grad(lambda x, loss=loss: loss(x, "xla")))):
            exported = jax.export.export(fn)(x)
            assert "custom_call" not in exported.mlir_module(), name
            for a, c in zip(jax.tree.leaves(exported.call(x)), jax.tree.leaves(want(x)), strict=True):
                if fn is fwd:
                    assert a.dtype == c.dtype and bool(jnp.all(a == c)), f"{name}: exported y is not the XLA path's"
                else:
                    _close(a, c, f"{name} exported dx", rel_ulps=4)


def test_other_platforms_take_the_xla_body() -> None:
    # The FFI kernels are the CPU's: a computation traced with them and lowered for another
    # platform (a GPU, or the CPU and a GPU at once) takes the XLA body there, forward mode
    # (whose tangent had a CPU rule only) included; the CPU keeps the kernels.
    x, w, b, ct = _inputs(jnp.bfloat16, (3, 4, 96), offset=2.0)

    def f(x: Array) -> Array:
        return jln.layer_norm(x, w, b, impl="native")

    progs = {
        "forward": (jax.jit(f), 1),
        "grad": (jax.jit(jax.grad(lambda x: jnp.vdot(ct, f(x).astype(jnp.float32)))), 2),
        "jvp": (jax.jit(lambda x: jax.jvp(f, (x,), (x,))[1]), 1),
    }
    for name, (fn, kernels) in progs.items():
        traced = fn.trace(x)
        assert traced.lower(lowering_platforms=("cpu",)).as_text().count("custom_call @jln_cpu_norm") == kernels, name
        assert "custom_call" not in traced.lower(lowering_platforms=("cuda",)).as_text(), name
        both = traced.lower(lowering_platforms=("cuda", "cpu")).as_text()
        assert both.count("custom_call @jln_cpu_norm") == kernels, name


def test_special_values_propagate_like_xla() -> None:
    x = jnp.array([[0.0, 0.0, 0.0, 0.0], [1.0, jnp.nan, 2.0, 3.0], [1.0, jnp.inf, 2.0, 3.0], [1e30, -1e30, 3.0, 0.0]], jnp.float32)
    for f in (lambda x, impl: jln.layer_norm(x, impl=impl), lambda x, impl: jln.rms_norm(x, impl=impl)):
        a, c = np.asarray(f(x, "native")), np.asarray(f(x, "xla"))
        np.testing.assert_array_equal(np.isnan(a), np.isnan(c))
        np.testing.assert_allclose(a[~np.isnan(a)], c[~np.isnan(c)], rtol=1e-6, atol=1e-6)


# ----------------------------------------------------------------------------- transforms


def _f(impl: str) -> Callable[..., Array]:
    return lambda x, w, b: jnp.sum(jnp.sin(jln.layer_norm(x, w, b, impl=impl)))


def _tree_close(a: Any, c: Any, what: str, tol: float) -> None:
    for u, v in zip(jax.tree.leaves(a), jax.tree.leaves(c), strict=True):
        err = float(jnp.max(jnp.abs(u - v)))
        assert err <= tol, f"{what}: {err:.3g} > {tol:.3g}"


TRANSFORMS: dict[str, Callable[[str, Array, Array, Array, Array], Any]] = {
    "eager": lambda i, x, w, b, W: jln.layer_norm(x, w, b, impl=i),
    "grad": lambda i, x, w, b, W: jax.grad(_f(i), argnums=(0, 1, 2))(x, w, b),
    "jvp": lambda i, x, w, b, W: jax.jvp(_f(i), (x, w, b), (0.1 * x, w, b)),
    "jacfwd": lambda i, x, w, b, W: jax.jacfwd(_f(i), argnums=1)(x, w, b),
    "hessian": lambda i, x, w, b, W: jax.hessian(_f(i), argnums=1)(x, w, b),
    "grad-of-grad": lambda i, x, w, b, W: jax.grad(lambda x: jnp.sum(jax.grad(_f(i))(x, w, b) ** 2))(x),
    "vmap(grad), per-example weights": lambda i, x, w, b, W: jax.vmap(jax.grad(_f(i), argnums=(0, 1)), in_axes=(0, 0, None))(x, W, b),
    "grad(vmap), per-example weights": lambda i, x, w, b, W: jax.grad(
        lambda x, W: jnp.sum(jnp.cos(jax.vmap(lambda xx, ww: jln.layer_norm(xx, ww, b, impl=i))(x, W))), argnums=(0, 1))(x, W),
    "vmap(jvp)": lambda i, x, w, b, W: jax.vmap(lambda xx: jax.jvp(_f(i), (xx, w, b), (xx, w, b))[1])(x),
    "vmap(vmap(grad)) rms": lambda i, x, w, b, W: jax.vmap(jax.vmap(
        jax.grad(lambda x, w: jnp.sum(jnp.sin(jln.rms_norm(x, w, convention="llama", impl=i))), argnums=(0, 1)),
        in_axes=(0, None)), in_axes=(0, 0))(x, W),
    "grad(scan)": lambda i, x, w, b, W: jax.grad(lambda x: jax.lax.scan(
        lambda c, xx: (c + jnp.sum(jnp.sin(jln.layer_norm(xx, w, b, impl=i))), None), 0.0, x)[0])(x),
    "grad(checkpoint)": lambda i, x, w, b, W: jax.grad(jax.checkpoint(_f(i)))(x, w, b),
}


@pytest.mark.parametrize("name", [n if n != "hessian" else pytest.param(n, marks=pytest.mark.slow) for n in TRANSFORMS])
def test_transforms_match_xla_path(name: str) -> None:
    x, w, b, _ = _inputs(jnp.float32, (3, 5, 16), offset=50.0)
    W = jax.random.normal(jax.random.key(3), (3, 16))
    got = TRANSFORMS[name]("native", x, w, b, W)
    want = TRANSFORMS[name]("xla", x, w, b, W)
    _tree_close(got, want, name, 2e-5)


def test_residuals_are_x_and_row_statistics() -> None:
    # reverse mode keeps x (own dtype), per-row statistics and the parameters: 2 B/elem for bf16
    from . import _residuals

    x = jnp.ones((64, 256), jnp.bfloat16)
    w = jnp.ones((256,), jnp.bfloat16)
    per_elem = _residuals.residual_bytes_per_element(lambda x, w: jln.layer_norm(x, w, w, impl="native"), x, w)
    # x (2 B) + float32 mean and rstd per row (8 B / 256) + the float32 scale and bias copies
    # + a few 4-byte placeholders for the absent shift/scale of adaptive LayerNorm
    assert 2.0 <= per_elem <= 2.0 + 8 / 256 + (2 * 4 * 256 + 4 * 4) / x.size + 1e-9, per_elem


# ----------------------------------------------------------------------------- fallbacks


@pytest.mark.parametrize(
    "call, why",
    [
        (lambda x: jln.layer_norm(x.astype(jnp.float64), impl="native"), "float64"),
        (lambda x: jln.layer_norm(x, axis=0, impl="native"), "trailing axes"),
        (lambda x: jln.rms_norm(x, convention="seed", impl="native"), "seed"),
    ],
)
def test_native_refuses_what_it_does_not_cover(call: Callable[[Array], Any], why: str) -> None:
    x = jnp.ones((4, 8), jnp.float32)
    with jax.enable_x64(True), pytest.raises(ValueError, match=why):
        call(x)


def _run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300,
        env={**os.environ, "JAX_PLATFORMS": "cpu", **env},
    )


PROBE = """
    import jax, jax.numpy as jnp, jln
    from jln.kernels import _cpu, _cpu_build
    x = jnp.ones((4, 8))
    print("REASON", _cpu.available())
    print("HLO", "jln_cpu_norm" in jax.jit(lambda x: jln.layer_norm(x)).lower(x).as_text())
    print("Y", float(jln.layer_norm(x + jnp.arange(8.0))[0, 0]))
    try:
        jln.layer_norm(x, impl="native")
    except ValueError as e:
        print("ERR", e)
"""


@pytest.mark.slow  # a subprocess or a wide sweep; runs with --run-slow
def test_unbuilt_auto_stays_on_xla(tmp_path: Any) -> None:
    done = _run(PROBE, CXX=str(tmp_path / "no-such-compiler"), JLN_CACHE_DIR=str(tmp_path))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "HLO False" in out and "Y -1.52" in out, out  # XLA path, same answer
    assert "ERR jln.layer_norm: impl='native' is not available here" in out and "`jln build`" in out, out


def test_env_switch_disables_native() -> None:
    done = _run(PROBE, JLN_NATIVE="0")
    assert done.returncode == 0, done.stderr
    assert "HLO False" in done.stdout and "JLN_NATIVE=0" in done.stdout, done.stdout


@pytest.mark.slow  # a subprocess or a wide sweep; runs with --run-slow
def test_several_devices_keep_auto_on_xla() -> None:
    done = _run(PROBE, XLA_FLAGS="--xla_force_host_platform_device_count=2")
    assert done.returncode == 0, done.stderr
    assert "REASON None" in done.stdout and "HLO False" in done.stdout, done.stdout


def _fake_compiler(path: Any, version: str, log: Any) -> str:
    """A stand-in C++ compiler: answers ``--version`` with ``version``; for a build logs the
    call, writes a stand-in object file for a compile (``-c``) and, for the link, this
    session's real kernel library to its ``-o`` path (the build machinery is under test here,
    not the compiler: a real build takes minutes)."""
    real = _cpu.library()
    path.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import shutil, sys, time
        if "--version" in sys.argv:
            print({version!r})
            sys.exit(0)
        with open({str(log)!r}, "a") as f:
            f.write(" ".join(sys.argv[1:]) + "\\n")
        out = sys.argv[sys.argv.index("-o") + 1]
        if "-c" in sys.argv:
            time.sleep(1.0)  # long enough for a second builder to find the first one's lock held
            with open(out, "w") as f:
                f.write("object " + " ".join(a for a in sys.argv if a.startswith("-DJLN_")))
        else:
            assert all(open(o).read().startswith("object") for o in sys.argv if o.endswith(".o"))
            shutil.copyfile({str(real)!r}, out)
        """))
    path.chmod(0o755)
    return str(path)


def _builds(log: Any) -> list[list[str]]:
    """The logged compiler calls, one list of compile calls (ending with its link) per build."""
    out: list[list[str]] = [[]]
    for line in log.read_text().splitlines():
        out[-1].append(line)
        if "-shared" in line.split():
            out.append([])
    return out[:-1] if not out[-1] else out


@pytest.mark.slow
def test_build_is_cached_and_keyed(tmp_path: Any) -> None:
    cache, log = tmp_path / "cache", tmp_path / "builds.log"
    build = "from jln.kernels import _cpu_build; print(_cpu_build.build())"
    cxx = _fake_compiler(tmp_path / "cxx", "fake-c++ 1.0", log)
    env = dict(CXX=cxx, JLN_CACHE_DIR=str(cache))
    # two processes at once: one builds while the other waits for its lock, then loads its library
    procs = [subprocess.Popen([sys.executable, "-c", build], env={**os.environ, "JAX_PLATFORMS": "cpu", **env}, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1] for o in outs]
    a = _run(build, **env)  # and a later process finds it built
    assert a.returncode == 0, a.stderr
    # the builder says what it is doing and when it is done (a user's first call waits for it)
    said = [o[1] for o in outs]
    assert sum(COMPILING in e for e in said) == 1 and sum("native CPU kernels built in" in e for e in said) == 1, said
    assert "jln:" not in a.stderr, a.stderr  # a cached library: nothing to say
    assert outs[0][0] == outs[1][0] == a.stdout and a.stdout.strip().endswith(".so")
    builds = _builds(log)
    assert len(builds) == 1, builds  # one build for the three processes
    *compiles, link = builds[0]
    # each part once, with the kernel flags, then one link of all of them
    assert sorted(" ".join(w for w in c.split() if w.startswith("-DJLN_")) for c in compiles) == sorted(
        " ".join(("-DJLN_SPLIT", *part[1:])) for part in _cpu_build.PARTS)
    sources = sorted(c.split()[c.split().index("-c") + 1] for c in compiles)
    assert sources == sorted(str(_cpu_build.SOURCE.with_name(part[0])) for part in _cpu_build.PARTS), sources
    for c in compiles:
        assert all(f in c.split() for f in _cpu_build.FLAGS) and " -c " in c, c
    objs = [c.split()[c.split().index("-o") + 1] for c in compiles]
    assert sorted(w for w in link.split() if w.endswith(".o")) == sorted(objs)
    library = os.path.basename(a.stdout.strip())
    manifest = library.removesuffix(".so") + ".json"
    assert sorted(p.name for p in cache.iterdir()) == sorted([".locks", library, manifest])  # no temp files left
    made = json.loads((cache / manifest).read_text())
    assert made["compiler_version"] == "fake-c++ 1.0" and made["flags"] == list(_cpu_build.FLAGS), made
    # the compiler is not in the key (a process without one loads what another built): another
    # compiler finds the library built, and builds only when forced, in place
    cxx2 = _fake_compiler(tmp_path / "cxx2", "fake-c++ 2.0", log)
    c = _run(build, CXX=cxx2, JLN_CACHE_DIR=str(cache))
    assert c.returncode == 0 and c.stdout == a.stdout and len(_builds(log)) == 1, c.stderr
    d = _run("from jln.kernels import _cpu_build; print(_cpu_build.build(force=True))", CXX=cxx2, JLN_CACHE_DIR=str(cache))
    assert d.returncode == 0 and d.stdout == a.stdout and len(_builds(log)) == 2, d.stderr
    assert json.loads((cache / manifest).read_text())["compiler_version"] == "fake-c++ 2.0"
    assert sorted(p.name for p in cache.iterdir()) == sorted([".locks", library, manifest])


COMPILING = "jln: compiling its native CPU kernels for this machine"


def test_a_build_waiting_for_another_says_so(tmp_path: Any, caplog: pytest.LogCaptureFixture) -> None:
    import fcntl

    path = tmp_path / "locks" / "0123.lock"
    path.parent.mkdir()
    entered = threading.Event()

    def waiter() -> None:
        with _cpu_build._build_lock(path):
            entered.set()

    with open(path, "a") as held, caplog.at_level(logging.WARNING, logger="jln"):
        fcntl.flock(held, fcntl.LOCK_EX)  # another builder holds the lock
        t = threading.Thread(target=waiter)
        t.start()
        deadline = time.time() + 20
        while "waiting for another process" not in caplog.text and time.time() < deadline:
            time.sleep(0.01)
        assert not entered.is_set(), "the lock was taken while another holder had it"
        fcntl.flock(held, fcntl.LOCK_UN)
        t.join(timeout=60)
    assert entered.is_set() and "waiting for another process" in caplog.text and "0123" in caplog.text, caplog.text


@pytest.mark.slow
def test_jln_build_command(tmp_path: Any) -> None:
    cache, log = tmp_path / "cache", tmp_path / "builds.log"
    cmd = "import sys; from jln.cli import main; sys.exit(main(['build']))"
    env = dict(CXX=_fake_compiler(tmp_path / "cxx", "fake-c++ 1.0", log), JLN_CACHE_DIR=str(cache))
    first, again = _run(cmd, **env), _run(cmd, **env)
    for done in (first, again):
        assert done.returncode == 0, done.stderr
        ready, made = done.stdout.splitlines()
        lib = Path(ready.split(": ")[-1].strip())
        assert ready.startswith("jln build: native CPU kernels ready") and lib.parent == cache, done.stdout
        assert lib.is_file() and lib.suffix == ".so", lib
        assert made.startswith("jln build: built ") and made.endswith("by fake-c++ 1.0"), made
    assert first.stdout.splitlines()[0].split(": ")[-1] == again.stdout.splitlines()[0].split(": ")[-1]
    assert COMPILING in first.stderr and COMPILING not in again.stderr, (first.stderr, again.stderr)
    assert len(_builds(log)) == 1  # the second found it built
    # where the kernels cannot be had: exit 1, and why
    for bad, why in ((dict(CXX=str(tmp_path / "no-such-compiler")), "no-such-compiler"), (dict(JLN_NATIVE="0"), "JLN_NATIVE=0")):
        done = _run(cmd, **{"JLN_CACHE_DIR": str(tmp_path / "other"), **bad})
        assert done.returncode == 1 and why in done.stderr and not done.stdout, (done.stdout, done.stderr)


@pytest.mark.slow
def test_build_prunes_libraries_unused_for_a_month(tmp_path: Any) -> None:
    cache, log = tmp_path / "cache", tmp_path / "builds.log"
    cache.mkdir()
    (cache / ".locks").mkdir()
    day = 24 * 3600
    now = time.time()
    old, recent, other = cache / "jln_cpu_norm-0123456789abcdef.so", cache / "jln_cpu_norm-fedcba9876543210.so", cache / "notes.txt"
    old_lock, old_manifest = cache / ".locks" / "0123456789abcdef.lock", cache / "jln_cpu_norm-0123456789abcdef.json"
    for path, age in ((old, 31), (recent, 29), (other, 400), (old_lock, 31), (old_manifest, 31)):
        path.write_text("stand-in")
        os.utime(path, (now - age * day, now - age * day))
    build = "from jln.kernels import _cpu_build; print(_cpu_build.build())"
    env = dict(CXX=_fake_compiler(tmp_path / "cxx", "fake-c++ 1.0", log), JLN_CACHE_DIR=str(cache))
    a = _run(build, **env)
    assert a.returncode == 0, a.stderr
    lib = Path(a.stdout.strip())
    assert not old.exists() and not old_lock.exists() and not old_manifest.exists()  # unused for 31 days: deleted
    assert recent.exists() and other.exists() and lib.exists()  # 29 days, not a library, the new one
    # using a library marks it used: an old one that a process loads is kept
    os.utime(lib, (now - 40 * day, now - 40 * day))
    b = _run(build, **env)
    assert b.returncode == 0 and b.stdout == a.stdout, b.stderr
    assert now - lib.stat().st_mtime < day
    assert len(_builds(log)) == 1


@pytest.mark.slow  # a subprocess or a wide sweep; runs with --run-slow
def test_build_failure_names_the_part(tmp_path: Any) -> None:
    # a compiler error reaches the caller with the part it broke in and the compiler's message,
    # and no library or temp files are left behind
    cxx = tmp_path / "cxx"
    cxx.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import sys
        if "--version" in sys.argv:
            print("broken-c++ 1.0")
            sys.exit(0)
        if "-DJLN_MAIN" in sys.argv:
            sys.stderr.write("cpu_norm.cc:1:1: error: no handlers today\\n")
            sys.exit(1)
        open(sys.argv[sys.argv.index("-o") + 1], "w").write("object")
        """))
    cxx.chmod(0o755)
    cache = tmp_path / "cache"
    done = _run("from jln.kernels import _cpu_build; _cpu_build.build()", CXX=str(cxx), JLN_CACHE_DIR=str(cache))
    assert done.returncode != 0
    assert "(-DJLN_MAIN) failed" in done.stderr and "no handlers today" in done.stderr, done.stderr[-2000:]
    assert sorted(p.name for p in cache.iterdir()) == [".locks"]


def test_tiny_outputs_match_xla_flush_to_zero() -> None:
    # XLA:CPU computes with subnormals flushed to zero, and the kernels run on its threads with
    # the same floating-point mode: results near and below 2**-126 match the XLA path exactly
    # (the AVX512-BF16 conversion path also falls back to software rounding for subnormals)
    x = jax.random.normal(jax.random.key(0), (4, 40), jnp.float32).astype(jnp.bfloat16)
    for scale in (3e-39, 2e-38, 1e-37):
        w = jnp.asarray(np.full((40,), scale, np.float32))
        for f in (lambda impl, w=w: jln.layer_norm(x, w, impl=impl), lambda impl, w=w: jln.rms_norm(x, w, impl=impl)):
            a, c = f("native"), f("xla")
            assert a.dtype == c.dtype == jnp.bfloat16
            np.testing.assert_array_equal(np.asarray(a.astype(jnp.float32)), np.asarray(c.astype(jnp.float32)))


@pytest.mark.slow  # a subprocess or a wide sweep; runs with --run-slow
def test_float16_subnormal_outputs_match_xla() -> None:
    # float16's subnormals (below 2**-14, about 6e-5) are ordinary float32 numbers: a small
    # scale puts many outputs there, and the kernels' vector conversions must round them as
    # the XLA path does, forward, with the residual step, and for dx
    x = jax.random.normal(jax.random.key(1), (6, 300), jnp.float32).astype(jnp.float16)
    r = (0.5 * jax.random.normal(jax.random.key(2), (6, 300), jnp.float32)).astype(jnp.float16)
    for scale in (1e-7, 3e-6, 4e-5):
        w = jnp.full((300,), scale, jnp.float16)
        outs = {}
        for impl in ("native", "xla"):
            y = jln.layer_norm(x, w, impl=impl)
            z, s = jln.add_rms_norm(x, r, w, impl=impl)
            dx = jax.grad(lambda x, impl=impl, w=w: jnp.sum(jln.layer_norm(x, w, impl=impl).astype(jnp.float32) ** 2))(x)
            outs[impl] = [np.asarray(a.astype(jnp.float32)) for a in (y, z, s, dx)]
        tiny = np.abs(outs["xla"][0])
        assert np.mean((tiny > 0) & (tiny < 2.0**-14)) > 0.3, scale  # the case is the subnormal one
        for a, c in zip(outs["native"], outs["xla"], strict=True):
            same = float(np.mean(a == c))
            assert same >= 0.98, f"scale {scale}: only {same:.1%} of the elements equal the XLA path's"
