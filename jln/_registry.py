"""One registry of jln's ops and conventions: the test suite, ``jln parity`` and ``jln bench``
all sweep it, so nothing ships unswept.

An :class:`Op` knows how to make inputs for a shape and dtype, how to call jln, and how to
call its torch reference (``jln._reference``) on the same values.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jax.numpy as jnp
import numpy as np

import jln
from jln import _reference

#: dtypes swept by default
DTYPES = ("float32", "float64", "bfloat16", "float16")


@dataclass(frozen=True)
class Op:
    """One op or convention.

    Attributes:
      name: unique name, e.g. ``"rms_norm[llama]"``.
      family: the public function, e.g. ``"rms_norm"``.
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
    family: str
    params: tuple[str, ...] = ("scale", "bias")
    extra: tuple[str, ...] = ()
    options: dict[str, Any] = field(default_factory=dict)
    exact: bool = False
    multi_axis: bool = True
    scale_center: float = 1.0
    chunks: int = 0

    @property
    def min_rank(self) -> int:
        """The smallest rank of ``x`` the op takes (sweeps skip smaller shapes)."""
        return FAMILIES[self.family].min_rank

    # -- inputs ---------------------------------------------------------------------------
    def make_inputs(self, shape: tuple[int, ...], k: int, dtype: str, param_dtype: str | None = None, seed: int = 0) -> dict[str, np.ndarray]:
        """Random inputs as NumPy arrays already rounded to their dtypes (bf16 as ml_dtypes).

        x is ``2 * N(0, 1) + 0.5``; parameters are near their identity; conditions are small.
        """
        rng = np.random.default_rng(seed)
        pdt = param_dtype or dtype
        feat = shape[len(shape) - k :]
        out: dict[str, np.ndarray] = {"x": _cast(2 * rng.standard_normal(shape) + 0.5, dtype)}
        if "residual" in self.extra:
            out["residual"] = _cast(rng.standard_normal(shape), dtype)
        if "scale" in self.params:
            out["scale"] = _cast(self.scale_center + 0.1 * rng.standard_normal(feat), pdt)
        if "bias" in self.params:
            out["bias"] = _cast(0.1 * rng.standard_normal(feat), pdt)
        cond_shape = (shape[0], shape[-1]) if len(shape) >= 2 else (shape[-1],)
        for name in ("shift", "scale_c"):
            if name in self.extra:
                out[name] = _cast(0.3 * rng.standard_normal(cond_shape), dtype)
        if "gate" in self.extra:
            out["gate"] = _cast(rng.standard_normal(shape), dtype)
        if "running_mean" in self.extra:  # fixed statistics in the parameters' dtype (frozen BatchNorm)
            out["running_mean"] = _cast(0.3 * rng.standard_normal(feat), pdt)
            out["running_var"] = _cast(0.5 + rng.random(feat), pdt)
        if "emb" in self.extra:
            out["emb"] = _cast(0.3 * rng.standard_normal(cond_shape[:-1] + (self.chunks * shape[-1],)), dtype)
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
        fam = FAMILIES[self.family]
        axes, centered = fam.stat_axes(x.ndim, k), fam.centered
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
        return FAMILIES[self.family].impl

    def call_jln(self, inputs: dict[str, Any], k: int = 1, **overrides: Any) -> tuple[Any, ...]:
        """Run jln on arrays (``jax.Array`` or NumPy); always returns a tuple of outputs.
        An ``impl`` override is dropped for an op that takes none (:attr:`takes_impl`)."""
        a = {n: jnp.asarray(v) for n, v in inputs.items()}
        opts = {**self.options, **overrides}
        if not self.takes_impl:
            opts.pop("impl", None)
        return FAMILIES[self.family].jln(a, [a.get(p) for p in self.params], opts, k)

    def call_torch(self, tensors: dict[str, Any], k: int = 1) -> tuple[Any, ...]:
        """Run the torch reference on tensors; always returns a tuple of outputs."""
        o = dict(self.options)
        o.pop("impl", None)
        return FAMILIES[self.family].torch(tensors, [tensors.get(p) for p in self.params], o, k)


@dataclass(frozen=True)
class Family:
    """How the registry calls one public function and its torch reference.

    ``jln(arrays, params, options, k)`` and ``torch(tensors, params, options, k)`` return a
    tuple of outputs (``params``: the op's parameter arrays in order, ``None`` where absent;
    ``k``: the number of trailing normalized axes). ``stat_axes(ndim, k)`` are the axes the
    statistics run over (the backward's error floor, :meth:`Op.grad_atol`), ``centered``
    whether they are about the mean. ``impl``: the function takes ``impl=``. ``min_rank``: the
    rank below which the function refuses ``x`` (as torch does), so sweeps skip those shapes.
    ``pallas``: the Pallas kernels compute the family's registry entries.
    A new family is one entry of :data:`FAMILIES` and its ops in :data:`OPS`.
    """

    jln: Callable[[dict[str, Any], list[Any], dict[str, Any], int], tuple[Any, ...]]
    torch: Callable[[dict[str, Any], list[Any], dict[str, Any], int], tuple[Any, ...]]
    centered: bool = False
    stat_axes: Callable[[int, int], tuple[int, ...]] = lambda ndim, k: tuple(range(ndim - k, ndim))
    impl: bool = True
    min_rank: int = 1
    pallas: bool = False  # the Pallas kernels compute it (jln parity --full adds impl="pallas")


