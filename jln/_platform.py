"""Which platform a call runs on, and whether a value is traced: the facts dispatch reads."""

from __future__ import annotations

import contextlib
import contextvars
import functools
from collections.abc import Iterator
from typing import Any, Literal, get_args

import jax

#: The values of every public function's ``impl=``.
Impl = Literal["auto", "xla", "pallas", "native"]
IMPLS: tuple[str, ...] = get_args(Impl)

_PLATFORM: contextvars.ContextVar[str | None] = contextvars.ContextVar("jln_eager_platform", default=None)


@functools.cache
def _array_type() -> type:
    """The type of JAX's concrete arrays (asked of one, so no private name is imported; made
    concrete even when first asked while tracing)."""
    with jax.ensure_compile_time_eval():
        return type(jax.numpy.zeros(()))


def is_traced(v: Any) -> bool:
    """Whether ``v`` is a JAX value under a transformation (a ``jax.Array`` that is not a
    concrete one); decided without ``jax.core``, whose exports newer JAX trims."""
    return isinstance(v, jax.Array) and not isinstance(v, _array_type())


@contextlib.contextmanager
def tracing_for(platform: str) -> Iterator[None]:
    """Trace an eager call compiled whole (:mod:`jln._eager`) as running on ``platform``."""
    token = _PLATFORM.set(platform)
    try:
        yield
    finally:
        _PLATFORM.reset(token)


def traced_platform() -> str | None:
    """The platform of the eager call being compiled (see :func:`tracing_for`), or ``None``
    outside one: what :func:`platform_of` answers for its tracers."""
    return _PLATFORM.get()


def platform_of(x: Any) -> str:
    """The platform a call on ``x`` runs on: a concrete array's devices' (an eager call on a
    CPU array on a GPU machine runs on the CPU; compiled whole, see :mod:`jln._eager`, it
    keeps that platform), else the default backend. A traced value carries no device, so
    under a user's ``jit`` the default backend decides: to run a jitted norm on the CPU of a
    GPU machine, pass ``impl="xla"``."""
    eager = traced_platform()
    if eager is not None:
        return eager
    if isinstance(x, jax.Array):
        try:
            platforms = {d.platform for d in x.devices()}
        except Exception:  # noqa: BLE001 - a tracer: no devices to ask
            platforms = set()
        if len(platforms) == 1:
            return platforms.pop()
    return jax.default_backend()
