"""The machinery of jln's torch -> jln converters, shared by every family's ``convert.py``.

Each :class:`Converter` recognises a torch module (``isinstance`` for ``torch.nn`` classes whose
``forward`` is not overridden; class name plus attributes, or the code of its ``forward``
(:func:`computes_as`), for transformers and diffusers, which are never imported), and turns it
once into a :class:`Spec` (which jln class, which options) and a parameter tree. The linen and
nnx results are built from that same pair. Each converter points at a :class:`Layout`, keyed
by the jln class, which maps a parameter tree back to the torch ``state_dict`` keys; every
torch class converted to a given jln class has that layout, so the jln module alone decides
the torch layout. The families' records list their converters and layouts; :mod:`jln._index`
gathers them, in recognition order.

No norm formula lives here, nor in the converters: the conventions are options of the jln
modules. Tensors cross over bit for bit (:func:`to_jax`, :func:`to_torch`); torch is imported
inside the functions only, so importing this module does not import it.
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
import numpy as np

#: where transformers' and diffusers' model files live
T = "transformers.models"
D = "diffusers.models"

def import_torch(fn: str) -> Any:
    """Import torch, or raise an ``ImportError`` that says how to install it."""
    try:
        import torch
    except ImportError as e:  # pragma: no cover - exercised only without torch
        raise ImportError(
            f"{fn} needs PyTorch, which is an optional dependency of jln. Install it with "
            f"`pip install 'jln[torch]'` (or `pip install torch`)."
        ) from e
    return torch


def to_jax(t: Any, name: str, fn: str) -> jax.Array:
    """A torch tensor (any device) as a JAX array of the same dtype, values bit-exact."""
    torch = import_torch(fn)
    t = t.detach()
    if t.device.type == "meta":
        raise ValueError(
            f"{fn}: parameter `{name}` is on the meta device (no values); load the checkpoint "
            f"into the torch module first (e.g. module.to_empty(device='cpu') then load_state_dict)."
        )
    if not t.is_floating_point():
        raise TypeError(f"{fn}: parameter `{name}` has non-floating dtype {t.dtype}.")
    if t.dtype == torch.float64 and jax.dtypes.canonicalize_dtype(jnp.float64) != jnp.float64:
        raise ValueError(
            f"{fn}: parameter `{name}` is float64 but JAX's 64-bit mode is off, so it would be "
            f"silently rounded to float32. Enable it with jax.config.update('jax_enable_x64', "
            f"True), or cast the torch module with module.float() first."
        )
    t = t.cpu().contiguous()
    if t.dtype == torch.bfloat16:
        # numpy has no bfloat16: go through float32, which holds every bfloat16 value exactly
        return jnp.asarray(t.float().numpy(), dtype=jnp.bfloat16)
    return jnp.asarray(t.numpy())


def to_torch(a: Any, name: str, fn: str) -> Any:
    """A JAX (or NumPy) array as a CPU torch tensor of the same dtype, values bit-exact."""
    torch = import_torch(fn)
    arr = np.asarray(jax.device_get(a))
    if arr.dtype == jnp.bfloat16:
        return torch.from_numpy(arr.astype(np.float32)).to(torch.bfloat16)
    if np.issubdtype(arr.dtype, np.integer) and arr.ndim == 0:  # a counter (num_batches_tracked)
        return torch.tensor(int(arr), dtype=torch.int64)
    if not np.issubdtype(arr.dtype, np.floating):
        raise TypeError(f"{fn}: parameter `{name}` has non-floating dtype {arr.dtype}.")
    return torch.from_numpy(np.array(arr, copy=True))


Params = dict[str, Any]
#: Classes jln recognises but cannot reproduce, by computation: ``(references, why)``, the
#: references ``(module, class)`` pairs for :func:`computes_as`, ``why`` what differs from the
#: family. :func:`jln.interop.from_torch` puts the reason into its refusal.
NearMisses = tuple[tuple[tuple[tuple[str, str], ...], str], ...]



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
    #: ``to_state_dict(params)``, or ``to_state_dict(params, cfg)`` (the module's options) with
    #: ``takes_cfg``: where an option decides the torch shapes (GRN's ``broadcast_rank``)
    to_state_dict: Callable[..., dict[str, Any]]
    takes_cfg: bool = False

    def state_dict(self, params: Params, module: Any) -> dict[str, Any]:
        """``params`` (a jln module's tree) as torch's ``state_dict`` arrays for ``module``."""
        if self.takes_cfg:
            return self.to_state_dict(params, getattr(module, "cfg", None))
        return self.to_state_dict(params)



@dataclass(frozen=True)
class Converter:
    """One torch class (or family) -> one jln class."""

    source: str
    target: str
    recognise: Callable[[Any], bool]
    convert: Callable[[Any, str], tuple[Spec, Params]]
    layout: Layout
    notes: str = field(default="")


def torch_nn(name: str) -> Callable[[Any], bool]:
    """``isinstance(m, torch.nn.<name>)`` with the class's own ``forward`` (not a subclass that
    changes the computation). torch is already imported whenever a torch module exists."""

    def recognise(m: Any) -> bool:
        torch = sys.modules.get("torch")
        cls = None if torch is None else getattr(torch.nn, name, None)
        return cls is not None and isinstance(m, cls) and type(m).forward is cls.forward

    return recognise


def named(
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


def code_of(cls: type) -> tuple[str, ...] | None:
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


def same_code_as(module: str, name: str, attrs: tuple[str, ...]) -> Callable[[Any], bool]:
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
        mine = code_of(t)
        return mine is not None and mine == code_of(ref)

    return recognise


def diffusers_same_code(module: str, name: str, attrs: tuple[str, ...]) -> Callable[[Any], bool]:
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
        mine = code_of(t)
        return mine is not None and mine == code_of(ref)

    return recognise


def hf_norm(names: tuple[str, ...], model: str, attrs: tuple[str, ...]) -> Callable[[Any], bool]:
    """A transformers norm by one of ``names``, or by the code of ``names[0]`` in
    ``transformers.models.<model>`` (:func:`same_code_as`)."""
    by_name = named(names, attrs)
    same = same_code_as(f"transformers.models.{model}.modeling_{model}", names[0], attrs)
    return lambda m: by_name(m) or same(m)


def what(m: Any) -> str:
    return f"{type(m).__module__}.{type(m).__qualname__}"


def param_dtype(params: Params) -> Any:
    """The checkpoint's parameter dtype (the first leaf's), float32 when there is none."""
    leaves = jax.tree_util.tree_leaves(params)
    return leaves[0].dtype if leaves else jnp.dtype(jnp.float32)


def unsupported(m: Any, fn: str, why: str, fix: str) -> ValueError:
    return ValueError(f"{fn}: cannot convert this {what(m)}: {why}. {fix}")


def affine(m: Any, fn: str, prefix: str = "") -> Params:
    """``weight``/``bias`` of a norm -> ``scale``/``bias`` (absent ones left out)."""
    p: Params = {}
    if getattr(m, "weight", None) is not None:
        p["scale"] = to_jax(m.weight, prefix + "weight", fn)
    if getattr(m, "bias", None) is not None:
        p["bias"] = to_jax(m.bias, prefix + "bias", fn)
    return p


def linear(m: Any, fn: str, prefix: str = "") -> Params:
    """torch ``Linear.weight [out, in]`` -> ``kernel [in, out]``; bias as is."""
    p: Params = {"kernel": to_jax(m.weight, prefix + "weight", fn).T}
    if m.bias is not None:
        p["bias"] = to_jax(m.bias, prefix + "bias", fn)
    return p


def axis_of(shape: tuple[int, ...]) -> int | tuple[int, ...]:
    k = len(shape)
    return -1 if k == 1 else tuple(range(-k, 0))


def features_of(shape: tuple[int, ...]) -> int | tuple[int, ...]:
    return shape[0] if len(shape) == 1 else shape


def one_axis_weight(m: Any, fn: str) -> int:
    """Size of the last axis for norms that reduce over the last axis only (transformers)."""
    w = m.weight
    if w is None or w.ndim != 1:
        raise unsupported(
            m,
            fn,
            f"expected a 1-D `weight`, found shape {None if w is None else tuple(w.shape)}",
            "These classes normalize over the last axis only; use a 1-D weight.",
        )
    return int(w.shape[0])


def sd_affine(p: Params, prefix: str = "") -> dict[str, Any]:
    out = {}
    if "scale" in p:
        out[prefix + "weight"] = p["scale"]
    if "bias" in p:
        out[prefix + "bias"] = p["bias"]
    return out


def sd_linear(p: Params, prefix: str = "") -> dict[str, Any]:
    out = {prefix + "weight": jnp.asarray(p["kernel"]).T}
    if "bias" in p:
        out[prefix + "bias"] = p["bias"]
    return out


def sd_named(p: Params) -> dict[str, Any]:
    """Each sub-tree under its torch name: a Dense (``kernel``) as ``<name>.weight`` (transposed)
    and ``.bias``, a norm's ``scale``/``bias`` as ``<name>.weight``/``.bias``."""
    out: dict[str, Any] = {}
    for name, sub in p.items():
        if "kernel" in sub:
            out.update(sd_linear(sub, name + "."))
        elif any(isinstance(v, dict) for v in sub.values()):  # a group of layers (PixArt's emb)
            out.update({f"{name}.{k}": v for k, v in sd_named(sub).items()})
        else:
            out.update(sd_affine(sub, name + "."))
    return out


