"""The one argument-resolution layer: every public function, module and converter validates
through it, once.

Every check runs eagerly on static information (shapes, dtypes, Python values), before any
tracing, so a bad call fails with a message that states the rule, what was received and how
to fix it. The public functions resolve their arrays here into a :class:`NormLayout` (the
normalized axes, sorted and non-negative, and the parameters laid out to broadcast against
``x``); the modules validate their options here (``check_module_options`` and the option
checks below). No other file in jln re-implements these rules.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jln import _stats
from jln._contract import add_in
from jln._platform import IMPLS

Array = jax.Array
Axis = int | Sequence[int]



def check_floating(x: Any, fn: str, name: str = "x") -> None:
    """Raise ``TypeError`` unless ``x`` is an array with a floating dtype."""
    if type(x).__module__.split(".")[0] == "torch":
        raise TypeError(
            f"{fn}: `{name}` is a torch.Tensor (dtype {getattr(x, 'dtype', '?')}, shape "
            f"{tuple(getattr(x, 'shape', ()))}); jln takes JAX or NumPy arrays. Convert it with "
            f"jnp.asarray({name}.detach().cpu().numpy()) (bfloat16: through float32, or "
            f"jax.dlpack.from_dlpack({name})); jln.interop.from_torch converts whole modules."
        )
    dtype = getattr(x, "dtype", None)
    if dtype is None or not hasattr(x, "shape"):
        raise TypeError(
            f"{fn}: `{name}` must be a JAX or NumPy array with a floating dtype; received "
            f"{type(x).__name__}. Wrap Python data with jnp.asarray(..., dtype=jnp.float32)."
        )
    if not jnp.issubdtype(dtype, jnp.floating):
        raise TypeError(
            f"{fn}: `{name}` must have a floating dtype (float16, bfloat16, float32 or float64); "
            f"received dtype {np.dtype(dtype).name} with shape {tuple(x.shape)}. "
            f"Cast it first, e.g. {name}.astype(jnp.float32)."
        )


def normalize_axes(axis: Axis, ndim: int, fn: str, name: str = "axis") -> tuple[int, ...]:
    """Turn ``axis`` (an int or a non-empty sequence of ints) into sorted non-negative axes;
    ``name`` is the argument's name in messages.

    Raises:
        TypeError: ``axis`` is not an int or a sequence of ints.
        ValueError: an axis is out of range for ``ndim``, repeated, or the tuple is empty.
    """
    raw: tuple[Any, ...] = tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)
    if ndim == 0:
        raise ValueError(
            f"{fn}: the input is a scalar (rank 0), and a norm needs at least one axis to "
            f"normalize over; received {name}={axis!r}. Give it a feature axis, e.g. x[None]."
        )
    if not raw:
        raise ValueError(
            f"{fn}: `{name}` must name at least one axis to normalize over; received an empty "
            f"{type(axis).__name__}. Use {name}=-1 for the last axis."
        )
    out = []
    for a in raw:
        try:
            if isinstance(a, (bool, np.bool_)):  # an index to operator.index, a slip here
                raise TypeError
            a_int = operator.index(a)
        except TypeError:
            raise TypeError(
                f"{fn}: `{name}` must be an int or a tuple of ints; received {axis!r}."
            ) from None
        if not -ndim <= a_int < ndim:
            raise ValueError(
                f"{fn}: axis {a_int} is out of range for an input of rank {ndim} "
                f"(valid axes are {-ndim}..{ndim - 1}); received {name}={axis!r}."
            )
        out.append(a_int % ndim)
    if len(set(out)) != len(out):
        raise ValueError(
            f"{fn}: `{name}` repeats an axis; received {name}={axis!r}, which resolves to "
            f"{tuple(out)} for rank {ndim}. Name each axis once."
        )
    return tuple(sorted(out))


def feature_shape(shape: Sequence[int], axes: tuple[int, ...]) -> tuple[int, ...]:
    """The shape of ``x`` at the normalized axes, in increasing axis order."""
    return tuple(shape[a] for a in axes)


def check_param(
    p: Any, name: str, x_shape: Sequence[int], axes: tuple[int, ...], fn: str, role: str = "normalized",
) -> None:
    """Raise unless the per-feature parameter ``p`` has the shape of ``x`` at ``axes`` (the
    ``role`` axes in the message: ``"normalized"``, or ``"param_axes"``)."""
    if p is None:
        return
    if isinstance(p, (float, int)) and not isinstance(p, bool):
        # jln.layer_norm(x, 1e-6): a number where the parameter goes is eps given positionally
        lead = {"add": "x, residual", "ada": "x, emb"}.get(fn.rpartition(".")[2][:3], "x")
        raise TypeError(
            f"{fn}: `{name}` must be an array; received the number {p!r}. If that is eps, pass it by "
            f"keyword: eps is keyword-only, e.g. {fn}({lead}, eps={p!r})."
        )
    check_floating(p, fn, name)
    expected = feature_shape(x_shape, axes)
    if tuple(p.shape) != expected:
        hint = ""
        if len(axes) == 1 and math.prod(p.shape) == expected[0]:
            hint = f" Reshape it with {name}.reshape({expected})."
        elif role == "normalized" and 0 < len(p.shape) < len(expected) and tuple(expected[-len(p.shape) :]) == tuple(p.shape):
            # a per-feature parameter over fewer axes than are normalized (flax's feature_axes)
            hint = (
                f" jln's parameters span every normalized axis; to keep normalizing over {axes} "
                f"with this parameter, broadcast it: jnp.broadcast_to({name}, {expected})."
            )
        elif len(axes) < len(p.shape) < len(x_shape) and tuple(x_shape[-len(p.shape) :]) == tuple(p.shape):
            hint = (
                f" It matches the trailing {len(p.shape)} axes of x: to normalize over those, pass "
                f"axis={tuple(range(-len(p.shape), 0))}."
            )
            if "layer_norm" in fn or "LayerNorm" in fn:  # the one family with param_axes
                hint += (
                    f" To keep the statistics over {axes} with parameters over more axes (one row "
                    f"per head), pass param_axes={tuple(range(-len(p.shape), 0))}."
                )
        where = f"axis {axes[0]}" if len(axes) == 1 else "axes " + ", ".join(map(str, axes))
        where = f"the normalized {where}" if role == "normalized" else f"param_axes={axes}"
        raise ValueError(
            f"{fn}: `{name}` must have shape {expected}, x's sizes along {where}; "
            f"received {name}.shape={tuple(p.shape)} for x.shape={tuple(x_shape)}.{hint}"
        )


def check_eps(eps: Any, fn: str) -> float:
    """Raise ``ValueError`` unless ``eps`` is a finite, non-negative Python number."""
    bad = isinstance(eps, (str, bytes, bool)) or (hasattr(eps, "shape") and tuple(eps.shape) != ())
    try:
        value = float(eps)
    except (TypeError, ValueError):
        bad = True
    if bad:
        raise TypeError(
            f"{fn}: `eps` must be a Python float (a concrete number, not a traced value); "
            f"received {eps!r}."
        ) from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{fn}: `eps` must be finite and >= 0; received eps={eps!r}.")
    return value


def check_choice(value: Any, name: str, choices: Sequence[str], fn: str) -> str:
    """Raise ``ValueError`` unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise ValueError(
            f"{fn}: `{name}` must be one of {list(choices)}; received {value!r}."
        )
    return value


