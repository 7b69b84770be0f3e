"""The module kinds of the batch-statistics norms (BatchNorm, InstanceNorm, GroupNorm,
FrozenBatchNorm), for :mod:`jln.linen` and :mod:`jln.nnx` through :class:`jln._modules.Kind`.

Their running statistics are state, not parameters: a kind's ``state`` gives their specs, linen
keeps them in the ``"batch_stats"`` collection (updated by a training call ``apply(...,
mutable=["batch_stats"])``, as flax's ``BatchNorm``), NNX in ``nnx.BatchStat`` variables
(updated by a call in training mode: ``.train()``, the default, as a fresh torch module;
``.eval()`` normalizes with them). The apply functions are pure and call only
:func:`jln.batch_norm`, :func:`jln.instance_norm`, :func:`jln.group_norm` and
:func:`jln.frozen_batch_norm`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp

from jln import _modules as M
from jln import _validate
from jln.families.batch_norm.function import (
    batch_norm,
    frozen_batch_norm,
    group_norm,
    instance_norm,
)
from jln.families.batch_norm.spec import ACTIVATIONS, CONVENTIONS

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class StateSpec(M.ParamSpec):
    """A running statistic: shape, initializer and dtype (``None``: the module's
    ``param_dtype``)."""

    dtype: Any = None


def _counter_init(key: Any, shape: Any, dtype: Any = jnp.int32) -> Array:
    return jnp.zeros(shape, dtype)


CHANNEL_AXIS = M.Option("channel_axis", "int", 1, "the channel axis of ``x``: 1 for torch's NCHW layout, "
                        "-1 for channels-last (NHWC) input.")
EPS = M.Option("eps", "float", 1e-5, "added to the variance inside the square root; torch's default 1e-5.")
MOMENTUM = M.Option("momentum", "float | None", 0.1, "torch's momentum: ``running = (1 - momentum) * running "
                    "+ momentum * batch`` (flax's 0.99 is the complement); ``None``: cumulative average.")
AFFINE = M.Option("affine", "bool", True, "learnable per-channel ``scale`` and ``bias`` (torch's ``weight``/``bias``).")
TRACK = M.Option("track_running_stats", "bool", True, "keep ``running_mean``/``running_var``/"
                 "``num_batches_tracked`` in ``batch_stats``; ``False``: always batch statistics.")
_COMPUTE = (
    M.DTYPE.but(doc="``None``: output in ``x.dtype``; else ``x`` is cast to it first."),
    M.PARAM_DTYPE.but(doc="dtype of the parameters and running statistics (float32)."),
    M.IMPL.but(doc='``"auto"`` or ``"xla"`` (no kernels for this family yet).'),
)


def _channels(cfg: Any, x: Array, name: str, fn: str) -> int:
    _validate.check_floating(x, fn, name)
    if x.ndim < 2:
        raise ValueError(f"{fn}: x must have a batch and a channel axis; received x.shape={tuple(x.shape)}.")
    (c,) = _validate.normalize_axes(cfg.channel_axis, x.ndim, fn)
    return int(x.shape[c])


def _check_channels(cfg: Any, x: Array, n: int, fn: str) -> None:
    have = _channels(cfg, x, "x", fn)
    if have != n:
        raise ValueError(
            f"{fn}: the module was built for num_features={n} channels at channel_axis="
            f"{cfg.channel_axis}; received x.shape={tuple(x.shape)}, which has {have} there."
        )


NUM_FEATURES = M.Shape(
    "num_features", "int", "C, the number of channels (torch's ``num_features``).", 0,
    lambda v, fn: _validate.check_positive(v, "num_features", fn), _channels, _check_channels,
    M.stored_rows("scale"),
)


def _check(fn: str) -> Any:
    def check(cfg: Any) -> None:
        _validate.check_eps(cfg.eps, fn)
        if not hasattr(cfg, "impl"):  # FrozenBatchNorm: eps and the layout only
            return
        _validate.check_module_options(cfg, fn)
        _validate.check_torch_names(cfg, fn)
        if hasattr(cfg, "convention"):
            _validate.check_choice(cfg.convention, "convention", CONVENTIONS, fn)
        if getattr(cfg, "activation", None) is not None:
            _validate.check_choice(cfg.activation, "activation", ACTIVATIONS, fn)
        if getattr(cfg, "momentum", None) is not None:
            m = cfg.momentum
            if isinstance(m, bool) or not isinstance(m, (int, float)) or not 0 <= m <= 1:
                raise ValueError(f"{fn}: `momentum` must be a number in [0, 1] or None; received {m!r}.")
        if cfg.impl in ("native", "pallas"):
            raise ValueError(f"{fn}: impl={cfg.impl!r} is not available: jln has no kernels for this "
                             f"family yet. Use impl='auto' or 'xla'.")
        if hasattr(cfg, "num_groups"):
            _validate.set_positive(cfg, ("num_groups", "num_channels"), fn)
            if cfg.num_channels % cfg.num_groups:
                raise ValueError(f"{fn}: num_channels={cfg.num_channels} must be divisible by "
                                 f"num_groups={cfg.num_groups}.")

    return check


CONVENTION = M.Option("convention", M.literal(CONVENTIONS), "torch", "which of torch's CPU paths is "
                      "reproduced, as :func:`jln.batch_norm`: ``\"torch\"`` its kernels for contiguous "
                      "(or channels-last) input, ``\"strided\"`` its element-wise fallback for other strides "
                      "(``bn(x.transpose(1, 2))``: transformers' PatchTST/PatchTSMixer, with "
                      "``channel_axis=-1``).")
BatchNormConfig = M.make_config(
    "BatchNormConfig", (EPS, MOMENTUM, AFFINE, TRACK, CHANNEL_AXIS, *_COMPUTE, *M.DISTRIBUTED[:1],
                        M.DISTRIBUTED[1], M.TORCH_NAMES, CONVENTION), _check("jln BatchNorm"),
)
InstanceNormConfig = M.make_config(
    "InstanceNormConfig", (EPS, MOMENTUM, AFFINE.but(default=False), TRACK.but(default=False), CHANNEL_AXIS,
                           *_COMPUTE), _check("jln InstanceNorm"),
)
GroupNormConfig = M.make_config(
    "GroupNormConfig", (M.Option("num_groups", "int", doc="number of groups the channels are split into."),
                        M.Option("num_channels", "int", doc="C, the number of channels (divisible by num_groups)."),
                        EPS, AFFINE, CHANNEL_AXIS, *_COMPUTE, M.TORCH_NAMES,
                        M.Option("frame_axis", "int | None", None, "an axis whose every index gets its own "
                                 "statistics (2: each frame of ``[N, C, T, H, W]`` video, as the video VAEs' "
                                 "per-frame GroupNorm); ``None``: torch's GroupNorm."),
                        M.Option("activation", M.literal(ACTIVATIONS, optional=True), None, "``\"relu\"``, ``\"silu\"`` or "
                                 "``\"gelu\"`` applied to the output (transformers' "
                                 "``BitGroupNormActivation``); ``None``: none.")), _check("jln GroupNorm"),
)
FrozenBatchNormConfig = M.make_config(
    "FrozenBatchNormConfig", (EPS, CHANNEL_AXIS, M.PARAM_DTYPE.but(doc="dtype of the four buffers (float32).")),
    _check("jln FrozenBatchNorm"),
)


def affine_specs(cfg: Any, n: int) -> dict[str, Any]:
    return {"scale": M.ParamSpec((n,), M.ones), "bias": M.ParamSpec((n,), M.zeros)} if cfg.affine else {}


def running_specs(cfg: Any, n: int) -> dict[str, Any]:
    """``running_mean`` (zeros), ``running_var`` (ones), ``num_batches_tracked`` (int32 0)."""
    if not getattr(cfg, "track_running_stats", True):
        return {}
    out = {"running_mean": StateSpec((n,), M.zeros), "running_var": StateSpec((n,), M.ones)}
    if hasattr(cfg, "axis_name"):  # BatchNorm counts its steps; InstanceNorm does not
        out["num_batches_tracked"] = StateSpec((), _counter_init, jnp.int32)
    return out


def _in(x: Array, cfg: Any) -> Array:
    return x if cfg.dtype is None else x.astype(cfg.dtype)


def _running(fn: Any, params: Any, x: Array, cfg: Any, state: dict[str, Any], training: bool, **kw: Any) -> Any:
    y, st = fn(
        _in(x, cfg), state.get("running_mean"), state.get("running_var"), params.get("scale"),
        params.get("bias"), training=training, momentum=cfg.momentum, eps=cfg.eps,
        channel_axis=cfg.channel_axis, impl=cfg.impl, **kw,
    )
    new = None
    if training and state:
        new = {"running_mean": st.mean, "running_var": st.var}
        if "num_batches_tracked" in state:
            new["num_batches_tracked"] = st.num_batches_tracked
    return (y, new), None


def apply_batch_norm(params: Any, x: Array, cfg: Any, *, state: dict[str, Any], training: bool) -> Any:
    """``jln.batch_norm`` with the module's options; returns ``((y, new_state or None), None)``."""
    return _running(batch_norm, params, x, cfg, state, training,
                    num_batches_tracked=state.get("num_batches_tracked"), convention=cfg.convention,
                    **M.distributed(cfg))


