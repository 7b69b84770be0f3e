"""Every Flax module, written once for :mod:`jln.linen` and :mod:`jln.nnx`.

Each module kind is one :class:`Kind` record (``LAYER_NORM``, ``RMS_NORM``...) holding:

* its options, each an :class:`Option` (name, type, default, doc line) declared once and
  gathered in a generated frozen config dataclass (``LayerNormConfig``...), validated in
  ``__post_init__``: the linen fields, the NNX arguments and ``module.cfg`` on both faces;
* the sizes linen infers from the inputs and NNX takes first (:class:`Shape`);
* a ``*_specs`` function giving the parameter tree: names, shapes and initializers;
* an ``apply_*`` pure function ``(params, *inputs, cfg) -> (outputs, stats)`` that calls the
  :mod:`jln` core functions (``stats``: the monitor record, ``None`` unless ``cfg.monitor``);
* the parts of its docstring.

The linen and NNX classes are generated from the record (fields, signatures, docstrings) and
only create the parameters from the specs and call ``apply_*``, so the two front-ends cannot
drift. Norm math is only ever ``jln.layer_norm``, ``jln.rms_norm``,
``jln.adaptive_layer_norm`` and ``jln.modulate``; attention lives once in :func:`mha`.

dtype policy (both front-ends): ``dtype=None`` keeps the core functions' rule for the norms
(torch: output in the input dtype; the named RMS conventions as in ``jln.rms_norm``) and
runs Dense/attention layers in the dtype of the module's main input ``x`` (parameters are
cast to it at use, as torch autocast does). ``dtype=d`` casts ``x`` (and conditions) to
``d``, runs everything in ``d`` (norm statistics stay float32) and returns ``d``.
Parameters are stored in ``param_dtype``.
"""

from __future__ import annotations

import dataclasses
import math
import textwrap
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jln import _monitor, _stats, _validate
from jln._adaptive import (
    adaptive_layer_norm,
    adaptive_rms_norm,
    modulate,
    resolve_order,
)
from jln._contract.gated_rms_norm import ACTIVATIONS as GATED_ACTIVATIONS
from jln._contract.gated_rms_norm import resolve_convention as resolve_gated
from jln._contract.layer_norm import resolve_convention as resolve_ln
from jln._contract.rms_norm import resolve_convention
from jln._gated import gated_rms_norm
from jln._layer_norm import layer_norm
from jln._rms_norm import rms_norm

Array = jax.Array
Params = Mapping[str, Any]
Stats = dict[str, Any] | None

# --------------------------------------------------------------------------- param specs


@dataclasses.dataclass(frozen=True)
class ParamSpec:
    """One parameter: its shape and initializer ``init(key, shape, dtype) -> Array``."""

    shape: tuple[int, ...]
    init: Callable[..., Array]


ones = jax.nn.initializers.ones
zeros = jax.nn.initializers.zeros
#: torch ``nn.Linear``'s default kernel init (kaiming_uniform with a=sqrt(5)),
#: U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
dense_kernel_init = jax.nn.initializers.variance_scaling(1.0 / 3.0, "fan_in", "uniform")
#: xavier_uniform over torch's packed ``[3d, d]`` q/k/v weight (``nn.MultiheadAttention``'s
#: in_proj, timm's qkv Linear in DiT), on one ``[d, d]`` block of it:
#: U(+-sqrt(6 / (d + 3d))) = U(+-sqrt(3 * 0.5 / d)).
qkv_kernel_init = jax.nn.initializers.variance_scaling(0.5, "fan_avg", "uniform")
#: xavier_uniform (DiT's Linear layers).
xavier_kernel_init = jax.nn.initializers.glorot_uniform()


def torch_bias_init(fan_in: int) -> Callable[..., Array]:
    """torch ``nn.Linear``'s default bias init, U(-1/sqrt(fan_in), 1/sqrt(fan_in))."""
    bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0

    def init(key: Array, shape: Any, dtype: Any = jnp.float32) -> Array:
        return jax.random.uniform(key, shape, jnp.float32, -bound, bound).astype(dtype)

    return init


def dense_specs(
    n_in: int, n_out: int, *, use_bias: bool = True, zero: bool = False, kernel_init: Any = None, bias_init: Any = None,
) -> dict[str, ParamSpec]:
    """``{"kernel": [n_in, n_out], "bias": [n_out]}``, initialised as torch's ``nn.Linear`` unless
    ``kernel_init``/``bias_init`` say otherwise; ``zero`` initialises both to 0 (adaLN-Zero)."""
    kernel = zeros if zero else dense_kernel_init if kernel_init is None else kernel_init
    specs = {"kernel": ParamSpec((n_in, n_out), kernel)}
    if use_bias:
        specs["bias"] = ParamSpec((n_out,), zeros if zero else torch_bias_init(n_in) if bias_init is None else bias_init)
    return specs


# --------------------------------------------------------------------------- helpers


def compute_dtype(cfg_dtype: Any, x: Array) -> jnp.dtype:
    """The dtype Dense/attention layers run in: ``dtype`` if given, else ``x.dtype``."""
    return jnp.dtype(x.dtype if cfg_dtype is None else cfg_dtype)


def dense(p: Params, x: Array, dtype: Any, fn: str = "jln Dense", name: str = "x") -> Array:
    """``x @ kernel + bias`` in ``dtype`` (torch ``nn.Linear`` with ``weight = kernel.T``)."""
    _validate.check_floating(x, fn, name)
    n_in = p["kernel"].shape[0]
    if x.ndim == 0 or x.shape[-1] != n_in:
        raise ValueError(
            f"{fn}: the last axis of `{name}` must have {n_in} features (the layer's kernel is "
            f"{tuple(p['kernel'].shape)}); received {name}.shape={tuple(x.shape)}."
        )
    # accumulate in float32 and add the bias before the one rounding to `dtype`, as torch's
    # addmm does: rounding the product first disagrees with torch on ~1/4 of bf16 elements
    acc = _stats.stats_dtype(dtype)
    y = jnp.matmul(x.astype(dtype), p["kernel"].astype(dtype), preferred_element_type=acc)
    if "bias" in p:
        b = p["bias"].astype(dtype).astype(acc)
        y = y + b.reshape((1,) * (y.ndim - 1) + b.shape)  # explicit rank: strict-rank safe
    return y.astype(dtype)


def silu(v: Array) -> Array:
    """SiLU evaluated in the statistics dtype and rounded once, as torch's fused kernel does
    (``jax.nn.silu`` on bfloat16 rounds twice and disagrees with torch on ~38% of elements)."""
    return jax.nn.silu(v.astype(_stats.stats_dtype(v.dtype))).astype(v.dtype)


#: activations a conditioning projection may apply first (diffusers' ``get_activation``:
#: ``swish`` is SiLU; ``gelu`` the exact erf form); each evaluated in the statistics dtype and
#: rounded once, as torch's fused kernels do
COND_ACTIVATIONS: dict[str, Callable[[Array], Array]] = {
    "silu": jax.nn.silu,
    "swish": jax.nn.silu,
    "mish": lambda v: v * jnp.tanh(jax.nn.softplus(v)),
    "gelu": lambda v: jax.nn.gelu(v, approximate=False),
    "relu": jax.nn.relu,
    "sigmoid": jax.nn.sigmoid,
}


def activate(name: str | None, v: Array) -> Array:
    """``v`` through the activation ``name`` (:data:`COND_ACTIVATIONS`), ``None``: unchanged."""
    if name is None:
        return v
    return COND_ACTIVATIONS[name](v.astype(_stats.stats_dtype(v.dtype))).astype(v.dtype)


def check_activation(value: Any, fn: str) -> None:
    """``ValueError`` unless ``value`` is None or a name in :data:`COND_ACTIVATIONS`."""
    if value is not None and value not in COND_ACTIVATIONS:
        raise ValueError(f"{fn}: `activation` must be None or one of {sorted(COND_ACTIVATIONS)}; received "
                         f"{value!r}.")


