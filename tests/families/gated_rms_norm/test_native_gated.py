"""The native CPU kernels of gated RMSNorm (``cpu_gated.cc``): forward and backward against the XLA
path in every convention, gate order, activation and grouping; special gate values; transforms;
what reverse mode keeps; dispatch and refusals. Against torch, the registry's
``gated_rms_norm[*]`` entries (tests/test_parity_torch.py) and tests/families/gated_rms_norm/test_gated_rms_norm.py run with
``impl="auto"``, which takes these kernels on a CPU once they are built.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jln
from jln.kernels import _cpu
from tests import _residuals
from tests.test_native import _close, _mostly_bit_identical

pytestmark = pytest.mark.skipif(
    jax.default_backend() != "cpu" or _cpu.available() is not None,
    reason=f"native CPU kernels not available here: {_cpu.available() if jax.default_backend() == 'cpu' else 'not a CPU backend'}",
)

Array = jax.Array
DTYPES = (jnp.float32, jnp.bfloat16, jnp.float16)
# (convention, gate first, group_size, activation): every flag of the kernel, each convention
# in both gate orders, groups whose width is not a multiple of the 16-lane vectors
CASES = [
    *((conv, first, None, "silu") for conv, first in itertools.product(("mamba", "qwen3_next", "float32"), (True, False))),
    ("mamba", True, 24, "silu"), ("qwen3_next", False, 24, "sigmoid"), ("float32", True, 8, "sigmoid"),
    ("float32", False, None, "sigmoid"),
]


def _inputs(dt: Any, shape: tuple[int, ...] = (3, 5, 96), wdt: Any = None) -> tuple[Array, ...]:
    k = jax.random.split(jax.random.key(11), 4)
    x = (jax.random.normal(k[0], shape, jnp.float32) * 1.5 + 0.3).astype(dt)
    z = (jax.random.normal(k[1], shape, jnp.float32) * 3.0).astype(dt)
    w = (1.0 + 0.3 * jax.random.normal(k[2], shape[-1:], jnp.float32)).astype(wdt or dt)
    ct = jax.random.normal(k[3], shape, jnp.float32)
    return x, z, w, ct


def _call(case: tuple[Any, ...]) -> Callable[..., Array]:
    conv, first, gs, act = case
    return lambda x, z, w, impl: jln.gated_rms_norm(x, z, w, convention=conv, norm_before_gate=not first,
                                                    group_size=gs, activation=act, impl=impl)


def _name(case: tuple[Any, ...], dt: Any) -> str:
    return f"{case} {jnp.dtype(dt).name}"


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: jnp.dtype(d).name)
def test_forward_matches_xla_path(dt: Any) -> None:
    # (a float32 weight with a half x: mamba's output is float32, the others round to x's dtype)
    for wdt in (None, jnp.float32):
        x, z, w, _ = _inputs(dt, wdt=wdt)
        for case in CASES:
            f = jax.jit(_call(case), static_argnums=3)
            y_native, y_xla = f(x, z, w, "native"), f(x, z, w, "xla")
            # float32: the gate's exp is the kernel's own, an ulp or two from XLA's
            _close(y_native, y_xla, _name(case, dt), rel_ulps=8)
            _mostly_bit_identical(y_native, y_xla, _name(case, dt), at_least=0.999)


@pytest.mark.parametrize("dt", DTYPES, ids=lambda d: jnp.dtype(d).name)
def test_backward_matches_xla_path(dt: Any) -> None:
    x, z, w, ct = _inputs(dt)
    for case in CASES:
        f = _call(case)

        def vjp(impl: str, f: Callable[..., Array] = f) -> tuple[Array, ...]:
            y, pull = jax.vjp(lambda x, z, w: f(x, z, w, impl), x, z, w)
            return pull(ct.astype(y.dtype))

        got, want = jax.jit(vjp, static_argnums=0)("native"), jax.jit(vjp, static_argnums=0)("xla")
        for g, c, arg in zip(got, want, ("dx", "dgate", "dscale"), strict=True):
            what = f"{_name(case, dt)} {arg}"
            _close(g, c, what, rel_ulps=16 if dt == jnp.float32 else 2)
            _mostly_bit_identical(g, c, what)


def test_no_gate_and_no_weight_match_xla_path() -> None:
    x, _, w, ct = _inputs(jnp.bfloat16)
    for conv in ("mamba", "qwen3_next", "float32"):
        for args in ((None, w), (None, None)):
            def f(x: Array, impl: str, args: tuple[Any, ...] = args, conv: str = conv) -> Array:
                return jln.gated_rms_norm(x, *args, convention=conv, impl=impl)

            assert bool(jnp.all(f(x, "native") == f(x, "xla"))), (conv, args[1] is None)
            dn, dx = (jax.grad(lambda x, i=i: jnp.vdot(ct, f(x, i).astype(jnp.float32)))(x) for i in ("native", "xla"))
            _mostly_bit_identical(dn, dx, f"{conv} no gate dx")


def test_special_gate_values_propagate_like_xla() -> None:
    # exp(-z) overflowing (z < -88) and underflowing, infinite and NaN gates: NaN where the XLA
    # path (and torch) has it, the same finite values elsewhere, finite gradients where XLA's are
    x = jnp.asarray(np.random.default_rng(0).standard_normal((6, 40)), jnp.float32)
    z = np.tile(np.array([-1e4, -100.0, -88.5, -20.0, 0.0, 20.0, 88.5, 89.5, 100.0, 1e4], np.float32), (6, 4))
    z[1, 3], z[2, 5], z[3, 7] = np.nan, np.inf, -np.inf
    z = jnp.asarray(z)
    for first, act in itertools.product((True, False), ("silu", "sigmoid")):
        def f(x: Array, z: Array, impl: str, first: bool = first, act: str = act) -> Array:
            return jln.gated_rms_norm(x, z, norm_before_gate=not first, activation=act, impl=impl)

        a, c = np.asarray(f(x, z, "native")), np.asarray(f(x, z, "xla"))
        np.testing.assert_array_equal(np.isnan(a), np.isnan(c), err_msg=f"{first} {act}")
        np.testing.assert_allclose(a[~np.isnan(a)], c[~np.isnan(c)], rtol=1e-6, atol=1e-6, err_msg=f"{first} {act}")
        rows = slice(4, 6)  # the rows without special values: finite gradients on both paths
        gn, gx = (jax.grad(lambda x, z, i=i: f(x, z, i).sum(), (0, 1))(x[rows], z[rows]) for i in ("native", "xla"))
        for p, q in zip(gn, gx, strict=True):
            assert bool(jnp.all(jnp.isfinite(p))) and bool(jnp.all(jnp.isfinite(q)))
            _close(p, q, f"{first} {act} gradient", rel_ulps=16)


def test_infinite_gate_matches_torch() -> None:
    # silu(+inf) is +inf in torch: a gate-first row of x * inf has rstd 0 (zeros, NaN where x * inf)
    torch = pytest.importorskip("torch")
    x = np.array([[0.5, -1.0, 2.0, 0.25]], np.float32)
    z = np.array([[np.inf, 1.0, -1.0, 3.0]], np.float32)
    v = torch.from_numpy(x) * torch.nn.functional.silu(torch.from_numpy(z))
    want = (v * torch.rsqrt(v.pow(2).mean(-1, keepdim=True) + 1e-6)).numpy()
    for impl in ("native", "xla"):
        got = np.asarray(jln.gated_rms_norm(jnp.asarray(x), jnp.asarray(z), impl=impl))
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=impl)
        np.testing.assert_array_equal(got[~np.isnan(got)], want[~np.isnan(want)], err_msg=impl)


def test_transforms_match_xla_path() -> None:
    k = jax.random.split(jax.random.key(5), 3)
    X = jax.random.normal(k[0], (3, 4, 64))
    Z = jax.random.normal(k[1], (3, 4, 64))
    W = 1.0 + 0.1 * jax.random.normal(k[2], (3, 64))  # one weight per example under vmap

    def f(impl: str) -> Callable[..., Array]:
        return lambda x, z, w: jln.gated_rms_norm(x, z, w, group_size=16, impl=impl)

    progs: dict[str, Callable[[str], Any]] = {
        "vmap": lambda i: jax.jit(jax.vmap(f(i)))(X, Z, W),
        "grad(vmap)": lambda i: jax.grad(lambda X, Z, W: (jax.vmap(f(i))(X, Z, W) ** 2).sum(), (0, 1, 2))(X, Z, W),
        "jvp": lambda i: jax.jvp(lambda x: f(i)(x, Z[0], W[0]), (X[0],), (Z[0],)),
        "grad of grad": lambda i: jax.grad(lambda x: jax.grad(lambda x: (f(i)(x, Z[0], W[0]) ** 3).sum())(x).sum())(X[0]),
        "scan": lambda i: jax.grad(lambda x: jax.lax.scan(lambda c, zw: (f(i)(c, *zw), None), x, (Z, W))[0].sum())(X[0]),
    }
    for name, prog in progs.items():
        for got, want in zip(jax.tree.leaves(prog("native")), jax.tree.leaves(prog("xla")), strict=True):
            scale = max(1.0, float(jnp.max(jnp.abs(want))))
            assert float(jnp.max(jnp.abs(got - want))) <= 2e-5 * scale, name


def test_auto_takes_the_kernels_and_export_the_xla_body() -> None:
    x, z, w, ct = _inputs(jnp.bfloat16, (4, 64))
    fwd = jax.jit(lambda x, z: jln.gated_rms_norm(x, z, w))
    grad = jax.jit(jax.grad(lambda x, z: jnp.vdot(ct, jln.gated_rms_norm(x, z, w).astype(jnp.float32)), (0, 1)))
    assert "custom_call @jln_cpu_gated_fwd" in fwd.lower(x, z).as_text()
    assert "custom_call @jln_cpu_gated_bwd" in grad.lower(x, z).as_text()
    # a gate in another dtype than x: auto takes the XLA path
    assert "custom_call" not in jax.jit(lambda x, z: jln.gated_rms_norm(x, z, w)).lower(x, z.astype(jnp.float32)).as_text()
    # jax.export lowers the kernels to the XLA body they implement
    exported = jax.export.export(fwd)(x, z)
    assert "custom_call" not in exported.mlir_module()
    assert bool(jnp.all(exported.call(x, z) == jln.gated_rms_norm(x, z, w, impl="xla")))


@pytest.mark.parametrize(
    "call, why",
    [
        (lambda x: jln.gated_rms_norm(x, x.astype(jnp.bfloat16), impl="native"), "gate in x's dtype"),
        (lambda x: jln.gated_rms_norm(x.astype(jnp.float64), x.astype(jnp.float64), impl="native"), "float64"),
        (lambda x: jln.gated_rms_norm(x, x, axis=0, impl="native"), "trailing axes"),
    ],
)
def test_native_refuses_what_it_does_not_cover(call: Callable[[Array], Any], why: str) -> None:
    x = jnp.ones((4, 8), jnp.float32)
    with jax.enable_x64(True), pytest.raises(ValueError, match=why):
        call(x)


def test_residuals_are_x_the_gate_and_group_statistics() -> None:
    x = jnp.ones((64, 256), jnp.bfloat16)
    w = jnp.ones((256,), jnp.bfloat16)
    per_elem = _residuals.residual_bytes_per_element(
        lambda x, z, w: jln.gated_rms_norm(x, z, w, group_size=64, impl="native"), x, x, w)
    # x and the gate (2 B each), a float32 rstd per group of 64, the float32 weight copy
    assert 4.0 <= per_elem <= 4.0 + 4 / 64 + 4 * 256 / x.size + 1e-9, per_elem


def test_threaded_chunks_are_deterministic() -> None:
    # enough rows for several chunks on the intra-op pool: each row is computed alone, and the
    # weight's gradient sums the chunks' float64 partials
    x, z, w, ct = _inputs(jnp.float32, (1024, 384))
    g = jax.jit(jax.grad(lambda x, z, w: jnp.vdot(ct, jln.gated_rms_norm(x, z, w, impl="native")), (0, 1, 2)))
    first, again = g(x, z, w), g(x, z, w)
    for a, b in zip(first, again, strict=True):
        assert bool(jnp.all(a == b))
    want = jax.jit(jax.grad(lambda x, z, w: jnp.vdot(ct, jln.gated_rms_norm(x, z, w, impl="xla")), (0, 1, 2)))(x, z, w)
    for a, b, arg in zip(first, want, ("dx", "dgate", "dscale"), strict=True):
        _close(a, b, arg, rel_ulps=64)
