"""The one table of torch -> jln converters, and the inverse layouts.

Each :class:`Converter` recognises a torch module (``isinstance`` for ``torch.nn`` classes whose
``forward`` is not overridden; class name plus attributes for transformers and diffusers, which
are never imported), and turns it once into a :class:`Spec` (which jln class, which options)
and a parameter tree. The linen and nnx results are built from that same pair. Each converter
points at a :class:`Layout`, keyed by the jln class, which maps a parameter tree back to the
torch ``state_dict`` keys; every torch class converted to a given jln class has that layout,
so the jln module alone decides the torch layout.

No norm formula lives here: the conventions are options of the jln modules, which call
:func:`jln.layer_norm`, :func:`jln.rms_norm` and :func:`jln.adaptive_layer_norm`.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp

from jln.interop._arrays import to_jax

Params = dict[str, Any]


@dataclass(frozen=True)
class Spec:
    """How to build the converted module, identically for linen and nnx.

    linen: ``<namespace>.linen.<cls>(**linen_sizes, **options)``; nnx:
    ``<namespace>.nnx.<nnx_cls or cls>(*nnx_sizes, **options, rngs=...)``.
    """

    cls: str
    linen_sizes: dict[str, Any]
    nnx_sizes: tuple[Any, ...]
    options: dict[str, Any]
    namespace: str = "jln"  # "flax" for plain Dense / nnx.Linear
    nnx_cls: str | None = None
    #: the converter returns whole variables (``{"params": ..., "batch_stats": ...}``)
    collections: bool = False


@dataclass(frozen=True)
class Layout:
    """A jln module's parameter tree -> torch ``state_dict`` (arrays, not yet tensors)."""

    jln_class: str
    to_state_dict: Callable[[Params], dict[str, Any]]


@dataclass(frozen=True)
class Converter:
    """One torch class (or family) -> one jln class."""

    source: str
    target: str
    recognise: Callable[[Any], bool]
    convert: Callable[[Any, str], tuple[Spec, Params]]
    layout: Layout
    notes: str = field(default="")


# --------------------------------------------------------------------------- recognisers


def _torch_nn(name: str) -> Callable[[Any], bool]:
    """``isinstance(m, torch.nn.<name>)`` with the class's own ``forward`` (not a subclass that
    changes the computation). torch is already imported whenever a torch module exists."""

    def recognise(m: Any) -> bool:
        torch = sys.modules.get("torch")
        cls = None if torch is None else getattr(torch.nn, name, None)
        return cls is not None and isinstance(m, cls) and type(m).forward is cls.forward

    return recognise


def _named(
    names: tuple[str, ...], attrs: tuple[str, ...], package: str | None = None
) -> Callable[[Any], bool]:
    """Class name in ``names``, every attribute in ``attrs`` present, optionally defined in
    ``package`` (for a generic name such as diffusers' ``RMSNorm``)."""

    def recognise(m: Any) -> bool:
        t = type(m)
        if t.__name__ not in names or not hasattr(m, "state_dict"):
            return False
        if package is not None and not t.__module__.split(".")[0] == package:
            return False
        return all(hasattr(m, a) for a in attrs)

    return recognise


def _code(cls: type) -> tuple[str, ...] | None:
    """What ``cls`` computes, as the syntax of its ``forward`` and ``_norm`` (docstrings and
    annotations dropped, arguments renamed by position), or None without readable source."""
    key = _CODE.get(cls, False)
    if key is not False:
        return key  # type: ignore[return-value]
    parts: list[str] = []
    try:
        for name in ("forward", "_norm"):
            meth = getattr(cls, name, None)
            if meth is None:
                parts.append("-")
                continue
            fn_node = ast.parse(textwrap.dedent(inspect.getsource(meth))).body[0]
            assert isinstance(fn_node, ast.FunctionDef)
            renames = {a.arg: f"a{i}" for i, a in enumerate(fn_node.args.args)}
            fn_node.name, fn_node.returns, fn_node.decorator_list = "f", None, []
            body = fn_node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
                fn_node.body = body[1:] or [ast.Pass()]
            for node in ast.walk(fn_node):
                if isinstance(node, ast.arg):
                    node.annotation = None
                    node.arg = renames.get(node.arg, node.arg)
                elif isinstance(node, ast.Name) and node.id in renames:
                    node.id = renames[node.id]
            parts.append(ast.dump(fn_node, annotate_fields=False))
        result: tuple[str, ...] | None = tuple(parts)
    except (OSError, TypeError, SyntaxError, AssertionError, IndexError):
        result = None
    _CODE[cls] = result
    return result


_CODE: dict[type, tuple[str, ...] | None] = {}


def _same_code_as(module: str, name: str, attrs: tuple[str, ...]) -> Callable[[Any], bool]:
    """A transformers class (every attribute in ``attrs`` present) whose ``forward`` and
    ``_norm`` are, as code, those of ``module.name`` in the same installed transformers: the
    many model files that repeat LLaMA's, Gemma's or T5's norm under their own class names
    (Qwen3RMSNorm, DeepseekV3RMSNorm, MT5LayerNorm...). Read only when the module is a
    transformers object, so transformers is already imported."""

    def recognise(m: Any) -> bool:
        t = type(m)
        if t.__module__.split(".")[0] != "transformers" or not all(hasattr(m, a) for a in attrs):
            return False
        try:
            ref = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            return False
        mine = _code(t)
        return mine is not None and mine == _code(ref)

    return recognise


