"""The ``LocalResponseNorm`` module kind, for :mod:`jln.linen` and :mod:`jln.nnx` through
:class:`jln._modules.Kind`: no parameters; the apply function calls only
:func:`jln.local_response_norm`."""

from __future__ import annotations

from typing import Any

import jax

from jln import _modules as M
from jln import _validate
from jln.families.local_response_norm.function import _number, local_response_norm

Array = jax.Array


def _check(cfg: Any) -> None:
    fn = "jln LocalResponseNorm"
    _validate.set_positive(cfg, ("size",), fn)
    for name in ("alpha", "beta", "k"):
        _number(getattr(cfg, name), name, fn)
    ch = cfg.channel_axis
    if isinstance(ch, bool) or not isinstance(ch, int):
        raise TypeError(f"{fn}: `channel_axis` must be an int (1 for NCHW, -1 for NHWC); received {ch!r}.")
    _validate.check_choice(cfg.impl, "impl", ("auto", "xla"), fn)
    if cfg.dtype is not None:
        _validate.check_module_options(cfg, fn)


LocalResponseNormConfig = M.make_config(
    "LocalResponseNormConfig",
    (M.Option("size", "int", doc="number of neighbouring channels in the window (torch's ``size``)."),
     M.Option("alpha", "float", 1e-4, "multiplicative factor (torch's default 1e-4)."),
     M.Option("beta", "float", 0.75, "exponent (torch's default 0.75)."),
     M.Option("k", "float", 1.0, "additive factor (torch's default 1.0)."),
     M.Option("channel_axis", "int", 1, "the channel axis: 1 for torch's layout, -1 for channels-last."),
     M.DTYPE.but(doc="``None``: output in ``x.dtype``; else ``x`` is cast to it first."),
     M.PARAM_DTYPE.but(doc="unused (no parameters); accepted for symmetry."),
     M.IMPL.but(doc='``"auto"`` or ``"xla"`` (no kernels for this family).')),
    _check,
)


def lrn_specs(cfg: Any) -> dict[str, Any]:
    return {}


def apply_lrn(params: Any, x: Array, cfg: Any) -> tuple[Array, None]:
    """``jln.local_response_norm`` with the module's options."""
    y = local_response_norm(M.cast_in(x, cfg.dtype), cfg.size, alpha=cfg.alpha, beta=cfg.beta, k=cfg.k,
                            channel_axis=cfg.channel_axis)
    return y, None


LOCAL_RESPONSE_NORM = M.Kind(
    "LocalResponseNorm", LocalResponseNormConfig, lrn_specs, apply_lrn, ("x",),
    doc="Local response normalization with torch's numbers (``nn.LocalResponseNorm(size, alpha, beta, "
        "k)``): ``x / (k + alpha * mean_window(x^2)) ** beta`` over ``size`` neighbouring channels; no "
        "parameters.\n\nCalls :func:`jln.local_response_norm` (its dtype rule: torch's op-by-op rounding "
        "for bfloat16/float16).",
    returns="(``__call__(x)``): array of ``x.shape``, dtype ``x.dtype`` (or ``dtype``).",
    raises="TypeError, ValueError: ``size`` not a positive int, ``alpha``/``beta``/``k`` not finite "
           "numbers, ``impl`` other than ``\"auto\"``/``\"xla\"``; as :func:`jln.local_response_norm` "
           "otherwise.",
    examples=(M.LINEN_IMPORTS + "  >>> x = jnp.ones((2, 4, 3))\n  >>> jnn.LocalResponseNorm(size=2).apply({}, x).shape\n"
              "  (2, 4, 3)",
              M.NNX_IMPORTS + "  >>> jnnx.LocalResponseNorm(2)(jnp.ones((2, 4, 3))).shape\n  (2, 4, 3)"),
    rngs_doc="unused (no parameters).", positional=1,
)