def _cast_in(x: Array, dtype: Any) -> Array:
    return x if dtype is None else x.astype(dtype)


def _cast_out(y: Array, dtype: Any) -> Array:
    return y if dtype is None else y.astype(dtype)


def _record(monitor: bool, x: Array, y: Array, axis: Any, fn: str) -> Stats:
    if not monitor:
        return None
    return _monitor.row_stats(x, y, _validate.normalize_axes(axis, x.ndim, fn))


def _param(features: tuple[int, ...], init: Any, default: Callable[..., Array]) -> ParamSpec:
    return ParamSpec(features, default if init is None else init)


def distributed(cfg: Any) -> dict[str, Any]:
    """The ``axis_name``/``axis_index_groups`` options of a norm config, for the core call."""
    return dict(axis_name=cfg.axis_name, axis_index_groups=cfg.axis_index_groups)


# --------------------------------------------------------------------------- options


@dataclasses.dataclass(frozen=True)
class Option:
    """One module option, declared once for both front-ends: the linen field, the NNX argument
    and the config field of that name all come from it."""

    name: str
    type: str  # the annotation, as text
    default: Any = dataclasses.field(default_factory=lambda: dataclasses.MISSING)  # MISSING: required
    doc: str = ""

    def but(self, **changes: Any) -> Option:
        return dataclasses.replace(self, **changes)


def make_config(name: str, options: tuple[Option, ...], check: Callable[[Any], None], **members: Any) -> type:
    """The frozen dataclass holding ``options`` (in that order), validated by ``check`` in
    ``__post_init__``; each field keeps its doc line in ``metadata["doc"]``."""

    def field(o: Option) -> Any:
        return dataclasses.field(default=o.default, metadata={"doc": o.doc})

    def __post_init__(self: Any) -> None:
        check(self)

    return dataclasses.make_dataclass(
        name, [(o.name, o.type, field(o)) for o in options], frozen=True,
        namespace={"__post_init__": __post_init__, "__module__": __name__, **members},
    )


def _req(name: str, doc: str) -> Option:
    return Option(name, "int", doc=doc)


EPS = Option("eps", "float", 1e-5, "LayerNorm eps, added to the variance (torch's default 1e-5).")
DTYPE = Option("dtype", "Any", None, "``None``: output in ``x.dtype`` (Dense layers run in the main "
               "input's dtype); else compute in and return this dtype.")
PARAM_DTYPE = Option("param_dtype", "Any", jnp.float32, "dtype of the parameters (float32).")
IMPL = Option("impl", "str", "auto", '``"auto"``, ``"xla"``, ``"native"`` or ``"pallas"``, as '
              ":func:`jln.layer_norm`.")
MONITOR = Option("monitor", "bool", False, "record per-row input/output statistics "
                 "(``jln._monitor.row_stats``): linen sows them into ``\"intermediates\"``, NNX "
                 "as an ``nnx.Intermediate``, both named ``\"stats\"``.")
COMPUTE = (DTYPE, PARAM_DTYPE, IMPL, MONITOR)
DISTRIBUTED = (
    Option("axis_name", "Any", None, "inside ``jax.shard_map``/``jax.pmap``, the mesh axis over which "
           "the normalized axis is split (tensor parallelism); parameters are then the local "
           "blocks, see :func:`jln.layer_norm`. The monitor's statistics stay per device."),
    Option("axis_index_groups", "Any", None, "with ``axis_name``, the device groups that each hold "
           "one row's blocks (as ``jax.lax.psum``)."),
)
SCALE_INIT = Option("scale_init", "Any", None, "initializer ``init(key, shape, dtype)`` of the "
                    "norm's ``scale``; ``None``: ones. Wrap one in flax's ``with_partitioning`` "
                    "(linen: or ``with_logical_partitioning``) to annotate how a sharded model "
                    "splits the parameter.")
BIAS_INIT = Option("bias_init", "Any", None, "initializer of the norm's ``bias``; ``None``: zeros.")
TORCH_NAMES = Option("torch_names", "Any", None, "the torch ``state_dict`` names of a class that holds "
                     "this norm's tensors under other names: a mapping from torch's default name to the "
                     "class's (``{\"weight\": \"norm.weight\", \"bias\": \"norm.bias\"}``, "
                     "``{\"weight\": \"gamma\"}``; a name with ``{}``, ``\"norms.{}.weight\"``, splits the "
                     "tensor along its first axis, one per index: StableLM's per-head norms), used by "
                     "``jln.interop.to_torch_state_dict``; "
                     "``None``: torch's names. Numbers are unaffected.")


USE_SCALE = Option("use_scale", "bool", True, "learnable ``scale`` (torch's ``elementwise_affine``).")
USE_BIAS = Option("use_bias", "bool", True, "learnable ``bias`` (torch's ``bias``).")
FEATURES = _req("features", "d, the size of ``x``'s last axis (with ``axis_name``: the local size).")
INITS = (
    Option("kernel_init", "Any", None, "initializer of every Dense kernel; ``None``: torch's."),
    Option("bias_init", "Any", None, "initializer of every Dense bias; ``None``: torch's."),
)


def _dense_inits(name: str, default: str) -> tuple[Option, Option]:
    return (Option(f"{name}_kernel_init", "Any", None, f"``{name}``'s kernel initializer; ``None``: {default}."),
            Option(f"{name}_bias_init", "Any", None, f"``{name}``'s bias initializer; ``None``: {default}."))


@dataclasses.dataclass(frozen=True)
class Shape:
    """A size that linen infers from an input at the first call and NNX takes as an argument
    (first, positional): ``take`` checks the NNX argument, ``infer`` reads it off linen's input
    ``inputs[input]``, ``check`` (NNX, optional) holds a call's input against it."""

    name: str
    type: str
    doc: str
    input: int
    take: Callable[[Any, str], Any]
    infer: Callable[[Any, Array, str, str], Any]  # (cfg, x, input name, fn)
    check: Callable[[Any, Array, Any, str], None] | None = None  # (cfg, x, size, fn)


def _infer_features(cfg: Any, x: Array, name: str, fn: str) -> tuple[int, ...]:
    _validate.check_floating(x, fn, name)
    pa = getattr(cfg, "param_axes", None)
    axes = _validate.normalize_axes(cfg.axis, x.ndim, fn)
    if pa is not None:  # the parameters' shape: x's sizes at param_axes
        axes = _validate.param_layout(fn, x.ndim, axes, pa) or axes
    return _validate.feature_shape(x.shape, axes)


def _infer_last(cfg: Any, x: Array, name: str, fn: str) -> int:
    _validate.check_floating(x, fn, name)
    if x.ndim == 0:
        raise ValueError(f"{fn}: `{name}` must have a feature axis; received a scalar.")
    return int(x.shape[-1])


def _check_features(cfg: Any, x: Array, n: tuple[int, ...], fn: str) -> None:
    """:func:`check_num_features` at the axes the parameters span: ``param_axes`` where the kind
    has it and it is set, else ``axis``."""
    pa = getattr(cfg, "param_axes", None)
    _validate.check_num_features(x, cfg.axis if pa is None else pa, n, fn, "axis" if pa is None else "param_axes")


NUM_FEATURES = Shape(
    "num_features", "int | tuple[int, ...]", "shape of ``x`` at ``axis`` (LayerNorm: at ``param_axes`` when set; an int for one axis).", 0,
    _validate.num_features_shape, _infer_features, _check_features,
)


def _cond_features(input_name: str) -> Shape:
    return Shape("cond_features", "int", f"size of ``{input_name}``'s last axis.", 1,
                 lambda v, fn: _validate.check_positive(v, "cond_features", fn), _infer_last)


# --------------------------------------------------------------------------- LayerNorm


