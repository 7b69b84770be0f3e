"""Strict JAX for jln's tests: no implicit dtype or rank promotion may hide a bug."""

from __future__ import annotations

import os
import warnings

import jax
import pytest

# Scripts that tests run in subprocesses. --doctest-modules would import them into the test
# session, and _distributed_checks.py sets XLA_FLAGS for 8 host devices on import: the whole
# session would then run on 8 devices (where impl="auto" keeps XLA instead of the CPU kernels).
# typing/ holds the user code that test_typing.py type-checks (and runs, user_ok.py alone).
collect_ignore = ["_distributed_checks.py", "typing"]

jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_numpy_rank_promotion", "raise")

# torch warns when F.rms_norm gets a weight of another dtype; that mix is what we test.
warnings.filterwarnings("ignore", message="Mismatch dtype between input and weight")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-slow", action="store_true", help="also run the long sweeps marked slow")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "examples: runs the examples/ scripts (deselect with -m 'not examples')")
    if not hasattr(config, "workerinput"):  # the controller: xdist's workers start after it, find them built
        _NATIVE.append(_build_native_kernels())


_NATIVE: list[str] = []  # what the session's build of the native CPU kernels came to


def _build_native_kernels() -> str:
    """Build jln's native CPU kernels once per session (as `jln build` does; no jln call compiles
    them), so the tests exercise them wherever they can be built; say what came of it."""
    import os
    import time

    if os.environ.get("JLN_NATIVE") == "0" or jax.default_backend() != "cpu":
        return "not built (JLN_NATIVE=0 or not a CPU backend)"
    from jln.kernels import _cpu_build

    start = time.perf_counter()
    try:
        path = _cpu_build.build()
    except Exception as e:  # test_native_build's test_session_built_the_kernels fails with it
        return f"not built: {type(e).__name__}: {e}"
    return f"{path.name} ({time.perf_counter() - start:.1f} s)"


def pytest_report_header(config: pytest.Config) -> str | None:
    return f"jln native CPU kernels: {_NATIVE[0]}" if _NATIVE else None


#: the impl values that force jln's native CPU kernels
NATIVE_IMPLS = ("native", "jln-native")
#: JLN_NATIVE=0 turns the native kernels off: the XLA path is what runs, and what the suite checks
NATIVE_OFF = os.environ.get("JLN_NATIVE") == "0"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if NATIVE_OFF:
        off = pytest.mark.skip(reason="JLN_NATIVE=0: the native kernels are off (impl='native' refuses)")
        for item in items:
            if getattr(item, "callspec", None) is not None and item.callspec.params.get("impl") in NATIVE_IMPLS:
                item.add_marker(off)
    if config.getoption("--run-slow"):
        return
    skip = pytest.mark.skip(reason="long sweep: run with --run-slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
