"""Two blocks built on jln's norms: torch's ``TransformerEncoderLayer`` and DiT's block
(attention lives once here, in :func:`mha`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jln import _monitor, _stats, _validate
from jln._modules import (
    COMPUTE,
    DTYPE,
    EPS,
    INITS,
    LINEN_IMPORTS,
    NNX_IMPORTS,
    Kind,
    Option,
    Params,
    Stats,
    cast_out,
    compute_dtype,
    dense,
    dense_specs,
    literal,
    make_config,
    norm_affine_specs,
    qkv_kernel_init,
    required,
    silu,
    xavier_kernel_init,
    zeros,
)
from jln.families.adaptive.function import adaptive_layer_norm, modulate
from jln.families.layer_norm.function import layer_norm

Array = jax.Array

SHARDING = (
    "Sharding: under ``jax.jit`` with ``NamedSharding`` the batch and sequence axes of the input "
    "may be split across devices (data/sequence parallelism; XLA partitions attention and the "
    "norms). The hidden axis must not be split: the attention and feed-forward layers are not "
    "tensor-parallel, so the block takes no ``axis_name``."
)



def attention_specs(
    d_model: int, use_bias: bool = True, *, out_kernel: Any = None, kernel_init: Any = None, bias_init: Any = None,
) -> dict[str, Any]:
    """q/k/v/out projections, initialised as torch's ``nn.MultiheadAttention``: q/k/v kernels
    xavier over the packed ``[3d, d]`` weight, ``out`` as its Linear (``out_kernel``, default
    torch's Linear init), every bias 0; ``kernel_init``/``bias_init`` replace them all."""
    zero_bias = zeros if bias_init is None else bias_init
    specs = {
        name: dense_specs(d_model, d_model, use_bias=use_bias, bias_init=zero_bias,
                          kernel_init=qkv_kernel_init if kernel_init is None else kernel_init)
        for name in ("query", "key", "value")
    }
    specs["out"] = dense_specs(d_model, d_model, use_bias=use_bias, bias_init=zero_bias,
                               kernel_init=out_kernel if kernel_init is None else kernel_init)
    return specs


def _check_mask_dtype(mask: Any, name: str, what: str, fn: str) -> None:
    dtype = getattr(mask, "dtype", None)
    if dtype is None or not (jnp.issubdtype(dtype, jnp.bool_) or jnp.issubdtype(dtype, jnp.floating)):
        raise TypeError(
            f"{fn}: `{name}` must be a bool array (True = {what}, as torch) or a float array "
            f"added to the attention scores; received {getattr(mask, 'dtype', type(mask).__name__)}."
        )


def check_mask(mask: Any, batch: int, length: int, fn: str, unbatched: bool = False) -> None:
    """``src_key_padding_mask``: ``[batch, seq]`` (``[seq]`` for an unbatched input)."""
    if mask is None:
        return
    _check_mask_dtype(mask, "src_key_padding_mask", "ignore that key", fn)
    want = (length,) if unbatched else (batch, length)
    if tuple(mask.shape) != want:
        layout = "[seq]" if unbatched else "[batch, seq]"
        raise ValueError(
            f"{fn}: `src_key_padding_mask` must have shape {layout} = {want} (whatever "
            f"batch_first says, as torch); received {tuple(mask.shape)}."
        )


def check_attn_mask(mask: Any, batch: int, length: int, num_heads: int, fn: str) -> None:
    """``src_mask``: ``[seq, seq]`` or ``[batch * num_heads, seq, seq]`` (torch's layouts)."""
    if mask is None:
        return
    _check_mask_dtype(mask, "src_mask", "that query may not attend to that key", fn)
    shape = tuple(mask.shape)
    if shape not in ((length, length), (batch * num_heads, length, length)):
        raise ValueError(
            f"{fn}: `src_mask` must have shape [seq, seq] = {(length, length)} or [batch * nhead, "
            f"seq, seq] = {(batch * num_heads, length, length)} (as torch); received {shape}."
        )


def causal_mask(length: int) -> Array:
    """``[seq, seq]``, True above the diagonal: each query sees itself and the keys before it
    (torch's ``Transformer.generate_square_subsequent_mask``, as a bool mask)."""
    return jnp.triu(jnp.ones((length, length), jnp.bool_), k=1)


def mha(
    p: Params,
    x: Array,
    *,
    num_heads: int,
    dtype: Any,
    key_padding_mask: Array | None = None,
    attn_mask: Array | None = None,
    dropout_fn: Callable[[Array], Array] | None = None,
) -> Array:
    """Multi-head self-attention on ``x [B, T, D]`` (torch ``nn.MultiheadAttention`` math).

    ``softmax(q k^T / sqrt(D / num_heads) + mask) v`` per head, projections in ``dtype``,
    scores, softmax and the weighted sum in float32 (float64 for float64), one rounding to
    ``dtype`` per head output. A bool ``key_padding_mask [B, T]`` masks keys where True, a bool
    ``attn_mask`` (``[T, T]`` or ``[B * num_heads, T, T]``) masks (query, key) pairs where True
    (torch's conventions), with the most negative float rather than ``-inf``: rows with some
    visible key match torch exactly; a fully masked row averages the values instead of
    torch's NaN. Float masks are added to the scores.
    """
    b, t, d = x.shape
    hd = d // num_heads
    sd = _stats.promote(dtype, jnp.float32)
    q, k, v = (dense(p[n], x, dtype).reshape(b, t, num_heads, hd) for n in ("query", "key", "value"))
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k, preferred_element_type=sd) * (1.0 / math.sqrt(hd))
    masks = []
    if key_padding_mask is not None:
        masks.append(key_padding_mask[:, None, None, :])
    if attn_mask is not None:
        masks.append(attn_mask.reshape((b, num_heads, t, t) if attn_mask.ndim == 3 else (1, 1, t, t)))
    for m in masks:
        if jnp.issubdtype(m.dtype, jnp.bool_):
            scores = jnp.where(m, jnp.finfo(sd).min, scores)
        else:
            scores = scores + m.astype(sd)
    # torch's CPU attention (scaled_dot_product_attention, flash kernel) keeps the
    # probabilities and the weighted sum in float32 and rounds the head output once
    w = jax.nn.softmax(scores, axis=-1)
    if dropout_fn is not None:
        w = dropout_fn(w)
    o = jnp.einsum("bhqk,bkhd->bqhd", w, v.astype(sd)).astype(dtype).reshape(b, t, d)
    return dense(p["out"], o, dtype)



