"""Assert, in your own test suite, that a JAX function or Flax module matches its torch original.

Both sides run on the same random inputs, forward and backward (input gradients through
``jax.vjp`` and ``torch.autograd`` with the same random cotangent), and every output and
gradient is held to jln's parity rule (:mod:`jln._compare`):

* ``reference="float64"`` (the rule ``jln parity`` applies): the torch function is evaluated
  again in float64 on the same rounded inputs, and the JAX result may be at most twice as far
  from that exact answer as torch itself is, plus a small dtype floor:
  ``max|jax - ref64| <= 2 * max|torch - ref64| + atol(dtype)``.
* ``reference="torch"`` (the default): the JAX result is compared with torch's directly:
  ``max|jax - torch| <= atol(dtype) + rtol(dtype) * max|torch|``, where ``rtol(dtype)`` allows a
  few units in the last place of the largest element (summation orders differ).

A mismatch raises :class:`ParityError` (an ``AssertionError``, so pytest shows it as a test
failure) naming the output, the dtype, the shape, the errors and the bound.

Example (in a user's ``test_port.py``)::

    import torch, jln, jln.testing

    def test_my_norm():
        jln.testing.assert_matches_torch(
            lambda x, w, b: jln.layer_norm(x, w, b, eps=1e-5),
            lambda x, w, b: torch.nn.functional.layer_norm(x, x.shape[-1:], w, b, 1e-5),
            shapes=[(4, 64), (64,), (64,)],
        )

torch is imported lazily; these helpers need it installed (``pip install 'jln[torch]'``).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jln import _compare

__all__ = [
    "ParityError",
    "ParityResult",
    "assert_matches_torch",
    "assert_module_matches_torch",
    "check_matches_torch",
    "check_module_matches_torch",
    "format_results",
]

#: dtypes swept when neither ``inputs`` nor ``dtypes`` fix them (float64 only under x64).
DEFAULT_DTYPES = ("float32", "bfloat16", "float16")

REFERENCES = ("torch", "float64")


@dataclass(frozen=True)
class ParityResult:
    """One output (forward) or one input gradient (backward) of one comparison.

    Attributes:
      name: what was compared (a function, module or registry op name).
      output: which output: ``"out"``, ``"out[1]"``, or ``"d x"``/``"d arg2"`` for gradients.
      direction: ``"fwd"`` or ``"bwd"``.
      dtype: the dtype of the compared array.
      shape: its shape.
      report: the parity measures (:class:`jln._compare.Report`).
      note: why it failed when the numbers alone do not say (dtype or shape mismatch).
      passed: whether the rule holds and nothing else is wrong.
    """

    name: str
    output: str
    direction: str
    dtype: str
    shape: tuple[int, ...]
    report: _compare.Report
    note: str = ""
    passed: bool = field(default=True)

    # -- the measures, by name (all from ``report``) ------------------------------------------

    @property
    def max_abs_err(self) -> float:
        """``max|jax - reference|``: the float64 reference with ``reference="float64"``, else torch."""
        return self.report.max_abs_err

    @property
    def max_rel_err(self) -> float:
        """:attr:`max_abs_err` divided by the reference's largest ``|value|`` (0 when both are 0)."""
        return self.report.max_rel_err

    @property
    def bound(self) -> float:
        """What :attr:`max_abs_err` may reach under the rule (not used when :attr:`exact_rule`)."""
        return self.report.bound

    @property
    def torch_err(self) -> float:
        """torch's own ``max|torch - ref64|`` (0 without a float64 reference)."""
        return self.report.torch_err

    @property
    def max_ulp(self) -> float:
        """``max|jax - torch|`` (same dtype) in units in the last place of each row's largest
        ``|torch|`` (a row: the last axis); ``nan`` where a NaN meets a number."""
        return self.report.max_ulp

    @property
    def max_ulp_elementwise(self) -> int:
        """The largest elementwise ulp distance jax vs torch, each element in its own ulps (a
        near-zero element's invisible error can count 1e9 of them); the bit-exact rule's measure."""
        return self.report.max_ulp_elementwise

    @property
    def frac_bitexact(self) -> float:
        """The share of elements where jax and torch agree bit for bit."""
        return self.report.frac_bitexact

    @property
    def exact_rule(self) -> bool:
        """Whether the half-precision bit-exact rule applied (instead of :attr:`bound`)."""
        return self.report.exact_rule

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: the fields plus the report's measures, flattened."""
        r = self.report
        return {
            "op": self.name,
            "output": self.output,
            "direction": self.direction,
            "dtype": self.dtype,
            "shape": list(self.shape),
            "pass": self.passed,
            "max_abs_err": _finite_or_str(r.max_abs_err),
            "max_rel_err": _finite_or_str(r.max_rel_err),
            "bound": _finite_or_str(r.bound),
            "torch_err": _finite_or_str(r.torch_err),
            "max_ulp": _finite_or_str(r.max_ulp),
            "max_ulp_elementwise": int(r.max_ulp_elementwise) if r.max_ulp_elementwise < _compare.NAN_ULP else "nan",
            "frac_bitexact": r.frac_bitexact,
            "exact_rule": r.exact_rule,
            "note": self.note,
        }

    def describe(self) -> str:
        """One line a user can act on: what, where, the numbers and the bound."""
        r = self.report
        rule = (
            f"half-precision bit-exact rule: >= {_compare.EXACT_FRACTION:.1%} bit-exact and <= "
            f"{_compare.EXACT_MAX_ULP.get(r.dtype, 1)} ulp (or 1 at the row's scale)"
            if r.exact_rule
            else f"bound {r.bound:.3g}"
        )
        verdict = "ok" if self.passed else "FAIL"
        head = f"{verdict} {self.name} {self.direction} {self.output} dtype={self.dtype} shape={self.shape}"
        against = (f"vs the float64 reference, {rule}; torch's own error against it {r.torch_err:.3g}"
                   if r.ref64 else f"|jax - torch|, {rule}")
        nums = (
            f"max_abs_err={r.max_abs_err:.3g} ({against}), "
            f"max_ulp={_compare.ulp_text(r.max_ulp)} (at the row's scale; elementwise "
            f"{_compare.ulp_text(r.max_ulp_elementwise)}), frac_bitexact={r.frac_bitexact:.4f} (all vs torch)"
        )
        return f"{head}: {nums}" + (f" -- {self.note}" if self.note else "")


