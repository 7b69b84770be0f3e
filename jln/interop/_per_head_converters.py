"""Converters for per-head LayerNorms: statistics over the last axis, parameters over the heads
axis too. Both map onto :class:`jln.linen.LayerNorm`'s ``param_axes`` (no new formula):

* transformers' ``StableLmLayerNormPerHead`` (and its copies): one ``nn.LayerNorm(head_dim)``
  per head of ``[batch, heads, seq, head_dim]`` input, i.e. ``F.layer_norm`` over the last
  axis with a ``(heads, head_dim)`` weight in float32 and one rounding: torch's convention with
  ``param_axes=(1, -1)``; the weights go back to ``norms.<i>.weight`` through ``torch_names``.
* transformers' ``ChameleonLayerNorm`` (and its copies): ``F.layer_norm`` over the last axis
  without parameters, rounded to ``x``'s dtype, then ``x * weight + bias`` op by op in torch's
  promotion, parameters of shape ``(heads, head_dim)`` over the trailing axes: the
  ``"deberta"`` convention with ``param_axes`` the parameters' axes.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from jln.interop import _converters as C
from jln.interop._arrays import to_jax
from jln.interop._variants import _T, _torch_class, computes_as


def _conv_stablelm(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    norms = list(m.norms)
    layer_norm = _torch_class("LayerNorm")
    if not norms or any(type(n) is not layer_norm for n in norms):
        raise C._unsupported(
            m, fn, "its `norms` are not all torch nn.LayerNorm (one per head)",
            "Build it as the model file does (nn.ModuleList of nn.LayerNorm(dim)).",
        )
    shapes = {tuple(int(s) for s in n.normalized_shape) for n in norms}
    eps = {float(n.eps) for n in norms}
    layout = {(n.weight is None, n.bias is None, None if n.weight is None else n.weight.dtype) for n in norms}
    if len(shapes) != 1 or len(eps) != 1 or len(layout) != 1 or len(next(iter(shapes))) != 1:
        raise C._unsupported(
            m, fn,
            f"its per-head LayerNorms differ in normalized_shape ({sorted(shapes)}), eps ({sorted(eps)}) "
            f"or which parameters they hold, or normalize more than one axis; jln's LayerNorm with "
            f"param_axes has one eps and one parameter layout for every head",
            "Use the same nn.LayerNorm(dim, eps, bias) for every head.",
        )
    dim = next(iter(shapes))[0]
    p: C.Params = {}
    names = []
    if norms[0].weight is not None:
        p["scale"] = jnp.stack([to_jax(n.weight, f"norms.{i}.weight", fn) for i, n in enumerate(norms)])
        names.append(("weight", "norms.{}.weight"))
    if norms[0].bias is not None:
        p["bias"] = jnp.stack([to_jax(n.bias, f"norms.{i}.bias", fn) for i, n in enumerate(norms)])
        names.append(("bias", "norms.{}.bias"))
    # torch.split(x, 1, dim=1): the heads are axis 1 of [batch, heads, seq, head_dim]
    opts: dict[str, Any] = dict(eps=eps.pop(), axis=-1, param_axes=(1, -1), use_scale="scale" in p,
                                use_bias="bias" in p, param_dtype=C._param_dtype(p))
    if names:
        opts["torch_names"] = tuple(names)
    return C.Spec("LayerNorm", {}, ((len(norms), dim),), opts), p


def _conv_chameleon(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    w, b = getattr(m, "weight", None), getattr(m, "bias", None)
    if w is None or b is None:
        raise C._unsupported(
            m, fn, "it has no weight or no bias, but its forward computes `x * self.weight + self.bias` "
            "(torch fails on it too)",
            "Build it with elementwise_affine=True and bias=True.",
        )
    if w.ndim < 2 or tuple(w.shape) != tuple(b.shape):
        raise C._unsupported(
            m, fn, f"its weight has shape {tuple(w.shape)} and its bias {tuple(b.shape)}; the per-head "
            f"layout is (heads, head_dim) for both",
            "Build it with hidden_size=(heads, head_dim).",
        )
    p = C._affine(m, fn)
    # the forward fixes eps=1e-5 and takes the statistics over the last axis only
    opts = dict(eps=1e-5, axis=-1, param_axes=tuple(range(-w.ndim, 0)), use_scale=True, use_bias=True,
                param_dtype=C._param_dtype(p), convention="deberta")
    return C.Spec("LayerNorm", {}, (tuple(int(s) for s in w.shape),), opts), p


_LN = C.LAYOUTS["LayerNorm"]

CONVERTERS: tuple[C.Converter, ...] = (
    C.Converter(
        "transformers StableLmLayerNormPerHead and its copies (one nn.LayerNorm per head of [batch, heads, "
        "seq, head_dim])",
        "LayerNorm(param_axes=(1, -1), torch_names norms.<i>.*)",
        computes_as(((f"{_T}.stablelm.modeling_stablelm", "StableLmLayerNormPerHead"),), ("norms",)),
        _conv_stablelm,
        _LN,
    ),
    C.Converter(
        "transformers ChameleonLayerNorm and its copies (F.layer_norm over the last axis rounded to x's dtype, "
        "then `x * weight + bias` with (heads, head_dim) parameters)",
        "LayerNorm(convention='deberta', param_axes=(-2, -1), eps=1e-5)",
        computes_as(((f"{_T}.chameleon.modeling_chameleon", "ChameleonLayerNorm"),), ("weight", "bias")),
        _conv_chameleon,
        _LN,
    ),
)
