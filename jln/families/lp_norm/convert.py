"""torch -> jln converters of diffusers' ``LpNorm`` and ``GlobalResponseNorm`` (ConvNeXt-V2's GRN).
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from jln import _convert as C


def _sd_grn(p: C.Params) -> dict[str, Any]:
    # torch keeps gamma and beta as [1, 1, 1, C]
    return {n: jnp.asarray(p[n]).reshape((1, 1, 1, -1)) for n in ("gamma", "beta")}


def _conv_grn(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    """diffusers ``GlobalResponseNorm`` (normalization.py and Stable Cascade's): ``gamma`` and
    ``beta`` of shape ``[1, 1, 1, C]``."""
    g, b = m.gamma, m.beta
    if g.ndim != 4 or tuple(g.shape[:3]) != (1, 1, 1) or tuple(b.shape) != tuple(g.shape):
        raise C.unsupported(m, fn, f"gamma has shape {tuple(g.shape)} and beta {tuple(b.shape)}, expected "
                           f"(1, 1, 1, C) both", "")
    p = {"gamma": C.to_jax(g, "gamma", fn).reshape(-1), "beta": C.to_jax(b, "beta", fn).reshape(-1)}
    return C.Spec("GlobalResponseNorm", {}, (int(g.shape[-1]),), dict(param_dtype=C.param_dtype(p))), p


def _conv_lp(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    p = m.p
    if not isinstance(p, (int, float)) or not p > 0:
        raise C.unsupported(m, fn, f"p={p!r}", "jln takes a positive p or float('inf').")
    dim = m.dim if isinstance(m.dim, int) else tuple(int(a) for a in m.dim)
    return C.Spec("LpNorm", {}, (), dict(p=float(p), axis=dim, eps=float(m.eps))), {}


LAYOUTS: dict[str, C.Layout] = {
    "GlobalResponseNorm": C.Layout("GlobalResponseNorm", _sd_grn),
    "LpNorm": C.Layout("LpNorm", lambda p: {}),
}

CONVERTERS: tuple[C.Converter, ...] = (
    C.Converter(
        "diffusers GlobalResponseNorm (normalization and Stable Cascade)",
        "GlobalResponseNorm",
        C.named(("GlobalResponseNorm",), ("gamma", "beta"), package="diffusers"),
        _conv_grn,
        LAYOUTS["GlobalResponseNorm"],
    ),
    C.Converter(
        "diffusers LpNorm",
        "LpNorm",
        C.named(("LpNorm",), ("p", "dim", "eps"), package="diffusers"),
        _conv_lp,
        LAYOUTS["LpNorm"],
    ),
)