def _diffusers_same_code(module: str, name: str, attrs: tuple[str, ...]) -> Callable[[Any], bool]:
    """``name`` in diffusers' ``module``, or any diffusers class (every attribute in ``attrs``
    present) whose ``forward`` is, as code, that class's: the model files that repeat it under
    their own names (LTX-2's ``LTX2AdaLayerNormSingle``...). The converter still checks the
    submodules."""

    def recognise(m: Any) -> bool:
        t = type(m)
        if t.__module__.split(".")[0] != "diffusers" or not all(hasattr(m, a) for a in attrs):
            return False
        try:
            ref = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            return False
        if t is ref:
            return True
        mine = _code(t)
        return mine is not None and mine == _code(ref)

    return recognise


def _hf_norm(names: tuple[str, ...], model: str, attrs: tuple[str, ...]) -> Callable[[Any], bool]:
    """A transformers norm by one of ``names``, or by the code of ``names[0]`` in
    ``transformers.models.<model>`` (:func:`_same_code_as`)."""
    named = _named(names, attrs)
    same = _same_code_as(f"transformers.models.{model}.modeling_{model}", names[0], attrs)
    return lambda m: named(m) or same(m)


# --------------------------------------------------------------------------- helpers


def _what(m: Any) -> str:
    return f"{type(m).__module__}.{type(m).__qualname__}"


def _param_dtype(params: Params) -> Any:
    """The checkpoint's parameter dtype (the first leaf's), float32 when there is none."""
    leaves = jax.tree_util.tree_leaves(params)
    return leaves[0].dtype if leaves else jnp.dtype(jnp.float32)


def _unsupported(m: Any, fn: str, why: str, fix: str) -> ValueError:
    return ValueError(f"{fn}: cannot convert this {_what(m)}: {why}. {fix}")


def _affine(m: Any, fn: str, prefix: str = "") -> Params:
    """``weight``/``bias`` of a norm -> ``scale``/``bias`` (absent ones left out)."""
    p: Params = {}
    if getattr(m, "weight", None) is not None:
        p["scale"] = to_jax(m.weight, prefix + "weight", fn)
    if getattr(m, "bias", None) is not None:
        p["bias"] = to_jax(m.bias, prefix + "bias", fn)
    return p


def _linear(m: Any, fn: str, prefix: str = "") -> Params:
    """torch ``Linear.weight [out, in]`` -> ``kernel [in, out]``; bias as is."""
    p: Params = {"kernel": to_jax(m.weight, prefix + "weight", fn).T}
    if m.bias is not None:
        p["bias"] = to_jax(m.bias, prefix + "bias", fn)
    return p


def _axis(shape: tuple[int, ...]) -> int | tuple[int, ...]:
    k = len(shape)
    return -1 if k == 1 else tuple(range(-k, 0))


def _features(shape: tuple[int, ...]) -> int | tuple[int, ...]:
    return shape[0] if len(shape) == 1 else shape


def _one_axis_weight(m: Any, fn: str) -> int:
    """Size of the last axis for norms that reduce over the last axis only (transformers)."""
    w = m.weight
    if w is None or w.ndim != 1:
        raise _unsupported(
            m,
            fn,
            f"expected a 1-D `weight`, found shape {None if w is None else tuple(w.shape)}",
            "These classes normalize over the last axis only; use a 1-D weight.",
        )
    return int(w.shape[0])


# --------------------------------------------------------------------------- layouts


def _sd_affine(p: Params, prefix: str = "") -> dict[str, Any]:
    out = {}
    if "scale" in p:
        out[prefix + "weight"] = p["scale"]
    if "bias" in p:
        out[prefix + "bias"] = p["bias"]
    return out


def _sd_linear(p: Params, prefix: str = "") -> dict[str, Any]:
    out = {prefix + "weight": jnp.asarray(p["kernel"]).T}
    if "bias" in p:
        out[prefix + "bias"] = p["bias"]
    return out


def _sd_adaptive(p: Params) -> dict[str, Any]:
    return {**_sd_linear(p["linear"], "linear."), **_sd_affine(p.get("norm", {}), "norm.")}


def _sd_named(p: Params) -> dict[str, Any]:
    """Each sub-tree under its torch name: a Dense (``kernel``) as ``<name>.weight`` (transposed)
    and ``.bias``, a norm's ``scale``/``bias`` as ``<name>.weight``/``.bias``."""
    out: dict[str, Any] = {}
    for name, sub in p.items():
        if "kernel" in sub:
            out.update(_sd_linear(sub, name + "."))
        elif any(isinstance(v, dict) for v in sub.values()):  # a group of layers (PixArt's emb)
            out.update({f"{name}.{k}": v for k, v in _sd_named(sub).items()})
        else:
            out.update(_sd_affine(sub, name + "."))
    return out


def _sd_grn(p: Params) -> dict[str, Any]:
    # torch keeps gamma and beta as [1, 1, 1, C]
    return {n: jnp.asarray(p[n]).reshape((1, 1, 1, -1)) for n in ("gamma", "beta")}


def _sd_encoder_layer(p: Params) -> dict[str, Any]:
    sa = p["self_attn"]
    qkv = [sa[n] for n in ("query", "key", "value")]
    biases = {"self_attn.in_proj_bias": jnp.concatenate([t["bias"] for t in qkv], axis=0)} if "bias" in qkv[0] else {}
    return {
        "self_attn.in_proj_weight": jnp.concatenate(
            [jnp.asarray(t["kernel"]).T for t in qkv], axis=0
        ),
        **biases,
        **_sd_linear(sa["out"], "self_attn.out_proj."),
        **_sd_linear(p["linear1"], "linear1."),
        **_sd_linear(p["linear2"], "linear2."),
        **_sd_affine(p["norm1"], "norm1."),
        **_sd_affine(p["norm2"], "norm2."),
    }


