"""torch -> jln converters and layouts of the batch-statistics norms.

``torch.nn.BatchNorm1d/2d/3d`` and ``SyncBatchNorm`` -> ``BatchNorm``; ``InstanceNorm1d/2d/3d``
-> ``InstanceNorm``; ``GroupNorm`` -> ``GroupNorm``; transformers' ``DetrFrozenBatchNorm2d`` and
every transformers class whose ``forward`` is its code (Conditional/Deformable DETR, RT-DETR,
Table Transformer, Grounding DINO, D-FINE...) -> ``FrozenBatchNorm``. The running statistics
(``running_mean``, ``running_var``, ``num_batches_tracked``) travel in the ``"batch_stats"``
collection; the layouts write them back, so the state_dict loads strictly.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from jln.interop._arrays import to_jax
from jln.interop._converters import (
    Converter,
    Layout,
    Params,
    Spec,
    _affine,
    _hf_norm,
    _param_dtype,
    _torch_nn,
    _unsupported,
)

_BUFFERS = ("running_mean", "running_var")


def _stats(m: Any, fn: str, counter: bool) -> Params:
    out: Params = {}
    if getattr(m, "running_mean", None) is None:
        return out
    for name in _BUFFERS:
        out[name] = to_jax(getattr(m, name), name, fn)
    if counter:
        nbt = getattr(m, "num_batches_tracked", None)
        out["num_batches_tracked"] = jnp.asarray(0 if nbt is None else int(nbt.item()), jnp.int32)
    return out


def _check_affine(m: Any, fn: str) -> None:
    if m.affine and m.bias is None:
        raise _unsupported(m, fn, "it has a weight but no bias (bias=False)",
                           "jln's batch-statistics modules take both or neither (affine=False).")


def _momentum(m: Any) -> float | None:
    return None if m.momentum is None else float(m.momentum)


def _conv_batch_norm(m: Any, fn: str) -> tuple[Spec, Params]:
    _check_affine(m, fn)
    p = _affine(m, fn)
    stats = _stats(m, fn, counter=True)
    opts = dict(eps=float(m.eps), momentum=_momentum(m), affine=bool(m.affine),
                track_running_stats=bool(m.track_running_stats), param_dtype=_param_dtype({**p, **{
                    k: v for k, v in stats.items() if k != "num_batches_tracked"}}))
    return Spec("BatchNorm", {}, (int(m.num_features),), opts, collections=True), {"params": p, "batch_stats": stats}


def _conv_instance_norm(m: Any, fn: str) -> tuple[Spec, Params]:
    _check_affine(m, fn)
    p = _affine(m, fn)
    stats = _stats(m, fn, counter=False) if m.track_running_stats else {}
    opts = dict(eps=float(m.eps), momentum=_momentum(m), affine=bool(m.affine),
                track_running_stats=bool(m.track_running_stats), param_dtype=_param_dtype({**p, **stats}))
    return Spec("InstanceNorm", {}, (int(m.num_features),), opts, collections=True), {"params": p, "batch_stats": stats}


def _conv_group_norm(m: Any, fn: str) -> tuple[Spec, Params]:
    p = _affine(m, fn)
    opts = dict(num_groups=int(m.num_groups), num_channels=int(m.num_channels), eps=float(m.eps),
                affine=bool(m.affine), param_dtype=_param_dtype(p))
    return Spec("GroupNorm", {}, (), opts, collections=True), {"params": p, "batch_stats": {}}


def _conv_frozen(m: Any, fn: str) -> tuple[Spec, Params]:
    p: Params = {}  # torch's four buffers are state here too, never trained
    stats = {"scale": to_jax(m.weight, "weight", fn), "bias": to_jax(m.bias, "bias", fn), **_stats(m, fn, counter=False)}
    dtypes = {str(v.dtype) for v in stats.values()}
    if len(dtypes) != 1:
        raise _unsupported(m, fn, f"its four buffers have different dtypes {sorted(dtypes)}",
                           "Cast the module to one dtype first (module.float()).")
    # the 1e-5 is the constant in DetrFrozenBatchNorm2d.forward (whose code the recogniser checked)
    opts = dict(eps=1e-5, param_dtype=_param_dtype(stats))
    return Spec("FrozenBatchNorm", {}, (int(m.weight.shape[0]),), opts, collections=True), {"params": p, "batch_stats": stats}


def _sd_batch(p: Params) -> dict[str, Any]:
    """``scale``/``bias`` -> ``weight``/``bias``, the running statistics under torch's names."""
    out = {}
    if "scale" in p:
        out["weight"] = p["scale"]
    if "bias" in p:
        out["bias"] = p["bias"]
    for name in (*_BUFFERS, "num_batches_tracked"):
        if name in p:
            out[name] = p[name]
    return out


def _sd_instance(p: Params) -> dict[str, Any]:
    """As :func:`_sd_batch`, plus torch's ``num_batches_tracked`` buffer, which InstanceNorm
    holds with running statistics but never advances (always 0)."""
    out = _sd_batch(p)
    if "running_mean" in p:
        out["num_batches_tracked"] = jnp.zeros((), jnp.int32)
    return out


LAYOUTS: dict[str, Layout] = {
    name: Layout(name, _sd_instance if name == "InstanceNorm" else _sd_batch)
    for name in ("BatchNorm", "InstanceNorm", "GroupNorm", "FrozenBatchNorm")
}

_FROZEN_ATTRS = ("weight", "bias", "running_mean", "running_var")

CONVERTERS: tuple[Converter, ...] = (
    *(Converter(f"torch.nn.{c}", "BatchNorm", _torch_nn(c), _conv_batch_norm, LAYOUTS["BatchNorm"])
      for c in ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d")),
    Converter("torch.nn.SyncBatchNorm", "BatchNorm (set axis_name= to synchronise under shard_map/pmap)",
              _torch_nn("SyncBatchNorm"), _conv_batch_norm, LAYOUTS["BatchNorm"]),
    *(Converter(f"torch.nn.{c}", "InstanceNorm", _torch_nn(c), _conv_instance_norm, LAYOUTS["InstanceNorm"])
      for c in ("InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d")),
    Converter("torch.nn.GroupNorm", "GroupNorm", _torch_nn("GroupNorm"), _conv_group_norm, LAYOUTS["GroupNorm"]),
    Converter(
        "transformers DetrFrozenBatchNorm2d, and any transformers class whose code is its (Conditional/"
        "Deformable DETR, RT-DETR, Table Transformer, Grounding DINO, D-FINE...)",
        "FrozenBatchNorm",
        _hf_norm(("DetrFrozenBatchNorm2d",), "detr", _FROZEN_ATTRS),
        _conv_frozen,
        LAYOUTS["FrozenBatchNorm"],
    ),
)

# appended to the one table (see the end of _converters)
