"""Coverage sweep of jln.interop.from_torch over every norm class torch, transformers and
diffusers ship.

Finds the classes (``torch.nn`` names containing "Norm"; in transformers every
``models/*/modeling_*.py``, in diffusers every file under ``models/``, the classes whose name
contains "Norm" or ends in "GRN", composite layers such as ``...ConvNormLayer`` or ``...PreLayerNormModel`` left
out), instantiates each with plausible arguments (hidden size 64, the constructor's defaults, a
small config where the constructor takes one), perturbs its parameters, and runs
``from_torch`` on it. A converted class is then compared with torch on random input: float32
max error, and the bfloat16 bit-exact fraction (both modules cast to bfloat16). Per class:

* ``exact``: float32 error within 1e-4 (relative to the output's size), same output dtypes,
  bfloat16 bit-exact on >= 99% of elements (or torch has no bfloat16 path);
* ``wrong``: converted, but the numbers, dtypes or shapes differ, or the jln module fails;
* ``refused``: ``from_torch`` refused it (its message);
* ``not instantiable``: the class could not be built or run in torch here (why).

Usage::

    PYTHONPATH=. python bench/interop_sweep.py [--only SUBSTRING] [--out bench/results]

Writes ``interop_sweep.md`` and ``interop_sweep.json`` and prints the coverage figure
(exact / instantiable). Everything is imported lazily, one model file at a time.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import copy
import importlib
import inspect
import io
import json
import os
import re
import signal
import sys
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HIDDEN = 64
HEADS = 4
HEAD_DIM = HIDDEN // HEADS
BATCH = 2
F32_TOL = 1e-4
BF16_EXACT = 0.99
TIME_LIMIT_S = 60

# names of composite layers that merely contain "Norm" in their name
_NOT_A_NORM = re.compile(
    r"(Conv(Norm)?Layer$|ConvDropout|PreLayerNorm|Model$|LM$|(?<!Per)Head$|Attention|Encoder|Resnet|Embeddings?$|Encoder$|Intermediate$|Output$|Pooler$|"
    r"Estimation|Estimator|Bottleneck|^AutoModel|For[A-Z]|PreTrained|SelfOutput$|Layer$(?<!NormLayer))"
)


@dataclass
class Row:
    source: str  # torch / transformers / diffusers
    module: str
    name: str
    status: str = "not instantiable"
    detail: str = ""
    target: str = ""
    input_shape: list[int] = field(default_factory=list)
    f32_err: float | None = None
    bf16_exact: float | None = None

    @property
    def qualname(self) -> str:
        return f"{self.module}.{self.name}"


class _Timeout(Exception):
    pass


@contextlib.contextmanager
def _time_limit(seconds: int):
    def handler(signum, frame):  # noqa: ARG001
        raise _Timeout(f"took over {seconds} s")

    old = signal.signal(signal.SIGALRM, handler)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


# --------------------------------------------------------------------------- discovery


def _is_norm_name(name: str) -> bool:
    # "GRN": Global Response Normalization (transformers' ConvNextV2GRN) carries no "Norm"
    return ("Norm" in name or name.endswith("GRN")) and not _NOT_A_NORM.search(name)


def _classes_in(path: Path) -> list[str]:
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError):
        return []
    return [n.name for n in tree.body if isinstance(n, ast.ClassDef) and _is_norm_name(n.name)]


def discover() -> list[tuple[str, str, str]]:
    """(source, module, class name) of every norm class, found by reading the files' syntax."""
    import torch

    found = [
        ("torch", "torch.nn", n)
        for n in sorted(dir(torch.nn))
        if _is_norm_name(n) and isinstance(getattr(torch.nn, n), type)
        and issubclass(getattr(torch.nn, n), torch.nn.Module)
    ]
    for pkg in ("transformers", "diffusers"):
        spec = importlib.util.find_spec(pkg)
        if spec is None or spec.origin is None:
            continue
        root = Path(spec.origin).parent
        if pkg == "transformers":
            files = sorted(root.glob("models/*/modeling_*.py"))
        else:
            files = sorted(p for p in (root / "models").rglob("*.py") if p.name != "__init__.py")
        for f in files:
            mod = ".".join((pkg, *f.relative_to(root).with_suffix("").parts))
            found += [(pkg, mod, n) for n in _classes_in(f)]
    return found