def check_same_shape(a: Any, b: Any, names: tuple[str, str], fn: str) -> None:
    """Raise ``ValueError`` unless two arrays have the same shape."""
    if tuple(a.shape) != tuple(b.shape):
        raise ValueError(
            f"{fn}: `{names[0]}` and `{names[1]}` must have the same shape; received "
            f"{tuple(a.shape)} and {tuple(b.shape)}."
        )


# --- distributed: ``axis_name=`` / ``axis_index_groups=`` ------------------------------------


def check_axis_name(axis_name: Any, axis_index_groups: Any, fn: str) -> tuple[Any, Any]:
    """Validate a mapped axis name (and optional groups); return them normalized.

    ``axis_name`` is a mesh axis name (or a tuple of names) bound by ``jax.shard_map`` or
    ``jax.pmap`` over which the normalized axes are split. Groups become a tuple of tuples.

    Raises:
      TypeError: ``axis_name`` is unhashable (a list), or groups are not sequences of ints.
      ValueError: groups without ``axis_name``, or groups that do not partition the axis into
        equal parts.
      NameError: ``axis_name`` is not bound here (JAX's own error type for unbound axes).
    """
    if axis_name is None:
        if axis_index_groups is not None:
            raise ValueError(f"{fn}: `axis_index_groups` needs an `axis_name`; received axis_name=None.")
        return None, None
    if isinstance(axis_name, list):
        axis_name = tuple(axis_name)
    try:
        hash(axis_name)
    except TypeError:
        raise TypeError(
            f"{fn}: `axis_name` must be a mesh axis name (a str) or a tuple of names; received "
            f"{axis_name!r}."
        ) from None
    from jax import lax  # local: _checks otherwise needs only numpy-level jax

    try:
        size = int(lax.axis_size(axis_name))
    except NameError:
        raise NameError(
            f"{fn}: axis_name={axis_name!r} is not bound here. `axis_name` names the mesh axis "
            f"over which the normalized axis is split, and is valid only inside jax.shard_map or "
            f"jax.pmap over that axis. Under plain jax.jit with NamedSharding leave "
            f"axis_name=None: XLA partitions the statistics itself."
        ) from None
    if axis_index_groups is None:
        return axis_name, None
    try:
        groups = tuple(tuple(operator.index(i) for i in g) for g in axis_index_groups)
    except TypeError:
        raise TypeError(
            f"{fn}: `axis_index_groups` must be a sequence of sequences of device indices; "
            f"received {axis_index_groups!r}."
        ) from None
    flat = sorted(i for g in groups for i in g)
    if not groups or len({len(g) for g in groups}) != 1 or flat != list(range(size)):
        raise ValueError(
            f"{fn}: `axis_index_groups` must split the {size} indices of axis {axis_name!r} into "
            f"equal groups, each index once (e.g. [[0, 1], [2, 3]]); received {axis_index_groups!r}."
        )
    return axis_name, groups