class ParityError(AssertionError):
    """JAX and torch disagree beyond the parity rule; ``results`` holds every comparison."""

    def __init__(self, message: str, results: Sequence[ParityResult]):
        super().__init__(message)
        self.results = list(results)


def _finite_or_str(v: float) -> float | str:
    return float(v) if math.isfinite(v) else str(v)


# -- array plumbing -----------------------------------------------------------------------


def _torch() -> Any:
    try:
        import torch
    except ImportError as e:
        raise ImportError(
            "jln.testing compares against PyTorch, which is not installed. Install it with "
            "`pip install 'jln[torch]'` (CPU builds are enough)."
        ) from e
    return torch


def _is_float(dtype: Any) -> bool:
    return bool(jnp.issubdtype(np.dtype(dtype), jnp.floating))


def _cast(a: np.ndarray, dtype: Any) -> np.ndarray:
    dtype = np.dtype(jnp.dtype(dtype))
    if dtype == np.float64:
        return np.asarray(a, np.float64)
    return np.asarray(a, np.float32).astype(dtype)


def _to_torch(a: np.ndarray, *, float64: bool = False) -> Any:
    """The same values as a torch tensor (bfloat16 through float32, which is exact)."""
    torch = _torch()
    if not _is_float(a.dtype):
        return torch.from_numpy(np.array(a))
    if float64:
        return torch.from_numpy(np.asarray(a, np.float64).copy())
    name = np.dtype(a.dtype).name
    wide = np.float64 if name == "float64" else np.float32
    return torch.from_numpy(np.asarray(a, wide).copy()).to(getattr(torch, name))


def _flatten_torch(out: Any) -> list[Any]:
    """Leaves of a torch output in jax's pytree order (tuples/lists in order, dicts by key)."""
    if isinstance(out, (tuple, list)):
        return [leaf for o in out for leaf in _flatten_torch(o)]
    if isinstance(out, Mapping):
        return [leaf for k in sorted(out) for leaf in _flatten_torch(out[k])]
    if out is None:
        return []
    return [out]


def _labels(n: int) -> list[str]:
    return ["out"] if n == 1 else [f"out[{i}]" for i in range(n)]


def _failed_report(dtype: str, exact: bool) -> _compare.Report:
    inf = float("inf")
    return _compare.Report(dtype, inf, inf, 0.0, 0.0, 0.0, exact, False)


# -- the engine -----------------------------------------------------------------------------


def _cotangents(struct_leaves: Sequence[Any], seed: int) -> list[Any]:
    """One random cotangent per floating output (None for others), the same for every side."""
    rng = np.random.default_rng(seed + 7919)
    return [_cast(rng.standard_normal(s.shape), s.dtype) if _is_float(s.dtype) else None for s in struct_leaves]


def _jax_cotangent(cts: Sequence[Any], struct_leaves: Sequence[Any], treedef: Any) -> Any:
    """:func:`_cotangents` as the output's tree for ``jax.vjp`` (float0 zeros for non-floats)."""
    return jax.tree.unflatten(treedef, [
        jnp.asarray(c) if c is not None else np.zeros(s.shape, jax.dtypes.float0)
        for c, s in zip(cts, struct_leaves, strict=True)
    ])


