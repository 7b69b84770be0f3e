"""What ``jln bench`` runs: jln's ops and every baseline, in one registry.

This is the only file that holds the comparison implementations (flax.linen, a plain ``jnp``
version, tokamax, torch eager and torch.compile). They are *baselines*: written the way a
user of each library would write the op, so jln can be timed against them. jln itself never
calls them, and jln's own ops are reached only through the public functions.

Every op works on a dict of arrays (``x``, and by op ``residual``, ``emb``, ``scale``,
``bias``) and returns a tuple of outputs: ``(y,)``, or ``(y, s)`` for the fused residual ops.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

import jln
from jln import _index, _registry
from jln.families.gated_rms_norm import reference as gated_reference
from jln.families.rms_norm import reference as rms_reference

#: Ops the bench knows, in display order: every op and convention of jln's registry
#: (``jln._index``), spelled as ``jln parity`` spells them (``rms_norm[llama]``).
OPS = tuple(op.name for op in _index.OPS)
#: Ops a sweep times when ``--ops`` is not given (one per family, two RMSNorm conventions).
DEFAULT_OPS = ("layer_norm", "rms_norm[torch]", "rms_norm[llama]", "add_layer_norm", "add_rms_norm[torch]",
               "adaptive_layer_norm[dit]")
#: Family of each op (``rms_norm[llama]`` -> ``rms_norm``): ``--ops rms_norm`` selects them all.
FAMILIES = {op.name: op.family for op in _index.OPS}

#: Implementations, in display order. ``jln`` is jln's public ops as users call them
#: (``impl="auto"``); ``jln-*`` force one path with ``impl=``.
IMPLS = ("jln", "jln-xla", "jln-native", "jln-pallas", "flax", "flax-2pass", "jnp", "tokamax", "torch", "torch-compile")
JAX_IMPLS = ("jln", "jln-xla", "jln-native", "jln-pallas", "flax", "flax-2pass", "jnp", "tokamax")
TORCH_IMPLS = ("torch", "torch-compile")

#: eps used by every implementation (torch's LayerNorm default), so all do the same arithmetic.
EPS = 1e-5
#: Families that also take and return the residual stream.
FUSED_ADD = tuple(name for name, fn in _index.FUNCTIONS.items() if fn.residual)
#: Most chunks an op's condition ``emb`` holds (DiT's adaLN-Zero: 6).
MAX_CHUNKS = 6


#: Registry families flax.linen has no layer for (``flax`` and ``jnp`` skip them, saying so).
_NO_FLAX = tuple(name for name, fn in _index.FUNCTIONS.items() if fn.flax is None)
#: Families whose flax baseline is a batch-statistics layer (``nn.BatchNorm``, ``GroupNorm``...).
_BATCH_STATS = tuple(name for name, fn in _index.FUNCTIONS.items() if fn.flax in ("BatchNorm", "GroupNorm", "InstanceNorm"))


def batched(op: str) -> bool:
    """Whether ``op`` takes its rows as ``[batch, rows / batch, width]``: per-example conditions
    (adaptive norms, modulation), or a norm that needs a batch and a spatial axis (a function
    whose ``min_rank`` is 3)."""
    o = _op(op)
    return o.family in ("adaptive_layer_norm", "adaptive_rms_norm", "modulate") or o.min_rank >= 3


def family(op: str) -> str:
    """The family of ``op`` (a registry name, or a family name itself)."""
    return FAMILIES.get(op, op.partition("[")[0])


def _op(op: str) -> _registry.Op:
    if op not in _index.BY_NAME:
        raise ValueError(f"unknown op {op!r}; expected one of {OPS}")
    return _index.BY_NAME[op]


def _eps(op: _registry.Op) -> float:
    """The op's eps in every implementation: its registry eps, else :data:`EPS`."""
    return float(op.options.get("eps") or EPS)


def _convention(op: _registry.Op) -> str:
    return str(op.options.get("convention", "torch"))


def chunks(op: str) -> int:
    """How many ``[B, D]`` chunks ``op``'s condition ``emb`` holds (0 without one)."""
    return _op(op).chunks


def _order(op: _registry.Op) -> tuple[str, ...]:
    return jln.ORDERS[op.options["order"]]


