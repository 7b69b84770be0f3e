"""Benchmark machinery shared by ``jln bench`` and the suites in ``bench/``.

Norms are memory-bound, so every timing is also reported as effective bandwidth and as a
percentage of a copy of the same bytes measured in the same run (the floor: the faster of an
elementwise XLA copy and, when torch is installed, torch's ``copy_`` on the same device,
whichever implementations are compared).

* Bytes moved (the minimum any implementation must move, :func:`bytes_moved`): forward reads
  x and writes y, ``2·M·N·b``; forward+backward reads x and dy and writes dx, ``3·M·N·b``; the
  fused residual add doubles both (it also reads the residual and writes the sum). Per-feature
  parameters and per-row statistics are ignored (``O(N + M)``).
* Timing (:func:`time_interleaved`): warm-up, then the median of ``reps`` samples; a sample
  runs ``inner`` back-to-back calls rotating over several input buffers (enough that each
  input array alone spans four times the last-level cache, :func:`buffer_sets`, so no call
  finds its x in cache) and blocks once, at its end (on a CPU it holds at most
  :data:`CPU_IN_FLIGHT` calls unfinished, blocking on the oldest: none, so each call is synced
  before the next is issued). The implementations of one case
  (op, shape, dtype, direction) and the copy are sampled in turns, one sample each per round,
  so a machine whose speed drifts (a shared host, a throttling chip) shifts them alike and
  their ratios hold; each round's order is a seeded shuffle, so no implementation always
  follows the same other. Compilation is timed separately. On a CPU, jln's native kernel
  library is loaded before the first case (the report's ``native_kernels``), so no case's
  compile time holds its loading; it is not built here (``jln build`` builds it): unbuilt,
  *jln* runs the XLA path and *jln-native* is skipped, as the report says.
* The floor: a copy of the same buffers (2·M·N·b): XLA's ``-x`` and, when torch is installed
  (whether or not a torch implementation is compared), torch's ``copy_`` into one destination
  (as XLA's output reuses one allocation), the faster of the two; timed once per shape and
  dtype and again in turns with every case. The ``copy`` record of a shape and dtype holds the
  best of all those timings, and when the sweep ends every record's ``copy_gbps``,
  ``floor_us`` and ``pct_of_copy`` are recomputed from it (:func:`apply_floor`), so one floor
  serves every direction and implementation of the shape. A record above 100% of its floor
  (``above_floor``) means the floor was not one: the machine was noisy or loaded while the
  copy ran. XLA's half-precision ``-x`` on a
  CPU widens every element and runs at under half the memory's speed (10-14 GB/s against
  torch's 27-40 GB/s, one CPU core), so without torch's copy a CPU half-precision floor
  flatters.
* Saved residuals (:func:`residual_bytes_per_elem`): the arrays ``jax.vjp`` keeps for the
  backward pass, from the leaves of its ``vjp`` function (shapes only, nothing runs); arrays
  with fewer than N elements (per-row statistics, small parameters) are left out, as they
  are O(1/N) per element anyway.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import math
import mmap
import os
import platform
import random
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jln.cli._bench import impls

try:
    import resource
except ImportError:  # not a POSIX system: no fault counts (minor_faults)
    resource = None  # type: ignore[assignment]

#: ``fwd``: the forward; ``fwd+bwd``: forward and reverse pass in one jitted call (what a
#: training step runs); ``bwd``: the reverse pass alone, from saved residuals.
DIRECTIONS = ("fwd", "fwd+bwd", "bwd")
DEFAULT_DIRECTIONS = ("fwd", "fwd+bwd")
DTYPES = ("float32", "bfloat16", "float16")
DEFAULT_DTYPES = ("float32", "bfloat16")
DEFAULT_WIDTHS = (256, 1024, 4096, 16384)


# --------------------------------------------------------------------------------------------
# Byte counting and residuals
# --------------------------------------------------------------------------------------------


@contextlib.contextmanager
def standard_promotion() -> Iterator[None]:
    """JAX's default promotion rules, whatever the caller (e.g. a strict test session) set.

    Baselines are third-party code, measured as their users run them; flax's LayerNorm, for
    one, does not trace under ``jax_numpy_dtype_promotion="strict"`` with bfloat16 input.
    """
    with jax.numpy_dtype_promotion("standard"), jax.numpy_rank_promotion("allow"):
        yield


def bytes_moved(op: str, rows: int, width: int, itemsize: int, direction: str) -> int:
    """Minimum bytes ``op`` must move over an ``[rows, width]`` input of ``itemsize`` bytes.

    ``fwd``: 2·M·N·b (read x, write y); ``fwd+bwd`` and ``bwd``: 3·M·N·b (read x and dy, write dx); the
    fused residual ops (and the ``copy`` floor's fwd, which is 2·M·N·b) as described in the
    module docstring.
    """
    if direction not in DIRECTIONS:
        raise ValueError(f"direction must be one of {DIRECTIONS}; received {direction!r}")
    per = 2 if direction == "fwd" else 3
    if impls.family(op) in impls.FUSED_ADD:
        per *= 2
    elif impls.family(op) == "gated_rms_norm":  # reads the gate too (and writes dgate)
        per = 3 if direction == "fwd" else 5
    return per * rows * width * itemsize


def residual_bytes_per_elem(f: Callable[..., Any], *args: Any) -> float:
    """Bytes per element of ``args[0]["x"]`` that reverse mode keeps between ``f``'s passes.

    Sums the sizes of the leaves of ``jax.vjp(f, *args)[1]`` (the residuals, including any
    input it keeps) that have at least N elements (N = the last axis of x), divided by x's
    size. Evaluated abstractly with ``jax.eval_shape``: no computation runs.
    """
    x = args[0]["x"]
    width, size = x.shape[-1], math.prod(x.shape)
    with standard_promotion():
        res = jax.eval_shape(lambda *a: jax.vjp(f, *a)[1], *args)
    total = 0
    for leaf in jax.tree_util.tree_leaves(res):
        n = math.prod(leaf.shape)
        if n >= width:
            total += n * jnp.dtype(leaf.dtype).itemsize
    return total / size


def torch_residual_bytes_per_elem(tf: Callable[..., Any], p: dict[str, Any]) -> float:
    """Same measure for a torch function: tensors autograd saves (seen by saved-tensor hooks)."""
    import torch

    x = p["x"]
    width, seen, total = x.shape[-1], set(), 0

    def pack(t: Any) -> Any:
        nonlocal total
        key = (t.data_ptr(), t.numel(), t.dtype)
        if t.numel() >= width and key not in seen:
            seen.add(key)
            total += t.numel() * t.element_size()
        return t

    leaves = {k: v.detach().requires_grad_() for k, v in p.items()}
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        tf(leaves)
    return total / x.numel()


# --------------------------------------------------------------------------------------------
# Timing
# --------------------------------------------------------------------------------------------


#: Calls a CPU sample leaves unfinished while it issues the next (see :func:`time_interleaved`):
#: none. A CPU runs one call at a time anyway, and every output still held is one more buffer
#: the next call's output cannot reuse, so that output's stores miss the cache and fetch its
#: lines from memory first. Measured on one CPU core, jln's float32 layer_norm of 256x4096
#: took 551 us per call with two calls left unfinished and 422 us with none (an XLA copy of the
#: same bytes: 269 us either way); torch's eager calls finish before they return anyway.
CPU_IN_FLIGHT = 0


@dataclasses.dataclass
class Timing:
    median_s: float
    min_s: float
    samples: int
    inner: int
    #: the process's minor page faults per call over the timed samples (``None`` where the
    #: platform does not count them): fresh pages the allocator hands out, which a call then
    #: pays for (see :func:`minor_faults`)
    faults_per_call: float | None = None


def to_torch(a: Any, device: str | None) -> Any:
    """A JAX array as a torch tensor on ``device`` (shared through dlpack where it can)."""
    import torch

    try:
        t = torch.from_dlpack(a)
    except Exception:  # noqa: BLE001 - any dlpack failure falls back to a host copy
        t = torch.from_numpy(np.array(a, np.float32)).to(getattr(torch, str(a.dtype)))
    return t.to(device)


#: The host's page size: what one minor page fault brings in.
PAGE_BYTES = mmap.PAGESIZE


def minor_faults() -> int | None:
    """The process's minor page faults so far (``getrusage``), ``None`` where not counted.

    A call that writes into memory the host allocator has just taken from the OS faults a page
    in for every :data:`PAGE_BYTES` it writes; glibc returns freed memory to the OS once the top of its heap
    passes a threshold that it moves as it goes, so the same jitted call can fault 0 pages in one
    run and every page of its output in the next (measured on one CPU core: jln's float32
    layer_norm of 4096x256 faulted 0 to 250 pages per call between runs of the same script,
    taking 294-600 us, where XLA's ``-x`` faulted none; with glibc's trim threshold fixed by
    ``MALLOC_TRIM_THRESHOLD_`` alone, which also pins its mmap threshold at 128 KiB, every output
    was a fresh mapping and both faulted all 1025 pages per call, 2.7-3.6 ms). Timings with many
    faults per call measure the allocator as much as the implementation."""
    if resource is None:  # not a POSIX system
        return None
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_minflt)


#: One timed implementation: ``(call, n_buffers, sync)``, as :func:`time_calls` takes them.
Timed = tuple[Callable[[int], Any], int, Callable[[Any], Any]]


def time_interleaved(calls: dict[str, Timed], *, reps: int, warmup: int, min_sample_s: float,
                     in_flight: int | None = None) -> dict[str, Timing]:
    """Median seconds per call of each ``calls[name] = (call, n_buffers, sync)``, sampled in turns.

    ``call(i)`` runs on input set ``i < n_buffers``. Each sample issues ``inner`` calls back to
    back, rotating the buffers, and synchronises once at its end (``sync`` on the list of
    outputs); ``inner`` is chosen per implementation so a sample lasts at least
    ``min_sample_s``, which hides dispatch overhead for fast kernels. Each round takes one
    sample of every implementation in an order of its own, a seeded shuffle (the same every
    run), so none is always first and none always follows the same other: what one call
    leaves in the cache and the allocator sways the next, and with a fixed cyclic order (each
    round starting one further on) jln's float32 forwards took 5-18% longer than the same
    kernel sampled two places on (``jln`` vs ``jln-native``, one CPU core, every width).

    ``in_flight``: once more than this many calls are out, ``sync`` the oldest and drop it
    (0: every call is synced and dropped before the next is issued), so a sample's outputs
    reuse memory; ``None`` holds all ``inner``. On a CPU, holding them all made the host
    allocator return the memory to the OS after each sample and fault fresh pages into every
    output: measured on one CPU core, an XLA float32 copy of 4096x256 took 2346 us per call
    with 16 outputs held and 133 us with one (see also :data:`CPU_IN_FLIGHT`).
    """
    inner: dict[str, int] = {}
    for name, (call, n_buffers, sync) in calls.items():
        for i in range(warmup):
            sync(call(i % n_buffers))
        t0 = time.perf_counter()
        sync(call(0))
        est = max(time.perf_counter() - t0, 1e-7)
        inner[name] = int(min(64, max(1, math.ceil(min_sample_s / est))))
    names = list(calls)
    samples: dict[str, list[float]] = {name: [] for name in names}
    faults: dict[str, int | None] = dict.fromkeys(names, 0)
    calls_made = dict.fromkeys(names, 0)
    nxt = dict.fromkeys(names, 1)
    order = random.Random(0)
    for _ in range(max(reps, 1)):
        for name in order.sample(names, len(names)):
            call, n_buffers, sync = calls[name]
            k, m = nxt[name], inner[name]
            f0 = minor_faults()
            t0 = time.perf_counter()
            outs: collections.deque[Any] = collections.deque()
            for j in range(m):
                outs.append(call((k + j) % n_buffers))
                if in_flight is not None and len(outs) > in_flight:
                    sync(outs.popleft())
            sync(list(outs))
            samples[name].append((time.perf_counter() - t0) / m)
            f1 = minor_faults()
            del outs
            before = faults[name]
            faults[name] = None if before is None or f0 is None or f1 is None else before + f1 - f0
            calls_made[name] += m
            nxt[name] = k + m
    per_call = {name: None if (f := faults[name]) is None else f / max(calls_made[name], 1) for name in names}
    return {name: Timing(float(np.median(v)), float(np.min(v)), len(v), inner[name], per_call[name])
            for name, v in samples.items()}


def time_calls(
    call: Callable[[int], Any],
    n_buffers: int,
    sync: Callable[[Any], Any],
    *,
    reps: int,
    warmup: int,
    min_sample_s: float,
) -> Timing:
    """Median seconds per call of ``call(i)`` (``i`` picks one of ``n_buffers`` input sets):
    :func:`time_interleaved` for one implementation."""
    return time_interleaved({"": (call, n_buffers, sync)}, reps=reps, warmup=warmup, min_sample_s=min_sample_s)[""]


# --------------------------------------------------------------------------------------------
# Device, versions, data
# --------------------------------------------------------------------------------------------


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def last_level_cache_bytes() -> int:
    """The largest cache of the default device (CPU: from sysfs; accelerators: 64 MiB)."""
    if jax.default_backend() != "cpu":
        return 64 << 20
    best = 32 << 20
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        for entry in os.listdir(base):
            with open(os.path.join(base, entry, "size")) as f:
                text = f.read().strip().upper()
            mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
            best = max(best, int(text.rstrip("KMG")) * mult)
    except (OSError, ValueError):
        pass
    return best


def device_info(torch_device: str | None) -> dict[str, Any]:
    dev = jax.devices()[0]
    info: dict[str, Any] = {
        "platform": dev.platform,
        "kind": getattr(dev, "device_kind", str(dev)),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "torch_device": torch_device,
    }
    info["name"] = info["cpu"] if dev.platform == "cpu" else info["kind"]
    return info


def versions() -> dict[str, str | None]:
    import importlib.metadata as md

    out: dict[str, str | None] = {"python": platform.python_version()}
    for name in ("jln", "jax", "jaxlib", "flax", "numpy", "torch", "tokamax", "triton"):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = None
    return out


def buffer_sets(array_bytes: int, max_sets: int, cache_bytes: int | None = None) -> int:
    """How many input sets a case rotates over: enough that one input array's copies alone span
    four times the last-level cache (``cache_bytes``, by default :func:`last_level_cache_bytes`),
    so each call reads its inputs from memory, at least 2 and at most ``max_sets``.

    (A forward reads only x; sizing by all of a set's arrays together left x's rotation at one
    times the cache for float32 and half of it for bfloat16: one CPU core, 1048576 elements, 8
    sets.)
    """
    flush = 4 * (last_level_cache_bytes() if cache_bytes is None else cache_bytes)
    return int(min(max_sets, max(2, math.ceil(flush / max(1, array_bytes)))))


def make_data(rows: int, width: int, dtype: Any, n_buffers: int, seed: int = 0) -> dict[str, Any]:
    """Random inputs on the default device: ``n_buffers`` sets of the large arrays, shared params.

    Returns ``{"sets": [{"x", "residual", "dy", "ds"}...], "scale", "bias", "emb"}``; x is
    N(0.5, 1) (a nonzero mean exercises the mean subtraction), params near 1 and 0.
    """
    dtype = jnp.dtype(dtype)
    key = jax.random.key(seed)
    sets = []
    for i in range(n_buffers):
        ks = jax.random.split(jax.random.fold_in(key, i), 4)
        s = {name: jax.random.normal(k, (rows, width), jnp.float32).astype(dtype)
             for name, k in zip(("x", "residual", "dy", "ds"), ks, strict=True)}
        s["x"] = (s["x"] + jnp.asarray(0.5, dtype)).astype(dtype)
        sets.append(s)
    kp = jax.random.split(jax.random.fold_in(key, 10_000), 5)
    batch = impls.adaptive_batch(rows)
    data = {
        "sets": sets,
        "scale": (1 + 0.1 * jax.random.normal(kp[0], (width,), jnp.float32)).astype(dtype),
        "bias": (0.1 * jax.random.normal(kp[1], (width,), jnp.float32)).astype(dtype),
        "emb": (0.1 * jax.random.normal(kp[2], (batch, impls.MAX_CHUNKS * width), jnp.float32)).astype(dtype),
        "shift": (0.1 * jax.random.normal(kp[3], (batch, width), jnp.float32)).astype(dtype),
        "scale_c": (0.1 * jax.random.normal(kp[4], (batch, width), jnp.float32)).astype(dtype),
        # fixed statistics (frozen BatchNorm): a mean near 0, a variance near 1
        "running_mean": (0.1 * jax.random.normal(kp[3], (width,), jnp.float32)).astype(dtype),
        "running_var": (1 + 0.1 * jax.random.normal(kp[4], (width,), jnp.float32) ** 2).astype(dtype),
    }
    jax.block_until_ready(data)
    return data


def op_inputs(op: str, data: dict[str, Any], i: int) -> tuple[dict[str, Any], tuple[Any, ...]]:
    """``(p, (dy, ds))`` for buffer set ``i``: the op's named inputs and its raw cotangents."""
    s = data["sets"][i]
    p = {}
    for name in impls.array_names(op):
        # a gated norm's gate: another x-shaped random array (the residual buffer)
        p[name] = s["residual"] if name == "gate" else s[name] if name in s else data[name]
    if impls.batched(op):  # per-example conditions, or a batch and a spatial axis
        rows, width = s["x"].shape
        b = impls.adaptive_batch(rows)
        p["x"] = s["x"].reshape(b, rows // b, width)
        if "emb" in p:
            p["emb"] = p["emb"][:, : impls.chunks(op) * width]
        return p, (s["dy"].reshape(b, rows // b, width),)
    return p, (s["dy"], s["ds"])


# --------------------------------------------------------------------------------------------
# Running cases
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Config:
    """What to run. ``rows=None`` picks ``elements // width`` rows per width."""

    ops: Sequence[str] = impls.DEFAULT_OPS
    impls: Sequence[str] = impls.IMPLS
    dtypes: Sequence[str] = DEFAULT_DTYPES
    widths: Sequence[int] = DEFAULT_WIDTHS
    rows: int | None = None
    elements: int = 1 << 22
    directions: Sequence[str] = DEFAULT_DIRECTIONS
    reps: int = 15
    warmup: int = 2
    min_sample_s: float = 2e-3
    max_buffers: int = 64
    budget_s: float | None = None
    compile_budget_s: float = 120.0
    torch_threads: int | None = None
    seed: int = 0

    def rows_for(self, width: int) -> int:
        return self.rows if self.rows is not None else max(1, self.elements // width)


def _case_key(impl: str, op: str, rows: int, width: int, dtype: str, direction: str) -> dict[str, Any]:
    return {"impl": impl, "op": op, "shape": [rows, width], "dtype": dtype, "direction": direction}


@contextlib.contextmanager
def _kept_buffers(compiled: bool) -> Iterator[None]:
    """torch.compile's backward donates its saved buffers, which a backward run several times
    over one graph (the ``bwd`` direction) must not; the setting is restored afterwards."""
    if not compiled:
        yield
        return
    import torch._functorch.config as functorch_config

    prior = functorch_config.donated_buffer
    functorch_config.donated_buffer = False
    try:
        yield
    finally:
        functorch_config.donated_buffer = prior


class _Runner:
    def __init__(self, cfg: Config, progress: Callable[[str], None] | None):
        self.cfg = cfg
        self.progress = progress or (lambda label: None)
        self.start = time.perf_counter()
        self.compile_spent = 0.0
        self.results: list[dict[str, Any]] = []
        self.copy_timed: Timed = (lambda i: None, 1, jax.block_until_ready)
        self.skipped: list[dict[str, Any]] = []
        self.torch_device = self._torch_device() if any(i in impls.TORCH_IMPLS for i in cfg.impls) else None
        # the floor times torch's copy_ whenever torch is installed, so a case's % of copy does not
        # depend on which implementations are compared
        self.copy_torch_device = self.torch_device or self._torch_device()
        self.copies: dict[tuple[int, int, str], dict[str, Any]] = {}  # (rows, width, dtype) -> copy record
        # outputs held per sample (see time_interleaved): the host allocator's page faults are a
        # CPU matter; accelerator allocators pool their memory, and a torch CUDA sync waits for
        # every queued call, so there a sample holds all of its outputs
        self.in_flight = CPU_IN_FLIGHT if jax.default_backend() == "cpu" else None
        self.native = self._native_kernels(cfg.impls)

    @staticmethod
    def _native_kernels(impls_: Sequence[str]) -> dict[str, Any] | None:
        """On a CPU, load jln's native kernels before any case (the first jln case's compile
        time would otherwise hold the loading); where they are not built (``jln build``), say
        so before the run: *jln* then measures the XLA path."""
        if jax.default_backend() != "cpu" or not {"jln", "jln-native"} & set(impls_):
            return None
        from jln.kernels import _cpu

        t0 = time.perf_counter()
        reason = _cpu.available()
        if reason is not None:
            print(f"jln bench: {reason}; `jln` runs the XLA path here and `jln-native` is skipped", file=sys.stderr)
        return {"ready": reason is None, "reason": reason, "load_s": time.perf_counter() - t0}

    @staticmethod
    def _torch_device() -> str | None:
        try:
            import torch
        except ImportError:
            return None
        if jax.default_backend() == "gpu" and torch.cuda.is_available():
            return "cuda"
        return "cpu"

    def timing(self, calls: dict[str, Timed]) -> dict[str, Timing]:
        c = self.cfg
        return time_interleaved(calls, reps=c.reps, warmup=c.warmup, min_sample_s=c.min_sample_s,
                                in_flight=self.in_flight)

    def over_budget(self) -> str | None:
        b = self.cfg.budget_s
        if b is not None and time.perf_counter() - self.start > b:
            return f"time budget of {b:g} s spent before this case"
        return None

    # -- JAX -----------------------------------------------------------------------------

    def jax_case(self, f: Callable[..., Any], op: str, direction: str, data: dict[str, Any]) -> dict[str, Any]:
        n = len(data["sets"])
        inputs = [op_inputs(op, data, i) for i in range(n)]
        args: list[tuple[Any, ...]]
        if direction == "fwd":
            fn: Callable[..., Any] = f
            args = [(p,) for p, _ in inputs]
        else:
            outs = jax.eval_shape(f, inputs[0][0])
            args = [(p, jax.block_until_ready(tuple(c.astype(o.dtype) for o, c in zip(outs, cots, strict=False))))
                    for p, cots in inputs]
            if direction == "fwd+bwd":

                def fn(p: dict[str, Any], cot: tuple[Any, ...]) -> Any:
                    return jax.vjp(f, p)[1](cot)[0]
            else:  # the reverse pass alone: residuals computed (and kept) once per input set
                pullback = jax.jit(lambda p: jax.vjp(f, p)[1])  # one trace: one pytree for all sets
                args = [(jax.block_until_ready(pullback(p)), cot) for p, cot in args]

                def fn(pullback: Any, cot: tuple[Any, ...]) -> Any:
                    return pullback(cot)[0]

        t0 = time.perf_counter()
        compiled = jax.jit(fn).lower(*args[0]).compile()
        compile_s = time.perf_counter() - t0
        res = residual_bytes_per_elem(f, inputs[0][0])
        timed: Timed = (lambda i: compiled(*args[i]), n, jax.block_until_ready)
        return {"timed": timed, "compile_s": compile_s, "residual": res}

    # -- torch ---------------------------------------------------------------------------

    def _torch(self) -> Any:
        """torch, with ``--torch-threads`` applied."""
        import torch

        if self.cfg.torch_threads:
            torch.set_num_threads(self.cfg.torch_threads)
        return torch

    def _to_torch(self, a: Any, device: str | None = None) -> Any:
        return to_torch(a, device or self.torch_device)

    def torch_case(self, op: str, compile_: bool, direction: str, data: dict[str, Any]) -> dict[str, Any]:
        torch = self._torch()
        tf = impls.torch_op(op)
        dev = self.torch_device
        n = len(data["sets"])
        to_t = self._to_torch

        inputs = []
        for i in range(n):
            p, cots = op_inputs(op, data, i)
            inputs.append(({k: to_t(v) for k, v in p.items()}, tuple(to_t(c) for c in cots)))
        sync = (lambda _: torch.cuda.synchronize()) if dev == "cuda" else (lambda _: None)
        res = torch_residual_bytes_per_elem(tf, inputs[0][0])
        run_fn = tf
        compile_s = None
        if compile_:
            if self.compile_spent > self.cfg.compile_budget_s:
                raise impls.Skip(f"torch.compile budget of {self.cfg.compile_budget_s:g} s spent")
            torch._dynamo.reset()  # a fresh cache per case: no recompile limit, no stale guards
            run_fn = torch.compile(tf, dynamic=False)

        build_s = 0.0  # bwd: building the graphs runs (and compiles) the forward
        if direction == "fwd":

            def call(i: int) -> Any:
                with torch.no_grad():
                    return run_fn(inputs[i][0])
        elif direction == "fwd+bwd":

            def call(i: int) -> Any:
                p, cots = inputs[i]
                leaves = {k: v.detach().requires_grad_() for k, v in p.items()}
                outs = run_fn(leaves)
                return torch.autograd.grad(outs, list(leaves.values()), cots[: len(outs)])
        else:  # the reverse pass alone, over a graph built once per input set (and kept)
            t0 = time.perf_counter()
            graphs = []
            with _kept_buffers(compile_):
                for p, cots in inputs:
                    leaves = {k: v.detach().requires_grad_() for k, v in p.items()}
                    graphs.append((run_fn(leaves), list(leaves.values()), cots))
            build_s = time.perf_counter() - t0

            def call(i: int) -> Any:
                outs, leaves, cots = graphs[i]
                return torch.autograd.grad(outs, leaves, cots[: len(outs)], retain_graph=True)

        if compile_:
            t0 = time.perf_counter()
            try:
                sync(call(0))
            finally:
                compile_s = time.perf_counter() - t0 + build_s
                self.compile_spent += compile_s
        timed: Timed = (call, n, sync)
        return {"timed": timed, "compile_s": compile_s, "residual": res}

    # -- the sweep -----------------------------------------------------------------------

    def run(self) -> None:
        c = self.cfg
        for dtype in c.dtypes:
            itemsize = jnp.dtype(dtype).itemsize
            for width in c.widths:
                rows = c.rows_for(width)
                n = buffer_sets(rows * width * itemsize, c.max_buffers)
                data = make_data(rows, width, dtype, n, c.seed)
                self.copy_case(rows, width, dtype, data)
                for op in c.ops:
                    for direction in c.directions:
                        self.case(op, rows, width, dtype, direction, data, itemsize)
                del data

    def copy_case(self, rows: int, width: int, dtype: str, data: dict[str, Any]) -> None:
        """The floor: an elementwise copy of x's bytes (read x, write y) through XLA and, when
        torch is installed, torch's ``copy_`` on its device; the faster one is the floor (and is
        re-timed with each case, :meth:`better_copy`). ``xla_gbps`` and ``torch_gbps`` are this
        first, side-by-side timing."""
        self.progress(f"copy {rows}x{width} {dtype}")
        key = _case_key("copy", "copy", rows, width, dtype, "fwd")
        xs = [s["x"] for s in data["sets"]]
        compiled = jax.jit(lambda x: -x).lower(xs[0]).compile()
        calls: dict[str, tuple[Callable[[int], Any], Callable[[Any], Any]]] = {
            "xla": (lambda i: compiled(xs[i]), jax.block_until_ready)}
        if self.copy_torch_device is not None:
            torch = self._torch()
            srcs = [self._to_torch(x, self.copy_torch_device) for x in xs]
            dst = torch.empty_like(srcs[0])  # one destination: XLA's output reuses one allocation
            sync = (lambda _: torch.cuda.synchronize()) if self.copy_torch_device == "cuda" else (lambda _: None)
            calls["torch"] = (lambda i: dst.copy_(srcs[i]), sync)
        nbytes = 2 * rows * width * jnp.dtype(dtype).itemsize
        by = self.timing({name: (call, len(xs), sync) for name, (call, sync) in calls.items()})
        via = min(by, key=lambda name: by[name].median_s)
        tm = by[via]
        self.copy_timed = (calls[via][0], len(xs), calls[via][1])
        record = {**key, "pct_of_copy": 100.0, "compile_s": None, "residual_bytes_per_elem": None,
                  "bytes": nbytes, "n_buffers": len(xs), "via": via, "first_us": tm.median_s * 1e6,
                  "copy_timings": 0, **{f"{name}_gbps": nbytes / t.median_s / 1e9 for name, t in by.items()}}
        self.copies[(rows, width, dtype)] = record
        self.better_copy(rows, width, dtype, tm)
        self.results.append(record)

    def better_copy(self, rows: int, width: int, dtype: str, tm: Timing) -> None:
        """Count one more copy timing of the shape and dtype; keep it in its copy record if it is
        the fastest so far (the floor is the best copy the run measured)."""
        record = self.copies[(rows, width, dtype)]
        record["copy_timings"] += 1
        if "median_us" in record and record["median_us"] <= tm.median_s * 1e6:
            return
        record.update({"median_us": tm.median_s * 1e6, "min_us": tm.min_s * 1e6,
                       "gbps": record["bytes"] / tm.median_s / 1e9, "floor_us": tm.median_s * 1e6,
                       "inner": tm.inner, "reps": tm.samples, "faults_per_call": tm.faults_per_call})

    def prepare(self, impl: str, op: str, rows: int, width: int, dtype: str, direction: str,
                data: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
        """Compile (or build) one implementation's case: ``(prepared, None)``, or ``(None, why)``."""
        self.progress(f"{op} {impl} {rows}x{width} {dtype} {direction}")
        reason = self.over_budget()
        if reason is not None:
            return None, reason
        try:
            if impl in impls.TORCH_IMPLS:
                return self.torch_case(op, impl == "torch-compile", direction, data), None
            return self.jax_case(impls.jax_op(impl, op), op, direction, data), None
        except impls.Skip as e:
            return None, str(e)
        except ValueError as e:  # e.g. impl="pallas" refusing this case
            return None, f"ValueError: {e}"
        except Exception as e:  # noqa: BLE001 - a benchmark records a failure, it does not stop
            return None, f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"

    def case(self, op: str, rows: int, width: int, dtype: str, direction: str,
             data: dict[str, Any], itemsize: int) -> None:
        """Every implementation of one (op, shape, dtype, direction), timed in turns with the copy."""
        ready: dict[str, dict[str, Any]] = {}
        for impl in self.cfg.impls:
            out, reason = self.prepare(impl, op, rows, width, dtype, direction, data)
            if out is None:
                self.skipped.append({**_case_key(impl, op, rows, width, dtype, direction), "reason": reason})
            else:
                ready[impl] = out
        if not ready:
            return
        # the floor is sampled in the same rounds as the implementations, on the same buffers,
        # so a shared or throttling machine shifts all numbers together; the best copy timing of
        # the shape and dtype in the run is the floor (apply_floor, when the sweep ends)
        copy = " copy"  # not an impl name
        timings = self.timing({**{impl: out["timed"] for impl, out in ready.items()}, copy: self.copy_timed})
        self.better_copy(rows, width, dtype, timings.pop(copy))
        nbytes = bytes_moved(op, rows, width, itemsize, direction)
        for impl, tm in timings.items():
            out = ready[impl]
            gbps = nbytes / tm.median_s / 1e9
            self.results.append({
                **_case_key(impl, op, rows, width, dtype, direction),
                "median_us": tm.median_s * 1e6,
                "min_us": tm.min_s * 1e6,
                "gbps": gbps,
                "pct_of_copy": None,  # set with floor_us, copy_gbps and above_floor by apply_floor
                "compile_s": out["compile_s"],
                "residual_bytes_per_elem": out["residual"],
                "bytes": nbytes,
                "n_buffers": len(data["sets"]),
                "inner": tm.inner,
                "reps": tm.samples,
                "faults_per_call": tm.faults_per_call,
            })


def apply_floor(results: list[dict[str, Any]]) -> None:
    """Point every record at one floor per shape and dtype: its ``copy`` record (the best copy
    the run measured for them). Sets each other record's ``copy_gbps``, ``floor_us`` (the copy's
    time scaled to the record's bytes), ``pct_of_copy`` and ``above_floor`` (above 100%: the
    floor was not one), in place; records without a copy record get ``None``."""
    copies = {(tuple(r["shape"]), r["dtype"]): r for r in results if r["impl"] == "copy" and "gbps" in r}
    for r in results:
        c = copies.get((tuple(r["shape"]), r["dtype"]))
        if r["impl"] == "copy":
            r["copy_gbps"] = r.get("gbps")
            r["above_floor"] = False
            continue
        if c is None:
            r.update(copy_gbps=None, floor_us=None, pct_of_copy=None, above_floor=False)
            continue
        pct = 100.0 * r["gbps"] / c["gbps"]
        r.update(copy_gbps=c["gbps"], floor_us=c["median_us"] * r["bytes"] / c["bytes"], pct_of_copy=pct,
                 above_floor=pct > 100.0)


def _torch_threads(device: str | None) -> int | None:
    """torch's intra-op threads (what a CPU torch case and copy ran with), None without torch."""
    if device is None:
        return None
    import torch

    return int(torch.get_num_threads())


def count_cases(cfg: Config) -> int:
    """Number of progress steps :func:`run` reports (one copy per width and dtype, plus cases)."""
    per = 1 + len(cfg.ops) * len(cfg.impls) * len(cfg.directions)
    return len(cfg.dtypes) * len(cfg.widths) * per


def run(cfg: Config, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run the sweep ``cfg`` describes; return the report (``device``, ``versions``, ``results``...)."""
    runner = _Runner(cfg, progress)
    t0 = time.perf_counter()
    interrupted = False
    with standard_promotion():
        try:
            runner.run()
        except KeyboardInterrupt:  # Ctrl-C or a timeout's SIGTERM: keep what was measured
            interrupted = True
    apply_floor(runner.results)
    return {
        "device": device_info(runner.copy_torch_device),
        "versions": versions(),
        "config": {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(cfg).items()},
        "in_flight": runner.in_flight,
        "torch_threads": _torch_threads(runner.copy_torch_device),
        "native_kernels": runner.native,
        "wall_s": time.perf_counter() - t0,
        "interrupted": interrupted,
        "results": runner.results,
        "skipped": runner.skipped,
    }


# --------------------------------------------------------------------------------------------
# Reports
# --------------------------------------------------------------------------------------------


#: The keys a record needs for the reports (:func:`markdown`, :func:`plot`).
_RECORD_KEYS = ("impl", "op", "shape", "dtype", "direction", "median_us", "gbps", "bytes")


def report_problem(report: Any) -> str | None:
    """What keeps ``report`` (a parsed JSON file) from being a ``jln bench --json`` report that
    :func:`markdown` and :func:`plot` can render, or None if nothing does."""
    if not isinstance(report, dict):
        return f"it holds a JSON {type(report).__name__}, not an object"
    missing = [k for k in ("device", "versions", "results") if k not in report]
    if missing:
        return f"it has no {', '.join(repr(k) for k in missing)} (its keys: {sorted(report)[:8]})"
    if not isinstance(report["results"], list) or not all(isinstance(r, dict) for r in report["results"]):
        return "its 'results' is not a list of records"
    for r in report["results"]:
        lacking = [k for k in _RECORD_KEYS if k not in r]
        if lacking:
            return f"a result record has no {', '.join(lacking)} (record keys: {sorted(r)[:8]})"
    dev = report["device"]
    if not isinstance(dev, dict) or not {"platform", "name", "cores", "torch_device"} <= set(dev):
        return "its 'device' is not a jln bench device record"
    if not isinstance(report["versions"], dict):
        return "its 'versions' is not an object"
    return None


def _index(results: Sequence[dict[str, Any]]) -> dict[tuple[Any, ...], dict[str, Any]]:
    return {(r["impl"], r["op"], tuple(r["shape"]), r["dtype"], r["direction"]): r for r in results}


def ratios(report: dict[str, Any], impl: str = "jln") -> Iterator[dict[str, Any]]:
    """Per (op, dtype, direction): geometric means over widths of ``impl``'s time / others'
    (``row[other]``), and, where some width's pair includes page faults (:func:`faulted_cases`),
    the same mean over the other widths (``row[f"{other}_unfaulted"]``: ``None`` when every
    width's pair faulted)."""
    idx = _index(report["results"])
    faulted = {id(r) for r in faulted_cases(report)}
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in report["results"]:
        if r["impl"] == impl:
            groups.setdefault((r["op"], r["dtype"], r["direction"]), []).append(r)
    for (op, dtype, direction), rs in groups.items():
        row: dict[str, Any] = {"op": op, "dtype": dtype, "direction": direction,
                               "pct_of_copy": _gmean([r["pct_of_copy"] for r in rs]),
                               "residual": rs[0]["residual_bytes_per_elem"]}
        for other in impls.IMPLS:
            if other == impl:
                continue
            vals, clean, res = [], [], None
            for r in rs:
                o = idx.get((other, op, tuple(r["shape"]), dtype, direction))
                if o is not None:
                    vals.append(r["median_us"] / o["median_us"])
                    if id(r) not in faulted and id(o) not in faulted:
                        clean.append(vals[-1])
                    res = o["residual_bytes_per_elem"]
            if vals:
                row[other] = _gmean(vals)
                row[f"{other}_residual"] = res
                if len(clean) < len(vals):
                    row[f"{other}_unfaulted"] = _gmean(clean)
        yield row


def _gmean(vals: Sequence[float | None]) -> float | None:
    v = [x for x in vals if x]
    return float(np.exp(np.mean(np.log(v)))) if v else None


def _ratio_cell(row: dict[str, Any], other: str) -> str:
    """A ratio table's cell: the geometric mean, then in parentheses the mean over the widths
    whose pair did not fault (see :func:`ratios`), where some did."""
    cell = _fmt_ratio(row.get(other))
    if f"{other}_unfaulted" in row:
        cell += f" ({_fmt_ratio(row[f'{other}_unfaulted'])})"
    return cell


def _fmt_ratio(v: float | None) -> str:
    """A ratio with two decimals, or two significant digits below 0.01 (0.0042, not 0.00)."""
    return _fmt(v, ".2f" if v is None or abs(v) >= 0.01 else ".2g")


def _fmt(v: float | None, spec: str = ".2f") -> str:
    return "–" if v is None else format(v, spec)


#: A record "includes page faults" when it faulted in at least this share of the pages its
#: case moves (:func:`bytes_moved` / :data:`PAGE_BYTES`) per call: then the allocator, not only the
#: implementation, is in its time.
FAULTED_SHARE = 0.05


def faulted_cases(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The records whose timed calls faulted in pages (see :func:`minor_faults`) for at least
    :data:`FAULTED_SHARE` of the pages their case moves, in the report's order."""
    return [r for r in report["results"]
            if (r.get("faults_per_call") or 0) * PAGE_BYTES >= FAULTED_SHARE * r["bytes"]]


def _detail_table(results: list[dict[str, Any]], idx: dict[Any, Any], op: str, directions: list[str]) -> list[str]:
    """``op``'s per-shape table: each implementation's median µs (GB/s), beside the copy floor
    for the bytes the op moves in that direction."""
    detail = sorted({(tuple(r["shape"]), r["dtype"]) for r in results if r["op"] == op}, key=lambda t: (t[1], t[0][1]))
    shown = [i for i in impls.IMPLS if any(r["impl"] == i and r["op"] == op for r in results)]
    if not detail or not shown:
        return []
    lines = ["", f"{op}, median µs (GB/s):", "",
             "| shape | dtype | dir | copy floor | " + " | ".join(shown) + " |",
             "|---|---|---|---|" + "---|" * len(shown)]
    for shape, dtype in detail:
        for direction in directions:
            cells = []
            for i in shown:
                rec = idx.get((i, op, shape, dtype, direction))
                cells.append("–" if rec is None else f"{rec['median_us']:.0f} ({rec['gbps']:.1f})")
            if all(c == "–" for c in cells):
                continue
            cp = idx.get(("copy", "copy", shape, dtype, "fwd"))
            # the floor for this direction's bytes: the copy's time scaled to them
            scale = 1.0 if cp is None else bytes_moved(op, shape[0], shape[1], jnp.dtype(dtype).itemsize,
                                                       direction) / cp["bytes"]
            copy_cell = "–" if cp is None else f"{cp['median_us'] * scale:.0f} ({cp['gbps']:.1f})"
            lines.append(f"| {shape[0]}×{shape[1]} | {dtype} | {direction} | {copy_cell} | " + " | ".join(cells) + " |")
    return lines


def markdown(
    report: dict[str, Any], *, title: str = "jln bench", command: str | None = None,
    headline: Sequence[str] = ("jln",),
) -> str:
    """A short markdown summary: device, versions, a ratio table per ``headline`` impl (its time
    against the others'), then per op a table of each shape's median µs and GB/s beside the copy floor."""
    d, v = report["device"], report["versions"]
    dev = d["name"] if d["platform"] == "cpu" else f"{d['kind']} (host CPU: {d['cpu']})"
    lines = [
        f"# {title}",
        "",
        f"Device: **{dev}**, {d['cores']} cores, JAX platform `{d['platform']}`, torch device "
        f"`{d['torch_device']}`"
        + (f" ({report['torch_threads']} thread{'s' if report['torch_threads'] != 1 else ''})"
           if report.get("torch_threads") and d["torch_device"] == "cpu" else "")
        + f". Versions: jax {v.get('jax')}, jaxlib {v.get('jaxlib')}, flax "
        f"{v.get('flax')}, torch {v.get('torch')}, tokamax {v.get('tokamax')}, jln {v.get('jln')}.",
    ]
    if command:
        lines += ["", f"Command: `{command}`"]
    if report.get("interrupted"):
        lines += ["", "**Partial results:** this run was interrupted before it finished; the cases it had "
                  "not reached are missing from the tables below."]
    heads = list(headline)
    # reports from before apply_floor held a floor per case: the better of the shape's first copy
    # and the copy timed beside the case
    floor = ("the best copy the run measured of the shape" if any("copy_timings" in r for r in report["results"])
             else "per case, the better of the shape's first copy and the copy timed beside the case")
    who = heads[0] if len(heads) == 1 else "the table's headline impl"
    lines += [
        "",
        f"Ratios are **{who} time ÷ other time** (geometric mean over widths; below 1 means {who} is "
        "faster" + ("; one table per headline impl, named above it" if len(heads) > 1 else "") + "); *jln* is the public ops as users call them (`impl=\"auto\"`: the native kernels "
        "on a single-device CPU, the Pallas kernels on a GPU, where they apply; else XLA), "
        "*jln-xla* forces the XLA path, *jln-pallas* the Pallas kernels. "
        f"*% copy* is {who}'s "
        "effective bandwidth as a share of a copy of the same bytes in the same run (100% = at "
        "the memory floor; " + floor + ", the faster of an elementwise XLA copy and torch's `copy_` on the same "
        "device, over input buffers spanning four times the last-level cache). *B/elem* is what reverse mode saves for the backward pass per "
        "input element" + (f", {who} / flax" if who != "flax" else " (flax's)") + ". Directions: *fwd* the forward, *bwd* the reverse pass alone "
        "from saved residuals, *fwd+bwd* both in one call; *bwd* and *fwd+bwd* count the "
        "backward's bytes (read x and dy, write dx). A ratio in parentheses is the mean over the "
        "widths where neither side faulted pages in (listed below the tables), where some did.",
    ]
    for head in headline:
        measured = {r["impl"] for r in report["results"]}
        others = ["flax", "flax-2pass", "jnp", "tokamax", "torch", "torch-compile", "jln-xla", "jln-pallas",
                  "jln-native", "jln"]
        others = [o for o in others if o != head and o in measured]
        labels = [o.replace("torch-compile", "torch.compile").replace("flax-2pass", "flax 2-pass") for o in others]
        lines += [
            "",
            f"**{head}** time ÷ other time:" if head != "jln" else "**jln** (impl=\"auto\") time ÷ other time:",
            "",
        ]
        rows = list(ratios(report, head))
        if not rows:
            lines.append(f"No {head} results in this report (not run, or every case skipped): no ratios to show.")
            continue
        res_label = f"B/elem {head} / flax" if head != "flax" else "B/elem flax"
        head_cells = ["op", "dtype", "dir", *(f"vs {lab}" for lab in labels), f"{head} % copy", res_label]
        lines += ["| " + " | ".join(head_cells) + " |", "|" + "---|" * len(head_cells)]
        for r in rows:
            res = _fmt(r["residual"], ".1f")
            if head != "flax":
                res += f" / {_fmt(r.get('flax_residual'), '.1f')}"
            cells = [r["op"], r["dtype"], r["direction"], *(_ratio_cell(r, o) for o in others),
                     _fmt(r["pct_of_copy"], ".0f"), res]
            lines.append("| " + " | ".join(cells) + " |")
    idx = _index(report["results"])
    present = [d for d in DIRECTIONS if any(r["direction"] == d for r in report["results"])]
    for op in dict.fromkeys(r["op"] for r in report["results"] if r["op"] != "copy"):
        lines += _detail_table(report["results"], idx, op, present)
    above = [r for r in report["results"] if r["impl"] != "copy" and (r.get("pct_of_copy") or 0) > 100.0]
    if above:
        lines += ["", "Above 100% of copy: a floor that was not one (the copy was timed slower than these cases "
                  "move the same bytes, e.g. on a noisy or loaded machine); `above_floor` in the JSON:", "",
                  "| impl | op | shape | dtype | dir | % copy |", "|---|---|---|---|---|---|"]
        lines += [f"| {r['impl']} | {r['op']} | {r['shape'][0]}×{r['shape'][1]} | {r['dtype']} | {r['direction']} | "
                  f"{r['pct_of_copy']:.0f} |" for r in above]
    faulted = faulted_cases(report)
    if faulted:
        lines += ["", f"Timings that include page faults (at least {FAULTED_SHARE:.0%} of the pages the case "
                  "moves, faulted in per call; see `faults_per_call` in the JSON):", "",
                  "| impl | op | shape | dtype | dir | faults per call | median µs |", "|---|---|---|---|---|---|---|"]
        lines += [f"| {r['impl']} | {r['op']} | {r['shape'][0]}×{r['shape'][1]} | {r['dtype']} | {r['direction']} | "
                  f"{r['faults_per_call']:.0f} | {r['median_us']:.0f} |" for r in faulted]
    if report.get("skipped"):
        reasons: dict[str, set[str]] = {}
        for s in report["skipped"]:
            reasons.setdefault(s["reason"], set()).add(s["impl"])
        lines += ["", "Skipped:", ""]
        lines += [f"- {', '.join(sorted(v))}: {k}" for k, v in sorted(reasons.items())]
    return "\n".join(lines) + "\n"


def plot(report: dict[str, Any], path: str) -> None:
    """GB/s against width, one line per impl, the copy floor dashed; a panel per direction."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    res = report["results"]
    ops = list(dict.fromkeys(r["op"] for r in res if r["impl"] != "copy"))  # as measured (older reports too)
    combos = [(op, dt) for op in ops for dt in DTYPES if any(r["op"] == op and r["dtype"] == dt for r in res)]
    if not combos:
        combos = [("layer_norm", "float32")]
    present = [d for d in DIRECTIONS if any(r["direction"] == d for r in res)] or list(DEFAULT_DIRECTIONS)
    fig, axes = plt.subplots(len(combos), len(present), figsize=(5.5 * len(present), 3.2 * len(combos)),
                             squeeze=False)
    colors = {impl: f"C{i}" for i, impl in enumerate(impls.IMPLS)}
    for row, (op, dt) in enumerate(combos):
        copy = sorted((r["shape"][1], r["gbps"]) for r in res if r["impl"] == "copy" and r["dtype"] == dt)
        for col, direction in enumerate(present):
            ax = axes[row][col]
            for impl in impls.IMPLS:
                pts = sorted((r["shape"][1], r["gbps"]) for r in res
                             if r["impl"] == impl and r["op"] == op and r["dtype"] == dt and r["direction"] == direction)
                if pts:
                    ax.plot(*zip(*pts, strict=True), marker="o", ms=3, label=impl, color=colors[impl])
            if copy:
                ax.plot(*zip(*copy, strict=True), "k--", label="copy (floor)")
            ax.set_xscale("log", base=2)
            ax.set_title(f"{op} {dt} {direction}", fontsize=9)
            ax.set_xlabel("width N")
            ax.set_ylabel("GB/s")
            ax.grid(alpha=0.3)
            ax.set_ylim(bottom=0)
    handles, labels = {}, []
    for ax in axes.flat:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            if lab not in handles:
                handles[lab] = h
                labels.append(lab)
    height = fig.get_size_inches()[1]
    fig.suptitle(f"jln bench on {report['device']['name']}: effective GB/s (higher is better)",
                 fontsize=10, y=1 - 0.12 / height)
    fig.legend([handles[lab] for lab in labels], labels, loc="lower center", ncol=min(len(labels), 5), fontsize=8)
    fig.tight_layout(rect=(0, 0.6 / height, 1, 1 - 0.45 / height))
    fig.savefig(path, dpi=90, bbox_inches="tight")
    plt.close(fig)
