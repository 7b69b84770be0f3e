"""No jln call compiles: the native CPU kernels are built ahead of time (`jln build`) and only loaded.

A fresh environment (an empty ``$JLN_CACHE_DIR``) runs its first ``jln.layer_norm`` on the XLA
path without invoking a compiler; ``impl="native"`` there raises ``ValueError`` naming
``jln build``; ``jln build --check`` says whether they are built; a library ``jln build`` made
is loaded by later processes, with or without a compiler. The compilers here are stand-ins
that log every call (and, for a build, install this session's real library, built once by
tests/conftest.py): the build and load machinery is under test, not the compiler.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest

from jln.kernels import _cpu, _cpu_build

pytestmark = pytest.mark.skipif(jax.default_backend() != "cpu", reason="jln's native kernels are CPU kernels")


def _run(code: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k != "JLN_NATIVE"}  # each test says what it wants
    full.update(JAX_PLATFORMS="cpu", **env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=600, env=full)


def _cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return _run(f"import sys; from jln.cli import main; sys.exit(main({['build', *args]!r}))", **env)


def _logging_compiler(path: Path, log: Path, library: Path | None) -> str:
    """A stand-in C++ compiler that logs each call; for a build, it writes a stand-in object for
    a compile and copies ``library`` (the session's real one) for the link; without
    ``library`` it fails every call but ``--version``."""
    path.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import shutil, sys
        with open({str(log)!r}, "a") as f:
            f.write(" ".join(sys.argv[1:]) + "\\n")
        if "--version" in sys.argv:
            print("logging-c++ 1.0")
            sys.exit(0)
        if {str(library) if library else ""!r} == "":
            sys.exit("no compiling here")
        out = sys.argv[sys.argv.index("-o") + 1]
        if "-c" in sys.argv:
            open(out, "w").write("object")
        else:
            shutil.copyfile({str(library)!r}, out)
        """))
    path.chmod(0o755)
    return str(path)


def _real_library() -> Path:
    """This session's kernel library (tests/conftest.py built it): skip where there is none."""
    reason = _cpu.available()
    if reason is not None:
        pytest.skip(f"needs the session's kernel library: {reason}")
    path = _cpu.library()
    assert path is not None
    return path


# A user's first calls in a fresh environment: what path each took, their values, the
# XLA path's, and what impl="native" says; logging captured at INFO ("jln" logger).
FIRST_CALLS = """
    import json, logging, time
    records = []
    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())
    logging.getLogger("jln").addHandler(Keep())
    logging.getLogger("jln").setLevel(logging.INFO)
    import jax, jax.numpy as jnp, jln
    x = jax.random.normal(jax.random.key(0), (8, 768)) * 3 + 1
    w = jnp.linspace(0.5, 1.5, 768)
    start = time.perf_counter()
    y = jln.layer_norm(x, w).block_until_ready()
    first_s = time.perf_counter() - start
    out = {
        "first_s": first_s,
        "y": y.tolist(),
        "y_xla": jln.layer_norm(x, w, impl="xla").tolist(),
        "rms": jln.rms_norm(x, w).tolist(),
        "rms_xla": jln.rms_norm(x, w, impl="xla").tolist(),
        "x": x.tolist(), "w": w.tolist(),
        "hlo_native": "jln_cpu_norm" in jax.jit(lambda x: jln.layer_norm(x)).lower(x).as_text(),
    }
    try:
        jln.layer_norm(x, impl="native")
        out["native_error"] = None
    except ValueError as e:
        out["native_error"] = str(e)
    out["log"] = records
    print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One process's first calls with an empty cache and a compiler that logs any call."""
    tmp = tmp_path_factory.mktemp("fresh")
    cache, log = tmp / "cache", tmp / "compiler.log"
    done = _run(FIRST_CALLS, CXX=_logging_compiler(tmp / "cxx", log, None), JLN_CACHE_DIR=str(cache))
    assert done.returncode == 0, done.stderr[-4000:]
    return {**json.loads(done.stdout), "cache": cache, "compiler_log": log, "stderr": done.stderr}


