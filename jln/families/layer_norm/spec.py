"""LayerNorm's contract: its spec, formula, affine and modulation epilogue, dtype rules, and the
conventions' table (where each reference rounds to the input dtype)."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

import jax
import jax.numpy as jnp

from jln import _stats
from jln._contract import NormSpec

Array = jax.Array

#: Convention name -> aliases. ``"torch"``: ``F.layer_norm`` (float32 statistics, the affine in
#: float32, one rounding). ``"deberta"``: the same statistics, the normalized row rounded to the
#: input dtype, then ``weight * h + bias`` op by op with torch's promotion (DeBERTa's LayerNorm;
#: a ``nn.LayerNorm`` without affine followed by ``* (gamma + 1)``, MoonshineStreaming's, is this
#: with ``zero_centered``). ``"eager"``: every op in the input dtype, no float32 statistics
#: (``u = mean(x)``, ``(x - u).pow(2).mean()``, ``(x - u) / sqrt(var + eps)``; VitDet's and
#: ConvNeXt's hand-written LayerNorm), then the affine as ``"deberta"``.
CONVENTIONS: dict[str, tuple[str, ...]] = {
    "torch": (),
    "deberta": ("moonshine",),
    "eager": ("vitdet",),
}
ALIASES = {alias: name for name, aliases in CONVENTIONS.items() for alias in (name, *aliases)}
#: Every name :data:`ALIASES` takes, for type checkers (a test holds the two equal).
LayerNormConvention = Literal["torch", "deberta", "moonshine", "eager", "vitdet"]


def resolve_convention(convention: Any, fn: str) -> str:
    """The canonical name of ``convention`` (an alias such as ``"vitdet"`` gives ``"eager"``)."""
    if not isinstance(convention, str) or convention not in ALIASES:
        raise ValueError(
            f"{fn}: unknown LayerNorm convention {convention!r}; expected one of {sorted(ALIASES)} "
            f"(see jln.layer_norm's table)."
        )
    return ALIASES[convention]


def output_dtype(convention: str, dtype: Any, scale_dtype: Any = None, bias_dtype: Any = None) -> jnp.dtype:
    """The dtype a convention returns: ``dtype`` for torch; else torch's promotion of the input
    dtype with the weight's and the bias's (a float32 weight makes a bfloat16 input's result
    float32, as ``weight * h`` does in torch)."""
    if convention == "torch":
        return jnp.dtype(dtype)
    return _stats.promote(dtype, *(d for d in (scale_dtype, bias_dtype) if d is not None))


def affine_rounded(y: Array, scale: Array | None, bias: Array | None, io_dtype: Any) -> Array:
    """``round(y, io_dtype)``, then ``* scale`` and ``+ bias`` each rounded to torch's promotion
    of the dtypes so far (the eager affine of the ``"deberta"`` and ``"eager"`` conventions).
    ``y`` and the result are held in the statistics dtype; the operands are cast to it exactly."""
    sd, dt = y.dtype, jnp.dtype(io_dtype)
    y = _stats.round_to(y, dt)
    if scale is not None:
        dt = _stats.promote(dt, scale.dtype)
        y = _stats.round_to(y * scale.astype(sd), dt)
        if bias is not None and jnp.dtype(dt) == sd:
            # a product in the statistics dtype is not rounded by round_to, and XLA would fuse it
            # with the bias into one multiply-add (*measured*: ~28% of elements 1 ulp off torch's
            # two ops for bfloat16 x with float32 parameters)
            y = _stats.unfused(y)
    if bias is not None:
        dt = _stats.promote(dt, bias.dtype)
        y = _stats.round_to(y + bias.astype(sd), dt)
    return y


def eager_normalized(x: Array, axes: tuple[int, ...], eps: float, axis_name: Any = None, groups: Any = None) -> Array:
    """``(x - u) / sqrt(mean((x - u)^2) + eps)`` with ``u = mean(x)``, every op rounded to
    ``x``'s dtype as an eager framework computes it (a reduction accumulates in float32 and
    rounds once, as torch's mean on CPU). Returns values of ``x``'s dtype held in the
    statistics dtype. With ``axis_name`` the means are of the whole row."""
    dt = x.dtype
    x32 = _stats.upcast(x)

    def r(v: Array) -> Array:
        return _stats.round_to(v, dt)

    def mean(v: Array) -> Array:
        return r(_stats.row_mean(v, axes, axis_name, groups))

    d = r(x32 - mean(x32))
    return r(d / r(jnp.sqrt(r(mean(r(d * d)) + eps))))


def modulation_dtypes(y_dtype: Any, shift_dtype: Any, mscale_dtype: Any) -> tuple[jnp.dtype, jnp.dtype]:
    """The dtypes :func:`modulation_rounded` rounds to: after ``* (offset + mscale)`` and after
    ``+ shift`` (each is the previous one when that operand is absent)."""
    after_scale = jnp.dtype(y_dtype) if mscale_dtype is None else _stats.promote(y_dtype, mscale_dtype)
    after_shift = after_scale if shift_dtype is None else _stats.promote(after_scale, shift_dtype)
    return after_scale, after_shift


def modulation_rounded(
    y: Array, shift: Array | None, mscale: Array | None, offset: float, y_dtype: Any,
    shift_dtype: Any = None, mscale_dtype: Any = None,
) -> Array:
    """``y * (offset + mscale) + shift`` with an eager framework's rounding after each op.

    ``y`` holds values of dtype ``y_dtype`` in the (wider) statistics dtype. As torch
    evaluates ``x * (1 + scale) + shift`` op by op: ``1 + scale`` rounds to ``scale``'s dtype,
    the product to the promotion of ``y_dtype`` and ``scale``'s dtype, the sum to the
    promotion of that and ``shift``'s dtype. ``shift_dtype``/``mscale_dtype`` are the
    conditions' own dtypes (default: the arrays', which a kernel may hold widened). Returns
    values of that last dtype, still held in the statistics dtype.
    """
    sd = None if shift is None else jnp.dtype(shift_dtype or shift.dtype)
    md = None if mscale is None else jnp.dtype(mscale_dtype or mscale.dtype)
    after_scale, after_shift = modulation_dtypes(y_dtype, sd, md)
    if mscale is not None:
        factor = _stats.round_to(offset + mscale.astype(y.dtype), md)
        y = _stats.round_to(y * factor, after_scale)
    if shift is not None:
        y = _stats.round_to(y + shift.astype(y.dtype), after_shift)
    return y


@dataclasses.dataclass(frozen=True, kw_only=True)
class LayerNormSpec(NormSpec):
    """LayerNorm, optionally modulated (adaptive LayerNorm):
    ``y = (x - mean) / sqrt(var + eps) * scale + bias``, rounded to ``out_dtype``, then
    ``y * (mod_offset + mscale) + shift`` rounded op by op (``shift_dtype``/``mscale_dtype``:
    the conditions' dtypes, ``None`` when absent), returned in ``mod_dtype``. ``convention``
    (canonical, see :data:`CONVENTIONS`) with ``io_dtype`` (the input's dtype) says where the
    row is rounded."""

    #: ``None``: the convention's (:func:`output_dtype` of ``io_dtype`` and ``param_dtypes``)
    out_dtype: Any = None
    #: the dtypes of the scale and the bias given (what the convention's output dtype promotes)
    param_dtypes: tuple[Any, ...] = ()
    mod_offset: float = 1.0
    mod_dtype: Any = None
    shift_dtype: Any = None
    mscale_dtype: Any = None
    convention: str = "torch"
    io_dtype: Any = None
    #: the axes of ``x`` the parameters span when more than ``axes`` (one LayerNorm per head:
    #: the statistics over ``axes``, the parameters also over the heads axis); ``None``: ``axes``.
    #: The operands arrive broadcast against ``x``, so only the kernels need to know.
    param_axes: tuple[int, ...] | None = None

    op = "layer_norm"
    axis_fields = ("axes", "param_axes")
    operands = ("scale", "bias", "shift", "mscale")
    centered = True
    pallas = pallas_auto = True
    native = "norm"

    def __post_init__(self) -> None:
        if self.out_dtype is None:
            object.__setattr__(self, "out_dtype", output_dtype(self.convention, self.io_dtype, *self.param_dtypes))

    @property
    def modulated(self) -> bool:
        return self.shift_dtype is not None or self.mscale_dtype is not None

    @property
    def result_dtype(self) -> jnp.dtype:
        return jnp.dtype(self.mod_dtype if self.modulated else self.out_dtype)

    @property
    def steps(self) -> tuple[jnp.dtype, jnp.dtype]:
        """The modulation's roundings (:func:`modulation_dtypes`): the dtypes after
        ``* (mod_offset + mscale)`` and after ``+ shift``, which the kernels apply too."""
        return modulation_dtypes(self.out_dtype, self.shift_dtype, self.mscale_dtype)

    def formula(self, x: Array, *operands: Array | None) -> Array:
        """``(x - mean) * rsqrt(var + eps)``, statistics about a per-row pivot in the statistics
        dtype (global rows with ``axis_name``), then :meth:`tail`."""
        groups = self.axis_index_groups
        if self.convention == "eager":
            return self.tail(eager_normalized(x, self.axes, self.eps, self.axis_name, groups), *operands)
        x32 = _stats.upcast(x)
        _, d, var = _stats.centered(x32, self.axes, self.axis_name, groups)
        y = _stats.normalized(x32, self.axes, self.eps, (d, var), self.axis_name, groups)
        return self.tail(y, *operands)

    def row_stats(self, x: Array, *operands: Array | None) -> tuple[Array | None, Array]:
        """``(mean, rstd)`` of ``x``'s rows (``rstd = rsqrt(var + eps)``, biased variance) in
        the statistics dtype, keepdims: the statistics the formula uses."""
        x32 = _stats.upcast(x)
        mean, _, var = _stats.centered(x32, self.axes, self.axis_name, self.axis_index_groups)
        return mean, _stats.inv_std(var, self.eps)

    def tail(self, y: Array, *operands: Array | None) -> Array:
        """Affine, output rounding, modulation. ``y`` is in the statistics dtype; the operands
        are cast to it (exactly), so a kernel may pass them widened."""
        scale, bias, shift, mscale = (*operands, None, None, None, None)[:4]
        if self.convention != "torch":
            y = affine_rounded(y, scale, bias, self.io_dtype)
            if self.modulated:  # (op by op too, after the affine's own rounding)
                y = modulation_rounded(y, shift, mscale, self.mod_offset, self.out_dtype, self.shift_dtype,
                                       self.mscale_dtype)
            return y.astype(self.result_dtype)
        sd = y.dtype
        if scale is not None:
            y = y * scale.astype(sd)
        if bias is not None:
            y = y + bias.astype(sd)
        if self.modulated:
            y = modulation_rounded(
                _stats.round_to(y, self.out_dtype), shift, mscale, self.mod_offset, self.out_dtype,
                self.shift_dtype, self.mscale_dtype,
            )
        return y.astype(self.result_dtype)

    def kernel_reason(self) -> str | None:
        """Why no kernel computes this spec (``None``: the kernels may)."""
        if self.param_axes is not None:
            return (
                f"parameters laid out over axes {self.param_axes} (param_axes), more than the normalized "
                f"{self.axes}: the kernels take one parameter row per normalized row, and only the XLA "
                f"path broadcasts them"
            )
        if self.convention == "torch":
            return None
        return (
            f"the {self.convention!r} LayerNorm convention rounds to the input dtype op by op, which "
            f"only the XLA path implements"
        )
