"""The ``PolyNorm`` module kind: its options, parameters (``weight`` of shape ``(3,)``, a scalar
``bias``) and the call of :func:`jln.poly_norm` that both faces make."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from jln import _validate
from jln._modules import (
    AXIS,
    DTYPE,
    EPS,
    LINEN_IMPORTS,
    NNX_IMPORTS,
    NORM_RNGS,
    PARAM_DTYPE,
    Kind,
    Option,
    Params,
    ParamSpec,
    Stats,
    cast_in,
    cast_out,
    constant,
    make_config,
    zeros,
)
from jln.families.poly_norm.function import poly_norm

Array = jax.Array


#: Liger's init of the weight: 1/3 each
_third = constant(1.0 / 3.0)


def _check_poly_norm(cfg: Any) -> None:
    fn = "jln PolyNorm"
    _validate.check_eps(cfg.eps, fn)
    _validate.check_inits(cfg, fn, ("weight_init", "bias_init"))
    if isinstance(cfg.axis, list):
        object.__setattr__(cfg, "axis", tuple(cfg.axis))
    if cfg.dtype is not None and not jnp.issubdtype(jnp.dtype(cfg.dtype), jnp.floating):
        raise TypeError(f"{fn}: `dtype` must be a floating dtype or None; received {cfg.dtype!r}.")


PolyNormConfig = make_config(
    "PolyNormConfig",
    (EPS.but(default=1e-6, doc="added to the mean square of each power (Liger's default 1e-6)."),
     AXIS.but(doc="axis or axes the mean squares run over (the peers: the last axis)."),
     DTYPE.but(doc="``None``: output in ``x.dtype``; else ``x`` is cast to it first."),
     PARAM_DTYPE,
     Option("weight_init", "Initializer | None", None, "initializer of the ``(3,)`` ``weight``; ``None``: "
            "1/3 each (Liger's)."),
     Option("bias_init", "Initializer | None", None, "initializer of the scalar ``bias``; ``None``: zero.")),
    _check_poly_norm,
)


def poly_norm_specs(cfg: Any) -> dict[str, ParamSpec]:
    return {"weight": ParamSpec((3,), cfg.weight_init or _third), "bias": ParamSpec((), cfg.bias_init or zeros)}


def apply_poly_norm(params: Params, x: Array, cfg: Any) -> tuple[Array, Stats]:
    """``jln.poly_norm(x, weight, bias, ...)`` with the module's options and dtype rule."""
    y = poly_norm(cast_in(x, cfg.dtype), params["weight"], params["bias"], axis=cfg.axis, eps=cfg.eps)
    return cast_out(y, cfg.dtype), None


POLY_NORM = Kind(
    "PolyNorm", PolyNormConfig, poly_norm_specs, apply_poly_norm, ("x",),
    doc="PolyNorm (Liger's ``LigerPolyNorm``, vLLM's ``poly_norm``): ``w0 * n(x^3) + w1 * n(x^2) + w2 * "
        "n(x) + b`` with ``n(u) = u / sqrt(mean(u^2) + eps)``; ``weight`` has 3 entries (1/3 each at init), "
        "``bias`` is one scalar (0).\n\nCalls :func:`jln.poly_norm` (float32 throughout, rounded once to "
        "``x.dtype``; rows scaled by a power of two so large inputs do not overflow).",
    returns="(``__call__(x)``): array of ``x.shape``, dtype ``x.dtype`` (or ``dtype``).",
    raises="TypeError, ValueError: a bad ``eps`` or initializer; as :func:`jln.poly_norm` otherwise.",
    examples=(LINEN_IMPORTS + "  >>> x = jnp.ones((2, 8))\n  >>> m = jnn.PolyNorm()\n  >>> variables = "
              "m.init(jax.random.key(0), x)\n  >>> variables[\"params\"][\"weight\"].shape, "
              "variables[\"params\"][\"bias\"].shape\n  ((3,), ())\n  >>> m.apply(variables, x).shape\n"
              "  (2, 8)",
              NNX_IMPORTS + "  >>> jnnx.PolyNorm()(jnp.ones((2, 8))).shape\n  (2, 8)"),
    rngs_doc=NORM_RNGS,
)