def _axis(k: int) -> Any:
    return -1 if k == 1 else tuple(range(-k, 0))


def _but_last(ndim: int, k: int) -> tuple[int, ...]:  # BatchNorm, channels last
    return tuple(range(ndim - 1))


def _but_first(ndim: int, k: int) -> tuple[int, ...]:  # GroupNorm: each sample's row
    return tuple(range(1, ndim))


def _spatial(ndim: int, k: int) -> tuple[int, ...]:  # InstanceNorm, GRN: between batch and channels
    return tuple(range(1, ndim - 1))


def _adaptive_torch(t: dict[str, Any], p: list[Any], o: dict[str, Any], k: int) -> tuple[Any, ...]:
    order = jln.ORDERS[o.pop("order")]
    return (_reference.adaptive_layer_norm(t["x"], t["emb"], *p, order=order, **o),)


def _adaptive_rms_torch(t: dict[str, Any], p: list[Any], o: dict[str, Any], k: int) -> tuple[Any, ...]:
    order = jln.ORDERS[o.pop("order")]
    return (_reference.adaptive_rms_norm(t["x"], t["emb"], *p, order=order, **o),)


#: family (the public function's name) -> how to call it and its reference
FAMILIES: dict[str, Family] = {
    "layer_norm": Family(
        lambda a, p, o, k: (jln.layer_norm(a["x"], *p, axis=_axis(k), **o),),
        lambda t, p, o, k: (_reference.layer_norm(t["x"], *p, k=k, **o),), centered=True, pallas=True),
    "rms_norm": Family(
        lambda a, p, o, k: (jln.rms_norm(a["x"], p[0], bias=a.get("bias"), axis=_axis(k), **o),),
        lambda t, p, o, k: (_reference.rms_norm(t["x"], p[0], bias=t.get("bias"), k=k, **o),), pallas=True),
    "add_layer_norm": Family(
        lambda a, p, o, k: tuple(jln.add_layer_norm(a["x"], a["residual"], *p, axis=_axis(k), **o)),
        lambda t, p, o, k: _reference.add_norm(t["x"], t["residual"], *p, norm="layer_norm", k=k, **o), centered=True, pallas=True),
    "add_rms_norm": Family(
        lambda a, p, o, k: tuple(jln.add_rms_norm(a["x"], a["residual"], *p, axis=_axis(k), **o)),
        lambda t, p, o, k: _reference.add_norm(t["x"], t["residual"], *p, norm="rms_norm", k=k, **o), pallas=True),
    "modulate": Family(
        lambda a, p, o, k: (jln.modulate(a["x"], a["shift"], a["scale_c"], **o),),
        lambda t, p, o, k: (_reference.modulate(t["x"], t["shift"], t["scale_c"], **o),), impl=False),
    "adaptive_layer_norm": Family(
        lambda a, p, o, k: (jln.adaptive_layer_norm(a["x"], a["emb"], *p, axis=_axis(k), **o)[0],),
        _adaptive_torch, centered=True, pallas=True),
    "adaptive_rms_norm": Family(
        lambda a, p, o, k: (jln.adaptive_rms_norm(a["x"], a["emb"], *p, **o)[0],), _adaptive_rms_torch),
    "gated_rms_norm": Family(
        lambda a, p, o, k: (jln.gated_rms_norm(a["x"], a.get("gate"), *p, axis=_axis(k), **o),),
        lambda t, p, o, k: (_reference.gated_rms_norm(t["x"], t.get("gate"), *p, k=k, **o),), pallas=True),
    # batch statistics, the channels last: x [rows, D] is a batch of rows with D channels
    "batch_norm": Family(
        lambda a, p, o, k: (jln.batch_norm(a["x"], None, None, *p, **o)[0],),
        lambda t, p, o, k: (_reference.batch_norm(t["x"], *p, **o),), centered=True, stat_axes=_but_last),
    "group_norm": Family(
        lambda a, p, o, k: (jln.group_norm(a["x"], o.pop("num_groups"), *p, **o),),
        lambda t, p, o, k: (_reference.group_norm(t["x"], *p, **o),), centered=True, stat_axes=_but_first),
    "instance_norm": Family(
        lambda a, p, o, k: (jln.instance_norm(a["x"], None, None, *p, **o)[0],),
        lambda t, p, o, k: (_reference.instance_norm(t["x"], *p, **o),), centered=True, stat_axes=_spatial,
        min_rank=3),
    "frozen_batch_norm": Family(
        lambda a, p, o, k: (jln.frozen_batch_norm(a["x"], a["running_mean"], a["running_var"], *p, **o),),
        lambda t, p, o, k: (_reference.frozen_batch_norm(t["x"], t["running_mean"], t["running_var"], *p, **o),),
        stat_axes=lambda ndim, k: (), impl=False, min_rank=2),
    "local_response_norm": Family(
        lambda a, p, o, k: (jln.local_response_norm(a["x"], **o),),
        lambda t, p, o, k: (_reference.local_response_norm(t["x"], **o),), stat_axes=lambda ndim, k: (ndim - 1,),
        impl=False, min_rank=3),
    "lp_normalize": Family(
        lambda a, p, o, k: (jln.lp_normalize(a["x"], axis=_axis(k), **o),),
        lambda t, p, o, k: (_reference.lp_normalize(t["x"], axis=_axis(k), **o),), impl=False),
    "global_response_norm": Family(
        lambda a, p, o, k: (jln.global_response_norm(a["x"], *p, spatial_axes=_spatial(a["x"].ndim, k), **o),),
        lambda t, p, o, k: (_reference.global_response_norm(t["x"], *p, spatial_axes=_spatial(t["x"].dim(), k), **o),),
        stat_axes=_spatial, impl=False, min_rank=3),
}
#: families computed with batch statistics (no kernels: impl "auto"/"xla" only)
BATCH_STATS = ("batch_norm", "group_norm", "instance_norm")