LAYOUTS: dict[str, Layout] = {
    name: Layout(name, fn)
    for name, fn in (
        ("LayerNorm", _sd_affine),
        ("RMSNorm", _sd_affine),
        ("AdaLNZero", _sd_adaptive),
        ("AdaLNContinuous", _sd_adaptive),
        ("TransformerEncoderLayer", _sd_encoder_layer),
        ("Dense", _sd_linear),
        ("GatedRMSNorm", _sd_affine),
        ("AdaLNZeroJoint", _sd_named),
        ("AdaLNScale", _sd_named),
        ("GlobalResponseNorm", _sd_grn),
        ("LpNorm", lambda p: {}),
        ("AdaLNSingle", _sd_named),
    )
}


# --------------------------------------------------------------------------- converters


def _conv_layer_norm(m: Any, fn: str) -> tuple[Spec, Params]:
    shape = tuple(int(s) for s in m.normalized_shape)
    p = _affine(m, fn)
    opts = dict(
        eps=float(m.eps),
        axis=_axis(shape),
        use_scale="scale" in p,
        use_bias="bias" in p,
        param_dtype=_param_dtype(p),
    )
    return Spec("LayerNorm", {}, (_features(shape),), opts), p


def _conv_torch_rms(m: Any, fn: str) -> tuple[Spec, Params]:
    shape = tuple(int(s) for s in m.normalized_shape)
    p = _affine(m, fn)
    # eps=None stays None: jln's "torch" convention applies torch's finfo rule per input dtype
    opts = dict(
        eps=None if m.eps is None else float(m.eps),
        convention="torch",
        axis=_axis(shape),
        use_scale="scale" in p,
        param_dtype=_param_dtype(p),
    )
    return Spec("RMSNorm", {}, (_features(shape),), opts), p


def _hf_rms(convention: str, eps_attr: str) -> Callable[[Any, str], tuple[Spec, Params]]:
    def convert(m: Any, fn: str) -> tuple[Spec, Params]:
        d = _one_axis_weight(m, fn)
        p = {"scale": to_jax(m.weight, "weight", fn)}
        opts = dict(
            eps=float(getattr(m, eps_attr)),
            convention=convention,
            axis=-1,
            use_scale=True,
            param_dtype=_param_dtype(p),
        )
        return Spec("RMSNorm", {}, (d,), opts), p

    return convert


def _conv_diffusers_rms(m: Any, fn: str) -> tuple[Spec, Params]:
    dim = tuple(int(s) for s in m.dim)
    if len(dim) != 1:
        raise _unsupported(
            m,
            fn,
            f"dim={dim} has several axes but diffusers reduces over the last axis only",
            "Use a 1-D dim.",
        )
    p = _affine(m, fn)
    opts = dict(
        eps=float(m.eps),
        convention="diffusers",
        axis=-1,
        use_scale="scale" in p,
        use_bias="bias" in p,
        param_dtype=_param_dtype(p),
    )
    return Spec("RMSNorm", {}, (dim[0],), opts), p


def _plain_norm_eps(m: Any, norm: Any, fn: str) -> float:
    """eps of a diffusers LayerNorm / FP32LayerNorm without affine (an adaLN-Zero's norm)."""
    ok = (
        type(norm).__name__ in ("LayerNorm", "FP32LayerNorm")
        and len(norm.normalized_shape) == 1
        and getattr(norm, "weight", None) is None
        and getattr(norm, "bias", None) is None
    )
    if not ok:
        raise _unsupported(
            m,
            fn,
            f"its norm is {type(norm).__name__}, expected a LayerNorm without affine",
            "Only norm_type='layer_norm' / 'fp32_layer_norm' are supported.",
        )
    return float(norm.eps)


def _ada_zero(k: int) -> Callable[[Any, str], tuple[Spec, Params]]:
    def convert(m: Any, fn: str) -> tuple[Spec, Params]:
        if getattr(m, "emb", None) is not None:
            raise _unsupported(
                m,
                fn,
                "it embeds timesteps and labels itself (num_embeddings was set)",
                "Convert the embedding separately, build AdaLayerNormZero(embedding_dim) and call "
                "the jln module with the embedded condition: (x, emb).",
            )
        eps = _plain_norm_eps(m, m.norm, fn)
        d = int(m.norm.normalized_shape[0])
        lin = m.linear
        if lin.out_features != k * d:
            raise _unsupported(m, fn, f"linear.out_features={lin.out_features} != {k}*{d}", "")
        p = {"linear": _linear(lin, fn, "linear.")}
        opts = dict(
            num_chunks=k, eps=eps, use_bias=lin.bias is not None, param_dtype=_param_dtype(p)
        )
        return Spec("AdaLNZero", {"features": d}, (int(lin.in_features), d), opts), p

    return convert


def _conv_ada_continuous(m: Any, fn: str) -> tuple[Spec, Params]:
    norm, lin = m.norm, m.linear
    name = type(norm).__name__
    if name == "LayerNorm" and len(norm.normalized_shape) == 1:
        norm_type, d, eps = "layer_norm", int(norm.normalized_shape[0]), float(norm.eps)
    elif name == "RMSNorm" and hasattr(norm, "dim") and len(norm.dim) == 1:
        norm_type, d, eps = "rms_norm", int(norm.dim[0]), float(norm.eps)
    else:
        raise _unsupported(
            m, fn, f"its norm is {name}", "Only norm_type 'layer_norm' and 'rms_norm'."
        )
    affine = getattr(norm, "weight", None) is not None
    use_bias = lin.bias is not None
    if (
        norm_type == "layer_norm"
        and affine
        and (getattr(norm, "bias", None) is not None) != use_bias
    ):
        raise _unsupported(
            m,
            fn,
            "its LayerNorm bias and its linear bias disagree (diffusers sets both from `bias`)",
            "Give both a bias or neither.",
        )
    p: Params = {"linear": _linear(lin, fn, "linear.")}
    if affine:
        p["norm"] = _affine(norm, fn, "norm.")
    opts = dict(
        eps=eps,
        elementwise_affine=affine,
        use_bias=use_bias,
        norm_type=norm_type,
        param_dtype=_param_dtype(p),
    )
    return Spec("AdaLNContinuous", {"features": d}, (int(lin.in_features), d), opts), p


