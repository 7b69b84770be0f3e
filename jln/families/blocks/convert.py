"""torch -> jln converters of ``torch.nn.TransformerEncoderLayer`` and ``torch.nn.Linear`` (to flax's
Dense / ``nnx.Linear``).
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp

from jln import _convert as C


def _sd_encoder_layer(p: C.Params) -> dict[str, Any]:
    sa = p["self_attn"]
    qkv = [sa[n] for n in ("query", "key", "value")]
    biases = {"self_attn.in_proj_bias": jnp.concatenate([t["bias"] for t in qkv], axis=0)} if "bias" in qkv[0] else {}
    return {
        "self_attn.in_proj_weight": jnp.concatenate(
            [jnp.asarray(t["kernel"]).T for t in qkv], axis=0
        ),
        **biases,
        **C.sd_linear(sa["out"], "self_attn.out_proj."),
        **C.sd_linear(p["linear1"], "linear1."),
        **C.sd_linear(p["linear2"], "linear2."),
        **C.sd_affine(p["norm1"], "norm1."),
        **C.sd_affine(p["norm2"], "norm2."),
    }


def _activation_name(m: Any, fn: str) -> str:
    import torch

    act = m.activation
    if act is torch.nn.functional.relu or type(act) is torch.nn.ReLU:
        return "relu"
    if act is torch.nn.functional.gelu or (
        type(act) is torch.nn.GELU and act.approximate == "none"
    ):
        return "gelu"
    raise C.unsupported(m, fn, f"activation {act!r}", "Supported: 'relu' and exact 'gelu'.")


def _conv_encoder_layer(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    sa = m.self_attn
    checks = [
        (sa._qkv_same_embed_dim, "query, key and value have different embedding sizes"),
        (
            len({sa.in_proj_bias is None, sa.out_proj.bias is None, m.linear1.bias is None,
                 m.linear2.bias is None, m.norm1.bias is None, m.norm2.bias is None}) == 1,
            "some of its layers have biases and others not",
        ),
        (sa.bias_k is None and sa.bias_v is None, "self_attn has add_bias_kv=True"),
        (not sa.add_zero_attn, "self_attn has add_zero_attn=True"),
        (m.norm1.weight is not None and m.norm2.weight is not None, "its LayerNorms lack weights"),
        (m.norm1.eps == m.norm2.eps, f"norm1.eps={m.norm1.eps} != norm2.eps={m.norm2.eps}"),
        (
            len({m.dropout.p, m.dropout1.p, m.dropout2.p, sa.dropout}) == 1,
            "its dropout rates differ",
        ),
    ]
    for ok, why in checks:
        if not ok:
            raise C.unsupported(m, fn, why, "Only torch's standard configuration is supported.")
    d = int(sa.embed_dim)
    w_q, w_k, w_v = sa.in_proj_weight.chunk(3, dim=0)
    bias = sa.in_proj_bias is not None
    b_q, b_k, b_v = sa.in_proj_bias.chunk(3, dim=0) if bias else (None,) * 3

    def proj(w: Any, b: Any, name: str) -> C.Params:
        p = {"kernel": C.to_jax(w, f"self_attn.in_proj_weight[{name}]", fn).T}
        if b is not None:
            p["bias"] = C.to_jax(b, f"self_attn.in_proj_bias[{name}]", fn)
        return p

    p = {
        "self_attn": {
            "query": proj(w_q, b_q, "q"),
            "key": proj(w_k, b_k, "k"),
            "value": proj(w_v, b_v, "v"),
            "out": C.linear(sa.out_proj, fn, "self_attn.out_proj."),
        },
        "linear1": C.linear(m.linear1, fn, "linear1."),
        "linear2": C.linear(m.linear2, fn, "linear2."),
        "norm1": C.affine(m.norm1, fn, "norm1."),
        "norm2": C.affine(m.norm2, fn, "norm2."),
    }
    opts = dict(
        dim_feedforward=int(m.linear1.out_features),
        dropout=float(m.dropout.p),
        activation=_activation_name(m, fn),
        layer_norm_eps=float(m.norm1.eps),
        batch_first=bool(sa.batch_first),
        norm_first=bool(m.norm_first),
        bias=bias,
        param_dtype=C.param_dtype(p),
    )
    sizes = (d, int(sa.num_heads))
    return C.Spec("TransformerEncoderLayer", {"d_model": d, "nhead": sizes[1]}, sizes, opts), p


def _conv_linear(m: Any, fn: str) -> tuple[C.Spec, C.Params]:
    p = C.linear(m, fn)
    opts = dict(use_bias="bias" in p, param_dtype=C.param_dtype(p))
    return (
        C.Spec(
            "Dense",
            {"features": int(m.out_features)},
            (int(m.in_features), int(m.out_features)),
            opts,
            namespace="flax",
            nnx_cls="Linear",
        ),
        p,
    )


LAYOUTS: dict[str, C.Layout] = {
    "TransformerEncoderLayer": C.Layout("TransformerEncoderLayer", _sd_encoder_layer),
    "Dense": C.Layout("Dense", C.sd_linear),
}

CONVERTERS: tuple[C.Converter, ...] = (
    C.Converter(
        "torch.nn.TransformerEncoderLayer",
        "TransformerEncoderLayer",
        C.torch_nn("TransformerEncoderLayer"),
        _conv_encoder_layer,
        LAYOUTS["TransformerEncoderLayer"],
    ),
    C.Converter(
        "torch.nn.Linear",
        "flax Dense (linen) / nnx.Linear",
        C.torch_nn("Linear"),
        _conv_linear,
        LAYOUTS["Dense"],
    ),
)