class Skip(Exception):
    """An implementation does not provide an op (or cannot run here); the message says why."""


def adaptive_batch(rows: int) -> int:
    """Batch size B of the adaptive op's ``x [B, rows // B, D]`` (DiT: one condition per example)."""
    return math.gcd(rows, 8)


def array_names(op: str) -> tuple[str, ...]:
    """Names of the (differentiable) inputs ``op`` takes, besides the cotangents."""
    o = _op(op)
    return ("x", *(["residual"] if "residual" in o.extra else []), *(["gate"] if "gate" in o.extra else []), *o.params,
            *(n for n in ("emb", "shift", "scale_c", "running_mean", "running_var") if n in o.extra))


# --------------------------------------------------------------------------------------------
# JAX implementations: each returns f(p: dict) -> tuple of outputs.
# --------------------------------------------------------------------------------------------


def _jln(op: str, impl: str) -> Callable[[dict[str, Any]], tuple[Any, ...]]:
    o = _op(op)
    if not o.takes_impl:
        if impl != "auto":
            raise Skip(f"jln.{o.family} has one path (no impl= to choose); `jln` times it")
        return lambda p: o.call_jln(p, 1)
    eps = _eps(o)
    return lambda p: o.call_jln(p, 1, impl=impl, eps=eps)


def _flax(op: str, two_pass: bool) -> Callable[[dict[str, Any]], tuple[Any, ...]]:
    import flax.linen as nn

    o = _op(op)
    eps = _eps(o)
    if o.family in ("rms_norm", "add_rms_norm") and two_pass:
        raise Skip("flax RMSNorm has no mean to subtract, so no two-pass variant")
    if o.family in ("rms_norm", "add_rms_norm") and _convention(o) not in ("torch", "llama"):
        raise Skip(f"flax.linen has no {_convention(o)} RMSNorm convention")
    if o.family in _NO_FLAX:
        raise Skip(f"flax.linen has no {o.family}")
    if o.family in ("layer_norm", "add_layer_norm") and _convention(o) != "torch":
        raise Skip(f"flax.linen has no {_convention(o)} LayerNorm convention")
    if o.family in ("gated_rms_norm", *_BATCH_STATS) and two_pass:
        raise Skip(f"flax's {o.family} baseline has one variant (`flax`)")
    if o.family == "gated_rms_norm":
        return _flax_gated(o, eps)
    if o.family in _BATCH_STATS:
        return _flax_batch_stats(o, eps)
    fast = not two_pass

    def ln(x: Any, scale: Any, bias: Any) -> Any:
        m = nn.LayerNorm(epsilon=eps, use_fast_variance=fast, use_scale=scale is not None,
                         use_bias=bias is not None, param_dtype=x.dtype)
        params = {k: v for k, v in (("scale", scale), ("bias", bias)) if v is not None}
        return m.apply({"params": params}, x)

    def rms(x: Any, scale: Any) -> Any:
        return nn.RMSNorm(epsilon=eps, param_dtype=x.dtype).apply({"params": {"scale": scale}}, x)

    return _compose(o, ln, rms)


def _flax_gated(o: _registry.Op, eps: float) -> Callable[[dict[str, Any]], tuple[Any, ...]]:
    """flax has no gated RMSNorm: a flax user composes ``nn.RMSNorm`` with the gate, before the
    statistics (Mamba-2's order) or after the norm (the other conventions)."""
    import flax.linen as nn

    before = _convention(o) == "mamba"

    def gated(p: dict[str, Any]) -> tuple[Any, ...]:
        x, w = p["x"], p["scale"]
        g = jax.nn.silu(p["gate"].astype(jnp.float32))
        norm = nn.RMSNorm(epsilon=eps, param_dtype=w.dtype)
        if before:
            return (norm.apply({"params": {"scale": w}}, (x.astype(jnp.float32) * g).astype(x.dtype)),)
        y: Any = norm.apply({"params": {"scale": w}}, x)
        return ((y * g).astype(x.dtype),)

    return gated


