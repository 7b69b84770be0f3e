"""LayerNorm and fused residual add + LayerNorm: the public functions (the formula is
:class:`jln.families.layer_norm.spec.LayerNormSpec`'s)."""

from __future__ import annotations

from typing import Any, Literal, overload

import jax

from jln import _dispatch, _eager, _validate
from jln._platform import Impl
from jln._quant import Quant, Quantized, Stats
from jln._validate import Axis
from jln.families.layer_norm import spec as contract
from jln.families.layer_norm.spec import LayerNormConvention, LayerNormSpec

Array = jax.Array


@overload
def layer_norm(
    x: Array,
    scale: Array | None = None,
    bias: Array | None = None,
    *,
    axis: Axis = -1,
    eps: float = 1e-5,
    impl: Impl = "auto",
    axis_name: Any = None,
    axis_index_groups: Any = None,
    zero_centered: bool = False,
    convention: LayerNormConvention = "torch",
    param_axes: Axis | None = None,
    quantize: None = None,
    amax_history: Array | None = None,
    return_stats: Literal[False] = False,
) -> Array: ...


@overload
def layer_norm(
    x: Array,
    scale: Array | None = None,
    bias: Array | None = None,
    *,
    axis: Axis = -1,
    eps: float = 1e-5,
    impl: Impl = "auto",
    axis_name: Any = None,
    axis_index_groups: Any = None,
    zero_centered: bool = False,
    convention: LayerNormConvention = "torch",
    param_axes: Axis | None = None,
    quantize: Quant,
    amax_history: Array | None = None,
    return_stats: Literal[False] = False,
) -> Quantized: ...


@overload
def layer_norm(
    x: Array,
    scale: Array | None = None,
    bias: Array | None = None,
    *,
    axis: Axis = -1,
    eps: float = 1e-5,
    impl: Impl = "auto",
    axis_name: Any = None,
    axis_index_groups: Any = None,
    zero_centered: bool = False,
    convention: LayerNormConvention = "torch",
    param_axes: Axis | None = None,
    quantize: None = None,
    amax_history: Array | None = None,
    return_stats: Literal[True],
) -> tuple[Array, Stats]: ...


@overload
def layer_norm(
    x: Array,
    scale: Array | None = None,
    bias: Array | None = None,
    *,
    axis: Axis = -1,
    eps: float = 1e-5,
    impl: Impl = "auto",
    axis_name: Any = None,
    axis_index_groups: Any = None,
    zero_centered: bool = False,
    convention: LayerNormConvention = "torch",
    param_axes: Axis | None = None,
    quantize: Quant,
    amax_history: Array | None = None,
    return_stats: Literal[True],
) -> tuple[Quantized, Stats]: ...