def apply_instance_norm(params: Any, x: Array, cfg: Any, *, state: dict[str, Any], training: bool) -> Any:
    """``jln.instance_norm`` with the module's options."""
    return _running(instance_norm, params, x, cfg, state, training)


def apply_group_norm(params: Any, x: Array, cfg: Any, *, state: dict[str, Any], training: bool,
                     padding_mask: Array | None = None) -> Any:
    """``jln.group_norm`` (no state); with ``padding_mask``, its statistics over the mask's
    nonzero elements and the output multiplied by it (PE's masked GroupNorm)."""
    _check_channels(cfg, x, cfg.num_channels, "jln GroupNorm")
    x = _in(x, cfg)
    mask = _validate.mask("jln GroupNorm", padding_mask, tuple(x.shape), "padding_mask")
    y = group_norm(x, cfg.num_groups, params.get("scale"), params.get("bias"), eps=cfg.eps,
                   channel_axis=cfg.channel_axis, impl=cfg.impl, frame_axis=cfg.frame_axis,
                   activation=cfg.activation, mask=mask)
    if mask is not None:  # torch's x_norm * padding_mask (NaN where a group has no element)
        y = y * mask.astype(y.dtype)
    return (y, None), None


def apply_frozen_batch_norm(params: Any, x: Array, cfg: Any, *, state: dict[str, Any], training: bool) -> Any:
    """``jln.frozen_batch_norm`` (nothing is updated)."""
    y = frozen_batch_norm(x, state["running_mean"], state["running_var"], state["scale"], state["bias"],
                          eps=cfg.eps, channel_axis=cfg.channel_axis)
    return (y, None), None


