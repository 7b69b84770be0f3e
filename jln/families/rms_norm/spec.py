"""RMSNorm's contract: the conventions' table, their dtype order, the spec and the formula.

Each convention reproduces its reference's dtype order exactly (where the reference rounds to
the input dtype, jln rounds there too), so bfloat16 outputs match bit for bit except where
the two frameworks' float32 reductions differ in their last bit.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

import jax
import jax.numpy as jnp

from jln import _stats
from jln._contract import NormSpec

Array = jax.Array

#: Convention name -> (aliases, eps default). ``None`` eps means torch's finfo rule. Aliases
#: name the libraries and models whose RMSNorm a convention reproduces: ``"qwen2"`` and
#: ``"mistral"`` compute as ``"llama"``; ``"x-transformers"`` is ``"seed"`` (x-transformers'
#: 2021 RMSNorm, ``x / max(||x||_2 * n**-0.5, eps) * w``, which the seed model uses). The
#: table of what each computes is :func:`jln.rms_norm`'s docstring.
CONVENTIONS: dict[str, tuple[tuple[str, ...], float | None]] = {
    "torch": ((), None),
    "llama": (("qwen2", "mistral"), 1e-6),
    "gemma": ((), 1e-6),
    "t5": ((), 1e-6),
    "diffusers": ((), None),
    "seed": (("x-transformers",), 1e-8),
    "eager": (("imagegpt", "ltx2"), None),
    "round_rstd": (("deepseek_v4", "glm5_next"), 1e-6),
    "input_scaled": (("muse_spark_input",), 1e-6),
    "gemma_rounded": (("muse_spark_centered", "krea2"), 1e-6),
}
#: The conventions only the XLA path computes, and what they round that the kernels do not:
#: ``"eager"`` (ImageGPT's RMSNorm, LTX-2's PerChannelRMSNorm / PixelNorm) takes every op in the
#: input dtype (``x / sqrt(mean(x**2) + eps)``, each op rounded); ``"round_rstd"`` (DeepSeek-V4's
#: and GLM-5-Next's unweighted RMSNorm) rounds the float32 ``rsqrt`` to the input dtype before
#: ``x * rstd``; ``"input_scaled"`` (MuseSpark's input-scaled RMSNorm) multiplies x by ``1 + w``
#: (formed in w's dtype) and rounds to the input dtype *before* the statistics, then normalizes
#: as ``"torch"`` without a weight; ``"gemma_rounded"`` (MuseSpark's centered RMSNorm, Krea 2's)
#: is ``"gemma"`` with ``1 + w`` formed in w's dtype, so rounded there for a half weight.
XLA_ONLY = {
    "eager": "computes every op in the input dtype (no float32 statistics)",
    "round_rstd": "rounds rstd to the input dtype before multiplying x by it",
    "input_scaled": "scales x by `1 + w` before the statistics",
    "gemma_rounded": "rounds `1 + w` to the weight's dtype",
}
ALIASES = {alias: name for name, (aliases, _) in CONVENTIONS.items() for alias in (name, *aliases)}
#: Every name :data:`ALIASES` takes, for type checkers (a test holds the two equal).
RMSConvention = Literal["torch", "llama", "qwen2", "mistral", "gemma", "t5", "diffusers", "seed", "x-transformers", "eager",
                        "imagegpt", "ltx2", "round_rstd", "deepseek_v4", "glm5_next", "input_scaled", "muse_spark_input",
                        "gemma_rounded", "muse_spark_centered", "krea2"]


def resolve_convention(convention: str, fn: str) -> str:
    """The canonical name of ``convention`` (an alias such as ``"qwen2"`` gives ``"llama"``)."""
    if convention not in ALIASES:
        raise ValueError(
            f"{fn}: unknown convention {convention!r}; expected one of {sorted(ALIASES)}."
        )
    return ALIASES[convention]


def default_eps(convention: str, dtype: Any) -> float:
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
    if convention in ("torch", "gemma", "input_scaled", "gemma_rounded"):
        return dt
    if scale_dtype is None:
        if convention == "t5":  # x * rsqrt(var) promotes to the statistics dtype
            return _stats.promote(dt, _stats.stats_dtype(dt))
        return dt
    wd = jnp.dtype(scale_dtype)
    if convention in ("llama", "seed", "eager", "round_rstd"):
        return _stats.promote(dt, wd)
    # t5 and diffusers: h = x * rsqrt(var) is float32; cast to w's dtype if w is half
    h = _stats.promote(dt, _stats.stats_dtype(dt))
    out = wd if _stats.is_low_precision(wd) else _stats.promote(h, wd)
    if bias_dtype is not None:
        out = _stats.promote(out, bias_dtype)
    return out


def rms_steps(convention: str, io_dtype: Any, scale_dtype: Any, has_bias: bool) -> tuple[bool, Any, Any]:
    """Each convention's steps after ``h = f(x) * rstd``: ``(gemma, round_h, round_y)``.

    ``y = round(h, round_h) * (1 + w if gemma else w)``, then rounded to ``round_y`` before the
    bias; a ``None`` dtype is no rounding. The only place the conventions' dtype order lives:
    the XLA body (:meth:`RMSNormSpec.tail`) and the kernels apply these steps.
    """
    if convention in ("torch", "gemma", "input_scaled", "gemma_rounded"):  # (input_scaled: its weight acts before)
        return convention in ("gemma", "gemma_rounded"), None, None
    if convention in ("llama", "seed", "eager", "round_rstd"):
        return False, jnp.dtype(io_dtype), None  # cast to the input dtype, *then* the weight
    if scale_dtype is None:  # t5 / diffusers without a weight
        return False, None, None
    # t5 / diffusers: h is rounded to a half weight's dtype; diffusers rounds (h * w) to its own
    # dtype before + bias
    round_h = jnp.dtype(scale_dtype) if _stats.is_low_precision(scale_dtype) else None
    round_y = output_dtype(convention, io_dtype, scale_dtype) if has_bias else None
    return False, round_h, round_y


def _round_keep_finite(v: Array, dtype: Any) -> Array:
    r = _stats.round_to(v, dtype)
    return jnp.where(jnp.isfinite(r), r, v)


@dataclasses.dataclass(frozen=True, kw_only=True)
class RMSNormSpec(NormSpec):
    """RMSNorm in one convention (see ``jln.rms_norm``'s table). ``io_dtype`` is the input's
    dtype as the convention sees it, ``out_dtype`` the result's, ``scale_dtype`` the weight's
    own dtype (``None``: no weight), ``has_bias`` diffusers' bias."""

    convention: str
    io_dtype: Any
    out_dtype: Any
    scale_dtype: Any = None
    has_bias: bool = False

    op = "rms_norm"
    operands = ("scale", "bias")
    centered = False
    pallas = pallas_auto = True
    native = "norm"

    @property
    def result_dtype(self) -> jnp.dtype:
        return jnp.dtype(self.out_dtype)

    @property
    def steps(self) -> tuple[bool, Any, Any]:
        """:func:`rms_steps` of this call: ``(gemma, round_h, round_y)``."""
        return rms_steps(self.convention, self.io_dtype, self.scale_dtype, self.has_bias)

    def formula(self, x: Array, *operands: Array | None) -> Array:
        """``h = f(x) * rsqrt(mean(f(x)^2) + eps)`` (seed: ``f(x) / max(||x|| n^-1/2, eps)``),
        then :meth:`tail`. With ``axis_name`` the sum of squares is psummed once and ``n`` is
        the global count."""
        x32 = _stats.upcast(x)
        name, groups = self.axis_name, self.axis_index_groups
        if self.convention == "eager":
            return self.tail(self.eager_normalized(x32), *operands)
        if self.convention == "input_scaled":
            w = operands[0] if operands else None
            if w is not None:  # x.float() * (1 + w).float(), rounded to x's dtype
                x32 = _stats.round_to(x32 * _stats.round_to(1.0 + w.astype(x32.dtype), w.dtype), self.io_dtype)
            return self.tail(_stats.normalized(x32, self.axes, self.eps, None, name, groups))
        if self.convention == "round_rstd":
            r = _stats.round_to(_stats.inv_std_of(x32, self.axes, self.eps, None, name, groups), self.io_dtype)
            return self.tail(_stats.round_to(x32 * r, self.io_dtype), *operands)
        if self.convention == "seed":
            n = _stats.count(x.shape, self.axes, name, groups)
            sum_sq = _stats.sum_square(x32, self.axes, name, groups)
            denom = _stats.checkpoint_name(self.seed_denominator(sum_sq, n), _stats.STAT_NAMES[1])
            return self.tail(x32 / denom, *operands)
        h = _stats.normalized(x32, self.axes, self.eps, None, name, groups)
        return self.tail(h, *operands)

    def row_stats(self, x: Array, *operands: Array | None) -> tuple[Array | None, Array]:
        """``(None, rstd)``: ``rsqrt(mean(f(x)^2) + eps)`` (seed: ``1 / max(||x|| n^-1/2, eps)``)
        of ``x`` as the call receives it, in the statistics dtype, keepdims."""
        x32 = _stats.upcast(x)
        name, groups = self.axis_name, self.axis_index_groups
        if self.convention == "seed":
            n = _stats.count(x.shape, self.axes, name, groups)
            return None, 1.0 / self.seed_denominator(_stats.sum_square(x32, self.axes, name, groups), n)
        return None, _stats.inv_std_of(x32, self.axes, self.eps, None, name, groups)

    def eager_normalized(self, x32: Array) -> Array:
        """``x / sqrt(mean(x**2) + eps)`` with every op rounded to ``io_dtype`` (a reduction
        accumulates in float32 and rounds once, as torch's mean on CPU); values of ``io_dtype``
        held in ``x32``'s dtype."""
        dt = self.io_dtype

        def r(v: Array) -> Array:
            return _stats.round_to(v, dt)

        ms = r(_stats.row_mean(r(x32 * x32), self.axes, self.axis_name, self.axis_index_groups))
        return r(x32 / r(jnp.sqrt(r(ms + self.eps))))

    def kernel_reason(self) -> str | None:
        """Why no kernel computes this convention (``None``: the kernels may)."""
        why = XLA_ONLY.get(self.convention)
        return None if why is None else f"the {self.convention!r} RMSNorm convention {why}, which only the XLA path implements"

    def seed_denominator(self, sum_sq: Array, n: int) -> Array:
        """The seed convention's ``max(||x||_2 * n^-1/2, eps)`` from the row's sum of squares."""
        norm = _stats.safe_sqrt(sum_sq)
        # torch rounds ||x|| and ||x||*d^-1/2 to a half dtype; jln does too unless that would
        # overflow float16 (torch then returns zeros), where it keeps the float32 value.
        norm = _round_keep_finite(norm, self.io_dtype)
        denom = _round_keep_finite(norm * (n**-0.5), self.io_dtype)
        return jnp.maximum(denom, self.eps)  # the clamp, in float32: eps=1e-8 underflows float16

    def tail(self, h: Array, *operands: Array | None) -> Array:
        """Each convention's rounding and weighting after ``h = f(x) * rstd`` (``f(x) / denom``
        for seed), as :func:`rms_steps` states them. ``h`` is in the statistics dtype; the
        operands are cast to it (exactly)."""
        scale, bias = (*operands, None, None)[:2]
        gemma, round_h, round_y = self.steps
        sd = h.dtype
        if round_h is not None:
            h = _stats.round_to(h, round_h)
        if scale is not None:
            w = scale.astype(sd)
            if self.convention == "gemma_rounded":  # 1 + w in w's own dtype, then upcast
                h = h * _stats.round_to(1.0 + w, scale.dtype)
            else:
                h = h * (1.0 + w) if gemma else h * w
        if round_y is not None:
            h = _stats.round_to(h, round_y)
        if bias is not None:
            h = h + bias.astype(sd)
        return h.astype(self.out_dtype)