def _torch_grads(outs: Sequence[Any], cts: Sequence[Any], wrt: Sequence[Any], float64: bool) -> list[Any]:
    """The gradients of torch's ``outs`` under :func:`_cotangents` w.r.t. the tensors ``wrt``
    (zeros where an output does not reach one)."""
    import torch

    pairs = [(o, _to_torch(c, float64=float64)) for o, c in zip(outs, cts, strict=False)
             if c is not None and getattr(o, "requires_grad", False)]
    got: Sequence[Any] = (None,) * len(wrt)
    if pairs:
        got = torch.autograd.grad([o for o, _ in pairs], list(wrt), grad_outputs=[c.to(o.dtype) for o, c in pairs],
                                  allow_unused=True)
    return [torch.zeros_like(w) if g is None else g for w, g in zip(wrt, got, strict=True)]


def _check_set(
    jax_fn: Callable[..., Any],
    torch_fn: Callable[..., Any],
    inputs: Sequence[Any] | Mapping[str, Any],
    *,
    grad: bool,
    reference: str,
    exact: bool,
    rtol: float | None,
    atol: float | None,
    grad_atol: float | None,
    seed: int,
    name: str,
    jit: bool,
) -> list[ParityResult]:
    """The engine of :func:`check_matches_torch`: one set of concrete inputs, as given."""
    if reference not in REFERENCES:
        raise ValueError(
            f"{name}: `reference` must be one of {REFERENCES}; received {reference!r}."
        )
    torch = _torch()
    keys = list(inputs) if isinstance(inputs, Mapping) else None
    values = list(inputs.values()) if isinstance(inputs, Mapping) else list(inputs)
    arrays = [_compare.to_numpy(v) for v in values]
    call = (lambda *a: jax_fn(**dict(zip(keys, a, strict=True)))) if keys else jax_fn
    diff = [i for i, a in enumerate(arrays) if _is_float(a.dtype)] if grad else []
    jargs = [jnp.asarray(a) for a in arrays]

    out_struct = jax.eval_shape(call, *jargs)
    struct_leaves, treedef = jax.tree.flatten(out_struct)
    cts = _cotangents(struct_leaves, seed)

    # jax: forward and backward in one function, compiled once
    def fwd_bwd(args: list[Any], cot: list[Any]) -> tuple[Any, Any]:
        def f(*d: Any) -> Any:
            full = list(args)
            for i, v in zip(diff, d, strict=True):
                full[i] = v
            return call(*full)

        if not diff:
            return f(), ()
        out, vjp = jax.vjp(f, *[args[i] for i in diff])
        return out, vjp(_jax_cotangent(cot, struct_leaves, treedef))

    run = jax.jit(fwd_bwd) if jit else fwd_bwd
    j_out, j_grads = run(jargs, cts)
    j_leaves = [np.asarray(o) for o in jax.tree.leaves(j_out)]
    j_grads = [np.asarray(g) for g in j_grads]

    def torch_side(float64: bool) -> tuple[list[Any], list[Any]]:
        leaves = [_to_torch(a, float64=float64) for a in arrays]
        for i in diff:
            leaves[i].requires_grad_(True)
        with torch.enable_grad():
            out = torch_fn(**dict(zip(keys, leaves, strict=True))) if keys else torch_fn(*leaves)
        outs = _flatten_torch(out)
        grads = _torch_grads(outs, cts, [leaves[i] for i in diff], float64) if diff else []
        return [_compare.to_numpy(o) for o in outs], [_compare.to_numpy(g) for g in grads]

    t_out, t_grads = torch_side(False)
    if reference == "float64":
        try:
            r_out, r_grads = torch_side(True)
        except Exception as e:  # pragma: no cover - depends on the user's torch function
            raise RuntimeError(
                f"{name}: reference='float64' evaluates the torch function on float64 inputs, "
                f"and it failed ({type(e).__name__}: {e}). Use reference='torch' instead."
            ) from e
    else:
        r_out, r_grads = [None] * len(t_out), [None] * len(t_grads)

    results: list[ParityResult] = []
    labels = _labels(len(j_leaves))
    if len(t_out) != len(j_leaves):
        note = f"jax returned {len(j_leaves)} output(s), torch {len(t_out)}"
        results.append(ParityResult(name, "out", "fwd", "?", (), _failed_report("?", exact), note, False))
        return results
    for lab, j, t, r in zip(labels, j_leaves, t_out, r_out, strict=True):
        results.append(_one(name, lab, "fwd", j, t, r, exact=exact, rtol=rtol, atol=atol))
    arg_names = keys or [f"arg{i}" for i in range(len(arrays))]
    for i, j, t, r in zip(diff, j_grads, t_grads, r_grads, strict=True):
        g_atol = atol
        if grad_atol is not None:
            g_atol = max(grad_atol, _compare.ATOL.get(str(j.dtype), 0.0) if atol is None else atol)
        results.append(_one(name, f"d {arg_names[i]}", "bwd", j, t, r, exact=False, rtol=rtol, atol=g_atol))
    return results


