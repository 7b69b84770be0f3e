"""Eager calls of jln's functions, compiled whole.

Called outside ``jit`` on concrete arrays, a jln function would otherwise run op by op: each
reshape, cast and parameter broadcast its own dispatched XLA program, every reshape of the
input a copy of it, and ``add_*_norm``'s residual sum computed once more beside the kernel that
fuses it: op by op, a float32 ``layer_norm`` of 4096x256 took about 3x as long per call as
jitted on one CPU core, ``add_layer_norm`` likewise. So an eager call
runs the same function under ``jax.jit`` instead (cached per shapes, dtypes and static
arguments, as any jitted function), with the kernel choice made for the platform the input
array lives on, as an op-by-op call makes it.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

import jax
import numpy as np

from jln._platform import is_traced, platform_of, tracing_for

F = TypeVar("F", bound=Callable[..., Any])


class _Typed:
    """A static option in the cache key with its type: ``True == 1 == 1.0`` share a hash, so
    without it an ``eps=True`` call would reuse ``eps=1.0``'s program and skip the check that
    refuses it."""

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value

    def _key(self) -> Any:
        return (type(self.value), self.value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Typed) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())


def compiled_when_eager(*array_args: str) -> Callable[[F], F]:
    """Decorate a public function whose parameters ``array_args`` take arrays: called with no
    tracer among its arguments and a ``jax.Array`` or NumPy array as its first, it runs under
    ``jax.jit`` with those arrays traced and every other argument static (the same numbers:
    each rounding step of jln's contract is an explicit conversion, which XLA keeps).

    It runs op by op as before where a call cannot be compiled this way: under a transformation
    (a tracer among the arguments), when the first argument is no array (its own checks then
    say what is wrong), and when another argument is unhashable or an array not named in
    ``array_args`` (e.g. ``eps`` as a JAX scalar, or a list for ``order``). Errors are raised
    while tracing, so they keep their types and messages."""

    def wrap(fn: F) -> F:
        params = inspect.signature(fn).parameters
        positional = [n for n, p in params.items() if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
        first = positional[0]
        arrays_ok = frozenset(array_args)

        @functools.partial(jax.jit, static_argnums=(0, 1, 2))
        def compiled(names: tuple[str, ...], static: tuple[tuple[str, Any], ...], platform: str, *arrays: Any) -> Any:
            with tracing_for(platform):
                return fn(**dict(zip(names, arrays, strict=True)), **{n: t.value for n, t in static})

        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            # the arguments by name (inspect's bind took 60% of this wrapper's time); anything
            # irregular goes to fn, which raises its own TypeError
            if len(args) > len(positional):
                return fn(*args, **kwargs)
            given = dict(zip(positional, args, strict=False))  # (args may stop short)
            for name, v in kwargs.items():
                if name in given or name not in params:
                    return fn(*args, **kwargs)
                given[name] = v
            x = given.get(first)
            if not isinstance(x, (jax.Array, np.ndarray)) or is_traced(x):
                return fn(*args, **kwargs)
            names: list[str] = []
            arrays: list[Any] = []
            static: list[tuple[str, Any]] = []
            for name, v in given.items():
                if name in arrays_ok and isinstance(v, (jax.Array, np.ndarray)):
                    if is_traced(v):
                        return fn(*args, **kwargs)
                    names.append(name)
                    arrays.append(v)
                else:
                    static.append((name, _Typed(v)))
            key = tuple(sorted(static, key=lambda item: item[0]))  # keyword order does not matter
            try:
                hash(key)
            except TypeError:  # an unhashable option, or an array where an option goes
                return fn(*args, **kwargs)
            return compiled(tuple(names), key, platform_of(x), *arrays)

        call.__wrapped__ = fn  # type: ignore[attr-defined]
        return call  # type: ignore[return-value]

    return wrap
