"""``jln parity``: check every jln op and convention against torch, forward and backward.

Sweeps the op registry (``jln._registry``) over dtypes and shapes, and the torch modules that
``jln.interop.from_torch`` converts; each output and each input/parameter gradient is held
to jln's parity rule against torch evaluated in float64 (``jln._compare``):
``max|jln - ref64| <= 2 * max|torch - ref64| + atol(dtype)``; named RMSNorm conventions in
bfloat16 and float16 must also be bit-exact on >= 99.5% of elements and never more than 2 ulp
off, elementwise (or 1 ulp of the row's largest value, where a bias cancels a product).

Exit status: 0 when everything passes, 1 when anything fails, 2 for a usage error or when
torch is missing.
"""

from __future__ import annotations

import argparse
import copy
import fnmatch
import functools
import importlib.metadata
import json
import math
import os
import platform
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from jln import _index, _registry
from jln._compare import EXACT_MAX_ULP, ulp_text
from jln._platform import IMPLS
from jln.cli import DTYPE_ALIASES, did_you_mean, output_path_problem
from jln.testing import ParityResult, _failed_report, _jax_module, _param_grads, check_matches_torch

Shape = tuple[int, ...]

#: (shape, k): k trailing axes normalized. Width 3000, width 1, 3-D with per-example
#: conditions, two normalized axes, and zero rows.
DEFAULT_SHAPES: tuple[tuple[Shape, int], ...] = (
    ((2, 5, 64), 1),
    ((3, 3000), 1),
    ((5, 1), 1),
    ((2, 4, 8), 2),
    ((0, 16), 1),
)
FULL_SHAPES: tuple[tuple[Shape, int], ...] = DEFAULT_SHAPES + (
    ((8, 256), 1),
    ((64, 1024), 1),
    ((1, 8192), 1),
    ((2, 7, 130), 1),
    ((3, 2, 3000), 2),
    ((2, 3, 5, 7), 2),
    ((4, 0, 16), 1),
)
SHORT_DTYPE = {"float32": "f32", "float64": "f64", "bfloat16": "bf16", "float16": "f16"}
INSTALL_TORCH = "pip install 'jln[torch]'"


# -- cases ------------------------------------------------------------------------------------


@dataclass
class Case:
    """One (op, dtype, shape, variant) to run; ``run`` returns its results or raises _Skip."""

    op: str
    dtype: str
    shape: Shape
    k: int
    variant: str
    run: Callable[[], list[ParityResult]]
    results: list[ParityResult] = field(default_factory=list)
    skipped: str = ""
    seconds: float = 0.0


class _Skip(Exception):
    """A case that cannot run here; the message says why."""


def _op_case(op: _registry.Op, dtype: str, shape: Shape, k: int, variant: str = "", **kw: Any) -> Case:
    param_dtype = kw.pop("param_dtype", None)
    overrides = kw

    def run() -> list[ParityResult]:
        inputs = op.make_inputs(shape, k, dtype, param_dtype=param_dtype)

        def jax_fn(**a: Any) -> Any:
            try:
                return op.call_jln(a, k, **overrides)
            except ValueError as e:
                if "is not available here" in str(e) and "impl=" in str(e):  # pallas or native
                    raise _Skip(str(e)) from None
                raise

        try:
            return check_matches_torch(
                jax_fn, lambda **t: op.call_torch(t, k), inputs=inputs,
                reference="float64", exact=op.exact, name=op.name, grad_atol=op.grad_atol(inputs, k),
            )
        except ValueError as e:
            if _both_refuse(op, inputs, k, overrides):
                raise _Skip(f"torch and jln both refuse this input ({e})") from None
            raise

    return Case(op.name, dtype, shape, k, variant, run)


