"""The class sweep (``bench/interop_sweep.py``) over every norm class the installed torch,
transformers and diffusers ship: no class converts to something that is not the torch module,
at least 98% of the classes it can build convert exactly, and every refusal says why. A new
release's classes are found by reading the packages' files, so they enter this test unasked."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("diffusers")

#: the floor of exactly converted classes among those the sweep can instantiate
EXACT_FLOOR = 0.98


def _sweep_module() -> Any:
    path = Path(__file__).resolve().parents[1] / "bench" / "interop_sweep.py"
    spec = importlib.util.spec_from_file_location("jln_interop_sweep", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # (its dataclasses look their module up there)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
def test_every_installed_norm_class_converts_exactly_or_is_refused_with_the_reason() -> None:
    sweep = _sweep_module()
    rows = sweep.sweep()
    by = {s: [r for r in rows if r.status == s] for s in ("exact", "wrong", "refused", "not instantiable")}
    assert len(rows) >= 350, f"the sweep found only {len(rows)} norm classes: its discovery broke"
    assert not by["wrong"], "converted, but not the torch module:\n" + "\n".join(
        f"{r.qualname}: {r.detail}" for r in by["wrong"])
    testable = len(rows) - len(by["not instantiable"])
    share = len(by["exact"]) / testable
    assert share >= EXACT_FLOOR, (
        f"{len(by['exact'])} of {testable} testable classes convert exactly ({100 * share:.1f}%); refused: "
        + ", ".join(r.qualname for r in by["refused"]))
    silent = [r.qualname for r in by["refused"] if "cannot" not in r.detail]
    assert not silent, f"refused without a reason (a converter, or a near-miss entry saying why): {silent}"
