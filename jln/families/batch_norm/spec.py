"""The batch-statistics norms' contract (BatchNorm, InstanceNorm, GroupNorm, FrozenBatchNorm2d):
their specs, formulas and dtype rules, in torch's semantics.

One formula serves the three families that normalize with statistics of the batch: ``x`` laid
out so that the statistics are taken over ``axes`` (BatchNorm: every axis but the channels;
InstanceNorm: the spatial axes; GroupNorm: a group's channels and the spatial axes, after the
channel axis is split into ``(groups, channels per group)``), the statistics from
:func:`jln._stats.centered` (the corrected two-pass algorithm, global across ``axis_name``), and
a per-channel affine. What differs from torch's eager kernels is stated where it is written:

* bfloat16/float16 ``x`` whose parameters (and running statistics) are of its own dtype, or
  absent: torch's CPU BatchNorm rounds the batch mean and ``1/sqrt(var + eps)`` to that dtype
  before normalizing, and for bfloat16 the sum of squared deviations too
  (:meth:`BatchStatSpec._rounded_stats`; *measured*: so rounded jln matches torch 2.13 bit for
  bit; computed in float32 and rounded once, ~35% of elements differ). With float32 parameters
  (torch's mixed-dtype path) the statistics stay float32 and the output is rounded once.
  GroupNorm always keeps them in float32 and, for a half-precision output, folds them into a
  per-channel scale and shift as torch's CPU GroupNorm does (``torch_affine``); torch's own
  statistics (a vectorized Welford cascade whose lane count follows the CPU) are not reproduced,
  so ~1 element in 4000 of offset bfloat16 inputs is 1 ulp apart.
  ``stat_round`` carries that dtype (``None``: none).
* ``convention="strided"`` (BatchNorm only): torch's CPU BatchNorm on an input that is neither
  contiguous nor channels-last (``bn(x.transpose(1, 2))``, as transformers' PatchTST and
  PatchTSMixer call it) skips its fast kernels for an element-wise fallback,
  ``((x - mean) * invstd) * weight + bias`` with every op in the parameters' dtype (rounded to
  bfloat16/float16 after each op when they are of ``x``'s half dtype; float32 throughout and one
  rounding at the end when they are float32). In eval mode ``invstd = 1 / sqrt(running_var +
  eps)`` is three tensor ops in the buffers' dtype, each rounded; in training mode the batch mean
  is ``sum / n`` in float32 rounded once to the parameters' dtype, the variance the float32 mean
  of squared deviations from that rounded mean, and ``invstd`` is rounded once
  (:func:`strided_affine`; *measured*, torch 2.13: bit-exact for bfloat16 and float16 in both
  modes).
* The derivative is that of the float32 computation (the rounding of the statistics is a
  forward-only detail: torch's backward differentiates its saved statistics the same way).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Literal, get_args

import jax
import jax.numpy as jnp
from jax import lax
from jax.ad_checkpoint import checkpoint_name

from jln import _stats
from jln._contract import NormSpec
from jln._stats import forward_as
from jln._stats import unfused as _unfused

Array = jax.Array


def _inv_sqrt(v: Array) -> Array:
    """``1 / sqrt(v)`` with two correctly rounded steps, as torch's CPU ``rsqrt`` and its
    BatchNorm kernels compute it (*measured*: equal on 100% of 1e5 float32 values, where XLA's
    ``rsqrt`` differs in the last bit on ~34%)."""
    return 1 / _unfused(lax.sqrt(v))  # (jitted, XLA would rewrite 1 / sqrt(v) as rsqrt(v))


#: which of torch's CPU BatchNorm paths is reproduced: ``"torch"`` its kernels for contiguous (and
#: channels-last) input, ``"strided"`` its element-wise fallback for any other strides
BatchNormConvention = Literal["torch", "strided"]
CONVENTIONS: tuple[str, ...] = get_args(BatchNormConvention)


def strided_affine(
    x32: Array, mean: Array, invstd: Array, scale: Array | None, bias: Array | None, op_dtype: Any
) -> Array:
    """``((x - mean) * invstd) * scale + bias`` op by op, each op rounded to ``op_dtype`` (torch's
    element-wise BatchNorm fallback for strided input: see the module docstring). A missing
    ``scale`` is a multiply by 1 and a missing ``bias`` an add of 0, as torch's scalar stand-ins
    (so ``-0`` becomes ``+0`` as there). Returns the statistics dtype; the caller rounds it once
    more to the output dtype (exact when ``op_dtype`` is that dtype)."""
    sd = x32.dtype

    def r(v: Array) -> Array:  # each product kept apart from the next add (XLA:CPU would fuse them)
        return _stats.round_to(_unfused(v), op_dtype)

    h = r(x32 - mean.astype(sd))
    h = r(h * invstd.astype(sd))
    if scale is not None:
        h = r(h * scale.astype(sd))
    return r(h + (jnp.zeros((), sd) if bias is None else bias.astype(sd)))


def strided_invstd(var: Array, eps: float) -> Array:
    """``1 / sqrt(running_var + eps)`` as torch's eval-mode fallback writes it, three tensor ops
    in ``var``'s dtype (each rounded to it), returned in the statistics dtype."""
    dt, sd = var.dtype, _stats.stats_dtype(var.dtype)
    v = _stats.round_to(var.astype(sd) + eps, dt)
    s = _stats.round_to(_unfused(lax.sqrt(v)), dt)
    return _stats.round_to(1 / s, dt)