ACTIVATIONS = ("relu", "gelu")


def _check_encoder_layer(cfg: Any) -> None:
    fn = "jln TransformerEncoderLayer"
    _validate.check_inits(cfg, fn, ("kernel_init", "bias_init"))
    _validate.set_positive(cfg, ("d_model", "nhead", "dim_feedforward"), fn)
    if cfg.d_model % cfg.nhead:
        raise ValueError(
            f"{fn}: `d_model` must be divisible by `nhead`; received d_model={cfg.d_model}, "
            f"nhead={cfg.nhead}."
        )
    if not 0.0 <= float(cfg.dropout) < 1.0:
        raise ValueError(f"{fn}: `dropout` must be in [0, 1); received {cfg.dropout!r}.")
    _validate.check_choice(cfg.activation, "activation", ACTIVATIONS, fn)
    _validate.check_eps(cfg.layer_norm_eps, fn)
    _validate.check_module_options(cfg, fn)


_TORCH = "as torch's ``nn.TransformerEncoderLayer``"
TransformerEncoderLayerConfig = make_config(
    "TransformerEncoderLayerConfig",
    (required("d_model", f"the model width, {_TORCH}."), required("nhead", f"attention heads, {_TORCH}."),
     Option("dim_feedforward", "int", 2048, f"the feed-forward width, {_TORCH}."),
     Option("dropout", "float", 0.1, "dropout rate on the attention weights, after the activation and on "
            "each branch (off unless asked for: linen ``deterministic=False``, NNX ``.train()``)."),
     Option("activation", literal(ACTIVATIONS), "relu", "``\"relu\"`` or ``\"gelu\"`` (exact)."),
     EPS.but(name="layer_norm_eps", doc=f"the LayerNorms' eps, {_TORCH}."),
     Option("batch_first", "bool", False, "``src`` is ``[B, T, D]`` rather than ``[T, B, D]``."),
     Option("norm_first", "bool", False, "Pre-LN (``x + SA(norm1(x))``) rather than Post-LN."),
     Option("bias", "bool", True, "biases in the Linear layers and the LayerNorms."),
     DTYPE.but(doc="compute dtype (default ``src.dtype``)."), *COMPUTE[1:],
     INITS[0].but(doc="initializer of every Linear kernel; ``None``: torch's (q/k/v xavier-uniform over "
                  "the packed ``[3d, d]`` weight, the others U(+-1/sqrt(fan_in)))."),
     INITS[1].but(doc="initializer of every Linear bias; ``None``: torch's (attention biases 0, "
                  "``linear1``/``linear2`` U(+-1/sqrt(fan_in))). The LayerNorms start as ones and zeros.")),
    _check_encoder_layer,
)


