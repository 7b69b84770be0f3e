"""Flax NNX modules over jln's core functions (same names and parameters as :mod:`jln.linen`).

Every module holds parameters only; its math is the pure function of the same name in
``jln._modules``, shared with :mod:`jln.linen`. Size arguments are positional, options
keyword-only. ``monitor=True`` sows per-row statistics as ``nnx.Intermediate`` named
``"stats"`` (read them with ``nnx.capture(model, nnx.Intermediate)``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from jln import _modules as M
from jln._checks import Axis

Array = jax.Array

__all__ = ["LayerNorm", "RMSNorm"]


class _Group(nnx.Module):
    """A named sub-tree of parameters (``self_attn.query.kernel``...), created from a spec."""

    def __init__(self, specs: Mapping[str, Any], param_dtype: Any, rngs: nnx.Rngs | None, fn: str):
        _create(self, specs, param_dtype, rngs, fn)


def _key(spec: M.ParamSpec, rngs: nnx.Rngs | None, fn: str) -> Any:
    if spec.init in (M.ones, M.zeros):
        return jax.random.key(0)  # constant initializers ignore the key
    if rngs is None:
        raise TypeError(f"{fn}: this module has randomly initialised parameters; pass rngs=nnx.Rngs(0).")
    return rngs.params()


def _create(module: nnx.Module, specs: Mapping[str, Any], param_dtype: Any, rngs: nnx.Rngs | None, fn: str) -> None:
    for name, spec in specs.items():
        if isinstance(spec, M.ParamSpec):
            value = spec.init(_key(spec, rngs, fn), spec.shape, param_dtype)
            setattr(module, name, nnx.Param(value))
        else:
            setattr(module, name, _Group(spec, param_dtype, rngs, fn))


def _values(module: nnx.Module, specs: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, spec in specs.items():
        node = getattr(module, name)
        out[name] = node[...] if isinstance(spec, M.ParamSpec) else _values(node, spec)
    return out


def _sow(module: nnx.Module, stats: Any) -> None:
    if stats is not None:
        module.sow(nnx.Intermediate, "stats", stats)


class LayerNorm(nnx.Module):
    r"""LayerNorm with torch's numbers: ``(x - E[x]) / sqrt(Var[x] + eps) * scale + bias``.

    The NNX twin of :class:`jln.linen.LayerNorm` (same options, parameters and numbers).

    Args:
      num_features: shape of ``x`` at ``axis`` (an int for one axis).
      eps, axis, use_scale, use_bias, dtype, param_dtype, impl, monitor: as
        :class:`jln.linen.LayerNorm`.
      rngs: unused (the parameters start at ones and zeros); accepted for uniformity.

    Returns (``__call__(x)``): array of ``x.shape``, dtype ``x.dtype`` (or ``dtype``).

    Raises:
      TypeError, ValueError: as :func:`jln.layer_norm`, and for a bad ``num_features``.

    Example:
      >>> import jax.numpy as jnp
      >>> from jln import nnx as jnnx
      >>> jnnx.LayerNorm(4)(jnp.arange(8.0).reshape(2, 4)).shape
      (2, 4)
    """

    def __init__(
        self,
        num_features: int | tuple[int, ...],
        *,
        eps: float = 1e-5,
        axis: Axis = -1,
        use_scale: bool = True,
        use_bias: bool = True,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        impl: str = "auto",
        monitor: bool = False,
        rngs: nnx.Rngs | None = None,
    ):
        fn = "jln.nnx.LayerNorm"
        self.cfg = M.LayerNormConfig(
            eps=eps, axis=axis, use_scale=use_scale, use_bias=use_bias, dtype=dtype, impl=impl, monitor=monitor
        )
        self.num_features = M.feature_shape(num_features, fn)
        self._specs = M.layer_norm_specs(self.cfg, self.num_features)
        _create(self, self._specs, param_dtype, rngs, fn)

    def __call__(self, x: Array) -> Array:
        y, stats = M.apply_layer_norm(_values(self, self._specs), x, self.cfg)
        _sow(self, stats)
        return y


class RMSNorm(nnx.Module):
    r"""RMSNorm in torch's convention or a named model's: ``x * rsqrt(mean(x^2) + eps) * scale``.

    The NNX twin of :class:`jln.linen.RMSNorm`.

    Args:
      num_features: shape of ``x`` at ``axis`` (an int for one axis).
      eps, convention, axis, use_scale, use_bias, dtype, param_dtype, impl, monitor: as
        :class:`jln.linen.RMSNorm`.
      rngs: unused; accepted for uniformity.

    Returns (``__call__(x)``): array of ``x.shape``, dtype by the convention (or ``dtype``).

    Raises:
      TypeError, ValueError: as :func:`jln.rms_norm`.

    Example:
      >>> import jax.numpy as jnp
      >>> from jln import nnx as jnnx
      >>> jnnx.RMSNorm(4, convention="gemma").scale[...]
      Array([0., 0., 0., 0.], dtype=float32)
    """

    def __init__(
        self,
        num_features: int | tuple[int, ...],
        *,
        eps: float | None = None,
        convention: str = "torch",
        axis: Axis = -1,
        use_scale: bool = True,
        use_bias: bool = False,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        impl: str = "auto",
        monitor: bool = False,
        rngs: nnx.Rngs | None = None,
    ):
        fn = "jln.nnx.RMSNorm"
        self.cfg = M.RMSNormConfig(
            eps=eps, convention=convention, axis=axis, use_scale=use_scale, use_bias=use_bias,
            dtype=dtype, impl=impl, monitor=monitor,
        )
        self.num_features = M.feature_shape(num_features, fn)
        self._specs = M.rms_norm_specs(self.cfg, self.num_features)
        _create(self, self._specs, param_dtype, rngs, fn)

    def __call__(self, x: Array) -> Array:
        y, stats = M.apply_rms_norm(_values(self, self._specs), x, self.cfg)
        _sow(self, stats)
        return y