def _one(
    name: str, output: str, direction: str, j: np.ndarray, t: np.ndarray, r: np.ndarray | None,
    *, exact: bool, rtol: float | None, atol: float | None,
) -> ParityResult:
    dtype, shape = str(j.dtype), tuple(j.shape)
    if j.shape != t.shape:
        note = f"shape mismatch: jax {j.shape}, torch {tuple(t.shape)}"
        return ParityResult(name, output, direction, dtype, shape, _failed_report(dtype, exact), note, False)
    if rtol is None and r is None:  # compared with torch alone: allow a few ulp of the max
        rtol = _compare.RTOL.get(dtype, 0.0)
    report = _compare.compare(j, t, r, exact=exact, rtol=rtol, atol=atol)
    note = ""
    passed = report.passed
    if str(t.dtype) != dtype:
        note = f"dtype mismatch: jax gives {dtype}, torch gives {t.dtype}"
        passed = False
    elif report.nonfinite_mismatch:
        note = (f"NaN/Inf differ from torch's at {report.nonfinite_mismatch} element(s) (NaN against "
                f"inf, an infinity's sign, or a non-finite value against a finite one)")
    return ParityResult(name, output, direction, dtype, shape, report, note, bool(passed))


# -- user-facing assertions -----------------------------------------------------------------


def _x64() -> bool:
    return bool(jax.config.jax_enable_x64)  # type: ignore[attr-defined]


def _default_dtypes() -> tuple[str, ...]:
    return DEFAULT_DTYPES + (("float64",) if _x64() else ())


def _check_dtypes(dtypes: Sequence[Any], fn: str) -> list[str]:
    names = []
    for d in dtypes:
        try:
            name = np.dtype(jnp.dtype(d)).name
        except TypeError:
            raise TypeError(f"{fn}: unknown dtype {d!r} in `dtypes`; use names like 'float32' or 'bfloat16'.") from None
        if not _is_float(name):
            raise TypeError(f"{fn}: `dtypes` must be floating dtypes; received {name}.")
        if name == "float64" and not _x64():
            raise ValueError(
                f"{fn}: dtype float64 needs 64-bit JAX; enable it with "
                "jax.config.update('jax_enable_x64', True) (or `with jax.enable_x64(True):`), "
                "or drop float64 from `dtypes`."
            )
        names.append(name)
    return names


def _input_sets(
    inputs: Sequence[Any] | Mapping[str, Any] | None,
    shapes: Sequence[Sequence[int]] | Mapping[str, Sequence[int]] | None,
    dtypes: Sequence[Any] | None,
    seed: int,
    fn: str,
) -> list[tuple[str, Any]]:
    """(dtype label, inputs) pairs: given inputs as they are or cast, or random ones per dtype."""
    if (inputs is None) == (shapes is None):
        raise TypeError(
            f"{fn}: pass exactly one of `inputs` (arrays) or `shapes` (one shape per argument); "
            f"received {'both' if inputs is not None else 'neither'}."
        )
    if inputs is not None:
        if isinstance(inputs, Mapping):
            keys, vals = list(inputs), [_compare.to_numpy(v) for v in inputs.values()]
        else:
            keys, vals = None, [_compare.to_numpy(v) for v in inputs]
        if dtypes is None:
            label = ",".join(sorted({str(v.dtype) for v in vals if _is_float(v.dtype)})) or "-"
            return [(label, dict(zip(keys, vals, strict=True)) if keys else vals)]
        out: list[tuple[str, Any]] = []
        for d in _check_dtypes(dtypes, fn):
            cast = [_cast(v, d) if _is_float(v.dtype) else v for v in vals]
            out.append((d, dict(zip(keys, cast, strict=True)) if keys else cast))
        return out
    assert shapes is not None
    names = _check_dtypes(_default_dtypes() if dtypes is None else dtypes, fn)
    keys = list(shapes) if isinstance(shapes, Mapping) else None
    shape_list = []
    for s in shapes.values() if isinstance(shapes, Mapping) else shapes:
        if not isinstance(s, (tuple, list)) or not all(isinstance(n, int) and n >= 0 for n in s):
            raise TypeError(
                f"{fn}: `shapes` must hold one shape (a tuple of sizes) per argument, e.g. "
                f"shapes=[(4, 16)] for one argument; received {shapes!r}."
            )
        shape_list.append(tuple(s))
    out = []
    for d in names:
        rng = np.random.default_rng(seed)
        vals = [_cast(rng.standard_normal(s), d) for s in shape_list]
        out.append((d, dict(zip(keys, vals, strict=True)) if keys else vals))
    return out


