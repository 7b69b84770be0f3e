"""RMSNorm in every convention real models use, and fused residual add + RMSNorm: the public
functions (the conventions' formulas are :class:`jln.families.rms_norm.spec.RMSNormSpec`'s)."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal, overload

import jax
import jax.numpy as jnp

from jln import _dispatch, _eager, _validate
from jln._platform import Impl
from jln._quant import Quant, Quantized, Stats
from jln._validate import Axis
from jln.families.rms_norm import spec as contract
from jln.families.rms_norm.spec import CONVENTIONS as CONVENTIONS
from jln.families.rms_norm.spec import RMSConvention, RMSNormSpec

Array = jax.Array


def _spec(
    fn: str, x: Any, scale: Any, bias: Any, axis: Axis, eps: Any, convention: str, io_dtype: Any,
    impl: str, axis_name: Any, axis_index_groups: Any,
) -> tuple[RMSNormSpec, Array | None, Array | None]:
    """Validate an RMSNorm call; return its spec and the operands laid out against ``x``."""
    axes, _, s, b = _validate.norm_layout(fn, x, scale, bias, axis)
    conv = contract.resolve_convention(convention, fn)
    if bias is not None and conv != "diffusers":
        raise ValueError(
            f"{fn}: `bias` is only defined for convention='diffusers' (diffusers' RMSNorm with "
            f"bias=True); received convention={convention!r}. Add the bias after the norm instead."
        )
    if bias is not None and scale is None:
        raise ValueError(f"{fn}: diffusers' RMSNorm adds `bias` only together with `scale`; pass both.")
    eps_f = contract.default_eps(conv, io_dtype) if eps is None else _validate.check_eps(eps, fn)
    scale_dtype = None if s is None else s.dtype
    out = contract.output_dtype(conv, io_dtype, scale_dtype, None if b is None else b.dtype)
    spec = RMSNormSpec(
        axes=axes, eps=eps_f, convention=conv, io_dtype=jnp.dtype(io_dtype), out_dtype=out,
        scale_dtype=scale_dtype, has_bias=b is not None, **_validate.dist(fn, impl, axis_name, axis_index_groups),
    )
    return spec, s, b


@overload
def rms_norm(
    x: Array,
    scale: Array | None = None,
    *,
    axis: Axis = -1,
    eps: float | None = None,
    convention: RMSConvention = "torch",
    bias: Array | None = None,
    impl: Impl = "auto",
    axis_name: Any = None,
    axis_index_groups: Any = None,
    quantize: None = None,
    amax_history: Array | None = None,
    return_stats: Literal[False] = False,
) -> Array: ...


@overload
def rms_norm(
    x: Array,
    scale: Array | None = None,
    *,
    axis: Axis = -1,
    eps: float | None = None,
    convention: RMSConvention = "torch",
    bias: Array | None = None,
    impl: Impl = "auto",
    axis_name: Any = None,
    axis_index_groups: Any = None,
    quantize: Quant,
    amax_history: Array | None = None,
    return_stats: Literal[False] = False,
) -> Quantized: ...


@overload
def rms_norm(
    x: Array,
    scale: Array | None = None,
    *,
    axis: Axis = -1,
    eps: float | None = None,
    convention: RMSConvention = "torch",
    bias: Array | None = None,
    impl: Impl = "auto",
    axis_name: Any = None,
    axis_index_groups: Any = None,
    quantize: None = None,
    amax_history: Array | None = None,
    return_stats: Literal[True],
) -> tuple[Array, Stats]: ...


@overload
def rms_norm(
    x: Array,
    scale: Array | None = None,
    *,
    axis: Axis = -1,
    eps: float | None = None,
    convention: RMSConvention = "torch",
    bias: Array | None = None,
    impl: Impl = "auto",
    axis_name: Any = None,
    axis_index_groups: Any = None,
    quantize: Quant,
    amax_history: Array | None = None,
    return_stats: Literal[True],
) -> tuple[Quantized, Stats]: ...


@_eager.compiled_when_eager("x", "scale", "bias", "amax_history")
def rms_norm(
    x: Array,
    scale: Array | None = None,
    *,
    axis: Axis = -1,
    eps: float | None = None,
    convention: RMSConvention = "torch",
    bias: Array | None = None,
    impl: Impl = "auto",
    axis_name: Any = None,
    axis_index_groups: Any = None,
    quantize: Quant | None = None,
    amax_history: Array | None = None,
    return_stats: bool = False,
) -> Any:
    r"""Root-mean-square normalization, in torch's convention or a named model's.

    With ``f()`` a cast to float32 (float64 for float64 input), ``dt`` the input dtype,
    ``r = rsqrt(mean(f(x)^2) + eps)`` (eps inside the square root) and ``w`` the scale:

    ==================  ==============================================================  ============
    convention          computation                                                     eps=None
    ==================  ==============================================================  ============
    ``"torch"``         ``(f(x) * r * f(w)).astype(dt)``; output ``dt`` even for f32 w  finfo(f32).eps
    ``"llama"``         ``h = (f(x) * r).astype(dt)``, then ``w * h`` with promotion:    1e-6
                        bf16 x with f32 w gives **float32** (aliases ``"qwen2"``,
                        ``"mistral"``)
    ``"gemma"``         ``(f(x) * r * (1 + f(w))).astype(dt)``; w starts at 0            1e-6
    ``"t5"``            ``h = f(x) * r`` (float32); cast h to w's dtype if w is half;    1e-6
                        ``w * h``; without w the result stays float32
    ``"diffusers"``     as t5, plus ``+ bias``; without w the result is cast to ``dt``   finfo(f32).eps
    ``"seed"``          ``x / max(||x||_2 * n^{-1/2}, eps) * w`` with torch's per-op     1e-8
                        rounding in ``dt``: x-transformers' 2021 RMSNorm, the seed
                        model's (alias ``"x-transformers"``)
    ``"eager"``         every op in ``dt``: ``x / sqrt(mean(x**2) + eps)``, each op      finfo(f32).eps
                        rounded to ``dt`` (a mean accumulates in float32, rounds
                        once), then ``w * h`` as llama: ImageGPT, LTX-2's
                        PerChannelRMSNorm / PixelNorm (aliases ``"imagegpt"``,
                        ``"ltx2"``)
    ``"round_rstd"``    ``r = rsqrt(mean(f(x)^2) + eps).astype(dt)``; ``x * r`` in       1e-6
                        ``dt``, then ``w * h`` as llama: DeepSeek-V4's and
                        GLM-5-Next's unweighted RMSNorm (aliases ``"deepseek_v4"``,
                        ``"glm5_next"``)
    ``"input_scaled"``  ``x' = (f(x) * f(1 + w)).astype(dt)``, ``1 + w`` in w's dtype,  1e-6
                        **before** the statistics, then ``"torch"`` without a weight:
                        MuseSpark's input-scaled RMSNorm (alias
                        ``"muse_spark_input"``); w starts at 0
    ``"gemma_rounded"`` ``(f(x) * r * f(1 + w)).astype(dt)``, ``1 + w`` in w's dtype    1e-6
                        (rounded there for a half w; float32 w: ``"gemma"``):
                        MuseSpark's centered RMSNorm, Krea 2's (aliases
                        ``"muse_spark_centered"``, ``"krea2"``); w starts at 0
    ==================  ==============================================================  ============

    ``"eager"``, ``"round_rstd"``, ``"input_scaled"`` and ``"gemma_rounded"`` run on the XLA path only
    (``impl="pallas"``/``"native"`` raise ``ValueError`` for them).

    Args:
      x: floating array.
      scale: optional weight with the shape of ``x`` at ``axis``. Its dtype decides the output
        dtype in the llama, t5, diffusers and seed conventions, as in those references.
      axis: int or tuple of ints to normalize over.
      eps: see the table; ``None`` picks the convention's default. Below 2**-101 (e.g. 0)
        the mean square is taken on rows scaled by a power of two, as in :func:`layer_norm`.
      convention: one of the names above.
      bias: diffusers' optional bias (``convention="diffusers"`` only).
      impl: ``"auto"``, ``"xla"``, ``"native"`` or ``"pallas"``, as in :func:`jln.layer_norm`.
      axis_name: inside ``jax.shard_map``/``jax.pmap``: the mesh axis name(s) across which
        the normalized axes are split; the mean square (seed: the norm and ``n``) is that of
        the whole row, from one psum of the per-row sum of squares. ``None`` under plain
        ``jax.jit`` with ``NamedSharding``.
      axis_index_groups: as in ``jax.lax.psum`` (``jax.pmap`` or ``check_vma=False`` only).
      quantize: a :class:`jln.Quant`: return the output quantized (a :class:`jln.Quantized`)
        in place of ``y``, computed in XLA from the convention's output rounded to its dtype
        (``source="output"``) or from its unrounded float32 last step (``source="float32"``,
        XLA path only). vLLM's ``rms_norm_static_fp8_quant`` is ``convention="llama"`` with
        ``Quant(scaling="static", scale=s)``; its ``rms_norm_dynamic_per_token_quant`` is
        ``convention="llama"`` with ``Quant(scaling="row", scale_ub=...)``; flashinfer's
        ``rmsnorm_quant`` is ``convention="torch"`` with ``Quant(scaling="static", scale=s,
        source="float32")``. Gradients pass straight through
        :meth:`jln.Quantized.dequantize` (see :doc:`quantization`).
      amax_history: with ``Quant(scaling="delayed")``: the float32 amax history ``[L]``
        (index 0 the most recent); the updated one is the result's ``amax_history``.
      return_stats: also return :class:`jln.Stats` ``(None, rstd)``: ``rstd =
        rsqrt(mean(f(x)^2) + eps)`` (seed: ``1 / max(||x|| n^-1/2, eps)``) in float32
        (float64 for float64 input), shape of ``x`` with the normalized axes of size 1.

    Returns:
      Array of ``x.shape``; dtype as in the table (``x.dtype`` for torch and gemma). With
      ``quantize``, a :class:`jln.Quantized` instead; with ``return_stats``, ``(that, stats)``.

    Raises:
      TypeError: ``x`` or a parameter is not floating.
      ValueError: bad parameter shape, bad axis, negative eps, unknown convention, a bias
        outside the diffusers convention, or ``impl="pallas"``/``"native"`` with an XLA-only
        convention (``"eager"``, ``"round_rstd"``, ``"input_scaled"``, ``"gemma_rounded"``).
      NameError: ``axis_name`` is not bound (outside ``shard_map``/``pmap``).

    Example:
      >>> import jax.numpy as jnp, numpy as np, jln
      >>> np.asarray(jln.rms_norm(jnp.array([3.0, -4.0]), eps=0.0)).round(4)  # rms = sqrt(12.5)
      array([ 0.8485, -1.1314], dtype=float32)

    Reference: Zhang and Sennrich, "Root Mean Square Layer Normalization" (2019).
    """
    fn = "jln.rms_norm"
    spec, s, b = _spec(
        fn, x, scale, bias, axis, eps, convention, getattr(x, "dtype", None), impl, axis_name, axis_index_groups
    )
    return _dispatch.apply_with(
        fn, impl, spec, x, (s, b), quantize=quantize, amax_history=amax_history, return_stats=return_stats
    )


@overload
def add_rms_norm(
    x: Array,
    residual: Array,
    scale: Array | None = None,
    *,
    axis: Axis = -1,
    eps: float | None = None,
    convention: RMSConvention = "torch",
    residual_in_fp32: bool = False,
    impl: Impl = "auto",
    axis_name: Any = None,
    axis_index_groups: Any = None,
    quantize: None = None,
    amax_history: Array | None = None,
    return_stats: Literal[False] = False,
) -> tuple[Array, Array]: ...


@overload
def add_rms_norm(
    x: Array,
    residual: Array,
    scale: Array | None = None,
    *,
    axis: Axis = -1,
    eps: float | None = None,
    convention: RMSConvention = "torch",
    residual_in_fp32: bool = False,
    impl: Impl = "auto",
    axis_name: Any = None,
    axis_index_groups: Any = None,
    quantize: Quant,
    amax_history: Array | None = None,
    return_stats: Literal[False] = False,
) -> tuple[Quantized, Array]: ...


@overload
def add_rms_norm(
    x: Array,
    residual: Array,
    scale: Array | None = None,
    *,
    axis: Axis = -1,
    eps: float | None = None,
    convention: RMSConvention = "torch",
    residual_in_fp32: bool = False,
    impl: Impl = "auto",
    axis_name: Any = None,
    axis_index_groups: Any = None,
    quantize: None = None,
    amax_history: Array | None = None,
    return_stats: Literal[True],
) -> tuple[Array, Array, Stats]: ...


@overload
def add_rms_norm(
    x: Array,
    residual: Array,
    scale: Array | None = None,
    *,
    axis: Axis = -1,
    eps: float | None = None,
    convention: RMSConvention = "torch",
    residual_in_fp32: bool = False,
    impl: Impl = "auto",
    axis_name: Any = None,
    axis_index_groups: Any = None,
    quantize: Quant,
    amax_history: Array | None = None,
    return_stats: Literal[True],
) -> tuple[Quantized, Array, Stats]: ...


@_eager.compiled_when_eager("x", "residual", "scale", "amax_history")
def add_rms_norm(
    x: Array,
    residual: Array,
    scale: Array | None = None,
    *,
    axis: Axis = -1,
    eps: float | None = None,
    convention: RMSConvention = "torch",
    residual_in_fp32: bool = False,
    impl: Impl = "auto",
    axis_name: Any = None,
    axis_index_groups: Any = None,
    quantize: Quant | None = None,
    amax_history: Array | None = None,
    return_stats: bool = False,
) -> Any:
    r"""Pre-norm residual step fused: ``s = x + residual``; returns ``(rms_norm(s), s)``.

    The norm follows :func:`rms_norm`'s ``convention`` applied to ``s`` as it is (unrounded
    float32 with ``residual_in_fp32``); the result is cast to the dtype the convention gives
    for an ``x.dtype`` input (``x.dtype`` for torch and gemma).

    Args:
      x: the branch output, floating array.
      residual: the residual stream, same shape.
      scale, axis, eps, convention: as in :func:`rms_norm`.
      residual_in_fp32: compute and return ``s`` in float32 (float64 stays float64).
      impl, axis_name, axis_index_groups: as in :func:`rms_norm`.
      quantize, amax_history: as in :func:`rms_norm`: ``normed`` is then a
        :class:`jln.Quantized` (``s`` is never quantized). vLLM's
        ``fused_add_rms_norm_static_fp8_quant`` is :func:`add_rms_norm` with
        ``convention="llama"`` and ``Quant(scaling="static", scale=...)``; flashinfer's
        ``fused_add_rmsnorm_quant`` with ``convention="torch"`` and ``source="float32"``.
      return_stats: also return :class:`jln.Stats` of ``s`` (third in the tuple).

    Returns:
      ``(normed, s)``; ``s`` has the promoted dtype of the inputs (float32 at least with
      ``residual_in_fp32``). Reverse mode keeps ``s`` and per-row rstd only. With
      ``return_stats``: ``(normed, s, stats)``.

    Raises:
      TypeError, ValueError, NameError: as :func:`rms_norm`; ``ValueError`` if the shapes
        differ.

    Example:
      >>> import jax.numpy as jnp, jln
      >>> y, s = jln.add_rms_norm(jnp.ones((2, 3)), jnp.ones((2, 3)))
      >>> s[0], y.dtype
      (Array([2., 2., 2.], dtype=float32), dtype('float32'))
    """
    fn = "jln.add_rms_norm"
    s = _validate.residual_sum(fn, x, residual, residual_in_fp32)
    # the norm reads s unrounded (float32 with residual_in_fp32); its result takes the dtype
    # the convention gives for an x.dtype input
    spec, sc, _ = _spec(fn, s, scale, None, axis, eps, convention, x.dtype, impl, axis_name, axis_index_groups)
    spec = dataclasses.replace(spec, io_dtype=s.dtype)
    return _dispatch.apply_with(
        fn, impl, spec, s, (sc, None), addends=(x, residual), quantize=quantize, amax_history=amax_history,
        return_stats=return_stats,
    )
