"""Run a pure-jnp core helper inside a Pallas kernel body.

The core rounds bfloat16 with ``lax.reduce_precision`` (which XLA never elides), but neither
the Triton nor the Mosaic lowering has a rule for it (nor Triton for ``lax.round``, which the
float16 subnormal rounding uses; it is rebuilt from ``floor``). Inside a kernel a cast round trip is the
same rounding (round to nearest even) and is kept by Triton, Mosaic and XLA:CPU alike, so
:func:`portable` re-evaluates the helper's jaxpr with that substitution. The helper's formula
stays written once, in the core.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.extend import core as jex_core

_ROUNDING = {
    (8, 7): jnp.dtype(jnp.bfloat16),
    (5, 10): jnp.dtype(jnp.float16),
}


def _round_trip(v: Any, exponent_bits: int, mantissa_bits: int) -> Any:
    dtype = _ROUNDING.get((exponent_bits, mantissa_bits))
    if dtype is None:  # never produced by jln's core; keep the primitive
        return lax.reduce_precision(v, exponent_bits=exponent_bits, mantissa_bits=mantissa_bits)
    return v.astype(dtype).astype(v.dtype)


def _round_half_even(v: Any) -> Any:
    """``lax.round(v, TO_NEAREST_EVEN)`` from floor and compares (Triton has no rule for
    ``round``); exact for every float: ``v - floor(v)`` and ``floor(f / 2)`` are exact."""
    f = jnp.floor(v)
    frac = v - f
    up = f + 1
    f_even = f - 2 * jnp.floor(f * 0.5) == 0
    return jnp.where(frac > 0.5, up, jnp.where(frac < 0.5, f, jnp.where(f_even, f, up)))


def _eval(jaxpr: Any, consts: Any, args: Any) -> list[Any]:
    env: dict[Any, Any] = {}

    def read(v: Any) -> Any:
        return v.val if isinstance(v, jex_core.Literal) else env[v]

    for v, a in zip(jaxpr.constvars, consts, strict=True):
        env[v] = a
    for v, a in zip(jaxpr.invars, args, strict=True):
        env[v] = a
    for eqn in jaxpr.eqns:
        invals = [read(v) for v in eqn.invars]
        if eqn.primitive is lax.reduce_precision_p:
            outs = [_round_trip(invals[0], eqn.params["exponent_bits"], eqn.params["mantissa_bits"])]
        elif eqn.primitive is lax.round_p and eqn.params["rounding_method"] == lax.RoundingMethod.TO_NEAREST_EVEN:
            outs = [_round_half_even(invals[0])]
        elif eqn.primitive.name in ("jit", "pjit") and "jaxpr" in eqn.params:
            inner = eqn.params["jaxpr"]
            outs = _eval(inner.jaxpr, inner.consts, invals)
        elif eqn.primitive.name == "custom_jvp_call":  # inlined: a kernel that differentiates
            # the body (the Pallas backward) gets the derivative of its ops as written
            inner = eqn.params["call_jaxpr"]
            outs = _eval(inner.jaxpr, inner.consts, invals)
        else:
            outs = eqn.primitive.bind(*invals, **eqn.params)
            if not eqn.primitive.multiple_results:
                outs = [outs]
        for v, o in zip(eqn.outvars, outs, strict=True):
            env[v] = o
    return [read(v) for v in jaxpr.outvars]


def portable(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with every ``lax.reduce_precision`` replaced by the equivalent cast round trip."""

    @functools.wraps(fn)
    def wrapped(*args: Any) -> Any:
        closed, out_shape = jax.make_jaxpr(fn, return_shape=True)(*args)
        flat = _eval(closed.jaxpr, closed.consts, jax.tree_util.tree_leaves(args))
        return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(out_shape), flat)

    return wrapped