def format_results(results: Sequence[ParityResult], *, failures_only: bool = False) -> str:
    """The results as text, one :meth:`ParityResult.describe` line each.

    Args:
      results: what :func:`check_matches_torch` (or an ``assert_*`` helper) returned.
      failures_only: leave out the results that passed.

    Returns:
      the lines joined by newlines (``""`` when nothing is left).

    Example:
      >>> import numpy as np, torch, jln
      >>> from jln.testing import check_matches_torch, format_results
      >>> x = np.random.default_rng(0).standard_normal((4, 32)).astype(np.float32)
      >>> res = check_matches_torch(
      ...     lambda x: jln.layer_norm(x, eps=1e-1),  # the wrong eps
      ...     lambda t: torch.nn.functional.layer_norm(t, t.shape[-1:], eps=1e-5),
      ...     inputs=[x], grad=False, name="ln")
      >>> print(format_results(res, failures_only=True))  # doctest: +ELLIPSIS
      FAIL ln fwd out dtype=float32 shape=(4, 32): max_abs_err=0.19... (|jax - torch|, bound 1.29e-05), ...
    """
    return "\n".join(r.describe() for r in results if not (failures_only and r.passed))


def _raise_if_failed(results: list[ParityResult], reference: str, what: str) -> list[ParityResult]:
    bad = [r for r in results if not r.passed]
    if bad:
        head = (
            f"{what}: {len(bad)} of {len(results)} comparisons exceed jln's parity rule "
            f"(reference={reference!r}):"
        )
        hint = (
            "Check dtype handling (where the computation upcasts and where it rounds), eps and "
            "its position, the normalized axes, and parameter conventions; or loosen with "
            "rtol=/atol= if the difference is expected."
        )
        raise ParityError("\n".join([head, format_results(bad), hint]), results)
    return results


def check_matches_torch(
    jax_fn: Callable[..., Any],
    torch_fn: Callable[..., Any],
    *,
    inputs: Sequence[Any] | Mapping[str, Any] | None = None,
    shapes: Sequence[Sequence[int]] | Mapping[str, Sequence[int]] | None = None,
    dtypes: Sequence[Any] | None = None,
    grad: bool = True,
    reference: str = "torch",
    exact: bool = False,
    rtol: float | None = None,
    atol: float | None = None,
    grad_atol: float | None = None,
    seed: int = 0,
    name: str | None = None,
    jit: bool = True,
) -> list[ParityResult]:
    """Compare a JAX function with a torch function, forward and backward, across dtypes; never
    raises on a mismatch (:func:`assert_matches_torch` takes the same arguments and raises).

    Give either ``inputs`` (arrays of any framework; with ``dtypes`` their floating entries are
    cast to each dtype, without they are used as they are) or ``shapes`` (random N(0, 1) inputs,
    one per argument, in each of ``dtypes``). A sequence calls the functions positionally, a
    mapping by keyword. Everything after the two functions is keyword-only.

    Args:
      jax_fn: the JAX side, taking ``jax.Array`` arguments; returns an array or a pytree.
      torch_fn: the torch side, taking tensors, returning a tensor or a tuple/list/dict of them.
      inputs: concrete arguments (exclusive with ``shapes``).
      shapes: one shape per argument (exclusive with ``inputs``).
      dtypes: floating dtypes to sweep; default float32, bfloat16, float16 (and float64 when
        ``jax_enable_x64`` is on) with ``shapes``, the inputs' own dtypes with ``inputs``.
      grad: also compare gradients w.r.t. every floating input with a shared random cotangent.
      reference: ``"torch"`` (compare with torch directly, ``atol + rtol * max|torch|``) or
        ``"float64"`` (jln's 2x-torch-error rule against torch evaluated in float64).
      exact: forward outputs in bfloat16 and float16 must be bit-exact on >= 99.5% of
        elements and at most 2 ulp off, elementwise (or 1 ulp of the row's largest value, where
        a bias cancels a product to near zero).
      rtol, atol: override the dtype defaults of the rule.
      grad_atol: a larger absolute floor for gradients only (e.g. the rounding floor of an
        ill-conditioned backward).
      seed: seed of the random inputs and cotangents.
      name: label used in results and messages (default: ``jax_fn``'s name).
      jit: ``jax.jit`` the forward+backward function (compiled once per shape and dtype).

    Returns:
      one :class:`ParityResult` per output and dtype and, with ``grad``, one per floating
      input and dtype; ``passed`` says whether each holds.

    Raises:
      TypeError/ValueError: bad arguments (both or neither of inputs/shapes, unknown dtype,
        float64 without x64, unknown reference).
      ImportError: torch is not installed.

    Example:
      >>> import numpy as np, torch, jln
      >>> from jln.testing import check_matches_torch
      >>> x = np.random.default_rng(0).standard_normal((4, 32)).astype(np.float32)
      >>> res = check_matches_torch(jln.rms_norm, lambda t: torch.nn.functional.rms_norm(t, t.shape[-1:]),
      ...                           inputs=[x])
      >>> [(r.direction, r.output, r.passed) for r in res]
      [('fwd', 'out', True), ('bwd', 'd arg0', True)]
      >>> res[0].max_abs_err < 1e-5 and res[0].max_ulp <= 2
      True
    """
    return _check_all(
        jax_fn, torch_fn, "check_matches_torch", inputs=inputs, shapes=shapes, dtypes=dtypes, grad=grad,
        reference=reference, exact=exact, rtol=rtol, atol=atol, grad_atol=grad_atol, seed=seed, name=name, jit=jit,
    )