def torch_class(name: str) -> Any:
    import torch

    return getattr(torch.nn, name)


def computes_as(
    refs: tuple[tuple[str, str], ...], attrs: tuple[str, ...] = (), base: str | None = None
) -> Callable[[Any], bool]:
    """A transformers or diffusers class (every attribute in ``attrs`` present) whose
    ``forward`` and ``_norm`` are, as code, those of one of ``refs`` (``(module, class)``) in
    the installed packages. ``base``: the ``torch.nn`` class the class must extend directly (its
    code calls ``super().forward``). Reference modules are imported only for a candidate."""

    def recognise(m: Any) -> bool:
        t = type(m)
        package = t.__module__.split(".")[0]
        if package not in ("transformers", "diffusers") or not all(hasattr(m, a) for a in attrs):
            return False
        if base is not None and (len(t.__mro__) < 2 or t.__mro__[1] is not torch_class(base)):
            return False
        mine = code_of(t)
        if mine is None:
            return False
        # the same package's references first: a transformers class never imports diffusers
        for mod, name in sorted(refs, key=lambda r: r[0].split(".")[0] != package):
            try:
                ref = getattr(importlib.import_module(mod), name)
            except (ImportError, AttributeError):
                continue
            if ref is t or code_of(ref) == mine:
                return True
        return False

    return recognise