# --------------------------------------------------------------------------- instantiation

_SIZE_NAMES = {"n", "c_in", "cin", "feature_dims", "n_feat", "num_feature",
    "hidden_size", "dim", "d_model", "normalized_shape", "num_features", "num_channels", "channels",
    "embedding_dim", "hidden_dim", "features", "size", "n_embd", "embed_dim", "in_channels",
    "out_channels", "input_dim", "d", "n_state", "hidden", "dims", "norm_dim", "n_channels", "c",
    "num_feats", "d_hidden", "dim_in", "in_dim", "out_dim", "model_dim", "width", "n_embed",
    "channel", "feature_dim", "normalized_dim", "inner_dim", "n_hidden", "hidden_features",
    "latent_dim", "embed_size", "emb_dim", "chans", "ch", "num_hidden",
}
_HEAD_NAMES = {"num_heads", "n_heads", "heads", "num_attention_heads", "nheads"}
_GROUP_NAMES = {"num_groups", "groups", "n_groups", "group_num", "num_group"}
_COND_NAMES = {"conditioning_embedding_dim", "cond_dim", "condition_dim", "emb_dim", "embedding_dim_cond",
               "time_embed_dim", "temb_channels", "conditioning_dim", "context_dim", "zq_channels",
               "cond_channels", "time_dim", "t_dim", "style_dim", "mod_dim"}

_CONFIG_SIZES = {
    "hidden_size": HIDDEN, "d_model": HIDDEN, "n_embd": HIDDEN, "embed_dim": HIDDEN, "hidden_dim": HIDDEN,
    "dim": HIDDEN, "n_embed": HIDDEN, "num_attention_heads": HEADS, "num_key_value_heads": HEADS,
    "n_head": HEADS, "num_heads": HEADS, "head_dim": HEAD_DIM, "intermediate_size": 2 * HIDDEN,
    "attention_head_dim": HEAD_DIM, "kv_channels": HEAD_DIM, "qk_head_dim": HEAD_DIM,
    "v_head_dim": HEAD_DIM, "qk_nope_head_dim": HEAD_DIM // 2, "qk_rope_head_dim": HEAD_DIM // 2,
    "q_lora_rank": HIDDEN, "kv_lora_rank": HIDDEN // 2, "hidden_sizes": None, "encoder_hidden_size": HIDDEN,
    "mamba_d_state": 16, "ssm_state_size": 16, "num_channels": HIDDEN, "d_inner": 2 * HIDDEN,
    "mamba_expand": 2, "expand": 2, "mamba_n_groups": 1, "n_groups": 1, "mamba_head_dim": HEAD_DIM,
    "mamba_n_heads": 8, "mamba_num_heads": 8, "linear_num_value_heads": HEADS, "linear_value_head_dim": HEAD_DIM,
    "linear_num_key_heads": HEADS, "linear_key_head_dim": HEAD_DIM, "hidden_size_per_layer_input": 16,
}


def _shrink(cfg: Any) -> Any:
    """Set the common size attributes of a transformers config (and its sub-configs) small."""
    seen: set[int] = set()

    def walk(c: Any) -> None:
        if id(c) in seen or not hasattr(c, "to_dict"):
            return
        seen.add(id(c))
        for k, v in _CONFIG_SIZES.items():
            if v is not None and isinstance(getattr(c, k, None), int):
                with contextlib.suppress(Exception):
                    setattr(c, k, v)
        for k in list(vars(c)):
            sub = getattr(c, k, None)
            if hasattr(sub, "to_dict") and hasattr(sub, "model_type"):
                walk(sub)

    walk(cfg)
    return cfg


