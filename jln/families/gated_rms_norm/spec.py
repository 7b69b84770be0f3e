"""Gated RMSNorm's contract: the conventions' dtype order, the spec and the formula.

A gated RMSNorm multiplies the row by an activation of a second, x-shaped input ``z`` (the
gate): either before the statistics (Mamba-2: the gated row is normalized) or after the norm
and the weight (Qwen3-Next). Statistics may be taken per group of ``group_size`` channels.
The conventions differ only in where they round to the input dtype ``dt`` and in the output
dtype; with ``f()`` a cast to the statistics dtype, ``r`` the rsqrt of the (group) mean
square plus eps, ``a`` the activation and ``w`` the weight:

* ``"mamba"`` (transformers' ``MambaRMSNormGated`` and its copies in Bamba, Zamba2,
  NemotronH, GraniteMoeHybrid): ``h = f(x) * a(f(z))`` before the statistics, then
  ``w * (h * r).astype(dt)``: a float32 weight promotes (bfloat16 x gives float32), as
  LLaMA's RMSNorm.
* ``"qwen3_next"`` (Qwen3-Next, Qwen3.5, OLMo-hybrid): ``w * (f(x) * r).astype(dt)``, rounded
  to its promoted dtype, then ``* a(f(z))`` in float32, cast to ``dt`` last.
* ``"float32"`` (FalconH1, Kimi-Linear, mamba_ssm's ``layernorm_gated``): everything in
  float32, ``f(w)`` included, one cast to ``dt`` at the end.

``norm_before_gate`` moves the gate in any convention; each has its reference's default.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal, get_args

import jax
import jax.numpy as jnp
from jax import lax

from jln import _stats
from jln._contract import NormSpec

Array = jax.Array

#: Convention name -> (aliases, norm_before_gate default). Aliases name the models whose gated
#: norm computes as the convention.
CONVENTIONS: dict[str, tuple[tuple[str, ...], bool]] = {
    "mamba": (("mamba2", "bamba", "zamba2", "nemotron_h", "granitemoehybrid"), False),
    "qwen3_next": (("qwen3_5", "olmo_hybrid"), True),
    "float32": (("falcon_h1", "mamba_ssm"), True),
}
ALIASES = {alias: name for name, (aliases, _) in CONVENTIONS.items() for alias in (name, *aliases)}
#: Every name :data:`ALIASES` takes, for type checkers (a test holds the two equal).
GatedConvention = Literal["mamba", "mamba2", "bamba", "zamba2", "nemotron_h", "granitemoehybrid", "qwen3_next", "qwen3_5",
                          "olmo_hybrid", "float32", "falcon_h1", "mamba_ssm"]
#: The gate activations: SiLU (Mamba-2, Qwen3-Next, FalconH1) and sigmoid (Kimi-Linear).
GateActivation = Literal["silu", "sigmoid"]
ACTIVATIONS: tuple[str, ...] = get_args(GateActivation)


def resolve_convention(convention: str, fn: str) -> str:
    """The canonical name of ``convention`` (``"bamba"`` gives ``"mamba"``)."""
    if convention not in ALIASES:
        raise ValueError(f"{fn}: unknown convention {convention!r}; expected one of {sorted(ALIASES)}.")
    return ALIASES[convention]


def default_norm_before_gate(convention: str) -> bool:
    return CONVENTIONS[convention][1]


def output_dtype(convention: str, dtype: Any, scale_dtype: Any) -> jnp.dtype:
    """``mamba``: the promotion of the input and weight dtypes; otherwise the input dtype."""
    if convention == "mamba" and scale_dtype is not None:
        return _stats.promote(dtype, scale_dtype)
    return jnp.dtype(dtype)


def _stable_sigmoid(z: Array) -> Array:
    """``1 / (1 + exp(-z))`` from ``exp(-|z|) <= 1``: finite, with a finite derivative, at every z."""
    e = jnp.exp(-jnp.abs(z))
    return jnp.where(z >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def _as_torch(exact: Array, stable: Array) -> Array:
    """``exact``'s value (torch's kernel formula, bit for bit, the sign of a zero included) with
    ``stable``'s derivative. The custom rules below differentiate the XLA path; the Pallas kernels
    differentiate the body as written (:mod:`jln.kernels._portable` inlines custom rules), where
    the quotient's own derivative is NaN once ``exp(-z)`` overflows (z < -88). An infinite
    ``stable`` (silu(+inf)) adds nothing: ``inf - inf`` would turn torch's ``inf`` into NaN."""
    delta = stable - lax.stop_gradient(stable)
    return lax.stop_gradient(exact) + jnp.where(jnp.isinf(stable), jnp.zeros_like(delta), delta)


@jax.custom_jvp
def _silu(z: Array) -> Array:
    # torch's kernel: z / (1 + exp(-z)); -0 where exp(-z) overflows
    return _as_torch(z / (1.0 + jnp.exp(-z)), z * _stable_sigmoid(z))


@_silu.defjvp
def _silu_jvp(primals: tuple[Array], tangents: tuple[Array]) -> tuple[Array, Array]:
    (z,), (dz,) = primals, tangents
    s = _stable_sigmoid(z)
    return _silu(z), dz * (s * (1.0 + z * (1.0 - s)))


@jax.custom_jvp
def _sigmoid(z: Array) -> Array:
    return _as_torch(1.0 / (1.0 + jnp.exp(-z)), _stable_sigmoid(z))  # torch's kernel


