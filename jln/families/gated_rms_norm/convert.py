"""torch -> jln converters of transformers' gated RMSNorms (Mamba-2's, Qwen3-Next's, Kimi's,
FalconH1's, and every class whose code is one of theirs) to :class:`jln.linen.GatedRMSNorm`, and of
AXK2's RMSNorm with a low-rank gate MLP to :class:`jln.linen.LowRankGatedRMSNorm`.
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


_AXK2 = f"{C.T}.axk2.modeling_axk2"
#: LLaMA's RMSNorm code under any transformers name (AXK2RMSNorm's own class is one)
_LLAMA_NORM = C.hf_norm(("LlamaRMSNorm",), "llama", ("weight", "variance_epsilon"))
_GATE_MLP = C.computes_as(((_AXK2, "AXK2GateMLP"),), ("fc1", "fc2", "activation_fn"))


def _conv_low_rank(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    """``AXK2GatedRMSNorm`` -> ``LowRankGatedRMSNorm``: its ``norm`` must be LLaMA's RMSNorm code and
    its ``mlp`` AXK2's ``fc2(SiLU(fc1(h)))`` with bias-free torch Linears, sized ``d -> rank -> d``."""
    norm, mlp = m.norm, m.mlp
    if not _LLAMA_NORM(norm):
        raise C.unsupported(m, fn, f"its `norm` is a {C.what(norm)}, whose code is not LLaMA's RMSNorm",
                            "jln converts this class when `norm` computes as LlamaRMSNorm.")
    if not _GATE_MLP(mlp):
        raise C.unsupported(m, fn, f"its `mlp` is a {C.what(mlp)}, whose code is not AXK2GateMLP's",
                            "jln converts this class when `mlp` computes fc2(act(fc1(h))) as AXK2GateMLP.")
    fc1, fc2 = C.inner(mlp, "fc1", "Linear", fn), C.inner(mlp, "fc2", "Linear", fn)
    if not C.torch_nn("SiLU")(mlp.activation_fn):
        raise C.unsupported(m, fn, f"its gate MLP's activation is a {type(mlp.activation_fn).__name__}",
                            "jln's LowRankGatedRMSNorm takes SiLU, as AXK2 builds it.")
    if fc1.bias is not None or fc2.bias is not None:
        raise C.unsupported(m, fn, "its gate MLP's Linears have biases", "jln's LowRankGatedRMSNorm has none, as AXK2.")
    d = C.one_axis_weight(norm, fn)
    rank = int(fc1.out_features)
    if (int(fc1.in_features), int(fc2.in_features), int(fc2.out_features)) != (d, rank, d):
        raise C.unsupported(
            m, fn, f"its gate MLP is {fc1.in_features} -> {fc1.out_features}, {fc2.in_features} -> "
            f"{fc2.out_features}, not {d} -> rank -> {d} around the norm's width {d}", "Use matching Linears.")
    p = {"norm": {"scale": C.to_jax(norm.weight, "norm.weight", fn)},
         "mlp": {"fc1": C.linear(fc1, fn, "mlp.fc1."), "fc2": C.linear(fc2, fn, "mlp.fc2.")}}
    opts = dict(rank=rank, eps=float(norm.variance_epsilon), param_dtype=C.param_dtype(p))
    return C.Spec("LowRankGatedRMSNorm", {}, (d,), opts), p


LAYOUTS: dict[str, C.Layout] = {
    "GatedRMSNorm": C.Layout("GatedRMSNorm", C.sd_affine),
    "LowRankGatedRMSNorm": C.Layout("LowRankGatedRMSNorm", C.sd_named),
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
    C.Converter(
        "transformers AXK2GatedRMSNorm (LLaMA's RMSNorm, then a low-rank sigmoid gate MLP of its output), and "
        "any transformers class whose code is its",
        "LowRankGatedRMSNorm(rank=gated_norm_rank)",
        C.computes_as(((_AXK2, "AXK2GatedRMSNorm"),), ("norm", "mlp")),
        _conv_low_rank,
        LAYOUTS["LowRankGatedRMSNorm"],
    ),
)

#: Classes recognised by computation but not reproduced (:data:`jln._convert.NearMisses`): none left
NEAR_MISSES: C.NearMisses = ()
