"""The native CPU kernels' build: compiled ahead of time by ``jln build``, loaded, never compiled, by a call.

``cpu_norm.cc`` and ``cpu_gated.cc`` (:data:`SOURCES`) are compiled with the system C++ compiler (``$CXX``, else ``c++``/``g++``/
``clang++``) against the FFI headers of the installed jaxlib, for this CPU (``-march=native``),
into ``$JLN_CACHE_DIR`` (default ``~/.cache/jln``) as ``jln_cpu_norm-<key>.so`` beside a small
manifest (``.json``: compiler, flags, jaxlib, build time). The key covers what the machine code
depends on that can change under an installed jln: the sources, :data:`FLAGS`, :data:`PARTS`,
the jaxlib version, and the CPU. Not the compiler: a process must find the library without
one (a container image built with a compiler, run without it), and two compilers build the
same contract; ``jln build --force`` rebuilds with another one.

Only :func:`build` compiles (``jln build``, or a test session's setup): about a minute on 2
cores, minutes on a loaded machine, far too long for a user's first ``jln.layer_norm``. The
norms' ``impl="auto"`` takes the kernels only when :func:`load` finds them built, and runs the
XLA path otherwise. A build is in parts (:data:`PARTS`: the handlers, and one (x dtype,
y dtype) pair's kernels each) compiled side by side and linked into one library; processes
that build the same library at once wait for one build (a file lock).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import ctypes
import datetime
import functools
import hashlib
import json
import logging
import os
import platform
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SOURCE = Path(__file__).with_name("cpu_norm.cc")
#: Every file the library is built from: the two kernel sources and the header they share.
SOURCES = (SOURCE, SOURCE.with_name("cpu_gated.cc"), SOURCE.with_name("cpu_simd.h"))
# -ffp-contract=off: a * b + c rounds twice, as in the XLA body (no compiler-chosen FMAs)
FLAGS = ("-O3", "-march=native", "-std=c++17", "-ffp-contract=off", "-fno-math-errno", "-fPIC", "-w")
#: The library's translation units (see JLN_SPLIT in cpu_norm.cc), roughly the longest builds
#: first: cpu_norm.cc once per (x dtype, y dtype) pair (0 float32, 1 bfloat16, 2 float16), then
#: its handlers, then cpu_gated.cc (gated RMSNorm, whole). One core, g++ 12: 4-13 s each,
#: bfloat16 to bfloat16 the longest; 85 s in all against 83 s for one unit, so 46 s on 2 cores
#: and about 13 s on 9 or more. Each part: its source's name, then its flags.
PARTS = (*(("cpu_norm.cc", f"-DJLN_KX={kx}", f"-DJLN_KY={ky}") for kx in (1, 2, 0) for ky in (1, 2, 0)),
         ("cpu_norm.cc", "-DJLN_MAIN"), ("cpu_gated.cc",))
#: A cached library no process has loaded for this long is deleted when another one is built
#: (each source, jaxlib or CPU change builds a new one, about 5 MB).
PRUNE_AFTER_S = 30 * 24 * 3600

_LOG = logging.getLogger("jln")
_PREFIX = "jln_cpu_norm-"


class NotBuiltError(RuntimeError):
    """The kernel library for this source, jaxlib and CPU is not in the cache: ``jln build`` makes it."""


def cache_dir() -> Path:
    """``$JLN_CACHE_DIR``, else ``$XDG_CACHE_HOME/jln``, else ``~/.cache/jln``."""
    if os.environ.get("JLN_CACHE_DIR"):
        return Path(os.environ["JLN_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "jln"


def compiler() -> str | None:
    """The C++ compiler a build uses: ``$CXX``, else the first of ``c++``, ``g++``, ``clang++``."""
    if os.environ.get("CXX"):
        return shutil.which(os.environ["CXX"]) or os.environ["CXX"]
    for name in ("c++", "g++", "clang++"):
        found = shutil.which(name)
        if found:
            return found
    return None


def _cpu_signature() -> str:
    """What ``-march=native`` depends on: the CPU's feature flags (Linux) or its name."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return line
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _jaxlib_version() -> str:
    import jaxlib

    return str(jaxlib.__version__)


@functools.cache
def key() -> str:
    """The library's cache key: source, flags, parts, jaxlib version, architecture and CPU
    features (the same in every process of one environment on one machine)."""
    parts = [*(s.read_text() for s in SOURCES), " ".join(FLAGS), repr(PARTS), _jaxlib_version(), platform.machine(),
             _cpu_signature()]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def library_path() -> Path:
    """Where the kernel library for this source, jaxlib and CPU is (or would be) cached."""
    return _library(key())


def built() -> bool:
    """Whether :func:`library_path` holds a library (nothing is compiled or loaded)."""
    return library_path().is_file()