def _configs_for(mod: Any) -> list[Any]:
    """Candidate config objects for a transformers module's classes: its config classes (and
    their sub-configs), shrunk."""
    try:
        from transformers import PretrainedConfig
    except ImportError:
        return []
    out: list[Any] = []
    for v in vars(mod).values():
        if isinstance(v, type) and issubclass(v, PretrainedConfig) and v is not PretrainedConfig:
            try:
                with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    cfg = _shrink(v())
            except Exception:  # noqa: BLE001
                continue
            out.append(cfg)
            for k in list(vars(cfg)):
                sub = getattr(cfg, k, None)
                if hasattr(sub, "to_dict") and hasattr(sub, "model_type"):
                    out.append(sub)
    # the text sub-config first (most norms are the decoder's), then the others
    return sorted(out, key=lambda c: ("text" not in type(c).__name__.lower(), type(c).__name__))


def _arg_value(name: str, p: inspect.Parameter, configs: list[Any], ci: int) -> Any:
    n = name.lower()
    if n in ("config", "cfg", "model_config", "text_config") or n.endswith("config"):
        if ci >= len(configs):
            raise LookupError("needs a config object and none could be built")
        return configs[ci]
    if n in _HEAD_NAMES:
        return HEADS
    if n in ("head_dim", "dim_head", "head_size"):
        return HEAD_DIM
    if n in _GROUP_NAMES:
        return 4
    if n in ("group_size",):
        return 16
    if n in _COND_NAMES:
        return 32
    if n in ("eps", "epsilon", "variance_epsilon", "layer_norm_eps", "norm_eps"):
        return 1e-5
    if n in _SIZE_NAMES or n.endswith("_dim") or n.endswith("_size") or n.endswith("channels"):
        return HIDDEN
    if n in ("num_embeddings",):
        return 10
    if p.annotation in (bool, "bool"):
        return False
    if p.annotation in (float, "float"):
        return 1e-5
    raise LookupError(f"no plausible value for the required argument {name!r}")


