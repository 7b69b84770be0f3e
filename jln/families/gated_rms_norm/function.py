"""Gated RMSNorm (the output norm of Mamba-2 and the hybrid SSM / linear-attention models): the
public function (the conventions' formulas are
:class:`jln.families.gated_rms_norm.spec.GatedRMSNormSpec`'s)."""

from __future__ import annotations

import operator
from typing import Any, Literal, overload

import jax
import jax.numpy as jnp
import numpy as np

from jln import _dispatch, _eager, _stats, _validate
from jln._platform import Impl
from jln._quant import Quant, Quantized, Stats
from jln._validate import Axis
from jln.families.gated_rms_norm import spec as contract
from jln.families.gated_rms_norm.spec import GateActivation, GatedConvention, GatedRMSNormSpec

Array = jax.Array

GATED_CONVENTIONS = contract.CONVENTIONS


def _group_size(fn: str, group_size: Any, x_shape: tuple[int, ...], axes: tuple[int, ...], axis_name: Any,
                axis_index_groups: Any) -> int | None:
    """The validated ``group_size``: ``None`` for statistics over the whole row (also when one
    group spans it), else a size that divides the local width."""
    if group_size is None:
        return None
    if isinstance(group_size, (bool, np.bool_)):
        raise TypeError(f"{fn}: `group_size` must be a positive int or None; received {group_size!r}.")
    try:
        gs = operator.index(group_size)
    except TypeError:
        raise TypeError(f"{fn}: `group_size` must be a positive int or None; received {group_size!r}.") from None
    if gs <= 0:
        raise ValueError(f"{fn}: `group_size` must be a positive int or None; received {group_size!r}.")
    if len(axes) != 1:
        raise ValueError(
            f"{fn}: `group_size` splits one normalized axis into groups; received axis={axes} (several "
            f"axes). Reshape x so the channels are one axis, or pass group_size=None."
        )
    width = x_shape[axes[0]]
    shards = _stats.shard_count(axis_name, axis_index_groups)
    if gs == width * shards:
        return None  # one group: the whole row (across the shards, with axis_name)
    if width % gs:
        if shards > 1 and (width * shards) % gs == 0:
            raise ValueError(
                f"{fn}: group_size={gs} groups would straddle the shards of axis_name={axis_name!r}: "
                f"each of the {shards} devices holds {width} channels of the row of {width * shards}, "
                f"not a whole number of groups. Shard the channels in multiples of group_size (e.g. "
                f"split the row into at most {(width * shards) // gs} blocks)."
            )
        where = f"the local width {width} (of {width * shards} across axis_name)" if shards > 1 else f"the width {width}"
        raise ValueError(
            f"{fn}: group_size={gs} must divide {where} of x at axis {axes[0]} (x.shape="
            f"{tuple(x_shape)}); transformers' n_groups is width // group_size."
        )
    return gs


@overload
def gated_rms_norm(
    x: Array,
    gate: Array | None = None,
    scale: Array | None = None,
    *,
    axis: Axis = -1,
    eps: float = 1e-6,
    group_size: int | None = None,
    norm_before_gate: bool | None = None,
    convention: GatedConvention = "mamba",
    activation: GateActivation = "silu",
    impl: Impl = "auto",
    axis_name: Any = None,
    axis_index_groups: Any = None,
    quantize: None = None,
    amax_history: Array | None = None,
    return_stats: Literal[False] = False,
) -> Array: ...


@overload
def gated_rms_norm(
    x: Array,
    gate: Array | None = None,
    scale: Array | None = None,
    *,
    axis: Axis = -1,
    eps: float = 1e-6,
    group_size: int | None = None,
    norm_before_gate: bool | None = None,
    convention: GatedConvention = "mamba",
    activation: GateActivation = "silu",
    impl: Impl = "auto",
    axis_name: Any = None,
    axis_index_groups: Any = None,
    quantize: Quant,
    amax_history: Array | None = None,
    return_stats: Literal[False] = False,
) -> Quantized: ...


@overload
def gated_rms_norm(
    x: Array,
    gate: Array | None = None,
    scale: Array | None = None,
    *,
    axis: Axis = -1,
    eps: float = 1e-6,
    group_size: int | None = None,
    norm_before_gate: bool | None = None,
    convention: GatedConvention = "mamba",
    activation: GateActivation = "silu",
    impl: Impl = "auto",
    axis_name: Any = None,
    axis_index_groups: Any = None,
    quantize: None = None,
    amax_history: Array | None = None,
    return_stats: Literal[True],
) -> tuple[Array, Stats]: ...