def _both_refuse(op: _registry.Op, inputs: dict[str, Any], k: int, overrides: dict[str, Any]) -> bool:
    """Whether jln (a ValueError) and torch (any error) both refuse ``inputs``: an input such as
    one value per channel for a training BatchNorm passes only when jln refuses it as torch does."""
    import torch

    try:
        op.call_jln(inputs, k, **overrides)
    except ValueError:
        pass
    else:
        return False
    try:
        op.call_torch({n: None if v is None else torch.from_numpy(np.asarray(v, np.float64)) for n, v in inputs.items()}, k)
    except Exception:  # noqa: BLE001 - torch's refusals are RuntimeError or ValueError
        return True
    return False





def _op_cases(
    ops: Sequence[_registry.Op], dtypes: Sequence[str], shapes: Sequence[tuple[Shape, int]], full: bool,
    impl: str | None = None,
) -> list[Case]:
    """The op cases; ``impl`` checks that path alone (``--impl``), else the default ``"auto"``
    (with ``full``, also ``"xla"`` and ``"pallas"``)."""
    cases = []
    for op in ops:
        # modulate (shift/scale alone) has one path, no impl= to choose
        only = {} if impl is None or not op.takes_impl else {"impl": impl}
        tag = f"impl={impl}" if only else ""
        for dtype in dtypes:
            for shape, k in shapes:
                if k > 1 and not op.multi_axis:
                    continue
                if k > len(shape):
                    continue
                if why := _not_comparable(op, shape):
                    cases.append(Case(op.name, dtype, shape, k, tag, functools.partial(_skip, why)))
                    continue
                cases.append(_op_case(op, dtype, shape, k, tag, **only))
                if not full:
                    continue
                if dtype in ("bfloat16", "float16") and op.params:
                    cases.append(_op_case(op, dtype, shape, k, f"param float32 {tag}".strip(),
                                          param_dtype="float32", **only))
                if op.takes_impl and impl is None:
                    # the default impl="auto" takes the native kernels on CPU: check XLA too
                    cases.append(_op_case(op, dtype, shape, k, "impl=xla", impl="xla"))
                    if op.fn.pallas:
                        cases.append(_op_case(op, dtype, shape, k, "impl=pallas", impl="pallas"))
    return cases


def _not_comparable(op: _registry.Op, shape: Shape) -> str:
    """Why torch's numbers are no reference for ``op`` on ``shape`` ("" where they are)."""
    if len(shape) < op.min_rank:
        return f"{op.family} takes x of rank >= {op.min_rank} (as torch); this shape has rank {len(shape)}"
    if op.family == "group_norm" and math.prod(shape[1:-1]) == 0 and shape[0] and shape[-1]:
        # channels last: the groups hold no element
        return ("empty groups: torch's weight gradient is NaN there, where the gradient of a sum over no "
                "element is 0 (jln's)")
    return ""


def _skip(why: str) -> list[ParityResult]:
    raise _Skip(why)


def _raised(case: Case, e: Exception) -> ParityResult:
    """A failed result for a case whose jln call raised (a kernel that does not compile, say)."""
    first = (str(e).strip().splitlines() or [""])[0][:200]
    return ParityResult(case.op, "raised", "fwd", case.dtype, tuple(case.shape),
                        _failed_report(case.dtype, False), note=f"{type(e).__name__}: {first}", passed=False)


# -- module cases (Flax modules through jln.interop.from_torch) -------------------------------


