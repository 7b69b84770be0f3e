"""Flax linen modules over jln's core functions (same names and parameters as :mod:`jln.nnx`).

Every module holds parameters only; its math is the pure function of the same name in
``jln._modules``, shared with :mod:`jln.nnx`. Defaults follow torch (eps 1e-5, output in the
input dtype). ``dtype=None`` keeps the core functions' dtype rule; ``dtype=d`` computes in and
returns ``d``. ``monitor=True`` sows per-row input/output statistics (see
``jln._monitor.row_stats``) into the ``"intermediates"`` collection under ``"stats"``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from jln import _checks
from jln import _modules as M
from jln._checks import Axis

Array = jax.Array

__all__ = ["LayerNorm", "RMSNorm"]


class _Group(nn.Module):
    """A named sub-tree of parameters (``self_attn/query/kernel``...), created from a spec."""

    specs: Any
    param_dtype: Any

    @nn.compact
    def __call__(self) -> dict[str, Any]:
        return _create(self, self.specs, self.param_dtype)


def _create(module: nn.Module, specs: Mapping[str, Any], param_dtype: Any) -> dict[str, Any]:
    """Declare the parameters of ``specs`` in ``module``'s scope; return their values."""
    out: dict[str, Any] = {}
    for name, spec in specs.items():
        if isinstance(spec, M.ParamSpec):
            out[name] = module.param(name, spec.init, spec.shape, param_dtype)
        else:
            out[name] = _Group(spec, param_dtype, name=name)()
    return out


def _cfg(module: nn.Module, cls: type) -> Any:
    return cls(**{f.name: getattr(module, f.name) for f in dataclasses.fields(cls)})


def _sow(module: nn.Module, stats: Any) -> None:
    if stats is not None:
        module.sow("intermediates", "stats", stats)


def _features(x: Any, axis: Axis, fn: str) -> tuple[int, ...]:
    _checks.check_floating(x, fn)
    return _checks.feature_shape(x.shape, _checks.normalize_axes(axis, x.ndim, fn))


class LayerNorm(nn.Module):
    r"""LayerNorm with torch's numbers: ``(x - E[x]) / sqrt(Var[x] + eps) * scale + bias``.

    Biased variance, eps inside the square root, statistics in float32 (float64 for float64
    input); the module calls :func:`jln.layer_norm`.

    Attributes:
      eps: added to the variance; torch's default 1e-5 (flax's LayerNorm uses 1e-6).
      axis: axis or axes to normalize over; parameters have the shape of ``x`` there.
      use_scale, use_bias: learnable ``scale`` (ones) and ``bias`` (zeros), torch's
        ``elementwise_affine`` / ``bias``.
      dtype: ``None``: output in ``x.dtype``; else compute in and return this dtype.
      param_dtype: dtype of the parameters (float32).
      impl: ``"auto"``, ``"xla"`` or ``"pallas"``, as :func:`jln.layer_norm`.
      monitor: sow per-row statistics into ``"intermediates"``.

    Returns (``__call__(x)``): array of ``x.shape``, dtype ``x.dtype`` (or ``dtype``).

    Raises:
      TypeError, ValueError: as :func:`jln.layer_norm`.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from jln import linen as jnn
      >>> x = jnp.arange(8.0).reshape(2, 4)
      >>> variables = jnn.LayerNorm().init(jax.random.key(0), x)
      >>> jnn.LayerNorm().apply(variables, x).shape
      (2, 4)
    """

    eps: float = 1e-5
    axis: Axis = -1
    use_scale: bool = True
    use_bias: bool = True
    dtype: Any = None
    param_dtype: Any = jnp.float32
    impl: str = "auto"
    monitor: bool = False

    @nn.compact
    def __call__(self, x: Array) -> Array:
        cfg = _cfg(self, M.LayerNormConfig)
        features = _features(x, self.axis, "jln.linen.LayerNorm")
        params = _create(self, M.layer_norm_specs(cfg, features), self.param_dtype)
        y, stats = M.apply_layer_norm(params, x, cfg)
        _sow(self, stats)
        return y


class RMSNorm(nn.Module):
    r"""RMSNorm in torch's convention or a named model's: ``x * rsqrt(mean(x^2) + eps) * scale``.

    The exact cast order and eps default of each convention (``"torch"``, ``"llama"``,
    ``"gemma"``, ``"t5"``, ``"diffusers"``, ``"seed"``) are those of :func:`jln.rms_norm`.

    Attributes:
      eps: ``None`` takes the convention's default (torch: ``finfo(float32).eps``).
      convention: see :func:`jln.rms_norm`. ``"gemma"`` initialises ``scale`` to 0 (it
        multiplies by ``1 + scale``).
      axis: axis or axes to normalize over.
      use_scale: learnable ``scale``.
      use_bias: learnable ``bias`` (``convention="diffusers"`` only).
      dtype, param_dtype, impl, monitor: as :class:`LayerNorm`. With ``dtype=None`` the output
        dtype is the convention's (``"llama"``: bf16 x with float32 scale gives float32).

    Returns (``__call__(x)``): array of ``x.shape``.

    Raises:
      TypeError, ValueError: as :func:`jln.rms_norm`; ``ValueError`` for ``use_bias`` outside
      the diffusers convention.

    Example:
      >>> import jax, jax.numpy as jnp
      >>> from jln import linen as jnn
      >>> m = jnn.RMSNorm(convention="llama")
      >>> x = jnp.ones((2, 4))
      >>> m.apply(m.init(jax.random.key(0), x), x).dtype
      dtype('float32')
    """

    eps: float | None = None
    convention: str = "torch"
    axis: Axis = -1
    use_scale: bool = True
    use_bias: bool = False
    dtype: Any = None
    param_dtype: Any = jnp.float32
    impl: str = "auto"
    monitor: bool = False

    @nn.compact
    def __call__(self, x: Array) -> Array:
        cfg = _cfg(self, M.RMSNormConfig)
        features = _features(x, self.axis, "jln.linen.RMSNorm")
        params = _create(self, M.rms_norm_specs(cfg, features), self.param_dtype)
        y, stats = M.apply_rms_norm(params, x, cfg)
        _sow(self, stats)
        return y
