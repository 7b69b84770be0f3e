"""Native CPU kernels for gated RMSNorm: :class:`jln.families.gated_rms_norm.spec.GatedRMSNormSpec`
as XLA FFI calls (``cpu_gated.cc``, built by ``jln build`` into the library of :mod:`jln.kernels._cpu`).

Why: on the XLA path a gated RMSNorm's statistics, gate and epilogue are several fusions, and its
reverse mode recomputes the gated row from ``x`` and the gate in more. The kernels read ``x``
and the gate once per pass and keep the row in cache: the gate's activation, the (group) sum of
squares and the output in one forward sweep; the backward writes ``dx`` and the gate's gradient
in one.

Contract: the spec's XLA body, every convention (``"mamba"``, ``"qwen3_next"``, ``"float32"``),
either activation, the gate before the statistics or after the norm, ``group_size``, as stated
at the top of ``cpu_gated.cc``. Each convention's rounding comes from the contract's own dtype
rules (:func:`_flags`). The gate's activation uses the kernels' own ``exp``, so a float32 result
may differ from the XLA path's in its last bits; the tests bound it against float64.

Transforms as for the other native kernels (:mod:`jln.kernels._ad`): reverse mode runs the
backward kernel, which reads ``x``, the gate, the weight and the per-row (per-group) float32
rstd (the XLA path's residuals); forward mode and higher derivatives go through the XLA body;
``vmap`` makes the mapped axis more rows. ``jax.export`` and other platforms lower to the XLA
body.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jln._contract import rows_and_width
from jln.kernels import _ad, _cpu

Array = jax.Array

FWD, BWD = _cpu.GATED_FWD, _cpu.GATED_BWD  # (registered with the library, by _cpu.available)


class Spec(NamedTuple):
    """Static description of one call: the family spec (kernel layout) and the kernel's flags."""

    family: Any  # a GatedRMSNormSpec
    round_h: int
    round_y: int
    has: tuple[bool, bool]  # gate, weight
    add: None = None  # (no fused residual step; jln.kernels._ad reads it)

    @property
    def y_dtype(self) -> jnp.dtype:
        return self.family.result_dtype

    def attrs(self) -> dict[str, Any]:
        f = self.family
        gated = self.has[0]
        return dict(
            eps=np.float32(f.eps), group_size=np.int32(f.group_size or 0),
            act=np.int32(0 if f.activation == "silu" else 1),
            gate_first=np.int32(gated and not f.norm_before_gate), gate_after=np.int32(gated and f.norm_before_gate),
            has_w=np.int32(self.has[1]), round_h=np.int32(self.round_h), round_y=np.int32(self.round_y),
            threads=np.int32(_cpu.threads()),
        )

    def groups(self, n: int) -> int:
        """Statistics per row: one per group of channels."""
        return n // (self.family.group_size or n)


def _flags(spec: Any) -> tuple[int, int]:
    """``(round_h, round_y)``: the contract's roundings (:attr:`GatedRMSNormSpec.steps`) as kernel steps."""
    round_h, round_y = spec.steps
    return _cpu._kind(round_h), _cpu._kind(round_y)