def mask(fn: str, mask: Any, shape: tuple[int, ...], name: str = "mask") -> Any:
    """``mask`` as a boolean array of ``shape`` (broadcast; nonzero is true), or ``None``."""
    if mask is None:
        return None
    dt = getattr(mask, "dtype", None)
    if dt is None or not (jnp.issubdtype(dt, jnp.bool_) or jnp.issubdtype(dt, jnp.number)):
        raise TypeError(f"{fn}: `{name}` must be a boolean or numeric array (nonzero: the elements the "
                        f"statistics are taken over); received {type(mask).__name__}"
                        f"{'' if dt is None else f' of dtype {dt}'}.")
    try:
        fits = np.broadcast_shapes(tuple(jnp.shape(mask)), tuple(shape)) == tuple(shape)
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(f"{fn}: `{name}` must broadcast to x.shape={tuple(shape)}; received "
                         f"{name}.shape={tuple(jnp.shape(mask))}.") from None
    m = jnp.asarray(mask)
    return jnp.broadcast_to(m if m.dtype == jnp.bool_ else m != jnp.zeros((), m.dtype), shape)


def channel_axis(
    fn: str, x: Any, channel_axis: Any, min_ndim: int = 2,
    need: str = "a batch and a channel axis", fix: str = "Add a batch axis with x[None].",
) -> int:
    """The channel axis of a floating ``x`` laid out ``[N, C, ...]`` (``channel_axis=1``) or
    ``[N, ..., C]`` (``-1``), as a non-negative int: not the batch axis, ``x`` of rank at least
    ``min_ndim`` (``need`` and ``fix`` word that requirement's error)."""
    check_floating(x, fn)
    if x.ndim < min_ndim:
        raise ValueError(f"{fn}: x must have {need} (rank >= {min_ndim}); received x.shape={tuple(x.shape)}. {fix}")
    if isinstance(channel_axis, (bool, np.bool_)) or not isinstance(channel_axis, (int, np.integer)):
        raise TypeError(f"{fn}: `channel_axis` must be an int (1 for NCHW, -1 for NHWC); received {channel_axis!r}.")
    (c,) = normalize_axes(int(channel_axis), x.ndim, fn)
    if c == 0:
        raise ValueError(
            f"{fn}: channel_axis must not be the batch axis 0; received channel_axis={channel_axis!r} "
            f"for x.shape={tuple(x.shape)}. Use 1 for torch's NCHW layout or -1 for NHWC."
        )
    return c