def _affine(y: Array, scale: Array | None, bias: Array | None) -> Array:
    if scale is not None:
        y = y * scale.astype(y.dtype)
    if bias is not None:
        y = y + bias.astype(y.dtype)
    return y


@dataclasses.dataclass(frozen=True, kw_only=True)
class BatchStatSpec(NormSpec):
    """Normalization with the statistics of ``x`` over ``axes``:
    ``y = (x - mean) / sqrt(var + eps) * scale + bias`` (biased variance), rounded once to
    ``out_dtype``; the formula also returns ``(mean, var)`` (keepdims, statistics dtype, outside
    autodiff) for the running statistics. ``stat_round``: the dtype torch rounds ``mean`` and
    ``rstd`` to before use (see the module docstring), or ``None``. ``torch_affine``: a
    bfloat16/float16 output is evaluated as torch's CPU GroupNorm evaluates it (see
    :meth:`_torch_affine`). ``strided``: torch's element-wise fallback for strided input (see
    :meth:`_strided`); the returned mean is then the one torch uses (rounded to ``stat_round``)
    and the variance the mean of squared deviations from it."""

    out_dtype: Any
    stat_round: Any = None
    torch_affine: bool = False
    strided: bool = False

    op = "batch_stats"
    operands = ("scale", "bias")
    centered = True

    @property
    def result_dtype(self) -> jnp.dtype:
        return jnp.dtype(self.out_dtype)

    def formula(self, x: Array, *operands: Array | None) -> Any:  # type: ignore[override]
        scale, bias = (*operands, None, None)[:2]
        x32 = _stats.upcast(x)
        groups = self.axis_index_groups
        mean, d, var = _stats.centered(x32, self.axes, self.axis_name, groups)
        h = _stats.normalized(x32, self.axes, self.eps, (d, var), self.axis_name, groups)
        if self.strided:
            y_s, mean_s, var_s = self._strided(x32, scale, bias)
            y = forward_as(y_s, _affine(h, scale, bias))
            return y.astype(self.out_dtype), lax.stop_gradient(mean_s), lax.stop_gradient(var_s)
        if self.stat_round is not None:
            h = forward_as(self._rounded_stats(x32, lax.stop_gradient(var)), h)
        y = _affine(h, scale, bias)
        if self.torch_affine and jnp.dtype(self.out_dtype).itemsize < 4:
            y = forward_as(self._torch_affine(x32, mean, lax.stop_gradient(var), scale, bias), y)
        return y.astype(self.out_dtype), lax.stop_gradient(mean), lax.stop_gradient(var)

    def masked_body(self, x: Array, mask: Array, *operands: Array | None) -> tuple[Array, Array, Array]:
        """:meth:`formula` with the statistics over the elements where ``mask`` (boolean, ``x``'s
        shape) is true, under the remat policy: the mean about a pivot (the masked mean rounded
        to the statistics dtype, so ``x - pivot`` is exact for data clustered at a large offset),
        then the mean of squared deviations from it (:func:`jln._stats.masked_normalized`'s
        statistics); every element is normalized with them and rounded once."""
        return jax.checkpoint(type(self)._masked_formula, policy=_stats.REMAT_POLICY, static_argnums=(0,))(
            self, x, mask, *operands
        )

    def _masked_formula(self, x: Array, mask: Array, *operands: Array | None) -> tuple[Array, Array, Array]:
        x32 = _stats.upcast(x)

        def mean(v: Array) -> Array:
            return _stats.masked_mean(v, mask, self.axes, self.axis_name, self.axis_index_groups)

        pivot = lax.stop_gradient(mean(x32))
        xs = x32 - pivot
        c = checkpoint_name(mean(xs), _stats.STAT_NAMES[0])
        d = xs - c
        var = mean(d * d)
        y = self.tail(d * _stats.inv_std(var, self.eps), *operands)
        return y, lax.stop_gradient(pivot + c), lax.stop_gradient(var)

    def _torch_affine(
        self, x32: Array, mean: Array, var: Array, scale: Array | None, bias: Array | None
    ) -> Array:
        """``x * s + (bias - mean * s)`` with ``s = rstd * scale`` per channel: torch's CPU
        GroupNorm folds the statistics into a per-channel scale and shift and applies them in
        one multiply-add (*measured*, torch 2.13: given torch's own statistics this form matches
        its bfloat16 output on 100% of elements; ``(x - mean) * rstd * scale + bias`` rounds
        differently on ~1 element in 1000 of offset inputs). Only for half-precision outputs:
        in float32 the shift's cancellation would cost accuracy on offset inputs."""
        mean, s = lax.stop_gradient(mean), _inv_sqrt(var + self.eps)
        if scale is not None:
            s = s * scale.astype(s.dtype)
        shift = -(mean * s) if bias is None else bias.astype(s.dtype) - mean * s
        return x32 * s + shift

    def _strided(self, x32: Array, scale: Array | None, bias: Array | None) -> tuple[Array, Array, Array]:
        """torch's training-mode fallback for strided input: ``mean = round(sum / n)`` (``at::mean``
        in float32, rounded once to ``stat_round``), ``var`` the float32 mean of squared
        deviations from that mean, ``invstd = round(1 / sqrt(var + eps))``, then
        :func:`strided_affine` with ops in ``stat_round`` (float32 when ``None``). Returns
        ``(y, mean, var)`` (*measured*, torch 2.13: bfloat16 and float16 bit-exact)."""
        groups = self.axis_index_groups
        n = _stats.count(x32.shape, self.axes, self.axis_name, groups)
        (plain_mean,) = _stats._row_means((x32,), self.axes, self.axis_name, groups)
        dt = x32.dtype if self.stat_round is None else jnp.dtype(self.stat_round)
        m_r = _stats.round_to(plain_mean, dt)
        var = _stats.sum_square(x32 - m_r, self.axes, self.axis_name, groups) / n
        invstd = _stats.round_to(_inv_sqrt(var + self.eps), dt)
        return strided_affine(x32, m_r, invstd, scale, bias, dt), m_r, var

    def _rounded_stats(self, x32: Array, var: Array) -> Array:
        """``(x - mean) * rstd`` with torch's CPU rounding of its statistics (*measured*, torch
        2.13, bit-exact on every shape tried): the mean and rstd are rounded to the half dtype;
        for bfloat16 also the sum of squared deviations from that rounded mean and the variance ``sum / n``
        before ``rstd = 1/sqrt(var + eps)`` (float16 keeps both in float32; *measured*: without
        the variance's rounding, 83-93% of InstanceNorm's elements matched on rows of 6, 9 or 18)."""
        dt = jnp.dtype(self.stat_round)
        n = _stats.count(x32.shape, self.axes, self.axis_name, self.axis_index_groups)
        # torch's sum / n (for half-precision rows often a tie at the half dtype's precision, which
        # the corrected two-pass mean, a float off, can round the other way)
        (plain_mean,) = _stats._row_means((x32,), self.axes, self.axis_name, self.axis_index_groups)
        m_r = _stats.round_to(plain_mean, dt)
        if dt == jnp.bfloat16:  # the squared deviations from the rounded mean
            sq = _stats.sum_square(x32 - m_r, self.axes, self.axis_name, self.axis_index_groups)
            var = _stats.round_to(_stats.round_to(sq, dt) / n, dt)
        r_r = _stats.round_to(_inv_sqrt(var + self.eps), dt)
        return (x32 - m_r) * r_r

    def tail(self, y: Array, *operands: Array | None) -> Array:
        return _affine(y, *(*operands, None, None)[:2]).astype(self.out_dtype)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunningStatSpec(NormSpec):
    """Normalization with given statistics (BatchNorm in eval mode):
    ``y = (x - running_mean) / sqrt(running_var + eps) * scale + bias`` in the statistics dtype,
    rounded once to ``out_dtype`` (torch's CPU kernel, *measured* bit-exact for bfloat16 and
    float16 with parameters of either dtype). ``axes`` are the axes the statistics were taken
    over (where the operands have size 1). ``strided``: torch's element-wise fallback for
    strided input, ops rounded to ``stat_round`` (``None``: the statistics dtype; see the module
    docstring)."""

    out_dtype: Any
    stat_round: Any = None
    strided: bool = False

    op = "running_stats"
    operands = ("scale", "bias", "running_mean", "running_var")
    centered = True

    @property
    def result_dtype(self) -> jnp.dtype:
        return jnp.dtype(self.out_dtype)

    def formula(self, x: Array, *operands: Array | None) -> Array:
        scale, bias, mean, var = operands
        assert mean is not None and var is not None
        x32 = _stats.upcast(x)
        sd = x32.dtype
        h = (x32 - mean.astype(sd)) * _inv_sqrt(var.astype(sd) + self.eps)
        if self.strided:
            dt = sd if self.stat_round is None else jnp.dtype(self.stat_round)
            y_s = strided_affine(x32, mean, strided_invstd(var, self.eps), scale, bias, dt)
            return forward_as(y_s, _affine(h, scale, bias)).astype(self.out_dtype)
        return self.tail(h, scale, bias)

    def tail(self, y: Array, *operands: Array | None) -> Array:
        return _affine(y, *(*operands, None, None)[:2]).astype(self.out_dtype)