def _randomize(module: Any, seed: int) -> Any:
    """Give every floating parameter of a torch module small random values (not the init)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            base = 1.0 if name.endswith("weight") and p.dim() == 1 else 0.0
            p.copy_(base + 0.2 * torch.randn(p.shape, generator=g, dtype=torch.float64).to(p.dtype))
    return module.eval()


def _hf_norm(cls_name: str, d: int, eps: float | None = None, **kw: Any) -> Any:
    where = {"LlamaRMSNorm": "llama", "GemmaRMSNorm": "gemma", "T5LayerNorm": "t5", "DetrFrozenBatchNorm2d": "detr",
             "Qwen3NextRMSNormGated": "qwen3_next", "Mamba2RMSNormGated": "mamba2"}
    model = where[cls_name]
    cls = getattr(importlib.import_module(f"transformers.models.{model}.modeling_{model}"), cls_name)
    return cls(d, **kw) if eps is None else cls(d, eps=eps, **kw)


def _with_running_stats(module: Any, seed: int = 1) -> Any:
    """``module`` with random running statistics (and, for a frozen norm, random affine
    buffers), so eval mode does not normalize with the identity's mean 0 and variance 1."""
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, b in module.named_buffers():
            if name.endswith("running_mean") or name.endswith("bias"):
                b.copy_(0.3 * torch.randn(b.shape, generator=g))
            elif name.endswith("running_var") or name.endswith("weight"):
                b.copy_(0.5 + torch.rand(b.shape, generator=g))
    return module


def _diffusers(cls_name: str, *args: Any, **kw: Any) -> Any:
    if cls_name == "RMSNorm":
        from diffusers.models.normalization import RMSNorm

        return RMSNorm(*args, **kw)
    from diffusers.models import normalization

    return getattr(normalization, cls_name)(*args, **kw)


@dataclass(frozen=True)
class ModuleSpec:
    """A torch module, how to build it, its inputs and how to call it."""

    name: str
    build: Callable[[], Any]
    input_shapes: tuple[Shape, ...]
    call: Callable[[Any, Sequence[Any]], Any] = lambda m, a: m(*a)
    api: str = "linen"
    needs: str = ""  # an optional package that must be importable
    dtypes: tuple[str, ...] = ("float32", "bfloat16")  # default sweep; --full or --dtypes: all asked
    skip_float64: str = ""  # why float64 has no meaningful reference, if so
    #: the float64 reference ``ref64(module64, args)`` where the module itself computes in
    #: float32 even on float64 inputs (``skip_float64``): its family's torch reference, which
    #: does not (``None``: the float64 module is the reference)
    ref64: Callable[[Any, Sequence[Any]], Any] | None = None