def encoder_layer_specs(cfg: Any) -> dict[str, Any]:
    d, f, bias = cfg.d_model, cfg.dim_feedforward, bool(cfg.bias)
    norm = norm_affine_specs((d,), use_bias=bias)
    inits = dict(kernel_init=cfg.kernel_init, bias_init=cfg.bias_init)
    return {
        "self_attn": attention_specs(d, bias, **inits),
        "linear1": dense_specs(d, f, use_bias=bias, **inits),
        "linear2": dense_specs(f, d, use_bias=bias, **inits),
        "norm1": dict(norm),
        "norm2": dict(norm),
    }


def _activation(name: str, h: Array) -> Array:
    return jax.nn.relu(h) if name == "relu" else jax.nn.gelu(h, approximate=False)


def apply_encoder_layer(
    params: Params,
    src: Array,
    cfg: Any,
    *,
    src_mask: Array | None = None,
    src_key_padding_mask: Array | None = None,
    is_causal: bool = False,
    dropout_fn: Callable[[Array], Array] | None = None,
) -> tuple[Array, Stats]:
    """``torch.nn.TransformerEncoderLayer.forward`` (Post-LN or Pre-LN).

    ``src`` is ``[T, B, D]`` (``[B, T, D]`` with ``batch_first``) or unbatched ``[T, D]``;
    ``src_mask`` and ``src_key_padding_mask`` as torch's; ``is_causal=True`` without a
    ``src_mask`` applies the causal mask (torch requires the mask with the hint; with one,
    the mask is used). ``dropout_fn`` (``None`` in eval mode) applies dropout at
    ``cfg.dropout`` where torch does: attention weights, after the activation, and on each
    branch before the residual.
    """
    fn = "jln TransformerEncoderLayer"
    _validate.check_floating(src, fn, "src")
    layout = "[batch, seq, d_model]" if cfg.batch_first else "[seq, batch, d_model]"
    if src.ndim not in (2, 3) or src.shape[-1] != cfg.d_model:
        raise ValueError(
            f"{fn}: `src` must have shape {layout} (or [seq, d_model] unbatched) with d_model="
            f"{cfg.d_model} (batch_first={cfg.batch_first}); received src.shape={tuple(src.shape)}."
        )
    if not isinstance(is_causal, bool):
        raise TypeError(f"{fn}: `is_causal` must be a bool; received {is_causal!r}.")
    unbatched = src.ndim == 2
    dt = compute_dtype(cfg.dtype, src)
    x = src.astype(dt)
    if unbatched:
        x = x[None]
    elif not cfg.batch_first:
        x = jnp.swapaxes(x, 0, 1)
    check_mask(src_key_padding_mask, x.shape[0], x.shape[1], fn, unbatched)
    if unbatched and src_key_padding_mask is not None:
        src_key_padding_mask = src_key_padding_mask[None]
    check_attn_mask(src_mask, x.shape[0], x.shape[1], cfg.nhead, fn)
    if src_mask is None and is_causal:
        src_mask = causal_mask(x.shape[1])
    drop = dropout_fn if dropout_fn is not None else (lambda h: h)
    stats: dict[str, Any] = {}

    def norm(name: str, h: Array) -> Array:
        y = layer_norm(h, params[name]["scale"], params[name].get("bias"), eps=cfg.layer_norm_eps, impl=cfg.impl)
        if cfg.monitor:
            stats[name] = _monitor.row_stats(h, y, (h.ndim - 1,))
        return y

    def sa(h: Array) -> Array:
        a = mha(
            params["self_attn"], h, num_heads=cfg.nhead, dtype=dt,
            key_padding_mask=src_key_padding_mask, attn_mask=src_mask, dropout_fn=dropout_fn,
        )
        return drop(a)

    def ff(h: Array) -> Array:
        h = drop(_activation(cfg.activation, dense(params["linear1"], h, dt)))
        return drop(dense(params["linear2"], h, dt))

    if cfg.norm_first:
        x = x + sa(norm("norm1", x))
        x = x + ff(norm("norm2", x))
    else:
        x = norm("norm1", x + sa(x))
        x = norm("norm2", x + ff(x))
    if unbatched:
        x = x[0]
    elif not cfg.batch_first:
        x = jnp.swapaxes(x, 0, 1)
    return x, (stats if cfg.monitor else None)



