"""torch -> jln converters of transformers' gated RMSNorms (Mamba-2's, Qwen3-Next's, Kimi's,
FalconH1's, and every class whose code is one of theirs) to :class:`jln.linen.GatedRMSNorm`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jln import _convert as C


def _gate_activation(m: Any, fn: str) -> str:
    """``"silu"``/``"sigmoid"`` from a transformers gated norm's ``activation`` (a name, as
    transformers stores it, or absent: SiLU)."""
    act = getattr(m, "activation", "silu")
    if act in ("silu", "swish", "sigmoid"):
        return "sigmoid" if act == "sigmoid" else "silu"
    raise C.unsupported(m, fn, f"its gate activation is {act!r}", "jln's gated norms take 'silu' and 'sigmoid'.")


def _hf_gated(convention: str) -> Callable[[Any, str], tuple[C.Spec, C.Params]]:
    """transformers' gated RMSNorms -> ``GatedRMSNorm``: ``group_size`` (MambaRMSNormGated) or
    ``n_groups`` and ``norm_before_gate`` (FalconH1) read off the module."""

    def convert(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
        d = C.one_axis_weight(m, fn)
        p = {"scale": C.to_jax(m.weight, "weight", fn)}
        group_size = getattr(m, "group_size", None)
        n_groups = getattr(m, "n_groups", None)
        if n_groups is not None:
            if int(n_groups) <= 0 or d % int(n_groups):
                raise C.unsupported(m, fn, f"n_groups={n_groups} does not divide the width {d}", "Use a divisor.")
            group_size = d // int(n_groups)
        if group_size is not None and (int(group_size) <= 0 or d % int(group_size)):
            raise C.unsupported(m, fn, f"group_size={group_size} does not divide the width {d}",
                               "transformers itself fails on such a module; use a divisor.")
        nbg = getattr(m, "norm_before_gate", None)
        opts = dict(
            eps=float(m.variance_epsilon),
            convention=convention,
            group_size=None if group_size is None or int(group_size) == d else int(group_size),
            norm_before_gate=None if nbg is None else bool(nbg),
            activation=_gate_activation(m, fn),
            axis=-1,
            use_scale=True,
            param_dtype=C.param_dtype(p),
        )
        return C.Spec("GatedRMSNorm", {}, (d,), opts), p

    return convert


LAYOUTS: dict[str, C.Layout] = {
    "GatedRMSNorm": C.Layout("GatedRMSNorm", C.sd_affine),
}

CONVERTERS: tuple[C.Converter, ...] = (
    C.Converter(
        "transformers Mamba2RMSNormGated, and any transformers class whose code is its (Bamba, Zamba2, "
        "NemotronH, GraniteMoeHybrid...)",
        "GatedRMSNorm(convention='mamba')",
        C.hf_norm(("Mamba2RMSNormGated",), "mamba2", ("weight", "variance_epsilon", "group_size")),
        _hf_gated("mamba"),
        LAYOUTS["GatedRMSNorm"],
    ),
    C.Converter(
        "transformers Qwen3NextRMSNormGated, and any transformers class whose code is its (Qwen3.5, "
        "OLMo-hybrid, Qwen4Exp...)",
        "GatedRMSNorm(convention='qwen3_next')",
        C.hf_norm(("Qwen3NextRMSNormGated",), "qwen3_next", ("weight", "variance_epsilon")),
        _hf_gated("qwen3_next"),
        LAYOUTS["GatedRMSNorm"],
    ),
    C.Converter(
        "transformers KimiLinearRMSNormGated, and any transformers class whose code is its (BailingHybrid, "
        "Glm5Next, LaraMini...)",
        "GatedRMSNorm(convention='float32', activation=its own)",
        C.hf_norm(("KimiLinearRMSNormGated",), "kimi_linear", ("weight", "variance_epsilon")),
        _hf_gated("float32"),
        LAYOUTS["GatedRMSNorm"],
    ),
    C.Converter(
        "transformers FalconH1RMSNormGated, and any transformers class whose code is its",
        "GatedRMSNorm(convention='float32', group_size=width // n_groups)",
        C.hf_norm(("FalconH1RMSNormGated",), "falcon_h1", ("weight", "variance_epsilon", "n_groups", "norm_before_gate")),
        _hf_gated("float32"),
        LAYOUTS["GatedRMSNorm"],
    ),
)

#: Classes recognised by computation but not reproduced (:data:`jln._convert.NearMisses`)
NEAR_MISSES: C.NearMisses = (
    (((f"{C.T}.axk2.modeling_axk2", "AXK2GatedRMSNorm"),),
     "it is an RMSNorm followed by a learned gate, `y * sigmoid(fc2(silu(fc1(y))))` in float32 cast to y's "
     "dtype: a sub-network, not a norm. Its `norm` child (LLaMA's code) converts to RMSNorm(convention='llama'); "
     "write the gate with two flax Dense layers"),
)