def _flax_batch_stats(o: _registry.Op, eps: float) -> Callable[[dict[str, Any]], tuple[Any, ...]]:
    """flax's ``nn.BatchNorm`` (a training step: batch statistics, running averages updated)
    and ``nn.GroupNorm``, on the channels-last rows the registry feeds every implementation.
    Their defaults differ from torch's (eps, momentum); the timed arithmetic is the same."""
    import flax.linen as nn

    if o.family == "instance_norm":  # [batch, spatial, channels]: each sample's statistics

        def inorm(p: dict[str, Any]) -> tuple[Any, ...]:
            w = p["scale"]
            m = nn.InstanceNorm(epsilon=eps, param_dtype=w.dtype)
            return (m.apply({"params": {"scale": w, "bias": p["bias"]}}, p["x"]),)

        return inorm
    if o.family == "batch_norm":

        def bn(p: dict[str, Any]) -> tuple[Any, ...]:
            x, w, b = p["x"], p["scale"], p["bias"]
            stats = {"mean": jnp.zeros(x.shape[-1:], jnp.float32), "var": jnp.ones(x.shape[-1:], jnp.float32)}
            m = nn.BatchNorm(use_running_average=False, axis=-1, momentum=0.9, epsilon=eps, param_dtype=w.dtype)
            y, _ = m.apply({"params": {"scale": w, "bias": b}, "batch_stats": stats}, x, mutable=["batch_stats"])
            return (y,)

        return bn
    groups = int(o.options["num_groups"])

    def gn(p: dict[str, Any]) -> tuple[Any, ...]:
        w = p["scale"]
        m = nn.GroupNorm(num_groups=groups, epsilon=eps, param_dtype=w.dtype)
        return (m.apply({"params": {"scale": w, "bias": p["bias"]}}, p["x"]),)

    return gn


def _jnp(op: str) -> Callable[[dict[str, Any]], tuple[Any, ...]]:
    # The textbook version a user would write: float32 statistics, two passes, one cast back.
    # (Parameters are broadcast explicitly, so it also runs under strict rank promotion.)
    o = _op(op)
    eps = _eps(o)
    conv = _convention(o)
    if o.family in ("rms_norm", "add_rms_norm") and conv not in ("torch", "llama"):
        raise Skip(f"no textbook jnp version of the {conv} convention (torch times its reference)")
    if o.family == "gated_rms_norm":
        raise Skip("no textbook jnp version of the gated RMSNorm (torch times its reference)")
    if o.family in ("layer_norm", "add_layer_norm") and conv != "torch":
        raise Skip(f"no textbook jnp version of the {conv} LayerNorm convention (torch times its reference)")
    if o.family in (*_BATCH_STATS, *_NO_FLAX):
        raise Skip(f"no textbook jnp version of {o.family} (torch times its reference)")

    def row(p: Any, x: Any, dtype: Any) -> Any:
        return p.astype(dtype).reshape((1,) * (x.ndim - 1) + p.shape)

    def ln(x: Any, scale: Any, bias: Any) -> Any:
        x32 = x.astype(jnp.float32)
        mu = x32.mean(-1, keepdims=True)
        var = jnp.square(x32 - mu).mean(-1, keepdims=True)
        y = (x32 - mu) * jax.lax.rsqrt(var + eps)
        if scale is not None:
            y = y * row(scale, x, jnp.float32)
        if bias is not None:
            y = y + row(bias, x, jnp.float32)
        return y.astype(x.dtype)

    def rms(x: Any, scale: Any) -> Any:
        x32 = x.astype(jnp.float32)
        h = x32 * jax.lax.rsqrt(jnp.square(x32).mean(-1, keepdims=True) + eps)
        if conv == "llama":
            return row(scale, x, scale.dtype) * h.astype(x.dtype)
        return (h * row(scale, x, jnp.float32)).astype(x.dtype)

    return _compose(o, ln, rms)


def _modulate(y: Any, shift: Any, scale: Any) -> Any:
    """``y * (1 + scale) + shift`` with per-example ``[B, D]`` conditions (jnp or torch)."""
    return y * (1 + scale[:, None]) + shift[:, None]


