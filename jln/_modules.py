"""The math of every Flax module, written once for :mod:`jln.linen` and :mod:`jln.nnx`.

Each module kind has three pieces here:

* a frozen config dataclass (the module's options, validated once in ``__post_init__``),
* a ``*_specs`` function giving the parameter tree: names, shapes and initializers,
* an ``apply_*`` pure function ``(params, inputs, cfg) -> (outputs, stats)`` that calls
  the :mod:`jln` core functions. ``stats`` is the monitor record (``None`` unless
  ``cfg.monitor``).

The linen and nnx classes only create the parameters from the spec and call ``apply_*``, so
the two front-ends cannot drift. Norm math is only ever ``jln.layer_norm``,
``jln.rms_norm``, ``jln.adaptive_layer_norm`` and ``jln.modulate``; attention lives once in
:func:`mha`.

dtype policy (both front-ends): ``dtype=None`` keeps the core functions' rule for the norms
(torch: output in the input dtype; the named RMS conventions as in ``jln.rms_norm``) and
runs Dense/attention layers in the dtype of the module's main input ``x`` (parameters are
cast to it at use, as torch autocast does). ``dtype=d`` casts ``x`` (and conditions) to
``d``, runs everything in ``d`` (norm statistics stay float32) and returns ``d``.
Parameters are stored in ``param_dtype``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp

from jln import _checks, _dispatch, _monitor
from jln._layer_norm import layer_norm
from jln._rms_norm import resolve_convention, rms_norm

Array = jax.Array
Params = Mapping[str, Any]
Stats = dict[str, Any] | None

# --------------------------------------------------------------------------- param specs


@dataclasses.dataclass(frozen=True)
class ParamSpec:
    """One parameter: its shape and initializer ``init(key, shape, dtype) -> Array``."""

    shape: tuple[int, ...]
    init: Callable[..., Array]


ones = jax.nn.initializers.ones
zeros = jax.nn.initializers.zeros
#: torch ``nn.Linear``'s default kernel init, U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
dense_kernel_init = jax.nn.initializers.variance_scaling(1.0 / 3.0, "fan_in", "uniform")


def dense_specs(n_in: int, n_out: int, *, use_bias: bool = True, zero: bool = False) -> dict[str, ParamSpec]:
    """``{"kernel": [n_in, n_out], "bias": [n_out]}``; ``zero`` initialises both to 0 (adaLN-Zero)."""
    specs = {"kernel": ParamSpec((n_in, n_out), zeros if zero else dense_kernel_init)}
    if use_bias:
        specs["bias"] = ParamSpec((n_out,), zeros)
    return specs


def feature_shape(num_features: int | tuple[int, ...], fn: str) -> tuple[int, ...]:
    """``num_features`` as a shape tuple (an int means one normalized axis)."""
    shape = (num_features,) if isinstance(num_features, int) else tuple(num_features)
    if not shape or not all(isinstance(n, int) and n > 0 for n in shape):
        raise ValueError(
            f"{fn}: `num_features` must be a positive int or a tuple of positive ints (the "
            f"shape of x at the normalized axes); received {num_features!r}."
        )
    return shape


def check_positive(value: Any, name: str, fn: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{fn}: `{name}` must be a positive int; received {value!r}.")
    return value


# --------------------------------------------------------------------------- helpers


def compute_dtype(cfg_dtype: Any, x: Array) -> jnp.dtype:
    """The dtype Dense/attention layers run in: ``dtype`` if given, else ``x.dtype``."""
    return jnp.dtype(x.dtype if cfg_dtype is None else cfg_dtype)


def dense(p: Params, x: Array, dtype: Any) -> Array:
    """``x @ kernel + bias`` in ``dtype`` (torch ``nn.Linear`` with ``weight = kernel.T``)."""
    y = jnp.matmul(x.astype(dtype), p["kernel"].astype(dtype))
    if "bias" in p:
        y = y + p["bias"].astype(dtype)
    return y


def _cast_in(x: Array, dtype: Any) -> Array:
    return x if dtype is None else x.astype(dtype)


def _cast_out(y: Array, dtype: Any) -> Array:
    return y if dtype is None else y.astype(dtype)


def _record(monitor: bool, x: Array, y: Array, axis: Any, fn: str) -> Stats:
    if not monitor:
        return None
    return _monitor.row_stats(x, y, _checks.normalize_axes(axis, x.ndim, fn))


def _check_common(cfg: Any, fn: str) -> None:
    _checks.check_choice(cfg.impl, "impl", _dispatch.IMPLS, fn)
    if cfg.dtype is not None:
        dt = jnp.dtype(cfg.dtype)
        if not jnp.issubdtype(dt, jnp.floating):
            raise TypeError(f"{fn}: `dtype` must be a floating dtype or None; received {cfg.dtype!r}.")


# --------------------------------------------------------------------------- LayerNorm


@dataclasses.dataclass(frozen=True)
class LayerNormConfig:
    eps: float = 1e-5
    axis: Any = -1
    use_scale: bool = True
    use_bias: bool = True
    dtype: Any = None
    impl: str = "auto"
    monitor: bool = False

    def __post_init__(self) -> None:
        _checks.check_eps(self.eps, "jln LayerNorm")
        _check_common(self, "jln LayerNorm")


def layer_norm_specs(cfg: LayerNormConfig, features: tuple[int, ...]) -> dict[str, ParamSpec]:
    specs = {}
    if cfg.use_scale:
        specs["scale"] = ParamSpec(features, ones)
    if cfg.use_bias:
        specs["bias"] = ParamSpec(features, zeros)
    return specs


def apply_layer_norm(params: Params, x: Array, cfg: LayerNormConfig) -> tuple[Array, Stats]:
    """``jln.layer_norm(x, scale, bias)`` with the module's dtype rule and monitor."""
    xi = _cast_in(x, cfg.dtype)
    y = layer_norm(xi, params.get("scale"), params.get("bias"), axis=cfg.axis, eps=cfg.eps, impl=cfg.impl)
    y = _cast_out(y, cfg.dtype)
    return y, _record(cfg.monitor, xi, y, cfg.axis, "jln LayerNorm")