@_eager.compiled_when_eager("x", "scale", "bias", "amax_history")
def layer_norm(
    x: Array,
    scale: Array | None = None,
    bias: Array | None = None,
    *,
    axis: Axis = -1,
    eps: float = 1e-5,
    impl: Impl = "auto",
    axis_name: Any = None,
    axis_index_groups: Any = None,
    zero_centered: bool = False,
    convention: LayerNormConvention = "torch",
    param_axes: Axis | None = None,
    quantize: Quant | None = None,
    amax_history: Array | None = None,
    return_stats: bool = False,
) -> Any:
    r"""Layer normalization, numerically identical in contract to ``torch.nn.functional.layer_norm``.

    .. math::

        y = \frac{x - \mathrm{E}[x]}{\sqrt{\mathrm{Var}[x] + \epsilon}} \cdot \mathrm{scale} + \mathrm{bias}

    with the biased variance (divide by N) and ``eps`` inside the square root. With ``f()`` a
    cast to float32 (float64 for float64 input) and ``dt`` the input dtype, ``convention`` says
    where the reference rounds:

    ===============  ============================================================================
    convention       computation
    ===============  ============================================================================
    ``"torch"``      ``F.layer_norm``: ``(f(x) - mean) * rsqrt(var + eps) * w + b`` in float32,
                     one cast to ``dt`` (float32 params do not promote)
    ``"deberta"``    the same float32 statistics; ``h = ((f(x) - mean) / sqrt(var + eps))
                     .astype(dt)``, then ``w * h`` and ``+ b`` each rounded to torch's promotion
                     (bf16 x with float32 w gives float32): DeBERTa's LayerNorm; with
                     ``zero_centered``, ``nn.LayerNorm(affine=False)(x) * (gamma + 1)``
                     (MoonshineStreaming; alias ``"moonshine"``)
    ``"eager"``      every op in ``dt``: ``u = mean(x)``, ``v = mean((x - u)**2)``,
                     ``(x - u) / sqrt(v + eps)``, each rounded to ``dt`` (a mean accumulates in
                     float32 and rounds once), then the affine as ``"deberta"``: VitDet's and
                     ConvNeXt's hand-written LayerNorm (alias ``"vitdet"``)
    ===============  ============================================================================

    Statistics are
    taken over ``axis`` in float32 (float64 for float64 input): the mean about a per-row pivot,
    rounded, plus its residual, so large offsets keep full precision, values near the mean are
    centred as accurately as torch's, and the variance is never negative. Reverse mode keeps only
    ``x`` in its own dtype plus per-row mean and rstd (about 2 bytes per element for bfloat16).

    Args:
      x: floating array of any shape (float16, bfloat16, float32, float64).
      scale: optional multiplier with the shape of ``x`` at ``axis`` (at ``param_axes`` when
        given; torch's ``weight``).
      bias: optional offset with the same shape (torch's ``bias``).
      axis: int or tuple of ints to normalize over. torch's ``normalized_shape`` of length k
        is ``axis=tuple(range(-k, 0))``.
      eps: added to the variance inside the square root; torch's default 1e-5. Below
        2**-101 (e.g. 0) each row's squares are summed scaled by a power of two (on the XLA
        path), so a row whose variance lies outside float32's normal range still normalizes.
      impl: ``"auto"`` (on a single-device CPU backend jln's native CPU kernels where they
        apply, once ``jln build`` has built them; on a GPU the Pallas kernels, for rows up to 16384 wide; else XLA), ``"xla"``,
        ``"native"`` (the CPU kernels, or ``ValueError`` saying why not: e.g. not built) or ``"pallas"``
        (interpret mode on CPU). All give the same contract (see the README's kernels section).
      axis_name: inside ``jax.shard_map``/``jax.pmap``: the mesh axis name (or tuple of
        names) across which the normalized axes are split (tensor parallelism). ``x`` is the
        local block; mean and variance are those of the whole row, merged with one
        all_gather of 3 values per row. ``scale``/``bias`` are the local blocks. Leave it
        ``None`` under plain ``jax.jit`` with ``NamedSharding`` (XLA partitions it).
      axis_index_groups: optional groups of indices of ``axis_name`` that each hold one row,
        as in ``jax.lax.psum`` (``jax.pmap`` or ``shard_map(check_vma=False)`` only).
      zero_centered: multiply by ``1 + scale`` rather than ``scale`` (zero-centred gamma, so a
        zero ``scale`` is the identity): Nemotron's ``LayerNorm1P`` and VideoPrism's LayerNorm,
        ``F.layer_norm(x, ..., weight + 1, bias)``. As there, ``1 + scale`` is rounded to
        ``scale``'s dtype before the norm (a bfloat16 ``scale`` gives a bfloat16 ``1 + scale``),
        so every ``impl`` receives the same weight; the gradient with respect to ``scale`` is
        that with respect to ``1 + scale``. Requires ``scale``.
      convention: ``"torch"``, ``"deberta"`` or ``"eager"`` (or an alias), as in the table.
        ``"deberta"`` and ``"eager"`` run on the XLA path (``impl="pallas"``/``"native"``
        raise ``ValueError`` for them); for float32 input all three give torch's numbers.
      param_axes: the axes of ``x`` that ``scale`` and ``bias`` span (flax's ``feature_axes``):
        every axis in ``axis`` plus more, e.g. ``axis=-1, param_axes=(1, -1)`` on
        ``[batch, heads, seq, head_dim]`` is one LayerNorm per head, parameters of shape
        ``(heads, head_dim)`` (StableLM's ``LayerNormPerHead``; with ``convention="deberta"``
        Chameleon's per-head LayerNorm). ``None`` (default): the normalized axes. Runs on the
        XLA path (``impl="pallas"``/``"native"`` raise ``ValueError``).
      quantize: a :class:`jln.Quant`: return the output quantized (a :class:`jln.Quantized`),
        as in :func:`rms_norm` (``source="output"``: the convention's rounded output;
        ``"float32"``: ``(f(x) - mean) * rstd * w + b`` unrounded, XLA path only). Gradients
        pass straight through :meth:`jln.Quantized.dequantize`.
      amax_history: with ``Quant(scaling="delayed")``, as in :func:`rms_norm`.
      return_stats: also return :class:`jln.Stats` ``(mean, rstd)`` (TransformerEngine's
        ``mu``/``rsigma``): float32 (float64 for float64 input), shape of ``x`` with the
        normalized axes of size 1; ``rstd = rsqrt(var + eps)``.

    Returns:
      Array of ``x.shape``: ``x.dtype`` for ``"torch"`` (float32 params do not promote a
      bfloat16 ``x``); for ``"deberta"``/``"eager"`` the promotion of ``x.dtype`` with the
      parameters' dtypes. With ``quantize``, a :class:`jln.Quantized` instead; with
      ``return_stats``, ``(that, stats)``.

    Raises:
      TypeError: ``x`` (or a parameter) is not a floating array.
      ValueError: ``scale``/``bias`` shape differs from ``x``'s shape at the normalized axes;
        an axis is out of range or repeated; ``axis`` is empty; ``eps`` is negative;
        ``zero_centered=True`` without ``scale``; an unknown ``convention``, or
        ``impl="pallas"``/``"native"`` with a convention other than ``"torch"`` or with
        ``param_axes``; ``param_axes`` out of range, repeated, or without every normalized axis
        (``TypeError`` if it is not ints).
      NameError: ``axis_name`` is not bound (outside ``shard_map``/``pmap``).

    Example:
      >>> import jax.numpy as jnp, numpy as np, jln
      >>> np.asarray(jln.layer_norm(jnp.array([2.0, -1.0, 3.0, 0.0]))).round(3)
      array([ 0.632, -1.265,  1.265, -0.632], dtype=float32)
      >>> x = jnp.array([2.0, -1.0, 3.0, 0.0])
      >>> np.asarray(jln.layer_norm(x, jnp.zeros(4), zero_centered=True)).round(3)  # 1 + 0
      array([ 0.632, -1.265,  1.265, -0.632], dtype=float32)
      >>> xb = jnp.array([[2.0, -1.0, 3.0, 0.0]], jnp.bfloat16)
      >>> jln.layer_norm(xb, jnp.ones(4), convention="deberta").dtype  # w * h promotes
      dtype('float32')
      >>> h = jnp.arange(24.0).reshape(1, 2, 3, 4)  # [batch, heads, seq, head_dim]
      >>> w = jnp.array([[1.0] * 4, [2.0] * 4])  # one weight row per head
      >>> y = jln.layer_norm(h, w, axis=-1, param_axes=(1, -1))
      >>> bool((y[:, 1] == 2 * y[:, 0]).all())
      True

    Reference: Ba, Kiros and Hinton, "Layer Normalization" (2016).
    """
    fn = "jln.layer_norm"
    axes, laid, s, b = _validate.norm_layout(fn, x, scale, bias, axis, param_axes)
    s = _validate.zero_centered_scale(fn, s, zero_centered)
    conv = contract.resolve_convention(convention, fn)
    spec = LayerNormSpec(
        axes=axes, eps=_validate.check_eps(eps, fn), convention=conv, io_dtype=x.dtype,
        param_dtypes=tuple(p.dtype for p in (s, b) if p is not None), param_axes=laid,
        **_validate.dist(fn, impl, axis_name, axis_index_groups),
    )
    return _dispatch.apply_with(
        fn, impl, spec, x, (s, b, None, None), quantize=quantize, amax_history=amax_history,
        return_stats=return_stats,
    )



