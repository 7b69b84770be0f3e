"""Modulation and adaptive (conditioned) LayerNorm."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, get_args

import jax
import jax.numpy as jnp

from jln import _dispatch, _eager, _stats, _validate
from jln._platform import Impl
from jln._validate import Axis
from jln.families.layer_norm import spec as ln_spec
from jln.families.layer_norm.spec import LayerNormConvention, LayerNormSpec, modulation_rounded
from jln.families.rms_norm.spec import RMSConvention

Array = jax.Array

#: Named chunk orders of a projected condition ``emb = Linear(c)`` split along its last axis.
ORDERS: dict[str, tuple[str, ...]] = {
    # the seed's AdaptiveLN: gamma, beta = proj(c).chunk(2); LN(x) * (1 + gamma) + beta
    "seed": ("scale", "shift"),
    # DiT adaLN-Zero (and diffusers AdaLayerNormZero): Linear(D, 6D)(SiLU(c)).chunk(6)
    "dit": ("shift_msa", "scale_msa", "gate_msa", "shift_mlp", "scale_mlp", "gate_mlp"),
    # DiT's final layer: chunk(2) = shift, scale
    "dit_final": ("shift", "scale"),
    # diffusers AdaLayerNormZeroSingle (Flux single blocks)
    "dit_single": ("shift_msa", "scale_msa", "gate_msa"),
    # SD3 / Flux norm_out (diffusers AdaLayerNormContinuous): chunk(2) = scale, shift
    "continuous": ("scale", "shift"),
    # diffusers SD35AdaLayerNormZeroX (SD3.5 dual attention): DiT's six, then a second
    # attention's shift, scale and gate applied to the same normed x
    "sd35_x": ("shift_msa", "scale_msa", "gate_msa", "shift_mlp", "scale_mlp", "gate_mlp",
               "shift_msa2", "scale_msa2", "gate_msa2"),
    # diffusers LuminaRMSNormZero and MochiRMSNormZero: no shifts
    "lumina_zero": ("scale_msa", "gate_msa", "scale_mlp", "gate_mlp"),
    # diffusers CogVideoXLayerNormZero: the video stream's, then the text stream's
    "cogvideox": ("shift", "scale", "gate", "enc_shift", "enc_scale", "enc_gate"),
    # diffusers CogView3PlusAdaLayerNormZeroTextImage: DiT's six for the image, then the text's
    "cogview3plus": ("shift_msa", "scale_msa", "gate_msa", "shift_mlp", "scale_mlp", "gate_mlp",
                     "c_shift_msa", "c_scale_msa", "c_gate_msa", "c_shift_mlp", "c_scale_mlp", "c_gate_mlp"),
    # diffusers LuminaLayerNormContinuous / MochiLayerNormContinuous: a scale alone
    "scale_only": ("scale",),
    # diffusers CogView4AdaLayerNormZero / GlmImageAdaLayerNormZero: DiT's twelve, image and
    # text interleaved
    "cogview4": ("shift_msa", "c_shift_msa", "scale_msa", "c_scale_msa", "gate_msa", "c_gate_msa",
                 "shift_mlp", "c_shift_mlp", "scale_mlp", "c_scale_mlp", "gate_mlp", "c_gate_mlp"),
    # diffusers SanaModulatedNorm, PI05's adaptive RMSNorm, EsmFold2's sigmoid-gated LayerNorm
    "shift_scale": ("shift", "scale"),
    "pi05": ("scale", "shift", "gate"),
}

#: A named chunk order of :data:`ORDERS` (a test holds the two equal), or the chunk names themselves.
OrderName = Literal["seed", "dit", "dit_final", "dit_single", "continuous", "sd35_x", "lumina_zero", "cogvideox", "cogview3plus", "scale_only", "cogview4", "shift_scale", "pi05"]
ChunkOrder = OrderName | Sequence[str]


def resolve_order(order: ChunkOrder, fn: str) -> tuple[str, ...]:
    if isinstance(order, str):
        if order not in ORDERS:
            raise ValueError(
                f"{fn}: unknown chunk order {order!r}; expected one of {sorted(ORDERS)} or a "
                f"tuple of chunk names such as ('shift', 'scale')."
            )
        return ORDERS[order]
    names = tuple(order)
    if not names or len(set(names)) != len(names) or not all(isinstance(n, str) for n in names):
        raise ValueError(f"{fn}: `order` must be distinct chunk names; received {order!r}.")
    return names


def split_condition(emb: Array, order: ChunkOrder = "seed") -> dict[str, Array]:
    """Split a projected condition ``emb [..., k*D]`` into its k named chunks ``[..., D]``.

    Args:
      emb: floating array whose last axis holds the k chunks back to back (torch's
        ``emb.chunk(k, dim=-1)``).
      order: a name from :data:`ORDERS` (``"seed"``, ``"dit"``, ``"dit_final"``,
        ``"dit_single"``, ``"continuous"``) or a tuple of chunk names.

    Returns:
      dict from chunk name to an array of shape ``emb.shape[:-1] + (D,)``, in ``order``.

    Raises:
      TypeError: ``emb`` is not a floating array.
      ValueError: unknown order, or the last axis is not divisible by k.

    Example:
      >>> import jax.numpy as jnp, jln
      >>> c = jln.split_condition(jnp.arange(4.0)[None], "seed")
      >>> c["scale"], c["shift"]
      (Array([[0., 1.]], dtype=float32), Array([[2., 3.]], dtype=float32))
    """
    fn = "jln.split_condition"
    _validate.check_floating(emb, fn, "emb")
    names = resolve_order(order, fn)
    k = len(names)
    if emb.ndim == 0 or emb.shape[-1] % k:
        raise ValueError(
            f"{fn}: the last axis of `emb` must hold {k} equal chunks {names}; received "
            f"emb.shape={tuple(emb.shape)}."
        )
    return dict(zip(names, jnp.split(emb, k, axis=-1), strict=True))


def torch_broadcast(x: Array, h: Array, fn: str) -> tuple[Array, Array, Array]:
    """``(x, h, h[:, None])`` with ``x`` and ``h[:, None]`` broadcast to the leading shape torch
    gives ``x`` against ``h[:, None]`` (diffusers' and transformers' ``scale[:, None, :]`` and
    ``unsqueeze(1)``), each keeping its last axis. A norm is per row, so normalizing the
    broadcast ``x`` and modulating it by the broadcast ``h`` gives torch's every element, whatever
    the ranks (``h [B, L', k]`` against ``x [B, L, d]``: ``[B, B, L, ...]``, as torch)."""
    h = jnp.asarray(h)
    if h.ndim < 2:
        raise ValueError(
            f"{fn}: the condition must have a batch axis ([B, c], or more axes, broadcast as torch does); "
            f"received one projected to shape {tuple(h.shape)}, which torch's `[:, None, :]` does not take."
        )
    hx = jnp.expand_dims(h, 1)
    try:
        lead = jnp.broadcast_shapes(tuple(x.shape[:-1]), tuple(hx.shape[:-1]))
    except ValueError:
        raise ValueError(
            f"{fn}: torch cannot broadcast x.shape={tuple(x.shape)} against the condition's chunks "
            f"`[:, None]`, of shape {tuple(hx.shape[:-1])} + (d,); neither does jln."
        ) from None
    return (jnp.broadcast_to(x, tuple(lead) + tuple(x.shape[-1:])),
            jnp.broadcast_to(hx, tuple(lead) + tuple(hx.shape[-1:])), hx)


def expand_condition(c: Any, x_shape: tuple[int, ...], name: str, fn: str) -> Array:
    """Broadcast a per-example condition over the token axes of ``x``.

    ``[D]``, ``x.shape`` and same-rank shapes with size-1 axes (``[B, 1, D]``) broadcast as
    they are; ``[B, D]`` against ``x [B, T, D]`` (or ``[B, H, W, D]``) becomes ``[B, 1, D]``
    (``[B, 1, 1, D]``), as DiT's ``scale[:, None]``.
    """
    _validate.check_floating(c, fn, name)
    c = jnp.asarray(c)
    shape = tuple(c.shape)
    if shape == tuple(x_shape):
        return c
    if c.ndim == 1 and shape == tuple(x_shape[-1:]):
        return c.reshape((1,) * (len(x_shape) - 1) + shape)  # explicit rank: no rank promotion
    if c.ndim == len(x_shape) and all(s in (1, xs) for s, xs in zip(shape, x_shape, strict=True)):
        return c  # already broadcastable, e.g. [B, 1, D]
    nd = len(x_shape)
    if 2 <= c.ndim < nd and shape[-1] == x_shape[-1] and shape[:-1] == tuple(x_shape[: c.ndim - 1]):
        return c.reshape(shape[:-1] + (1,) * (nd - c.ndim) + shape[-1:])
    raise ValueError(
        f"{fn}: `{name}` must have shape [D], [B, D] (per example, broadcast over the token "
        f"axes), x.shape, or x's rank with size-1 axes to broadcast (e.g. [B, 1, D]; a per-token "
        f"condition shared over the batch is [1, T, D]); received {name}.shape={shape} for "
        f"x.shape={tuple(x_shape)}."
    )


def resolve_use(chunks: dict[str, Array], use: Sequence[str | None] | None, fn: str) -> tuple[str | None, str | None]:
    """The (shift, scale) chunk names that modulate a norm: ``use`` checked against the chunks,
    or the default (``shift``/``shift_msa``, ``scale``/``scale_msa``, whichever ``order`` has)."""
    if use is None:
        def first(*names: str) -> str | None:
            return next((n for n in names if n in chunks), None)

        names = (first("shift", "shift_msa"), first("scale", "scale_msa"))
    else:
        names = tuple(use)  # type: ignore[assignment]
        if len(names) != 2:
            raise ValueError(f"{fn}: `use` must be a (shift, scale) pair of chunk names or None; received {use!r}.")
    missing = [n for n in names if n is not None and n not in chunks]
    if missing:
        raise ValueError(
            f"{fn}: `use` names chunks {missing} that order {tuple(chunks)} does not have."
        )
    if names == (None, None):
        raise ValueError(
            f"{fn}: order {tuple(chunks)} has no shift or scale chunk to modulate with; name them "
            f"with `use=(shift_name, scale_name)`."
        )
    return names


def expand_chunks(
    chunks: dict[str, Array], names: tuple[str | None, str | None], x_shape: tuple[int, ...], emb: Any, fn: str,
) -> tuple[Array | None, Array | None]:
    """The named chunks broadcast against ``x`` (:func:`expand_condition`), ``None`` for a
    ``None`` name; a misfit is reported in terms of ``emb``."""
    try:
        return tuple(  # type: ignore[return-value]
            None if n is None else expand_condition(chunks[n], x_shape, n, fn) for n in names
        )
    except ValueError as e:  # the chunks come from emb: say so
        k = len(chunks)
        one = next(iter(chunks.values()))
        raise ValueError(
            f"{fn}: `emb` (shape {tuple(jnp.shape(emb))}, split into {k} chunks of "
            f"its last axis) does not fit x.shape={tuple(x_shape)}: each chunk, here "
            f"{tuple(one.shape)}, must be [D], [B, D] or x's shape, so emb is "
            f"[{k}*D], [B, {k}*D] or x's leading shape with {k}*D "
            f"features. Details: {e}"
        ) from e


@_eager.compiled_when_eager("x", "shift", "scale")
def modulate(x: Array, shift: Array | None, scale: Array | None, *, scale_offset: float = 1.0) -> Array:
    r"""DiT's modulation ``x * (scale_offset + scale) + shift`` (``scale_offset=1``).

    .. math:: y = x \cdot (1 + \mathrm{scale}) + \mathrm{shift}

    Each op rounds to the promoted dtype of its operands, exactly as torch evaluates
    ``x * (1 + scale[:, None]) + shift[:, None]``. FiLM's ``gamma * x + beta`` is
    ``scale_offset=0``.

    Args:
      x: floating array ``[B, ..., D]``.
      shift: ``[D]``, ``[B, D]`` (broadcast over the token axes, as DiT) or ``x.shape``; or None.
        A 2-D condition is always read as ``[B, D]``: give one shared over the batch but per
        token (torch's ``[T, D]`` broadcasting) as ``[1, T, D]``.
      scale: same shapes as ``shift``; or None.
      scale_offset: the constant added to ``scale``: 1 for DiT/adaLN, 0 for plain FiLM.

    Returns:
      Array of ``x.shape`` with the promoted dtype of ``x``, ``shift`` and ``scale``.

    Raises:
      TypeError: a non-floating input.
      ValueError: a condition whose shape does not broadcast as described.

    Example:
      >>> import jax.numpy as jnp, jln
      >>> jln.modulate(jnp.ones((2, 3, 4)), jnp.zeros((2, 4)), jnp.ones((2, 4))).shape
      (2, 3, 4)
    """
    fn = "jln.modulate"
    _validate.check_floating(x, fn)
    sh = None if shift is None else expand_condition(shift, x.shape, "shift", fn)
    sc = None if scale is None else expand_condition(scale, x.shape, "scale", fn)
    dtypes = [x.dtype] + [c.dtype for c in (sh, sc) if c is not None]
    mod_dtype = _stats.promote(*dtypes)
    with jax.named_scope(fn):
        y = modulation_rounded(_stats.upcast(x), sh, sc, float(scale_offset), x.dtype)
        return y.astype(mod_dtype)


@_eager.compiled_when_eager("x", "emb", "scale", "bias")
def adaptive_layer_norm(
    x: Array,
    emb: Array,
    scale: Array | None = None,
    bias: Array | None = None,
    *,
    order: ChunkOrder = "seed",
    use: Sequence[str | None] | None = None,
    axis: Axis = -1,
    eps: float = 1e-5,
    convention: LayerNormConvention = "torch",
    scale_offset: float = 1.0,
    impl: Impl = "auto",
    axis_name: Any = None,
    axis_index_groups: Any = None,
) -> tuple[Array, dict[str, Array]]:
    r"""Adaptive LayerNorm: a LayerNorm (own affine optional) followed by modulation.

    .. math::

        y = \Big(\frac{x - \mathrm{E}[x]}{\sqrt{\mathrm{Var}[x] + \epsilon}} \cdot
        \mathrm{scale} + \mathrm{bias}\Big) \cdot (1 + \mathrm{scale}_c) + \mathrm{shift}_c

    where ``(shift_c, scale_c)`` are chunks of the projected condition ``emb`` named by
    ``order``. The norm and the modulation run as one fused body: reverse mode keeps only
    ``x`` and per-row statistics (the normalized activations are recomputed).

    Args:
      x: floating array ``[B, ..., D]``.
      emb: projected condition ``[B, k*D]`` (or ``[B, ..., k*D]``), e.g. ``Linear(SiLU(c))``.
      scale, bias: the LayerNorm's own affine (the seed's AdaptiveLN has one; DiT's has none).
      order: chunk order of ``emb``: ``"seed"`` (scale, shift = gamma, beta), ``"dit"``
        (shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp), ``"dit_final"``
        (shift, scale), ``"dit_single"``, ``"continuous"`` (scale, shift: SD3/Flux final
        layers), or a tuple of names.
      use: the (shift, scale) chunk names that modulate this norm, either may be ``None``
        (no shift: ``y * (1 + scale)``); default: ``"shift"`` (else ``"shift_msa"``, else
        none) and ``"scale"`` (else ``"scale_msa"``), those of ``order``.
      axis, eps: as in :func:`layer_norm` (torch defaults; DiT uses eps=1e-6).
      convention: the LayerNorm's rounding, as in :func:`layer_norm` (``"deberta"``/``"eager"``:
        the normed row and its affine rounded op by op, the modulation after them; those run on
        the XLA path).
      scale_offset: 1 for ``(1 + scale)``, 0 for FiLM's plain ``scale``.
      impl: as in :func:`layer_norm`.
      axis_name, axis_index_groups: as in :func:`layer_norm`: the normalized axis of ``x`` is
        split across this mapped axis, and ``emb`` holds the matching local blocks of every
        chunk (each chunk sharded like the hidden axis).

    Returns:
      ``(y, chunks)``: ``y`` has ``x.shape`` and the promoted dtype of the norm's (``x.dtype``
      for ``"torch"``, see :func:`layer_norm`) and ``emb``'s;
      ``chunks`` maps every chunk name of ``order`` to its ``[B, D]`` array (the gates and the
      MLP's shift/scale for DiT).

    Raises:
      TypeError, ValueError, NameError: as :func:`layer_norm` and :func:`split_condition`,
        or when ``use`` names chunks that ``order`` lacks.

    Example:
      >>> import jax.numpy as jnp, jln
      >>> x, emb = jnp.ones((2, 5, 4)), jnp.zeros((2, 24))
      >>> y, chunks = jln.adaptive_layer_norm(x, emb, order="dit", eps=1e-6)
      >>> y.shape, sorted(chunks)[:2]
      ((2, 5, 4), ['gate_mlp', 'gate_msa'])
    """
    fn = "jln.adaptive_layer_norm"
    _validate.check_floating(x, fn)
    chunks = split_condition(emb, order)
    sh_name, sc_name = resolve_use(chunks, use, fn)
    axes, _, s, b = _validate.norm_layout(fn, x, scale, bias, axis)
    eps_f = _validate.check_eps(eps, fn)
    sh, sc = expand_chunks(chunks, (sh_name, sc_name), x.shape, emb, fn)
    conv = ln_spec.resolve_convention(convention, fn)
    out = ln_spec.output_dtype(conv, x.dtype, *(p.dtype for p in (s, b) if p is not None))
    spec = LayerNormSpec(
        axes=axes, eps=eps_f, out_dtype=out, convention=conv, io_dtype=x.dtype, mod_offset=float(scale_offset),
        mod_dtype=_stats.promote(out, *[c.dtype for c in (sh, sc) if c is not None]),
        shift_dtype=None if sh is None else sh.dtype, mscale_dtype=None if sc is None else sc.dtype,
        **_validate.dist(fn, impl, axis_name, axis_index_groups),
    )
    return _dispatch.apply(fn, impl, spec, x, (s, b, sh, sc)), chunks


#: How :func:`adaptive_rms_norm` rounds its modulation.
RMSModulation = Literal["rounded", "float32"]
RMS_MODULATIONS: tuple[str, ...] = get_args(RMSModulation)


@_eager.compiled_when_eager("x", "emb", "scale")
def adaptive_rms_norm(
    x: Array,
    emb: Array,
    scale: Array | None = None,
    *,
    order: ChunkOrder = "lumina_zero",
    use: Sequence[str | None] | None = None,
    eps: float | None = None,
    convention: RMSConvention = "diffusers",
    modulation: RMSModulation = "rounded",
    scale_offset: float = 1.0,
    impl: Impl = "auto",
    axis_name: Any = None,
    axis_index_groups: Any = None,
) -> tuple[Array, dict[str, Array]]:
    r"""Adaptive RMSNorm: an RMSNorm (own weight optional) followed by modulation.

    .. math::

        y = \Big(\frac{x}{\sqrt{\mathrm{mean}(x^2) + \epsilon}} \cdot w\Big) \cdot
        (1 + \mathrm{scale}_c) + \mathrm{shift}_c

    with ``(shift_c, scale_c)`` chunks of ``emb`` named by ``order`` (either may be absent).
    Two dtype flows, as the diffusers classes they reproduce:

    * ``modulation="rounded"`` (diffusers ``LuminaRMSNormZero``, ``AdaLayerNormContinuous``
      with ``norm_type="rms_norm"``): ``n = rms_norm(x, w, convention=convention)`` in its
      convention's dtype, then :func:`modulate` with torch's rounding after each op.
    * ``modulation="float32"`` (diffusers ``MochiRMSNormZero``, ``MochiLayerNormContinuous``):
      ``x`` is cast to float32 first, the norm and ``1 + f(scale_c)`` (and ``+ f(shift_c)``)
      are evaluated in float32, and the result is rounded once to ``x.dtype``.

    Args:
      x: floating array ``[B, ..., D]``.
      emb: projected condition ``[B, k*D]`` (or ``[k*D]``, or ``x``'s leading shape with
        ``k*D`` features).
      scale: the RMSNorm's own weight ``[D]`` (diffusers' ``RMSNorm(elementwise_affine=True)``).
      order: chunk order of ``emb`` (:data:`ORDERS`; ``"lumina_zero"`` = scale_msa, gate_msa,
        scale_mlp, gate_mlp), or a tuple of names.
      use: the (shift, scale) chunk names that modulate; as :func:`adaptive_layer_norm`.
      eps: the RMSNorm's eps; ``None``: the convention's default.
      convention: the RMSNorm convention (:func:`rms_norm`); diffusers' by default.
      modulation: ``"rounded"`` or ``"float32"``, as above.
      scale_offset: 1 for ``(1 + scale)``, 0 for a plain ``scale``.
      impl, axis_name, axis_index_groups: as in :func:`rms_norm` (``emb`` then holds the local
        blocks of every chunk, as :func:`adaptive_layer_norm`'s).

    Returns:
      ``(y, chunks)``: ``y`` of ``x.shape``, dtype the promotion of the norm's output dtype and
      the chunks' (``"float32"``: ``x.dtype``); ``chunks`` maps every chunk name to its array.

    Raises:
      TypeError, ValueError: as :func:`rms_norm` and :func:`adaptive_layer_norm`; an unknown
        ``modulation``.

    Example:
      >>> import jax.numpy as jnp, jln
      >>> y, chunks = jln.adaptive_rms_norm(jnp.ones((2, 5, 4)), jnp.zeros((2, 16)), eps=1e-6)
      >>> y.shape, sorted(chunks)
      ((2, 5, 4), ['gate_mlp', 'gate_msa', 'scale_mlp', 'scale_msa'])
    """
    from jln.families.rms_norm.function import rms_norm

    fn = "jln.adaptive_rms_norm"
    _validate.check_floating(x, fn)
    _validate.check_choice(modulation, "modulation", RMS_MODULATIONS, fn)
    chunks = split_condition(emb, order)
    names = resolve_use(chunks, use, fn)
    sh, sc = expand_chunks(chunks, names, x.shape, emb, fn)
    with jax.named_scope(fn):
        if modulation == "rounded":
            n = rms_norm(x, scale, eps=eps, convention=convention, impl=impl, axis_name=axis_name,
                         axis_index_groups=axis_index_groups)
            return modulate(n, sh, sc, scale_offset=scale_offset), chunks
        f32 = jnp.float32
        n = rms_norm(x.astype(f32), scale, eps=eps, convention=convention, impl=impl, axis_name=axis_name,
                     axis_index_groups=axis_index_groups).astype(f32)
        y = modulate(
            n, None if sh is None else sh.astype(f32), None if sc is None else sc.astype(f32),
            scale_offset=scale_offset,
        )
        return y.astype(x.dtype), chunks