AXIS = Option("axis", "Axis", -1, "axis or axes to normalize over; parameters have the shape of ``x`` there.")


def _check_layer_norm(cfg: Any) -> None:
    _validate.check_eps(cfg.eps, "jln LayerNorm")
    _validate.check_torch_names(cfg, "jln LayerNorm")
    _validate.check_module_options(cfg, "jln LayerNorm")
    _validate.check_inits(cfg, "jln LayerNorm")
    resolve_ln(cfg.convention, "jln LayerNorm")
    _validate.check_param_axes(cfg, "jln LayerNorm")
    if cfg.zero_centered and not cfg.use_scale:
        raise ValueError(
            "jln LayerNorm: zero_centered=True multiplies by `1 + scale`, so it needs use_scale=True; "
            "received use_scale=False."
        )


LayerNormConfig = make_config(
    "LayerNormConfig",
    (EPS.but(doc="added to the variance; torch's default 1e-5 (flax's LayerNorm uses 1e-6)."), AXIS, USE_SCALE,
     USE_BIAS, *COMPUTE, *DISTRIBUTED, SCALE_INIT, BIAS_INIT,
     Option("zero_centered", "bool", False, "multiply by ``1 + scale`` (Nemotron's ``LayerNorm1P``, "
            "TransformerEngine's ``zero_centered_gamma``), ``1 + scale`` rounded to ``param_dtype``; "
            "``scale`` then initialises to 0. ``axis=1`` gives channels-first LayerNorm "
            "(``LayerNorm2d``, ``data_format=\"channels_first\"``)."),
     Option("convention", "str", "torch", "where the reference rounds, as :func:`jln.layer_norm`: "
            "``\"torch\"``, ``\"deberta\"`` (the row rounded to the input dtype, then the affine; "
            "alias ``\"moonshine\"``) or ``\"eager\"`` (every op in the input dtype; alias "
            "``\"vitdet\"``). With ``dtype=None`` the latter two promote a bf16 ``x`` with float32 "
            "parameters to float32, as torch's ``weight * h`` does."), TORCH_NAMES,
     Option("param_axes", "Any", None, "the axes of ``x`` that ``scale`` and ``bias`` span, as "
            ":func:`jln.layer_norm`: every axis in ``axis`` plus more (flax's ``feature_axes``), e.g. "
            "``param_axes=(1, -1)`` with ``axis=-1`` on ``[batch, heads, seq, head_dim]``: one LayerNorm "
            "per head, parameters ``(heads, head_dim)`` (NNX: ``num_features`` is that shape). ``None``: "
            "``axis``. Runs on the XLA path.")),
    _check_layer_norm,
)


def layer_norm_specs(cfg: Any, features: tuple[int, ...], scale_init: Callable[..., Array] = ones) -> dict[str, ParamSpec]:
    """``scale`` (``scale_init`` unless ``cfg.scale_init``) and ``bias`` (zeros), as the options say."""
    if getattr(cfg, "zero_centered", False):
        scale_init = zeros  # 1 + scale: the identity weight is 0
    specs = {}
    if cfg.use_scale:
        specs["scale"] = _param(features, cfg.scale_init, scale_init)
    if cfg.use_bias:
        specs["bias"] = _param(features, cfg.bias_init, zeros)
    return specs


def _apply_norm(norm: Callable[..., Array], params: Params, x: Array, cfg: Any, fn: str, **options: Any) -> tuple[Array, Stats]:
    """``norm(x, scale, bias=bias, ...)`` with the module's dtype rule and monitor."""
    xi = _cast_in(x, cfg.dtype)
    y = norm(
        xi, params.get("scale"), bias=params.get("bias"), axis=cfg.axis, eps=cfg.eps, impl=cfg.impl,
        **distributed(cfg), **options,
    )
    y = _cast_out(y, cfg.dtype)
    return y, _record(cfg.monitor, xi, y, cfg.axis, fn)


def apply_layer_norm(params: Params, x: Array, cfg: Any) -> tuple[Array, Stats]:
    """``jln.layer_norm(x, scale, bias)`` with the module's dtype rule and monitor."""
    options: dict[str, Any] = {} if cfg.convention == "torch" else {"convention": cfg.convention}
    if cfg.zero_centered:
        options["zero_centered"] = True
    if cfg.param_axes is not None:
        options["param_axes"] = cfg.param_axes
    return _apply_norm(layer_norm, params, x, cfg, "jln LayerNorm", **options)


# --------------------------------------------------------------------------- RMSNorm


def _canonical(cfg: Any) -> str:
    """The convention's canonical name (``"qwen2"`` -> ``"llama"``)."""
    return resolve_convention(cfg.convention, "jln RMSNorm")


def _check_rms_norm(cfg: Any) -> None:
    fn = "jln RMSNorm"
    resolve_convention(cfg.convention, fn)
    _validate.check_torch_names(cfg, fn)
    _validate.check_inits(cfg, fn)
    if cfg.eps is not None:
        _validate.check_eps(cfg.eps, fn)
    if cfg.use_bias and (_canonical(cfg) != "diffusers" or not cfg.use_scale):
        raise ValueError(
            f"{fn}: use_bias=True is only defined for convention='diffusers' with "
            f"use_scale=True (diffusers' RMSNorm with bias); received "
            f"convention={cfg.convention!r}, use_scale={cfg.use_scale}."
        )
    _validate.check_module_options(cfg, fn)


RMSNormConfig = make_config(
    "RMSNormConfig",
    (EPS.but(type="float | None", default=None, doc="``None`` takes the convention's default (torch: "
             "``finfo(float32).eps``)."),
     Option("convention", "str", "torch", "``\"torch\"``, ``\"llama\"``, ``\"gemma\"``, ``\"t5\"``, "
            "``\"diffusers\"``, ``\"seed\"``, ``\"eager\"``, ``\"round_rstd\"`` or ``\"input_scaled\"`` (cast "
            "order and eps default as :func:`jln.rms_norm`); ``\"input_scaled\"`` also initialises ``scale`` to 0; "
            "``\"gemma\"`` initialises ``scale`` to 0 (it multiplies by ``1 + scale``). With "
            "``dtype=None`` the output dtype is the convention's (``\"llama\"``: bf16 x with float32 "
            "scale gives float32)."),
     AXIS, USE_SCALE.but(doc="learnable ``scale``."),
     USE_BIAS.but(default=False, doc="learnable ``bias`` (``convention=\"diffusers\"`` only)."), *COMPUTE,
     *DISTRIBUTED, SCALE_INIT.but(doc="as :class:`LayerNorm`'s; ``None``: the convention's identity (ones, "
                                  "zeros for ``\"gemma\"`` and ``\"input_scaled\"``)."), BIAS_INIT, TORCH_NAMES),
    _check_rms_norm, canonical=property(_canonical),
)


def rms_norm_specs(cfg: Any, features: tuple[int, ...]) -> dict[str, ParamSpec]:
    # Gemma multiplies by (1 + scale), so its identity weight is 0.
    return layer_norm_specs(cfg, features, zeros if _canonical(cfg) in ("gemma", "input_scaled") else ones)


def apply_rms_norm(params: Params, x: Array, cfg: Any) -> tuple[Array, Stats]:
    """``jln.rms_norm(x, scale, convention=...)`` with the module's dtype rule and monitor."""
    return _apply_norm(rms_norm, params, x, cfg, "jln RMSNorm", convention=cfg.convention)


# --------------------------------------------------------------------------- gated RMSNorm


def _check_gated_rms_norm(cfg: Any) -> None:
    fn = "jln GatedRMSNorm"
    resolve_gated(cfg.convention, fn)
    _validate.check_choice(cfg.activation, "activation", GATED_ACTIVATIONS, fn)
    _validate.check_eps(cfg.eps, fn)
    if cfg.group_size is not None:
        object.__setattr__(cfg, "group_size", _validate.check_positive(cfg.group_size, "group_size", fn))
    if cfg.norm_before_gate is not None and not isinstance(cfg.norm_before_gate, (bool, np.bool_)):
        raise TypeError(f"{fn}: `norm_before_gate` must be True, False or None; received {cfg.norm_before_gate!r}.")
    _validate.check_inits(cfg, fn, ("scale_init",))
    _validate.check_module_options(cfg, fn)


