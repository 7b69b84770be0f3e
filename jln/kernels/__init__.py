"""Pallas kernels implementing the exact contract of jln's XLA bodies.

:func:`run` takes a family spec of :mod:`jln._contract` and implements its XLA body: same
numerics (float32 statistics about the rounded mean, every convention's rounding through the spec's own
``tail``), same reverse-mode residuals (``x`` in its own dtype, per-row float32 statistics,
the parameters).

Targets: Pallas Triton on NVIDIA GPUs (validated and timed on hardware; ``impl="auto"`` takes
them there, see :func:`native`), Pallas Mosaic on TPUs (lowered for a TPU in the tests,
untested on hardware), and Pallas interpret mode on CPU (only when asked for with
``impl="pallas"``; ``"auto"`` never picks it).
``add_layer_norm``/``add_rms_norm`` fuse the residual add into the kernels (``addends``).
Rows wider than 16384 elements (``_plan.WIDE_FROM``) are read in column chunks inside each
program (the wide path of :mod:`jln.kernels._norm`), up to 2**20 elements on GPUs and 65536
on TPUs (``_plan.max_width``); wider rows raise with ``impl="pallas"`` and run on XLA with
``"auto"``.

Transforms: reverse mode (``grad``, ``vjp``) runs the Pallas backward kernels; forward mode
(``jvp``, ``jacfwd``) evaluates the tangent with the XLA body's JVP, and derivatives of the
backward (grad-of-grad, Hessians) go through the XLA body's VJP
(:mod:`jln.kernels._ad`, shared with the native CPU kernels).

Sharding: under ``jax.jit`` on a mesh with ``AxisType.Explicit`` axes, an ``x`` split along
its rows (batch/sequence axes) runs the kernel on each device's block (``jax.shard_map``
inside, no collective on the activation); a split normalized axis raises ``ValueError``
(use ``impl="xla"``). On ``AxisType.Auto`` axes XLA's partitioner decides the sharding and
the kernel calls carry a ``custom_partitioning`` rule (:mod:`jln.kernels._partition`): split
rows (batch/sequence axes) stay on their devices, each device runs the kernels on its rows,
per-example conditions (adaLN's ``[B, 1, D]``) follow their rows, and the backward
all-reduces only the gradients of broadcast operands (one ``[n]`` vector per parameter, one
per example for conditions, over the mesh axes the operand is broadcast along). A split
normalized axis is all-gathered (that axis only: rows split over other mesh axes stay split),
so keep ``impl="xla"`` for tensor-parallel hidden axes; a row axis the mesh does not divide
evenly is gathered too.

Platforms and ``jax.export``: each kernel call is a primitive that lowers to the kernel on its
target's platforms and to the XLA body it implements under ``jax.export`` (a Triton call has
no compatibility guarantee) and on any other platform (a program traced on a GPU machine and
lowered for its CPU, or for several platforms at once): :mod:`jln.kernels._export`.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import jax
import jax.numpy as jnp

from jln import _distributed
from jln._contract import NormSpec, rows_and_width
from jln._platform import platform_of
from jln.kernels import _norm, _plan

Array = jax.Array

#: Tiling used in interpret mode (CPU). "gpu" exercises the masked power-of-two tiles; tests
#: set "tpu" to exercise the exact-width layout.
INTERPRET_TARGET = "gpu"

_TARGETS = {"gpu": "gpu", "tpu": "tpu", "cpu": "interpret"}



#: Widest row ``impl="auto"`` sends to the GPU kernels: the widest measured on hardware
#: (bench/results/h200.md). Wider rows take the kernels' wide path (column chunks,
#: ``_plan.WIDE_FROM``) with ``impl="pallas"`` only until it is timed on a GPU
#: (``bench/gpu.sh OUT --parts wide``); ``"auto"`` keeps them on XLA.
AUTO_MAX_WIDTH = 16384


def native(backend: str, n: int = 0) -> bool:
    """Whether ``impl="auto"`` may take the kernels on ``backend`` for rows of ``n`` elements
    (never interpret mode).

    GPUs: yes, for rows up to :data:`AUTO_MAX_WIDTH` (wider rows, which the kernels read in
    column chunks, are unmeasured on hardware and stay on XLA). On a GPU the kernels pass
    ``jln parity --impl pallas`` and run the backward in 0.51-0.80x the XLA path's time
    (bench/results/h200.md), and they support every transform the XLA path does (reverse
    and forward mode, higher derivatives through the XLA body, vmap, sharding by rows).
    TPUs: only with the environment variable ``JLN_PALLAS_AUTO=1`` (no TPU run yet).
    ``JLN_PALLAS_AUTO=0`` keeps ``"auto"`` on XLA everywhere; ``impl="pallas"`` always works.
    """
    flag = os.environ.get("JLN_PALLAS_AUTO")
    if flag == "0" or n > AUTO_MAX_WIDTH:
        return False
    return backend == "gpu" or (backend == "tpu" and flag == "1")


@functools.cache
def _triton_available() -> bool:
    try:
        from jax.experimental.pallas import triton  # noqa: F401
    except ImportError:
        return False
    return True


def unsupported_reason(spec: NormSpec, x: Any, operands: tuple[Any, ...], backend: str) -> str | None:
    """``None`` when a kernel handles this call, else a sentence saying why not."""
    if backend not in _TARGETS:
        return f"no Pallas target for backend {backend!r} (kernels run on gpu, tpu, or cpu in interpret mode)"
    if backend == "gpu" and not _triton_available():
        return (
            "this jax has no Pallas Triton backend (jax 0.11 deprecates it; the kernels use it on "
            "NVIDIA GPUs)"
        )
    if spec.axis_name is not None:
        return _distributed.CROSS_DEVICE_REASON
    if not spec.pallas:  # the families the kernels implement say so (NormSpec.pallas)
        return f"no Pallas kernel for {spec.op!r} yet (it runs on the XLA path)"
    if getattr(spec, "group_size", None) is not None:
        return "the gated RMSNorm kernel takes whole-row statistics only; group_size runs on the XLA path"
    axes, ndim = spec.axes, x.ndim
    if axes != tuple(range(ndim - len(axes), ndim)):
        return (
            f"kernels normalize the trailing axes of x only; received axes={axes} for "
            f"x.ndim={ndim} (move the normalized axes last, e.g. with jnp.moveaxis)"
        )
    dtypes = [x.dtype, spec.result_dtype]
    if any(jnp.dtype(d) not in (jnp.float32, jnp.bfloat16, jnp.float16) for d in dtypes):
        return f"kernels take float32, bfloat16 and float16 (received {[str(jnp.dtype(d)) for d in dtypes]}); float64 runs on the XLA path"
    if not all(isinstance(d, int) for d in x.shape):
        return (
            f"kernels are tiled for concrete shapes; received x.shape={tuple(x.shape)} with symbolic "
            f"dimensions (jax.export shape polymorphism), which run on the XLA path"
        )
    n = rows_and_width(x.shape, len(axes))[1]
    if n == 0:
        return "the normalized axes are empty"
    target = INTERPRET_TARGET if backend == "cpu" else backend
    widest = _plan.max_width(target)
    if n > widest:
        return (
            f"rows of {n} elements exceed the widest the kernels take on {target} ({widest}; "
            f"wider rows run on the XLA path)"
        )
    return None


def _target(x: Any) -> tuple[str, bool]:
    """The kernels' target for a call on ``x`` (its platform, as dispatch sees it), and whether
    that is interpret mode (on CPU)."""
    backend = platform_of(x)
    if backend == "cpu":
        return INTERPRET_TARGET, True
    return backend, False


def _prepare(c: Array, x_shape: tuple[int, ...], k: int, n: int) -> Array:
    """Lay out an operand broadcastable against ``x`` as ``[*lead', n]``, ``lead'`` being
    ``x``'s row axes or 1 where it broadcasts (the kernels pick the per-feature, per-group or
    per-row layout from it); plain jnp, so autodiff carries cotangents back to its own shape."""
    c = jnp.asarray(c)
    c = c.reshape((1,) * (len(x_shape) - c.ndim) + c.shape)
    c = jnp.broadcast_to(c, c.shape[:k] + x_shape[k:])
    return c.reshape(c.shape[:k] + (n,))


def run(spec: NormSpec, x: Array, operands: tuple[Array | None, ...], addends: tuple[Array, Array] | None = None) -> Any:
    """The kernel path of ``spec.body(x, *operands)`` (same result) on ``x``
    (``[*rows, *normalized]``); with ``addends = (a, b)``, ``x`` is their sum ``s`` as the XLA
    path computes it (only its shape and dtype are used): the kernel reads ``a`` and ``b``
    and this returns ``(y, s)``."""
    k = x.ndim - len(spec.axes)
    n = rows_and_width(x.shape, len(spec.axes))[1]
    target, interpret = _target(x)
    present = {name: c for name, c in zip(spec.operands, operands, strict=True) if c is not None}
    arrays = [_prepare(c, x.shape, k, n) for c in present.values()]
    add = None if addends is None else (jnp.dtype(x.dtype), jnp.dtype(addends[0].dtype), jnp.dtype(addends[1].dtype))
    kspec = _norm.Spec(spec.on_rows(k + 1), _plan.unplanned(target, interpret, n), tuple(present), (), add)

    def flat(a: Array) -> Array:  # the row axes stay separate, so their sharding carries over
        return a.reshape(x.shape[:k] + (n,))

    if addends is None:
        return _norm.call(kspec, flat(x), *arrays).reshape(x.shape)
    y, s = _norm.call_add(kspec, flat(addends[0]), flat(addends[1]), *arrays)
    return y.reshape(x.shape), s.reshape(x.shape)
