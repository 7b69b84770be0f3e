"""Convert PyTorch norm layers and blocks (and their checkpoints) to jln, and back.

``from_torch`` turns a torch module (``torch.nn``, transformers or diffusers) into the jln
Flax module that computes the same numbers, with its weights; ``to_torch_state_dict`` turns
the jln parameters back into a ``state_dict`` that the original torch class loads with
``strict=True``. torch is optional: importing this module does not import it, only calling
these functions does (transformers and diffusers are never imported: their classes are
recognised by name and attributes).

Example:
  >>> import torch, jax.numpy as jnp, numpy as np
  >>> from jln.interop import from_torch, to_torch_state_dict
  >>> block = torch.nn.LayerNorm(8).eval()
  >>> ln, variables = from_torch(block)
  >>> x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
  >>> y = ln.apply(variables, jnp.asarray(x))
  >>> bool(np.allclose(y, block(torch.from_numpy(x)).detach().numpy(), atol=1e-6))
  True
  >>> block.load_state_dict(to_torch_state_dict(variables, ln), strict=True)
  <All keys matched successfully>
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flax import traverse_util

_API = ("linen", "nnx")


def supported_modules() -> tuple[str, ...]:
    """The torch classes :func:`from_torch` converts, each with the jln class it becomes.

    Returns:
      tuple of strings ``"<torch class> -> <jln class>"``, in recognition order.

    Example:
      >>> from jln.interop import supported_modules
      >>> supported_modules()[0]
      'torch.nn.LayerNorm -> LayerNorm'
    """
    from jln import _index

    return tuple(f"{c.source} -> {c.target}" for c in _index.CONVERTERS)


def _build(spec: Any, api: str) -> Any:
    if spec.namespace == "flax":
        import flax.linen as linen_ns
        from flax import nnx as nnx_ns
    else:
        from jln import linen as linen_ns  # type: ignore[no-redef]
        from jln import nnx as nnx_ns  # type: ignore[no-redef]
    if api == "linen":
        return getattr(linen_ns, spec.cls)(**spec.linen_sizes, **spec.options)
    from flax import nnx

    cls = getattr(nnx_ns, spec.nnx_cls or spec.cls)
    kind = getattr(cls, "_kind", None)
    takes_none = kind is not None and all(
        s.take is None or _takes_none(s) for s, v in zip(kind.shapes, spec.nnx_sizes, strict=False) if v is None)
    if None in spec.nnx_sizes and not takes_none:
        raise ValueError(
            f"jln.interop.from_torch: this torch module has no parameters and does not record the width "
            f"it normalizes, which jln.nnx.{spec.cls} takes first; use api='linen' (it infers the width "
            f"from x), or build jln.nnx.{spec.cls}(num_features, **{spec.options!r}) yourself."
        )
    return cls(*spec.nnx_sizes, **spec.options, rngs=nnx.Rngs(0))


def _takes_none(shape: Any) -> bool:
    """Whether an NNX size argument may be ``None`` (a module without parameters)."""
    try:
        shape.take(None, "")
    except (TypeError, ValueError):
        return False
    return True


def _flat(tree: Mapping[str, Any]) -> dict[str, Any]:
    return {"/".join(map(str, k)): v for k, v in traverse_util.flatten_dict(dict(tree)).items()}


def _load_nnx(module: Any, params: dict[str, Any], fn: str) -> Any:
    """Assign ``params`` to the nnx module's ``nnx.Param`` variables (same tree as linen)."""
    from flax import nnx

    state = nnx.state(module, nnx.Param)
    have = {k: (tuple(v.shape), v.dtype) for k, v in _flat(nnx.to_pure_dict(state)).items()}
    want = {k: (tuple(v.shape), v.dtype) for k, v in _flat(params).items()}
    if {k: s for k, (s, _) in have.items()} != {k: s for k, (s, _) in want.items()}:
        raise RuntimeError(
            f"{fn}: internal mismatch between jln.nnx.{type(module).__name__}'s parameters "
            f"{sorted(have.items())} and the converted checkpoint {sorted(want.items())}. "
            f"Please report this as a jln bug."
        )
    nnx.replace_by_pure_dict(state, params)
    nnx.update(module, state)
    if hasattr(module, "eval"):
        module.eval()  # inference, like a torch module after .eval(); call .train() for dropout
    return module


