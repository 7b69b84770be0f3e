"""The shared machinery of jln's Flax modules: what a module kind is made of.

Each module kind is one :class:`Kind` record (``LAYER_NORM``, ``RMS_NORM``...), defined in its
family's ``module.py`` and holding:

* its options, each an :class:`Option` (name, type, default, doc line) declared once and
  gathered in a frozen config dataclass (``LayerNormConfig``...), validated in
  ``__post_init__``: the linen fields, the NNX arguments and ``module.cfg`` on both faces;
* the sizes linen infers from the inputs and NNX takes first (:class:`Shape`);
* a ``*_specs`` function giving the parameter tree: names, shapes and initializers;
* an ``apply_*`` pure function ``(params, *inputs, cfg) -> (outputs, stats)`` that calls the
  :mod:`jln` core functions (``stats``: the monitor record, ``None`` unless ``cfg.monitor``);
* the parts of its docstring.

The linen and NNX classes are written from the record, so the two front-ends cannot drift;
they only create the parameters from the specs and call ``apply_*``. Norm math is only ever
the core functions'.

dtype policy (both front-ends): ``dtype=None`` keeps the core functions' rule for the norms
(torch: output in the input dtype; the named RMS conventions as in ``jln.rms_norm``) and
runs Dense/attention layers in the dtype of the module's main input ``x`` (parameters are
cast to it at use, as torch autocast does). ``dtype=d`` casts ``x`` (and conditions) to
``d``, runs everything in ``d`` (norm statistics stay float32) and returns ``d``.
Parameters are stored in ``param_dtype``.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import textwrap
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jln import _monitor, _stats, _validate

Array = jax.Array
Params = Mapping[str, Any]
Stats = dict[str, Any] | None
#: A parameter initializer ``init(key, shape, dtype) -> Array`` (flax's, or one wrapped by
#: ``with_partitioning``), as the faces' options type it.
Initializer = Callable[..., Any]
#: ``torch_names``: torch's default tensor name -> the class's (a mapping, or its pairs).
TorchNames = Mapping[str, str] | Sequence[tuple[str, str]]


def literal(choices: Any, *, optional: bool = False) -> str:
    """The annotation text ``Literal[...]`` of an option that takes one of ``choices`` (a
    tuple, or a dict's keys), ``| None`` when ``optional``: the type the faces write, built
    from the tuple the checks use, so the two cannot drift."""
    text = "Literal[" + ", ".join(repr(c) for c in choices).replace("'", '"') + "]"
    return text + " | None" if optional else text


# --------------------------------------------------------------------------- param specs


@dataclasses.dataclass(frozen=True)
class ParamSpec:
    """One parameter: its shape and initializer ``init(key, shape, dtype) -> Array``."""

    shape: tuple[int, ...]
    init: Callable[..., Array]


ones = jax.nn.initializers.ones
zeros = jax.nn.initializers.zeros


def constant(value: float) -> Callable[..., Array]:
    """An initializer filling every entry with ``value``; like ``ones`` and ``zeros`` it ignores
    the key, so an NNX module built with it needs no ``rngs`` (DyT's ``alpha``, PolyNorm's 1/3)."""

    def init(key: Array, shape: Any, dtype: Any = jnp.float32) -> Array:
        return jnp.full(shape, value, dtype)

    init.keyless = True  # type: ignore[attr-defined]
    return init
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


def cast_in(x: Array, dtype: Any) -> Array:
    return x if dtype is None else x.astype(dtype)


def cast_out(y: Array, dtype: Any) -> Array:
    return y if dtype is None else y.astype(dtype)


def record(monitor: bool, x: Array, y: Array, axis: Any, fn: str) -> Stats:
    if not monitor:
        return None
    return _monitor.row_stats(x, y, _validate.normalize_axes(axis, x.ndim, fn))


def param_spec(features: tuple[int, ...], init: Any, default: Callable[..., Array]) -> ParamSpec:
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
    """The frozen dataclass holding ``options`` (in that order), validated in ``__post_init__``:
    each ``bool`` option is a bool, then ``check``; each field keeps its doc line in
    ``metadata["doc"]``."""
    fn = f"jln {name.removesuffix('Config')}"
    flags = tuple(o.name for o in options if o.type == "bool")

    def field(o: Option) -> Any:
        return dataclasses.field(default=o.default, metadata={"doc": o.doc})

    def __post_init__(self: Any) -> None:
        for flag in flags:  # (a string such as "yes" would read as True further on)
            value = getattr(self, flag)
            if not isinstance(value, (bool, np.bool_)):
                raise TypeError(f"{fn}: `{flag}` must be True or False; received {value!r}.")
        check(self)

    return dataclasses.make_dataclass(
        name, [(o.name, o.type, field(o)) for o in options], frozen=True,
        namespace={"__post_init__": __post_init__, "__module__": __name__, **members},
    )


def required(name: str, doc: str) -> Option:
    return Option(name, "int", doc=doc)


EPS = Option("eps", "float", 1e-5, "LayerNorm eps, added to the variance (torch's default 1e-5).")
DTYPE = Option("dtype", "DTypeLike | None", None, "``None``: output in ``x.dtype`` (Dense layers run in the main "
               "input's dtype); else compute in and return this dtype.")
PARAM_DTYPE = Option("param_dtype", "DTypeLike", jnp.float32, "dtype of the parameters (float32).")
IMPL = Option("impl", "Impl", "auto", '``"auto"``, ``"xla"``, ``"native"`` or ``"pallas"``, as '
              ":func:`jln.layer_norm`.")
MONITOR = Option("monitor", "bool", False, "record per-row input/output statistics "
                 "(``jln._monitor.row_stats``): linen sows them into ``\"intermediates\"``, NNX "
                 "as an ``nnx.Intermediate``, both named ``\"stats\"``.")
COMPUTE = (DTYPE, PARAM_DTYPE, IMPL, MONITOR)
DISTRIBUTED = (
    Option("axis_name", "Hashable | None", None, "inside ``jax.shard_map``/``jax.pmap``, the mesh axis over which "
           "the normalized axis is split (tensor parallelism); parameters are then the local "
           "blocks, see :func:`jln.layer_norm`. The monitor's statistics stay per device."),
    Option("axis_index_groups", "Sequence[Sequence[int]] | None", None, "with ``axis_name``, the device groups that each hold "
           "one row's blocks (as ``jax.lax.psum``)."),
)
SCALE_INIT = Option("scale_init", "Initializer | None", None, "initializer ``init(key, shape, dtype)`` of the "
                    "norm's ``scale``; ``None``: ones. Wrap one in flax's ``with_partitioning`` "
                    "(linen: or ``with_logical_partitioning``) to annotate how a sharded model "
                    "splits the parameter.")
BIAS_INIT = Option("bias_init", "Initializer | None", None, "initializer of the norm's ``bias``; ``None``: zeros.")
TORCH_NAMES = Option("torch_names", "TorchNames | None", None, "the torch ``state_dict`` names of a class that holds "
                     "this norm's tensors under other names: a mapping from torch's default name to the "
                     "class's (``{\"weight\": \"norm.weight\", \"bias\": \"norm.bias\"}``, "
                     "``{\"weight\": \"gamma\"}``; a name with ``{}``, ``\"norms.{}.weight\"``, splits the "
                     "tensor along its first axis, one per index: StableLM's per-head norms), used by "
                     "``jln.interop.to_torch_state_dict``; "
                     "``None``: torch's names. Numbers are unaffected.")


USE_SCALE = Option("use_scale", "bool", True, "learnable ``scale`` (torch's ``elementwise_affine``).")
USE_BIAS = Option("use_bias", "bool", True, "learnable ``bias`` (torch's ``bias``).")
FEATURES = required("features", "d, the size of ``x``'s last axis (with ``axis_name``: the local size).")
INITS = (
    Option("kernel_init", "Initializer | None", None, "initializer of every Dense kernel; ``None``: torch's."),
    Option("bias_init", "Initializer | None", None, "initializer of every Dense bias; ``None``: torch's."),
)


def dense_inits(name: str, default: str) -> tuple[Option, Option]:
    return (Option(f"{name}_kernel_init", "Initializer | None", None, f"``{name}``'s kernel initializer; ``None``: {default}."),
            Option(f"{name}_bias_init", "Initializer | None", None, f"``{name}``'s bias initializer; ``None``: {default}."))


@dataclasses.dataclass(frozen=True)
class Shape:
    """A size that linen infers from an input at the first call and NNX takes as an argument
    (first, positional): ``take`` checks the NNX argument, ``infer`` reads it off linen's input
    ``inputs[input]``, ``check`` (NNX, optional) holds a call's input against it, ``stored``
    reads it back off a parameter tree (``{"linear/kernel": array, ...}``: what
    ``jln.interop.to_torch_state_dict`` checks a linen module's parameters against)."""

    name: str
    type: str
    doc: str
    input: int
    take: Callable[[Any, str], Any]
    infer: Callable[[Any, Array, str, str], Any]  # (cfg, x, input name, fn)
    check: Callable[[Any, Array, Any, str], None] | None = None  # (cfg, x, size, fn)
    stored: Callable[[Any, Mapping[str, Any]], Any] = lambda cfg, flat: 1  # (cfg, flat params)
    #: the annotation of what ``take`` returns (the NNX module's attribute of this name)
    held: str = "int"


def stored_rows(path: str) -> Callable[[Any, Mapping[str, Any]], int]:
    """``stored`` for a size that is the first axis of the parameter at ``path`` (a Dense
    kernel's input features; 1 when the tree lacks it, so the check names it missing)."""

    def stored(cfg: Any, flat: Mapping[str, Any]) -> int:
        a = flat.get(path.format(cfg=cfg))
        return int(a.shape[0]) if a is not None and len(a.shape) > 0 else 1

    return stored


def infer_features(cfg: Any, x: Array, name: str, fn: str) -> tuple[int, ...]:
    _validate.check_floating(x, fn, name)
    pa = getattr(cfg, "param_axes", None)
    axes = _validate.normalize_axes(cfg.axis, x.ndim, fn)
    if pa is not None:  # the parameters' shape: x's sizes at param_axes
        axes = _validate.param_layout(fn, x.ndim, axes, pa) or axes
    return _validate.feature_shape(x.shape, axes)


def infer_last(cfg: Any, x: Array, name: str, fn: str) -> int:
    _validate.check_floating(x, fn, name)
    if x.ndim == 0:
        raise ValueError(f"{fn}: `{name}` must have a feature axis; received a scalar.")
    return int(x.shape[-1])


def check_features(cfg: Any, x: Array, n: tuple[int, ...], fn: str) -> None:
    """:func:`check_num_features` at the axes the parameters span: ``param_axes`` where the kind
    has it and it is set, else ``axis``."""
    pa = getattr(cfg, "param_axes", None)
    _validate.check_num_features(x, cfg.axis if pa is None else pa, n, fn, "axis" if pa is None else "param_axes")


def stored_features(cfg: Any, flat: Mapping[str, Any]) -> tuple[int, ...]:
    """A norm's feature shape read back off its ``scale``/``bias`` (ones when it has neither);
    ``ValueError`` when their rank is not the number of axes the parameters span."""
    laid = getattr(cfg, "param_axes", None)  # (LayerNorm's parameters over more axes)
    spans = cfg.axis if laid is None else laid
    n_axes = 1 if isinstance(spans, int) else len(spans)
    given = next((tuple(flat[k].shape) for k in ("scale", "bias") if k in flat), None)
    if given is not None and len(given) != n_axes:
        said = f"normalizes over {n_axes} axis(es) (axis={cfg.axis!r})" if laid is None else (
            f"lays its parameters over {n_axes} axes (param_axes={laid!r})")
        raise ValueError(
            f"jln.interop.to_torch_state_dict: the module {said}, so its parameters have "
            f"{n_axes} dimension(s); received shape {given}."
        )
    return given if given is not None else (1,) * n_axes


NUM_FEATURES = Shape(
    "num_features", "int | tuple[int, ...]", "shape of ``x`` at ``axis`` (LayerNorm: at ``param_axes`` when set; an int for one axis).", 0,
    _validate.num_features_shape, infer_features, check_features, stored_features, "tuple[int, ...]",
)
#: :data:`NUM_FEATURES` that NNX also takes as ``None`` for a module without parameters (a
#: weightless norm, whose width nothing needs: diffusers' ``RMSNorm(0, eps, False)`` in Mochi)
NUM_FEATURES_OR_NONE = dataclasses.replace(
    NUM_FEATURES, type="int | tuple[int, ...] | None",
    doc=NUM_FEATURES.doc.removesuffix(".") + "; ``None`` (NNX) for a module without parameters (``use_scale=False``, "
        "no bias), which then takes any width.",
    take=lambda v, fn: None if v is None else _validate.num_features_shape(v, fn),
    check=lambda cfg, x, n, fn: _validate.check_floating(x, fn) if n is None else check_features(cfg, x, n, fn),
    held="tuple[int, ...] | None",
)


def cond_features(input_name: str, kernel: str, input: int = 1) -> Shape:
    """The size of a condition's last axis (the ``input``-th input), the rows of the Dense
    ``kernel`` (a parameter path, ``{cfg.…}`` filled from the options) that projects it."""
    return Shape("cond_features", "int", f"size of ``{input_name}``'s last axis.", input,
                 lambda v, fn: _validate.check_positive(v, "cond_features", fn), infer_last,
                 stored=stored_rows(kernel))




AXIS = Option("axis", "Axis", -1, "axis or axes to normalize over; parameters have the shape of ``x`` there.")


def norm_affine_specs(
    features: tuple[int, ...], *, use_scale: bool = True, use_bias: bool = True, scale_init: Any = None,
    bias_init: Any = None, default_scale: Callable[..., Array] = ones,
) -> dict[str, ParamSpec]:
    """A norm's own ``scale`` and ``bias`` of shape ``features``, as the flags say: initialised
    with ``scale_init`` (``None``: ``default_scale``, ones unless the convention's identity is
    0) and ``bias_init`` (``None``: zeros)."""
    specs = {}
    if use_scale:
        specs["scale"] = param_spec(features, scale_init, default_scale)
    if use_bias:
        specs["bias"] = param_spec(features, bias_init, zeros)
    return specs


def apply_norm(norm: Callable[..., Array], params: Params, x: Array, cfg: Any, fn: str, **options: Any) -> tuple[Array, Stats]:
    """``norm(x, scale, bias=bias, ...)`` with the module's axis, eps, impl, distributed
    options, dtype rule and monitor."""
    xi = cast_in(x, cfg.dtype)
    y = norm(
        xi, params.get("scale"), bias=params.get("bias"), axis=cfg.axis, eps=cfg.eps, impl=cfg.impl,
        **distributed(cfg), **options,
    )
    y = cast_out(y, cfg.dtype)
    return y, record(cfg.monitor, xi, y, cfg.axis, fn)


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
    call_options: tuple[tuple[str, Any, str], ...] = ()  # (name, default, annotation), after the inputs
    #: ``(input, keyword)``: a trailing input also taken by a keyword-only name of its torch
    #: class's ``forward`` (CogVideoX calls its final norm as ``norm(x, temb=temb)``)
    input_aliases: tuple[tuple[str, str], ...] = ()
    #: the annotation of what ``__call__`` returns
    output: str = "jax.Array"
    #: the axis of ``x`` whose size is the ``features`` option, for kinds that have both (the
    #: call checks it first, so a wrong width is named in the module's own terms)
    features_axis: int = -1
    dropout: bool = False
    flax_twin: bool = False  # flax has a module of this name (jln.flax.<api>.<name>)
    #: running statistics (``jln.families.batch_norm.module``): ``state(cfg, *shapes)`` gives their specs;
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



LINEN_IMPORTS = ">>> import jax, jax.numpy as jnp\n  >>> from jln import linen as jnn\n"
NNX_IMPORTS = ">>> import jax.numpy as jnp\n  >>> from flax import nnx\n  >>> from jln import nnx as jnnx\n"
NORM_RNGS = "the key of an initializer other than ones and zeros; otherwise unused."
DENSE_RNGS = "``nnx.Rngs`` for the Dense kernel init."


def aliased_inputs(kind: Kind, inputs: tuple[Any, ...], aliased: Mapping[str, Any] | None, fn: str) -> tuple[Any, ...]:
    """``inputs`` with each input of ``kind.input_aliases`` taken from its keyword when the call
    gave it that way; ``TypeError`` when an input comes both ways or not at all."""
    if not kind.input_aliases:
        return inputs
    out = list(inputs)
    given = aliased or {}
    for name, alias in kind.input_aliases:
        i = kind.inputs.index(name)
        by_alias = given.get(alias)
        if out[i] is not None and by_alias is not None:
            raise TypeError(f"{fn}: pass `{name}` once: positionally (or as {name}=...) or as {alias}=...; received both.")
        if out[i] is None:
            if by_alias is None:
                raise TypeError(f"{fn}: missing the input `{name}` (also taken as {alias}=..., torch's keyword).")
            out[i] = by_alias
    return tuple(out)


def unknown_keywords(kind: Kind, kwargs: Mapping[str, Any], api: str, sizes: tuple[str, ...] = ()) -> None:
    """``TypeError`` for a keyword the ``api`` face of ``kind`` does not take: a flax argument
    name says jln's (:func:`flax_hint`); any other names the closest option."""
    flax_hint(kind, kwargs, api)
    known = [f.name for f in kind.options] + list(sizes)
    for name in kwargs:
        if name not in known and name not in ("parent", "name", "rngs"):
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"; did you mean {close[0]}=...?" if close else ""
            raise TypeError(
                f"jln.{api}.{kind.name} got an unexpected keyword argument {name!r}{hint} Its options "
                f"are: {', '.join(known)}."
            )


def check_features_option(kind: Kind, cfg: Any, inputs: tuple[Any, ...], fn: str) -> None:
    """``ValueError`` unless ``x``, the first input, has ``cfg.features`` at the kind's
    ``features_axis`` (kinds with a ``features`` option and an ``x``): said as the module's
    mistake, before the core function meets shapes the user never passed."""
    if kind.inputs[:1] != ("x",) or "features" not in {f.name for f in kind.options}:
        return
    x, want = inputs[0], cfg.features
    _validate.check_floating(x, fn)
    if x.ndim == 0 or not -x.ndim <= kind.features_axis < x.ndim:
        raise ValueError(f"{fn}: `x` must have a feature axis {kind.features_axis}; received x.shape={tuple(x.shape)}.")
    have = int(x.shape[kind.features_axis])
    if have != want:
        raise ValueError(
            f"{fn}: the module was built for features={want} at axis {kind.features_axis} of x; received "
            f"x.shape={tuple(x.shape)}, which has {have} there. Build it with features={have}, or pass x "
            f"with {want} features."
        )
