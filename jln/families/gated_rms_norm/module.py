"""The gated RMSNorm module kinds: ``GatedRMSNorm`` (the call of :func:`jln.gated_rms_norm` that
both faces make) and ``LowRankGatedRMSNorm`` (LLaMA's RMSNorm gated by a low-rank MLP of its own
output, AXK2's ``AXK2GatedRMSNorm``)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jln import _stats, _validate
from jln._modules import (
    AXIS,
    COMPUTE,
    DISTRIBUTED,
    EPS,
    LINEN_IMPORTS,
    NNX_IMPORTS,
    NORM_RNGS,
    NUM_FEATURES,
    SCALE_INIT,
    USE_SCALE,
    Kind,
    Option,
    Params,
    ParamSpec,
    Shape,
    Stats,
    cast_in,
    cast_out,
    dense,
    distributed,
    infer_last,
    literal,
    make_config,
    ones,
    param_spec,
    record,
)
from jln.families.gated_rms_norm.function import gated_rms_norm
from jln.families.gated_rms_norm.spec import ACTIVATIONS, ALIASES, activate, resolve_convention
from jln.families.rms_norm.function import rms_norm

Array = jax.Array


def _check_gated_rms_norm(cfg: Any) -> None:
    fn = "jln GatedRMSNorm"
    resolve_convention(cfg.convention, fn)
    _validate.check_choice(cfg.activation, "activation", ACTIVATIONS, fn)
    _validate.check_eps(cfg.eps, fn)
    if cfg.group_size is not None:
        object.__setattr__(cfg, "group_size", _validate.check_positive(cfg.group_size, "group_size", fn))
    if cfg.norm_before_gate is not None and not isinstance(cfg.norm_before_gate, (bool, np.bool_)):
        raise TypeError(f"{fn}: `norm_before_gate` must be True, False or None; received {cfg.norm_before_gate!r}.")
    _validate.check_inits(cfg, fn, ("scale_init",))
    _validate.check_module_options(cfg, fn)


GatedRMSNormConfig = make_config(
    "GatedRMSNormConfig",
    (EPS.but(default=1e-6, doc="added to the mean square (transformers' default 1e-6)."),
     Option("convention", literal(ALIASES), "mamba", "``\"mamba\"``, ``\"qwen3_next\"`` or ``\"float32\"`` (or an "
            "alias): the cast order of :func:`jln.gated_rms_norm`. With ``dtype=None`` the output dtype is "
            "the convention's (``\"mamba\"``: bf16 x with float32 scale gives float32)."),
     Option("group_size", "int | None", None, "statistics per group of this many channels (``None``: the "
            "whole row)."),
     Option("norm_before_gate", "bool | None", None, "``None``: the convention's gate order."),
     Option("activation", literal(ACTIVATIONS), "silu", "the gate's activation, ``\"silu\"`` or ``\"sigmoid\"``."),
     AXIS, USE_SCALE.but(doc="learnable ``scale``."), *COMPUTE, *DISTRIBUTED, SCALE_INIT),
    _check_gated_rms_norm,
)


def gated_rms_norm_specs(cfg: Any, features: tuple[int, ...]) -> dict[str, ParamSpec]:
    return {"scale": param_spec(features, cfg.scale_init, ones)} if cfg.use_scale else {}


def apply_gated_rms_norm(params: Params, x: Array, cfg: Any, gate: Array | None = None) -> tuple[Array, Stats]:
    """``jln.gated_rms_norm(x, gate, scale, ...)`` with the module's dtype rule and monitor."""
    xi = cast_in(x, cfg.dtype)
    g = None if gate is None else cast_in(gate, cfg.dtype)
    y = gated_rms_norm(
        xi, g, params.get("scale"), axis=cfg.axis, eps=cfg.eps, group_size=cfg.group_size,
        norm_before_gate=cfg.norm_before_gate, convention=cfg.convention, activation=cfg.activation,
        impl=cfg.impl, **distributed(cfg),
    )
    y = cast_out(y, cfg.dtype)
    return y, record(cfg.monitor, xi, y, cfg.axis, "jln GatedRMSNorm")