@dataclasses.dataclass(frozen=True, kw_only=True)
class FrozenBatchNormSpec(NormSpec):
    """The DETR family's ``FrozenBatchNorm2d`` (transformers ``DetrFrozenBatchNorm2d`` and its
    copies), op by op as its ``forward`` is written::

        scale = weight * rsqrt(running_var + eps)
        shift = bias - running_mean * scale
        y = x * scale + shift

    Each op rounds to its operands' promoted dtype (``param_dtype`` for the first two lines, the
    promotion of ``x``'s and ``param_dtype`` for the last), so a bfloat16 ``x`` with float32
    buffers returns float32, as torch does. A different rounding order from BatchNorm's eval
    mode (``(x - mean) * rstd * weight + bias``): the two differ in the last bits."""

    param_dtype: Any
    out_dtype: Any

    op = "frozen_batch_norm"
    operands = ("scale", "bias", "running_mean", "running_var")
    centered = True

    @property
    def result_dtype(self) -> jnp.dtype:
        return jnp.dtype(self.out_dtype)

    def formula(self, x: Array, *operands: Array | None) -> Array:
        w, b, rm, rv = operands
        assert w is not None and b is not None and rm is not None and rv is not None
        pd, od = self.param_dtype, self.out_dtype
        sd = _stats.stats_dtype(_stats.promote(pd, od))

        def r(v: Array, dtype: Any) -> Array:
            return _stats.round_to(v, dtype)

        rstd = r(_inv_sqrt(r(rv.astype(sd) + self.eps, pd)), pd)
        scale = r(w.astype(sd) * rstd, pd)
        shift = r(b.astype(sd) - _unfused(r(rm.astype(sd) * scale, pd)), pd)
        y = r(_unfused(r(x.astype(sd) * scale, od)) + shift, od)
        return y.astype(od)

    def tail(self, y: Array, *operands: Array | None) -> Array:
        raise NotImplementedError("FrozenBatchNorm has no separate epilogue: see formula")