_STATE_DOC = (
    "Running statistics: linen keeps ``running_mean``, ``running_var`` and ``num_batches_tracked`` in the "
    "``\"batch_stats\"`` collection: ``apply(variables, x, mutable=[\"batch_stats\"])`` is a training "
    "step (batch statistics; returns ``(y, updates)``), ``apply(variables, x)`` is torch's eval mode "
    "(running statistics); ``use_running_average=True``/``False`` at the call forces either; ``init`` "
    "leaves them as initialised. NNX keeps them as ``nnx.BatchStat`` and updates them in training mode "
    "(the default, as a fresh torch module, or after ``.train()``; ``.eval()`` normalizes with them)."
)
_RAISES = ("TypeError, ValueError: bad options (``momentum`` outside [0, 1], ``impl`` ``\"native\"``/"
           "``\"pallas\"``), an input whose channels differ from the module's, and (linen) "
           "``use_running_average=False`` without ``mutable=[\"batch_stats\"]``; as the function otherwise.")
_CALL = (("use_running_average", None, "bool | None"),)

BATCH_NORM = M.Kind(
    "BatchNorm", BatchNormConfig, lambda cfg, n: affine_specs(cfg, n), apply_batch_norm, ("x",),
    doc="BatchNorm with torch's semantics (``nn.BatchNorm1d/2d/3d``; ``SyncBatchNorm`` with "
        "``axis_name``): batch statistics in training mode, running statistics in eval mode.\n\n"
        "Calls :func:`jln.batch_norm`: the output uses the biased batch variance, ``running_var`` the "
        "unbiased one, ``running = (1 - momentum) * running + momentum * batch``.\n\n" + _STATE_DOC,
    returns="(``__call__(x, use_running_average=None)``): array of ``x.shape``, dtype ``x.dtype`` (or "
            "``dtype``).",
    raises=_RAISES,
    examples=(M.LINEN_IMPORTS + "  >>> x = jnp.arange(8.0).reshape(4, 2)\n  >>> m = jnn.BatchNorm()\n"
              "  >>> v = m.init(jax.random.key(0), x)\n  >>> y, upd = m.apply(v, x, mutable=[\"batch_stats\"])\n"
              "  >>> upd[\"batch_stats\"][\"running_mean\"]\n  Array([0.3, 0.4], dtype=float32)",
              M.NNX_IMPORTS + "  >>> m = jnnx.BatchNorm(2)\n  >>> _ = m(jnp.arange(8.0).reshape(4, 2))\n"
              "  >>> m.running_mean[...], int(m.num_batches_tracked[...])\n"
              "  (Array([0.3, 0.4], dtype=float32), 1)"),
    rngs_doc="unused (ones and zeros initializers); accepted for symmetry.", shapes=(NUM_FEATURES,),
    call_options=_CALL, state=running_specs, flax_twin=True,
)
INSTANCE_NORM = dataclasses.replace(
    BATCH_NORM, name="InstanceNorm", config=InstanceNormConfig, apply=apply_instance_norm,
    doc="InstanceNorm with torch's semantics (``nn.InstanceNorm1d/2d/3d``): statistics per sample and "
        "channel over the spatial axes; by default (torch's) no affine and no running statistics.\n\n"
        "Calls :func:`jln.instance_norm`. With ``track_running_stats=True``: running ``running_mean``/"
        "``running_var`` (no counter), updated as torch does, used in eval mode.",
    examples=(M.LINEN_IMPORTS + "  >>> x = jnp.arange(8.0).reshape(1, 2, 4)\n  >>> m = jnn.InstanceNorm()\n"
              "  >>> m.apply(m.init(jax.random.key(0), x), x).shape\n  (1, 2, 4)",
              M.NNX_IMPORTS + "  >>> jnnx.InstanceNorm(2)(jnp.arange(8.0).reshape(1, 2, 4)).shape\n  (1, 2, 4)"),
)
GROUP_NORM = dataclasses.replace(
    BATCH_NORM, name="GroupNorm", config=GroupNormConfig, specs=lambda cfg: affine_specs(cfg, cfg.num_channels),
    apply=apply_group_norm, shapes=(), positional=2, state=lambda cfg: {},
    call_options=(("padding_mask", None, "jax.Array | None"),),
    doc="GroupNorm with torch's numbers (``nn.GroupNorm(num_groups, num_channels)``): statistics per "
        "sample over each group's channels and the spatial axes, per-channel affine, eps 1e-5.\n\n"
        "Calls :func:`jln.group_norm`. No running statistics. ``padding_mask`` (array broadcastable to "
        "``x``, torch's keyword) is the masked GroupNorm of transformers' PE audio/video encoders: each "
        "group's statistics over the mask's nonzero elements, the output multiplied by the mask.",
    returns="(``__call__(x, padding_mask=None)``): array of ``x.shape``, dtype ``x.dtype`` (or ``dtype``).",
    raises="TypeError, ValueError: ``num_channels`` not divisible by ``num_groups``, an input with "
           "another channel count, a ``padding_mask`` that does not broadcast to ``x``; as "
           ":func:`jln.group_norm` otherwise.",
    examples=(M.LINEN_IMPORTS + "  >>> x = jnp.ones((2, 4, 3))\n  >>> m = jnn.GroupNorm(num_groups=2, num_channels=4)\n"
              "  >>> m.apply(m.init(jax.random.key(0), x), x).shape\n  (2, 4, 3)",
              M.NNX_IMPORTS + "  >>> jnnx.GroupNorm(2, 4)(jnp.ones((2, 4, 3))).shape\n  (2, 4, 3)"),
)
FROZEN_BATCH_NORM = dataclasses.replace(
    BATCH_NORM, name="FrozenBatchNorm", config=FrozenBatchNormConfig,
    specs=lambda cfg, n: {}, apply=apply_frozen_batch_norm, call_options=(),
    state=lambda cfg, n: {"scale": StateSpec((n,), M.ones), "bias": StateSpec((n,), M.zeros),
                          "running_mean": StateSpec((n,), M.zeros), "running_var": StateSpec((n,), M.ones)},
    doc="The DETR family's ``FrozenBatchNorm2d`` (transformers ``DetrFrozenBatchNorm2d`` and its "
        "copies): fixed statistics and affine, torch's rounding order ``x * s + (b - mean * s)``, "
        "``s = w * rsqrt(var + eps)``.\n\nCalls :func:`jln.frozen_batch_norm`. All four are buffers in "
        "torch, so here they are state, never trained nor updated: ``scale`` (torch's ``weight``), "
        "``bias``, ``running_mean`` and ``running_var`` in linen's ``\"batch_stats\"`` collection, as "
        "``nnx.BatchStat`` in NNX (an optimizer over ``nnx.Param`` leaves them frozen).",
    returns="(``__call__(x)``): array of ``x.shape``, dtype promoted from ``x``'s and the buffers' "
            "(bfloat16 ``x`` with float32 buffers: float32, as torch).",
    raises="TypeError, ValueError: an input whose channels differ from the module's.",
    examples=(M.LINEN_IMPORTS + "  >>> x = jnp.ones((1, 2, 3, 3))\n  >>> m = jnn.FrozenBatchNorm()\n"
              "  >>> m.apply(m.init(jax.random.key(0), x), x).shape\n  (1, 2, 3, 3)",
              M.NNX_IMPORTS + "  >>> jnnx.FrozenBatchNorm(2)(jnp.ones((1, 2, 3, 3))).shape\n  (1, 2, 3, 3)"),
)


STATEFUL = (BATCH_NORM, INSTANCE_NORM, GROUP_NORM, FROZEN_BATCH_NORM)