# --------------------------------------------------------------------------- RMSNorm


@dataclasses.dataclass(frozen=True)
class RMSNormConfig:
    eps: float | None = None
    convention: str = "torch"
    axis: Any = -1
    use_scale: bool = True
    use_bias: bool = False
    dtype: Any = None
    impl: str = "auto"
    monitor: bool = False

    def __post_init__(self) -> None:
        fn = "jln RMSNorm"
        resolve_convention(self.convention, fn)
        if self.eps is not None:
            _checks.check_eps(self.eps, fn)
        if self.use_bias and (self.canonical != "diffusers" or not self.use_scale):
            raise ValueError(
                f"{fn}: use_bias=True is only defined for convention='diffusers' with "
                f"use_scale=True (diffusers' RMSNorm with bias); received "
                f"convention={self.convention!r}, use_scale={self.use_scale}."
            )
        _check_common(self, fn)

    @property
    def canonical(self) -> str:
        """The convention's canonical name (``"qwen2"`` -> ``"llama"``)."""
        return resolve_convention(self.convention, "jln RMSNorm")


def rms_norm_specs(cfg: RMSNormConfig, features: tuple[int, ...]) -> dict[str, ParamSpec]:
    specs = {}
    if cfg.use_scale:
        # Gemma multiplies by (1 + scale), so its identity weight is 0.
        specs["scale"] = ParamSpec(features, zeros if cfg.canonical == "gemma" else ones)
    if cfg.use_bias:
        specs["bias"] = ParamSpec(features, zeros)
    return specs


def apply_rms_norm(params: Params, x: Array, cfg: RMSNormConfig) -> tuple[Array, Stats]:
    """``jln.rms_norm(x, scale, convention=...)`` with the module's dtype rule and monitor."""
    xi = _cast_in(x, cfg.dtype)
    y = rms_norm(
        xi, params.get("scale"), axis=cfg.axis, eps=cfg.eps, convention=cfg.convention,
        bias=params.get("bias"), impl=cfg.impl,
    )
    y = _cast_out(y, cfg.dtype)
    return y, _record(cfg.monitor, xi, y, cfg.axis, "jln RMSNorm")