@overload
def gated_rms_norm(
    x: Array,
    gate: Array | None = None,
    scale: Array | None = None,
    *,
    axis: Axis = -1,
    eps: float = 1e-6,
    group_size: int | None = None,
    norm_before_gate: bool | None = None,
    convention: GatedConvention = "mamba",
    activation: GateActivation = "silu",
    impl: Impl = "auto",
    axis_name: Any = None,
    axis_index_groups: Any = None,
    quantize: Quant,
    amax_history: Array | None = None,
    return_stats: Literal[True],
) -> tuple[Quantized, Stats]: ...


@_eager.compiled_when_eager("x", "gate", "scale", "amax_history")
def gated_rms_norm(
    x: Array,
    gate: Array | None = None,
    scale: Array | None = None,
    *,
    axis: Axis = -1,
    eps: float = 1e-6,
    group_size: int | None = None,
    norm_before_gate: bool | None = None,
    convention: GatedConvention = "mamba",
    activation: GateActivation = "silu",
    impl: Impl = "auto",
    axis_name: Any = None,
    axis_index_groups: Any = None,
    quantize: Quant | None = None,
    amax_history: Array | None = None,
    return_stats: bool = False,
) -> Any:
    r"""RMSNorm gated by an activation of a second input, as Mamba-2 and hybrid models use it.

    With ``f()`` a cast to float32 (float64 for float64 input), ``dt`` the input dtype, ``a``
    the activation (``silu`` or ``sigmoid``), ``z`` the gate and ``w`` the scale; the
    statistics ``r = rsqrt(mean(v^2) + eps)`` (eps inside the square root) are taken per row,
    or per group of ``group_size`` consecutive channels:

    ================  =============================================================  ===========
    convention        computation                                                    gate first
    ================  =============================================================  ===========
    ``"mamba"``       ``v = f(x) * a(f(z))``; ``w * (v * r).astype(dt)``: a float32  yes
                      weight promotes (bf16 x gives **float32**), as LLaMA's
                      RMSNorm (aliases ``"mamba2"``, ``"bamba"``, ``"zamba2"``,
                      ``"nemotron_h"``, ``"granitemoehybrid"``)
    ``"qwen3_next"``  ``(w * (f(x) * r).astype(dt))`` rounded to its promoted         no
                      dtype, then ``* a(f(z))`` in float32; ``.astype(dt)``
                      (aliases ``"qwen3_5"``, ``"olmo_hybrid"``)
    ``"float32"``     ``(f(x) * r * f(w) * a(f(z))).astype(dt)``: one rounding        no
                      (aliases ``"falcon_h1"``, ``"mamba_ssm"``; Kimi-Linear with
                      ``activation="sigmoid"``)
    ================  =============================================================  ===========

    "gate first" is the convention's ``norm_before_gate=False``: the gated row ``f(x) * a(f(z))``
    is normalized; otherwise the gate multiplies after the norm and the weight (each convention
    rounds at the same places either way). Without a gate it is the plain RMSNorm of the
    convention's dtype order.

    Args:
      x: floating array.
      gate: ``z``, a floating array of ``x``'s shape, or ``None`` (no gating).
      scale: optional weight with the shape of ``x`` at ``axis``. Its dtype decides the output
        dtype in the ``"mamba"`` convention.
      axis: int, or tuple of ints without ``group_size``, to normalize over.
      eps: added to the mean square (transformers' default 1e-6).
      group_size: statistics per group of this many consecutive channels along ``axis``
        (transformers' ``group_size``; FalconH1's ``n_groups`` is ``width // group_size``);
        must divide the width. ``None``: the whole row.
      norm_before_gate: ``True``: normalize, weight, then gate; ``False``: gate, then
        normalize; ``None``: the convention's (``"mamba"``: ``False``, others ``True``).
      convention: one of the names above.
      activation: ``"silu"`` (default) or ``"sigmoid"``.
      impl: ``"auto"``, ``"xla"``, ``"native"`` or ``"pallas"``, as in :func:`jln.layer_norm`.
        ``"auto"`` takes the native CPU kernels (forward and backward, every option) on a
        single-device CPU once ``jln build`` has run and the gate has x's dtype, else XLA.
        ``"pallas"`` takes a fused Pallas kernel (forward and backward; either gate order)
        when the statistics are over whole rows (no ``group_size``); otherwise it raises
        ``ValueError`` saying why.
      axis_name: inside ``jax.shard_map``/``jax.pmap``: the mesh axis name(s) across which the
        normalized axis is split. With ``group_size=None`` the mean square is that of the whole
        row (one psum); with groups, each group must lie inside one device's block.
      axis_index_groups: as in ``jax.lax.psum``.
      quantize, amax_history: as in :func:`jln.rms_norm`: the output quantized in XLA (a
        :class:`jln.Quantized`, row scales over the whole row), straight-through gradients.
      return_stats: also return :class:`jln.Stats` ``(None, rstd)`` of the row the statistics
        are taken on (gated first when the gate comes before the norm); float32, keepdims, or
        with ``group_size`` one per group (the normalized axis of length ``n // group_size``).

    Returns:
      Array of ``x.shape``: dtype ``x.dtype``, except ``"mamba"`` with a scale:
      ``promote(x.dtype, scale.dtype)``. With ``quantize``, a :class:`jln.Quantized`; with
      ``return_stats``, ``(that, stats)``.

    Raises:
      TypeError: ``x``, ``gate`` or ``scale`` is not floating, or ``group_size`` is not an int.
      ValueError: ``gate``'s shape differs from ``x``'s, a bad scale shape or axis, negative eps,
        an unknown convention or activation, a ``group_size`` that does not divide the width (or
        whose groups would straddle devices with ``axis_name``), or several axes with
        ``group_size``.
      NameError: ``axis_name`` is not bound (outside ``shard_map``/``pmap``).

    Example:
      >>> import jax.numpy as jnp, numpy as np, jln
      >>> x, z = jnp.array([[3.0, -4.0]]), jnp.array([[20.0, 20.0]])  # silu(20) = 20
      >>> np.asarray(jln.gated_rms_norm(x, z, eps=0.0)).round(4)  # normalizes x * 20
      array([[ 0.8485, -1.1314]], dtype=float32)
      >>> np.asarray(jln.gated_rms_norm(x, z, eps=0.0, convention="qwen3_next")).round(3)
      array([[ 16.971, -22.627]], dtype=float32)

    References: Dao and Gu, "Transformers are SSMs" (Mamba-2, 2024); transformers'
    ``MambaRMSNormGated`` and ``Qwen3NextRMSNormGated``.
    """
    fn = "jln.gated_rms_norm"
    axes, _, s, _ = _validate.norm_layout(fn, x, scale, None, axis)
    if gate is not None:
        _validate.check_floating(gate, fn, "gate")
        if tuple(gate.shape) != tuple(x.shape):
            raise ValueError(
                f"{fn}: `gate` must have x's shape {tuple(x.shape)} (one gate value per element); "
                f"received gate.shape={tuple(gate.shape)}. Broadcast it first if that is meant, "
                f"e.g. jnp.broadcast_to(gate, x.shape)."
            )
        gate = jnp.asarray(gate)
    conv = contract.resolve_convention(convention, fn)
    _validate.check_choice(activation, "activation", contract.ACTIVATIONS, fn)
    if norm_before_gate is None:
        norm_before_gate = contract.default_norm_before_gate(conv)
    elif not isinstance(norm_before_gate, (bool, np.bool_)):
        raise TypeError(f"{fn}: `norm_before_gate` must be True, False or None; received {norm_before_gate!r}.")
    eps_f = _validate.check_eps(eps, fn)
    dist = _validate.dist(fn, impl, axis_name, axis_index_groups)
    gs = _group_size(fn, group_size, tuple(x.shape), axes, dist["axis_name"], dist["axis_index_groups"])
    scale_dtype = None if s is None else s.dtype
    spec = GatedRMSNormSpec(
        axes=axes, eps=eps_f, convention=conv, group_size=gs, norm_before_gate=bool(norm_before_gate),
        activation=activation, io_dtype=jnp.dtype(x.dtype), out_dtype=contract.output_dtype(conv, x.dtype, scale_dtype),
        scale_dtype=scale_dtype, **dist,
    )
    return _dispatch.apply_with(
        fn, impl, spec, x, (gate, s), quantize=quantize, amax_history=amax_history, return_stats=return_stats
    )
