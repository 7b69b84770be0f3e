"""Helpers shared by jln's tests: float64 scoping and forward/backward against torch."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jln import _compare, _index, _registry
from jln.families.layer_norm.spec import ALIASES as LN_ALIASES
from jln.families.layer_norm.spec import LayerNormSpec
from jln.families.rms_norm.spec import ALIASES as RMS_ALIASES
from jln.families.rms_norm.spec import XLA_ONLY, RMSNormSpec


@contextlib.contextmanager
def x64_if(dtype: str) -> Iterator[None]:
    """Enable float64 for the block when ``dtype`` is float64."""
    if dtype == "float64":
        with jax.enable_x64(True):
            yield
    else:
        yield


def cotangent(shape: tuple[int, ...], dtype: Any, seed: int = 1) -> np.ndarray:
    """A random cotangent rounded to ``dtype`` (NumPy, bf16 as ml_dtypes)."""
    g = np.random.default_rng(seed).standard_normal(shape)
    dt = np.dtype(jnp.dtype(dtype))
    return g.astype(np.float64) if dt == np.float64 else g.astype(np.float32).astype(dt)


def jln_vjp(op: _registry.Op, inputs: dict[str, np.ndarray], k: int, grads_of: tuple[str, ...], cts: list[np.ndarray],
            **overrides: Any) -> dict[str, Any]:
    """Gradients of ``sum(out_i * ct_i)`` w.r.t. the named inputs, through jln."""
    fixed = {n: jnp.asarray(v) for n, v in inputs.items() if n not in grads_of}

    def f(*arrays: Any) -> tuple[Any, ...]:
        return op.call_jln({**fixed, **dict(zip(grads_of, arrays, strict=True))}, k, **overrides)

    outs, vjp = jax.vjp(f, *[jnp.asarray(inputs[n]) for n in grads_of])
    grads = vjp(tuple(jnp.asarray(c).astype(o.dtype) for c, o in zip(cts, outs, strict=True)))
    return dict(zip(grads_of, grads, strict=True))


def torch_vjp(op: _registry.Op, tensors: dict[str, Any], k: int, grads_of: tuple[str, ...], cts: list[np.ndarray]) -> dict[str, Any]:
    """The same gradients through the torch reference (autograd)."""
    import torch

    leaves = {n: t.detach().clone().requires_grad_(n in grads_of) for n, t in tensors.items()}
    outs = op.call_torch(leaves, k)
    total = sum((o * torch.from_numpy(np.asarray(c, np.float64)).to(o.dtype)).sum() for o, c in zip(outs, cts, strict=True))
    total.backward()
    return {n: leaves[n].grad for n in grads_of}


def check(jln_out: Any, torch_out: Any, ref64: Any, *, exact: bool = False, what: str = "", atol: float | None = None) -> _compare.Report:
    """Assert the parity rule for one output; return the report."""
    rep = _compare.compare(jln_out, torch_out, ref64, exact=exact, atol=atol)
    assert rep.passed, f"{what}: {rep}"
    return rep


def kernel_ops() -> list[_registry.Op]:
    """``jln parity``'s ops that the Pallas kernels compute (their families' ``pallas`` flag):
    LayerNorm and RMSNorm (with the fused residual step and adaptive LayerNorm's modulation)
    and gated RMSNorm (whole rows)."""
    # (the XLA-only conventions: the kernels refuse them, tests/test_variants_dtype.py)
    return [op for op in _index.OPS if op.fn.pallas and _kernels_take(op)]


def _kernels_take(op: _registry.Op) -> bool:
    """Whether the kernels compute ``op``'s convention: LayerNorm's ``"torch"`` only, RMSNorm's
    all but :data:`XLA_ONLY`."""
    convention = op.options.get("convention")
    if convention is None or op.fn.spec is None:
        return True
    if issubclass(op.fn.spec, LayerNormSpec):
        return LN_ALIASES[convention] == "torch"
    if issubclass(op.fn.spec, RMSNormSpec):
        return RMS_ALIASES[convention] not in XLA_ONLY
    return True


def kernel_programs(op: _registry.Op, shape: tuple[int, ...], dtype: str, param_dtype: str | None = None) -> tuple[Any, Any, list[jax.Array]]:
    """``(fwd, grad, args)``: ``op`` through the Pallas kernels (``impl="pallas"``) on inputs of
    ``shape``, and the gradient of its outputs' sum with respect to every floating input."""
    inputs = op.make_inputs(shape, 1, dtype, param_dtype=param_dtype)
    names = list(inputs)

    def fwd(*a: jax.Array) -> Any:
        return op.call_jln(dict(zip(names, a, strict=True)), 1, impl="pallas")

    def loss(*a: jax.Array) -> jax.Array:
        return sum(jnp.sum(o.astype(jnp.float32)) for o in fwd(*a))

    args = [jnp.asarray(v) for v in inputs.values()]
    grad = jax.grad(loss, argnums=tuple(i for i, a in enumerate(args) if jnp.issubdtype(a.dtype, jnp.floating)))
    return fwd, grad, args


def first_fast(*values: Any) -> list[Any]:
    """Parametrize values where only the first runs by default; the others are marked slow
    (they run with --run-slow), so the default suite keeps one case of each check."""
    import pytest

    return [values[0], *(pytest.param(v, marks=pytest.mark.slow) for v in values[1:])]
