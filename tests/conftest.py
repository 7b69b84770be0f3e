"""Strict JAX for jln's tests: no implicit dtype or rank promotion may hide a bug."""

from __future__ import annotations

import warnings

import jax
import pytest

# Scripts that tests run in subprocesses. --doctest-modules would import them into the test
# session, and _distributed_checks.py sets XLA_FLAGS for 8 host devices on import: the whole
# session would then run on 8 devices (where impl="auto" keeps XLA instead of the CPU kernels).
collect_ignore = ["_distributed_checks.py"]

jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_numpy_rank_promotion", "raise")

# torch warns when F.rms_norm gets a weight of another dtype; that mix is what we test.
warnings.filterwarnings("ignore", message="Mismatch dtype between input and weight")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--run-slow", action="store_true", help="also run the long sweeps marked slow")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "examples: runs the examples/ scripts (deselect with -m 'not examples')")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--run-slow"):
        return
    skip = pytest.mark.skip(reason="long sweep: run with --run-slow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