GatedRMSNormConfig = make_config(
    "GatedRMSNormConfig",
    (EPS.but(default=1e-6, doc="added to the mean square (transformers' default 1e-6)."),
     Option("convention", "str", "mamba", "``\"mamba\"``, ``\"qwen3_next\"`` or ``\"float32\"`` (or an "
            "alias): the cast order of :func:`jln.gated_rms_norm`. With ``dtype=None`` the output dtype is "
            "the convention's (``\"mamba\"``: bf16 x with float32 scale gives float32)."),
     Option("group_size", "int | None", None, "statistics per group of this many channels (``None``: the "
            "whole row)."),
     Option("norm_before_gate", "bool | None", None, "``None``: the convention's gate order."),
     Option("activation", "str", "silu", "the gate's activation, ``\"silu\"`` or ``\"sigmoid\"``."),
     AXIS, USE_SCALE.but(doc="learnable ``scale``."), *COMPUTE, *DISTRIBUTED, SCALE_INIT),
    _check_gated_rms_norm,
)


def gated_rms_norm_specs(cfg: Any, features: tuple[int, ...]) -> dict[str, ParamSpec]:
    return {"scale": _param(features, cfg.scale_init, ones)} if cfg.use_scale else {}


def apply_gated_rms_norm(params: Params, x: Array, cfg: Any, gate: Array | None = None) -> tuple[Array, Stats]:
    """``jln.gated_rms_norm(x, gate, scale, ...)`` with the module's dtype rule and monitor."""
    xi = _cast_in(x, cfg.dtype)
    g = None if gate is None else _cast_in(gate, cfg.dtype)
    y = gated_rms_norm(
        xi, g, params.get("scale"), axis=cfg.axis, eps=cfg.eps, group_size=cfg.group_size,
        norm_before_gate=cfg.norm_before_gate, convention=cfg.convention, activation=cfg.activation,
        impl=cfg.impl, **distributed(cfg),
    )
    y = _cast_out(y, cfg.dtype)
    return y, _record(cfg.monitor, xi, y, cfg.axis, "jln GatedRMSNorm")


# --------------------------------------------------------------------------- adaptive norms


def _check_adaptive_layer_norm(cfg: Any) -> None:
    fn = "jln AdaptiveLayerNorm"
    _validate.check_inits(cfg, fn, ("scale_init", "bias_init", "proj_kernel_init", "proj_bias_init"))
    _validate.set_positive(cfg, ("features",), fn)
    names = resolve_order(cfg.order, fn)
    if not {"shift", "scale"} <= set(names):
        raise ValueError(
            f"{fn}: `order` must name a 'shift' and a 'scale' chunk (e.g. 'seed', "
            f"'dit_final', 'continuous'); received {cfg.order!r} = {names}."
        )
    _validate.check_eps(cfg.eps, fn)
    _validate.check_module_options(cfg, fn)


#: tensor parallelism of the adaptive norms (the feature axis split over ``axis_name``)
ADAPTIVE_DISTRIBUTED = (
    DISTRIBUTED[0].but(doc="tensor parallelism inside ``jax.shard_map``/``jax.pmap`` with ``x``'s last "
                       "axis split over ``axis_name``: ``features`` is then the local size d / n, the "
                       "norm's statistics span the devices, and the Dense must produce each device's "
                       "local block of every chunk: :func:`jln.shard_chunks` lays out a global kernel "
                       "that way; the condition is replicated over ``axis_name``."),
    DISTRIBUTED[1],
)
AdaptiveLayerNormConfig = make_config(
    "AdaptiveLayerNormConfig",
    (FEATURES, EPS, Option("order", "Any", "seed", "chunk order of ``proj(cond)``; ``\"seed\"`` = (scale, "
                           "shift) = (gamma, beta)."),
     USE_SCALE.but(doc="the LayerNorm's own ``scale``."), USE_BIAS.but(doc="the LayerNorm's own ``bias``."),
     *COMPUTE, *ADAPTIVE_DISTRIBUTED, SCALE_INIT.but(doc="the LayerNorm's ``scale`` initializer; ``None``: ones."),
     BIAS_INIT.but(doc="the LayerNorm's ``bias`` initializer; ``None``: zeros."),
     *_dense_inits("proj", "torch ``nn.Linear``'s, U(+-1/sqrt(cond_features))")),
    _check_adaptive_layer_norm,
)


def adaptive_layer_norm_specs(cfg: Any, cond_features: int) -> dict[str, Any]:
    features = cfg.features
    k = len(resolve_order(cfg.order, "jln AdaptiveLayerNorm"))
    return {
        "proj": dense_specs(cond_features, k * features, kernel_init=cfg.proj_kernel_init,
                            bias_init=cfg.proj_bias_init),
        "norm": layer_norm_specs(
            LayerNormConfig(use_scale=cfg.use_scale, use_bias=cfg.use_bias, scale_init=cfg.scale_init,
                            bias_init=cfg.bias_init), (features,)),
    }


def apply_adaptive_layer_norm(params: Params, x: Array, cond: Array, cfg: Any) -> tuple[Array, Stats]:
    """The seed's AdaptiveLN: ``LN(x) * (1 + gamma) + beta``, ``(gamma, beta) = proj(cond)``."""
    fn = "jln AdaptiveLayerNorm"
    _validate.check_floating(x, fn)
    dt = compute_dtype(cfg.dtype, x)
    xi = _cast_in(x, cfg.dtype)
    emb = dense(params["proj"], cond, dt, fn, "cond")
    norm = params["norm"]
    y, _ = adaptive_layer_norm(
        xi, emb, norm.get("scale"), norm.get("bias"), order=cfg.order, eps=cfg.eps, impl=cfg.impl,
        **distributed(cfg),
    )
    y = _cast_out(y, cfg.dtype)
    return y, _record(cfg.monitor, xi, y, -1, fn)


#: adaLN-Zero's chunk count -> (chunk order, the chunks returned after the modulated x)
ZERO_LAYOUTS: dict[int, tuple[str, tuple[str, ...]]] = {
    6: ("dit", ("gate_msa", "shift_mlp", "scale_mlp", "gate_mlp")),
    3: ("dit_single", ("gate_msa",)),
    9: ("sd35_x", ("gate_msa", "shift_mlp", "scale_mlp", "gate_mlp", "*x2", "gate_msa2")),
    4: ("lumina_zero", ("gate_msa", "scale_mlp", "gate_mlp")),
}
#: the norms an adaptive module may use: LayerNorm, diffusers' RMSNorm with torch's rounding
#: after each op, or (Mochi) diffusers' RMSNorm on float32 x, modulated in float32
ZERO_NORM_TYPES = ("layer_norm", "rms_norm", "fp32_rms_norm")


def _check_ada_ln_zero(cfg: Any) -> None:
    fn = "jln AdaLNZero"
    _validate.check_inits(cfg, fn, ("linear_kernel_init", "linear_bias_init", "scale_init", "bias_init"))
    _validate.set_positive(cfg, ("features",), fn)
    if cfg.num_chunks not in ZERO_LAYOUTS:
        raise ValueError(
            f"{fn}: `num_chunks` must be 6 (DiT / AdaLayerNormZero), 3 (AdaLayerNormZeroSingle), "
            f"9 (SD35AdaLayerNormZeroX) or 4 (LuminaRMSNormZero / MochiRMSNormZero); received "
            f"{cfg.num_chunks!r}."
        )
    _validate.check_choice(cfg.norm_type, "norm_type", ZERO_NORM_TYPES, fn)
    _validate.check_eps(cfg.eps, fn)
    _validate.check_module_options(cfg, fn)