GATED_RMS_NORM = Kind(
    "GatedRMSNorm", GatedRMSNormConfig, gated_rms_norm_specs, apply_gated_rms_norm, ("x",),
    call_options=(("gate", None, "jax.Array | None"),),
    doc="Gated RMSNorm (Mamba-2, hybrid SSMs): ``rms_norm(x * silu(gate)) * scale`` or "
        "``rms_norm(x) * scale * silu(gate)``.\n\n"
        "The gate order, groups and exact cast order of each convention are those of "
        ":func:`jln.gated_rms_norm`; ``gate`` (x's shape) is optional at the call.",
    returns="(``__call__(x, gate=None)``): array of ``x.shape``, dtype by the convention (or ``dtype``).",
    raises="TypeError, ValueError: as :func:`jln.gated_rms_norm`; otherwise as :class:`LayerNorm`.",
    examples=(LINEN_IMPORTS + "  >>> m = jnn.GatedRMSNorm(group_size=2)\n  >>> x = jnp.ones((2, 4))\n  >>> "
              "m.apply(m.init(jax.random.key(0), x), x, x).shape\n  (2, 4)",
              NNX_IMPORTS + "  >>> jnnx.GatedRMSNorm(4, convention=\"qwen3_next\")(jnp.ones((2, 4)), jnp.zeros((2, 4)))[0]\n"
              "  Array([0., 0., 0., 0.], dtype=float32)"),
    rngs_doc=NORM_RNGS, shapes=(NUM_FEATURES,),
)


# --------------------------------------------------------------------------- LowRankGatedRMSNorm

LOW_RANK = "jln LowRankGatedRMSNorm"


def _check_low_rank(cfg: Any) -> None:
    _validate.set_positive(cfg, ("rank",), LOW_RANK)
    _validate.check_eps(cfg.eps, LOW_RANK)
    _validate.check_inits(cfg, LOW_RANK, ("scale_init", "kernel_init"))
    _validate.check_module_options(cfg, LOW_RANK)


LowRankGatedRMSNormConfig = make_config(
    "LowRankGatedRMSNormConfig",
    (Option("rank", "int", doc="the gate MLP's hidden width (AXK2's ``gated_norm_rank``)."),
     EPS.but(default=1e-6, doc="added to the mean square (LLaMA's RMSNorm; AXK2's ``rms_norm_eps``)."),
     *COMPUTE,
     SCALE_INIT,
     Option("kernel_init", "Initializer | None", None, "initializer of the ``fc1`` and ``fc2`` kernels; ``None``: "
            "flax ``Dense``'s, lecun_normal.")),
    _check_low_rank,
)

#: flax ``Dense``'s default kernel initializer
_DENSE_KERNEL_INIT = jax.nn.initializers.lecun_normal()


def low_rank_specs(cfg: Any, num_features: int) -> dict[str, Any]:
    """``norm/scale [d]``, ``mlp/fc1/kernel [d, rank]``, ``mlp/fc2/kernel [rank, d]``: torch's
    ``norm.weight``, ``mlp.fc1.weight`` and ``mlp.fc2.weight`` (transposed)."""
    kernel = _DENSE_KERNEL_INIT if cfg.kernel_init is None else cfg.kernel_init
    return {
        "norm": {"scale": param_spec((num_features,), cfg.scale_init, ones)},
        "mlp": {"fc1": {"kernel": ParamSpec((num_features, cfg.rank), kernel)},
                "fc2": {"kernel": ParamSpec((cfg.rank, num_features), kernel)}},
    }


def low_rank_gate(y: Array, fc1: Array, fc2: Array, fn: str = LOW_RANK) -> Array:
    """``(y * sigmoid(f32(fc2(silu(fc1(y))))))`` in ``promote(y.dtype, float32)``, cast to
    ``y.dtype``: AXK2's gate on its normed row ``y``, rounding where torch does.

    The two bias-free Dense layers run in ``y``'s dtype ``dt`` (float32 accumulation, one
    rounding per output, as torch's matmul); SiLU in the statistics dtype rounded once to
    ``dt``; the gate's logits then go to float32 (torch's ``.float()``), the sigmoid and the
    product with ``y`` are float32 (float64 for float64 ``y``) and one cast gives ``dt``.
    ``fc1 [d, rank]``, ``fc2 [rank, d]``; ``ValueError`` (naming ``fn``) unless ``y``'s last axis
    is ``d``."""
    dt = jnp.dtype(y.dtype)
    # each rounding to dt as round_to + cast: a plain astype pair is one XLA may drop under jit
    h = _stats.upcast(dense({"kernel": fc1}, y, dt, fn, "x"))
    h = _stats.round_to(activate("silu", h), dt).astype(dt)
    logits = _stats.upcast(dense({"kernel": fc2}, h, dt, fn, "x")).astype(jnp.float32)
    gate = activate("sigmoid", logits)
    wide = _stats.promote(dt, jnp.float32)
    return (_stats.upcast(y).astype(wide) * gate.astype(wide)).astype(dt)


