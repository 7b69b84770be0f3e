"""jln's one precision policy and its row statistics.

Policy (the README's numerics table states the same):

* Statistics are computed in float32 for float16, bfloat16 and float32 input, and in float64
  for float64 input. ``stats_dtype`` is the only place that rule lives.
* The mean is first taken about a per-row pivot (the row's first element) and rounded to one
  float ``hi``; a second pass over ``e = x - hi`` gives the residual ``c = mean(e)`` and
  ``mean(e^2)``: the centred row is ``e - c`` and the variance ``mean(e^2) - c^2`` (the
  corrected two-pass algorithm; clamped at 0, never negative). Subtracting the pivot is exact
  for data clustered around a large offset, so ``x = 3e5 + N(0, 1)`` keeps full float32
  accuracy where ``E[x^2] - E[x]^2`` (flax's ``use_fast_variance``) loses every digit, and
  ``x - hi`` rounds at the scale of ``|x - mean|``, so values near the mean keep torch's
  accuracy. float16 squares are taken in float32, so they never overflow.
* Reverse mode keeps only the input (in its own dtype), the per-row statistics tagged with
  ``checkpoint_name`` below, and the per-feature parameters: :data:`REMAT_POLICY` drops
  everything else and the backward pass recomputes it from ``x``.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax.ad_checkpoint import checkpoint_name

Array = jax.Array

#: Names of the per-row statistics that reverse mode saves (everything else is recomputed).
#: The third holds the gathered per-shard statistics of a norm over a sharded axis
#: (``axis_name=``), so the backward pass does not repeat the forward collective.
STAT_NAMES = ("jln.mean", "jln.rstd", "jln.shard_stats")
REMAT_POLICY = jax.checkpoint_policies.save_only_these_names(*STAT_NAMES)

_LOW_PRECISION = (jnp.dtype(jnp.float16), jnp.dtype(jnp.bfloat16))


def stats_dtype(dtype: Any) -> jnp.dtype:
    """float64 for float64 input, float32 for everything else (float16, bfloat16, float32)."""
    return jnp.dtype(jnp.float64) if jnp.dtype(dtype) == jnp.float64 else jnp.dtype(jnp.float32)


def promote(*dtypes: Any) -> jnp.dtype:
    """torch-style promotion of floating dtypes (bfloat16 with float16 gives float32).

    Promotion of dtypes (not arrays) is a static rule, so it runs under "standard" promotion:
    ``jnp.promote_types`` raises for bfloat16 with float32 under ``jax_numpy_dtype_promotion=
    "strict"``, which would make strict-mode users (and jln's tests) fail on mixed dtypes.
    """
    with jax.numpy_dtype_promotion("standard"):
        return functools.reduce(jnp.promote_types, dtypes[1:], jnp.dtype(dtypes[0]))


def is_low_precision(dtype: Any) -> bool:
    return jnp.dtype(dtype) in _LOW_PRECISION


def round_to(v: Array, dtype: Any) -> Array:
    """Round ``v`` to ``dtype``'s precision but keep ``v``'s (wider) dtype.

    This reproduces one rounding step of an eager framework inside a float32 computation.
    It never uses an ``astype`` round trip, which XLA drops inside a fusion under its default
    ``xla_allow_excess_precision`` (so a jitted ``x + residual`` in bfloat16 would reach the
    norm unrounded): ``lax.reduce_precision`` is an op XLA keeps. ``reduce_precision`` flushes
    float16 subnormals, so those (multiples of 2**-24) are rounded explicitly, half to even.

    The derivative rounds the tangent (and, in reverse mode, the cotangent) to ``dtype``'s
    precision, as torch's gradient is in ``dtype`` wherever its forward computes in it, but
    with one more exponent bit for float16: ``reduce_precision``'s own rule flushed every
    float16 tangent below 2**-14 to zero (half of a small float16 gradient); those now keep
    10 significant bits, where torch keeps float16's subnormal steps of 2**-24.
    """
    dtype = jnp.dtype(dtype)
    if jnp.finfo(dtype).bits >= jnp.finfo(v.dtype).bits:
        return v
    return _rounded(v, dtype)


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def _rounded(v: Array, dtype: jnp.dtype) -> Array:
    fi = jnp.finfo(dtype)
    rounded = lax.reduce_precision(v, exponent_bits=fi.nexp, mantissa_bits=fi.nmant)
    if dtype == jnp.float16:
        step = float(fi.smallest_subnormal)  # 2**-24, exact in float32
        # straight through where this body is differentiated as it is (the Pallas kernels
        # evaluate it without the custom rule: round() alone has derivative 0)
        subnormal = v + lax.stop_gradient(jnp.round(v / step) * step - v)
        rounded = jnp.where(jnp.abs(v) < float(fi.smallest_normal), subnormal, rounded)
    return rounded


@_rounded.defjvp
def _rounded_jvp(dtype: jnp.dtype, primals: tuple[Array], tangents: tuple[Array]) -> tuple[Array, Array]:
    # linear in dv (reduce_precision is its own transpose), so reverse mode rounds the same
    (v,), (dv,) = primals, tangents
    fi = jnp.finfo(dtype)
    extra = 1 if dtype == jnp.float16 else 0
    return _rounded(v, dtype), lax.reduce_precision(dv, exponent_bits=fi.nexp + extra, mantissa_bits=fi.nmant)


def upcast(x: Array) -> Array:
    """``x`` in its statistics dtype, holding exactly ``x``'s own values.

    Under ``jit`` XLA may fuse whatever produced a bfloat16 ``x`` (``x + residual``, say) into
    the norm and skip rounding it to bfloat16 (``xla_allow_excess_precision``); torch always
    rounds. :func:`round_to` restores that rounding, so jitted and eager results agree.
    """
    return round_to(x.astype(stats_dtype(x.dtype)), x.dtype)


def count(
    shape: tuple[int, ...],
    axes: tuple[int, ...],
    axis_name: Any = None,
    axis_index_groups: Any = None,
) -> int:
    """Number of elements per row; with ``axis_name``, over all devices (the global count)."""
    n = 1
    for a in axes:
        n *= shape[a]
    return n * shard_count(axis_name, axis_index_groups)


# --- statistics over a normalized axis sharded across devices (``axis_name=``) ----------------
# Each device holds an equal block of every row. RMSNorm needs one psum of the per-row sum of
# squares. LayerNorm all-gathers each device's per-row (rounded mean hi, its residual c, M2) in
# ONE collective and merges them (Chan et al.'s parallel update) about device 0's hi:
# differences of nearby hi are exact for clustered data, so the sharded result keeps the
# unsharded accuracy at large offsets (near the mean, see :func:`_merged_centered`). The transposes of the collectives
# (reduce-scatter, psum) do the cross-device reduction of dx in the backward pass.


def shard_count(axis_name: Any, axis_index_groups: Any = None) -> int:
    """How many devices share each row: 1 without ``axis_name``."""
    if axis_name is None:
        return 1
    if axis_index_groups is not None:
        return len(axis_index_groups[0])
    return int(lax.axis_size(axis_name))


def _collective(op: Any, v: Array, axis_name: Any, groups: Any) -> Array:
    try:
        return op(v, axis_name, axis_index_groups=groups)
    except NotImplementedError as e:
        if groups is None:
            raise
        raise NotImplementedError(
            "axis_index_groups is not supported in this mapped context (jax.shard_map with "
            "check_vma=True); use jax.pmap or jax.shard_map(..., check_vma=False)."
        ) from e


def _merged_centered(
    x32: Array, pivot: Array, axes: tuple[int, ...], axis_name: Any, groups: Any
) -> tuple[Array, Array, Array]:
    """``(mean, d, var)`` of rows split across ``axis_name``; one all_gather of 3 values/row.

    Each device sends its local rounded mean ``hi``, the residual ``c`` of its block about it
    and its sum of squared deviations (:func:`_about`); the merge takes each
    block's mean about device 0's ``hi`` (a difference of two nearby floats plus a small
    residual) and the global result as a rounded mean plus its residual again, so each device
    centres its block as ``(x - hi) - c`` (the unsharded rounding). Weaker than unsharded only
    in the merged residual: the differences of the blocks' ``hi`` round at the scale of the
    blocks' spread of means (about std / sqrt(block width)), not of the rows' own sums.
    """
    n_loc = count(x32.shape, axes)
    hi = _rounded_mean(x32, pivot, axes)
    _, c, sq = _about(x32, hi, axes)
    m2 = n_loc * jnp.maximum(sq - c * c, 0)
    local = jnp.stack([hi, c, m2])
    gathered = _collective(lax.all_gather, local, axis_name, groups)  # [P, 3, ...]
    gathered = checkpoint_name(gathered, STAT_NAMES[2])
    hi_all, c_all, m2_all = lax.stop_gradient(gathered[:, 0]), gathered[:, 1], gathered[:, 2]
    h0 = hi_all[:1]  # device 0's rounded mean, rank kept: no implicit rank promotion
    delta = (hi_all - h0) + c_all  # each block's mean about h0
    mu = jnp.mean(delta, axis=0, keepdims=True)
    dev = delta - mu
    var = (jnp.sum(m2_all, axis=0) + n_loc * jnp.sum(dev * dev, axis=0)) / (n_loc * delta.shape[0])
    # the global mean h0 + mu as a rounded float and its residual (two-sum, exact)
    g_hi, g_c = _two_sum(h0[0], mu[0])
    return g_hi + g_c, (x32 - g_hi) - g_c, var


def _two_sum(a: Array, b: Array) -> tuple[Array, Array]:
    """``(s, t)`` with ``s = fl(a + b)`` and ``s + t == a + b`` exactly (Knuth's two-sum); ``s``
    is outside autodiff, so ``t`` carries the derivative of ``a + b``."""
    s = lax.stop_gradient(a + b)
    b_part = lax.stop_gradient(s - a)
    return s, (a - (s - b_part)) + (b - b_part)


def _rounded_mean(x32: Array, pivot: Array, axes: tuple[int, ...]) -> Array:
    """The row mean rounded to one float, ``pivot + mean(x - pivot)`` (keepdims), outside
    autodiff: the centred values :func:`_about` gives do not depend on it."""
    return lax.stop_gradient(pivot + jnp.mean(x32 - pivot, axis=axes, keepdims=True))


def _about(x32: Array, hi: Array, axes: tuple[int, ...]) -> tuple[Array, Array, Array]:
    """``(e, c, sq)``: ``e = x - hi`` for the rounded mean ``hi``, its row mean ``c`` (the
    residual of ``hi``) and ``mean(e^2)`` (keepdims).

    ``x - hi`` rounds at the scale of ``|x - mean|``, so values near the mean keep their digits
    (centring about the pivot alone rounded ``x - pivot`` at the scale of ``|x - pivot|``, then
    again on subtracting the mean about it: ~3e-7 near the mean on N(0, 1) rows, where torch's
    ``x - mean`` is ~1e-8), and ``c`` restores what ``hi``'s rounding and its sum lost (up to
    half an ulp of the mean: 5e-4 at an offset of 1e4). The centred row is ``e - c`` and its
    variance ``sq - c^2`` (the corrected two-pass algorithm), so one pass over ``e`` gives both.
    """
    e = x32 - hi
    c, sq = _row_means((e, e * e), axes)
    return e, c, sq


def _pivot(x: Array, axes: tuple[int, ...]) -> Array:
    """The first element of each row (keepdims), outside autodiff.

    The normalized result is invariant to the pivot, so stopping its gradient is exact and
    keeps the pivot out of every derivative, at every order.
    """
    index = tuple(slice(0, 1) if i in axes else slice(None) for i in range(x.ndim))
    return lax.stop_gradient(x[index])


@jax.custom_jvp
def _rsqrt(v: Array) -> Array:
    return lax.rsqrt(v)


@_rsqrt.defjvp
def _rsqrt_jvp(primals: tuple[Array], tangents: tuple[Array]) -> tuple[Array, Array]:
    # d rsqrt(v) = -1/2 rsqrt(v)^3 dv: written with the result alone, dv multiplied by r one
    # factor at a time (dv scales as v and r as v^-1/2) where r^3 alone leaves float32's
    # normal range (std above ~5e12, or below ~1e-13 with eps=0). A norm's first derivative
    # does not come here (:func:`_normalized` states it); higher ones do.
    (v,), (dv,) = primals, tangents
    r = lax.rsqrt(v)
    return r, -0.5 * (((dv * r) * r) * r)


def centered(
    x32: Array, axes: tuple[int, ...], axis_name: Any = None, axis_index_groups: Any = None
) -> tuple[Array, Array, Array]:
    """Return ``(mean, d, var)``: the row mean, ``x - mean`` and the biased variance.

    ``x32`` is already in the statistics dtype. ``mean`` and ``var`` keep the reduced axes
    (size 1) so they broadcast against ``x32``. With ``axis_name`` the rows are split across
    that mapped axis and the statistics are those of the whole (global) row.

    ``d = (x - hi) - c`` with ``hi`` the mean rounded to one float and ``c`` the row mean of
    ``x - hi`` (:func:`_about`); ``hi`` is the per-row statistic reverse mode keeps.
    """
    pivot = _pivot(x32, axes)
    if axis_name is not None:
        return _merged_centered(x32, pivot, axes, axis_name, axis_index_groups)
    # reverse mode keeps hi (and rstd); the backward recomputes c from x, one more row sum
    hi = checkpoint_name(_rounded_mean(x32, pivot, axes), STAT_NAMES[0])
    e, c, sq = _about(x32, hi, axes)
    return hi + c, e - c, jnp.maximum(sq - c * c, 0)


def masked_normalized(
    x32: Array, mask: Array, axes: tuple[int, ...], eps: float, centered: bool,
    axis_name: Any = None, axis_index_groups: Any = None,
) -> Array:
    """``(x - mean) * rsqrt(var + eps)`` (``centered``) or ``x * rsqrt(mean(x^2) + eps)`` with
    the statistics over the ``mask``-ed elements of each row (of the whole row across
    ``axis_name``); every element is normalized with them.

    Centred rows are taken about a pivot, the masked mean rounded to the statistics dtype (the
    row's first element, the unmasked pivot, may be masked out), so ``x - pivot`` is exact for
    data clustered around a large offset; the saved mean is named as :func:`centered`'s.
    """

    def mean(v: Array) -> Array:
        return masked_mean(v, mask, axes, axis_name, axis_index_groups)

    if not centered:
        return x32 * inv_std(mean(x32 * x32), eps)
    xs = x32 - lax.stop_gradient(mean(x32))
    d = xs - checkpoint_name(mean(xs), STAT_NAMES[0])
    return d * inv_std(mean(d * d), eps)


def masked_mean(
    v: Array, mask: Array, axes: tuple[int, ...], axis_name: Any = None, axis_index_groups: Any = None
) -> Array:
    """The mean of ``v`` over ``axes`` (keepdims) of the elements where ``mask`` is true (the
    whole row's across ``axis_name``); a row with none gives NaN, as torch's masked mean."""

    def total(u: Array) -> Array:
        t = jnp.sum(u, axis=axes, keepdims=True)
        return t if axis_name is None else _collective(lax.psum, t, axis_name, axis_index_groups)

    return total(jnp.where(mask, v, 0)) / total(mask.astype(v.dtype))


def inv_std(var: Array, eps: float) -> Array:
    """``1 / sqrt(var + eps)``, tagged for the remat policy."""
    return checkpoint_name(_rsqrt(var + eps), STAT_NAMES[1])


def normalized(
    v: Array, axes: tuple[int, ...], eps: float, centered_v: tuple[Array, Array] | None = None,
    axis_name: Any = None, axis_index_groups: Any = None,
) -> Array:
    """``v``'s rows over their root mean square (RMSNorm); with ``centered_v = (d, var)`` from
    :func:`centered` (``v`` less its row mean, and the variance), ``d / sqrt(var + eps)``
    (LayerNorm). rstd is :func:`inv_std_of`'s, the derivative :func:`_normalized`'s.
    """
    d, var = (v, None) if centered_v is None else centered_v
    r = inv_std_of(d, axes, eps, var, axis_name, axis_index_groups)
    # the global row length, counted here: the rule below may be traced where the mapped axis
    # is no longer bound (grad of a jit of a vmap with axis_name), so it must not ask its size
    n = count(v.shape, axes, axis_name, axis_index_groups)
    return _normalized(v, d, r, centered_v is not None, axes, axis_name, axis_index_groups, n)


@functools.partial(jax.custom_jvp, nondiff_argnums=(3, 4, 5, 6, 7))
def _normalized(
    v: Array, d: Array, r: Array, is_centered: bool, axes: tuple[int, ...], axis_name: Any, groups: Any, n: int,
) -> Array:
    """``h = d * r``, differentiated through ``v`` alone (``v`` carries the tangent)."""
    return d * r


@_normalized.defjvp
def _normalized_jvp(
    is_centered: bool, axes: tuple[int, ...], axis_name: Any, groups: Any, n: int,
    primals: tuple[Array, Array, Array], tangents: tuple[Array, Array, Array],
) -> tuple[Array, Array]:
    # With d = v - mean(v) (LayerNorm) or v (RMSNorm) and r = rsqrt(mean(d^2) + eps):
    #     dh = r * (dv - mean(dv) - h * mean(h * dv))      (RMSNorm: no mean(dv) term)
    # one rule in v's tangent (d's and r's follow from it and are not read). h and both means
    # are O(dv), so no partial product leaves float32's normal range. Chained through var and
    # r instead, r's tangent (-r^3 mean(d dv) ~ dv/std^2) and var's cotangent (~ ct/std^2) are
    # ~1e-37 at std 1e18; XLA flushes what falls below 2**-126, and dx was 1-2% off there.
    # Reverse mode transposes these ops: r*ct - mean(r*ct) - h * mean(h * (r*ct)), the kernels'
    # backward formula. Means are of the whole row: with axis_name, one psum of both per-row
    # sums (the statistics' own collectives then get no cotangent). Higher derivatives
    # differentiate these ops, d's and r's through their own definitions.
    (_, d, r), (dv, _, _) = primals, tangents
    h = d * r
    if is_centered:
        mean_dv, proj = _row_means((dv, h * dv), axes, axis_name, groups, n)
        dv = dv - mean_dv
    else:
        (proj,) = _row_means((h * dv,), axes, axis_name, groups, n)
    return h, r * (dv - h * proj)


def tiny_eps(eps: float, dtype: Any) -> bool:
    """Whether ``eps`` is too small to stand in for a variance below the statistics dtype's
    normal range (float32: eps < 2**-101, e.g. eps=0).

    XLA flushes subnormal results to zero, so the squares of a row with std below ~1e-19
    (float32 statistics) sum to 0 and ``1/sqrt(0 + eps)`` is inf or far off, where torch (which
    keeps subnormals) is finite. An eps at least ``2**(nmant + 2)`` times the smallest normal
    hides any flushed variance below the statistics dtype's rounding; a smaller one takes
    :func:`inv_std_of`'s scaled sum.
    """
    fi = jnp.finfo(stats_dtype(dtype))
    return float(eps) < float(fi.smallest_normal) * 2.0 ** (fi.nmant + 2)


def inv_std_of(
    v: Array, axes: tuple[int, ...], eps: float, var: Array | None = None,
    axis_name: Any = None, axis_index_groups: Any = None,
) -> Array:
    """``1 / sqrt(mean(v^2) + eps)`` for ``v`` centered (LayerNorm) or not (RMSNorm).

    ``var`` is ``mean(v^2)`` when the caller has it. With a :func:`tiny_eps` the squares are
    summed after scaling each row by the power of two that brings its largest ``|v|`` to
    [0.5, 1) (exact, outside autodiff; at most ``2**(maxexp/2)``, so ``eps`` scaled alike stays
    finite; applied as two normal factors): a row's variance is then found down to the
    statistics dtype's smallest normal magnitudes, where the plain sum flushes it to 0.
    """
    if not tiny_eps(eps, v.dtype):
        if var is None:
            var = mean_square(v, axes, axis_name, axis_index_groups)
        return inv_std(var, eps)
    top = lax.stop_gradient(jnp.max(jnp.abs(v), axis=axes, keepdims=True))
    if axis_name is not None:
        top = _collective(lax.pmax, top, axis_name, axis_index_groups)
    _, e = jnp.frexp(top)  # top = m * 2**e, m in [0.5, 1)
    e = jnp.maximum(e, -(jnp.finfo(v.dtype).maxexp // 2))
    # 2**-e as two normal factors (2**-127 alone is subnormal, which XLA flushes to 0)
    one = jnp.ones_like(top)
    half_a, half_b = jnp.ldexp(one, -(e // 2)), jnp.ldexp(one, e // 2 - e)
    var_down = mean_square((v * half_a) * half_b, axes, axis_name, axis_index_groups)
    eps_down = (((eps * half_a) * half_b) * half_a) * half_b
    return checkpoint_name((_rsqrt(var_down + eps_down) * half_a) * half_b, STAT_NAMES[1])


def sum_square(
    x32: Array, axes: tuple[int, ...], axis_name: Any = None, axis_index_groups: Any = None
) -> Array:
    """``sum(x^2)`` over ``axes`` (keepdims); with ``axis_name``, one psum over the devices."""
    s = jnp.sum(x32 * x32, axis=axes, keepdims=True)
    if axis_name is None:
        return s
    return _collective(lax.psum, s, axis_name, axis_index_groups)


def mean_square(
    x32: Array, axes: tuple[int, ...], axis_name: Any = None, axis_index_groups: Any = None
) -> Array:
    """``mean(x^2)`` over ``axes`` (keepdims), in ``x32``'s dtype; global with ``axis_name``."""
    (ms,) = _row_means((x32 * x32,), axes, axis_name, axis_index_groups)
    return ms


def _row_means(
    parts: tuple[Array, ...], axes: tuple[int, ...], axis_name: Any = None, axis_index_groups: Any = None,
    n: int | None = None,
) -> list[Array]:
    """The row mean (keepdims) of each array in ``parts``; with ``axis_name``, of the whole
    row: one psum of all the per-row sums (stacked) over the devices (``n``: the global row
    length, when the caller counted it)."""
    if axis_name is None:
        return [jnp.mean(p, axis=axes, keepdims=True) for p in parts]
    if n is None:
        n = count(parts[0].shape, axes, axis_name, axis_index_groups)
    sums = jnp.stack([jnp.sum(p, axis=axes, keepdims=True) for p in parts])
    return list(_collective(lax.psum, sums, axis_name, axis_index_groups) / n)


def row_mean(v: Array, axes: tuple[int, ...], axis_name: Any = None, axis_index_groups: Any = None) -> Array:
    """The row mean of ``v`` (keepdims), in ``v``'s dtype; of the whole row with ``axis_name``."""
    return _row_means((v,), axes, axis_name, axis_index_groups)[0]


def safe_sqrt(v: Array) -> Array:
    """``sqrt(v)`` whose derivative at ``v == 0`` is 0 instead of ``inf`` (so ``0 * inf``
    never produces a NaN gradient for an all-zero row)."""
    positive = v > 0
    return jnp.where(positive, jnp.sqrt(jnp.where(positive, v, 1)), 0)


@jax.custom_jvp
def forward_as(value: Array, like: Array) -> Array:
    """``value``, differentiated as ``like`` (two computations of the same quantity: one rounded
    as torch's forward rounds, one whose derivative is the float32 formula's)."""
    return value


@forward_as.defjvp
def _forward_as_jvp(primals: tuple[Array, Array], tangents: tuple[Array, Array]) -> tuple[Array, Array]:
    return primals[0], tangents[1]


def unfused(p: Array) -> Array:
    """``p``, computed and rounded on its own as torch's separate ops do: XLA's CPU backend
    contracts ``a * b + c`` into one fused multiply-add and rewrites ``1 / sqrt(v)`` as
    ``rsqrt(v)`` (*measured*: each 1 ulp off torch on many elements of a FrozenBatchNorm2d;
    ``optimization_barrier`` and ``reduce_precision`` are simplified away). An integer round trip of the bits, xor'ed with
    a zero the compiler cannot fold (``p != p``: 0 unless NaN, which stays NaN), keeps the two
    ops apart; the derivative is ``p``'s."""
    bits_t = jnp.uint32 if p.dtype == jnp.float32 else jnp.uint64 if p.dtype == jnp.float64 else None
    if bits_t is None:
        return p
    bits = lax.bitcast_convert_type(lax.stop_gradient(p), bits_t) ^ (p != p).astype(bits_t)
    return forward_as(lax.bitcast_convert_type(bits, p.dtype), p)