# --------------------------------------------------------------------------- more adaptive norms


def _rms_dim(m: Any, norm: Any, fn: str) -> int | None:
    """The single normalized size of a diffusers RMSNorm (``None`` for Mochi's ``RMSNorm(0)``,
    whose ``dim`` is unused without a weight)."""
    dim = tuple(int(s) for s in norm.dim)
    if len(dim) != 1:
        raise _unsupported(m, fn, f"its RMSNorm has dim={dim}; diffusers reduces over the last axis only",
                           "Use a 1-D dim.")
    return dim[0] or None


def _norm_kind(m: Any, norm: Any, fn: str) -> tuple[str, float, bool]:
    """``(norm_type, eps, elementwise_affine)`` of a diffusers adaptive norm's inner norm: a
    ``LayerNorm`` over one axis or diffusers' ``RMSNorm`` (without bias)."""
    name = type(norm).__name__
    affine = getattr(norm, "weight", None) is not None
    if name == "LayerNorm" and len(norm.normalized_shape) == 1:
        return "layer_norm", float(norm.eps), affine
    if name == "RMSNorm" and hasattr(norm, "dim") and getattr(norm, "bias", None) is None:
        _rms_dim(m, norm, fn)
        return "rms_norm", float(norm.eps), affine
    raise _unsupported(m, fn, f"its norm is {name}", "Only a 1-axis LayerNorm or diffusers' RMSNorm "
                       "without bias is supported.")


def _check_ln_bias(m: Any, norm: Any, norm_type: str, affine: bool, want: bool, fn: str) -> None:
    if norm_type == "layer_norm" and affine and (getattr(norm, "bias", None) is not None) != want:
        raise _unsupported(m, fn, "its LayerNorm bias and its linear bias disagree (diffusers sets both "
                           "from `bias`)", "Give both a bias or neither.")


def _conv_omni_final(m: Any, fn: str) -> tuple[Spec, Params]:
    """Qwen2.5-Omni's ``AdaLayerNormZero_Final``: SD3's continuous norm without affine, the
    projection in the condition's dtype."""
    eps = _plain_norm_eps(m, m.norm, fn)
    d, lin = int(m.norm.normalized_shape[0]), m.linear
    if lin.out_features != 2 * d:
        raise _unsupported(m, fn, f"linear.out_features={lin.out_features} != 2*{d}", "")
    p: Params = {"linear": _linear(lin, fn, "linear.")}
    opts = dict(eps=eps, elementwise_affine=False, use_bias=lin.bias is not None, norm_type="layer_norm",
                order="continuous", project_in="cond", param_dtype=_param_dtype(p))
    return Spec("AdaLNContinuous", {"features": d}, (int(lin.in_features), d), opts), p


def _conv_ada_layer_norm(m: Any, fn: str) -> tuple[Spec, Params]:
    """diffusers ``AdaLayerNorm``: ``norm(x) * (1 + scale) + shift``; chunk_dim=0 splits a 1-D
    condition as (scale, shift), chunk_dim=1 a ``[B, 2D]`` one as (shift, scale)."""
    if m.emb is not None:
        raise _unsupported(
            m, fn, "it embeds timesteps itself (num_embeddings was set)",
            "Build AdaLayerNorm without num_embeddings (or look the timestep up in the embedding table "
            "yourself: emb = table[timestep]) and call the jln module with (x, emb).",
        )
    norm, lin = m.norm, m.linear
    if type(norm).__name__ != "LayerNorm" or len(norm.normalized_shape) != 1:
        raise _unsupported(m, fn, f"its norm is {type(norm).__name__}", "Only a 1-axis LayerNorm.")
    d = int(norm.normalized_shape[0])
    if lin.out_features != 2 * d:
        raise _unsupported(m, fn, f"linear.out_features={lin.out_features} != 2*{d} (an odd output_dim)",
                           "Use an even output_dim.")
    affine = norm.weight is not None
    _check_ln_bias(m, norm, "layer_norm", affine, lin.bias is not None, fn)
    p: Params = {"linear": _linear(lin, fn, "linear.")}
    if affine:
        p["norm"] = _affine(norm, fn, "norm.")
    opts = dict(eps=float(norm.eps), elementwise_affine=affine, use_bias=lin.bias is not None,
                norm_type="layer_norm", order="dit_final" if m.chunk_dim == 1 else "continuous",
                project_in="cond", param_dtype=_param_dtype(p))
    return Spec("AdaLNContinuous", {"features": d}, (int(lin.in_features), d), opts), p


def _conv_rms_zero(norm_type: str) -> Callable[[Any, str], tuple[Spec, Params]]:
    """diffusers ``LuminaRMSNormZero`` (``rms_norm``, the RMSNorm's weight) and
    ``MochiRMSNormZero`` (``fp32_rms_norm``, no weight): AdaLNZero with 4 chunks."""

    def convert(m: Any, fn: str) -> tuple[Spec, Params]:
        norm, lin = m.norm, m.linear
        kind, eps, affine = _norm_kind(m, norm, fn)
        if kind != "rms_norm":
            raise _unsupported(m, fn, f"its norm is {type(norm).__name__}", "Expected diffusers' RMSNorm.")
        if norm_type == "fp32_rms_norm" and affine:
            raise _unsupported(m, fn, "its RMSNorm has a weight", "Mochi's RMSNorm(0, eps, False) has none.")
        if lin.out_features % 4:
            raise _unsupported(m, fn, f"linear.out_features={lin.out_features} is not 4 chunks", "")
        d = int(lin.out_features) // 4
        dim = _rms_dim(m, norm, fn)
        if affine and dim != d:
            raise _unsupported(m, fn, f"its RMSNorm has dim {dim} but linear gives 4*{d}", "")
        p: Params = {"linear": _linear(lin, fn, "linear.")}
        if affine:
            p["norm"] = _affine(norm, fn, "norm.")
        opts = dict(num_chunks=4, eps=eps, use_bias=lin.bias is not None, norm_type=norm_type,
                    elementwise_affine=affine, param_dtype=_param_dtype(p))
        return Spec("AdaLNZero", {"features": d}, (int(lin.in_features), d), opts), p

    return convert


