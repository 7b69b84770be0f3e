"""Static checkers on user code: jln's faces check clean where the code is right, and catch
its mistakes.

``typing/user_ok.py`` is a user's model over jln's functions and its linen and NNX modules,
every line correct: mypy and basedpyright must report nothing on it, and it must run.
``typing/user_bad.py`` holds one mistake a line (a typo'd keyword, a wrong type, a misspelt
convention, a wrong size, too many arguments), each marked with a trailing ``# error: ...``:
each checker must flag every marked line and no other. Both run as a user runs them, from a
folder outside the repository on the installed jln (an editable install must be visible to
them), with the settings a user has: mypy's defaults, basedpyright's "standard" mode. The
checks and the run are marked slow (``--run-slow``; CI runs them in its slow pass).
"""

from __future__ import annotations

import importlib.util
import io
import json
import shutil
import subprocess
import sys
import time
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

import pytest

HERE = Path(__file__).parent / "typing"
OK = HERE / "user_ok.py"
BAD = HERE / "user_bad.py"
FILES = (OK, BAD)
TIMEOUT = 600


@dataclass
class Report:
    """One checker's errors on the two files: ``{file name: {line: [messages]}}``."""

    checker: str
    seconds: float
    errors: dict[str, dict[int, list[str]]] = field(default_factory=dict)

    def add(self, path: str, line: int, message: str) -> None:
        name = Path(path).name if Path(path).resolve() in {f.resolve() for f in FILES} else path
        self.errors.setdefault(name, {}).setdefault(line, []).append(message)


def _marked(path: Path) -> dict[int, str]:
    """The lines of ``path`` whose comment starts with ``# error``: {line: what the mistake is}."""
    out: dict[int, str] = {}
    for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if tok.type == tokenize.COMMENT and tok.string.startswith("# error"):
            out[tok.start[0]] = tok.string.removeprefix("# error").lstrip(": ")
    return out


def _basedpyright() -> str | None:
    beside = Path(sys.executable).parent / "basedpyright"
    return str(beside) if beside.exists() else shutil.which("basedpyright")


def _run(cmd: list[str], cwd: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT, check=False)
    return proc, time.perf_counter() - start


def _mypy(cwd: Path) -> Report:
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy is not installed (it is in the dev extra: pip install -e '.[dev]')")
    cmd = [
        sys.executable, "-m", "mypy",
        "--config-file", str(HERE / "mypy.ini"),  # a user's defaults, not jln's [tool.mypy]
        "--no-incremental", "--cache-dir", str(cwd / ".mypy_cache"),
        "--python-executable", sys.executable,
        "--show-absolute-path", "--no-error-summary", "--no-pretty", "--no-color-output",
        *map(str, FILES),
    ]
    proc, seconds = _run(cmd, cwd)
    report = Report("mypy", seconds)
    for row in proc.stdout.splitlines():
        # "<path>:<line>: error: <message>  [code]"; notes belong to the error above them
        path, sep, rest = row.partition(": error: ")
        if sep:
            file, _, line = path.rpartition(":")
            if not line.isdigit():  # an error about the file as a whole
                file, line = path, "0"
            report.add(file, int(line), rest)
    if proc.returncode not in (0, 1) or (proc.returncode == 1 and not report.errors):
        pytest.fail(f"mypy did not run (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return report


def _pyright(cwd: Path) -> Report:
    exe = _basedpyright()
    if exe is None:
        pytest.skip("basedpyright is not installed (it is in the dev extra: pip install -e '.[dev]')")
    cmd = [
        exe, "--outputjson",
        "-p", str(HERE / "pyrightconfig.json"),  # typeCheckingMode "standard", as a user has
        "--pythonpath", sys.executable,
        *map(str, FILES),
    ]
    proc, seconds = _run(cmd, cwd)
    try:
        out = json.loads(proc.stdout)
    except json.JSONDecodeError:
        pytest.fail(f"basedpyright did not run (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    report = Report("basedpyright", seconds)
    for d in out.get("generalDiagnostics", []):
        if d.get("severity") == "error":
            rule = f"  [{d['rule']}]" if d.get("rule") else ""
            report.add(d["file"], d["range"]["start"]["line"] + 1, d["message"].splitlines()[0] + rule)
    return report


def _verdict(report: Report) -> tuple[str, list[str]]:
    """One checker's counts, and what is wrong with its report (nothing, where all is right)."""
    name = report.checker
    problems: list[str] = []
    ok = report.errors.get(OK.name, {})
    if ok:
        n = sum(map(len, ok.values()))
        rows = "\n".join(f"  user_ok.py:{line}: {m}" for line, ms in sorted(ok.items()) for m in ms)
        problems.append(f"{name}: {n} false errors on user_ok.py ({len(ok)} lines):\n{rows}")
    marked = _marked(BAD)
    bad = report.errors.get(BAD.name, {})
    missed = {line: what for line, what in marked.items() if line not in bad}
    if missed:
        rows = "\n".join(f"  user_bad.py:{line}: {what}" for line, what in sorted(missed.items()))
        problems.append(
            f"{name}: caught {len(marked) - len(missed)}/{len(marked)} mistakes; missed:\n{rows}"
        )
    unmarked = {line: ms for line, ms in bad.items() if line not in marked}
    if unmarked:
        rows = "\n".join(f"  user_bad.py:{line}: {m}" for line, ms in sorted(unmarked.items()) for m in ms)
        problems.append(f"{name}: {len(unmarked)} unmarked lines of user_bad.py flagged:\n{rows}")
    others = {f: lines for f, lines in report.errors.items() if f not in (OK.name, BAD.name)}
    if others:
        rows = "\n".join(f"  {f}:{line}: {m}" for f, ls in others.items() for line, ms in ls.items() for m in ms)
        problems.append(f"{name}: errors in other files:\n{rows}")
    summary = (
        f"{name} in {report.seconds:.1f} s: {sum(map(len, ok.values()))} false errors on "
        f"user_ok.py, caught {len(marked) - len(missed)}/{len(marked)} mistakes on user_bad.py"
    )
    return summary, problems


def test_user_bad_marks_its_mistakes() -> None:
    """user_bad.py's mistakes are marked, each mark saying what the mistake is."""
    marked = _marked(BAD)
    assert len(marked) >= 30, f"only {len(marked)} lines of user_bad.py are marked # error"
    assert all(marked.values()), "each # error mark says what the mistake is"


# slow: mypy takes about 8 s alone and basedpyright 2.5 s, but 28 s and 6 s inside the suite
# on 2 cores; running user_ok.py about 9 s. CI runs them in its --run-slow -m slow pass.
@pytest.mark.slow
@pytest.mark.parametrize("checker", ["mypy", "basedpyright"])
def test_checker_on_user_code(checker: str, tmp_path: Path) -> None:
    """user_ok.py checks clean, and each marked line of user_bad.py (and no other) is flagged."""
    report = (_mypy if checker == "mypy" else _pyright)(tmp_path)
    summary, problems = _verdict(report)
    print(summary)
    if problems:
        pytest.fail(summary + "\n" + "\n".join(problems), pytrace=False)


@pytest.mark.slow
def test_user_ok_runs(tmp_path: Path) -> None:
    """The correct code is correct at run time too (a run in its own process, as a user's)."""
    proc = subprocess.run([sys.executable, str(OK)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=TIMEOUT, check=False)
    assert proc.returncode == 0, f"user_ok.py failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