def _check_dit_block(cfg: Any) -> None:
    fn = "jln DiTBlock"
    _validate.check_inits(cfg, fn, ("kernel_init", "bias_init"))
    _validate.set_positive(cfg, ("hidden_size", "num_heads"), fn)
    if cfg.hidden_size % cfg.num_heads:
        raise ValueError(
            f"{fn}: `hidden_size` must be divisible by `num_heads`; received "
            f"hidden_size={cfg.hidden_size}, num_heads={cfg.num_heads}."
        )
    if isinstance(cfg.mlp_ratio, bool) or not isinstance(cfg.mlp_ratio, (int, float, np.integer, np.floating)):
        raise TypeError(f"{fn}: `mlp_ratio` must be a number; received {cfg.mlp_ratio!r}.")
    if _mlp_hidden(cfg) <= 0:
        raise ValueError(
            f"{fn}: the MLP's hidden size int(hidden_size * mlp_ratio) must be at least 1; "
            f"received hidden_size={cfg.hidden_size}, mlp_ratio={cfg.mlp_ratio!r}, which give "
            f"{_mlp_hidden(cfg)}. Use a larger mlp_ratio (DiT uses 4.0)."
        )
    _validate.check_module_options(cfg, fn)


def _mlp_hidden(cfg: Any) -> int:
    return int(cfg.hidden_size * cfg.mlp_ratio)


DiTBlockConfig = make_config(
    "DiTBlockConfig",
    (required("hidden_size", "the token width, as DiT."), required("num_heads", "attention heads, as DiT."),
     Option("mlp_ratio", "float", 4.0, "the MLP's hidden size is ``int(hidden_size * mlp_ratio)``."),
     DTYPE.but(doc="compute dtype (default ``x.dtype``)."), *COMPUTE[1:],
     INITS[0].but(doc="initializer of every Dense kernel but ``adaLN_modulation``'s (zero, so the block "
                  "starts as the identity); ``None``: DiT's xavier-uniform (q/k/v over the packed "
                  "``[3d, d]`` weight)."),
     INITS[1].but(doc="initializer of every Dense bias but ``adaLN_modulation``'s; ``None``: zeros (DiT).")),
    _check_dit_block,
    eps=1e-6,  # DiT's LayerNorms: eps 1e-6, no affine
    mlp_hidden=property(_mlp_hidden),
)