# --- the operands of a norm call, laid out against ``x`` -----------------------------------

def expand_param(p: Array, ndim: int, axes: tuple[int, ...]) -> Array:
    """Reshape a per-feature parameter (shape of x at ``axes``) so it broadcasts against x."""
    shape = []
    it = iter(p.shape)
    for i in range(ndim):
        shape.append(next(it) if i in axes else 1)
    return p.reshape(shape)


class NormLayout(NamedTuple):
    """A norm call's operands resolved against ``x``: the normalized ``axes`` (sorted,
    non-negative), the axes the parameters span when they are more than those
    (``param_axes``, else ``None``), and ``scale``/``bias`` reshaped to broadcast against
    ``x`` (``None`` where absent)."""

    axes: tuple[int, ...]
    param_axes: tuple[int, ...] | None
    scale: Array | None
    bias: Array | None


def norm_layout(fn: str, x: Any, scale: Any, bias: Any, axis: Axis, param_axes: Axis | None = None) -> NormLayout:
    """Check ``x``, ``axis`` (and ``param_axes``) and the per-feature parameters, once; return
    their :class:`NormLayout`. The parameters have ``x``'s shape at the normalized axes, or at
    ``param_axes`` when given (see :func:`param_layout`)."""
    check_floating(x, fn)
    axes = normalize_axes(axis, x.ndim, fn)
    laid = param_layout(fn, x.ndim, axes, param_axes)
    paxes, role = (axes, "normalized") if laid is None else (laid, "param_axes")
    check_param(scale, "scale", x.shape, paxes, fn, role)
    check_param(bias, "bias", x.shape, paxes, fn, role)
    s = None if scale is None else expand_param(jnp.asarray(scale), x.ndim, paxes)
    b = None if bias is None else expand_param(jnp.asarray(bias), x.ndim, paxes)
    return NormLayout(axes, laid, s, b)


def param_layout(fn: str, ndim: int, axes: tuple[int, ...], param_axes: Axis | None) -> tuple[int, ...] | None:
    """The axes of ``x`` the parameters span (flax's ``feature_axes``), sorted and
    non-negative: every normalized axis plus, e.g., a heads axis (one LayerNorm per head).
    ``None`` when ``param_axes`` is ``None`` or names just the normalized axes (today's layout).

    Raises:
      TypeError, ValueError: as ``axis`` (not ints, out of range, repeated), or ``ValueError``
        when a normalized axis is missing from ``param_axes``.
    """
    if param_axes is None:
        return None
    paxes = normalize_axes(param_axes, ndim, fn, "param_axes")
    missing = [a for a in axes if a not in paxes]
    if missing:
        raise ValueError(
            f"{fn}: `param_axes` must contain every normalized axis (the parameters span the "
            f"normalized axes and, optionally, more, e.g. a heads axis); received "
            f"param_axes={param_axes!r}, which resolves to {paxes} for rank {ndim}, without the "
            f"normalized {missing}. Add them, e.g. param_axes={tuple(sorted({*paxes, *axes}))}."
        )
    return None if paxes == axes else paxes