def from_torch(module: Any, *, api: str = "linen") -> Any:
    """Convert a torch norm layer or block into the jln Flax module with the same numbers.

    The result is called like the torch module's ``forward``: ``(x)`` for norms and
    ``Linear``; ``(x, gate)`` for transformers' gated RMSNorms (``GatedRMSNorm``); ``(x, emb)`` for diffusers ``AdaLayerNormZero`` / ``AdaLayerNormZeroSingle``
    (``emb`` already embedded: torch's ``forward(x, emb=emb)``) and ``(x, cond)`` for
    ``AdaLayerNormContinuous``; ``(src, src_mask=None, src_key_padding_mask=None, is_causal=False)`` for
    ``TransformerEncoderLayer`` (eval mode: linen ``deterministic=True`` by default, the nnx
    module is returned in ``.eval()`` mode). It returns torch's tuple structure and dtypes,
    with the same numbers within the core's tolerances (bfloat16: bit-exact on almost every
    element). Parameters keep the checkpoint's dtypes (``param_dtype`` is set from them): in
    the LLaMA, T5 and diffusers conventions they decide the output dtype, as in torch.

    Mapping: ``Linear.weight [out, in]`` -> ``kernel [in, out]``; norm ``weight`` ->
    ``scale`` (Gemma's stored as is: the gemma convention multiplies by ``1 + scale``),
    ``bias`` -> ``bias``; ``in_proj_weight`` -> ``query``/``key``/``value`` kernels. See
    :func:`supported_modules` for the recognised classes.

    Args:
      module: a torch module, e.g. ``torch.nn.LayerNorm``, ``torch.nn.RMSNorm``,
        ``torch.nn.TransformerEncoderLayer``, ``torch.nn.Linear``, transformers'
        ``LlamaRMSNorm``/``GemmaRMSNorm``/``T5LayerNorm``..., diffusers' ``RMSNorm``,
        ``AdaLayerNormZero``, ``AdaLayerNormContinuous``.
      api: ``"linen"`` or ``"nnx"``.

    Returns:
      ``api="linen"``: ``(linen_module, variables)`` with ``variables = {"params": ...}``;
      call ``linen_module.apply(variables, x, ...)``. ``api="nnx"``: the nnx module with the
      weights loaded; call ``module(x, ...)``. ``torch.nn.Linear`` becomes ``flax.linen.Dense``
      / ``flax.nnx.Linear``.

    Raises:
      TypeError: ``module`` is not a supported class (the message lists the supported ones).
      ValueError: a supported class in a configuration jln cannot reproduce (e.g. a custom
        activation, ``AdaLayerNormZero`` with its own label embedding), an unknown ``api``, or
        float64 weights while JAX's 64-bit mode is off.
      ImportError: torch is not installed.

    Example:
      >>> import torch
      >>> from jln.interop import from_torch
      >>> norm, variables = from_torch(torch.nn.RMSNorm(16))
      >>> norm.convention, variables["params"]["scale"].shape
      ('torch', (16,))
    """
    fn = "jln.interop.from_torch"
    if api not in _API:
        raise ValueError(f"{fn}: `api` must be one of {_API}; received {api!r}.")
    from jln import _convert, _index

    _convert.import_torch(fn)
    conv = _index.find_converter(module)
    if conv is None:
        listed = "\n  ".join(supported_modules())
        why = _explain(module)
        raise TypeError(
            f"{fn}: no converter for {type(module).__module__}.{type(module).__qualname__}. "
            + (f"{why}\n" if why else "")
            + f"Supported modules:\n  {listed}\nConvert the supported parts (e.g. each norm) "
            f"one by one, or write the block with jln.linen / jln.nnx modules."
        )
    spec, params = conv.convert(module, fn)
    jmod = _build(spec, api)
    variables = params if spec.collections else {"params": params}
    if api == "linen":
        return jmod, variables
    if spec.collections:  # the running statistics: nnx.BatchStat, as the parameters
        from flax import nnx

        stats = nnx.state(jmod, nnx.BatchStat)
        nnx.replace_by_pure_dict(stats, variables.get("batch_stats", {}))
        nnx.update(jmod, stats)
    return _load_nnx(jmod, variables["params"], fn)