def dit_block_specs(cfg: Any) -> dict[str, Any]:
    d, h = cfg.hidden_size, _mlp_hidden(cfg)
    return {
        "adaLN_modulation": dense_specs(d, 6 * d, zero=True),
        # DiT's initialize_weights: xavier_uniform kernels (timm's packed qkv Linear included),
        # zero biases; kernel_init/bias_init replace them
        "attn": attention_specs(d, out_kernel=xavier_kernel_init, kernel_init=cfg.kernel_init,
                                bias_init=cfg.bias_init),
        "mlp": {"fc1": dense_specs(d, h, kernel_init=cfg.kernel_init or xavier_kernel_init,
                                   bias_init=cfg.bias_init or zeros),
                "fc2": dense_specs(h, d, kernel_init=cfg.kernel_init or xavier_kernel_init,
                                   bias_init=cfg.bias_init or zeros)},
    }


def apply_dit_block(params: Params, x: Array, c: Array, cfg: Any) -> tuple[Array, Stats]:
    """DiT block with adaLN-Zero; the identity at initialisation (zero gates)."""
    fn = "jln DiTBlock"
    _validate.check_floating(x, fn)
    _validate.check_floating(c, fn, "c")
    if x.ndim != 3 or x.shape[-1] != cfg.hidden_size:
        raise ValueError(
            f"{fn}: `x` must have shape [batch, tokens, hidden_size={cfg.hidden_size}]; "
            f"received x.shape={tuple(x.shape)}."
        )
    dt = compute_dtype(cfg.dtype, x)
    xi = x.astype(dt)
    emb = dense(params["adaLN_modulation"], silu(c).astype(dt), dt, fn, "c")
    stats: dict[str, Any] = {}

    def branch(h: Array, use: tuple[str, str], name: str) -> tuple[Array, dict[str, Array]]:
        y, ch = adaptive_layer_norm(h, emb, order="dit", use=use, eps=cfg.eps, impl=cfg.impl)
        if cfg.monitor:
            stats[name] = _monitor.row_stats(h, y, (h.ndim - 1,))
        return y, ch

    h, ch = branch(xi, ("shift_msa", "scale_msa"), "norm1")
    a = mha(params["attn"], h, num_heads=cfg.num_heads, dtype=dt)
    xi = xi + modulate(a, None, ch["gate_msa"], scale_offset=0.0)
    h, _ = branch(xi, ("shift_mlp", "scale_mlp"), "norm2")
    m = params["mlp"]
    h = dense(m["fc2"], jax.nn.gelu(dense(m["fc1"], h, dt), approximate=True), dt)
    xi = xi + modulate(h, None, ch["gate_mlp"], scale_offset=0.0)
    return cast_out(xi, cfg.dtype), (stats if cfg.monitor else None)