def apply_low_rank(params: Params, x: Array, cfg: Any) -> tuple[Array, Stats]:
    """``y = rms_norm(x, scale, convention="llama")``, then :func:`low_rank_gate`."""
    xi = cast_in(x, cfg.dtype)
    mlp = params["mlp"]
    d = mlp["fc1"]["kernel"].shape[0]
    _check_width(cfg, xi, d, LOW_RANK)
    y = rms_norm(xi, params["norm"]["scale"], axis=-1, eps=cfg.eps, convention="llama", impl=cfg.impl)
    y = low_rank_gate(y, mlp["fc1"]["kernel"], mlp["fc2"]["kernel"])
    y = cast_out(y, cfg.dtype)
    return y, record(cfg.monitor, xi, y, -1, LOW_RANK)


def _check_width(cfg: Any, x: Array, n: int, fn: str) -> None:
    """``ValueError`` unless ``x``'s last axis has the module's ``num_features``."""
    _validate.check_floating(x, fn)
    if x.ndim == 0 or x.shape[-1] != n:
        raise ValueError(
            f"{fn}: the module was built for num_features={n} (the size of x's last axis); received "
            f"x.shape={tuple(x.shape)}. Build it with num_features={x.shape[-1] if x.ndim else '...'}, or pass "
            f"x whose last axis is {n}."
        )


def _stored_width(cfg: Any, flat: Any) -> int:
    a = flat.get("mlp/fc1/kernel", flat.get("norm/scale"))
    return int(a.shape[0]) if a is not None and len(a.shape) > 0 else 1


LOW_RANK_FEATURES = Shape(
    "num_features", "int", "d, the size of ``x``'s last axis.", 0,
    lambda v, fn: _validate.check_positive(v, "num_features", fn), infer_last, _check_width, _stored_width,
)

LOW_RANK_GATED_RMS_NORM = Kind(
    "LowRankGatedRMSNorm", LowRankGatedRMSNormConfig, low_rank_specs, apply_low_rank, ("x",),
    doc="RMSNorm gated by a low-rank MLP of its own output (AXK2's ``AXK2GatedRMSNorm``, Megatron's "
        "``GatedNormWrapper``).\n\n"
        "``y = rms_norm(x, norm.scale, convention=\"llama\")`` (``x * rsqrt(mean(x^2) + eps)``, eps "
        "inside the square root, rounded to x's dtype, times the scale); then "
        "``(y * sigmoid(fc2(silu(fc1(y)))))`` in float32, cast to y's dtype. ``fc1`` (``d -> rank``) and "
        "``fc2`` (``rank -> d``) are bias-free Dense layers run in y's dtype with float32 accumulation, "
        "SiLU rounded once to it, the sigmoid and the product in float32, as torch computes them.",
    returns="(``__call__(x)``): array of ``x.shape``; dtype ``promote(x.dtype, param_dtype)`` (LLaMA's "
            "RMSNorm: bfloat16 x with float32 parameters gives float32), or ``dtype``.",
    raises="TypeError, ValueError: a non-floating ``x``, a last axis other than ``num_features``, a "
           "non-positive ``rank``, a negative ``eps``.",
    examples=(LINEN_IMPORTS + "  >>> m = jnn.LowRankGatedRMSNorm(rank=4)\n  >>> x = jnp.ones((2, 8))\n  >>> "
              "m.apply(m.init(jax.random.key(0), x), x).shape\n  (2, 8)",
              NNX_IMPORTS + "  >>> import jax\n  >>> m = jnnx.LowRankGatedRMSNorm(8, rank=4, eps=0.0, kernel_init=jax.nn.initializers.zeros)\n"
              "  >>> m(jnp.ones((2, 8)))[0]  # a zero gate MLP: sigmoid(0) = 0.5\n"
              "  Array([0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5], dtype=float32)"),
    rngs_doc="``nnx.Rngs`` for the ``fc1``/``fc2`` kernel init (a key-free ``kernel_init`` such as zeros needs none).",
    shapes=(LOW_RANK_FEATURES,),
)