def _ada_chunks(o: _registry.Op, emb: Any, split: Callable[[Any, int], Any]) -> tuple[Any, Any]:
    """(shift, scale) of an adaptive op's condition, by its order's chunk names."""
    names = _order(o)
    chunks = dict(zip(names, split(emb, len(names)), strict=True))
    sh, sc = ("shift", "scale") if "shift" in chunks else ("shift_msa", "scale_msa")
    return chunks[sh], chunks[sc]


def _compose(
    o: _registry.Op, ln: Callable[..., Any], rms: Callable[..., Any],
) -> Callable[[dict[str, Any]], tuple[Any, ...]]:
    """A baseline's version of op ``o`` built from its plain LayerNorm and RMSNorm."""
    ln = _zero_centered(o, ln)
    if o.family == "layer_norm":
        return lambda p: (ln(p["x"], p["scale"], p["bias"]),)
    if o.family == "rms_norm":
        return lambda p: (rms(p["x"], p["scale"]),)
    if o.family == "add_layer_norm":
        return lambda p: (lambda s: (ln(s, p["scale"], p["bias"]), s))(p["x"] + p["residual"])
    if o.family == "add_rms_norm":
        return lambda p: (lambda s: (rms(s, p["scale"]), s))(p["x"] + p["residual"])
    if o.family == "adaptive_layer_norm":

        def ada(p: dict[str, Any]) -> tuple[Any, ...]:
            shift, scale = _ada_chunks(o, p["emb"], lambda e, k: jnp.split(e, k, axis=-1))
            return (_modulate(ln(p["x"], p.get("scale"), p.get("bias")), shift, scale),)

        return ada
    if o.family == "modulate":
        return lambda p: (_modulate(p["x"], p["shift"], p["scale_c"]),)
    raise ValueError(o.name)


def _zero_centered(o: _registry.Op, ln: Callable[..., Any]) -> Callable[..., Any]:
    """``ln`` taking ``1 + scale`` for the zero-centred LayerNorm op (as a baseline's user
    writes it: the weight plus one, in the weight's dtype)."""
    if not o.options.get("zero_centered"):
        return ln
    return lambda x, w, b: ln(x, None if w is None else w + 1, b)


def _import_tokamax() -> Any:
    import tokamax

    # tokamax reads absl flags, which parse sys.argv on first use and reject the caller's
    # options (e.g. ``--quick``); use the flags' defaults instead.
    try:
        from absl import flags

        if not flags.FLAGS.is_parsed():
            flags.FLAGS.mark_as_parsed()
    except ImportError:
        pass
    return tokamax


def _tokamax(op: str) -> Callable[[dict[str, Any]], tuple[Any, ...]]:
    o = _op(op)
    try:
        tokamax = _import_tokamax()
    except ImportError as e:
        raise Skip(f"tokamax is not installed ({e})") from None
    if o.family not in ("layer_norm", "rms_norm", "add_layer_norm", "add_rms_norm") or _convention(o) != "torch":
        raise Skip(f"tokamax has no {op}")
    eps = _eps(o)

    def norm(x: Any, scale: Any, bias: Any, subtract_mean: bool) -> Any:
        return tokamax.layer_norm(x, scale, bias, axis=-1, epsilon=eps, subtract_mean=subtract_mean,
                                  implementation="xla")

    if o.options.get("zero_centered"):
        raise Skip(f"tokamax's scale_offset adds in float32, not in the weight's dtype: not {op}")
    if o.family == "layer_norm":
        return lambda p: (norm(p["x"], p["scale"], p["bias"], True),)
    if o.family == "rms_norm":
        return lambda p: (norm(p["x"], p["scale"], None, False),)
    if o.family == "add_layer_norm":
        return lambda p: (lambda s: (norm(s, p["scale"], p["bias"], True), s))(p["x"] + p["residual"])
    return lambda p: (lambda s: (norm(s, p["scale"], None, False), s))(p["x"] + p["residual"])


def backend_skip(impl: str) -> str | None:
    """Why ``impl`` is skipped for every case on the default JAX backend, or None if it runs
    there: jln's native kernels run on the CPU backend only, its Pallas kernels are timed only
    where they compile natively (on a CPU, Pallas runs in interpret mode, which would time the
    interpreter)."""
    backend = jax.default_backend()
    if impl == "jln-native" and backend != "cpu":
        return f"jln's native kernels run on the CPU backend only (this is {backend})"
    if impl == "jln-pallas" and backend not in ("gpu", "tpu"):
        return f"jln's Pallas kernels do not run natively on {backend} (interpret mode only)"
    return None


