"""One registry of jln's ops and conventions: the test suite, ``jln parity`` and ``jln bench``
all sweep it, so nothing ships unswept.

An :class:`Op` knows how to make inputs for a shape and dtype, how to call jln, and how to
call its torch reference (``jln._reference``) on the same values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import jax.numpy as jnp
import numpy as np

import jln
from jln import _reference

#: families computed with batch statistics (no kernels: impl "auto"/"xla" only)
BATCH_STATS = ("batch_norm", "group_norm")

#: dtypes swept by default
DTYPES = ("float32", "float64", "bfloat16", "float16")


@dataclass(frozen=True)
class Op:
    """One op or convention.

    Attributes:
      name: unique name, e.g. ``"rms_norm[llama]"``.
      family: the public function, e.g. ``"rms_norm"``.
      params: per-feature parameter names among ``("scale", "bias")``.
      extra: extra array inputs: ``"residual"`` (x-shaped), ``"shift"``/``"scale_c"``
        (per-example ``[B, D]``), ``"emb"`` (per-example ``[B, k*D]``).
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
        axes = tuple(range(x.ndim - k, x.ndim))
        if self.family in BATCH_STATS:  # statistics over the rows (BatchNorm) or each sample's row
            axes = tuple(range(x.ndim - 1)) if self.family == "batch_norm" else tuple(range(1, x.ndim))
        centered = self.family in ("layer_norm", "add_layer_norm", "adaptive_layer_norm", *BATCH_STATS)
        spread = x.var(axis=axes) if centered else (x * x).mean(axis=axes)
        eps = self.options.get("eps") or (1e-5 if centered else 1e-7)
        rstd = float(np.max(1.0 / np.sqrt(spread + eps)))
        w = float(np.max(np.abs(inputs["scale"].astype(np.float64)))) if "scale" in inputs else 1.0
        dtype = str(inputs["x"].dtype)
        return 8 * float(jnp.finfo(dtype).eps) * rstd * (1.0 + w) * ct_max

    # -- calls ----------------------------------------------------------------------------
    def call_jln(self, inputs: dict[str, Any], k: int = 1, **overrides: Any) -> tuple[Any, ...]:
        """Run jln on arrays (``jax.Array`` or NumPy); always returns a tuple of outputs."""
        a = {n: jnp.asarray(v) for n, v in inputs.items()}
        opts = {**self.options, **overrides}
        if self.family == "modulate":
            return (jln.modulate(a["x"], a["shift"], a["scale_c"], **opts),)
        params = [a.get(p) for p in self.params]
        if self.family == "batch_norm":  # batch statistics; the channels last (one per column)
            return (jln.batch_norm(a["x"], None, None, *params, **opts)[0],)
        if self.family == "group_norm":
            return (jln.group_norm(a["x"], opts.pop("num_groups"), *params, **opts),)
        opts["axis"] = -1 if k == 1 else tuple(range(-k, 0))
        if self.family == "layer_norm":
            return (jln.layer_norm(a["x"], *params, **opts),)
        if self.family == "rms_norm":
            return (jln.rms_norm(a["x"], *params[:1], bias=a.get("bias"), **opts),)
        if self.family == "add_layer_norm":
            return tuple(jln.add_layer_norm(a["x"], a["residual"], *params, **opts))
        if self.family == "add_rms_norm":
            return tuple(jln.add_rms_norm(a["x"], a["residual"], *params, **opts))
        if self.family == "adaptive_layer_norm":
            return (jln.adaptive_layer_norm(a["x"], a["emb"], *params, **opts)[0],)
        if self.family == "gated_rms_norm":
            return (jln.gated_rms_norm(a["x"], a.get("gate"), *params, **opts),)
        raise AssertionError(self.family)

    def call_torch(self, tensors: dict[str, Any], k: int = 1) -> tuple[Any, ...]:
        """Run the torch reference on tensors; always returns a tuple of outputs."""
        t = tensors
        o = dict(self.options)
        o.pop("impl", None)
        params = [t.get(p) for p in self.params]
        if self.family == "modulate":
            return (_reference.modulate(t["x"], t["shift"], t["scale_c"], **o),)
        if self.family == "layer_norm":
            return (_reference.layer_norm(t["x"], *params, k=k, **o),)
        if self.family == "rms_norm":
            return (_reference.rms_norm(t["x"], *params[:1], bias=t.get("bias"), k=k, **o),)
        if self.family in ("add_layer_norm", "add_rms_norm"):
            norm = self.family[4:]
            return _reference.add_norm(t["x"], t["residual"], *params, norm=norm, k=k, **o)
        if self.family == "batch_norm":
            return (_reference.batch_norm(t["x"], *params, **o),)
        if self.family == "group_norm":
            return (_reference.group_norm(t["x"], *params, **o),)
        if self.family == "adaptive_layer_norm":
            order = jln.ORDERS[o.pop("order")]
            return (_reference.adaptive_layer_norm(t["x"], t["emb"], *params, order=order, **o),)
        if self.family == "gated_rms_norm":
            return (_reference.gated_rms_norm(t["x"], t.get("gate"), *params, k=k, **o),)
        raise AssertionError(self.family)


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
