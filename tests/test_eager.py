"""Eager calls run compiled whole (jln._eager): the numbers of the same call jitted, the same
errors as op by op, and the kernel choice of the platform the input lives on."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jln
from jln import _dispatch, _platform

DTYPES = (jnp.float32, jnp.bfloat16, jnp.float16)


def _arrays(shape: tuple[int, ...], dtype: Any, seed: int) -> list[jax.Array]:
    rng = np.random.default_rng(seed)
    return [jnp.asarray(rng.standard_normal(shape) * 3 + 1, dtype) for _ in range(3)]


def _calls(dtype: Any, impl: str) -> dict[str, tuple[Any, tuple[Any, ...], dict[str, Any]]]:
    x, r, e = _arrays((4, 5, 48), dtype, 0)
    w, b = (jnp.asarray(np.random.default_rng(1).standard_normal(48), dtype) for _ in range(2))
    emb = jnp.asarray(np.random.default_rng(2).standard_normal((4, 96)), dtype)
    return {
        "layer_norm": (jln.layer_norm, (x, w, b), dict(impl=impl)),
        "layer_norm_2axes": (jln.layer_norm, (x,), dict(axis=(-2, -1), eps=1e-3, impl=impl)),
        "rms_norm_llama": (jln.rms_norm, (x, w), dict(convention="llama", impl=impl)),
        "rms_norm_gemma": (jln.rms_norm, (x, w), dict(convention="gemma", impl=impl)),
        "add_layer_norm": (jln.add_layer_norm, (x, r, w, b), dict(impl=impl)),
        "add_layer_norm_fp32": (jln.add_layer_norm, (x, r, w, b), dict(residual_in_fp32=True, impl=impl)),
        "add_rms_norm": (jln.add_rms_norm, (x, r, w), dict(impl=impl)),
        "adaptive_layer_norm": (jln.adaptive_layer_norm, (x, emb, w, b), dict(impl=impl)),
        "modulate": (jln.modulate, (x, e[:, 0, :], e[:, 1, :]), {}),
    }


def test_is_traced_tells_tracers_from_arrays() -> None:
    # (the concrete type first asked for while tracing, as a first eager call inside jit would)
    _platform._array_type.cache_clear()
    seen: list[bool] = []
    x = jnp.ones(3)
    jax.jit(lambda v: seen.append(_platform.is_traced(v)) or v)(x)
    jax.grad(lambda v: seen.append(_platform.is_traced(v)) or v.sum())(x)
    assert seen == [True, True]
    assert not _platform.is_traced(x) and not _platform.is_traced(np.ones(3)) and not _platform.is_traced(1.0)


@pytest.mark.parametrize("impl", ["auto", "xla"])
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: jnp.dtype(d).name)
@pytest.mark.slow
def test_compiled_eager_call_is_the_jitted_call(dtype: Any, impl: str) -> None:
    # each public function called eagerly gives, bit for bit, what the same call gives under a
    # user's jax.jit (the numbers a parity test sees eagerly are the ones a jitted model runs);
    # against the function run op by op it differs at most in the last bits, where XLA fuses a
    # multiply and an add into one rounding or orders a float32 sum otherwise
    eps = float(jnp.finfo(dtype).eps)
    for name, (fn, args, kwargs) in _calls(dtype, impl).items():
        got = fn(*args, **kwargs)
        jitted = jax.jit(lambda *a, fn=fn, kwargs=kwargs: fn(*a, **kwargs))(*args)
        op_by_op = fn.__wrapped__(*args, **kwargs)
        assert jax.tree.structure(got) == jax.tree.structure(jitted) == jax.tree.structure(op_by_op), name
        for g, j, o in zip(jax.tree.leaves(got), jax.tree.leaves(jitted), jax.tree.leaves(op_by_op), strict=True):
            assert g.dtype == j.dtype == o.dtype and g.shape == j.shape == o.shape, name
            assert np.array_equal(np.asarray(g).view(np.uint8), np.asarray(j).view(np.uint8)), name
            o64 = np.asarray(o, np.float64)
            np.testing.assert_allclose(np.asarray(g, np.float64), o64, rtol=2 * eps,
                                       atol=8 * eps * np.abs(o64).max(), err_msg=name)


def test_eager_call_is_traced_once_with_the_arrays_platform(monkeypatch: pytest.MonkeyPatch) -> None:
    # an eager call runs as one jitted program: the dispatch sees tracers, and takes the platform
    # of the array (not the default backend); a second call with the same shapes and static
    # arguments reuses the program (nothing is traced again)
    seen: list[tuple[bool, str, str | None]] = []
    choose = _dispatch.choose

    def spy(fn: str, impl: str, spec: Any, x: Any, *args: Any) -> str:
        seen.append((_platform.is_traced(x), _platform.platform_of(x), _platform.traced_platform()))
        return choose(fn, impl, spec, x, *args)

    monkeypatch.setattr(_dispatch, "choose", spy)
    x = jax.device_put(jnp.ones((3, 7, 40), jnp.float32), jax.devices("cpu")[0])  # a shape no other test uses
    y = jln.layer_norm(x, eps=0.125)
    assert seen == [(True, "cpu", "cpu")]
    jln.layer_norm(x + 1, eps=0.125)
    assert seen == [(True, "cpu", "cpu")]  # cached
    jln.layer_norm(x, eps=0.25)
    assert len(seen) == 2  # another static argument: traced again
    assert _platform.traced_platform() is None  # reset after tracing
    np.testing.assert_allclose(np.asarray(y), 0.0, atol=1e-6)


def test_eager_calls_that_stay_op_by_op_still_work(monkeypatch: pytest.MonkeyPatch) -> None:
    # under jit (tracers), with an unhashable argument (a list for order) or an array where a
    # static argument goes (eps as a JAX scalar), the call runs op by op, with the same result
    x, emb = _arrays((2, 3, 16), jnp.float32, 3)[0], _arrays((2, 32), jnp.float32, 4)[0]
    traced: list[bool] = []
    choose = _dispatch.choose
    monkeypatch.setattr(_dispatch, "choose", lambda fn, impl, spec, x, *a: traced.append(
        _platform.is_traced(x)) or choose(fn, impl, spec, x, *a))
    want = jln.layer_norm(x, eps=0.125)
    traced.clear()
    got = jln.layer_norm(x, eps=jnp.float32(0.125))
    assert traced == [False]  # op by op
    # (the compiled XLA path fuses what op by op rounds: 1 float32 ulp apart on some elements)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2.5e-7, atol=2.5e-7)
    y_list, _ = jln.adaptive_layer_norm(x, emb, order=["scale", "shift"])
    y_tuple, _ = jln.adaptive_layer_norm(x, emb, order=("scale", "shift"))
    np.testing.assert_allclose(np.asarray(y_list), np.asarray(y_tuple), rtol=2.5e-7, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(jax.jit(jln.layer_norm)(x)), np.asarray(jln.layer_norm(x)))


@pytest.mark.parametrize(
    "call",
    [
        lambda x: jln.layer_norm(x, jnp.ones((5,))),
        lambda x: jln.layer_norm(x, eps=-1.0),
        lambda x: jln.layer_norm(x.astype(jnp.int32)),
        lambda x: jln.rms_norm(x, convention="nope"),
        lambda x: jln.add_rms_norm(x, x[:, :4]),
        lambda x: jln.layer_norm(x, axis_name="model"),
        lambda x: jln.layer_norm(x, impl="cuda"),
        lambda x: jln.layer_norm(x, None, None, 1e-5),  # eps is keyword-only
        lambda x: jln.layer_norm(x, epsilon=1e-5),
        lambda x: jln.layer_norm(x, x=x),
    ],
)
def test_eager_errors_are_the_op_by_op_errors(call: Any) -> None:
    # the checks run while tracing: the same exception type and message as op by op
    x = jnp.ones((2, 8), jnp.float32)
    with pytest.raises(Exception) as compiled:
        call(x)

    def unwrapped(x: Any) -> Any:
        saved = {f: getattr(jln, f) for f in ("layer_norm", "rms_norm", "add_rms_norm")}
        try:
            for f, g in saved.items():
                setattr(jln, f, g.__wrapped__)
            return call(x)
        finally:
            for f, g in saved.items():
                setattr(jln, f, g)

    with pytest.raises(Exception) as op_by_op:
        unwrapped(x)
    assert type(compiled.value) is type(op_by_op.value)
    assert str(compiled.value) == str(op_by_op.value)
    assert isinstance(compiled.value, (TypeError, ValueError, NameError))


def test_eager_cache_tells_options_of_other_types_apart() -> None:
    # True == 1 == 1.0 share a hash: a cached eps=1.0 program must not serve eps=True, which
    # the checks refuse, nor an integer axis serve a bool one
    x = jnp.arange(8.0).reshape(2, 4)
    jln.layer_norm(x, eps=1.0)
    with pytest.raises(TypeError, match="eps"):
        jln.layer_norm(x, eps=True)
    jln.layer_norm(x, axis=1)
    with pytest.raises(TypeError, match="axis"):
        jln.layer_norm(x, axis=True)