AdaLNZeroConfig = make_config(
    "AdaLNZeroConfig",
    (FEATURES, Option("num_chunks", "int", 6, "6 (DiT order: shift_msa, scale_msa, gate_msa, shift_mlp, "
                      "scale_mlp, gate_mlp), 3 (shift_msa, scale_msa, gate_msa), 9 (DiT's six, then "
                      "shift_msa2, scale_msa2, gate_msa2: SD3.5's second attention) or 4 (scale_msa, "
                      "gate_msa, scale_mlp, gate_mlp: Lumina, Mochi; no shifts)."),
     EPS.but(default=1e-6, doc="the norm's eps (DiT: 1e-6)."), USE_BIAS.but(doc="the Dense ``linear``'s bias."),
     *COMPUTE, *ADAPTIVE_DISTRIBUTED, *_dense_inits("linear", "zeros (adaLN-Zero)"),
     Option("norm_type", "str", "layer_norm", "``\"layer_norm\"``; ``\"rms_norm\"`` (diffusers' RMSNorm, "
            "then torch's rounding after each op: Lumina); ``\"fp32_rms_norm\"`` (diffusers' RMSNorm on "
            "float32 ``x``, modulated in float32 and rounded once to ``x.dtype``: Mochi)."),
     Option("elementwise_affine", "bool", False, "the norm's own ``scale`` (and a LayerNorm's ``bias``): "
            "Lumina's RMSNorm has one."),
     SCALE_INIT.but(doc="the norm's ``scale`` initializer (with ``elementwise_affine``); ``None``: ones."),
     BIAS_INIT.but(doc="the LayerNorm's ``bias`` initializer; ``None``: zeros.")),
    _check_ada_ln_zero,
)


def _norm_params_specs(cfg: Any, features: int, norm_type: str, ln_bias: bool = True) -> dict[str, Any]:
    """The adaptive norm's own affine (``norm/scale`` and, for a LayerNorm with ``ln_bias``,
    ``norm/bias``) when ``cfg.elementwise_affine``; else nothing."""
    if not cfg.elementwise_affine:
        return {}
    bias = ln_bias and norm_type == "layer_norm"
    norm = LayerNormConfig(use_bias=bias, scale_init=cfg.scale_init, bias_init=cfg.bias_init)
    return {"norm": layer_norm_specs(norm, (features,))}


def ada_ln_zero_specs(cfg: Any, cond_features: int) -> dict[str, Any]:
    features = cfg.features
    kernel, bias = cfg.linear_kernel_init or zeros, cfg.linear_bias_init or zeros
    return {"linear": dense_specs(cond_features, cfg.num_chunks * features, use_bias=cfg.use_bias,
                                  kernel_init=kernel, bias_init=bias),
            **_norm_params_specs(cfg, features, cfg.norm_type)}


def modulated_norm(
    xi: Array, h: Array, cfg: Any, norm: Params, *, order: Any, norm_type: str,
    use: tuple[str | None, str | None] | None = None,
) -> tuple[Array, dict[str, Array]]:
    """``norm(xi)`` modulated by chunks of ``h``: :func:`jln.adaptive_layer_norm`, or
    :func:`jln.adaptive_rms_norm` in diffusers' convention (``fp32_rms_norm``: modulated in
    float32)."""
    if norm_type == "layer_norm":
        return adaptive_layer_norm(
            xi, h, norm.get("scale"), norm.get("bias"), order=order, use=use, eps=cfg.eps, impl=cfg.impl,
            **distributed(cfg),
        )
    return adaptive_rms_norm(
        xi, h, norm.get("scale"), order=order, use=use, eps=cfg.eps, convention="diffusers",
        modulation="float32" if norm_type == "fp32_rms_norm" else "rounded", impl=cfg.impl, **distributed(cfg),
    )


def apply_ada_ln_zero(params: Params, x: Array, emb: Array, cfg: Any) -> tuple[tuple[Array, ...], Stats]:
    """adaLN-Zero: ``chunks = linear(SiLU(emb))``; ``norm(x) * (1 + scale_msa) + shift_msa``."""
    fn = "jln AdaLNZero"
    _validate.check_floating(x, fn)
    _validate.check_floating(emb, fn, "emb")
    # diffusers runs the projection in the condition's dtype (its gates come back in it)
    dt = compute_dtype(cfg.dtype, emb)
    xi = _cast_in(x, cfg.dtype)
    h = dense(params["linear"], silu(emb).astype(dt), dt, fn, "emb")
    order, rest = ZERO_LAYOUTS[cfg.num_chunks]
    norm = params.get("norm", {})
    y, ch = modulated_norm(xi, h, cfg, norm, order=order, norm_type=cfg.norm_type)
    if "*x2" in rest:  # SD3.5: the same normed x, modulated by the second attention's chunks
        ch = dict(ch)
        ch["*x2"], _ = modulated_norm(
            xi, h, cfg, norm, order=order, norm_type=cfg.norm_type, use=("shift_msa2", "scale_msa2"),
        )
        ch["*x2"] = _cast_out(ch["*x2"], cfg.dtype)
    y = _cast_out(y, cfg.dtype)
    stats = _record(cfg.monitor, xi, y, -1, fn)
    return (y, *(ch[n] for n in rest)), stats


NORM_TYPES = ("layer_norm", "rms_norm")


#: where :class:`AdaLNContinuous`'s projection runs: in ``x``'s dtype (diffusers
#: ``AdaLayerNormContinuous`` casts ``SiLU(cond)`` to it) or in the condition's own
PROJECT_IN = ("x", "cond")


def _check_ada_ln_continuous(cfg: Any) -> None:
    fn = "jln AdaLNContinuous"
    _validate.check_inits(cfg, fn, ("scale_init", "bias_init", "linear_kernel_init", "linear_bias_init"))
    _validate.set_positive(cfg, ("features",), fn)
    _validate.check_choice(cfg.norm_type, "norm_type", NORM_TYPES, fn)
    _validate.check_choice(cfg.project_in, "project_in", PROJECT_IN, fn)
    names = resolve_order(cfg.order, fn)
    if not names or not set(names) <= {"shift", "scale"}:
        raise ValueError(
            f"{fn}: `order` must name a 'scale' and/or a 'shift' chunk (e.g. "
            f"'continuous' = (scale, shift), 'dit_final' = (shift, scale), ('shift',)); received "
            f"{cfg.order!r} = {names}."
        )
    check_activation(cfg.activation, fn)
    _validate.check_eps(cfg.eps, fn)
    _validate.check_module_options(cfg, fn)


AdaLNContinuousConfig = make_config(
    "AdaLNContinuousConfig",
    (FEATURES, EPS.but(doc="the norm's eps (1e-5)."),
     Option("elementwise_affine", "bool", True, "the norm's own ``scale`` (and ``bias`` for layer_norm)."),
     USE_BIAS.but(doc="the Dense bias and the LayerNorm bias (diffusers' ``bias``)."),
     Option("norm_type", "str", "layer_norm", "``\"layer_norm\"`` or ``\"rms_norm\"`` (diffusers' RMSNorm)."),
     *COMPUTE, *ADAPTIVE_DISTRIBUTED,
     SCALE_INIT.but(doc="the norm's ``scale`` initializer (with ``elementwise_affine``); ``None``: ones."),
     BIAS_INIT.but(doc="the norm's ``bias`` initializer; ``None``: zeros."),
     *_dense_inits("linear", "torch ``nn.Linear``'s"),
     Option("order", "Any", "continuous", "chunk order of ``linear(SiLU(cond))``: ``\"continuous\"`` "
            "(scale, shift: diffusers ``AdaLayerNormContinuous``, ``AdaLayerNorm``), ``\"dit_final\"`` "
            "(shift, scale: ``AdaLayerNorm(chunk_dim=1)``) or ``(\"scale\", \"shift\")``-like tuples."),
     Option("project_in", "str", "x", "the dtype the Dense runs in: ``\"x\"`` (``SiLU(cond)`` cast to "
            "``x``'s dtype, as ``AdaLayerNormContinuous``) or ``\"cond\"`` (the condition's own, as "
            "``AdaLayerNorm`` and Qwen2.5-Omni's ``AdaLayerNormZero_Final``)."),
     Option("activation", "str | None", "silu", "the activation applied to ``cond`` before ``linear``: "
            "``\"silu\"`` (diffusers), ``None`` (CogView4's final norm) or another of "
            "``jln._modules.COND_ACTIVATIONS``."),
     ),
    _check_ada_ln_continuous,
)


