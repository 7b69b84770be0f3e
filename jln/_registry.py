"""The registry's records: what the test suite, ``jln parity`` and ``jln bench`` sweep, so
nothing ships unswept.

A :class:`Function` says how to call one public function and its torch reference; an
:class:`Op` (one op or convention of it) knows how to make inputs for a shape and dtype and
calls both on the same values; a :class:`Family` is one folder of :mod:`jln.families`: its
functions, ops, module kinds and torch converters. :mod:`jln._index` lists the families and
derives every table from them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import jax.numpy as jnp
import numpy as np

from jln._convert import Converter, Layout, NearMisses
from jln._modules import Kind

#: dtypes swept by default
DTYPES = ("float32", "float64", "bfloat16", "float16")


def trailing(ndim: int, k: int) -> tuple[int, ...]:
    """The statistics of a row: the trailing ``k`` axes."""
    return tuple(range(ndim - k, ndim))


def but_last(ndim: int, k: int) -> tuple[int, ...]:
    """BatchNorm's statistics, the channels last: every axis but the channels."""
    return tuple(range(ndim - 1))


def but_first(ndim: int, k: int) -> tuple[int, ...]:
    """GroupNorm's (one group): each sample's row."""
    return tuple(range(1, ndim))


def spatial(ndim: int, k: int) -> tuple[int, ...]:
    """InstanceNorm's and GRN's: the axes between the batch and the channels."""
    return tuple(range(1, ndim - 1))


def axis(k: int) -> Any:
    """The ``axis=`` of the trailing ``k`` axes."""
    return -1 if k == 1 else tuple(range(-k, 0))


@dataclass(frozen=True)
class Function:
    """How the registry calls one public function and its torch reference.

    ``jln(arrays, params, options, k)`` and ``torch(tensors, params, options, k)`` return a
    tuple of outputs (``params``: the op's parameter arrays in order, ``None`` where absent;
    ``k``: the number of trailing normalized axes). ``spec``: the contract class its calls
    build (the kernels it has are the spec's: ``spec.pallas``); ``stat_axes(ndim, k)`` are the
    axes the statistics run over (the backward's error floor, :meth:`Op.grad_atol`),
    ``centered`` whether they are about the mean. ``impl``: the function takes ``impl=``.
    ``min_rank``: the rank below which the function refuses ``x`` (as torch does), so sweeps
    skip those shapes. ``residual``: it takes and returns the residual stream (``add_*_norm``).
    ``flax``: the flax.linen layer ``jln bench`` times it against (``None``: flax has none).
    """

    name: str
    jln: Callable[[dict[str, Any], list[Any], dict[str, Any], int], tuple[Any, ...]]
    torch: Callable[[dict[str, Any], list[Any], dict[str, Any], int], tuple[Any, ...]]
    spec: type | None = None
    centered: bool = False
    stat_axes: Callable[[int, int], tuple[int, ...]] = trailing
    impl: bool = True
    min_rank: int = 1
    residual: bool = False
    flax: str | None = None

    @property
    def pallas(self) -> bool:
        """Whether the Pallas kernels compute it (``jln parity --full`` adds ``impl="pallas"``)."""
        return bool(getattr(self.spec, "pallas", False))


