"""Smoke test of every example script: it runs, its checks pass, its pictures appear.

Each example runs as a subprocess in a temporary working directory (pictures land there) with
the repository root on ``PYTHONPATH``. Deselect with ``-m "not examples"``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.examples

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
TIMEOUT_S = 120

#: script -> the pictures it writes to its working directory
EXPECTED = {
    "01_worked_example.py": ["01_sphere.png"],
    "02_torch_parity.py": ["02_torch_parity.png"],
    "03_ln_vs_bn.py": ["03_ln_vs_bn.png"],
    "04_pre_ln_vs_post_ln.py": ["04_pre_ln_vs_post_ln.png"],
    "05_rmsnorm_conventions.py": ["05_rmsnorm_conventions.png"],
    "06_adaptive_ln.py": ["06_adaptive_ln.png"],
    "07_mixed_precision.py": ["07_mixed_precision.png"],
    "08_debugging.py": ["08_debugging.png"],
}
NEEDS_TORCH = {
    "02_torch_parity.py", "05_rmsnorm_conventions.py", "06_adaptive_ln.py", "07_mixed_precision.py",
    "08_debugging.py",
}


def test_every_example_is_listed() -> None:
    found = sorted(p.name for p in EXAMPLES.glob("0*.py"))
    assert found == sorted(EXPECTED), f"examples on disk {found} vs listed {sorted(EXPECTED)}"


@pytest.mark.parametrize("script", sorted(EXPECTED))
@pytest.mark.slow
def test_example_runs(script: str, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    if script in NEEDS_TORCH:
        pytest.importorskip("torch")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env["MPLBACKEND"] = "Agg"
    try:
        proc = subprocess.run(
            [sys.executable, str(EXAMPLES / script)],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, check=False,
        )
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{script} ran longer than {TIMEOUT_S} s; output so far:\n{e.stdout}\n{e.stderr}")
    tail = (proc.stdout + proc.stderr)[-4000:]
    assert proc.returncode == 0, f"{script} exited with {proc.returncode}:\n{tail}"
    assert "all checks passed" in proc.stdout, f"{script} did not report its checks:\n{tail}"
    # torch.from_numpy of a read-only array (np.asarray of a jax array) warns: examples copy first
    assert "is not writable" not in proc.stderr, f"{script} handed torch a read-only array:\n{tail}"
    for png in EXPECTED[script]:
        path = tmp_path / png
        assert path.is_file() and path.stat().st_size > 1000, f"{script} did not write {png}:\n{tail}"


@pytest.mark.slow
def test_distributed_example_matches_single_device(tmp_path: Path) -> None:
    """examples/distributed_tp_dp.py sets its own 8 host devices and exits 1 if the losses differ."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.pop("XLA_FLAGS", None)
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / "distributed_tp_dp.py")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, check=False,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