def _check_all(jax_fn: Callable[..., Any], torch_fn: Callable[..., Any], what: str, *, inputs: Any, shapes: Any,
               dtypes: Any, reference: str, seed: int, name: str | None, **kw: Any) -> list[ParityResult]:
    label = str(name or getattr(jax_fn, "__name__", "fn"))
    if reference not in REFERENCES:
        raise ValueError(f"{what}: `reference` must be one of {REFERENCES}; received {reference!r}.")
    results: list[ParityResult] = []
    for _, ins in _input_sets(inputs, shapes, dtypes, seed, what):
        results += _check_set(jax_fn, torch_fn, ins, reference=reference, seed=seed, name=label, **kw)
    return results


def assert_matches_torch(
    jax_fn: Callable[..., Any],
    torch_fn: Callable[..., Any],
    *,
    inputs: Sequence[Any] | Mapping[str, Any] | None = None,
    shapes: Sequence[Sequence[int]] | Mapping[str, Sequence[int]] | None = None,
    dtypes: Sequence[Any] | None = None,
    grad: bool = True,
    reference: str = "torch",
    exact: bool = False,
    rtol: float | None = None,
    atol: float | None = None,
    grad_atol: float | None = None,
    seed: int = 0,
    name: str | None = None,
    jit: bool = True,
) -> list[ParityResult]:
    """Assert that a JAX function matches a torch function, forward and backward, across dtypes.

    Takes exactly the arguments of :func:`check_matches_torch` (everything after the two
    functions keyword-only) and raises where that returns a failed result.

    Args:
      jax_fn, torch_fn, inputs, shapes, dtypes, grad, reference, exact, rtol, atol, grad_atol,
        seed, name, jit: as in :func:`check_matches_torch`.

    Returns:
      every :class:`ParityResult` (all passed).

    Raises:
      ParityError: some output or gradient breaks the rule; the message lists each with its
        dtype, shape, max abs error, bound, max ulp distance and bit-exact fraction.
      TypeError/ValueError: bad arguments (both or neither of inputs/shapes, unknown dtype,
        float64 without x64, unknown reference).

    Example:
      >>> import torch, jln
      >>> from jln.testing import assert_matches_torch
      >>> results = assert_matches_torch(
      ...     lambda x: jln.layer_norm(x),
      ...     lambda x: torch.nn.functional.layer_norm(x, x.shape[-1:]),
      ...     shapes=[(4, 32)], dtypes=["float32", "bfloat16"])
      >>> [(r.dtype, r.direction) for r in results]  # all passed, or ParityError was raised
      [('float32', 'fwd'), ('float32', 'bwd'), ('bfloat16', 'fwd'), ('bfloat16', 'bwd')]
    """
    label = str(name or getattr(jax_fn, "__name__", "fn"))
    results = _check_all(
        jax_fn, torch_fn, "assert_matches_torch", inputs=inputs, shapes=shapes, dtypes=dtypes, grad=grad,
        reference=reference, exact=exact, rtol=rtol, atol=atol, grad_atol=grad_atol, seed=seed, name=label, jit=jit,
    )
    return _raise_if_failed(results, reference, label)


@dataclass
class _JaxModule:
    """The jln side of a module check: ``apply(params, *args, **kwargs)``, its parameters
    (``variables["params"]`` for linen, the ``nnx.Param`` values for nnx), and the module object
    that decides their torch layout (:func:`jln.interop.to_torch_state_dict`)."""

    apply: Callable[..., Any]
    params: Any
    module: Any

    def cast(self, dtype: str | None) -> _JaxModule:
        if dtype is None:
            return self
        cast = jax.tree.map(lambda v: v.astype(dtype) if _is_float(getattr(v, "dtype", np.int32)) else v, self.params)
        return _JaxModule(self.apply, cast, self.module)

    def fn(self) -> Callable[..., Any]:
        return lambda *a, **kw: self.apply(self.params, *a, **kw)


def _jax_module(module: Any, what: str) -> _JaxModule:
    if isinstance(module, tuple) and len(module) == 2:
        linen_module, variables = module
        rest = {k: v for k, v in dict(variables).items() if k != "params"}
        return _JaxModule(
            lambda p, *a, **kw: linen_module.apply({**rest, "params": p}, *a, **kw),
            dict(variables).get("params", {}), linen_module,
        )
    from flax import nnx

    if isinstance(module, nnx.Module):
        graphdef, params, rest = nnx.split(module, nnx.Param, ...)  # type: ignore[misc]

        def apply(p: Any, *a: Any, **kw: Any) -> Any:
            state = jax.tree.map(lambda v: v, params)  # a copy to fill (leaves are replaced)
            nnx.replace_by_pure_dict(state, p)
            return nnx.merge(graphdef, state, rest)(*a, **kw)

        return _JaxModule(apply, nnx.to_pure_dict(params), module)
    raise TypeError(
        f"{what}: the jln side must be a `(linen_module, variables)` pair or a flax.nnx Module; "
        f"received {type(module).__name__}. Convert the torch module with "
        "jln.interop.from_torch(torch_module)."
    )