def _conv_mochi_rms(m: Any, fn: str) -> tuple[Spec, Params]:
    """diffusers ``MochiRMSNorm``: ``(x * rsqrt(mean(f(x)^2) + eps) * w).to(dt)``, torch's
    ``rms_norm`` with its own eps (float64 x: statistics in float32 there, float64 here)."""
    dim = tuple(int(s) for s in m.dim)
    if len(dim) != 1:
        raise _unsupported(m, fn, f"dim={dim}: MochiRMSNorm reduces over the last axis only", "Use a 1-D dim.")
    p = _affine(m, fn)
    opts = dict(eps=float(m.eps), convention="torch", axis=-1, use_scale="scale" in p, param_dtype=_param_dtype(p))
    return Spec("RMSNorm", {}, (dim[0],), opts), p


def _conv_cogview3plus(m: Any, fn: str) -> tuple[Spec, Params]:
    """diffusers ``CogView3PlusAdaLayerNormZeroTextImage``: two LayerNorms without affine of one
    eps compute as one."""
    eps = _plain_norm_eps(m, m.norm_x, fn)
    if _plain_norm_eps(m, m.norm_c, fn) != eps or m.norm_c.normalized_shape != m.norm_x.normalized_shape:
        raise _unsupported(m, fn, "norm_x and norm_c differ", "Give both the same size and eps.")
    d, lin = int(m.norm_x.normalized_shape[0]), m.linear
    if lin.out_features != 12 * d:
        raise _unsupported(m, fn, f"linear.out_features={lin.out_features} != 12*{d}", "")
    p: Params = {"linear": _linear(lin, fn, "linear.")}
    opts = dict(num_chunks=12, eps=eps, elementwise_affine=False, use_bias=lin.bias is not None,
                param_dtype=_param_dtype(p))
    return Spec("AdaLNZeroJoint", {"features": d}, (int(lin.in_features), d), opts), p


def _conv_joint(m: Any, fn: str) -> tuple[Spec, Params]:
    norm, lin = m.norm, m.linear
    if type(norm).__name__ != "LayerNorm" or len(norm.normalized_shape) != 1:
        raise _unsupported(m, fn, f"its norm is {type(norm).__name__}", "Only a 1-axis LayerNorm.")
    d = int(norm.normalized_shape[0])
    affine = norm.weight is not None
    if affine and norm.bias is None:
        raise _unsupported(m, fn, "its LayerNorm has a weight but no bias", "Give it both (torch's default).")
    if lin.out_features != 6 * d:
        raise _unsupported(m, fn, f"linear.out_features={lin.out_features} != 6*{d}", "")
    p: Params = {"linear": _linear(lin, fn, "linear.")}
    if affine:
        p["norm"] = _affine(norm, fn, "norm.")
    opts = dict(eps=float(norm.eps), elementwise_affine=affine, use_bias=lin.bias is not None,
                param_dtype=_param_dtype(p))
    return Spec("AdaLNZeroJoint", {"features": d}, (int(lin.in_features), d), opts), p


def _conv_scale(m: Any, fn: str) -> tuple[Spec, Params]:
    """diffusers ``LuminaLayerNormContinuous`` / ``MochiLayerNormContinuous`` -> AdaLNScale."""
    lin1, lin2 = m.linear_1, getattr(m, "linear_2", None)
    d = int(lin1.out_features)
    use_bias = lin1.bias is not None
    if type(m.norm).__name__ == "MochiModulatedRMSNorm":
        norm_type, eps, affine, norm = "fp32_rms_norm", float(m.norm.eps), False, None
    else:
        norm = m.norm
        norm_type, eps, affine = _norm_kind(m, norm, fn)
        _check_ln_bias(m, norm, norm_type, affine, use_bias, fn)
        size = int(norm.normalized_shape[0]) if norm_type == "layer_norm" else _rms_dim(m, norm, fn)
        if affine and size != d:
            raise _unsupported(m, fn, f"its norm has {size} features but linear_1 gives {d}", "")
    if lin2 is not None and (lin2.bias is not None) != use_bias:
        raise _unsupported(m, fn, "linear_1 and linear_2 disagree on the bias", "Give both a bias or neither.")
    p: Params = {"linear_1": _linear(lin1, fn, "linear_1.")}
    if affine:
        p["norm"] = _affine(norm, fn, "norm.")
    if lin2 is not None:
        p["linear_2"] = _linear(lin2, fn, "linear_2.")
    opts = dict(eps=eps, elementwise_affine=affine, use_bias=use_bias, norm_type=norm_type,
                out_features=None if lin2 is None else int(lin2.out_features), param_dtype=_param_dtype(p))
    return Spec("AdaLNScale", {"features": d}, (int(lin1.in_features), d), opts), p