def ada_ln_continuous_specs(cfg: Any, cond_features: int) -> dict[str, Any]:
    features = cfg.features
    k = len(resolve_order(cfg.order, "jln AdaLNContinuous"))
    specs: dict[str, Any] = {"linear": dense_specs(cond_features, k * features, use_bias=cfg.use_bias,
                                                   kernel_init=cfg.linear_kernel_init,
                                                   bias_init=cfg.linear_bias_init)}
    # diffusers: `bias` switches the Linear's and the LayerNorm's bias; its RMSNorm has none
    return {**specs, **_norm_params_specs(cfg, features, cfg.norm_type, ln_bias=cfg.use_bias)}


def apply_ada_ln_continuous(params: Params, x: Array, cond: Array, cfg: Any) -> tuple[Array, Stats]:
    """SD3/Flux ``norm_out``: ``(scale, shift) = linear(SiLU(cond))``; ``norm(x) * (1 + scale) + shift``."""
    fn = "jln AdaLNContinuous"
    _validate.check_floating(x, fn)
    _validate.check_floating(cond, fn, "cond")
    dt = compute_dtype(cfg.dtype, x if cfg.project_in == "x" else cond)
    xi = _cast_in(x, cfg.dtype)
    h = dense(params["linear"], activate(cfg.activation, cond).astype(dt), dt, fn, "cond")
    y, _ = modulated_norm(xi, h, cfg, params.get("norm", {}), order=cfg.order, norm_type=cfg.norm_type)
    y = _cast_out(y, cfg.dtype)
    return y, _record(cfg.monitor, xi, y, -1, fn)


# --------------------------------------------------------------------------- attention


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