def dist(fn: str, impl: str, axis_name: Any, axis_index_groups: Any) -> dict[str, Any]:
    """Check ``impl`` and the distributed arguments; return the spec's ``axis_name`` and
    ``axis_index_groups`` fields, normalized."""
    check_choice(impl, "impl", IMPLS, fn)
    name, groups = check_axis_name(axis_name, axis_index_groups, fn)
    return dict(axis_name=name, axis_index_groups=groups)


def residual_sum(fn: str, x: Any, residual: Any, residual_in_fp32: bool) -> Array:
    """``x + residual`` in their promoted dtype, or in float32 (float64 stays) when asked."""
    check_floating(x, fn)
    check_floating(residual, fn, "residual")
    check_same_shape(x, residual, ("x", "residual"), fn)
    dtype = _stats.promote(x.dtype, residual.dtype)
    if residual_in_fp32:
        dtype = _stats.promote(dtype, jnp.float32)
    return add_in(x, residual, dtype)


def zero_centered_scale(fn: str, scale: Array | None, zero_centered: bool) -> Array | None:
    """``1 + scale`` rounded to ``scale``'s dtype when ``zero_centered`` (torch's ``weight + 1``
    in the weight's dtype, before the norm); ``scale`` unchanged otherwise."""
    if not isinstance(zero_centered, bool):
        raise TypeError(f"{fn}: `zero_centered` must be a bool; received {zero_centered!r}.")
    if not zero_centered:
        return scale
    if scale is None:
        raise ValueError(
            f"{fn}: zero_centered=True multiplies by `1 + scale`, but no `scale` was given. Pass a "
            f"scale (zeros is the identity), or use zero_centered=False."
        )
    # round to scale's dtype with an op XLA keeps (a bfloat16 add would be fused into the
    # float32 norm unrounded)
    wide = _stats.promote(scale.dtype, jnp.float32)
    return _stats.round_to(scale.astype(wide) + jnp.ones((), wide), scale.dtype).astype(scale.dtype)


# --- module options -----------------------------------------------------------------------


def _positive_int(value: Any) -> int | None:
    """``value`` as a Python int if it is a positive integer of any kind (``int``, a NumPy
    integer: anything ``operator.index`` takes, but not a bool), else None."""
    if isinstance(value, (bool, np.bool_)):
        return None
    try:
        v = operator.index(value)
    except TypeError:
        return None
    return v if v > 0 else None


def num_features_shape(num_features: Any, fn: str) -> tuple[int, ...]:
    """``num_features`` as a shape tuple of Python ints (an integer means one normalized axis)."""
    one = _positive_int(num_features)
    try:
        sizes = (one,) if one is not None else tuple(_positive_int(n) for n in num_features)
    except TypeError:
        sizes = ()
    if not sizes or any(n is None for n in sizes):
        raise ValueError(
            f"{fn}: `num_features` must be a positive int or a tuple of positive ints (the "
            f"shape of x at the normalized axes); received {num_features!r}."
        )
    return tuple(int(n) for n in sizes if n is not None)


def check_num_features(x: Any, axis: Any, num_features: tuple[int, ...], fn: str, name: str = "axis") -> None:
    """``ValueError`` unless ``x`` has the module's ``num_features`` at the normalized axes (an
    NNX norm declares them; without parameters nothing else would notice a wrong width), or at
    the parameters' axes (``name="param_axes"``)."""
    check_floating(x, fn)
    have = feature_shape(x.shape, normalize_axes(axis, x.ndim, fn, name))
    if have != tuple(num_features):
        raise ValueError(
            f"{fn}: the module was built for num_features={tuple(num_features)} at {name}={axis!r}; "
            f"received x.shape={tuple(x.shape)}, which has {have} there. Build it with "
            f"num_features={have if len(have) > 1 else have[0]}, or pass x with that shape."
        )