@overload
def add_layer_norm(
    x: Array,
    residual: Array,
    scale: Array | None = None,
    bias: Array | None = None,
    *,
    axis: Axis = -1,
    eps: float = 1e-5,
    convention: LayerNormConvention = "torch",
    residual_in_fp32: bool = False,
    impl: Impl = "auto",
    axis_name: Any = None,
    axis_index_groups: Any = None,
    quantize: None = None,
    amax_history: Array | None = None,
    return_stats: Literal[False] = False,
) -> tuple[Array, Array]: ...


@overload
def add_layer_norm(
    x: Array,
    residual: Array,
    scale: Array | None = None,
    bias: Array | None = None,
    *,
    axis: Axis = -1,
    eps: float = 1e-5,
    convention: LayerNormConvention = "torch",
    residual_in_fp32: bool = False,
    impl: Impl = "auto",
    axis_name: Any = None,
    axis_index_groups: Any = None,
    quantize: Quant,
    amax_history: Array | None = None,
    return_stats: Literal[False] = False,
) -> tuple[Quantized, Array]: ...


@overload
def add_layer_norm(
    x: Array,
    residual: Array,
    scale: Array | None = None,
    bias: Array | None = None,
    *,
    axis: Axis = -1,
    eps: float = 1e-5,
    convention: LayerNormConvention = "torch",
    residual_in_fp32: bool = False,
    impl: Impl = "auto",
    axis_name: Any = None,
    axis_index_groups: Any = None,
    quantize: None = None,
    amax_history: Array | None = None,
    return_stats: Literal[True],
) -> tuple[Array, Array, Stats]: ...