@dataclass(frozen=True)
class Op:
    """One op or convention.

    Attributes:
      name: unique name, e.g. ``"rms_norm[llama]"``.
      fn: the public function's record (:attr:`family`: its name, e.g. ``"rms_norm"``).
      params: per-feature parameter names among ``("scale", "bias")``.
      extra: extra array inputs: ``"residual"`` and ``"gate"`` (x-shaped), ``"shift"``/``"scale_c"``
        (per-example ``[B, D]``), ``"emb"`` (per-example ``[B, k*D]``), ``"running_mean"`` and
        ``"running_var"`` (per-feature fixed statistics).
      options: keyword options passed to jln (``convention``, ``order``, ``eps``...).
      exact: the bfloat16 bit-exact rule applies (named conventions).
      multi_axis: the op accepts several normalized axes.
      scale_center: where scale values are centered (1 for weights, 0 for Gemma's offset).
    """

    name: str
    fn: Function
    params: tuple[str, ...] = ("scale", "bias")
    extra: tuple[str, ...] = ()
    options: dict[str, Any] = field(default_factory=dict)
    exact: bool = False
    multi_axis: bool = True
    scale_center: float = 1.0
    chunks: int = 0

    @property
    def family(self) -> str:
        """The public function's name, e.g. ``"rms_norm"``."""
        return self.fn.name

    @property
    def min_rank(self) -> int:
        """The smallest rank of ``x`` the op takes (sweeps skip smaller shapes)."""
        return self.fn.min_rank

    # -- inputs ---------------------------------------------------------------------------
    def make_inputs(self, shape: tuple[int, ...], k: int, dtype: str, param_dtype: str | None = None, seed: int = 0) -> dict[str, np.ndarray]:
        """Random inputs as NumPy arrays already rounded to their dtypes (bf16 as ml_dtypes).

        x is ``2 * N(0, 1) + 0.5``; parameters are near their identity; conditions are small.
        """
        rng = np.random.default_rng(seed)
        pdt = param_dtype or dtype
        feat = shape[len(shape) - k :]
        out: dict[str, np.ndarray] = {"x": cast(2 * rng.standard_normal(shape) + 0.5, dtype)}
        if "residual" in self.extra:
            out["residual"] = cast(rng.standard_normal(shape), dtype)
        if "scale" in self.params:
            out["scale"] = cast(self.scale_center + 0.1 * rng.standard_normal(feat), pdt)
        if "bias" in self.params:
            out["bias"] = cast(0.1 * rng.standard_normal(feat), pdt)
        cond_shape = (shape[0], shape[-1]) if len(shape) >= 2 else (shape[-1],)
        for name in ("shift", "scale_c"):
            if name in self.extra:
                out[name] = cast(0.3 * rng.standard_normal(cond_shape), dtype)
        if "gate" in self.extra:
            out["gate"] = cast(rng.standard_normal(shape), dtype)
        if "running_mean" in self.extra:  # fixed statistics in the parameters' dtype (frozen BatchNorm)
            out["running_mean"] = cast(0.3 * rng.standard_normal(feat), pdt)
            out["running_var"] = cast(0.5 + rng.random(feat), pdt)
        if "emb" in self.extra:
            out["emb"] = cast(0.3 * rng.standard_normal(cond_shape[:-1] + (self.chunks * shape[-1],)), dtype)
        return out

    def grad_atol(self, inputs: dict[str, np.ndarray], k: int = 1, ct_max: float = 5.0) -> float:
        """The absolute error floor of any float implementation of this op's backward.

        A norm's backward is ``rstd * (g - ...)``: its terms are of size ``rstd * |g|`` and
        cancel, so float arithmetic leaves an error of a few ulp of that size however it is
        evaluated. For well-conditioned rows this floor is far below ``atol``; it matters for
        ill-conditioned ones (width 1, where the exact gradient is ~0 and both torch and jln
        return rounding noise). ``ct_max`` bounds the random cotangent.
        """
        if self.family == "modulate":
            return 0.0
        x = inputs["x"].astype(np.float64)
        if "residual" in inputs:
            x = x + inputs["residual"].astype(np.float64)
        if x.size == 0:
            return 0.0
        axes, centered = self.fn.stat_axes(x.ndim, k), self.fn.centered
        if "running_var" in inputs:  # fixed statistics (frozen BatchNorm): the buffers' spread
            spread = np.min(inputs["running_var"].astype(np.float64))
        else:
            spread = x.var(axis=axes) if centered else (x * x).mean(axis=axes)
        eps = self.options.get("eps") or (1e-5 if centered else 1e-7)
        rstd = float(np.max(1.0 / np.sqrt(spread + eps)))
        w = float(np.max(np.abs(inputs["scale"].astype(np.float64)))) if "scale" in inputs else 1.0
        dtype = str(inputs["x"].dtype)
        return 8 * float(jnp.finfo(dtype).eps) * rstd * (1.0 + w) * ct_max

    # -- calls ----------------------------------------------------------------------------
    @property
    def takes_impl(self) -> bool:
        """Whether the op's function takes ``impl=`` (every family with kernels or an XLA path
        to choose; not modulation, nor the norms computed one way only)."""
        return self.fn.impl

    def call_jln(self, inputs: dict[str, Any], k: int = 1, **overrides: Any) -> tuple[Any, ...]:
        """Run jln on arrays (``jax.Array`` or NumPy); always returns a tuple of outputs.
        An ``impl`` override is dropped for an op that takes none (:attr:`takes_impl`)."""
        a = {n: jnp.asarray(v) for n, v in inputs.items()}
        opts = {**self.options, **overrides}
        if not self.takes_impl:
            opts.pop("impl", None)
        return self.fn.jln(a, [a.get(p) for p in self.params], opts, k)

    def call_torch(self, tensors: dict[str, Any], k: int = 1) -> tuple[Any, ...]:
        """Run the torch reference on tensors; always returns a tuple of outputs."""
        o = dict(self.options)
        o.pop("impl", None)
        return self.fn.torch(tensors, [tensors.get(p) for p in self.params], o, k)


@dataclass(frozen=True)
class Family:
    """One folder of :mod:`jln.families`: the only index entry a family has (:mod:`jln._index`).

    ``functions``: the public functions' records; ``ops``: the registry's ops and conventions
    of them; ``kinds``: the module kinds (the classes of :mod:`jln.linen` and :mod:`jln.nnx`);
    ``converters``: the torch -> jln converters, in recognition order; ``layouts``: each jln
    class's layout back to a torch ``state_dict``; ``near_misses``: torch classes recognised
    by computation but not reproduced, with the reason (``(references, why)``).
    """

    name: str
    functions: tuple[Function, ...] = ()
    ops: tuple[Op, ...] = ()
    kinds: tuple[Kind, ...] = ()
    converters: tuple[Converter, ...] = ()
    layouts: Mapping[str, Layout] = field(default_factory=dict)
    near_misses: NearMisses = ()


def cast(a: np.ndarray, dtype: str) -> np.ndarray:
    """``a`` rounded to ``dtype`` (bfloat16 as ml_dtypes), float64 kept."""
    if dtype == "float64":
        return np.asarray(a, np.float64)
    return np.asarray(a, np.float32).astype(jnp.dtype(dtype))



def to_torch(inputs: dict[str, np.ndarray]) -> dict[str, Any]:
    """The same values as torch tensors (bfloat16 via float32, which is exact)."""
    import torch

    out = {}
    for n, v in inputs.items():
        dt = str(v.dtype)
        t = torch.from_numpy(np.asarray(v, dtype=np.float64 if dt == "float64" else np.float32).copy())
        out[n] = t.to(getattr(torch, dt))
    return out


def to_float64_torch(inputs: dict[str, np.ndarray]) -> dict[str, Any]:
    """The same values, upcast exactly to float64 torch tensors (for the reference)."""
    import torch

    return {n: torch.from_numpy(np.asarray(v, dtype=np.float64).copy()) for n, v in inputs.items()}
