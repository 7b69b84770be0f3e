"""Modulation and adaptive (conditioned) LayerNorm."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp

from jln import _args, _checks, _dispatch, _eager, _stats
from jln._checks import Axis
from jln._contract.layer_norm import LayerNormSpec, modulation_rounded

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
}


def resolve_order(order: str | Sequence[str], fn: str) -> tuple[str, ...]:
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


def split_condition(emb: Array, order: str | Sequence[str] = "seed") -> dict[str, Array]:
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
    _checks.check_floating(emb, fn, "emb")
    names = resolve_order(order, fn)
    k = len(names)
    if emb.ndim == 0 or emb.shape[-1] % k:
        raise ValueError(
            f"{fn}: the last axis of `emb` must hold {k} equal chunks {names}; received "
            f"emb.shape={tuple(emb.shape)}."
        )
    return dict(zip(names, jnp.split(emb, k, axis=-1), strict=True))


def expand_condition(c: Any, x_shape: tuple[int, ...], name: str, fn: str) -> Array:
    """Broadcast a per-example condition over the token axes of ``x``.

    ``[D]``, ``x.shape`` and same-rank shapes with size-1 axes (``[B, 1, D]``) broadcast as
    they are; ``[B, D]`` against ``x [B, T, D]`` (or ``[B, H, W, D]``) becomes ``[B, 1, D]``
    (``[B, 1, 1, D]``), as DiT's ``scale[:, None]``.
    """
    _checks.check_floating(c, fn, name)
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
    _checks.check_floating(x, fn)
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
    order: str | Sequence[str] = "seed",
    use: tuple[str, str] | None = None,
    axis: Axis = -1,
    eps: float = 1e-5,
    scale_offset: float = 1.0,
    impl: str = "auto",
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
      use: the (shift, scale) chunk names that modulate this norm; default ``("shift",
        "scale")`` if present in ``order``, else ``("shift_msa", "scale_msa")``.
      axis, eps: as in :func:`layer_norm` (torch defaults; DiT uses eps=1e-6).
      scale_offset: 1 for ``(1 + scale)``, 0 for FiLM's plain ``scale``.
      impl: as in :func:`layer_norm`.
      axis_name, axis_index_groups: as in :func:`layer_norm`: the normalized axis of ``x`` is
        split across this mapped axis, and ``emb`` holds the matching local blocks of every
        chunk (each chunk sharded like the hidden axis).

    Returns:
      ``(y, chunks)``: ``y`` has ``x.shape`` and the promoted dtype of ``x`` and ``emb``;
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
    _checks.check_floating(x, fn)
    chunks = split_condition(emb, order)
    if use is None:
        use = ("shift", "scale") if "shift" in chunks else ("shift_msa", "scale_msa")
    missing = [n for n in use if n not in chunks]
    if missing:
        raise ValueError(
            f"{fn}: `use` names chunks {missing} that order {tuple(chunks)} does not have."
        )
    axes, s, b = _args.params(fn, x, scale, bias, axis)
    eps_f = _checks.check_eps(eps, fn)
    try:
        sh = expand_condition(chunks[use[0]], x.shape, use[0], fn)
        sc = expand_condition(chunks[use[1]], x.shape, use[1], fn)
    except ValueError as e:  # the chunks come from emb: say so
        raise ValueError(
            f"{fn}: `emb` (shape {tuple(jnp.shape(emb))}, split into {len(chunks)} chunks of "
            f"its last axis) does not fit x.shape={tuple(x.shape)}: each chunk, here "
            f"{tuple(chunks[use[0]].shape)}, must be [D], [B, D] or x's shape, so emb is "
            f"[{len(chunks)}*D], [B, {len(chunks)}*D] or x's leading shape with {len(chunks)}*D "
            f"features. Details: {e}"
        ) from e
    spec = LayerNormSpec(
        axes=axes, eps=eps_f, out_dtype=x.dtype, mod_offset=float(scale_offset),
        mod_dtype=_stats.promote(x.dtype, sh.dtype, sc.dtype), shift_dtype=sh.dtype, mscale_dtype=sc.dtype,
        **_args.dist(fn, impl, axis_name, axis_index_groups),
    )
    return _dispatch.apply(fn, impl, spec, x, (s, b, sh, sc)), chunks