def jax_op(impl: str, op: str) -> Callable[[dict[str, Any]], tuple[Any, ...]]:
    """The JAX function of ``impl`` for ``op``; raises :class:`Skip` where there is none."""
    array_names(op)
    if impl == "jln":
        return _jln(op, "auto")
    if impl == "jln-xla":
        return _jln(op, "xla")
    if impl == "jln-native":
        # jln's native CPU kernels; cases they do not take raise ValueError from
        # impl="native", which the runner records as skipped with its reason.
        reason = backend_skip(impl)
        if reason:
            raise Skip(reason)
        return _jln(op, "native")
    if impl == "jln-pallas":
        # Timed only where the kernels compile natively; elsewhere (CPU) Pallas runs in
        # interpret mode, which measures the interpreter. Cases a kernel does not take raise
        # ValueError from impl="pallas", which the runner records as skipped with its reason.
        reason = backend_skip(impl)
        if reason:
            raise Skip(reason)
        return _jln(op, "pallas")
    if impl in ("flax", "flax-2pass"):
        return _flax(op, impl == "flax-2pass")
    if impl == "jnp":
        return _jnp(op)
    if impl == "tokamax":
        return _tokamax(op)
    raise ValueError(f"{impl!r} is not a JAX implementation")


# --------------------------------------------------------------------------------------------
# torch implementations (eager; torch.compile wraps the same function).
# --------------------------------------------------------------------------------------------


def torch_op(op: str) -> Callable[[dict[str, Any]], tuple[Any, ...]]:
    """The torch function for ``op`` (what a torch user writes); raises :class:`Skip` without torch.

    torch's own ``F.layer_norm`` and ``F.rms_norm`` where they compute the op; the other RMSNorm
    conventions as their reference libraries write them (the families' ``reference.py``, the code
    ``jln parity`` holds jln to).
    """
    try:
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        raise Skip(f"torch is not installed ({e})") from None
    o = _op(op)
    eps, conv = _eps(o), _convention(o)

    def ln(x: Any, w: Any, b: Any) -> Any:
        return F.layer_norm(x, x.shape[-1:], w, b, eps)

    ln = _zero_centered(o, ln)

    def rms(x: Any, w: Any, b: Any = None) -> Any:
        if conv == "torch":
            return F.rms_norm(x, x.shape[-1:], w, eps)
        if conv == "llama":
            h = x.float()
            h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
            return w * h.to(x.dtype)
        return rms_reference.rms_norm(x, w, eps=eps, convention=conv, bias=b)

    if o.family in ("layer_norm", "add_layer_norm") and conv != "torch":
        return lambda p: o.call_torch(p)  # the model files' dtype flows: their reference
    if o.family == "layer_norm":
        return lambda p: (ln(p["x"], p["scale"], p["bias"]),)
    if o.family == "rms_norm":
        return lambda p: (rms(p["x"], p["scale"], p.get("bias")),)
    if o.family == "add_layer_norm":
        return lambda p: (lambda s: (ln(s, p["scale"], p["bias"]), s))(p["x"] + p["residual"])
    if o.family == "add_rms_norm":
        return lambda p: (lambda s: (rms(s, p["scale"]), s))(p["x"] + p["residual"])
    if o.family == "adaptive_layer_norm":

        def ada(p: dict[str, Any]) -> tuple[Any, ...]:
            shift, scale = _ada_chunks(o, p["emb"], lambda e, k: e.chunk(k, dim=-1))
            return (_modulate(ln(p["x"], p.get("scale"), p.get("bias")), shift, scale),)

        return ada
    if o.family == "modulate":
        return lambda p: (_modulate(p["x"], p["shift"], p["scale_c"]),)
    if o.family == "gated_rms_norm":
        return lambda p: (gated_reference.gated_rms_norm(p["x"], p["gate"], p["scale"], eps=eps, convention=conv),)
    return lambda p: o.call_torch(p)  # the other families: their torch reference
