"""The torch -> jln converter of diffusers' ``DynamicTanh`` (DyT) and its copies, to
:class:`jln.linen.DyT` with ``convention="torch"`` (the module's own op-by-op rounding).
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from jln import _convert as C

#: jln's parameter name -> the torch ``state_dict`` name (diffusers' and Liger's)
TORCH_NAMES = {"alpha": "alpha", "scale": "gamma", "bias": "beta"}


def _sd_dyt(p: C.Params) -> dict[str, Any]:
    return {TORCH_NAMES[n]: jnp.asarray(v) for n, v in p.items()}


def _conv_dynamic_tanh(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    alpha, gamma, beta = m.alpha, m.gamma, m.beta
    if alpha.numel() != 1 or gamma.ndim != 1 or tuple(beta.shape) != tuple(gamma.shape):
        raise C.unsupported(m, fn, f"alpha has shape {tuple(alpha.shape)}, gamma {tuple(gamma.shape)} and beta "
                           f"{tuple(beta.shape)}", "jln's DyT takes one alpha and gamma, beta of shape [C].")
    p = {"alpha": C.to_jax(alpha, "alpha", fn).reshape(1), "scale": C.to_jax(gamma, "gamma", fn),
         "bias": C.to_jax(beta, "beta", fn)}
    opts = dict(init_alpha=float(alpha.detach().reshape(()).float()), convention="torch", axis=-1,
                param_dtype=C.param_dtype(p))
    return C.Spec("DyT", {}, (int(gamma.shape[0]),), opts), p


LAYOUTS: dict[str, C.Layout] = {
    "DyT": C.Layout("DyT", _sd_dyt),
}

CONVERTERS: tuple[C.Converter, ...] = (
    C.Converter(
        "diffusers DynamicTanh (SAME's autoencoder), and any diffusers class whose code is its",
        "DyT(convention='torch')",
        C.diffusers_same_code(f"{C.D}.autoencoders.autoencoder_same", "DynamicTanh", ("alpha", "gamma", "beta")),
        _conv_dynamic_tanh,
        LAYOUTS["DyT"],
    ),
)