def _param_grads(
    jm: _JaxModule, tmod: Any, t64: Any, ins: Any, *, reference: str, rtol: float | None, atol: float | None,
    seed: int, name: str, torch_call: Callable[..., Any] | None = None,
) -> list[ParityResult]:
    """Results for the gradients w.r.t. the parameters, under the cotangents
    :func:`check_matches_torch` uses; jln's are mapped to torch's names by the module's torch
    layout (a rearrangement, so it maps gradients as it maps values). [] when the jln tree does
    not map onto the torch module's parameters (a module without a layout, another tree).
    ``torch_call(module, args)`` calls the torch module (default: positionally, or by keyword
    for mapping ``ins``)."""
    torch = _torch()
    from jln.interop import _layout_of

    try:
        layout = _layout_of(jm.module, name)
    except TypeError:
        return []
    named = [k for k, v in tmod.named_parameters() if v.requires_grad]
    if not named or set(layout.state_dict(jm.params, jm.module)) != set(named):
        return []
    keys = list(ins) if isinstance(ins, Mapping) else None
    vals = [_compare.to_numpy(v) for v in (ins.values() if isinstance(ins, Mapping) else ins)]

    def call(p: Any) -> Any:
        args = [jnp.asarray(v) for v in vals]
        return jm.apply(p, **dict(zip(keys, args, strict=True))) if keys else jm.apply(p, *args)

    out, vjp = jax.vjp(call, jm.params)
    leaves, treedef = jax.tree.flatten(out)
    cts = _cotangents(leaves, seed)
    (g,) = vjp(_jax_cotangent(cts, leaves, treedef))
    j_grads = {k: np.asarray(v) for k, v in layout.state_dict(g, jm.module).items()}

    def torch_grads(m: Any, float64: bool) -> dict[str, np.ndarray]:
        params = dict(m.named_parameters())
        args = [_to_torch(v, float64=float64) if _is_float(v.dtype) else torch.from_numpy(np.asarray(v)) for v in vals]
        with torch.enable_grad():
            if torch_call is not None:
                o = torch_call(m, args)
            else:
                o = m(**dict(zip(keys, args, strict=True))) if keys else m(*args)
        got = _torch_grads(_flatten_torch(o), cts, [params[k] for k in named], float64)
        return {k: _compare.to_numpy(gk) for k, gk in zip(named, got, strict=True)}

    t_grads = torch_grads(tmod, False)
    r_grads = torch_grads(t64, True) if reference == "float64" else {}
    return [_one(name, f"d {k}", "bwd", j_grads[k], t_grads[k], r_grads.get(k), exact=False, rtol=rtol, atol=atol)
            for k in named]


def _convert(torch_module: Any, what: str) -> Any:
    try:
        from jln import interop
    except ImportError as e:
        raise TypeError(
            f"{what}: pass the jln module (a `(linen_module, variables)` pair or an nnx Module); "
            "jln.interop, which converts torch modules, is not available in this build."
        ) from e
    return interop.from_torch(torch_module)


def assert_module_matches_torch(
    torch_module: Any,
    jln_module: Any = None,
    *,
    inputs: Sequence[Any] | Mapping[str, Any] | None = None,
    shapes: Sequence[Sequence[int]] | Mapping[str, Sequence[int]] | None = None,
    dtypes: Sequence[Any] | None = None,
    grad: bool = True,
    reference: str = "torch",
    exact: bool = False,
    rtol: float | None = None,
    atol: float | None = None,
    grad_atol: float | None = None,
    seed: int = 0,
    name: str | None = None,
    jit: bool = True,
) -> list[ParityResult]:
    """Assert that a torch module and its jln conversion compute the same thing, forward and backward.

    Takes exactly the arguments of :func:`check_module_matches_torch` and raises where that
    returns a failed result.

    The torch module is copied and put in eval mode (dropout off); it is not modified. With
    ``dtypes``, both sides' floating parameters are cast to each dtype along with the inputs;
    without, parameters keep their dtypes and inputs are float32 (or as given). Gradients are
    taken w.r.t. the floating inputs and the parameters (what fine-tuning a ported checkpoint
    uses), each parameter's under torch's name (``d self_attn.in_proj_weight``: jln's
    gradients are mapped to torch's layout as :func:`jln.interop.to_torch_state_dict` maps
    the parameters).

    Args:
      torch_module: a ``torch.nn.Module``.
      jln_module: a ``(linen_module, variables)`` pair or a ``flax.nnx`` Module; ``None``
        converts ``torch_module`` with ``jln.interop.from_torch``.
      inputs, shapes, dtypes, grad, reference, exact, rtol, atol, grad_atol, seed, jit: as in
        :func:`check_matches_torch` (``dtypes`` defaults to float32 here; ``grad_atol`` applies
        to the input and parameter gradients).
      name: label in messages (default: the torch module's class name).

    Returns:
      every :class:`ParityResult` (all passed).

    Raises:
      ParityError: some output, input gradient or parameter gradient breaks the rule.
      TypeError: ``jln_module`` is neither form, or no conversion is available.

    Example:
      >>> import torch
      >>> from jln.testing import assert_module_matches_torch
      >>> results = assert_module_matches_torch(torch.nn.LayerNorm(32), shapes=[(4, 32)])
      >>> [(r.output, r.direction, r.passed) for r in results]
      [('out', 'fwd', True), ('d arg0', 'bwd', True), ('d weight', 'bwd', True), ('d bias', 'bwd', True)]
    """
    label = name or type(torch_module).__name__
    results = _module_results(
        torch_module, jln_module, "assert_module_matches_torch", inputs=inputs, shapes=shapes, dtypes=dtypes,
        grad=grad, reference=reference, exact=exact, rtol=rtol, atol=atol, grad_atol=grad_atol, seed=seed,
        name=label, jit=jit,
    )
    return _raise_if_failed(results, reference, label)