#: the activations GroupNorm can apply after its output (transformers' ``BitGroupNormActivation``)
OutputActivation = Literal["relu", "silu", "gelu"]
ACTIVATIONS: tuple[str, ...] = get_args(OutputActivation)


def activate(y: Array, activation: str | None) -> Array:
    """``activation(y)`` as torch applies it to the norm's output: on ``y`` (already in its
    output dtype), computed in float32 (float64 for float64) and rounded once to ``y.dtype``, as
    torch's CPU ``relu``/``silu``/``gelu`` kernels do for bfloat16/float16 (*measured*: relu and
    silu bit-exact). ``"gelu"`` is torch's erf form written as torch writes it,
    ``x * 0.5 * (1 + erf(x / sqrt(2)))``, with ``erf`` of a negative argument taken as
    ``erfc(-z) - 1`` (XLA's float32 ``erf`` saturates to -1 below about -3.9, where torch's does
    not); below x ~ -5, where ``1 + erf`` is a few float32 ulps, torch's ``erf`` still rounds
    differently (outputs under 1e-6 in magnitude: ~4% of a uniform sweep of [-8, 8], none of
    N(0, 1) inputs)."""
    if activation is None:
        return y
    h = y.astype(_stats.stats_dtype(y.dtype))
    if activation == "relu":
        h = jnp.maximum(h, jnp.zeros((), h.dtype))
    elif activation == "silu":
        h = jax.nn.silu(h)
    else:
        z = h * (1 / math.sqrt(2))
        e = jnp.where(z < 0, lax.erfc(-z) - 1, lax.erf(z))
        h = h * 0.5 * (1 + e)
    return h.astype(y.dtype)