def _xla(spec: Spec, x: Array, z: Array, w: Array) -> Array:
    """The XLA body these kernels implement, on their layout (``x`` and ``z`` ``[rows, n]``, the
    weight ``[groups, n]``, repeated over its groups' rows)."""
    gate = z if spec.has[0] else None
    scale = jnp.repeat(w, x.shape[-2] // w.shape[-2], axis=-2) if spec.has[1] else None
    return spec.family.on_rows(x.ndim).body(x, gate, scale)


def _ffi_fwd(spec: Spec, x: Array, z: Array, w: Array) -> tuple[Array, Array]:
    stat = jax.ShapeDtypeStruct((*x.shape[:-1], spec.groups(x.shape[-1])), jnp.float32)
    y, r = jax.ffi.ffi_call(FWD, (jax.ShapeDtypeStruct(x.shape, spec.y_dtype), stat))(x, z, w, **spec.attrs())
    return y, r


def _ffi_bwd(spec: Spec, ct: Array, x: Array, z: Array, w: Array, rstd: Array) -> tuple[Array, Array, Array]:
    outs = (jax.ShapeDtypeStruct(x.shape, x.dtype), jax.ShapeDtypeStruct(z.shape, z.dtype),
            jax.ShapeDtypeStruct(w.shape, jnp.float32))
    dx, dz, dw = jax.ffi.ffi_call(BWD, outs)(ct, x, z, w, rstd, **spec.attrs())
    return dx, dz, dw


def _xla_fwd(spec: Spec, x: Array, z: Array, w: Array) -> tuple[Array, Array]:
    """``_ffi_fwd`` where the kernel is not taken: the XLA body, zeros for the statistics (only
    the native backward reads them)."""
    return _xla(spec, x, z, w), jnp.zeros((*x.shape[:-1], spec.groups(x.shape[-1])), jnp.float32)


def _xla_bwd(spec: Spec, ct: Array, x: Array, z: Array, w: Array, rstd: Array) -> tuple[Array, ...]:
    dx, dz, dw = jax.vjp(functools.partial(_xla, spec), x, z, w)[1](ct)
    return dx, dz, dw.astype(jnp.float32)  # (the kernel's float32 sums)


@functools.cache
def _primitives() -> tuple[Any, Any]:
    return _cpu._exportable(FWD, _ffi_fwd, _xla_fwd), _cpu._exportable(BWD, _ffi_bwd, _xla_bwd)


def _kernel_forward(spec: Spec, x: Array, z: Array, w: Array) -> tuple[Array, ...]:
    return tuple(_primitives()[0].bind(x, z, w, spec=spec))


def _kernel_backward(spec: Spec, x: Array, ct: Array, ct_s: Array | None, stats: tuple[Array, ...],
                     params: tuple[Array, ...]) -> tuple[Array, ...]:
    z, w = params
    dx, dz, dw = _primitives()[1].bind(ct, x, z, w, *stats, spec=spec)
    # float32 sums rounded once to the weight's dtype; a placeholder's gradient: zeros
    return dx, dz if spec.has[0] else jnp.zeros_like(z), dw.astype(w.dtype) if spec.has[1] else jnp.zeros_like(w)


BACKEND = _ad.Backend(_kernel_forward, _kernel_backward, _xla, broadcast=True)


def run(spec: Any, x: Array, operands: tuple[Array | None, ...], addends: Any = None) -> Array:
    """The native path of ``spec.body(x, gate, scale)`` (same contract)."""
    reason = _cpu.available()
    if reason is not None:
        raise RuntimeError(f"impl='native': {reason}")
    gate, scale = operands
    rows, n = rows_and_width(x.shape, len(spec.axes))
    kspec = Spec(spec.on_rows(2), *_flags(spec), has=(gate is not None, scale is not None))  # type: ignore[arg-type]
    z = jnp.zeros((1, 1), x.dtype) if gate is None else gate.reshape(rows, n)
    w = jnp.zeros((1, 1), jnp.float32) if scale is None else jnp.asarray(scale).reshape(1, n)
    y, _ = _ad.apply(BACKEND, kspec, x.reshape(rows, n), z, w)
    return y.reshape(x.shape)


def unsupported_reason(spec: Any, x: Any, operands: tuple[Any, ...], backend: str | None = None) -> str | None:
    """``None`` when the native gated kernels handle this call, else a sentence saying why not."""
    why = _cpu.layout_reason(spec, x, operands, backend)
    gate = operands[0] if operands else None
    if why is None and gate is not None and jnp.dtype(gate.dtype) != jnp.dtype(x.dtype):
        return (f"the native gated kernel reads the gate in x's dtype (received x {jnp.dtype(x.dtype)}, gate "
                f"{jnp.dtype(gate.dtype)}); pass the gate in x's dtype, or use impl='xla'")
    return why