# --------------------------------------------------------------------------- encoder layer


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
EncoderLayerConfig = make_config(
    "EncoderLayerConfig",
    (_req("d_model", f"the model width, {_TORCH}."), _req("nhead", f"attention heads, {_TORCH}."),
     Option("dim_feedforward", "int", 2048, f"the feed-forward width, {_TORCH}."),
     Option("dropout", "float", 0.1, "dropout rate on the attention weights, after the activation and on "
            "each branch (off unless asked for: linen ``deterministic=False``, NNX ``.train()``)."),
     Option("activation", "str", "relu", "``\"relu\"`` or ``\"gelu\"`` (exact)."),
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
    norm = layer_norm_specs(LayerNormConfig(use_bias=bias), (d,))
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


# --------------------------------------------------------------------------- DiT block


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
    (_req("hidden_size", "the token width, as DiT."), _req("num_heads", "attention heads, as DiT."),
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
    return _cast_out(xi, cfg.dtype), (stats if cfg.monitor else None)


# --------------------------------------------------------------------------- module kinds


@dataclasses.dataclass(frozen=True)
class Kind:
    """One module kind, everything :mod:`jln.linen` and :mod:`jln.nnx` build their class from.

    The options are the fields of ``config`` (linen fields and NNX arguments, in that order;
    NNX takes the ``shapes`` first and the first ``positional`` options positionally). A call
    ``module(*inputs, *call_options)`` creates ``specs(cfg, *shapes)`` and returns
    ``apply(params, *inputs, cfg, **call_options)``; ``dropout`` kinds take a ``dropout_fn``
    there too (linen: ``deterministic=False`` at the call, NNX: ``.train()``).
    """

    name: str
    config: type
    specs: Callable[..., dict[str, Any]]
    apply: Callable[..., tuple[Any, Stats]]
    inputs: tuple[str, ...]
    doc: str  # summary line and body
    returns: str
    raises: str
    examples: tuple[str, str]  # (linen, nnx)
    rngs_doc: str
    shapes: tuple[Shape, ...] = ()
    positional: int = 0
    call_options: tuple[tuple[str, Any], ...] = ()  # (name, default), after the inputs
    dropout: bool = False
    flax_twin: bool = False  # flax has a module of this name (jln.flax.<api>.<name>)
    #: running statistics (``jln._batch_modules``): ``state(cfg, *shapes)`` gives their specs;
    #: ``apply(params, *inputs, cfg, state=..., training=...)`` then returns
    #: ``((out, new_state or None), stats)``
    state: Callable[..., dict[str, Any]] | None = None

    @property
    def options(self) -> tuple[dataclasses.Field[Any], ...]:
        return dataclasses.fields(self.config)

    def docstring(self, api: str) -> str:
        """The class docstring of the ``api`` (``"linen"``/``"nnx"``) face."""
        def entry(name: str, doc: str) -> str:
            return textwrap.fill(f"{name}: {doc}", 96, initial_indent="  ", subsequent_indent="    ")

        def para(text: str) -> str:
            return "\n\n".join(textwrap.fill(p, 96) for p in text.split("\n\n"))

        opts = [entry(f.name, f.metadata["doc"]) for f in self.options]
        if api == "linen":
            head, items = "Attributes:", opts
        else:
            head = "Args:"
            items = [entry(s.name, s.doc) for s in self.shapes] + opts + [entry("rngs", self.rngs_doc)]
        twin = f"The NNX twin of :class:`jln.linen.{self.name}` (same options, parameters and numbers)."
        parts = [para(self.doc), *([twin] if api == "nnx" else []), head + "\n" + "\n".join(items),
                 para("Returns " + self.returns), "Raises:\n" + entry(*self.raises.split(": ", 1)),
                 "Example:\n  " + self.examples[api == "nnx"]]
        return "\n\n".join(parts)


#: flax's norm arguments that jln's modules name otherwise or do not take: the jln options
#: that stand for them (the first the kind has), or why there is none
FLAX_ARGS: dict[str, tuple[tuple[str, ...], str]] = {
    "epsilon": (("eps", "layer_norm_eps"), ""),
    "reduction_axes": (("axis",), "the normalized axes"),
    "feature_axes": (("param_axes", "axis"), "jln's scale and bias span LayerNorm's param_axes; elsewhere "
                                             "they always have x's shape at the normalized axes"),
    "use_fast_variance": ((), "jln always takes the variance as the mean of squared deviations from "
                              "the mean, in float32; drop it"),
    "force_float32_reductions": ((), "jln always reduces in float32, float64 for float64 input; drop it"),
    "promote_dtype": ((), "dtype= sets the compute dtype; drop it"),
    "scale_metadata": (("scale_init",), "wrap the initializer, e.g. flax.nnx.with_partitioning(init, axes)"),
    "bias_metadata": (("bias_init",), "wrap the initializer, e.g. flax.nnx.with_partitioning(init, axes)"),
    "use_running_average": ((), "linen: pass use_running_average=True at the call; NNX: .eval() and .train(). "
                                "Note jln's momentum is torch's: flax's momentum=0.99 is momentum=0.01 here"),
    "axis": (("channel_axis",), "the channel axis: 1 for NCHW, -1 for NHWC"),
    "use_scale": (("affine",), "one flag for the scale and the bias, as torch's"),
    "use_bias": (("affine",), "one flag for the scale and the bias, as torch's"),
    "group_size": (("num_groups",), "torch's GroupNorm takes the number of groups: num_channels // group_size"),
}


def flax_hint(kind: Kind, kwargs: Mapping[str, Any], api: str) -> None:
    """``TypeError`` saying what jln calls it when ``kwargs`` holds one of flax's norm
    arguments that ``kind`` does not take (``epsilon`` -> ``eps``...)."""
    have = {f.name for f in kind.options} | {s.name for s in kind.shapes}
    for name in kwargs:
        if name in have or name not in FLAX_ARGS:
            continue
        options, why = FLAX_ARGS[name]
        ours = next((o for o in options if o in have), None)
        said = f"jln calls it {ours}=..." if ours is not None else f"jln's {kind.name} has no such option"
        twin = (f"; for flax's exact signature and defaults use jln.flax.{api}.{kind.name}"
                if kind.flax_twin else "")
        raise TypeError(
            f"jln.{api}.{kind.name} got flax's argument {name!r}: {said}"
            f"{f' ({why})' if why else ''}{twin}."
        )


_LINEN = ">>> import jax, jax.numpy as jnp\n  >>> from jln import linen as jnn\n"
_NNX = ">>> import jax.numpy as jnp\n  >>> from flax import nnx\n  >>> from jln import nnx as jnnx\n"
_NORM_RNGS = "the key of an initializer other than ones and zeros; otherwise unused."
_DENSE_RNGS = "``nnx.Rngs`` for the Dense kernel init."
_MODULATED = "array like ``x``, dtype ``x.dtype`` (or ``dtype``)."
_SHARDING = (
    "Sharding: under ``jax.jit`` with ``NamedSharding`` the batch and sequence axes of the input "
    "may be split across devices (data/sequence parallelism; XLA partitions attention and the "
    "norms). The hidden axis must not be split: the attention and feed-forward layers are not "
    "tensor-parallel, so the block takes no ``axis_name``."
)

LAYER_NORM = Kind(
    "LayerNorm", LayerNormConfig, layer_norm_specs, apply_layer_norm, ("x",),
    doc="LayerNorm with torch's numbers: ``(x - E[x]) / sqrt(Var[x] + eps) * scale + bias``.\n\n"
        "Biased variance, eps inside the square root, statistics in float32 (float64 for float64 "
        "input); the module calls :func:`jln.layer_norm`.",
    returns="(``__call__(x)``): array of ``x.shape``, dtype ``x.dtype`` (or ``dtype``).",
    raises="TypeError, ValueError: as :func:`jln.layer_norm` (NNX: also an ``x`` whose shape at "
           "``axis`` is not ``num_features``); ``TypeError`` for an initializer that is not callable, "
           "or (NNX) one other than ones and zeros without ``rngs``, and for flax's argument names "
           "(``epsilon``...), saying jln's.",
    examples=(_LINEN + "  >>> x = jnp.arange(8.0).reshape(2, 4)\n  >>> variables = jnn.LayerNorm().init("
              "jax.random.key(0), x)\n  >>> jnn.LayerNorm().apply(variables, x).shape\n  (2, 4)",
              _NNX + "  >>> jnnx.LayerNorm(4)(jnp.arange(8.0).reshape(2, 4)).shape\n  (2, 4)"),
    rngs_doc=_NORM_RNGS, shapes=(NUM_FEATURES,), flax_twin=True,
)
RMS_NORM = dataclasses.replace(
    LAYER_NORM, name="RMSNorm", config=RMSNormConfig, specs=rms_norm_specs, apply=apply_rms_norm,
    doc="RMSNorm in torch's convention or a named model's: ``x * rsqrt(mean(x^2) + eps) * scale``.\n\n"
        "The exact cast order and eps default of each convention are those of :func:`jln.rms_norm`.",
    returns="(``__call__(x)``): array of ``x.shape``, dtype by the convention (or ``dtype``).",
    raises="TypeError, ValueError: as :func:`jln.rms_norm`; ``ValueError`` for ``use_bias`` outside "
           "the diffusers convention; otherwise as :class:`LayerNorm`.",
    examples=(_LINEN + "  >>> m = jnn.RMSNorm(convention=\"llama\")\n  >>> x = jnp.ones((2, 4))\n  >>> "
              "m.apply(m.init(jax.random.key(0), x), x).dtype\n  dtype('float32')",
              _NNX + "  >>> jnnx.RMSNorm(4, convention=\"gemma\").scale[...]\n  Array([0., 0., 0., 0.], "
              "dtype=float32)"),
)
ADAPTIVE_LAYER_NORM = Kind(
    "AdaptiveLayerNorm", AdaptiveLayerNormConfig, adaptive_layer_norm_specs, apply_adaptive_layer_norm,
    ("x", "cond"),
    doc="The seed's AdaptiveLN: ``LN(x) * (1 + gamma) + beta`` with ``(gamma, beta) = proj(cond)``.\n\n"
        "``proj`` is a Dense ``cond_features -> 2 * features`` (torch ``nn.Linear``); the LayerNorm "
        "has its own affine (``norm/scale``, ``norm/bias``). Calls :func:`jln.adaptive_layer_norm` "
        "(norm and modulation in one fused body).",
    returns="(``__call__(x, cond)``): ``x [B, ..., d]`` modulated by ``cond [B, c]`` (broadcast over "
            "the token axes) or ``cond`` with ``x``'s leading shape; " + _MODULATED,
    raises="TypeError, ValueError: non-floating inputs, mismatched feature sizes, a bad ``order``, "
           "an initializer that is not callable (NNX: a random one without ``rngs``).",
    examples=(_LINEN + "  >>> m = jnn.AdaptiveLayerNorm(features=8)\n  >>> x, c = jnp.ones((2, 5, 8)), "
              "jnp.ones((2, 3))\n  >>> m.apply(m.init(jax.random.key(0), x, c), x, c).shape\n  (2, 5, 8)",
              _NNX + "  >>> m = jnnx.AdaptiveLayerNorm(3, 8, rngs=nnx.Rngs(0))\n  >>> m(jnp.ones((2, 5, 8)), "
              "jnp.ones((2, 3))).shape\n  (2, 5, 8)"),
    rngs_doc=_DENSE_RNGS, shapes=(_cond_features("cond"),), positional=1,
)
ADA_LN_ZERO = Kind(
    "AdaLNZero", AdaLNZeroConfig, ada_ln_zero_specs, apply_ada_ln_zero, ("x", "emb"),
    doc="DiT's adaLN-Zero (diffusers ``AdaLayerNormZero`` / ``AdaLayerNormZeroSingle`` / "
        "``SD35AdaLayerNormZeroX`` / ``LuminaRMSNormZero`` / ``MochiRMSNormZero``, Qwen2.5-Omni's "
        "``AdaLayerNormZero``).\n\n"
        "``chunks = linear(SiLU(emb))`` with ``linear`` zero-initialised (the block starts as the "
        "identity), run in ``emb``'s dtype; ``x_mod = norm(x) * (1 + scale_msa) + shift_msa`` with "
        "a LayerNorm of eps 1e-6 and no affine by default (``norm_type``, ``elementwise_affine``: "
        "diffusers' RMSNorm, as :func:`jln.adaptive_rms_norm`).",
    returns="(``__call__(x, emb)``): ``(x_mod, gate_msa, shift_mlp, scale_mlp, gate_mlp)`` for 6 "
            "chunks, ``(x_mod, gate_msa)`` for 3, ``(x_mod, gate_msa, shift_mlp, scale_mlp, gate_mlp, "
            "x_mod2, gate_msa2)`` for 9 (``x_mod2``: the same normed ``x`` modulated by ``shift_msa2``, "
            "``scale_msa2``), ``(x_mod, gate_msa, scale_mlp, gate_mlp)`` for 4; ``x_mod`` like ``x``, "
            "the others ``[B, d]``.",
    raises="TypeError, ValueError: non-floating inputs, mismatched sizes, ``num_chunks`` not 3, 4, 6 or "
           "9, an unknown ``norm_type``.",
    examples=(_LINEN + "  >>> m = jnn.AdaLNZero(features=8)\n  >>> x, c = jnp.ones((2, 5, 8)), "
              "jnp.ones((2, 8))\n  >>> len(m.apply(m.init(jax.random.key(0), x, c), x, c))\n  5",
              _NNX + "  >>> x_mod, *rest = jnnx.AdaLNZero(8, 8)(jnp.ones((2, 5, 8)), jnp.ones((2, 8)))\n"
              "  >>> x_mod.shape, len(rest)\n  ((2, 5, 8), 4)"),
    rngs_doc="``nnx.Rngs``, needed only by a random ``linear_kernel_init``/``linear_bias_init`` (the "
             "default zero init takes no key).",
    shapes=(_cond_features("emb"),), positional=1,
)
ADA_LN_CONTINUOUS = Kind(
    "AdaLNContinuous", AdaLNContinuousConfig, ada_ln_continuous_specs, apply_ada_ln_continuous, ("x", "cond"),
    doc="SD3/Flux final-layer norm (diffusers ``AdaLayerNormContinuous``; also ``AdaLayerNorm`` and "
        "Qwen2.5-Omni's ``AdaLayerNormZero_Final`` through ``order`` and ``project_in``).\n\n"
        "``(scale, shift) = linear(SiLU(cond))`` (that order by default; ``activation`` replaces or drops the "
        "SiLU, an ``order`` of one chunk gives ``norm(x) + shift`` or ``norm(x) * (1 + scale)``); ``norm(x) * (1 + scale) + shift``, "
        "``norm`` a LayerNorm (``jln.adaptive_layer_norm``) or diffusers' RMSNorm "
        "(``jln.rms_norm(convention=\"diffusers\")`` then ``jln.modulate``).",
    returns="(``__call__(x, cond)``): " + _MODULATED,
    raises="TypeError, ValueError: as :class:`AdaptiveLayerNorm`; an unknown ``norm_type``.",
    examples=(_LINEN + "  >>> m = jnn.AdaLNContinuous(features=8)\n  >>> x, c = jnp.ones((2, 5, 8)), "
              "jnp.ones((2, 4))\n  >>> m.apply(m.init(jax.random.key(0), x, c), x, c).shape\n  (2, 5, 8)",
              _NNX + "  >>> jnnx.AdaLNContinuous(4, 8, rngs=nnx.Rngs(0))(jnp.ones((2, 5, 8)), "
              "jnp.ones((2, 4))).shape\n  (2, 5, 8)"),
    rngs_doc=_DENSE_RNGS, shapes=(_cond_features("cond"),), positional=1,
)
TRANSFORMER_ENCODER_LAYER = Kind(
    "TransformerEncoderLayer", EncoderLayerConfig, encoder_layer_specs, apply_encoder_layer, ("src",),
    doc="``torch.nn.TransformerEncoderLayer``: same options (in torch's order), same eval-mode numbers.\n\n"
        "Post-LN (``norm_first=False``): ``x = norm1(x + SA(x)); x = norm2(x + FF(x))``. Pre-LN "
        "(``norm_first=True``): ``x = x + SA(norm1(x)); x = x + FF(norm2(x))``. ``SA`` is multi-head "
        "self-attention (scaled dot product, softmax in float32), ``FF(x) = linear2(dropout("
        "activation(linear1(x))))``; norms are :func:`jln.layer_norm`. Dropout is off unless asked "
        "for: linen ``deterministic=False`` at the call (rng stream ``\"dropout\"``); the NNX module's "
        "``nnx.Dropout`` is on after construction (like a fresh torch module), off after "
        "``.eval()``, on again after ``.train()``.\n\n" + _SHARDING,
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
    examples=(_LINEN + "  >>> m = jnn.TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16)\n"
              "  >>> src = jnp.ones((5, 2, 8))\n  >>> m.apply(m.init(jax.random.key(0), src), src).shape\n"
              "  (5, 2, 8)",
              _NNX + "  >>> m = jnnx.TransformerEncoderLayer(8, 2, 16, rngs=nnx.Rngs(0))\n  >>> m.eval()\n"
              "  >>> m(jnp.ones((5, 2, 8))).shape\n  (5, 2, 8)"),
    rngs_doc="``nnx.Rngs`` for parameter init and the dropout stream.",
    positional=9, dropout=True,
    call_options=(("src_mask", None), ("src_key_padding_mask", None), ("is_causal", False)),
)
DIT_BLOCK = Kind(
    "DiTBlock", DiTBlockConfig, dit_block_specs, apply_dit_block, ("x", "c"),
    doc="A DiT block with adaLN-Zero conditioning (Peebles and Xie, 2023).\n\n"
        "``emb = adaLN_modulation(SiLU(c))`` (zero-initialised Dense, 6 chunks in DiT's order); "
        "``x = x + gate_msa * attn(LN(x) * (1 + scale_msa) + shift_msa)``, then "
        "``x = x + gate_mlp * mlp(LN(x) * (1 + scale_mlp) + shift_mlp)``; LayerNorms with eps 1e-6 "
        "and no affine, ``mlp = fc2(GELU_tanh(fc1(.)))``. At initialisation it returns ``x``.\n\n"
        + _SHARDING.replace("feed-forward", "MLP") + " ``c`` follows the batch split.",
    returns="(``__call__(x, c)``): ``x [B, T, D]`` updated, conditioned on ``c [B, D]``.",
    raises="TypeError, ValueError: bad options or input shapes.",
    examples=(_LINEN + "  >>> m = jnn.DiTBlock(hidden_size=8, num_heads=2)\n  >>> x, c = jnp.ones((2, 5, 8)), "
              "jnp.ones((2, 8))\n  >>> bool((m.apply(m.init(jax.random.key(0), x, c), x, c) == x).all())\n"
              "  True",
              _NNX + "  >>> x = jnp.ones((2, 5, 8))\n  >>> bool((jnnx.DiTBlock(8, 2, rngs=nnx.Rngs(0))(x, "
              "jnp.ones((2, 8))) == x).all())\n  True"),
    rngs_doc="``nnx.Rngs`` for parameter init.", positional=2,
)
GATED_RMS_NORM = dataclasses.replace(
    LAYER_NORM, name="GatedRMSNorm", config=GatedRMSNormConfig, specs=gated_rms_norm_specs,
    apply=apply_gated_rms_norm, call_options=(("gate", None),), flax_twin=False,
    doc="Gated RMSNorm (Mamba-2, hybrid SSMs): ``rms_norm(x * silu(gate)) * scale`` or "
        "``rms_norm(x) * scale * silu(gate)``.\n\n"
        "The gate order, groups and exact cast order of each convention are those of "
        ":func:`jln.gated_rms_norm`; ``gate`` (x's shape) is optional at the call.",
    returns="(``__call__(x, gate=None)``): array of ``x.shape``, dtype by the convention (or ``dtype``).",
    raises="TypeError, ValueError: as :func:`jln.gated_rms_norm`; otherwise as :class:`LayerNorm`.",
    examples=(_LINEN + "  >>> m = jnn.GatedRMSNorm(group_size=2)\n  >>> x = jnp.ones((2, 4))\n  >>> "
              "m.apply(m.init(jax.random.key(0), x), x, x).shape\n  (2, 4)",
              _NNX + "  >>> jnnx.GatedRMSNorm(4, convention=\"qwen3_next\")(jnp.ones((2, 4)), jnp.zeros((2, 4)))[0]\n"
              "  Array([0., 0., 0., 0.], dtype=float32)"),
)
KINDS = (LAYER_NORM, RMS_NORM, ADAPTIVE_LAYER_NORM, ADA_LN_ZERO, ADA_LN_CONTINUOUS, TRANSFORMER_ENCODER_LAYER,
         DIT_BLOCK, GATED_RMS_NORM)