def _module_results(
    torch_module: Any, jln_module: Any, what: str, *, inputs: Any, shapes: Any, dtypes: Any, grad: bool,
    reference: str, exact: bool, rtol: float | None, atol: float | None, grad_atol: float | None, seed: int,
    name: str | None, jit: bool,
) -> list[ParityResult]:
    """The comparisons of :func:`check_module_matches_torch` (``what`` names the caller in errors)."""
    if reference not in REFERENCES:
        raise ValueError(f"{what}: `reference` must be one of {REFERENCES}; received {reference!r}.")
    label = name or type(torch_module).__name__
    convert = jln_module is None
    if convert:
        jln_module = _convert(torch_module, what)
    base_jm = _jax_module(jln_module, what)
    base = copy.deepcopy(torch_module).eval()
    torch = _torch()
    results: list[ParityResult] = []
    sweep = ("float32",) if dtypes is None and shapes is not None else dtypes
    for dtype, ins in _input_sets(inputs, shapes, sweep, seed, what):
        cast = dtypes is not None
        tmod = copy.deepcopy(base).to(getattr(torch, dtype)) if cast else copy.deepcopy(base)
        if convert and cast:  # convert the cast module: parameter dtypes as the checkpoint's
            jm = _jax_module(_convert(tmod, what), what)
        else:
            jm = base_jm.cast(dtype if cast else None)
        jfn = jm.fn()
        t64 = copy.deepcopy(tmod).double()  # the reference sees the same rounded weights

        def torch_fn(*a: Any, _m: Any = tmod, _m64: Any = t64, **kw: Any) -> Any:
            first = next(iter(list(a) + list(kw.values())))
            return (_m64 if first.dtype == torch.float64 else _m)(*a, **kw)

        results += _check_set(
            jfn, torch_fn, ins, grad=grad, reference=reference, exact=exact,
            rtol=rtol, atol=atol, grad_atol=grad_atol, seed=seed, name=label, jit=jit,
        )
        if grad:
            g_atol = atol if grad_atol is None else max(grad_atol, atol or 0.0)
            results += _param_grads(jm, tmod, t64, ins, reference=reference, rtol=rtol, atol=g_atol,
                                    seed=seed, name=label)
    return results


def check_module_matches_torch(
    torch_module: Any,
    jln_module: Any = None,
    *,
    inputs: Sequence[Any] | Mapping[str, Any] | None = None,
    shapes: Sequence[Sequence[int]] | Mapping[str, Sequence[int]] | None = None,
    dtypes: Sequence[Any] | None = None,
    grad: bool = True,
    reference: str = "torch",
    exact: bool = False,
    rtol: float | None = None,
    atol: float | None = None,
    grad_atol: float | None = None,
    seed: int = 0,
    name: str | None = None,
    jit: bool = True,
) -> list[ParityResult]:
    """:func:`assert_module_matches_torch` without the raise: the same arguments, every result
    returned (``passed`` says whether each holds).

    Raises:
      TypeError/ValueError: bad arguments, as :func:`assert_module_matches_torch`.

    Example:
      >>> import torch
      >>> from jln.testing import check_module_matches_torch
      >>> res = check_module_matches_torch(torch.nn.LayerNorm(32), shapes=[(4, 32)])
      >>> all(r.passed for r in res), [r.output for r in res]
      (True, ['out', 'd arg0', 'd weight', 'd bias'])
    """
    return _module_results(
        torch_module, jln_module, "check_module_matches_torch", inputs=inputs, shapes=shapes, dtypes=dtypes,
        grad=grad, reference=reference, exact=exact, rtol=rtol, atol=atol, grad_atol=grad_atol, seed=seed,
        name=name, jit=jit,
    )
