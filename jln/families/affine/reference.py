"""The torch reference of the elementwise affine: the modules' own expressions
(MobileBERT's ``NoNorm.forward``, Phi-4-multimodal's ``MeanVarianceNormLayer.forward``) in
torch's op-by-op evaluation."""

from __future__ import annotations

from typing import Any

Tensor = Any


def affine(x: Tensor, scale: Tensor | None = None, bias: Tensor | None = None, *,
           center: Tensor | None = None) -> Tensor:
    """``((x - center) * scale) + bias`` with ``[C]`` operands over the trailing axes, each op
    in torch's promoted dtype; absent operands skipped."""
    h = x
    if center is not None:
        h = h - center
    if scale is not None:
        h = h * scale
    if bias is not None:
        h = h + bias
    return h