def own_weight(m: Any, name: str = "weight") -> Any:
    """The module's own parameter ``name`` (a buffer of that name, e.g. FalconMamba's unused
    ones, is not a parameter), or None."""
    return getattr(m, "_parameters", {}).get(name)


def one_axis(m: Any, shape: tuple[int, ...], fn: str, what: str) -> None:
    if len(shape) != 1:
        raise unsupported(
            m, fn, f"normalized_shape={shape} has {len(shape)} axes, but {what} normalizes one axis",
            "Use a 1-D normalized_shape.",
        )


def of_package(package: str, recognise: Any) -> Any:
    """``recognise`` for classes of ``package`` only: a transformers GroupNorm subclass is never
    compared (nor diffusers imported) against a diffusers reference, and the other way round."""
    return lambda m: type(m).__module__.split(".")[0] == package and recognise(m)


def torch_names(prefix: str, p: Params) -> dict[str, Any]:
    """The ``torch_names`` option for a norm's tensors held under ``prefix`` (``{}``: none)."""
    pairs = tuple((t, prefix + t) for t, j in (("weight", "scale"), ("bias", "bias")) if j in p)
    return {"torch_names": pairs} if pairs else {}


def inner(m: Any, attr: str, torch_cls: str, fn: str) -> Any:
    """The wrapped ``torch.nn.<torch_cls>`` at ``m.<attr>`` (its own forward), else refused."""
    inner = getattr(m, attr, None)
    if inner is None or not torch_nn(torch_cls)(inner):
        raise unsupported(
            m, fn, f"its `{attr}` is a {type(inner).__name__}, not a torch.nn.{torch_cls}",
            f"jln converts this class when `{attr}` is torch's own {torch_cls}.",
        )
    return inner
