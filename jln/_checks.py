"""Argument validation shared by every public function, module and kernel.

Every check runs eagerly on static information (shapes, dtypes, Python values), before any
tracing, so a bad call fails with a message that states the rule, what was received and how
to fix it. No other file in jln re-implements these rules.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np

Axis = int | Sequence[int]


def rows_and_width(shape: Sequence[int], n_axes: int) -> tuple[int, int]:
    """``(rows, n)`` of an array of ``shape`` whose last ``n_axes`` axes are normalized: the
    layout every kernel takes (``[rows, n]``)."""
    k = len(shape) - n_axes
    return math.prod(shape[:k]), math.prod(shape[k:])


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