def _cast(a: np.ndarray, dtype: str) -> np.ndarray:
    if dtype == "float64":
        return np.asarray(a, np.float64)
    return np.asarray(a, np.float32).astype(jnp.dtype(dtype))


def _rms(conv: str, **kw: Any) -> Op:
    return Op(
        f"rms_norm[{conv}]",
        "rms_norm",
        params=("scale", "bias") if conv == "diffusers" else ("scale",),
        options={"convention": conv, **kw},
        exact=conv != "torch",
        scale_center=0.0 if conv in ("gemma", "input_scaled") else 1.0,
    )


OPS: tuple[Op, ...] = (
    Op("layer_norm", "layer_norm"),
    _rms("torch"),
    _rms("llama", eps=1e-6),
    _rms("gemma", eps=1e-6),
    _rms("t5", eps=1e-6),
    _rms("diffusers", eps=1e-6),
    _rms("seed", eps=1e-8),
    Op("modulate", "modulate", params=(), extra=("shift", "scale_c"), multi_axis=False, exact=True),
    Op("adaptive_layer_norm[seed]", "adaptive_layer_norm", extra=("emb",), options={"order": "seed"}, multi_axis=False, chunks=2),
    Op("adaptive_layer_norm[dit]", "adaptive_layer_norm", params=(), extra=("emb",), options={"order": "dit", "eps": 1e-6}, multi_axis=False, chunks=6),
    Op("adaptive_layer_norm[continuous]", "adaptive_layer_norm", extra=("emb",), options={"order": "continuous", "eps": 1e-6}, multi_axis=False, chunks=2),
    Op("add_layer_norm", "add_layer_norm", extra=("residual",)),
    Op("add_rms_norm[torch]", "add_rms_norm", params=("scale",), extra=("residual",), options={"convention": "torch"}),
    Op("add_rms_norm[llama]", "add_rms_norm", params=("scale",), extra=("residual",), options={"convention": "llama", "eps": 1e-6}, exact=True),
    *(Op(f"gated_rms_norm[{conv}]", "gated_rms_norm", params=("scale",), extra=("gate",), options={"convention": conv}, exact=True)
      for conv in ("mamba", "qwen3_next", "float32")),
    # batch statistics, the channels last: x [rows, D] is a batch of rows with D channels
    Op("batch_norm", "batch_norm", options={"training": True, "channel_axis": -1}, multi_axis=False),
    Op("group_norm[1]", "group_norm", options={"num_groups": 1, "channel_axis": -1}, multi_axis=False),
    Op("layer_norm[zero_centered]", "layer_norm", options={"zero_centered": True}, scale_center=0.0),
    _rms("eager", eps=1e-5),
    _rms("round_rstd", eps=1e-6),
    _rms("input_scaled", eps=1e-6),
    Op("adaptive_rms_norm[lumina_zero]", "adaptive_rms_norm", params=("scale",), extra=("emb",),
       options={"order": "lumina_zero", "eps": 1e-6}, multi_axis=False, chunks=4, exact=True),
    # the channels last; a batch, at least one spatial axis, then the channels
    # (the general rule, as batch_norm: torch's float32 sums over a few elements tie differently)
    Op("instance_norm", "instance_norm", options={"training": True, "channel_axis": -1}, multi_axis=False),
    # (not bit-exact in half precision: torch's CPU rsqrt of a half tensor rounds sqrt first in the
    # elements past its last full vector, so torch's own result depends on the channel's position)
    Op("frozen_batch_norm", "frozen_batch_norm", extra=("running_mean", "running_var"),
       options={"channel_axis": -1}, multi_axis=False),
    Op("local_response_norm", "local_response_norm", params=(), options={"size": 3, "alpha": 0.1, "channel_axis": -1},
       multi_axis=False, exact=True),
    Op("lp_normalize", "lp_normalize", params=(), exact=True),
    Op("global_response_norm", "global_response_norm", multi_axis=False, exact=True),
)

BY_NAME: dict[str, Op] = {op.name: op for op in OPS}


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