def test_first_call_compiles_nothing(fresh: dict[str, Any]) -> None:
    # no compiler call at all (not even --version), and no library or build files appear
    assert not fresh["compiler_log"].exists(), fresh["compiler_log"].read_text()
    cache: Path = fresh["cache"]
    assert not cache.exists() or not [p for p in cache.rglob("*") if p.is_file()], list(cache.rglob("*"))
    assert not fresh["hlo_native"]


def test_first_call_is_the_xla_path(fresh: dict[str, Any]) -> None:
    # the same numbers as impl="xla" (the same computation, so bit for bit), and those are a
    # LayerNorm / RMSNorm: float64 numpy as the independent reference
    np.testing.assert_array_equal(fresh["y"], fresh["y_xla"])
    np.testing.assert_array_equal(fresh["rms"], fresh["rms_xla"])
    x, w = np.asarray(fresh["x"], np.float64), np.asarray(fresh["w"], np.float64)
    ln = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * w
    rms = x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * w
    np.testing.assert_allclose(fresh["y"], ln, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(fresh["rms"], rms, rtol=1e-5, atol=1e-5)


def test_first_call_is_silent_but_logs_once_at_info(fresh: dict[str, Any]) -> None:
    # nothing on stderr at the default log level; one INFO record that names `jln build`
    assert "jln:" not in fresh["stderr"], fresh["stderr"]
    said = [r for r in fresh["log"] if "jln build" in r]
    assert len(said) == 1 and len(fresh["log"]) == 1, fresh["log"]


def test_native_unbuilt_names_jln_build(fresh: dict[str, Any]) -> None:
    err = fresh["native_error"]
    assert err is not None and "impl='native' is not available here" in err, err
    assert "not built" in err and "`jln build`" in err and _cpu_build.library_path().name in err, err


def test_session_built_the_kernels() -> None:
    # tests/conftest.py builds the kernels for the session: where a compiler exists, a failed
    # build fails here (rather than skipping test_native.py in silence)
    if os.environ.get("JLN_NATIVE") == "0" or _cpu_build.compiler() is None:
        pytest.skip("no C++ compiler here, or JLN_NATIVE=0: the session builds no kernels")
    assert _cpu.available() is None
    assert _cpu.library() == _cpu_build.library_path() and _cpu_build.built()


@pytest.mark.slow  # three `jln build --check` subprocesses
def test_check_exit_codes(tmp_path: Path) -> None:
    cache, log = tmp_path / "cache", tmp_path / "compiler.log"
    cxx = _logging_compiler(tmp_path / "cxx", log, None)
    unbuilt = _cli("--check", CXX=cxx, JLN_CACHE_DIR=str(cache))
    assert unbuilt.returncode == 1 and "`jln build`" in unbuilt.stderr and not unbuilt.stdout, unbuilt
    assert not log.exists() and not cache.exists()  # compiled nothing, wrote nothing
    # a library in the cache under this key (as `jln build` leaves it): built, and it loads
    real = _real_library()
    cache.mkdir()
    shutil.copyfile(real, cache / real.name)
    built = _cli("--check", CXX=cxx, JLN_CACHE_DIR=str(cache))
    assert built.returncode == 0 and str(cache / real.name) in built.stdout, (built.stdout, built.stderr)
    assert not log.exists()
    off = _cli("--check", JLN_NATIVE="0", JLN_CACHE_DIR=str(cache))
    assert off.returncode == 1 and "JLN_NATIVE=0" in off.stderr, off
    usage = _cli("--jobs", "0", JLN_CACHE_DIR=str(cache))
    assert usage.returncode == 2 and "--jobs must be at least 1" in usage.stderr, usage


# After `jln build`: a process without a compiler takes the kernels (impl="auto"), and with
# JLN_NATIVE=0 does not; the values agree with the XLA path's.
AFTER_BUILD = """
    import jax, jax.numpy as jnp, numpy as np, jln
    from jln.kernels import _cpu
    x = jax.random.normal(jax.random.key(1), (64, 256)) * 3 + 1
    print("HLO", "jln_cpu_norm" in jax.jit(lambda x: jln.layer_norm(x)).lower(x).as_text())
    err = float(jnp.max(jnp.abs(jln.layer_norm(x) - jln.layer_norm(x, impl="xla"))))
    print("CLOSE", err < 1e-5, err)
    print("LIBRARY", _cpu.library())
    try:
        jln.layer_norm(x, impl="native")
        print("NATIVE ok")
    except ValueError as e:
        print("NATIVE", e)
"""


@pytest.mark.slow
def test_build_then_load(tmp_path: Path) -> None:
    real = _real_library()
    cache, log = tmp_path / "cache", tmp_path / "compiler.log"
    env = dict(CXX=_logging_compiler(tmp_path / "cxx", log, real), JLN_CACHE_DIR=str(cache))
    made = _cli("--jobs", "1", **env)
    assert made.returncode == 0, made.stderr
    assert f"{len(_cpu_build.PARTS)} parts, 1 at a time" in made.stderr, made.stderr
    lib = cache / _cpu_build.library_path().name
    assert lib.is_file() and str(lib) in made.stdout and "by logging-c++ 1.0" in made.stdout, made.stdout
    compiles = log.read_text().splitlines()
    # the same key in another process with no compiler at all: loaded, not rebuilt
    no_cxx = dict(CXX=str(tmp_path / "no-such-compiler"), JLN_CACHE_DIR=str(cache))
    done = _run(AFTER_BUILD, **no_cxx)
    assert done.returncode == 0, done.stderr
    assert "HLO True" in done.stdout and "CLOSE True" in done.stdout and f"LIBRARY {lib}" in done.stdout, done.stdout
    assert "NATIVE ok" in done.stdout and "jln:" not in done.stderr, (done.stdout, done.stderr)
    assert log.read_text().splitlines() == compiles
    again = _cli(**no_cxx)  # built: `jln build` without a compiler just loads it
    assert again.returncode == 0 and str(lib) in again.stdout, again.stderr
    # JLN_NATIVE=0 is respected with the kernels built: XLA path, and impl="native" says why
    off = _run(AFTER_BUILD, JLN_NATIVE="0", **no_cxx)
    assert off.returncode == 0, off.stderr
    assert "HLO False" in off.stdout and "LIBRARY None" in off.stdout and "JLN_NATIVE=0" in off.stdout, off.stdout
    # --force rebuilds in place
    forced = _cli("--force", **env)
    assert forced.returncode == 0 and str(lib) in forced.stdout, forced.stderr
    assert sum("-shared" in c.split() for c in log.read_text().splitlines()) == 2


# A process that found the kernels unbuilt takes them once it has built them itself.
BUILT_LATER = """
    import jax, jax.numpy as jnp, jln
    from jln.kernels import _cpu, _cpu_build
    x = jnp.ones((4, 8))
    print("BEFORE", "jln_cpu_norm" in jax.jit(lambda x: jln.layer_norm(x)).lower(x).as_text())
    _cpu_build.build()
    print("AFTER", "jln_cpu_norm" in jax.jit(lambda x: jln.rms_norm(x)).lower(x).as_text(), _cpu.available())
"""


@pytest.mark.slow  # a subprocess with a stand-in compiler
def test_unbuilt_is_not_final(tmp_path: Path) -> None:
    real = _real_library()
    cache, log = tmp_path / "cache", tmp_path / "compiler.log"
    done = _run(BUILT_LATER, CXX=_logging_compiler(tmp_path / "cxx", log, real), JLN_CACHE_DIR=str(cache))
    assert done.returncode == 0, done.stderr
    assert "BEFORE False" in done.stdout and "AFTER True None" in done.stdout, done.stdout
