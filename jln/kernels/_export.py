"""Kernel calls as primitives lowered per platform: to the kernel on the platform it was built
for, to the XLA body it implements everywhere else and whenever the computation is lowered for
``jax.export``.

A custom call without a compatibility guarantee (jln's native CPU kernels, Pallas's Triton
calls) cannot be serialized, so ``jax.export`` refuses a computation that holds one; and a
kernel for one platform has no lowering on another (a jitted function traced on a GPU machine
and lowered for its CPU, or one exported for several platforms at once). So each kernel call
is a primitive of its own, with a lowering rule per platform: the kernel where it runs (unless
the lowering is for export), the XLA body elsewhere. Under a lowering for several platforms,
JAX emits every platform's rule and picks one by the platform the program runs on. The XLA
body is the contract the kernels implement (the tests hold them to it), so a computation
gives the XLA path's numbers wherever the kernel is not taken.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax

#: The platforms a rule is registered for (others take the XLA body, the default rule).
PLATFORMS = ("cpu", "cuda", "rocm", "tpu")


def exporting(ctx: Any) -> bool:
    """Whether ``ctx`` lowers for ``jax.export``. (JAX's lowering parameters, read defensively:
    where JAX lacks them, the kernels stay, and ``jax.export`` says why it refuses them.)"""
    params = getattr(getattr(ctx, "module_context", None), "lowering_parameters", None)
    return bool(getattr(params, "for_export", False))


def primitive(
    name: str,
    kernel: Callable[..., tuple[Any, ...]],
    xla: Callable[..., tuple[Any, ...]],
    runs_on: Callable[..., bool],
) -> Any:
    """A primitive ``name`` with multiple results, computing ``kernel(*args, **params)``.

    ``xla(*args, **params)`` is the XLA body it implements (its results are cast to the
    kernel's dtypes), and ``runs_on(platform, **params)`` says whether the kernel lowers for
    ``platform``. The caller adds a batching rule where the primitive can meet ``vmap``.
    """
    from jax.extend.core import Primitive
    from jax.interpreters import mlir

    p = Primitive(name)
    p.multiple_results = True
    p.def_impl(kernel)

    def abstract(*avals: Any, **params: Any) -> tuple[Any, ...]:
        outs = jax.eval_shape(functools.partial(kernel, **params), *avals)
        return tuple(avals[0].update(shape=o.shape, dtype=o.dtype, weak_type=False) for o in outs)

    p.def_abstract_eval(abstract)

    def lower(platform: str | None, ctx: Any, *args: Any, **params: Any) -> Any:
        if platform is not None and not exporting(ctx) and runs_on(platform, **params):
            return mlir.lower_fun(functools.partial(kernel, **params), multiple_results=True)(ctx, *args)
        dtypes = [a.dtype for a in ctx.avals_out]

        def body(*a: Any) -> list[Any]:
            return [o.astype(d) for o, d in zip(xla(*a, **params), dtypes, strict=True)]

        return mlir.lower_fun(body, multiple_results=True)(ctx, *args)

    mlir.register_lowering(p, functools.partial(lower, None))
    for platform in PLATFORMS:
        try:
            mlir.register_lowering(p, functools.partial(lower, platform), platform=platform)
        except NotImplementedError:  # a platform this jax does not know
            pass
    return p
