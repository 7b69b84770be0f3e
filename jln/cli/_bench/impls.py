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

#: Ops the bench knows, in display order.
OPS = (
    "layer_norm",
    "rms_norm",
    "rms_norm_llama",
    "add_layer_norm",
    "add_rms_norm",
    "adaptive_layer_norm",
)

#: Implementations, in display order. ``jln`` is jln's public ops as users call them
#: (``impl="auto"``); ``jln-*`` force one path with ``impl=``.
IMPLS = ("jln", "jln-xla", "jln-native", "jln-pallas", "flax", "flax-2pass", "jnp", "tokamax", "torch", "torch-compile")
JAX_IMPLS = ("jln", "jln-xla", "jln-native", "jln-pallas", "flax", "flax-2pass", "jnp", "tokamax")
TORCH_IMPLS = ("torch", "torch-compile")

#: eps used by every implementation (torch's LayerNorm default), so all do the same arithmetic.
EPS = 1e-5
#: Ops that also take and return the residual stream.
FUSED_ADD = ("add_layer_norm", "add_rms_norm")


class Skip(Exception):
    """An implementation does not provide an op (or cannot run here); the message says why."""


def adaptive_batch(rows: int) -> int:
    """Batch size B of the adaptive op's ``x [B, rows // B, D]`` (DiT: one condition per example)."""
    return math.gcd(rows, 8)


def array_names(op: str) -> tuple[str, ...]:
    """Names of the (differentiable) inputs ``op`` takes, besides the cotangents."""
    if op in ("layer_norm",):
        return ("x", "scale", "bias")
    if op in ("rms_norm", "rms_norm_llama"):
        return ("x", "scale")
    if op == "add_layer_norm":
        return ("x", "residual", "scale", "bias")
    if op == "add_rms_norm":
        return ("x", "residual", "scale")
    if op == "adaptive_layer_norm":
        return ("x", "emb")
    raise ValueError(f"unknown op {op!r}; expected one of {OPS}")


# --------------------------------------------------------------------------------------------
# JAX implementations: each returns f(p: dict) -> tuple of outputs.
# --------------------------------------------------------------------------------------------


def _jln(op: str, impl: str) -> Callable[[dict[str, Any]], tuple[Any, ...]]:
    if op == "layer_norm":
        return lambda p: (jln.layer_norm(p["x"], p["scale"], p["bias"], eps=EPS, impl=impl),)
    if op == "rms_norm":
        return lambda p: (jln.rms_norm(p["x"], p["scale"], eps=EPS, impl=impl),)
    if op == "rms_norm_llama":
        return lambda p: (jln.rms_norm(p["x"], p["scale"], eps=EPS, convention="llama", impl=impl),)
    if op == "add_layer_norm":
        return lambda p: jln.add_layer_norm(p["x"], p["residual"], p["scale"], p["bias"], eps=EPS, impl=impl)
    if op == "add_rms_norm":
        return lambda p: jln.add_rms_norm(p["x"], p["residual"], p["scale"], eps=EPS, impl=impl)
    if op == "adaptive_layer_norm":
        return lambda p: (jln.adaptive_layer_norm(p["x"], p["emb"], order="dit_final", eps=EPS, impl=impl)[0],)
    raise ValueError(op)


def _flax(op: str, two_pass: bool) -> Callable[[dict[str, Any]], tuple[Any, ...]]:
    import flax.linen as nn

    if op in ("rms_norm", "rms_norm_llama", "add_rms_norm") and two_pass:
        raise Skip("flax RMSNorm has no mean to subtract, so no two-pass variant")
    fast = not two_pass

    def ln(x: Any, scale: Any, bias: Any) -> Any:
        m = nn.LayerNorm(epsilon=EPS, use_fast_variance=fast, use_scale=scale is not None,
                         use_bias=bias is not None, param_dtype=x.dtype)
        params = {k: v for k, v in (("scale", scale), ("bias", bias)) if v is not None}
        return m.apply({"params": params}, x)

    def rms(x: Any, scale: Any) -> Any:
        return nn.RMSNorm(epsilon=EPS, param_dtype=x.dtype).apply({"params": {"scale": scale}}, x)

    return _compose(op, ln, rms, rms)