def _conv_grn(m: Any, fn: str) -> tuple[Spec, Params]:
    """diffusers ``GlobalResponseNorm`` (normalization.py and Stable Cascade's): ``gamma`` and
    ``beta`` of shape ``[1, 1, 1, C]``."""
    g, b = m.gamma, m.beta
    if g.ndim != 4 or tuple(g.shape[:3]) != (1, 1, 1) or tuple(b.shape) != tuple(g.shape):
        raise _unsupported(m, fn, f"gamma has shape {tuple(g.shape)} and beta {tuple(b.shape)}, expected "
                           f"(1, 1, 1, C) both", "")
    p = {"gamma": to_jax(g, "gamma", fn).reshape(-1), "beta": to_jax(b, "beta", fn).reshape(-1)}
    return Spec("GlobalResponseNorm", {}, (int(g.shape[-1]),), dict(param_dtype=_param_dtype(p))), p


def _conv_lp(m: Any, fn: str) -> tuple[Spec, Params]:
    p = m.p
    if not isinstance(p, (int, float)) or not p > 0:
        raise _unsupported(m, fn, f"p={p!r}", "jln takes a positive p or float('inf').")
    dim = m.dim if isinstance(m.dim, int) else tuple(int(a) for a in m.dim)
    return Spec("LpNorm", {}, (), dict(p=float(p), axis=dim, eps=float(m.eps))), {}