def _explain(m: Any) -> str | None:
    """What differs between ``m`` and the nearest jln family, for a class no converter takes:
    a known near miss by its code, else a hint by its name; None for anything else."""
    from jln import _convert, _index

    for refs, why in _index.NEAR_MISSES:
        if _convert.computes_as(refs)(m):
            return f"jln recognises its computation but cannot reproduce it: {why}."
    name = type(m).__name__
    if any(k in name for k in ("RMSNorm", "LayerNorm", "L2Norm")):
        return (
            "Its forward matches none of the computations jln recognises (the classes listed below and "
            "their copies). The nearest families are jln.linen.LayerNorm (axis, zero_centered, use_scale, "
            "use_bias, param_axes, convention: torch, deberta, eager) and jln.linen.RMSNorm (convention: torch, llama, "
            "gemma, t5, diffusers, seed, eager, round_rstd, input_scaled; see jln.layer_norm's and jln.rms_norm's tables of "
            "where each rounds): if one computes the same dtype flow, build it and "
            "load the weights with its layout."
        )
    return None


def _layout_of(module: Any, fn: str) -> Any:
    import flax.linen
    from flax import nnx

    from jln import _index
    from jln import linen as jlinen
    from jln import nnx as jnnx

    if isinstance(module, (flax.linen.Dense, nnx.Linear)):
        return _index.LAYOUTS["Dense"]
    for name, layout in _index.LAYOUTS.items():
        for ns in (jlinen, jnnx):
            cls = getattr(ns, name, None)
            if isinstance(cls, type) and isinstance(module, cls):
                return layout
    raise TypeError(
        f"{fn}: no torch layout for {type(module).__module__}.{type(module).__qualname__}; "
        f"expected a jln.linen / jln.nnx module among {sorted(_index.LAYOUTS)} (or flax "
        f"Dense / nnx.Linear), as returned by jln.interop.from_torch."
    )


def _spec_shapes(specs: Mapping[str, Any], prefix: str = "") -> dict[str, tuple[int, ...]]:
    from jln import _modules

    out: dict[str, tuple[int, ...]] = {}
    for name, spec in specs.items():
        if isinstance(spec, _modules.ParamSpec):
            out[prefix + name] = tuple(spec.shape)
        else:
            out.update(_spec_shapes(spec, f"{prefix}{name}/"))
    return out


def _expected_shapes(module: Any, layout: Any, flat: Mapping[str, Any]) -> dict[str, tuple[int, ...]]:
    """The parameter tree (flat path -> shape) the linen ``module`` declares, from the same
    specs its ``__call__`` creates (its kind's ``specs``). Sizes a linen module infers from its
    inputs are read back off the given tree (each size's ``Shape.stored``)."""
    from jln import _modules as M

    if layout.jln_class == "Dense":
        a = flat.get("kernel")
        n_in = int(a.shape[0]) if a is not None and len(a.shape) > 0 else 1
        return _spec_shapes(M.dense_specs(n_in, int(module.features), use_bias=bool(module.use_bias)))
    kind, cfg = type(module)._kind, module.cfg  # the options, the same way on every jln module
    return _spec_shapes(kind.specs(cfg, *(s.stored(cfg, flat) for s in kind.shapes)))


def _check_tree(module: Any, layout: Any, params: Mapping[str, Any], fn: str) -> None:
    """``ValueError`` naming every missing, unexpected and wrongly shaped parameter."""
    flat = _flat(params)
    want = _expected_shapes(module, layout, flat)
    have = {k: tuple(getattr(v, "shape", ())) for k, v in flat.items()}
    problems = [f"missing {k!r} (shape {want[k]})" for k in want if k not in have]
    problems += [f"unexpected {k!r} (shape {have[k]})" for k in have if k not in want]
    problems += [
        f"{k!r} has shape {have[k]}, expected {want[k]}"
        for k in want if k in have and have[k] != want[k]
    ]
    if problems:
        raise ValueError(
            f"{fn}: the parameters do not match {type(module).__name__}'s parameters: "
            + "; ".join(problems)
            + f". Pass the variables this module's init (or jln.interop.from_torch) returned; "
            f"received the tree {sorted(have.items())}."
        )


