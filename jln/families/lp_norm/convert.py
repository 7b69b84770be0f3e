"""torch -> jln converters of diffusers' ``LpNorm`` and ``GlobalResponseNorm`` (ConvNeXt-V2's GRN).
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from jln import _convert as C


def _sd_grn(p: C.Params) -> dict[str, Any]:
    # torch keeps gamma and beta as [1, 1, 1, C]
    return {n: jnp.asarray(p[n]).reshape((1, 1, 1, -1)) for n in ("gamma", "beta")}


def _grn(gamma: str, beta: str) -> Any:
    """A GRN whose ``[1, 1, 1, C]`` parameters are ``m.<gamma>`` and ``m.<beta>`` (diffusers'
    ``gamma``/``beta``, ConvNeXt-V2's ``weight``/``bias``), with torch's broadcasting against
    them (``broadcast_rank=4``: a 3-D input gives a 4-D output, a channel axis of 1 broadcasts)."""

    def convert(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
        g, b = getattr(m, gamma), getattr(m, beta)
        if g.ndim != 4 or tuple(g.shape[:3]) != (1, 1, 1) or tuple(b.shape) != tuple(g.shape):
            raise C.unsupported(m, fn, f"{gamma} has shape {tuple(g.shape)} and {beta} {tuple(b.shape)}, "
                               f"expected (1, 1, 1, C) both", "")
        p = {"gamma": C.to_jax(g, gamma, fn).reshape(-1), "beta": C.to_jax(b, beta, fn).reshape(-1)}
        opts: dict[str, Any] = dict(param_dtype=C.param_dtype(p), broadcast_rank=4)
        if (gamma, beta) != ("gamma", "beta"):
            opts["torch_names"] = (("beta", beta), ("gamma", gamma))
        return C.Spec("GlobalResponseNorm", {}, (int(g.shape[-1]),), opts), p

    return convert


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
        _grn("gamma", "beta"),
        LAYOUTS["GlobalResponseNorm"],
    ),
    C.Converter(
        "transformers ConvNextV2GRN and its copies (diffusers' GlobalResponseNorm with weight and bias)",
        "GlobalResponseNorm(torch_names=...)",
        C.computes_as(((f"{C.T}.convnextv2.modeling_convnextv2", "ConvNextV2GRN"),), ("weight", "bias")),
        _grn("weight", "bias"),
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
