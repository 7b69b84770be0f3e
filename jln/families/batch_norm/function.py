"""BatchNorm, InstanceNorm, GroupNorm and FrozenBatchNorm2d with torch's semantics: the public
functions (the formulas are :mod:`jln.families.batch_norm.spec`'s).

Pure functions: nothing is held between calls. :func:`batch_norm` and :func:`instance_norm`
return the output and the running statistics after this step (torch updates its buffers in
place); the caller keeps them (the linen and NNX modules keep them in ``"batch_stats"``).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jln import _eager, _stats, _validate
from jln._platform import Impl
from jln.families.batch_norm.spec import (
    ACTIVATIONS,
    CONVENTIONS,
    BatchNormConvention,
    BatchStatSpec,
    FrozenBatchNormSpec,
    OutputActivation,
    RunningStatSpec,
    activate,
)

Array = jax.Array


class RunningStats(NamedTuple):
    """The running statistics after one call (torch's buffers of the same names); a field is
    ``None`` where none was given."""

    mean: Array | None
    var: Array | None
    num_batches_tracked: Array | None


def _per_channel(fn: str, x: Any, c: int, **arrays: Any) -> dict[str, Array | None]:
    """Check each per-channel array (shape ``(C,)``); return them reshaped to broadcast."""
    out: dict[str, Array | None] = {}
    for name, p in arrays.items():
        _validate.check_param(p, name, x.shape, (c,), fn)
        out[name] = None if p is None else _validate.expand_param(jnp.asarray(p), x.ndim, (c,))
    return out


def _xla_only(fn: str, impl: str) -> None:
    _validate.check_choice(impl, "impl", ("auto", "xla", "native", "pallas"), fn)
    if impl in ("native", "pallas"):
        raise ValueError(
            f"{fn}: impl={impl!r} is not available here: jln has no {impl} kernels for the "
            f"batch-statistics norms yet (they run on the XLA path). Use impl='auto' or 'xla'."
        )


def _stat_round(x: Any, *params: Any) -> Any:
    """torch's CPU BatchNorm rounds the batch statistics to a half-precision ``x``'s dtype
    unless a parameter is wider (its mixed-dtype path): see :mod:`jln.families.batch_norm.spec`."""
    if not _stats.is_low_precision(x.dtype):
        return None
    if any(p is not None and jnp.dtype(p.dtype) != jnp.dtype(x.dtype) for p in params):
        return None
    return jnp.dtype(x.dtype)


def _momentum(fn: str, momentum: Any) -> float | None:
    if momentum is None:
        return None
    try:
        m = float(momentum)
    except (TypeError, ValueError):
        m = float("nan")
    if isinstance(momentum, bool) or not 0.0 <= m <= 1.0:
        raise ValueError(f"{fn}: `momentum` must be a number in [0, 1] or None; received {momentum!r}.")
    return m


def _updated(old: Array, batch: Array, factor: Any) -> Array:
    """``(1 - factor) * old + factor * batch`` in the statistics dtype, rounded once to
    ``old``'s dtype (torch's running-statistics update)."""
    sd = _stats.stats_dtype(_stats.promote(old.dtype, jnp.float32))
    f = jnp.asarray(factor, sd)
    return ((1 - f) * old.astype(sd) + f * batch.astype(sd)).astype(old.dtype)


def _run(fn: str, spec: Any, x: Array, operands: tuple[Any, ...]) -> Any:
    with jax.named_scope(fn):
        return spec.body(x, *operands)


@_eager.compiled_when_eager("x", "running_mean", "running_var", "scale", "bias", "num_batches_tracked")
def batch_norm(
    x: Array,
    running_mean: Array | None = None,
    running_var: Array | None = None,
    scale: Array | None = None,
    bias: Array | None = None,
    *,
    training: bool,
    momentum: float | None = 0.1,
    eps: float = 1e-5,
    num_batches_tracked: Array | None = None,
    channel_axis: int = 1,
    axis_name: Any = None,
    axis_index_groups: Any = None,
    impl: Impl = "auto",
    convention: BatchNormConvention = "torch",
) -> tuple[Array, RunningStats]:
    r"""Batch normalization with ``torch.nn.functional.batch_norm``'s semantics, as a pure function.

    .. math::

        y = \frac{x - \mathrm{E}[x]}{\sqrt{\mathrm{Var}[x] + \epsilon}} \cdot \mathrm{scale} + \mathrm{bias}

    per channel, the statistics over every axis but ``channel_axis`` (batch and spatial axes),
    with the biased variance and ``eps`` inside the square root. In training mode (or without
    running statistics) they are the batch's, and the running statistics are updated as
    torch's ``nn.BatchNorm*d`` does::

        running_mean = (1 - momentum) * running_mean + momentum * mean
        running_var  = (1 - momentum) * running_var  + momentum * var * n / (n - 1)

    (the **unbiased** batch variance, ``n`` the number of values per channel; flax's momentum
    0.99 is the complement of torch's 0.1, and flax stores the biased variance).
    ``momentum=None`` takes the cumulative average: ``momentum = 1 / num_batches_tracked``
    after the increment. In eval mode (``training=False``) with running statistics, those
    normalize ``x`` and nothing changes.

    Statistics are float32 (float64 for float64 input), from jln's corrected two-pass
    algorithm. A bfloat16/float16 ``x`` with parameters of its own dtype (or none) has its batch
    mean and rstd rounded to that dtype before use, as torch's CPU kernel does; with float32
    parameters they stay float32. The output is rounded once to ``x.dtype``.

    ``convention="strided"`` reproduces torch's path for an input that is neither contiguous nor
    channels-last (``bn(x.transpose(1, 2)).transpose(1, 2)``, transformers' PatchTST and
    PatchTSMixer; use it with ``channel_axis=-1``): ``((x - mean) * invstd) * scale + bias``
    op by op, each op rounded to the parameters' dtype when they are of ``x``'s half dtype (one
    rounding at the end with float32 parameters); in eval mode ``invstd = 1 / sqrt(running_var
    + eps)`` in the buffers' dtype, each op rounded; in training mode the batch mean
    (``sum / n``) and ``invstd`` rounded once each, and the running mean updated with that
    rounded mean.

    Args:
      x: floating array ``[N, C, *spatial]`` (``channel_axis=1``, torch's layout) or
        ``[N, *spatial, C]`` with ``channel_axis=-1``.
      running_mean, running_var: ``[C]`` running statistics (torch's buffers), or ``None``
        (torch's ``track_running_stats=False``: always batch statistics, nothing updated).
      scale, bias: optional ``[C]`` affine parameters (torch's ``weight``/``bias``).
      training: torch's ``module.training``; keyword-only and required (no hidden mode).
      momentum: weight of the batch statistics in the update, torch's default 0.1; ``None``
        for the cumulative average (then ``num_batches_tracked`` is required).
      eps: added to the variance inside the square root; torch's default 1e-5.
      num_batches_tracked: optional integer scalar, incremented by one per training step.
      channel_axis: the channel axis (1: NCHW, -1: NHWC).
      axis_name: inside ``jax.shard_map``/``jax.pmap`` over a batch split across devices, the
        mapped axis name: statistics of the global batch (torch's ``SyncBatchNorm``).
      axis_index_groups: optional groups of ``axis_name``'s indices, as in ``jax.lax.psum``.
      impl: ``"auto"`` or ``"xla"`` (jln has no kernels for this family; ``"native"`` and
        ``"pallas"`` raise ``ValueError``).
      convention: ``"torch"`` (torch's kernels for contiguous or channels-last input) or
        ``"strided"`` (its element-wise fallback for any other strides).

    Returns:
      ``(y, stats)``: ``y`` of ``x.shape`` and ``x.dtype``; ``stats`` a :class:`RunningStats`
      ``(mean, var, num_batches_tracked)``, updated in training mode, each in its input dtype
      (``None`` where not given). The running statistics carry no gradient.

    Raises:
      TypeError: a non-floating ``x`` or parameter; ``eps`` not a number.
      ValueError: a parameter whose shape is not ``(C,)``; ``channel_axis`` is 0 or out of
        range; only one of the running statistics given; ``momentum`` outside [0, 1], or
        ``None`` without ``num_batches_tracked``; a training step over one value per channel
        (torch: "Expected more than 1 value per channel"); ``impl`` ``"native"``/``"pallas"``;
        an unknown ``convention``.
      NameError: ``axis_name`` is not bound.

    Example:
      >>> import jax.numpy as jnp, numpy as np, jln
      >>> x = jnp.arange(8.0).reshape(4, 2)
      >>> y, stats = jln.batch_norm(x, jnp.zeros(2), jnp.ones(2), training=True)
      >>> np.asarray(y[:, 0]).round(3), stats.mean
      (array([-1.342, -0.447,  0.447,  1.342], dtype=float32), Array([0.3, 0.4], dtype=float32))

    Reference: Ioffe and Szegedy, "Batch Normalization: Accelerating Deep Network Training by
    Reducing Internal Covariate Shift" (2015).
    """
    fn = "jln.batch_norm"
    _validate.check_choice(convention, "convention", CONVENTIONS, fn)
    c = _validate.channel_axis(fn, x, channel_axis)
    axes = tuple(a for a in range(x.ndim) if a != c)
    return _stat_norm(
        fn, x, c, axes, running_mean, running_var, scale, bias, training=training, momentum=momentum,
        eps=eps, num_batches_tracked=num_batches_tracked, axis_name=axis_name,
        axis_index_groups=axis_index_groups, impl=impl, batch_axis_reduced=True,
        strided=convention == "strided",
    )


def _stat_norm(
    fn: str, x: Array, c: int, axes: tuple[int, ...], running_mean: Any, running_var: Any, scale: Any,
    bias: Any, *, training: Any, momentum: Any, eps: Any, num_batches_tracked: Any, axis_name: Any,
    axis_index_groups: Any, impl: str, batch_axis_reduced: bool, strided: bool = False,
) -> tuple[Array, RunningStats]:
    """BatchNorm (``batch_axis_reduced``) or InstanceNorm (statistics per sample; running
    statistics averaged over the batch, as torch's ``instance_norm`` does); ``strided``:
    torch's fallback for strided input (BatchNorm's ``convention="strided"``)."""
    _xla_only(fn, impl)
    if not isinstance(training, (bool, jnp.bool_)):
        raise TypeError(f"{fn}: `training` must be a Python bool; received {training!r}.")
    eps = _validate.check_eps(eps, fn)
    m = _momentum(fn, momentum)
    if (running_mean is None) != (running_var is None):
        raise ValueError(
            f"{fn}: give both running_mean and running_var, or neither (torch's "
            f"track_running_stats=False); received only "
            f"{'running_mean' if running_var is None else 'running_var'}."
        )
    p = _per_channel(fn, x, c, scale=scale, bias=bias, running_mean=running_mean, running_var=running_var)
    name, groups = _validate.check_axis_name(axis_name, axis_index_groups, fn)
    tracked = running_mean is not None
    if num_batches_tracked is not None:
        nbt = jnp.asarray(num_batches_tracked)
        if nbt.shape != () or not jnp.issubdtype(nbt.dtype, jnp.integer):
            raise ValueError(
                f"{fn}: `num_batches_tracked` must be an integer scalar (torch's int64 buffer); "
                f"received dtype {nbt.dtype} with shape {tuple(nbt.shape)}."
            )
    stats = RunningStats(running_mean, running_var, num_batches_tracked)
    stat_round = _stat_round(x, scale, bias, running_mean, running_var)
    if tracked and not training:
        spec_e = RunningStatSpec(axes=axes, eps=eps, out_dtype=x.dtype, stat_round=stat_round, strided=strided)
        y = _run(fn, spec_e, x, (p["scale"], p["bias"], p["running_mean"], p["running_var"]))
        return y, stats
    n = _stats.count(x.shape, axes, name, groups)
    if n == 1 or (tracked and n == 0):
        # torch raises for one value per channel whenever it takes batch statistics, tracked or not
        raise ValueError(
            f"{fn}: expected more than 1 value per channel when taking batch statistics (the "
            f"variance of one value is 0 and its unbiased estimate undefined; torch raises too); "
            f"received x.shape={tuple(x.shape)}. Use a larger batch, or training=False with "
            f"running statistics."
        )
    if tracked and m is None and num_batches_tracked is None and batch_axis_reduced:
        raise ValueError(
            f"{fn}: momentum=None takes the cumulative average over num_batches_tracked; pass "
            f"num_batches_tracked (an integer scalar, 0 at the start), or a float momentum."
        )
    spec = BatchStatSpec(
        axes=axes, eps=eps, out_dtype=x.dtype, axis_name=name, axis_index_groups=groups,
        stat_round=stat_round, strided=strided,
    )
    y, mean, var = _run(fn, spec, x, (p["scale"], p["bias"]))
    if not tracked or not training:
        return y, stats
    assert running_mean is not None and running_var is not None
    mean_c, unbiased = mean, var * (n / (n - 1))
    if not batch_axis_reduced:  # InstanceNorm: per-sample statistics averaged over the batch
        mean_c, unbiased = jnp.mean(mean_c, axis=0, keepdims=True), jnp.mean(unbiased, axis=0, keepdims=True)
    mean_c, unbiased = mean_c.reshape(-1), unbiased.reshape(-1)
    if batch_axis_reduced and num_batches_tracked is not None:
        nbt = jnp.asarray(num_batches_tracked) + 1
        stats = stats._replace(num_batches_tracked=nbt)
    if m is None:
        if not batch_axis_reduced:  # torch's InstanceNorm passes momentum 0.0 for None
            return y, stats
        factor: Any = 1.0 / stats.num_batches_tracked.astype(jnp.float32)  # type: ignore[union-attr]
    else:
        factor = m
    return y, stats._replace(
        mean=_updated(jnp.asarray(running_mean), mean_c, factor),
        var=_updated(jnp.asarray(running_var), unbiased, factor),
    )


@_eager.compiled_when_eager("x", "running_mean", "running_var", "scale", "bias")
def instance_norm(
    x: Array,
    running_mean: Array | None = None,
    running_var: Array | None = None,
    scale: Array | None = None,
    bias: Array | None = None,
    *,
    training: bool = True,
    momentum: float | None = 0.1,
    eps: float = 1e-5,
    channel_axis: int = 1,
    impl: Impl = "auto",
) -> tuple[Array, RunningStats]:
    r"""Instance normalization with ``torch.nn.InstanceNorm*d``'s semantics, as a pure function.

    .. math::

        y = \frac{x - \mathrm{E}[x]}{\sqrt{\mathrm{Var}[x] + \epsilon}} \cdot \mathrm{scale} + \mathrm{bias}

    per sample and channel, the statistics over the spatial axes (biased variance, ``eps``
    inside the square root). With running statistics (torch's ``track_running_stats=True``)
    a training call updates them with the batch average of the per-sample means and unbiased
    variances (``momentum`` as :func:`batch_norm`; ``None`` leaves them unchanged, as torch's
    module passes momentum 0 then) and an eval call (``training=False``) normalizes with them.
    Without running statistics every call uses the input's (torch's default). Dtypes as
    :func:`batch_norm`.

    Args:
      x: floating array ``[N, C, *spatial]`` (or ``[N, *spatial, C]`` with ``channel_axis=-1``),
        at least one spatial axis. For torch's unbatched ``[C, L]`` input pass ``x[None]``.
      running_mean, running_var: optional ``[C]`` running statistics.
      scale, bias: optional ``[C]`` affine parameters (torch's default ``affine=False``: none).
      training: torch's ``module.training`` (only read with running statistics).
      momentum, eps, channel_axis, impl: as :func:`batch_norm`.

    Returns:
      ``(y, stats)``: ``y`` of ``x.shape`` and ``x.dtype``; ``stats`` a :class:`RunningStats`
      (``num_batches_tracked`` is always ``None``: torch's InstanceNorm does not count).

    Raises:
      TypeError, ValueError: as :func:`batch_norm`; ``x`` without a spatial axis.

    Example:
      >>> import jax.numpy as jnp, numpy as np, jln
      >>> y, _ = jln.instance_norm(jnp.arange(8.0).reshape(1, 2, 4))
      >>> np.asarray(y[0, 0]).round(3)
      array([-1.342, -0.447,  0.447,  1.342], dtype=float32)

    Reference: Ulyanov, Vedaldi and Lempitsky, "Instance Normalization: The Missing Ingredient
    for Fast Stylization" (2016).
    """
    fn = "jln.instance_norm"
    c = _validate.channel_axis(fn, x, channel_axis, min_ndim=3)
    axes = tuple(a for a in range(1, x.ndim) if a != c)
    return _stat_norm(
        fn, x, c, axes, running_mean, running_var, scale, bias, training=training, momentum=momentum,
        eps=eps, num_batches_tracked=None, axis_name=None, axis_index_groups=None, impl=impl,
        batch_axis_reduced=False,
    )


@_eager.compiled_when_eager("x", "scale", "bias", "mask")
def group_norm(
    x: Array,
    num_groups: int,
    scale: Array | None = None,
    bias: Array | None = None,
    *,
    eps: float = 1e-5,
    channel_axis: int = 1,
    impl: Impl = "auto",
    frame_axis: int | None = None,
    activation: OutputActivation | None = None,
    mask: Array | None = None,
) -> Array:
    r"""Group normalization, numerically ``torch.nn.functional.group_norm``'s.

    .. math::

        y = \frac{x - \mathrm{E}_g[x]}{\sqrt{\mathrm{Var}_g[x] + \epsilon}} \cdot \mathrm{scale}_c + \mathrm{bias}_c

    The ``C`` channels are split into ``num_groups`` consecutive groups; each sample's
    statistics are taken over a group's ``C / num_groups`` channels and all spatial positions
    (biased variance, ``eps`` inside the square root); the affine is per channel. Statistics
    in float32 (float64 for float64 input), the output rounded once to ``x.dtype`` (torch's CPU
    kernel does the same for bfloat16/float16, with parameters of either dtype).

    ``frame_axis`` normalizes each frame of a video on its own: the statistics are taken per
    sample, group **and** index along that axis (the video VAEs' per-frame GroupNorm, which fold
    the frames into the batch: diffusers' ``CosmosCausalGroupNorm``, ``MochiChunkedGroupNorm3D``,
    ``MiniMaxH3VideoGroupNorm``). ``activation`` applies ``"relu"``, ``"silu"`` or ``"gelu"`` (erf)
    to the rounded output, computed in float32 and rounded once (transformers'
    ``BitGroupNormActivation``). ``mask`` takes each group's statistics over the elements where
    it is nonzero only (the masked GroupNorm of transformers' PE audio/video encoders, whose
    padded frames must not count); every element is still normalized with them.

    Args:
      x: floating array ``[N, C, *spatial]`` (or ``[N, *spatial, C]`` with ``channel_axis=-1``).
      num_groups: number of groups; must divide ``C``.
      scale, bias: optional ``[C]`` (torch's ``weight``/``bias``).
      eps: torch's default 1e-5 (flax's GroupNorm uses 1e-6).
      channel_axis: the channel axis (1: NCHW, -1: NHWC).
      impl: ``"auto"`` or ``"xla"``; ``"native"``/``"pallas"`` raise ``ValueError``.
      frame_axis: ``None`` (torch's GroupNorm), or an axis other than the batch and channel
        axes whose every index gets its own statistics (2 for ``[N, C, T, H, W]`` video).
      activation: ``None``, ``"relu"``, ``"silu"`` or ``"gelu"``, applied after the affine.
      mask: optional boolean (or numeric: nonzero is true) array broadcastable to ``x``; a group
        with no true element gives NaN, as torch's masked mean does.

    Returns:
      Array of ``x.shape`` and ``x.dtype``.

    Raises:
      TypeError: non-floating ``x`` or parameter; ``frame_axis`` not an int; ``mask`` not a
        boolean or numeric array.
      ValueError: ``num_groups`` not a positive divisor of ``C``; a parameter not ``(C,)``;
        ``channel_axis`` 0 or out of range; ``frame_axis`` out of range, the batch or the
        channel axis; an unknown ``activation``; ``mask`` not broadcastable to ``x``.

    Example:
      >>> import jax.numpy as jnp, numpy as np, jln
      >>> np.asarray(jln.group_norm(jnp.arange(8.0).reshape(1, 4, 2), 2)[0, :2]).round(3)
      array([[-1.342, -0.447],
             [ 0.447,  1.342]], dtype=float32)

    Reference: Wu and He, "Group Normalization" (2018).
    """
    fn = "jln.group_norm"
    _xla_only(fn, impl)
    c = _validate.channel_axis(fn, x, channel_axis)
    eps = _validate.check_eps(eps, fn)
    ch = x.shape[c]
    g = num_groups if isinstance(num_groups, int) and not isinstance(num_groups, bool) else None
    if g is None or g <= 0 or ch % g:
        raise ValueError(
            f"{fn}: num_groups must be a positive int that divides the {ch} channels of x at axis "
            f"{c}; received num_groups={num_groups!r} for x.shape={tuple(x.shape)}."
        )
    if activation is not None:
        _validate.check_choice(activation, "activation", ACTIVATIONS, fn)
    frame = _frame_axis(fn, x, c, frame_axis)
    p = _per_channel(fn, x, c, scale=scale, bias=bias)
    m = _validate.mask(fn, mask, tuple(x.shape))
    # channels split into (groups, channels per group), a part of size 1 left out: XLA:CPU's
    # backward is several times slower with a unit axis between the reduced ones
    split = tuple(n for n in (g, ch // g) if n > 1) or (1,)
    xg = x.reshape((*x.shape[:c], *split, *x.shape[c + 1 :]))

    def grouped(v: Array | None) -> Array | None:
        return None if v is None else v.reshape((1,) * c + split + (1,) * (x.ndim - c - 1))

    shift = len(split) - 1  # axes of xg past the channels move by this much
    kept: tuple[int, ...] = (c,) if g > 1 else ()  # the group axis (one group: all channels reduced)
    if frame is not None:
        kept += (frame + shift if frame > c else frame,)
    axes = tuple(a for a in range(1, xg.ndim) if a not in kept)
    spec = BatchStatSpec(axes=axes, eps=eps, out_dtype=x.dtype, torch_affine=True)
    operands = (grouped(p["scale"]), grouped(p["bias"]))
    if m is None:
        y, _, _ = _run(fn, spec, xg, operands)
    else:
        with jax.named_scope(fn):
            y, _, _ = spec.masked_body(xg, m.reshape(xg.shape), *operands)
    return activate(y.reshape(x.shape), activation)


def _frame_axis(fn: str, x: Any, c: int, frame_axis: Any) -> int | None:
    """``frame_axis`` as a non-negative axis of ``x`` (not the batch nor the channel axis)."""
    if frame_axis is None:
        return None
    if isinstance(frame_axis, bool) or not isinstance(frame_axis, (int, np.integer)):
        raise TypeError(f"{fn}: `frame_axis` must be an int or None; received {frame_axis!r}.")
    (f,) = _validate.normalize_axes(int(frame_axis), x.ndim, fn)
    if f in (0, c):
        raise ValueError(
            f"{fn}: frame_axis must be a spatial axis (not the batch axis 0 nor the channel axis {c}); "
            f"received frame_axis={frame_axis!r} for x.shape={tuple(x.shape)}. For [N, C, T, H, W] "
            f"video use frame_axis=2."
        )
    return f


@_eager.compiled_when_eager("x", "running_mean", "running_var", "scale", "bias")
def frozen_batch_norm(
    x: Array,
    running_mean: Array,
    running_var: Array,
    scale: Array,
    bias: Array,
    *,
    eps: float = 1e-5,
    channel_axis: int = 1,
) -> Array:
    r"""The DETR family's ``FrozenBatchNorm2d``: BatchNorm with fixed statistics and affine, in
    its own rounding order.

    .. math::

        s = w \cdot \frac{1}{\sqrt{\mathrm{running\_var} + \epsilon}}, \qquad
        y = x \cdot s + (b - \mathrm{running\_mean} \cdot s)

    evaluated op by op as transformers' ``DetrFrozenBatchNorm2d.forward`` (and its copies in
    Conditional/Deformable DETR, RT-DETR, Table Transformer, ...) does: each op rounds to its
    operands' promoted dtype, so a bfloat16 ``x`` with float32 buffers gives **float32**.

    Args:
      x: floating array ``[N, C, H, W]`` (any rank >= 2; ``channel_axis=-1`` for NHWC).
      running_mean, running_var, scale, bias: ``[C]`` buffers (torch's ``running_mean``,
        ``running_var``, ``weight``, ``bias``), one floating dtype.
      eps: transformers' value is 1e-5.
      channel_axis: the channel axis.

    Returns:
      Array of ``x.shape``, dtype the promotion of ``x``'s and the buffers'.

    Raises:
      TypeError: a non-floating array. ValueError: a buffer not ``(C,)``, or buffers of
      different dtypes.

    Example:
      >>> import jax.numpy as jnp, jln
      >>> one, zero = jnp.ones(2), jnp.zeros(2)
      >>> jln.frozen_batch_norm(jnp.ones((1, 2)), zero, 4 * one, one, zero, eps=0.0)
      Array([[0.5, 0.5]], dtype=float32)
    """
    fn = "jln.frozen_batch_norm"
    c = _validate.channel_axis(fn, x, channel_axis)
    eps = _validate.check_eps(eps, fn)
    bufs = dict(scale=scale, bias=bias, running_mean=running_mean, running_var=running_var)
    for name, v in bufs.items():
        if v is None:
            raise TypeError(f"{fn}: `{name}` is required (FrozenBatchNorm2d always has its four buffers).")
    p = _per_channel(fn, x, c, **bufs)
    dtypes = {jnp.dtype(v.dtype) for v in bufs.values()}
    if len(dtypes) != 1:
        raise ValueError(
            f"{fn}: the four buffers must share one dtype (torch's module holds them so); received "
            f"{ {n: str(jnp.dtype(v.dtype)) for n, v in bufs.items()} }."
        )
    (pd,) = dtypes
    spec = FrozenBatchNormSpec(
        axes=tuple(a for a in range(x.ndim) if a != c), eps=eps, param_dtype=pd,
        out_dtype=_stats.promote(x.dtype, pd),
    )
    return _run(fn, spec, x, (p["scale"], p["bias"], p["running_mean"], p["running_var"]))  # type: ignore[no-any-return]