@overload
def add_layer_norm(
    x: Array,
    residual: Array,
    scale: Array | None = None,
    bias: Array | None = None,
    *,
    axis: Axis = -1,
    eps: float = 1e-5,
    convention: LayerNormConvention = "torch",
    residual_in_fp32: bool = False,
    impl: Impl = "auto",
    axis_name: Any = None,
    axis_index_groups: Any = None,
    quantize: Quant,
    amax_history: Array | None = None,
    return_stats: Literal[True],
) -> tuple[Quantized, Array, Stats]: ...


@_eager.compiled_when_eager("x", "residual", "scale", "bias", "amax_history")
def add_layer_norm(
    x: Array,
    residual: Array,
    scale: Array | None = None,
    bias: Array | None = None,
    *,
    axis: Axis = -1,
    eps: float = 1e-5,
    convention: LayerNormConvention = "torch",
    residual_in_fp32: bool = False,
    impl: Impl = "auto",
    axis_name: Any = None,
    axis_index_groups: Any = None,
    quantize: Quant | None = None,
    amax_history: Array | None = None,
    return_stats: bool = False,
) -> Any:
    r"""Pre-norm residual step fused: ``s = x + residual``; returns ``(layer_norm(s), s)``.

    .. math::

        s = x + r, \qquad y = \frac{s - \mathrm{E}[s]}{\sqrt{\mathrm{Var}[s] + \epsilon}}
        \cdot \mathrm{scale} + \mathrm{bias}

    Args:
      x: the branch output, floating array.
      residual: the residual stream, same shape as ``x``.
      scale, bias, axis, eps, convention: as in :func:`layer_norm` (the convention applied to
        ``s`` as it is).
      residual_in_fp32: compute and return ``s`` in float32 (float64 stays float64) so the
        residual stream does not accumulate bfloat16/float16 rounding across layers.
      impl, axis_name, axis_index_groups: as in :func:`layer_norm`.
      quantize, amax_history: as in :func:`layer_norm` (``normed`` quantized, ``s`` not).
      return_stats: also return :class:`jln.Stats` ``(mean, rstd)`` of ``s`` (third).

    Returns:
      ``(normed, s)``: ``normed`` has ``x.shape`` and the dtype the convention gives for an
      ``x.dtype`` input (``x.dtype`` for ``"torch"``); ``s`` has the promoted dtype
      of ``x`` and ``residual`` (float32 at least with ``residual_in_fp32``). Reverse mode keeps
      ``s`` and per-row statistics only. With ``return_stats``: ``(normed, s, stats)``.

    Raises:
      TypeError, ValueError, NameError: as :func:`layer_norm`, and ``ValueError`` if ``x``
      and ``residual`` differ in shape.

    Example:
      >>> import jax.numpy as jnp, jln
      >>> y, s = jln.add_layer_norm(jnp.ones((2, 4)), jnp.arange(8.0).reshape(2, 4))
      >>> s[0]
      Array([1., 2., 3., 4.], dtype=float32)
    """
    fn = "jln.add_layer_norm"
    s = _validate.residual_sum(fn, x, residual, residual_in_fp32)
    axes, _, sc, b = _validate.norm_layout(fn, s, scale, bias, axis)
    conv = contract.resolve_convention(convention, fn)
    out = contract.output_dtype(conv, x.dtype, *(p.dtype for p in (sc, b) if p is not None))
    spec = LayerNormSpec(
        axes=axes, eps=_validate.check_eps(eps, fn), out_dtype=out, convention=conv, io_dtype=s.dtype,
        **_validate.dist(fn, impl, axis_name, axis_index_groups),
    )
    return _dispatch.apply_with(
        fn, impl, spec, s, (sc, b, None, None), addends=(x, residual), quantize=quantize,
        amax_history=amax_history, return_stats=return_stats,
    )