def manifest() -> dict[str, Any] | None:
    """The built library's manifest (compiler, flags, jaxlib, when and how long it was built),
    ``None`` when it is not built or has none."""
    try:
        data = json.loads(_manifest(library_path()).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def not_built_message(path: Path | None = None) -> str:
    """Why the kernels cannot load without a build, and how to build them."""
    path = path or library_path()
    return (f"the native CPU kernels are not built for this jln, jaxlib and CPU (no {path.name} in {path.parent}); "
            "run `jln build` once to compile them (about a minute)")


def load() -> ctypes.CDLL:
    """Load the built library (never compiling it) and mark it used (see :data:`PRUNE_AFTER_S`).

    Raises:
        NotBuiltError: it is not built (:func:`not_built_message` says how to build it).
        OSError: the dynamic loader refused it (``jln build --force`` rebuilds it).
    """
    path = library_path()
    if not _touch(path):
        raise NotBuiltError(not_built_message(path))
    return ctypes.CDLL(str(path))


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


@contextlib.contextmanager
def _build_lock(path: Path) -> Iterator[None]:
    """Holds an exclusive lock on ``path`` (POSIX; elsewhere no lock: concurrent builders then
    build side by side, each into its own temp files); says so when another process holds it."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held: another process is building this library
            _LOG.warning("jln: waiting for another process that is building jln's native CPU kernels (%s)", path.stem)
            fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _compile(cxx: str, include: str, tmpdir: str, workers: int) -> list[str]:
    """Compile :data:`PARTS` side by side (``workers`` at once); return the object files, in
    :data:`PARTS` order."""
    objs = [os.path.join(tmpdir, f"part{k}.o") for k in range(len(PARTS))]

    def one(k: int) -> subprocess.CompletedProcess[str]:
        source, *defines = PARTS[k]
        cmd = [cxx, *FLAGS, "-DJLN_SPLIT", *defines, f"-I{include}", "-c", str(SOURCE.with_name(source)), "-o", objs[k]]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=900)

    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        done = list(pool.map(one, range(len(PARTS))))
    for k, d in enumerate(done):
        if d.returncode != 0:
            raise RuntimeError(f"compiling {PARTS[k][0]} ({' '.join(PARTS[k][1:])}) failed: {d.stderr.strip()[-2000:]}")
    return objs


def build(force: bool = False, jobs: int | None = None) -> Path:
    """Compile :data:`SOURCES` into :func:`library_path` unless it is built there already, and
    return that path. The only function in jln that compiles.

    Args:
        force: compile even when the library is built (e.g. with another ``$CXX``); processes
            that loaded the old one keep it.
        jobs: how many of :data:`PARTS` compile at once (default: the cores this process may
            use, at most ``len(PARTS)``).

    Returns:
        The library's path.

    Raises:
        RuntimeError: no C++ compiler, or the compiler or linker failed (its message, and the
            part it failed in).
        ValueError: ``jobs`` below 1.
    """
    if jobs is not None and jobs < 1:
        raise ValueError(f"jobs must be at least 1 (received {jobs}); omit it to use every core this process may use")
    out = library_path()
    if not force and _touch(out):
        return out
    cxx = compiler()
    if cxx is None:
        raise RuntimeError("no C++ compiler found (set $CXX, or install g++ or clang++)")
    import jax

    include = jax.ffi.include_dir()
    out.parent.mkdir(parents=True, exist_ok=True)
    with _build_lock(_lock(out)):
        if not force and _touch(out):  # built by another process while this one waited
            return out
        workers = max(1, min(len(PARTS), jobs or _cores()))
        _LOG.warning(
            "jln: compiling its native CPU kernels for this machine (%d parts, %d at a time; about a minute "
            "on 2 cores) into %s", len(PARTS), workers, out.parent)
        start = time.perf_counter()
        tmpdir = tempfile.mkdtemp(prefix=".build-", dir=out.parent)
        try:
            objs = _compile(cxx, include, tmpdir, workers)
            lib = os.path.join(tmpdir, out.name)
            done = subprocess.run([cxx, "-shared", "-fPIC", *objs, "-o", lib], capture_output=True, text=True,
                                  timeout=300)
            if done.returncode != 0:
                raise RuntimeError(f"linking {SOURCE.name} failed: {done.stderr.strip()[-2000:]}")
            seconds = time.perf_counter() - start
            info = _describe(cxx, workers, seconds)
            note = os.path.join(tmpdir, _manifest(out).name)
            Path(note).write_text(json.dumps(info, indent=1) + "\n")
            os.replace(lib, out)  # atomic: a reader sees no library or the whole one
            os.replace(note, _manifest(out))
        finally:
            shutil.rmtree(tmpdir, ignore_errors=True)
        _LOG.warning("jln: native CPU kernels built in %.0f s: %s", seconds, out.name)
    _prune(out)
    return out


def _describe(cxx: str, jobs: int, seconds: float) -> dict[str, Any]:
    """The manifest of a build: what made it (the key's inputs, readable) and when."""
    version = subprocess.run([cxx, "--version"], capture_output=True, text=True, timeout=60).stdout
    return {
        "key": key(), "compiler": cxx, "compiler_version": (version.strip().splitlines() or [""])[0],
        "flags": list(FLAGS), "jaxlib": _jaxlib_version(), "machine": platform.machine(),
        "source_sha256": hashlib.sha256(b"".join(s.read_bytes() for s in SOURCES)).hexdigest(),
        "built_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "build_s": round(seconds, 1), "jobs": jobs,
    }


def _library(k: str) -> Path:
    return cache_dir() / f"{_PREFIX}{k}.so"


def _manifest(lib: Path) -> Path:
    return lib.with_suffix(".json")


def _lock(lib: Path) -> Path:
    return lib.parent / ".locks" / f"{lib.stem.removeprefix(_PREFIX)}.lock"


def _touch(lib: Path) -> bool:
    """Whether ``lib`` exists; if it does, its modification time becomes now (its last use)."""
    try:
        os.utime(lib)
    except FileNotFoundError:
        return False
    except OSError:  # a read-only cache: the library is there, its age stays
        return lib.exists()
    return True


def _prune(keep: Path) -> None:
    """Delete the cache's other libraries (with their manifests and lock files) unused for
    :data:`PRUNE_AFTER_S`."""
    now = time.time()
    for old in keep.parent.glob(f"{_PREFIX}*.so"):
        try:
            if old != keep and now - old.stat().st_mtime > PRUNE_AFTER_S:
                old.unlink()
                _manifest(old).unlink(missing_ok=True)
                _lock(old).unlink(missing_ok=True)
        except OSError:  # another user's file, or pruned by another process meanwhile
            pass
