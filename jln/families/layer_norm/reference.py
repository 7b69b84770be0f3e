"""The torch reference of LayerNorm in each convention (``torch.nn.functional.layer_norm``, and
the model files' dtype flows), and the fused residual step around it."""

from __future__ import annotations

from typing import Any

from jln import _reference as R

Tensor = Any


def layer_norm(x: Tensor, scale: Tensor | None = None, bias: Tensor | None = None, *, k: int = 1, eps: float = 1e-5,
               zero_centered: bool = False, convention: str = "torch") -> Tensor:
    """The reference of each LayerNorm convention over the trailing ``k`` axes:
    ``torch.nn.functional.layer_norm`` (``"torch"``); transformers' ``DebertaLayerNorm``
    (``"deberta"``: float32 statistics, the row cast to ``x``'s dtype, then ``weight * h + bias``
    in torch's promotion); VitDet's hand-written LayerNorm (``"eager"``: every op in ``x``'s
    dtype). ``zero_centered``: ``scale + 1`` in ``scale``'s dtype (Nemotron's ``LayerNorm1P``)."""
    if zero_centered and scale is not None:
        scale = scale + 1.0
    torch = R.torch()
    dims = R.dims(k)
    if convention == "torch":
        return torch.nn.functional.layer_norm(x, tuple(x.shape[-k:]), scale, bias, eps)
    if convention == "deberta":
        f = x.float() if x.dtype != torch.float64 else x
        mean = f.mean(dims, keepdim=True)
        var = (f - mean).pow(2).mean(dims, keepdim=True)
        h = ((f - mean) / torch.sqrt(var + eps)).to(x.dtype)
    elif convention == "eager":
        u = x.mean(dims, keepdim=True)
        s = (x - u).pow(2).mean(dims, keepdim=True)
        h = (x - u) / torch.sqrt(s + eps)
    else:
        raise ValueError(f"no torch reference for LayerNorm convention {convention!r}")
    if scale is not None:
        h = scale * h
    return h if bias is None else h + bias


def add_layer_norm(x: Tensor, residual: Tensor, scale: Tensor | None = None, bias: Tensor | None = None, *,
                   residual_in_fp32: bool = False, **kw: Any) -> tuple[Tensor, Tensor]:
    """``s = x + residual``; returns ``(layer_norm(s), s)`` (jln casts the norm to ``x.dtype``:
    compare after casting this reference to it)."""
    s = R.residual_sum(x, residual, residual_in_fp32)
    return layer_norm(s, scale, bias, **kw), s