def check_positive(value: Any, name: str, fn: str) -> int:
    """``value`` as a Python int; ``ValueError`` unless it is a positive integer (NumPy's too)."""
    v = _positive_int(value)
    if v is None:
        raise ValueError(f"{fn}: `{name}` must be a positive int; received {value!r}.")
    return v


def set_positive(cfg: Any, names: tuple[str, ...], fn: str) -> None:
    """Check each named field of a frozen config with :func:`check_positive` and store the
    Python int."""
    for name in names:
        object.__setattr__(cfg, name, check_positive(getattr(cfg, name), name, fn))


def check_inits(cfg: Any, fn: str, names: tuple[str, ...] = ("scale_init", "bias_init")) -> None:
    """Raise ``TypeError`` unless each of ``names`` (``cfg.scale_init`` and ``cfg.bias_init``
    by default) is None or an initializer ``init(key, shape, dtype)``."""
    for name in names:
        init = getattr(cfg, name)
        if init is not None and not callable(init):
            raise TypeError(
                f"{fn}: `{name}` must be an initializer called as init(key, shape, dtype) (e.g. "
                f"jax.nn.initializers.ones, or one wrapped by flax's with_partitioning for a "
                f"sharded model) or None for the default; received {init!r}."
            )



def _frozen(v: Any) -> Any:
    """Lists as tuples, all the way down (a config is hashable: an nnx GraphDef holds it)."""
    return tuple(_frozen(e) for e in v) if isinstance(v, (list, tuple)) else v


def check_module_options(cfg: Any, fn: str) -> None:
    for name in ("axis", "axis_index_groups", "order"):
        if isinstance(getattr(cfg, name, None), list):
            object.__setattr__(cfg, name, _frozen(getattr(cfg, name)))
    check_choice(cfg.impl, "impl", IMPLS, fn)
    if cfg.dtype is not None:
        dt = jnp.dtype(cfg.dtype)
        if not jnp.issubdtype(dt, jnp.floating):
            raise TypeError(f"{fn}: `dtype` must be a floating dtype or None; received {cfg.dtype!r}.")


def check_torch_names(cfg: Any, fn: str) -> None:
    """Store ``cfg.torch_names`` as a sorted tuple of ``(default, name)`` string pairs (hashable);
    ``TypeError`` unless it is None, a mapping or pairs of strings."""
    names = getattr(cfg, "torch_names", None)
    if names is None:
        return
    try:
        items = list(names.items() if isinstance(names, Mapping) else names)
        ok = bool(items) and all(isinstance(p, (tuple, list)) and len(p) == 2 for p in items)
        pairs = tuple(sorted(tuple(p) for p in items)) if ok else ()
        ok = ok and all(isinstance(s, str) and s for p in pairs for s in p)
    except (TypeError, ValueError):
        ok = False
    if not ok:
        raise TypeError(
            f"{fn}: `torch_names` must be None or a non-empty mapping from torch's parameter name to "
            f"the class's (e.g. {{'weight': 'norm.weight'}}); received {names!r}."
        )
    object.__setattr__(cfg, "torch_names", pairs)


def check_param_axes(cfg: Any, fn: str) -> None:
    """Store ``cfg.param_axes`` as an int or a tuple of ints (a list is frozen); ``TypeError``
    otherwise. Its range and its relation to ``axis`` are checked against ``x`` at the call."""
    pa = cfg.param_axes
    if pa is None:
        return
    items = list(pa) if isinstance(pa, (list, tuple)) else [pa]
    if not items or any(isinstance(a, (bool, np.bool_)) or not isinstance(a, (int, np.integer)) for a in items):
        raise TypeError(
            f"{fn}: `param_axes` must be None, an int or a non-empty tuple of ints (the axes of x the "
            f"scale and bias span, e.g. (1, -1) for one LayerNorm per head of [batch, heads, seq, "
            f"head_dim]); received {pa!r}."
        )
    object.__setattr__(cfg, "param_axes", tuple(int(a) for a in items) if isinstance(pa, (list, tuple)) else int(pa))