TRANSFORMER_ENCODER_LAYER = Kind(
    "TransformerEncoderLayer", TransformerEncoderLayerConfig, encoder_layer_specs, apply_encoder_layer, ("src",),
    doc="``torch.nn.TransformerEncoderLayer``: same options (in torch's order), same eval-mode numbers.\n\n"
        "Post-LN (``norm_first=False``): ``x = norm1(x + SA(x)); x = norm2(x + FF(x))``. Pre-LN "
        "(``norm_first=True``): ``x = x + SA(norm1(x)); x = x + FF(norm2(x))``. ``SA`` is multi-head "
        "self-attention (scaled dot product, softmax in float32), ``FF(x) = linear2(dropout("
        "activation(linear1(x))))``; norms are :func:`jln.layer_norm`. Dropout is off unless asked "
        "for: linen ``deterministic=False`` at the call (rng stream ``\"dropout\"``); the NNX module's "
        "``nnx.Dropout`` is on after construction (like a fresh torch module), off after "
        "``.eval()``, on again after ``.train()``.\n\n" + SHARDING,
    returns="(``__call__(src, src_mask=None, src_key_padding_mask=None, is_causal=False)``, torch's "
            "arguments in torch's order; linen adds ``*, deterministic=True``): array like ``src`` "
            "(``[T, B, D]``, ``[B, T, D]`` with ``batch_first``, or unbatched ``[T, D]``), dtype "
            "``src.dtype`` (or ``dtype``). ``src_mask [T, T]`` or ``[B * nhead, T, T]``: True (bool) "
            "forbids a query from attending to a key, a float mask is added to the scores (torch). "
            "``src_key_padding_mask [B, T]`` (``[T]`` unbatched): True marks padding keys to ignore. "
            "``is_causal=True`` without ``src_mask`` applies the causal mask (each position sees "
            "itself and the ones before it; torch requires the mask with this hint). The monitor "
            "records ``{\"norm1\": ..., \"norm2\": ...}``.",
    raises="TypeError, ValueError: bad options (d_model not divisible by nhead, unknown activation, "
           "dropout outside [0, 1)), bad ``src`` or mask shape/dtype; NNX: ``TypeError`` without ``rngs``.",
    examples=(LINEN_IMPORTS + "  >>> m = jnn.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16)\n"
              "  >>> src = jnp.ones((5, 2, 8))\n  >>> m.apply(m.init(jax.random.key(0), src), src).shape\n"
              "  (5, 2, 8)",
              NNX_IMPORTS + "  >>> m = jnnx.TransformerEncoderLayer(8, 2, 16, rngs=nnx.Rngs(0))\n  >>> m.eval()\n"
              "  >>> m(jnp.ones((5, 2, 8))).shape\n  (5, 2, 8)"),
    rngs_doc="``nnx.Rngs`` for parameter init and the dropout stream.",
    positional=9, dropout=True,
    call_options=(("src_mask", None, "jax.Array | None"), ("src_key_padding_mask", None, "jax.Array | None"), ("is_causal", False, "bool")),
)
DIT_BLOCK = Kind(
    "DiTBlock", DiTBlockConfig, dit_block_specs, apply_dit_block, ("x", "c"),
    doc="A DiT block with adaLN-Zero conditioning (Peebles and Xie, 2023).\n\n"
        "``emb = adaLN_modulation(SiLU(c))`` (zero-initialised Dense, 6 chunks in DiT's order); "
        "``x = x + gate_msa * attn(LN(x) * (1 + scale_msa) + shift_msa)``, then "
        "``x = x + gate_mlp * mlp(LN(x) * (1 + scale_mlp) + shift_mlp)``; LayerNorms with eps 1e-6 "
        "and no affine, ``mlp = fc2(GELU_tanh(fc1(.)))``. At initialisation it returns ``x``.\n\n"
        + SHARDING.replace("feed-forward", "MLP") + " ``c`` follows the batch split.",
    returns="(``__call__(x, c)``): ``x [B, T, D]`` updated, conditioned on ``c [B, D]``.",
    raises="TypeError, ValueError: bad options or input shapes.",
    examples=(LINEN_IMPORTS + "  >>> m = jnn.DiTBlock(hidden_size=8, num_heads=2)\n  >>> x, c = jnp.ones((2, 5, 8)), "
              "jnp.ones((2, 8))\n  >>> bool((m.apply(m.init(jax.random.key(0), x, c), x, c) == x).all())\n"
              "  True",
              NNX_IMPORTS + "  >>> x = jnp.ones((2, 5, 8))\n  >>> bool((jnnx.DiTBlock(8, 2, rngs=nnx.Rngs(0))(x, "
              "jnp.ones((2, 8))) == x).all())\n  True"),
    rngs_doc="``nnx.Rngs`` for parameter init.", positional=2,
)
