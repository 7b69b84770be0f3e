"""RMSNorm in every convention real models use, and fused residual add + RMSNorm.

Each convention reproduces its reference's dtype order exactly (where the reference rounds to
the input dtype, jln rounds there too), so bfloat16 outputs match bit for bit except where
the two frameworks' float32 reductions differ in their last bit.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from jln import _checks, _dispatch, _eager, _stats
from jln._checks import Axis
from jln._layer_norm import prepare_params, residual_sum

Array = jax.Array

#: Convention name -> (aliases, eps default). ``None`` eps means torch's finfo rule.
CONVENTIONS: dict[str, tuple[tuple[str, ...], float | None]] = {
    "torch": ((), None),
    "llama": (("qwen2", "mistral"), 1e-6),
    "gemma": ((), 1e-6),
    "t5": ((), 1e-6),
    "diffusers": ((), None),
    "seed": (("x-transformers",), 1e-8),
}
_ALIASES = {alias: name for name, (aliases, _) in CONVENTIONS.items() for alias in (name, *aliases)}


def resolve_convention(convention: str, fn: str) -> str:
    if convention not in _ALIASES:
        raise ValueError(
            f"{fn}: unknown convention {convention!r}; expected one of {sorted(_ALIASES)}."
        )
    return _ALIASES[convention]


def default_eps(convention: str, dtype: Any, fn: str) -> float:
    """eps when the caller passes ``eps=None``.

    torch: ``finfo(float32).eps`` (``finfo(float64).eps`` for float64 input), as
    ``torch.nn.functional.rms_norm``. diffusers' RMSNorm has no default, so it follows torch's
    rule here too; the named model conventions use their reference classes' defaults.
    """
    eps = CONVENTIONS[convention][1]
    if eps is None:
        return float(jnp.finfo(_stats.stats_dtype(dtype)).eps)
    return eps


def output_dtype(convention: str, dtype: Any, scale_dtype: Any, bias_dtype: Any = None) -> jnp.dtype:
    """The dtype each convention returns for input ``dtype`` and weight ``scale_dtype``."""
    dt = jnp.dtype(dtype)
    if convention in ("torch", "gemma"):
        return dt
    if scale_dtype is None:
        if convention == "t5":  # x * rsqrt(var) promotes to the statistics dtype
            return _stats.promote(dt, _stats.stats_dtype(dt))
        return dt
    wd = jnp.dtype(scale_dtype)
    if convention in ("llama", "seed"):
        return _stats.promote(dt, wd)
    # t5 and diffusers: h = x * rsqrt(var) is float32; cast to w's dtype if w is half
    h = _stats.promote(dt, _stats.stats_dtype(dt))
    out = wd if _stats.is_low_precision(wd) else _stats.promote(h, wd)
    if bias_dtype is not None:
        out = _stats.promote(out, bias_dtype)
    return out


def _round_keep_finite(v: Array, dtype: Any) -> Array:
    r = _stats.round_to(v, dtype)
    return jnp.where(jnp.isfinite(r), r, v)


@_stats.remat
def rms_body(
    x: Array,
    scale: Array | None,
    bias: Array | None,
    *,
    axes: tuple[int, ...],
    eps: float,
    convention: str,
    io_dtype: Any,
    out_dtype: Any,
    axis_name: Any = None,
    axis_index_groups: Any = None,
) -> Array:
    """The RMSNorm formula of ``convention``; see :func:`rms_norm` for each one.

    With ``axis_name`` the rows are split across that mapped axis: the sum of squares is
    psummed once and ``n`` is the global count.
    """
    x32 = _stats.upcast(x)
    static: dict[str, Any] = dict(
        scale_dtype=None if scale is None else scale.dtype,
        convention=convention,
        io_dtype=io_dtype,
        out_dtype=out_dtype,
    )
    if convention == "seed":
        n = _stats.count(x.shape, axes, axis_name, axis_index_groups)
        sum_sq = _stats.sum_square(x32, axes, axis_name, axis_index_groups)
        denom = seed_denominator(sum_sq, n, eps, io_dtype)
        denom = _stats.checkpoint_name(denom, _stats.STAT_NAMES[1])
        return rms_affine(x32 / denom, scale, bias, **static)
    h = _stats.normalized(x32, axes, eps, None, axis_name, axis_index_groups)
    return rms_affine(h, scale, bias, **static)


def seed_denominator(sum_sq: Array, n: int, eps: float, io_dtype: Any) -> Array:
    """The seed convention's ``max(||x||_2 * n^-1/2, eps)`` from the row's sum of squares."""
    norm = _stats.safe_sqrt(sum_sq)
    # torch rounds ||x|| and ||x||*d^-1/2 to a half dtype; jln does too unless that would
    # overflow float16 (torch then returns zeros), where it keeps the float32 value.
    norm = _round_keep_finite(norm, io_dtype)
    denom = _round_keep_finite(norm * (n**-0.5), io_dtype)
    return jnp.maximum(denom, eps)  # the clamp, in float32: eps=1e-8 underflows float16


def rms_steps(convention: str, io_dtype: Any, scale_dtype: Any, has_bias: bool) -> tuple[bool, Any, Any]:
    """Each convention's steps after ``h = f(x) * rstd``: ``(gemma, round_h, round_y)``.

    ``y = round(h, round_h) * (1 + w if gemma else w)``, then rounded to ``round_y`` before the
    bias; a ``None`` dtype is no rounding. The only place the conventions' dtype order lives:
    the XLA body (:func:`rms_affine`) and the kernels apply these steps.
    """
    if convention in ("torch", "gemma"):
        return convention == "gemma", None, None
    if convention in ("llama", "seed"):
        return False, jnp.dtype(io_dtype), None  # cast to the input dtype, *then* the weight
    if scale_dtype is None:  # t5 / diffusers without a weight
        return False, None, None
    # t5 / diffusers: h is rounded to a half weight's dtype; diffusers rounds (h * w) to its own
    # dtype before + bias
    round_h = jnp.dtype(scale_dtype) if _stats.is_low_precision(scale_dtype) else None
    round_y = output_dtype(convention, io_dtype, scale_dtype) if has_bias else None
    return False, round_h, round_y


def rms_affine(
    h: Array,
    scale: Array | None,
    bias: Array | None,
    *,
    scale_dtype: Any,
    convention: str,
    io_dtype: Any,
    out_dtype: Any,
) -> Array:
    """Each convention's rounding and weighting after ``h = f(x) * rstd`` (``f(x) / denom``
    for seed), as :func:`rms_steps` states them. ``h`` is in the statistics dtype;
    ``scale``/``bias`` are cast to it (exactly), and ``scale_dtype`` is the weight's own dtype.
    Shared by :func:`rms_body` and the Pallas kernels.
    """
    gemma, round_h, round_y = rms_steps(convention, io_dtype, scale_dtype, bias is not None)
    sd = h.dtype
    if round_h is not None:
        h = _stats.round_to(h, round_h)
    if scale is not None:
        w = scale.astype(sd)
        h = h * (1.0 + w) if gemma else h * w
    if round_y is not None:
        h = _stats.round_to(h, round_y)
    if bias is not None:
        h = h + bias.astype(sd)
    return h.astype(out_dtype)


def rms_apply(
    fn: str,
    impl: str,
    x: Array,
    scale: Array | None,
    bias: Array | None,
    *,
    axes: tuple[int, ...],
    eps: float,
    convention: str,
    io_dtype: Any,
    out_dtype: Any,
    axis_name: Any = None,
    axis_index_groups: Any = None,
    addends: tuple[Array, Array] | None = None,
) -> Any:
    """Run an RMSNorm convention through XLA (:func:`rms_body`) or a Pallas kernel; with
    ``addends`` (``x`` being their sum), ``(y, s)`` (see :func:`jln._dispatch.apply`)."""
    static = dict(axes=axes, eps=eps, convention=convention, io_dtype=io_dtype, out_dtype=out_dtype)
    return _dispatch.apply(
        fn, impl, "rms_norm", rms_body, "rms", x, (scale, bias), static, axis_name, axis_index_groups, addends
    )


def prepare(
    fn: str,
    x: Any,
    scale: Any,
    bias: Any,
    axis: Axis,
    eps: Any,
    convention: str,
    io_dtype: Any,
) -> tuple[tuple[int, ...], float, str, Array | None, Array | None, jnp.dtype]:
    """Validate an RMSNorm call; return (axes, eps, convention, scale, bias, out_dtype)."""
    axes, s, b = prepare_params(fn, x, scale, bias, axis)
    conv = resolve_convention(convention, fn)
    if bias is not None and conv != "diffusers":
        raise ValueError(
            f"{fn}: `bias` is only defined for convention='diffusers' (diffusers' RMSNorm with "
            f"bias=True); received convention={convention!r}. Add the bias after the norm instead."
        )
    if bias is not None and scale is None:
        raise ValueError(f"{fn}: diffusers' RMSNorm adds `bias` only together with `scale`; pass both.")
    eps_f = default_eps(conv, io_dtype, fn) if eps is None else _checks.check_eps(eps, fn)
    out = output_dtype(
        conv, io_dtype, None if scale is None else scale.dtype, None if bias is None else bias.dtype
    )
    return axes, eps_f, conv, s, b, out


@_eager.compiled_when_eager("x", "scale", "bias")
def rms_norm(
    x: Array,
    scale: Array | None = None,
    *,
    axis: Axis = -1,
    eps: float | None = None,
    convention: str = "torch",
    bias: Array | None = None,
    impl: str = "auto",
    axis_name: Any = None,
    axis_index_groups: Any = None,
) -> Array:
    r"""Root-mean-square normalization, in torch's convention or a named model's.

    With ``f()`` a cast to float32 (float64 for float64 input), ``dt`` the input dtype,
    ``r = rsqrt(mean(f(x)^2) + eps)`` (eps inside the square root) and ``w`` the scale:

    ================  ==============================================================  ============
    convention        computation                                                     eps=None
    ================  ==============================================================  ============
    ``"torch"``       ``(f(x) * r * f(w)).astype(dt)``; output ``dt`` even for f32 w  finfo(f32).eps
    ``"llama"``       ``h = (f(x) * r).astype(dt)``, then ``w * h`` with promotion:    1e-6
                      bf16 x with f32 w gives **float32** (aliases ``"qwen2"``,
                      ``"mistral"``)
    ``"gemma"``       ``(f(x) * r * (1 + f(w))).astype(dt)``; w starts at 0            1e-6
    ``"t5"``          ``h = f(x) * r`` (float32); cast h to w's dtype if w is half;    1e-6
                      ``w * h``; without w the result stays float32
    ``"diffusers"``   as t5, plus ``+ bias``; without w the result is cast to ``dt``   finfo(f32).eps
    ``"seed"``        ``x / max(||x||_2 * n^{-1/2}, eps) * w`` with torch's per-op     1e-8
                      rounding in ``dt`` (the seed's 2021 x-transformers RMSNorm)
    ================  ==============================================================  ============

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

    Returns:
      Array of ``x.shape``; dtype as in the table (``x.dtype`` for torch and gemma).

    Raises:
      TypeError: ``x`` or a parameter is not floating.
      ValueError: bad parameter shape, bad axis, negative eps, unknown convention, or a bias
        outside the diffusers convention.
      NameError: ``axis_name`` is not bound (outside ``shard_map``/``pmap``).

    Example:
      >>> import jax.numpy as jnp, numpy as np, jln
      >>> np.asarray(jln.rms_norm(jnp.array([3.0, -4.0]), eps=0.0)).round(4)  # rms = sqrt(12.5)
      array([ 0.8485, -1.1314], dtype=float32)

    Reference: Zhang and Sennrich, "Root Mean Square Layer Normalization" (2019).
    """
    fn = "jln.rms_norm"
    axes, eps_f, conv, s, b, out = prepare(fn, x, scale, bias, axis, eps, convention, getattr(x, "dtype", None))
    name, groups = _checks.check_axis_name(axis_name, axis_index_groups, fn)
    return rms_apply(
        fn, impl, x, s, b, axes=axes, eps=eps_f, convention=conv, io_dtype=x.dtype, out_dtype=out,
        axis_name=name, axis_index_groups=groups,
    )


@_eager.compiled_when_eager("x", "residual", "scale")
def add_rms_norm(
    x: Array,
    residual: Array,
    scale: Array | None = None,
    *,
    axis: Axis = -1,
    eps: float | None = None,
    convention: str = "torch",
    residual_in_fp32: bool = False,
    impl: str = "auto",
    axis_name: Any = None,
    axis_index_groups: Any = None,
) -> tuple[Array, Array]:
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

    Returns:
      ``(normed, s)``; ``s`` has the promoted dtype of the inputs (float32 at least with
      ``residual_in_fp32``). Reverse mode keeps ``s`` and per-row rstd only.

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
    s = residual_sum(fn, x, residual, residual_in_fp32)
    axes, eps_f, conv, sc, _, out = prepare(fn, s, scale, None, axis, eps, convention, x.dtype)
    # the norm reads s unrounded (float32 with residual_in_fp32); its result takes the dtype
    # the convention gives for an x.dtype input
    name, groups = _checks.check_axis_name(axis_name, axis_index_groups, fn)
    y, s = rms_apply(
        fn, impl, s, sc, None, axes=axes, eps=eps_f, convention=conv, io_dtype=s.dtype, out_dtype=out,
        axis_name=name, axis_index_groups=groups, addends=(x, residual),
    )
    return y, s
