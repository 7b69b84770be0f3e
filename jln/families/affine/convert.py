"""torch -> jln converters of the elementwise affines: transformers' MobileBERT ``NoNorm``
(``x * weight + bias``, to :class:`jln.linen.Affine`) and Phi-4-multimodal's
``Phi4MultimodalAudioMeanVarianceNormLayer`` (``(x - global_mean) * global_invstd``, two
buffers, to :class:`jln.linen.Standardize`, whose ``mean``/``inv_std`` travel in the
``"batch_stats"`` collection). Both are recognised by their code (any copy of it in
transformers or diffusers), and the layouts give back torch's names, so the state_dict loads
strictly.
"""

from __future__ import annotations

from typing import Any

from jln import _convert as C

_NONORM = ((f"{C.T}.mobilebert.modeling_mobilebert", "NoNorm"),)
_PHI4 = ((f"{C.T}.phi4_multimodal.modeling_phi4_multimodal", "Phi4MultimodalAudioMeanVarianceNormLayer"),)
#: jln's state name -> Phi-4's buffer name
PHI4_NAMES = {"mean": "global_mean", "inv_std": "global_invstd"}


def _features(m: Any, fn: str, tensors: dict[str, Any]) -> int:
    """The one feature size of ``tensors`` (torch name -> tensor): each 1-D, of one shape and
    one dtype; refused otherwise."""
    shapes = {n: tuple(t.shape) for n, t in tensors.items()}
    dtypes = {str(t.dtype) for t in tensors.values()}
    if any(len(s) != 1 for s in shapes.values()) or len(set(shapes.values())) != 1:
        raise C.unsupported(m, fn, f"its tensors have shapes {shapes}",
                           "jln converts them over the last axis only: 1-D tensors of one shape [C].")
    if len(dtypes) != 1:
        raise C.unsupported(m, fn, f"its tensors have different dtypes {sorted(dtypes)}",
                           "Cast the module to one dtype first (module.float() or module.bfloat16()).")
    return next(iter(shapes.values()))[0]


def _conv_nonorm(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    n = _features(m, fn, {"weight": m.weight, "bias": m.bias})
    p = C.affine(m, fn)
    return C.Spec("Affine", {}, (n,), dict(axis=-1, param_dtype=C.param_dtype(p))), p


def _conv_phi4(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    n = _features(m, fn, {t: getattr(m, t) for t in PHI4_NAMES.values()})
    stats = {j: C.to_jax(getattr(m, t), t, fn) for j, t in PHI4_NAMES.items()}
    opts = dict(axis=-1, param_dtype=C.param_dtype(stats))
    return C.Spec("Standardize", {}, (n,), opts, collections=True), {"params": {}, "batch_stats": stats}


def _sd_phi4(p: C.Params) -> dict[str, Any]:
    return {PHI4_NAMES[n]: v for n, v in p.items() if n in PHI4_NAMES}


LAYOUTS: dict[str, C.Layout] = {
    "Affine": C.Layout("Affine", C.sd_affine),
    "Standardize": C.Layout("Standardize", _sd_phi4),
}

CONVERTERS: tuple[C.Converter, ...] = (
    C.Converter(
        "transformers NoNorm (MobileBERT's `x * weight + bias`), and any class whose code is its",
        "Affine",
        C.computes_as(_NONORM, ("weight", "bias")),
        _conv_nonorm,
        LAYOUTS["Affine"],
    ),
    C.Converter(
        "transformers Phi4MultimodalAudioMeanVarianceNormLayer (`(x - global_mean) * global_invstd`, two "
        "buffers), and any class whose code is its",
        "Standardize",
        C.computes_as(_PHI4, ("global_mean", "global_invstd")),
        _conv_phi4,
        LAYOUTS["Standardize"],
    ),
)