def _jnp(op: str) -> Callable[[dict[str, Any]], tuple[Any, ...]]:
    # The textbook version a user would write: float32 statistics, two passes, one cast back.
    # (Parameters are broadcast explicitly, so it also runs under strict rank promotion.)
    def row(p: Any, x: Any, dtype: Any) -> Any:
        return p.astype(dtype).reshape((1,) * (x.ndim - 1) + p.shape)

    def ln(x: Any, scale: Any, bias: Any) -> Any:
        x32 = x.astype(jnp.float32)
        mu = x32.mean(-1, keepdims=True)
        var = jnp.square(x32 - mu).mean(-1, keepdims=True)
        y = (x32 - mu) * jax.lax.rsqrt(var + EPS)
        if scale is not None:
            y = y * row(scale, x, jnp.float32) + row(bias, x, jnp.float32)
        return y.astype(x.dtype)

    def rms(x: Any, scale: Any, llama: bool = False) -> Any:
        x32 = x.astype(jnp.float32)
        h = x32 * jax.lax.rsqrt(jnp.square(x32).mean(-1, keepdims=True) + EPS)
        if llama:
            return row(scale, x, scale.dtype) * h.astype(x.dtype)
        return (h * row(scale, x, jnp.float32)).astype(x.dtype)

    return _compose(op, ln, rms, lambda x, scale: rms(x, scale, llama=True))


def _compose(
    op: str, ln: Callable[..., Any], rms: Callable[..., Any], rms_llama: Callable[..., Any]
) -> Callable[[dict[str, Any]], tuple[Any, ...]]:
    """A baseline's version of ``op`` built from its plain LayerNorm and RMSNorm."""
    if op == "layer_norm":
        return lambda p: (ln(p["x"], p["scale"], p["bias"]),)
    if op == "rms_norm":
        return lambda p: (rms(p["x"], p["scale"]),)
    if op == "rms_norm_llama":
        return lambda p: (rms_llama(p["x"], p["scale"]),)
    if op == "add_layer_norm":
        return lambda p: (lambda s: (ln(s, p["scale"], p["bias"]), s))(p["x"] + p["residual"])
    if op == "add_rms_norm":
        return lambda p: (lambda s: (rms(s, p["scale"]), s))(p["x"] + p["residual"])
    if op == "adaptive_layer_norm":  # DiT final layer order: shift, scale

        def ada(p: dict[str, Any]) -> tuple[Any, ...]:
            shift, scale = jnp.split(p["emb"], 2, axis=-1)
            y = ln(p["x"], None, None)
            return (y * (1 + scale[:, None]) + shift[:, None],)

        return ada
    raise ValueError(op)


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
    try:
        tokamax = _import_tokamax()
    except ImportError as e:
        raise Skip(f"tokamax is not installed ({e})") from None
    if op in ("rms_norm_llama", "adaptive_layer_norm"):
        raise Skip(f"tokamax has no {op}")

    def norm(x: Any, scale: Any, bias: Any, subtract_mean: bool) -> Any:
        return tokamax.layer_norm(x, scale, bias, axis=-1, epsilon=EPS, subtract_mean=subtract_mean,
                                  implementation="xla")

    if op == "layer_norm":
        return lambda p: (norm(p["x"], p["scale"], p["bias"], True),)
    if op == "rms_norm":
        return lambda p: (norm(p["x"], p["scale"], None, False),)
    if op == "add_layer_norm":
        return lambda p: (lambda s: (norm(s, p["scale"], p["bias"], True), s))(p["x"] + p["residual"])
    if op == "add_rms_norm":
        return lambda p: (lambda s: (norm(s, p["scale"], None, False), s))(p["x"] + p["residual"])
    raise ValueError(op)


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
    """The torch function for ``op`` (what a torch user writes); raises :class:`Skip` without torch."""
    try:
        import torch
        import torch.nn.functional as F
    except ImportError as e:
        raise Skip(f"torch is not installed ({e})") from None
    array_names(op)

    def ln(x: Any, w: Any, b: Any) -> Any:
        return F.layer_norm(x, x.shape[-1:], w, b, EPS)

    def rms(x: Any, w: Any, llama: bool = False) -> Any:
        if not llama:
            return F.rms_norm(x, x.shape[-1:], w, EPS)
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS)
        return w * h.to(x.dtype)

    if op == "layer_norm":
        return lambda p: (ln(p["x"], p["scale"], p["bias"]),)
    if op == "rms_norm":
        return lambda p: (rms(p["x"], p["scale"]),)
    if op == "rms_norm_llama":
        return lambda p: (rms(p["x"], p["scale"], llama=True),)
    if op == "add_layer_norm":
        return lambda p: (lambda s: (ln(s, p["scale"], p["bias"]), s))(p["x"] + p["residual"])
    if op == "add_rms_norm":
        return lambda p: (lambda s: (rms(s, p["scale"]), s))(p["x"] + p["residual"])
    if op == "adaptive_layer_norm":

        def ada(p: dict[str, Any]) -> tuple[Any, ...]:
            shift, scale = p["emb"].chunk(2, dim=-1)
            y = ln(p["x"], None, None)
            return (y * (1 + scale[:, None]) + shift[:, None],)

        return ada
    raise ValueError(op)