@_sigmoid.defjvp
def _sigmoid_jvp(primals: tuple[Array], tangents: tuple[Array]) -> tuple[Array, Array]:
    (z,), (dz,) = primals, tangents
    s = _stable_sigmoid(z)
    return _sigmoid(z), dz * (s * (1.0 - s))


def activate(activation: str, z: Array) -> Array:
    """The gate's activation, on ``z`` already in the statistics dtype."""
    return _silu(z) if activation == "silu" else _sigmoid(z)


@dataclasses.dataclass(frozen=True, kw_only=True)
class GatedRMSNormSpec(NormSpec):
    """Gated RMSNorm in one convention (see this module's docstring). ``group_size``: the
    statistics are per group of that many consecutive channels of the one normalized axis
    (``None``: the whole row, over every axis in ``axes``); ``io_dtype`` is the input's dtype,
    ``out_dtype`` the result's, ``scale_dtype`` the weight's (``None``: no weight)."""

    convention: str
    group_size: int | None
    norm_before_gate: bool
    activation: str
    io_dtype: Any
    out_dtype: Any
    scale_dtype: Any = None

    op = "gated_rms_norm"
    operands = ("gate", "scale")
    centered = False
    #: (the Pallas kernel is tested in interpret mode only: ``"auto"`` does not take it until timed on a GPU)
    pallas = True
    native = "gated"

    @property
    def result_dtype(self) -> jnp.dtype:
        return jnp.dtype(self.out_dtype)

    def _gate(self, gate: Array, sd: Any) -> Array:
        return activate(self.activation, _stats.upcast(gate).astype(sd))

    def formula(self, x: Array, *operands: Array | None) -> Array:
        """``v = f(x)`` (times ``a(f(z))`` when the gate comes first), ``h = v * rsqrt(mean(v^2)
        + eps)`` per row or group, then :meth:`tail`. Reverse mode keeps ``x``, ``z``, the
        weight and the per-row (per-group) rstd; the gated row is recomputed."""
        gate, scale = (*operands, None, None)[:2]
        v = self.pre(_stats.upcast(x), gate, scale)
        if self.group_size is None:
            h = _stats.normalized(v, self.axes, self.eps, None, self.axis_name, self.axis_index_groups)
        else:
            # groups lie inside the local block (the public function checked it): no collective
            (a,) = self.axes
            gs = self.group_size
            shape = v.shape
            if shape[a] % gs:  # a block of an explicitly sharded x (jln._distributed.run_local)
                raise ValueError(
                    f"jln.gated_rms_norm: group_size={gs} groups would straddle the devices' blocks "
                    f"of {shape[a]} channels; shard the channels in multiples of group_size."
                )
            grouped = v.reshape(shape[:a] + (shape[a] // gs, gs) + shape[a + 1 :])
            h = _stats.normalized(grouped, (a + 1,), self.eps).reshape(shape)
        return self.tail(h, gate, scale)

    def row_stats(self, x: Array, *operands: Array | None) -> tuple[Array | None, Array]:
        """``(None, rstd)`` of the row the statistics are taken on (gated first when the gate
        comes before the norm), statistics dtype; keepdims, or with ``group_size`` one value per
        group: the normalized axis of length ``n // group_size``."""
        gate, scale = (*operands, None, None)[:2]
        v = self.pre(_stats.upcast(x), gate, scale)
        if self.group_size is None:
            return None, _stats.inv_std_of(v, self.axes, self.eps, None, self.axis_name, self.axis_index_groups)
        (a,) = self.axes
        gs = self.group_size
        grouped = v.reshape(v.shape[:a] + (v.shape[a] // gs, gs) + v.shape[a + 1 :])
        return None, jnp.squeeze(_stats.inv_std_of(grouped, (a + 1,), self.eps), a + 1)

    def pre(self, x: Array, *operands: Array | None) -> Array:
        """The gated row ``x * a(f(z))`` when the gate comes first, else ``x``."""
        gate = operands[0] if operands else None
        if gate is not None and not self.norm_before_gate:
            return x * self._gate(gate, x.dtype)
        return x

    def has_pre(self, present: tuple[str, ...]) -> bool:
        return "gate" in present and not self.norm_before_gate

    @property
    def steps(self) -> tuple[Any, Any]:
        """The convention's roundings after ``h = v * rstd``: ``(round_h, round_y)``, ``h``
        rounded to ``round_h`` before the weight and ``h * w`` to ``round_y`` (``None``: no
        rounding). The only place they live: :meth:`tail` and the native kernels apply them."""
        if self.convention == "float32":
            return None, None
        round_y = None if self.scale_dtype is None else _stats.promote(self.io_dtype, self.scale_dtype)
        return jnp.dtype(self.io_dtype), round_y

    def tail(self, h: Array, *operands: Array | None) -> Array:
        """After ``h = v * rstd`` (statistics dtype): the convention's rounding to ``dt``, the
        weight (rounded to its product's dtype where the reference multiplies in it), the gate
        when it comes after the norm, and the cast to the output dtype."""
        gate, scale = (*operands, None, None)[:2]
        sd = h.dtype
        round_h, round_y = self.steps
        if round_h is not None:
            h = _stats.round_to(h, round_h)
        if scale is not None:
            h = h * scale.astype(sd)
            if round_y is not None:
                h = _stats.round_to(h, round_y)
        if gate is not None and self.norm_before_gate:
            h = h * self._gate(gate, sd)
        return h.astype(self.out_dtype)