def _module_specs() -> tuple[ModuleSpec, ...]:
    import torch

    nn = torch.nn
    d = 32
    seq = ((2, 5, d),)
    img = ((2, d, 3, 3),)  # NCHW, as torch's batch-statistics norms take it
    f32_upcast = ("{} computes in float32 even for float64 inputs, so torch has no float64 "
                  "reference to hold jln's float64 result to")
    return (
        ModuleSpec("module:nn.LayerNorm[linen]", lambda: nn.LayerNorm(d), seq),
        ModuleSpec("module:nn.LayerNorm[nnx]", lambda: nn.LayerNorm(d), seq, api="nnx"),
        ModuleSpec("module:nn.RMSNorm[linen]", lambda: nn.RMSNorm(d), seq),
        ModuleSpec("module:nn.RMSNorm[nnx]", lambda: nn.RMSNorm(d), seq, api="nnx"),
        ModuleSpec(
            "module:nn.TransformerEncoderLayer[linen,post-LN]",
            lambda: nn.TransformerEncoderLayer(d, 4, dim_feedforward=64),
            ((5, 2, d),), dtypes=("float32",),
        ),
        ModuleSpec(
            "module:nn.TransformerEncoderLayer[nnx,pre-LN,gelu]",
            lambda: nn.TransformerEncoderLayer(d, 4, dim_feedforward=64, activation="gelu", norm_first=True, batch_first=True),
            seq, api="nnx", dtypes=("float32",),
        ),
        ModuleSpec(
            "module:nn.TransformerEncoderLayer[linen,post-LN,bias=False]",
            lambda: nn.TransformerEncoderLayer(d, 4, dim_feedforward=64, batch_first=True, bias=False),
            seq, dtypes=("float32",),
        ),
        ModuleSpec("module:LlamaRMSNorm[linen]", lambda: _hf_norm("LlamaRMSNorm", d, 1e-6), seq, needs="transformers",
                   skip_float64=f32_upcast.format("transformers' LlamaRMSNorm")),
        ModuleSpec("module:GemmaRMSNorm[linen]", lambda: _hf_norm("GemmaRMSNorm", d, 1e-6), seq, needs="transformers",
                   skip_float64=f32_upcast.format("transformers' GemmaRMSNorm")),
        ModuleSpec("module:T5LayerNorm[linen]", lambda: _hf_norm("T5LayerNorm", d, 1e-6), seq, needs="transformers",
                   skip_float64=f32_upcast.format("transformers' T5LayerNorm")),
        ModuleSpec(
            "module:diffusers.RMSNorm[linen]",
            lambda: _diffusers("RMSNorm", d, eps=1e-6, elementwise_affine=True, bias=True),
            seq, needs="diffusers", skip_float64=f32_upcast.format("diffusers' RMSNorm"),
        ),
        ModuleSpec(
            "module:AdaLayerNormZero[linen]", lambda: _diffusers("AdaLayerNormZero", d),
            ((2, 5, d), (2, d)), call=lambda m, a: m(a[0], emb=a[1]), needs="diffusers",
        ),
        ModuleSpec(
            "module:AdaLayerNormZeroSingle[linen]", lambda: _diffusers("AdaLayerNormZeroSingle", d),
            ((2, 5, d), (2, d)), call=lambda m, a: m(a[0], emb=a[1]), needs="diffusers",
        ),
        ModuleSpec(
            "module:AdaLayerNormContinuous[linen]",
            lambda: _diffusers("AdaLayerNormContinuous", d, 16, elementwise_affine=True, eps=1e-6),
            ((2, 5, d), (2, 16)), needs="diffusers",
        ),
        ModuleSpec(
            "module:DynamicTanh[nnx]",
            lambda: importlib.import_module("diffusers.models.autoencoders.autoencoder_same").DynamicTanh(d),
            seq, api="nnx", needs="diffusers",
        ),
        ModuleSpec("module:nn.GroupNorm[linen]", lambda: nn.GroupNorm(4, d), img),
        ModuleSpec("module:nn.InstanceNorm2d[nnx]", lambda: nn.InstanceNorm2d(d, affine=True), img, api="nnx"),
        ModuleSpec("module:nn.BatchNorm2d[linen,eval]", lambda: _with_running_stats(nn.BatchNorm2d(d)), img),
        ModuleSpec("module:nn.BatchNorm1d[nnx,eval]", lambda: _with_running_stats(nn.BatchNorm1d(d)), ((4, d, 5),), api="nnx"),
        ModuleSpec(
            "module:DetrFrozenBatchNorm2d[linen]", lambda: _with_running_stats(_hf_norm("DetrFrozenBatchNorm2d", d)),
            img, needs="transformers",
        ),
        ModuleSpec(
            "module:Qwen3NextRMSNormGated[linen]", lambda: _hf_norm("Qwen3NextRMSNormGated", d, 1e-6),
            ((2, 5, d), (2, 5, d)), needs="transformers",
            skip_float64=f32_upcast.format("transformers' Qwen3NextRMSNormGated"), ref64=_gated_ref64("qwen3_next"),
        ),
        ModuleSpec(
            "module:Mamba2RMSNormGated[nnx]", lambda: _hf_norm("Mamba2RMSNormGated", d, 1e-6, group_size=d),
            ((2, 5, d), (2, 5, d)), api="nnx", needs="transformers",
            skip_float64=f32_upcast.format("transformers' Mamba2RMSNormGated"), ref64=_gated_ref64("mamba"),
        ),
        ModuleSpec(
            "module:Mamba2RMSNormGated[linen,groups]",
            lambda: _hf_norm("Mamba2RMSNormGated", d, 1e-6, group_size=d // 4),
            ((2, 5, d), (2, 5, d)), needs="transformers",
            skip_float64=f32_upcast.format("transformers' Mamba2RMSNormGated"), ref64=_gated_ref64("mamba"),
        ),
    )


def _gated_ref64(convention: str) -> Callable[[Any, Sequence[Any]], Any]:
    """The float64 reference of transformers' gated norms (which compute in float32 even on
    float64 inputs): the gated family's torch reference, float64 throughout."""

    def ref64(m: Any, a: Sequence[Any]) -> Any:
        from jln.families.gated_rms_norm import reference

        gs = getattr(m, "group_size", None)
        return reference.gated_rms_norm(a[0], a[1], m.weight, eps=float(m.variance_epsilon), convention=convention,
                                        group_size=None if gs is None or gs == a[0].shape[-1] else int(gs))

    return ref64


def _module_case(spec: ModuleSpec, dtype: str, full: bool) -> Case:
    def run() -> list[ParityResult]:
        import torch

        if spec.needs:
            try:
                importlib.import_module(spec.needs)
            except ImportError:
                raise _Skip(f"{spec.needs} is not installed") from None
        if dtype == "float64" and spec.skip_float64:
            raise _Skip(spec.skip_float64)
        try:
            from jln import interop
        except ImportError:
            raise _Skip("jln.interop is not available in this build") from None
        base = _randomize(spec.build(), seed=0)
        tmod = base.to(getattr(torch, dtype))
        t64 = copy.deepcopy(tmod).double()  # the reference sees the same rounded weights
        # a module jln converts that fails to convert is a failure (the case raises), not a skip
        converted = interop.from_torch(tmod, api=spec.api)
        jm = _jax_module(converted, "jln parity")

        def torch_fn(*a: Any) -> Any:
            if a[0].dtype == torch.float64 and dtype != "float64":
                return spec.call(t64, a) if spec.ref64 is None else spec.ref64(t64, a)
            return spec.call(tmod, a)

        rng = np.random.default_rng(1)
        inputs = [_registry.cast(rng.standard_normal(s), dtype) for s in spec.input_shapes]
        results = check_matches_torch(jm.fn(), torch_fn, inputs=inputs, reference="float64", name=spec.name)
        # and the gradients w.r.t. the parameters, under torch's names
        return results + _param_grads(jm, tmod, t64, inputs, reference="float64", rtol=None, atol=None, seed=0,
                                      name=spec.name, torch_call=spec.call)

    return Case(spec.name, dtype, spec.input_shapes[0], 1, "", run)


# -- output -----------------------------------------------------------------------------------


class Progress:
    """A one-line progress bar on stderr; silent when disabled."""

    def __init__(self, total: int, enabled: bool, width: int = 28):
        self.total, self.enabled, self.width, self.done = total, enabled, width, 0

    def step(self, label: str) -> None:
        if not self.enabled:
            return
        frac = self.done / self.total if self.total else 1.0
        filled = int(frac * self.width)
        bar = "#" * filled + "." * (self.width - filled)
        sys.stderr.write(f"\r[{bar}] {self.done}/{self.total} {label[:50]:<50}")
        sys.stderr.flush()

    def advance(self) -> None:
        self.done += 1

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\r" + " " * (self.width + 70) + "\r")
            sys.stderr.flush()


def _fmt_shape(shape: Shape, k: int) -> str:
    s = "x".join(map(str, shape)) if shape else "()"
    return s + (f" k={k}" if k > 1 else "")


def _num(v: float) -> str:
    return f"{v:.3g}" if math.isfinite(v) else str(v)


def _rows(cases: Sequence[Case], failures_only: bool) -> list[list[str]]:
    rows = []
    for c in cases:
        op = c.op + (f" ({c.variant})" if c.variant else "")
        if c.skipped:
            if not failures_only:
                # the reason goes in the last column, which is not padded: it is shown whole
                rows.append([op, SHORT_DTYPE.get(c.dtype, c.dtype), "-", _fmt_shape(c.shape, c.k), "-", "skip",
                             "", "", "", c.skipped])
            continue
        for r in c.results:
            if failures_only and r.passed:
                continue
            rep = r.report
            bound = "exact" if rep.exact_rule else _num(rep.bound)
            rows.append([
                op, SHORT_DTYPE.get(c.dtype, c.dtype), r.direction, _fmt_shape(c.shape, c.k), r.output,
                "pass" if r.passed else "FAIL", _num(rep.max_abs_err), bound, _decides(rep),
                f"{rep.frac_bitexact:.4f}" + (f"  {r.note}" if r.note else ""),
            ])
    return rows


def _decides(rep: Any) -> str:
    """The measure the row's rule holds: the bit-exact rule's largest elementwise ulp (at most
    2, else the row-scale ulp too: at most 1 there), else max_abs_err as a share of the bound
    (at most 1); ``nan`` where a NaN meets a number."""
    if rep.nonfinite_mismatch:
        return "nan"
    if rep.exact_rule:
        if rep.max_ulp_elementwise <= EXACT_MAX_ULP.get(rep.dtype, 2):
            return f"{ulp_text(rep.max_ulp_elementwise)} ulp"
        return f"{ulp_text(rep.max_ulp_elementwise)} ulp, {ulp_text(rep.max_ulp)} of row"
    if rep.bound > 0 and math.isfinite(rep.bound):
        return f"{rep.max_abs_err / rep.bound:.2f} of bound"
    return _num(rep.max_abs_err)


def _table(rows: list[list[str]]) -> str:
    head = ["op", "dtype", "dir", "shape", "output", "result", "max_abs_err", "bound", "decides", "frac_bitexact"]
    widths = [max(len(x) for x in col) for col in zip(head, *rows, strict=True)]
    widths[-1] = len(head[-1])
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    for r in rows:
        lines.append("  ".join(x.ljust(w) for x, w in zip(r, widths, strict=True)).rstrip())
    return "\n".join(lines)


#: Printed under the table: what each measure is measured against.
LEGEND = (
    "max_abs_err    max |jln - reference|, the reference being torch's function evaluated in float64\n"
    "bound          what max_abs_err may reach: 2 x torch's own error against that reference + a small\n"
    "               atol ('exact': the half-precision bit-exact rule applies instead)\n"
    "decides        the measure the row's rule holds, so a passing row reads as one: max_abs_err as a\n"
    "               share of the bound (passes at <= 1), or under the bit-exact rule the largest\n"
    "               difference from torch in each element's own ulps (passes at <= 2 ulp, with\n"
    "               frac_bitexact >= 0.995; an element past 2 passes within 1 ulp of its row's\n"
    "               largest value, shown as 'of row'); 'nan' where a NaN meets a number. The --json also\n"
    "               holds max_ulp (vs torch in ulps of the row's largest |torch|, a row: the last axis)\n"
    "               and max_ulp_elementwise\n"
    "frac_bitexact  jln vs torch in the same dtype: the share of bit-identical elements\n"
    "skip           the reason is in the last column"
)


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for pkg in ("jln", "jax", "jaxlib", "flax", "numpy", "torch", "transformers", "diffusers"):
        try:
            out[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            pass
    return out


def _device() -> str:
    import jax

    dev = jax.devices()[0]
    kind = getattr(dev, "device_kind", "") or ""
    return jax.default_backend() + (f" ({kind})" if kind and kind.lower() != jax.default_backend() else "")


# -- argument handling ------------------------------------------------------------------------


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse exits; return code 2 through main instead
        raise _UsageError(f"{self.prog}: error: {message}\n{self.format_usage()}")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="jln parity",
        description="Check jln's norms against torch (forward and backward) on this machine.",
        epilog="The table's 'decides' column is the measure each row's rule holds; --json also holds "
               "max_ulp (in ulps of each row's largest |torch|), max_ulp_elementwise and max_rel_err. "
               "Exit status: 0 all pass, 1 some fail, 2 usage error or torch missing.",
    )
    p.add_argument("--ops", help="comma-separated op names or globs (see --list); a family name "
                   "such as rms_norm selects all its conventions, 'module*' the module cases")
    p.add_argument("--dtypes", help="comma-separated dtypes among float32,float64,bfloat16,float16 "
                   "(aliases f32,f64,bf16,f16; globs ok)")
    p.add_argument("--full", action="store_true", help="the whole sweep: more shapes, float32 "
                   "parameters with half inputs, impl='xla' beside the default 'auto', impl='pallas' where "
                   "jln.kernels supports it")
    p.add_argument("--impl", choices=[i for i in IMPLS if i != "auto"], help="check this path of the ops "
                   "alone, e.g. 'pallas' on a GPU (ops without it are reported as skipped with the "
                   "reason; module cases keep the default)")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    p.add_argument("--list", action="store_true", help="list the ops and module cases, then exit")
    p.add_argument("-q", "--failures-only", action="store_true", help="print only failing rows")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.add_argument("--no-modules", action="store_true", help="skip the module (interop) cases")
    # for tests and quick checks: shapes as 4x8,2x3x5:2 (":k" normalizes the last k axes)
    p.add_argument("--shapes", help=argparse.SUPPRESS)
    return p


def _split(s: str | None) -> list[str]:
    return [x.strip() for x in (s or "").split(",") if x.strip()]


def _glob(pattern: str) -> str:
    # op names contain brackets ("rms_norm[llama]"): match them literally, keep * and ?
    return "".join({"[": "[[]", "]": "[]]"}.get(ch, ch) for ch in pattern)


def _select(patterns: list[str], names: list[str], families: dict[str, str], what: str) -> list[str]:
    if not patterns:
        return names
    chosen: list[str] = []
    for pat in patterns:
        # an op's own name selects that op alone (layer_norm, not layer_norm[zero_centered] too)
        hit = [n for n in names if n == pat] or [
            n for n in names if fnmatch.fnmatchcase(n, _glob(pat)) or fnmatch.fnmatchcase(families.get(n, ""), pat)]
        if not hit:
            raise _UsageError(f"jln parity: unknown {what} {pat!r};{did_you_mean(pat, names)} Valid {what}s:\n  "
                              + "\n  ".join(names))
        chosen += [n for n in hit if n not in chosen]
    return [n for n in names if n in chosen]


def _parse_shapes(s: str) -> list[tuple[Shape, int]]:
    out = []
    for item in _split(s):
        dims, _, k = item.partition(":")
        try:
            shape = tuple(int(x) for x in dims.split("x"))
            kk = int(k) if k else 1
        except ValueError:
            raise _UsageError(f"jln parity: bad shape {item!r}; write e.g. 4x8 or 2x4x8:2") from None
        if kk < 1 or kk > len(shape) or any(n < 0 for n in shape):
            raise _UsageError(f"jln parity: bad shape {item!r}: k must be in 1..{len(shape)}, sizes >= 0")
        out.append((shape, kk))
    return out


# -- main -------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``jln parity``; returns the exit status (0 pass, 1 fail, 2 usage/torch missing)."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    try:
        args = parser.parse_args(args_list)
    except _UsageError as e:
        print(str(e).rstrip(), file=sys.stderr)
        return 2
    except SystemExit as e:  # --help
        return int(e.code or 0)
    try:
        import torch
    except ImportError:
        print(
            "jln parity: PyTorch is not installed, and jln parity compares against it.\n"
            f"Install it with `{INSTALL_TORCH}` (a CPU build is enough), then rerun `jln parity`.",
            file=sys.stderr,
        )
        return 2
    import jax

    ops = list(_index.OPS)
    module_specs = [] if args.no_modules else list(_module_specs())
    names = [op.name for op in ops] + [m.name for m in module_specs]
    families = {op.name: op.family for op in ops} | {m.name: "module" for m in module_specs}
    if args.list:
        for op in ops:
            print(f"{op.name:<40} {op.family}")
        for m in module_specs:
            print(f"{m.name:<40} jln.interop.from_torch" + (f" (needs {m.needs})" if m.needs else ""))
        return 0
    try:
        for flag, value in (("--ops", args.ops), ("--dtypes", args.dtypes)):
            if value is not None and not _split(value):
                raise _UsageError(f"jln parity: {flag} {value!r} selects nothing; give names or globs "
                                  f"(see --list), or leave {flag} out for the whole sweep")
        selected = set(_select(_split(args.ops), names, families, "op"))
        dtype_pats = [DTYPE_ALIASES.get(d, d) for d in _split(args.dtypes)]
        dtypes = _select(dtype_pats, list(_registry.DTYPES), {}, "dtype")
        shapes = _parse_shapes(args.shapes) if args.shapes else list(FULL_SHAPES if args.full else DEFAULT_SHAPES)
        problem = output_path_problem(args.json, "--json")
        if problem:
            raise _UsageError(f"jln parity: {problem}")
    except _UsageError as e:
        print(str(e), file=sys.stderr)
        return 2

    start = time.perf_counter()
    with jax.enable_x64(True), warnings.catch_warnings():  # float64 needs x64
        # torch notes mixed-dtype dispatch choices (e.g. bf16 input, float32 weight): not news here
        warnings.filterwarnings("ignore", category=UserWarning, module="torch")
        cases = _op_cases([op for op in ops if op.name in selected], dtypes, shapes, args.full, args.impl)
        cases += [
            _module_case(m, d, args.full) for m in module_specs if m.name in selected
            for d in dtypes if args.full or args.dtypes or d in m.dtypes
        ]
        progress = Progress(len(cases), enabled=not args.no_progress and sys.stderr.isatty())
        for case in cases:
            progress.step(f"{case.op} {case.dtype} {_fmt_shape(case.shape, case.k)}")
            t0 = time.perf_counter()
            try:
                case.results = case.run()
            except _Skip as e:
                case.skipped = str(e)
            except Exception as e:  # noqa: BLE001 - a case that raises fails; the sweep goes on
                case.results = [_raised(case, e)]
            case.seconds = time.perf_counter() - t0
            progress.advance()
        progress.close()
    elapsed = time.perf_counter() - start

    results = [(c, r) for c in cases for r in c.results]
    n_pass = sum(r.passed for _, r in results)
    n_fail = len(results) - n_pass
    n_skip = sum(bool(c.skipped) for c in cases)
    versions = _versions()
    device = _device()
    rows = _rows(cases, args.failures_only)
    if rows:
        print(_table(rows))
        print()
        print(LEGEND)
        print()
    summary = (
        f"jln parity: {n_pass} passed, {n_fail} failed, {n_skip} skipped in {elapsed:.1f} s "
        f"(jax {versions.get('jax', jax.__version__)}, torch {torch.__version__.split('+')[0]}, {device})"
    )
    print(summary)
    if n_fail:
        print("Each FAIL row names the op, dtype, shape and output; rerun one with "
              "`jln parity --ops NAME --dtypes DTYPE` and report it with the JSON (--json).")
    if args.json:
        payload = {
            "results": [
                {**r.as_dict(), "shape": list(c.shape), "k": c.k, "variant": c.variant,
                 "array_shape": list(r.shape), "dtype": c.dtype, "output_dtype": r.dtype}
                for c, r in results
            ],
            "skipped": [{"op": c.op, "dtype": c.dtype, "shape": list(c.shape), "k": c.k,
                         "variant": c.variant, "reason": c.skipped} for c in cases if c.skipped],
            "versions": versions,
            "device": device,
            "summary": {"passed": n_pass, "failed": n_fail, "skipped": n_skip,
                        "seconds": round(elapsed, 3), "line": summary,
                        "cpu_count": os.cpu_count()},
        }
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(payload, f, indent=1)
    return 1 if n_fail else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