def to_torch_state_dict(variables: Any, module: Any = None) -> dict[str, Any]:
    """The torch ``state_dict`` of jln parameters: the inverse of :func:`from_torch`.

    The jln module decides the torch layout, so the mapping is unambiguous: ``LayerNorm`` and
    ``RMSNorm`` (any convention) give ``weight`` (+ ``bias``), ``AdaLNZero`` gives
    ``linear.*``, ``AdaLNContinuous`` gives ``linear.*`` and ``norm.*``,
    ``TransformerEncoderLayer`` gives torch's ``self_attn.in_proj_weight`` (q, k, v stacked),
    ``self_attn.out_proj.*``, ``linear1.*``, ``linear2.*``, ``norm1.*``, ``norm2.*``; Dense
    gives ``weight`` (transposed kernel) and ``bias``. Tensors keep the parameters' dtypes and
    values bit for bit, so the result loads with ``load_state_dict(..., strict=True)`` into the
    torch class the module was converted from.

    Args:
      variables: linen variables (``{"params": ...}`` or the params tree itself) together with
        ``module``, the linen module they belong to; or an nnx module alone (its ``nnx.Param``
        values are used).
      module: the ``jln.linen`` module (or ``flax.linen.Dense``); omit for nnx.

    Returns:
      dict from torch parameter name to a CPU ``torch.Tensor``.

    Raises:
      TypeError: the module is not a jln module with a torch layout, or linen variables were
        given without their module.
      ValueError: the parameter tree does not have the linen module's parameters (the message
        names each missing, unexpected and wrongly shaped one).
      ImportError: torch is not installed.

    Example:
      >>> import torch
      >>> from jln.interop import from_torch, to_torch_state_dict
      >>> norm = from_torch(torch.nn.LayerNorm(4), api="nnx")
      >>> sorted(to_torch_state_dict(norm))
      ['bias', 'weight']
    """
    fn = "jln.interop.to_torch_state_dict"
    from jln import _convert

    _convert.import_torch(fn)
    if module is None:
        from flax import nnx

        if not isinstance(variables, nnx.Module):
            raise TypeError(
                f"{fn}: pass an nnx module alone, or linen variables together with their module "
                f"(to_torch_state_dict(variables, module)); received only a "
                f"{type(variables).__name__}."
            )
        module = variables
        params: Mapping[str, Any] = nnx.to_pure_dict(nnx.state(module, nnx.Param))
        stats: Mapping[str, Any] = nnx.to_pure_dict(nnx.state(module, nnx.BatchStat))
    else:
        if not isinstance(variables, Mapping):
            raise TypeError(
                f"{fn}: `variables` must be a dict; received {type(variables).__name__}."
            )
        params = variables["params"] if "params" in variables else variables
        stats = variables.get("batch_stats", {}) if "params" in variables else {}
    layout = _layout_of(module, fn)
    if not isinstance(params, Mapping):
        raise TypeError(f"{fn}: the parameters must be a dict tree; received {type(params).__name__}.")
    import flax.linen

    if isinstance(module, flax.linen.Module):  # (an nnx module's parameters are its own)
        _check_tree(module, layout, params, fn)
    tree = {**params, **stats} if stats else params  # (running statistics)
    arrays = _renamed(layout.state_dict(tree, module), getattr(getattr(module, "cfg", None), "torch_names", None), fn)
    return {k: _convert.to_torch(v, k, fn) for k, v in arrays.items()}


def _renamed(arrays: dict[str, Any], names: Any, fn: str) -> dict[str, Any]:
    """``arrays`` with the module's ``torch_names`` (``(default, name)`` pairs) applied; a name
    with ``{}`` splits the array along its first axis, ``{}`` replaced by the index."""
    if not names:
        return arrays
    unknown = [d for d, _ in names if d not in arrays]
    if unknown:
        raise ValueError(
            f"{fn}: the module's torch_names renames {unknown}, which its torch layout does not "
            f"produce (it gives {sorted(arrays)}). Name only those."
        )
    new = dict(names)
    out: dict[str, Any] = {}
    for k, v in arrays.items():
        name = new.get(k, k)
        if "{}" in name:  # one tensor per index of the first axis (StableLM's norms.<i>.weight)
            out.update({name.format(i): row for i, row in enumerate(v)})
        else:
            out[name] = v
    return out


__all__ = ["from_torch", "supported_modules", "to_torch_state_dict"]