def _conv_single(m: Any, fn: str) -> tuple[Spec, Params]:
    """diffusers ``AdaLayerNormSingle`` (PixArt): its timestep embedding as built by diffusers
    (256 sinusoid channels, cos first, SiLU MLPs with biases) and its ``linear``."""
    e = m.emb
    tp = e.time_proj
    mlps = ["timestep_embedder"] + (["resolution_embedder", "aspect_ratio_embedder"]
                                    if e.use_additional_conditions else [])
    projs = [tp] + ([e.additional_condition_proj] if e.use_additional_conditions else [])
    standard = all(
        (t.num_channels, t.flip_sin_to_cos, float(t.downscale_freq_shift), float(t.scale)) == (256, True, 0.0, 1.0)
        for t in projs
    ) and all(
        type(getattr(e, n).act).__name__ == "SiLU" and getattr(e, n).cond_proj is None
        and getattr(e, n).post_act is None and getattr(e, n).linear_1.bias is not None
        for n in mlps
    )
    if not standard or m.linear.bias is None:
        raise _unsupported(m, fn, "its timestep embedding is not PixArt's (256 sinusoid channels, cos "
                           "first, SiLU MLPs with biases)", "Only the configuration diffusers builds.")
    d = int(m.linear.in_features)
    if m.linear.out_features % d:
        raise _unsupported(m, fn, f"linear.out_features={m.linear.out_features} is not a multiple of {d}", "")
    emb = {n: {k: _linear(getattr(getattr(e, n), k), fn, f"emb.{n}.{k}.") for k in ("linear_1", "linear_2")}
           for n in mlps}
    p: Params = {"emb": emb, "linear": _linear(m.linear, fn, "linear.")}
    opts = dict(use_additional_conditions=bool(e.use_additional_conditions),
                num_chunks=int(m.linear.out_features) // d, param_dtype=_param_dtype(p))
    return Spec("AdaLNSingle", {"features": d}, (d,), opts), p


def _activation_name(m: Any, fn: str) -> str:
    import torch

    act = m.activation
    if act is torch.nn.functional.relu or type(act) is torch.nn.ReLU:
        return "relu"
    if act is torch.nn.functional.gelu or (
        type(act) is torch.nn.GELU and act.approximate == "none"
    ):
        return "gelu"
    raise _unsupported(m, fn, f"activation {act!r}", "Supported: 'relu' and exact 'gelu'.")


def _conv_encoder_layer(m: Any, fn: str) -> tuple[Spec, Params]:
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
            raise _unsupported(m, fn, why, "Only torch's standard configuration is supported.")
    d = int(sa.embed_dim)
    w_q, w_k, w_v = sa.in_proj_weight.chunk(3, dim=0)
    bias = sa.in_proj_bias is not None
    b_q, b_k, b_v = sa.in_proj_bias.chunk(3, dim=0) if bias else (None,) * 3

    def proj(w: Any, b: Any, name: str) -> Params:
        p = {"kernel": to_jax(w, f"self_attn.in_proj_weight[{name}]", fn).T}
        if b is not None:
            p["bias"] = to_jax(b, f"self_attn.in_proj_bias[{name}]", fn)
        return p

    p = {
        "self_attn": {
            "query": proj(w_q, b_q, "q"),
            "key": proj(w_k, b_k, "k"),
            "value": proj(w_v, b_v, "v"),
            "out": _linear(sa.out_proj, fn, "self_attn.out_proj."),
        },
        "linear1": _linear(m.linear1, fn, "linear1."),
        "linear2": _linear(m.linear2, fn, "linear2."),
        "norm1": _affine(m.norm1, fn, "norm1."),
        "norm2": _affine(m.norm2, fn, "norm2."),
    }
    opts = dict(
        dim_feedforward=int(m.linear1.out_features),
        dropout=float(m.dropout.p),
        activation=_activation_name(m, fn),
        layer_norm_eps=float(m.norm1.eps),
        batch_first=bool(sa.batch_first),
        norm_first=bool(m.norm_first),
        bias=bias,
        param_dtype=_param_dtype(p),
    )
    sizes = (d, int(sa.num_heads))
    return Spec("TransformerEncoderLayer", {"d_model": d, "nhead": sizes[1]}, sizes, opts), p


def _conv_linear(m: Any, fn: str) -> tuple[Spec, Params]:
    p = _linear(m, fn)
    opts = dict(use_bias="bias" in p, param_dtype=_param_dtype(p))
    return (
        Spec(
            "Dense",
            {"features": int(m.out_features)},
            (int(m.in_features), int(m.out_features)),
            opts,
            namespace="flax",
            nnx_cls="Linear",
        ),
        p,
    )


def _gate_activation(m: Any, fn: str) -> str:
    """``"silu"``/``"sigmoid"`` from a transformers gated norm's ``activation`` (a name, as
    transformers stores it, or absent: SiLU)."""
    act = getattr(m, "activation", "silu")
    if act in ("silu", "swish", "sigmoid"):
        return "sigmoid" if act == "sigmoid" else "silu"
    raise _unsupported(m, fn, f"its gate activation is {act!r}", "jln's gated norms take 'silu' and 'sigmoid'.")


def _hf_gated(convention: str) -> Callable[[Any, str], tuple[Spec, Params]]:
    """transformers' gated RMSNorms -> ``GatedRMSNorm``: ``group_size`` (MambaRMSNormGated) or
    ``n_groups`` and ``norm_before_gate`` (FalconH1) read off the module."""

    def convert(m: Any, fn: str) -> tuple[Spec, Params]:
        d = _one_axis_weight(m, fn)
        p = {"scale": to_jax(m.weight, "weight", fn)}
        group_size = getattr(m, "group_size", None)
        n_groups = getattr(m, "n_groups", None)
        if n_groups is not None:
            if int(n_groups) <= 0 or d % int(n_groups):
                raise _unsupported(m, fn, f"n_groups={n_groups} does not divide the width {d}", "Use a divisor.")
            group_size = d // int(n_groups)
        if group_size is not None and (int(group_size) <= 0 or d % int(group_size)):
            raise _unsupported(m, fn, f"group_size={group_size} does not divide the width {d}",
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
            param_dtype=_param_dtype(p),
        )
        return Spec("GatedRMSNorm", {}, (d,), opts), p

    return convert


_LLAMA = ("LlamaRMSNorm", "Qwen2RMSNorm", "MistralRMSNorm")
_GEMMA = ("GemmaRMSNorm", "Gemma2RMSNorm", "Gemma3RMSNorm")

CONVERTERS: tuple[Converter, ...] = (
    Converter(
        "torch.nn.LayerNorm",
        "LayerNorm",
        _torch_nn("LayerNorm"),
        _conv_layer_norm,
        LAYOUTS["LayerNorm"],
    ),
    Converter(
        "torch.nn.RMSNorm",
        "RMSNorm(convention='torch')",
        _torch_nn("RMSNorm"),
        _conv_torch_rms,
        LAYOUTS["RMSNorm"],
    ),
    Converter(
        "torch.nn.TransformerEncoderLayer",
        "TransformerEncoderLayer",
        _torch_nn("TransformerEncoderLayer"),
        _conv_encoder_layer,
        LAYOUTS["TransformerEncoderLayer"],
    ),
    Converter(
        "torch.nn.Linear",
        "flax Dense (linen) / nnx.Linear",
        _torch_nn("Linear"),
        _conv_linear,
        LAYOUTS["Dense"],
    ),
    Converter(
        "transformers " + " / ".join(_LLAMA) + ", and any transformers class whose code is LlamaRMSNorm's",
        "RMSNorm(convention='llama')",
        _hf_norm(_LLAMA, "llama", ("weight", "variance_epsilon")),
        _hf_rms("llama", "variance_epsilon"),
        LAYOUTS["RMSNorm"],
    ),
    Converter(
        "transformers " + " / ".join(_GEMMA) + ", and any transformers class whose code is GemmaRMSNorm's",
        "RMSNorm(convention='gemma')",
        _hf_norm(_GEMMA, "gemma", ("weight", "eps")),
        _hf_rms("gemma", "eps"),
        LAYOUTS["RMSNorm"],
    ),
    Converter(
        "transformers Olmo2RMSNorm, and any transformers class whose code is Olmo2RMSNorm's",
        "RMSNorm(convention='torch', eps=variance_epsilon)",
        # weight * h in float32, then the cast to x's dtype: torch's rms_norm with its own eps
        _hf_norm(("Olmo2RMSNorm",), "olmo2", ("weight", "variance_epsilon")),
        _hf_rms("torch", "variance_epsilon"),
        LAYOUTS["RMSNorm"],
    ),
    Converter(
        "transformers T5LayerNorm, and any transformers class whose code is T5LayerNorm's",
        "RMSNorm(convention='t5')",
        _hf_norm(("T5LayerNorm",), "t5", ("weight", "variance_epsilon")),
        _hf_rms("t5", "variance_epsilon"),
        LAYOUTS["RMSNorm"],
    ),
    Converter(
        "diffusers RMSNorm",
        "RMSNorm(convention='diffusers')",
        _named(("RMSNorm",), ("weight", "bias", "eps", "dim"), package="diffusers"),
        _conv_diffusers_rms,
        LAYOUTS["RMSNorm"],
    ),
    Converter(
        "diffusers AdaLayerNormZero (num_embeddings=None)",
        "AdaLNZero(num_chunks=6)",
        _named(("AdaLayerNormZero",), ("linear", "norm", "emb")),
        _ada_zero(6),
        LAYOUTS["AdaLNZero"],
    ),
    Converter(
        "diffusers AdaLayerNormZeroSingle",
        "AdaLNZero(num_chunks=3)",
        _named(("AdaLayerNormZeroSingle",), ("linear", "norm")),
        _ada_zero(3),
        LAYOUTS["AdaLNZero"],
    ),
    Converter(
        "diffusers AdaLayerNormContinuous",
        "AdaLNContinuous",
        _named(("AdaLayerNormContinuous",), ("linear", "norm")),
        _conv_ada_continuous,
        LAYOUTS["AdaLNContinuous"],
    ),
    Converter(
        "transformers Mamba2RMSNormGated, and any transformers class whose code is its (Bamba, Zamba2, "
        "NemotronH, GraniteMoeHybrid...)",
        "GatedRMSNorm(convention='mamba')",
        _hf_norm(("Mamba2RMSNormGated",), "mamba2", ("weight", "variance_epsilon", "group_size")),
        _hf_gated("mamba"),
        LAYOUTS["GatedRMSNorm"],
    ),
    Converter(
        "transformers Qwen3NextRMSNormGated, and any transformers class whose code is its (Qwen3.5, "
        "OLMo-hybrid, Qwen4Exp...)",
        "GatedRMSNorm(convention='qwen3_next')",
        _hf_norm(("Qwen3NextRMSNormGated",), "qwen3_next", ("weight", "variance_epsilon")),
        _hf_gated("qwen3_next"),
        LAYOUTS["GatedRMSNorm"],
    ),
    Converter(
        "transformers KimiLinearRMSNormGated, and any transformers class whose code is its (BailingHybrid, "
        "Glm5Next, LaraMini...)",
        "GatedRMSNorm(convention='float32', activation=its own)",
        _hf_norm(("KimiLinearRMSNormGated",), "kimi_linear", ("weight", "variance_epsilon")),
        _hf_gated("float32"),
        LAYOUTS["GatedRMSNorm"],
    ),
    Converter(
        "transformers FalconH1RMSNormGated, and any transformers class whose code is its",
        "GatedRMSNorm(convention='float32', group_size=width // n_groups)",
        _hf_norm(("FalconH1RMSNormGated",), "falcon_h1", ("weight", "variance_epsilon", "n_groups", "norm_before_gate")),
        _hf_gated("float32"),
        LAYOUTS["GatedRMSNorm"],
    ),
    Converter(
        "transformers Qwen2_5_OmniAdaLayerNormZero",
        "AdaLNZero(num_chunks=6)",
        _named(("Qwen2_5_OmniAdaLayerNormZero",), ("linear", "norm"), package="transformers"),
        _ada_zero(6),
        LAYOUTS["AdaLNZero"],
    ),
    Converter(
        "transformers Qwen2_5_OmniAdaLayerNormZero_Final",
        "AdaLNContinuous(elementwise_affine=False, project_in='cond')",
        _named(("Qwen2_5_OmniAdaLayerNormZero_Final",), ("linear", "norm"), package="transformers"),
        _conv_omni_final,
        LAYOUTS["AdaLNContinuous"],
    ),
    Converter(
        "diffusers AdaLayerNorm (num_embeddings=None)",
        "AdaLNContinuous(project_in='cond', order='continuous' or 'dit_final')",
        _named(("AdaLayerNorm",), ("linear", "norm", "emb", "chunk_dim"), package="diffusers"),
        _conv_ada_layer_norm,
        LAYOUTS["AdaLNContinuous"],
    ),
    Converter(
        "diffusers SD35AdaLayerNormZeroX",
        "AdaLNZero(num_chunks=9)",
        _named(("SD35AdaLayerNormZeroX",), ("linear", "norm"), package="diffusers"),
        _ada_zero(9),
        LAYOUTS["AdaLNZero"],
    ),
    Converter(
        "diffusers LuminaRMSNormZero",
        "AdaLNZero(num_chunks=4, norm_type='rms_norm', elementwise_affine=True)",
        _named(("LuminaRMSNormZero",), ("linear", "norm"), package="diffusers"),
        _conv_rms_zero("rms_norm"),
        LAYOUTS["AdaLNZero"],
    ),
    Converter(
        "diffusers MochiRMSNormZero",
        "AdaLNZero(num_chunks=4, norm_type='fp32_rms_norm')",
        _named(("MochiRMSNormZero",), ("linear", "norm"), package="diffusers"),
        _conv_rms_zero("fp32_rms_norm"),
        LAYOUTS["AdaLNZero"],
    ),
    Converter(
        "diffusers MochiRMSNorm",
        "RMSNorm(convention='torch', eps=eps)",
        _named(("MochiRMSNorm",), ("weight", "eps", "dim"), package="diffusers"),
        _conv_mochi_rms,
        LAYOUTS["RMSNorm"],
    ),
    Converter(
        "diffusers CogVideoXLayerNormZero",
        "AdaLNZeroJoint",
        _named(("CogVideoXLayerNormZero",), ("linear", "norm"), package="diffusers"),
        _conv_joint,
        LAYOUTS["AdaLNZeroJoint"],
    ),
    Converter(
        "diffusers LuminaLayerNormContinuous / MochiLayerNormContinuous",
        "AdaLNScale",
        _named(("LuminaLayerNormContinuous", "MochiLayerNormContinuous"), ("linear_1", "norm"), package="diffusers"),
        _conv_scale,
        LAYOUTS["AdaLNScale"],
    ),
    Converter(
        "diffusers GlobalResponseNorm (normalization and Stable Cascade)",
        "GlobalResponseNorm",
        _named(("GlobalResponseNorm",), ("gamma", "beta"), package="diffusers"),
        _conv_grn,
        LAYOUTS["GlobalResponseNorm"],
    ),
    Converter(
        "diffusers LpNorm",
        "LpNorm",
        _named(("LpNorm",), ("p", "dim", "eps"), package="diffusers"),
        _conv_lp,
        LAYOUTS["LpNorm"],
    ),
    Converter(
        "diffusers AdaLayerNormSingle (PixArt), and any diffusers class whose code is its (LTX-2's)",
        "AdaLNSingle",
        _diffusers_same_code("diffusers.models.normalization", "AdaLayerNormSingle", ("emb", "linear")),
        _conv_single,
        LAYOUTS["AdaLNSingle"],
    ),
    Converter(
        "diffusers CogView3PlusAdaLayerNormZeroTextImage",
        "AdaLNZeroJoint(num_chunks=12)",
        _named(("CogView3PlusAdaLayerNormZeroTextImage",), ("linear", "norm_x", "norm_c"), package="diffusers"),
        _conv_cogview3plus,
        LAYOUTS["AdaLNZeroJoint"],
    ),
)
