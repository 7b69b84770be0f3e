"""Gradients and transformations: residual budget, jit/vmap/grad/jvp/jacfwd/checkpoint/scan."""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

import jln
from jln import _index

from ._residuals import residual_bytes_per_element, saved_residuals

M, N = 64, 512


def _ops():
    w = jnp.linspace(0.5, 1.5, N)
    b = jnp.linspace(-0.2, 0.2, N)
    emb = jnp.asarray(np.random.default_rng(3).standard_normal((M // 16, 6 * N)) * 0.1, jnp.float32)
    return {
        "layer_norm": lambda x: jln.layer_norm(x, w, b),
        "rms_norm": lambda x: jln.rms_norm(x, w),
        "rms_norm[llama]": lambda x: jln.rms_norm(x, w.astype(x.dtype), convention="llama"),
        "rms_norm[gemma]": lambda x: jln.rms_norm(x, w, convention="gemma"),
        "rms_norm[seed]": lambda x: jln.rms_norm(x, w.astype(x.dtype), convention="seed"),
        "add_layer_norm": lambda x: jln.add_layer_norm(x, x, w, b)[0],
        "add_rms_norm": lambda x: jln.add_rms_norm(x, x, w)[0],
        # DiT: x [B, T, D] with a per-example condition [B, 6D]
        "adaptive_layer_norm[dit]": lambda x: jln.adaptive_layer_norm(
            x.reshape(M // 16, 16, N), emb.astype(x.dtype), order="dit"
        )[0].reshape(M, N),
    }


OPS = _ops()


@pytest.mark.parametrize("name", sorted(OPS))
def test_residual_budget_bf16(name):
    """Reverse mode keeps x (2 B/elem in bf16) + per-row stats + per-feature params only."""
    x = jnp.ones((M, N), jnp.bfloat16)
    per_elem = residual_bytes_per_element(OPS[name], x)
    big = [r for r in saved_residuals(OPS[name], x) if np.prod(r.shape) >= M * N]
    assert [r.dtype for r in big] == ["bf16"], big  # the only full-size residual is x itself
    # 2 B for x, 8 B per row for mean/rstd, a few B per feature for params (and the DiT
    # condition, which is per example)
    assert per_elem <= 2 + 8 / N + 4 * 6 * 2 / M + 0.01, per_elem


def test_flax_keeps_six_times_more():
    x = jnp.ones((M, N), jnp.bfloat16)
    m = nn.LayerNorm()
    with jax.numpy_dtype_promotion("standard"):  # flax mixes bf16 and f32 implicitly
        v = m.init(jax.random.key(0), x)
        flax_b = residual_bytes_per_element(lambda x: m.apply(v, x), x)
    jln_b = residual_bytes_per_element(lambda x: jln.layer_norm(x, v["params"]["scale"], v["params"]["bias"]), x)
    assert flax_b > 11.5 and jln_b < 2.1, (flax_b, jln_b)  # measured: 12.03 vs 2.02


@pytest.mark.parametrize("name", sorted(OPS))
@pytest.mark.slow
def test_check_grads_order_2(name):
    with jax.enable_x64(True):
        f = _ops()[name]
        x = jnp.asarray(np.random.default_rng(0).standard_normal((3, N)) * 2 + 1, jnp.float64)
        if "dit" in name:
            emb = jnp.asarray(np.random.default_rng(3).standard_normal((3, 6 * N)) * 0.1)
            f = lambda x: jln.adaptive_layer_norm(x, emb, order="dit")[0]  # noqa: E731
        elif "llama" in name or "seed" in name:
            w = jnp.linspace(0.5, 1.5, N)
            f = lambda x: jln.rms_norm(x, w, convention=name[9:-1])  # noqa: E731
        check_grads(f, (x,), order=2, modes=("fwd", "rev"), atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("name", sorted(OPS))
def test_transformations_agree(name):
    f = OPS[name]
    x = jnp.asarray(np.random.default_rng(1).standard_normal((M, N)), jnp.float32)
    y = f(x)
    np.testing.assert_allclose(jax.jit(f)(x), y, rtol=1e-6, atol=1e-6)
    if "dit" not in name:  # the DiT condition is per example; vmap over rows would not map it
        np.testing.assert_allclose(jax.vmap(lambda r: f(r[None])[0])(x), y, rtol=1e-6, atol=1e-6)
    # reverse = forward mode = jacfwd on one row
    t = jnp.asarray(np.random.default_rng(2).standard_normal((M, N)), jnp.float32)
    loss = lambda x: jnp.sum(f(x) * t)  # noqa: E731
    g_rev = jax.grad(loss)(x)
    _, g_dir = jax.jvp(loss, (x,), (t,))
    np.testing.assert_allclose(jnp.sum(g_rev * t), g_dir, rtol=2e-4)
    g_ckpt = jax.grad(jax.checkpoint(loss))(x)
    np.testing.assert_allclose(g_ckpt, g_rev, rtol=1e-5, atol=1e-6)


def test_jacfwd_equals_jacrev_and_grad_of_grad():
    x = jnp.asarray([[2.0, -1.0, 3.0, 0.0]])
    for f in (jln.layer_norm, jln.rms_norm, lambda x: jln.rms_norm(x, convention="gemma")):
        np.testing.assert_allclose(jax.jacfwd(f)(x), jax.jacrev(f)(x), rtol=1e-5, atol=1e-6)
        hess = jax.hessian(lambda x, f=f: jnp.sum(f(x) ** 3))(x)
        assert np.isfinite(np.asarray(hess)).all()
    # LayerNorm's Jacobian annihilates constants: d/dc LN(x + c) = 0
    j = jax.jacfwd(jln.layer_norm)(x)[0, :, 0, :]
    np.testing.assert_allclose(j.sum(axis=1), 0, atol=1e-6)


def test_scan_over_layers_with_params():
    L = 4
    ws = jnp.linspace(0.8, 1.2, L * N).reshape(L, N)
    x = jnp.asarray(np.random.default_rng(0).standard_normal((8, N)), jnp.float32)

    def step(h, w):
        y, s = jln.add_rms_norm(jnp.tanh(h), h, w)
        return s + 0.1 * y, None

    def loss(ws, x):
        return jnp.sum(jax.lax.scan(step, x, ws)[0] ** 2)

    def loop_loss(ws, x):
        h = x
        for i in range(L):
            h, _ = step(h, ws[i])
        return jnp.sum(h**2)

    g_scan = jax.grad(loss)(ws, x)
    g_loop = jax.grad(loop_loss)(ws, x)
    np.testing.assert_allclose(g_scan, g_loop, rtol=1e-5, atol=1e-5)


def test_one_trace_per_shape():
    traces = []

    @jax.jit
    def f(x):
        traces.append(x.shape)
        return jln.layer_norm(x)

    for _ in range(3):
        f(jnp.ones((4, 8)))
    f(jnp.ones((4, 16)))
    assert traces == [(4, 8), (4, 16)]


# Second order through lax.scan: JAX linearizes a scan's body without the kernels' custom_jvp
# (the forward's known part keeps the kernel call itself), so a Hessian-vector product or a
# Hessian of scanned layers differentiates the kernel calls directly. Held to the XLA path.
_SCAN_OPS = {
    "layer_norm": lambda h, w, impl: jln.layer_norm(h, w, w, impl=impl),
    "add_rms_norm": lambda h, w, impl: sum(jln.add_rms_norm(h, jnp.tanh(h), w, impl=impl)),
    "adaptive_layer_norm": lambda h, w, impl: jln.adaptive_layer_norm(
        h, jnp.concatenate([w, w]) * 0.1, w, w, impl=impl)[0],
}


def _native_missing() -> str | None:
    from jln.kernels import _cpu

    return "not a CPU backend" if jax.default_backend() != "cpu" else _cpu.available()


def _scanned_loss(op: str, impl: str):  # noqa: ANN202
    def loss(ws, x):  # noqa: ANN001, ANN202
        h, _ = jax.lax.scan(lambda h, w: (h + jnp.sin(_SCAN_OPS[op](h, w, impl)), None), x, ws)
        return jnp.sum(h**2)

    return loss


@pytest.mark.parametrize("impl", ["native", "pallas"])
@pytest.mark.parametrize("op", sorted(_SCAN_OPS))
@pytest.mark.slow
def test_second_order_through_scan(op, impl):
    if impl == "native" and _native_missing():
        pytest.skip(_native_missing())
    x = jnp.asarray(np.random.default_rng(0).standard_normal((4, 16)), jnp.float32)
    ws = jnp.linspace(0.8, 1.2, 2 * 16).reshape(2, 16)
    got, want = _scanned_loss(op, impl), _scanned_loss(op, "xla")
    for name, f in {
        "hvp": lambda loss: jax.jvp(lambda w: jax.grad(loss)(w, x), (ws,), (jnp.ones_like(ws),))[1],
        "hvp wrt x": lambda loss: jax.jvp(lambda x: jax.grad(loss, 1)(ws, x), (x,), (x,))[1],
        "hessian": lambda loss: jax.hessian(loss)(ws, x),
    }.items():
        a, b = f(got), f(want)
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-4 * float(jnp.max(jnp.abs(b))), err_msg=name)


@pytest.mark.parametrize("impl", ["native", "pallas"])
@pytest.mark.slow
def test_third_order_through_scan(impl):
    # reverse over reverse over reverse, and forward over that: every kernel call met without
    # its custom_jvp has the rules itself
    if impl == "native" and _native_missing():
        pytest.skip(_native_missing())
    x = jnp.asarray(np.random.default_rng(1).standard_normal((4, 16)), jnp.float32)
    ws = jnp.linspace(0.8, 1.2, 2 * 16).reshape(2, 16)
    for op in ("layer_norm", "add_rms_norm"):
        outs = []
        for impl_ in (impl, "xla"):
            loss = _scanned_loss(op, impl_)
            g2 = lambda w, loss=loss: jnp.sum(jax.grad(loss)(w, x) ** 2)  # noqa: E731
            g3 = lambda w, g2=g2: jnp.sum(jax.grad(g2)(w) ** 2)  # noqa: E731
            outs.append((jax.grad(g2)(ws), jax.grad(g3)(ws), jax.jacfwd(jax.grad(g2))(ws)))
        for a, b in zip(outs[0], outs[1], strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-3 * float(jnp.max(jnp.abs(b))), err_msg=op)


@pytest.mark.parametrize("name", ["rms_norm", "layer_norm", "gated_rms_norm", "batch_norm"])
def test_grad_of_jit_of_vmap_with_axis_name(name: str) -> None:
    # the vmap lanes hold the blocks of one row (of one batch for batch_norm): the gradient of
    # the mapped call is that of the whole, unmapped; grad(jit(vmap(..., axis_name))) raised
    # NameError (the derivative rule traced where the vmap's axis was unbound)
    import functools

    x = jnp.arange(48.0).reshape(4, 12) / 7 - 3
    ct = jnp.cos(jnp.arange(48.0)).reshape(4, 12)
    if name == "batch_norm":
        def mapped(v):  # each lane: a block of 3 of the 12 samples, channels last
            return jln.batch_norm(v.reshape(3, 1), training=True, channel_axis=-1, axis_name="i")[0].reshape(3)

        def whole(v):
            return jln.batch_norm(v.reshape(-1, 1), training=True, channel_axis=-1)[0].reshape(v.shape)

        x, ct = x.reshape(16, 3), ct.reshape(16, 3)
    else:
        fn = getattr(jln, name)
        mapped = functools.partial(fn, axis=-1, axis_name="i")

        def whole(v):
            return fn(v, axis=(0, 1))

    f = jax.jit(jax.vmap(mapped, axis_name="i"))
    got = jax.grad(lambda v: jnp.sum(f(v) * ct))(x)
    want = jax.grad(lambda v: jnp.sum(whole(v) * ct))(x)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)


def _reductions(jaxpr: Any, out: list[tuple[tuple[int, ...], tuple[int, ...]]]) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """``(operand shape, axes)`` of every reduction in ``jaxpr`` and its sub-jaxprs."""
    for e in jaxpr.eqns:
        if e.primitive.name in ("reduce_sum", "reduce_max", "reduce_min"):
            out.append((tuple(e.invars[0].aval.shape), tuple(e.params["axes"])))
        for p in e.params.values():
            for q in p if isinstance(p, (list, tuple)) else (p,):
                inner = getattr(q, "jaxpr", q)
                if hasattr(inner, "eqns"):
                    _reductions(inner, out)
    return out


def _unit_axis_ops() -> list[Any]:
    """Every op through a spec's body; the first of each family by default, the rest slow."""
    seen: set[str] = set()
    params = []
    for op in _index.OPS:
        if op.fn.spec is None or op.fn.min_rank > 2:
            continue
        marks = (pytest.mark.slow,) if op.family in seen else ()
        seen.add(op.family)
        params.append(pytest.param(op.name, marks=marks, id=op.name))
    return params


@pytest.mark.parametrize("name", _unit_axis_ops())
def test_unit_axes_among_the_rows_are_dropped_before_the_body(name: str) -> None:
    # XLA:CPU's reverse mode is several times slower with a size-1 axis among the rows
    # ((B, 1, D)): the body drops it, so no reduction sees an axis of size 1 it keeps, and the
    # numbers are those of the (B, D) call
    op = _index.BY_NAME[name]
    inputs = op.make_inputs((6, 40), 1, "float32")
    unit = {n: v[:, None] if v.shape[:1] == (6,) else v for n, v in inputs.items()}
    y2 = op.call_jln(inputs, 1, impl="xla")
    y3 = op.call_jln(unit, 1, impl="xla")
    for a, b in zip(y2, y3, strict=True):
        if a is None:
            continue
        assert b.shape[:2] == (6, 1) and np.array_equal(np.asarray(b).reshape(a.shape), np.asarray(a))
    names = list(unit)

    def loss(*arrays: jax.Array) -> jax.Array:
        outs = op.call_jln(dict(zip(names, arrays, strict=True)), 1, impl="xla")
        return sum(jnp.vdot(o, o) for o in outs if o is not None and o.ndim == 3)

    args = [jnp.asarray(v) for v in unit.values()]
    jaxpr = jax.make_jaxpr(jax.grad(loss, argnums=tuple(range(len(args)))))(*args).jaxpr
    kept_unit = [(s, ax) for s, ax in _reductions(jaxpr, []) if any(n == 1 and i not in ax for i, n in enumerate(s))]
    assert not kept_unit, f"{name}: reductions over an operand with a kept unit axis: {kept_unit}"