def instantiate(cls: type, configs: list[Any]) -> Any:
    sig = inspect.signature(cls.__init__)
    params = [(k, p) for k, p in list(sig.parameters.items())[1:]
              if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    needs_config = any(k.lower().endswith("config") or k.lower() == "cfg" for k, p in params
                       if p.default is p.empty)
    errors = []
    for ci in range(max(1, len(configs) if needs_config else 1)):
        kwargs: dict[str, Any] = {}
        try:
            for k, p in params:
                if p.default is None and k.lower() in _SIZE_NAMES:  # hidden_size=None
                    kwargs[k] = HIDDEN
                if p.default is not p.empty:
                    continue
                kwargs[k] = _arg_value(k, p, configs, ci)
            with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return cls(**kwargs)
        except Exception as e:  # noqa: BLE001
            errors.append(f"{type(e).__name__}: {e}")
    # fallbacks: a torch.nn subclass taking *args (cls(64)); sizes given as a (heads, head_dim) shape
    tries: list[tuple[tuple[Any, ...], dict[str, Any]]] = [((HIDDEN,), {})]
    sized = {k: (HEADS, HEAD_DIM) for k, p in params if p.default is p.empty and k.lower() in _SIZE_NAMES}
    if sized and len(sized) == len([p for _, p in params if p.default is p.empty]):
        tries.append(((), sized))
    for args, kw in tries:
        try:
            with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return cls(*args, **kw)
        except Exception:  # noqa: BLE001, S112
            continue
    raise RuntimeError(errors[0] if errors else "cannot instantiate")


def _perturb(m: Any, seed: int = 0) -> None:
    """Move every floating parameter off its initial value (Gemma's zeros, the ones)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in m.parameters():
            if p.is_floating_point():
                p.add_(0.1 * torch.randn(p.shape, generator=g, dtype=torch.float32).to(p.dtype))
        for name, b in m.named_buffers():
            if b.is_floating_point() and "running_var" in name:
                b.copy_(1.0 + 0.5 * torch.rand(b.shape, generator=g))
            elif b.is_floating_point() and "running_mean" in name:
                b.copy_(0.2 * torch.randn(b.shape, generator=g))


def _leaves(out: Any) -> list[Any]:
    import torch

    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _leaves(o)]
    if hasattr(out, "to_tuple"):
        return _leaves(out.to_tuple())
    return []


def _candidate_inputs(m: Any) -> list[tuple[int, ...]]:
    import torch

    sizes: list[int] = []
    shapes2: list[tuple[int, int]] = []
    for p in list(m.parameters()) + [b for b in m.buffers() if b.is_floating_point()]:
        if p.ndim == 1 and int(p.shape[0]) not in sizes:
            sizes.append(int(p.shape[0]))
        elif p.ndim == 2 and p.shape[0] * p.shape[1] <= 4096:
            shapes2.append((int(p.shape[0]), int(p.shape[1])))
    for attr in ("normalized_shape", "dim", "hidden_size", "num_channels", "num_features"):
        v = getattr(m, attr, None)
        if isinstance(v, int) and v not in sizes:
            sizes.append(v)
        elif isinstance(v, (tuple, list, torch.Size)) and len(v) == 1 and int(v[0]) not in sizes:
            sizes.append(int(v[0]))
    linears = [int(s.in_features) for s in m.modules() if isinstance(s, torch.nn.Linear)]
    sizes = [s for s in sizes if s > 1 and s not in linears[:1] or not linears] or [HIDDEN]
    if HIDDEN not in sizes:
        sizes.append(HIDDEN)
    out: list[tuple[int, ...]] = []
    for d in sizes:
        out += [(BATCH, 5, d), (BATCH, d, 4, 4), (BATCH, d, 6), (BATCH, 5, HEADS, d), (BATCH, HEADS, 5, d),
                (BATCH, d, 2, 3, 3)]
    for a, b in shapes2:
        out += [(BATCH, 5, a, b), (BATCH, a, b)]
    out.append((BATCH, 5, HEADS, HEAD_DIM))
    # torch's 1d/2d/3d classes: their channels-first rank first (InstanceNorm2d would take a
    # (2, 5, 64) input as one unbatched image)
    rank = {"1d": 3, "2d": 4, "3d": 5}.get(type(m).__name__[-2:].lower())
    if rank is not None:
        out.sort(key=lambda s: (len(s) != rank, s[1] == 5))
    return list(dict.fromkeys(out))


def _extra_candidates(m: Any, x_shape: tuple[int, ...]) -> list[tuple[int, ...]]:
    import torch

    ks = [int(s.in_features) for s in m.modules() if isinstance(s, torch.nn.Linear)]
    out = [x_shape] + [(BATCH, k) for k in ks] + [(BATCH, 1, k) for k in ks] + [(BATCH, x_shape[-1]), (BATCH, 32)]
    # a feature map a convolution reads (SpatialNorm's zq): its channels at x's spatial shape and smaller
    cs = [int(s.in_channels) for s in m.modules() if isinstance(s, torch.nn.Conv2d)]
    out += [(BATCH, c, *x_shape[2:]) for c in cs if len(x_shape) == 4] + [(BATCH, c, 2, 2) for c in cs]
    return list(dict.fromkeys(out))


def _n_required(m: Any) -> tuple[list[str], str | None]:
    """Required positional arguments of forward after the first, and the first's name."""
    try:
        sig = inspect.signature(m.forward)
    except (TypeError, ValueError):
        return [], None
    ps = [p for p in sig.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if not ps:
        return [], None
    required = [p.name for p in ps[1:] if p.default is p.empty]
    return required, ps[0].name


_COND_ARGS = re.compile(r"emb|temb|cond|gate|timestep|scale|shift|context|c$|t$|z$|zq|mask")


def _optional_conditions(m: Any) -> list[str]:
    """Optional tensor inputs of forward that look like a condition or a gate (``emb=None``)."""
    try:
        sig = inspect.signature(m.forward)
    except (TypeError, ValueError):
        return []
    ps = [p for p in sig.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return [p.name for p in ps[1:] if p.default is None and _COND_ARGS.search(p.name.lower())][:2]


def find_call(m: Any, seed: int = 0) -> tuple[tuple[int, ...], list[tuple[str, tuple[int, ...]]]]:
    """An input shape (and extra-input shapes) the torch module accepts, with its result shaped
    like the input. Extra inputs are passed to torch by name and to jln in that order."""
    import torch

    extra_names, _ = _n_required(m)
    g = torch.Generator().manual_seed(seed)
    last = "no input shape accepted"
    try:
        return _find_call(m, extra_names, g)
    except RuntimeError as e:
        last = str(e)
    optional = _optional_conditions(m)
    # the fewest optional conditions that work: each alone, then together
    for names in [[o] for o in optional] + ([optional] if len(optional) > 1 else []):
        with contextlib.suppress(RuntimeError):
            return _find_call(m, extra_names + names, g)
    raise RuntimeError(last)


def _find_call(m: Any, extra_names: list[str], g: Any) -> tuple[tuple[int, ...], list[tuple[str, tuple[int, ...]]]]:
    import torch

    last = "no input shape accepted"
    for shape in _candidate_inputs(m):
        x = torch.randn(shape, generator=g)
        choices = [[]]
        for _ in extra_names:
            choices = [c + [e] for c in choices for e in _extra_candidates(m, shape)][:64]
        for shapes in choices:
            extras = list(zip(extra_names, shapes, strict=True))
            try:
                with torch.no_grad(), warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    out = m(x, **{k: torch.randn(e, generator=g) for k, e in extras})
            except Exception as e:  # noqa: BLE001
                last = f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"
                continue
            leaves = _leaves(out)
            if leaves and tuple(leaves[0].shape) == shape:
                return shape, extras
            last = f"output shape {[tuple(t.shape) for t in leaves]} for input {shape}"
    raise RuntimeError(f"forward: {last}")


# --------------------------------------------------------------------------- comparison


def _run_jln(jmod: Any, variables: Any, xs: list[Any]) -> list[Any]:
    import jax.numpy as jnp
    import numpy as np

    out = jmod.apply(variables, *[jnp.asarray(a) for a in xs])
    flat = out if isinstance(out, (tuple, list)) else [out]
    return [np.asarray(o) for o in flat]


def _to_np(t: Any) -> Any:
    import ml_dtypes
    import torch

    if t.dtype == torch.bfloat16:
        return t.detach().view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.detach().numpy()


def compare(m: Any, shape: tuple[int, ...], extras: list[tuple[str, tuple[int, ...]]], row: Row) -> None:
    import numpy as np
    import torch

    from jln.interop import from_torch

    g = torch.Generator().manual_seed(1)
    xs32 = [2 * torch.randn(shape, generator=g) + 0.5] + [0.3 * torch.randn(e, generator=g) for _, e in extras]
    names = [k for k, _ in extras]

    def call(mod: Any, xs: list[Any]) -> Any:
        return mod(xs[0], **dict(zip(names, xs[1:], strict=True)))

    try:
        jmod, variables = from_torch(m)
    except (TypeError, ValueError, NotImplementedError) as e:
        row.status, row.detail = "refused", str(e).splitlines()[0].removesuffix(" Supported modules:")[:400]
        return
    row.target = f"{type(jmod).__name__}({', '.join(f'{k}={v!r}' for k, v in _opts(jmod).items())})"
    problems: list[str] = []
    with torch.no_grad():
        ref = [_to_np(t) for t in _leaves(call(m, xs32))]
    try:
        got = _run_jln(jmod, variables, [_to_np(a) for a in xs32])
    except Exception as e:  # noqa: BLE001
        row.status, row.detail = "wrong", f"the jln module failed: {type(e).__name__}: {str(e).splitlines()[0][:300]}"
        return
    if len(got) != len(ref):
        problems.append(f"{len(got)} outputs, torch {len(ref)}")
    err = 0.0
    for r, o in zip(ref, got, strict=False):
        if r.shape != o.shape or r.dtype != o.dtype:
            problems.append(f"float32 output {o.shape} {o.dtype}, torch {r.shape} {r.dtype}")
            continue
        size = max(1.0, float(np.max(np.abs(r.astype(np.float64)))))
        err = max(err, float(np.max(np.abs(o.astype(np.float64) - r.astype(np.float64)))) / size)
    row.f32_err = err
    if err > F32_TOL or not np.isfinite(err):
        problems.append(f"float32 relative max error {err:.3g}")
    # bfloat16: both modules in bfloat16
    mb = copy.deepcopy(m).to(torch.bfloat16)
    xs16 = [a.to(torch.bfloat16) for a in xs32]
    try:
        jb, vb = from_torch(mb)
    except (TypeError, ValueError) as e:
        # refused with bfloat16 weights (a class whose numbers need float32 weights, as its model
        # keeps them): bfloat16 input with the float32 weights instead
        mb, jb, vb = m, jmod, variables
        row.detail = f"bfloat16 weights refused ({str(e).split(': ')[-1][:120]}); float32 weights used"
    try:
        with torch.no_grad():
            ref16 = [_to_np(t) for t in _leaves(call(mb, xs16))]
    except Exception:  # noqa: BLE001
        ref16 = None
    if ref16 is not None:
        try:
            got16 = _run_jln(jb, vb, [_to_np(a) for a in xs16])
            same = total = 0
            for r, o in zip(ref16, got16, strict=False):
                if r.shape != o.shape or r.dtype != o.dtype:
                    problems.append(f"bfloat16 output {o.shape} {o.dtype}, torch {r.shape} {r.dtype}")
                    continue
                same += int(np.sum(r.astype(np.float32) == o.astype(np.float32)))
                total += r.size
            row.bf16_exact = same / max(total, 1)
            if row.bf16_exact < BF16_EXACT:
                problems.append(f"bfloat16 bit-exact on {100 * row.bf16_exact:.1f}%")
        except (TypeError, ValueError) as e:
            problems.append(f"bfloat16: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
    row.status = "wrong" if problems else "exact"
    row.detail = "; ".join(([row.detail] if row.detail else []) + problems)


def _opts(jmod: Any) -> dict[str, Any]:
    cfg = getattr(jmod, "cfg", None)
    keep = ("axis", "eps", "convention", "use_scale", "use_bias", "zero_centered", "norm_type", "num_chunks")
    if cfg is None:
        return {}
    return {k: getattr(cfg, k) for k in keep if hasattr(cfg, k) and getattr(cfg, k) not in (None, False, True)}


# --------------------------------------------------------------------------- driver


def sweep(only: str | None = None) -> list[Row]:
    rows: list[Row] = []
    found = discover()
    if only:
        found = [f for f in found if only in f"{f[1]}.{f[2]}"]
    by_module: dict[str, list[tuple[str, str, str]]] = {}
    for item in found:
        by_module.setdefault(item[1], []).append(item)
    for mod_name, items in by_module.items():
        try:
            with _time_limit(TIME_LIMIT_S), contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                mod = importlib.import_module(mod_name)
            configs = _configs_for(mod) if items[0][0] == "transformers" else []
        except BaseException as e:  # noqa: BLE001
            if isinstance(e, KeyboardInterrupt):
                raise
            for src, _, name in items:
                rows.append(Row(src, mod_name, name, detail=f"import failed: {type(e).__name__}: {e}"[:300]))
            continue
        for src, _, name in items:
            row = Row(src, mod_name, name)
            rows.append(row)
            cls = getattr(mod, name, None)
            if cls is None or not isinstance(cls, type):
                row.detail = "not found after import"
                continue
            try:
                with _time_limit(TIME_LIMIT_S):
                    m = instantiate(cls, configs)
                    if not hasattr(m, "parameters"):
                        raise RuntimeError("not a torch module")
                    m.eval()
                    if name.startswith("Lazy"):  # materialise on a first call, as torch does
                        import torch

                        with torch.no_grad():
                            m(torch.randn(BATCH, HIDDEN, *(4,) * (int(name[-2]) - 1 if name[-2].isdigit() else 1)))
                    _perturb(m)
                    shape, extras = find_call(m)
                    row.input_shape = list(shape)
            except BaseException as e:  # noqa: BLE001
                if isinstance(e, KeyboardInterrupt):
                    raise
                row.detail = str(e).splitlines()[0][:300] if str(e) else type(e).__name__
                continue
            try:
                with _time_limit(TIME_LIMIT_S):
                    compare(m, shape, extras, row)
            except BaseException as e:  # noqa: BLE001
                if isinstance(e, KeyboardInterrupt):
                    raise
                row.status, row.detail = "wrong", f"sweep error: {type(e).__name__}: {str(e)[:300]}"
        print(f"{mod_name}: " + ", ".join(f"{r.name}={r.status}" for r in rows[-len(items):]), file=sys.stderr)
    return rows


def _coverage(rows: list[Row]) -> dict[str, Any]:
    inst = [r for r in rows if r.status != "not instantiable"]
    counts = {s: sum(r.status == s for r in rows) for s in ("exact", "wrong", "refused", "not instantiable")}
    exact = counts["exact"]
    return {"classes": len(rows), "instantiable": len(inst), **counts,
            "coverage": exact / len(inst) if inst else 0.0}


def write(rows: list[Row], out: Path, seconds: float) -> dict[str, Any]:
    import jax
    import torch

    cov = _coverage(rows)
    versions = {"torch": torch.__version__, "jax": jax.__version__}
    for pkg in ("transformers", "diffusers"):
        with contextlib.suppress(ImportError):
            versions[pkg] = importlib.import_module(pkg).__version__
    out.mkdir(parents=True, exist_ok=True)
    (out / "interop_sweep.json").write_text(json.dumps(
        {"summary": cov, "versions": versions, "seconds": round(seconds, 1),
         "criteria": {"float32_relative_max_error": F32_TOL, "bfloat16_bit_exact_fraction": BF16_EXACT},
         "classes": [asdict(r) for r in rows]}, indent=1))
    lines = [
        "# Interop coverage sweep",
        "",
        "`bench/interop_sweep.py`: every norm class in " + ", ".join(f"{k} {v}" for k, v in versions.items())
        + f", instantiated with hidden size {HIDDEN}, converted with `jln.interop.from_torch` and compared with"
        f" torch ({seconds:.0f} s).",
        "",
        f"**{cov['exact']} of {cov['instantiable']} instantiable classes convert exactly "
        f"({100 * cov['coverage']:.1f}%)**; {cov['wrong']} convert wrongly, {cov['refused']} are refused, "
        f"{cov['not instantiable']} of {cov['classes']} could not be instantiated here.",
        "",
        f"Exact: float32 max error <= {F32_TOL} relative to the output's size, same dtypes, bfloat16 bit-exact on "
        f">= {100 * BF16_EXACT:.0f}% of elements (both modules cast to bfloat16).",
        "",
    ]
    for status in ("wrong", "refused", "exact", "not instantiable"):
        sel = [r for r in rows if r.status == status]
        if not sel:
            continue
        lines += [f"## {status} ({len(sel)})", "", "| class | input | jln | f32 err | bf16 exact | detail |",
                  "|---|---|---|---|---|---|"]
        for r in sorted(sel, key=lambda r: (r.detail[:40] if status != "exact" else "", r.qualname)):
            f32 = "" if r.f32_err is None else f"{r.f32_err:.2g}"
            bf = "" if r.bf16_exact is None else f"{100 * r.bf16_exact:.1f}%"
            detail = r.detail.replace("|", "\\|").replace("\n", " ")
            lines.append(f"| `{r.qualname}` | {tuple(r.input_shape) if r.input_shape else ''} | {r.target} | "
                         f"{f32} | {bf} | {detail} |")
        lines.append("")
    (out / "interop_sweep.md").write_text("\n".join(lines))
    return cov


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=None, help="substring of module.class to restrict the sweep to")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = ap.parse_args()
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    t0 = time.time()
    rows = sweep(args.only)
    cov = write(rows, Path(args.out), time.time() - t0)
    print(f"interop coverage: {cov['exact']} of {cov['instantiable']} instantiable norm classes convert exactly "
          f"({100 * cov['coverage']:.1f}%); {cov['wrong']} wrongly, {cov['refused']} refused, "
          f"{cov['not instantiable']} not instantiable ({cov['classes']} found)")


if __name__ == "__main__":
    main()
