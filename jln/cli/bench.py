"""``jln bench``: jit-benchmark jln's norms against flax, jnp, tokamax, torch and the copy floor.

The machinery (data, timing, byte counts, residual sizes, the report) lives in
``jln.cli._bench.harness``; the implementations compared live in ``jln.cli._bench.impls``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import signal
import sys
import time
from collections.abc import Sequence
from typing import Any

from jln.cli import DTYPE_ALIASES, did_you_mean, output_path_problem
from jln.cli._bench import harness as _bench
from jln.cli._bench import impls as _bench_impls

#: ``--quick``: a CPU-friendly subset (well under 2 minutes on 2 cores). torch runs one thread
#: (as the committed CPU results do), and implementations that skip every case on the current
#: backend (jln-pallas off a GPU or TPU) are left out (:func:`config_from_args`).
QUICK = dict(
    ops=("layer_norm", "rms_norm[torch]", "add_layer_norm"),
    impls=("jln", "jln-xla", "jln-pallas", "flax", "flax-2pass", "jnp", "tokamax", "torch"),
    widths=(1024, 4096),
    elements=1 << 19,
    reps=7,
    warmup=1,
    min_sample_s=1e-3,
    torch_threads=1,
)


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse would sys.exit(2); main returns 2 instead
        raise UsageError(message)


def _choices(kind: str, allowed: Sequence[str], aliases: dict[str, str] | None = None,
             groups: dict[str, str] | None = None) -> Any:
    """A parser of a comma list from ``allowed`` (or ``all``); ``aliases`` rename items, and a
    value of ``groups`` (a family name such as ``rms_norm``) selects every item it maps from."""

    def parse(text: str) -> tuple[str, ...]:
        items = [(aliases or {}).get(t.strip(), t.strip()) for t in text.split(",") if t.strip()]
        if items == ["all"]:
            return tuple(allowed)
        out: list[str] = []
        for t in items:
            # an item's own name selects it alone; a family name every item of that family
            hit = [a for a in allowed if a == t] or [a for a in allowed if (groups or {}).get(a) == t]
            if not hit:
                raise argparse.ArgumentTypeError(
                    f"unknown {kind} {t!r};{did_you_mean(t, allowed)} Expected a comma-separated list "
                    f"from {list(allowed)} (or 'all')"
                )
            out += [a for a in hit if a not in out]
        if not out:
            raise argparse.ArgumentTypeError(f"{text!r} names no {kind}; expected a comma-separated list from "
                                             f"{list(allowed)} (or 'all')")
        return tuple(out)

    return parse


def _ints(text: str) -> tuple[int, ...]:
    try:
        vals = tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers, e.g. 256,4096; received {text!r}") from None
    if not vals or any(v <= 0 for v in vals):
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers; received {text!r}")
    return vals


def _positive_int(text: str) -> int:
    return _one_int(text, 1)


def _count(text: str) -> int:
    return _one_int(text, 0)


def _one_int(text: str, least: int) -> int:
    what = "one positive integer, e.g. 3" if least > 0 else "one integer >= 0, e.g. 0 or 2"
    try:
        value = int(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}; received {text!r}") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"expected {what}; received {text!r}")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, e.g. 60; received {text!r}")
    return value


def _parser() -> _Parser:
    p = _Parser(
        prog="jln bench",
        description=(
            "Jit-benchmark jln's norms (impl auto, xla, native and pallas) against flax.linen (default and "
            "two-pass variance), a plain jnp version, tokamax, torch eager and torch.compile, and "
            "an elementwise copy of the same bytes (the memory floor). Reports median time, "
            "effective GB/s, % of copy bandwidth, compile time and the bytes per element reverse "
            "mode saves for the backward pass."
        ),
    )
    p.add_argument("--quick", action="store_true", help="a CPU-friendly subset (< 2 minutes on 2 cores; torch "
                   "on 1 thread unless --torch-threads; without the impls this backend always skips)")
    p.add_argument("--ops", type=_choices("op", _bench_impls.OPS, groups=_bench_impls.FAMILIES),
                   help=f"comma list from {','.join(_bench_impls.OPS)} (as `jln parity --list` spells them; "
                   "a family name such as rms_norm selects all its conventions; default "
                   f"{','.join(_bench_impls.DEFAULT_OPS)})")
    p.add_argument("--impls", type=_choices("impl", _bench_impls.IMPLS), help=f"comma list from {','.join(_bench_impls.IMPLS)}")
    p.add_argument("--dtypes", type=_choices("dtype", _bench.DTYPES, DTYPE_ALIASES),
                   help="comma list from float32,bfloat16,float16 (aliases f32,bf16,f16; default float32,bfloat16)")
    p.add_argument("--directions", type=_choices("direction", _bench.DIRECTIONS), help="comma list from fwd,fwd+bwd,bwd (default fwd,fwd+bwd; bwd times the reverse pass alone)")
    p.add_argument("--widths", type=_ints, help="comma list of row widths N (default 256,1024,4096,16384)")
    p.add_argument("--rows", type=_positive_int, help="rows M for every width (default: about 4M elements / width)")
    p.add_argument("--elements", type=_positive_int, help="M·N per buffer when --rows is not given")
    p.add_argument("--reps", type=_positive_int, help="timed samples per case (median reported)")
    p.add_argument("--warmup", type=_count, help="untimed warm-up calls per case (0 allowed: then only the one "
                   "untimed call that sizes a sample runs first)")
    p.add_argument("--budget-s", type=_seconds, help="stop timing new cases after this many seconds (they are recorded as skipped)")
    p.add_argument("--compile-budget-s", type=_seconds, help="total seconds torch.compile may spend (default 120)")
    p.add_argument("--torch-threads", type=_positive_int, help="torch.set_num_threads for the torch cases")
    p.add_argument("--json", metavar="PATH", help="write the full report as JSON")
    p.add_argument("--plot", metavar="PNG", help="plot GB/s against width per impl (matplotlib)")
    p.add_argument("--md", metavar="PATH", help="write a markdown summary table")
    p.add_argument("--from-json", metavar="PATH", help="run nothing: re-render --md/--plot from a saved "
                   "`jln bench --json` report (not with --json)")
    p.add_argument("--title", help="heading of the markdown summary (default: 'jln bench')")
    p.add_argument("--headline", type=_choices("impl", _bench_impls.IMPLS),
                   help="impls whose time the markdown compares with the others, a table each (default jln)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


class Progress:
    """A one-line progress bar on stderr (a line per 10% when stderr is not a terminal)."""

    def __init__(self, total: int, stream: Any = None, width: int = 24):
        self.total, self.n, self.width = max(total, 1), 0, width
        self.stream = stream or sys.stderr
        self.tty = getattr(self.stream, "isatty", lambda: False)()
        self.start = time.perf_counter()
        self.last_decile = -1

    def __call__(self, label: str) -> None:
        self.n += 1
        frac = min(self.n / self.total, 1.0)
        elapsed = time.perf_counter() - self.start
        bar = "#" * int(frac * self.width) + "." * (self.width - int(frac * self.width))
        text = f"[{bar}] {self.n}/{self.total} {elapsed:5.0f}s {label}"
        if self.tty:
            self.stream.write("\r\x1b[K" + text[:120])
            self.stream.flush()
        elif int(frac * 10) > self.last_decile:
            self.last_decile = int(frac * 10)
            self.stream.write(text + "\n")
            self.stream.flush()

    def close(self) -> None:
        if self.tty:
            self.stream.write("\r\x1b[K")
        self.stream.write(f"jln bench: {self.n} steps in {time.perf_counter() - self.start:.0f} s\n")
        self.stream.flush()


def _sigterm_interrupts() -> Any:
    """Make SIGTERM (e.g. from ``timeout``) stop the sweep like Ctrl-C, so partial results are
    still written. Returns the previous handler, or None off the main thread."""

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    try:
        return signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        return None


def config_from_args(args: argparse.Namespace) -> _bench.Config:
    base: dict[str, Any] = dict(QUICK) if args.quick else {}
    for name in ("ops", "impls", "dtypes", "directions", "widths", "rows", "elements", "reps", "warmup",
                 "budget_s", "compile_budget_s", "torch_threads"):
        value = getattr(args, name)
        if value is not None:
            base[name] = value
    if args.quick and args.impls is None:
        base["impls"] = tuple(i for i in base["impls"] if _bench_impls.backend_skip(i) is None)
    return _bench.Config(**base)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``jln bench``; returns the exit code (2 for a usage error)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except UsageError as e:
        print(f"jln bench: error: {e}\n", file=sys.stderr)
        parser.print_usage(sys.stderr)
        return 2
    except SystemExit as e:  # --help
        return int(e.code or 0)
    for path, flag in ((args.json, "--json"), (args.md, "--md"), (args.plot, "--plot")):
        problem = output_path_problem(path, flag)
        if problem:
            print(f"jln bench: error: {problem}", file=sys.stderr)
            return 2
    if args.from_json:
        if args.json:
            print("jln bench: error: --from-json re-renders a saved report and runs nothing, so there is no "
                  f"new report for --json {args.json!r}; drop --json (the saved report is {args.from_json!r}).",
                  file=sys.stderr)
            return 2
        try:
            with open(args.from_json) as f:
                report = json.load(f)
        except (OSError, ValueError) as e:
            print(f"jln bench: error: cannot read --from-json {args.from_json!r}: {e}", file=sys.stderr)
            return 2
        problem = _bench.report_problem(report)
        if problem:
            print(f"jln bench: error: --from-json {args.from_json!r} is not a `jln bench --json` report: {problem}. "
                  "Give a file written by `jln bench --json PATH` (a `jln parity --json` file will not do).",
                  file=sys.stderr)
            return 2
        _write(report, args, report.get("command"))
        return 0
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            print("jln bench: error: --plot needs matplotlib (pip install matplotlib).", file=sys.stderr)
            return 2
    cfg = config_from_args(args)
    progress = None if args.quiet else Progress(_bench.count_cases(cfg))
    previous = _sigterm_interrupts()
    try:
        report = _bench.run(cfg, progress)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    if report["interrupted"]:
        print("jln bench: interrupted; writing the cases measured so far", file=sys.stderr)
    if progress is not None:
        progress.close()
    command = recorded_command(argv)
    report["command"] = command
    report["title"] = args.title or "jln bench"
    _write(report, args, command)
    return 0


def recorded_command(argv: Sequence[str]) -> str:
    """The command line a report records: ``argv`` with every absolute path cut to its file name.

    An absolute path names the machine that ran the benchmark, not the benchmark (the report's
    files are written side by side); relative paths stay as given.

    Example: ``recorded_command(["--quick", "--json", "/data/run1/cpu.json"])`` is
    ``"jln bench --quick --json cpu.json"``.
    """
    out = []
    for a in argv:
        flag, eq, value = a.partition("=") if a.startswith("--") else ("", "", a)
        if os.path.isabs(value):
            value = os.path.basename(value)
        out.append(flag + eq + value)
    return "jln bench " + shlex.join(out)


def _write(report: dict[str, Any], args: argparse.Namespace, command: str | None) -> None:
    """Write the files asked for, and always print the summary tables to stdout (followed by the
    files written, if any)."""
    text = _bench.markdown(report, title=_title(report, args), command=command, headline=_headline(args))
    written = []
    if args.json and not args.from_json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
            f.write("\n")
        written.append(args.json)
    if args.md:
        with open(args.md, "w") as f:
            f.write(text)
        written.append(args.md)
    if args.plot:
        _bench.plot(report, args.plot)
        written.append(args.plot)
    print(text)
    if written:
        print("jln bench: wrote " + ", ".join(written))


def _headline(args: argparse.Namespace) -> tuple[str, ...]:
    return tuple(args.headline or ("jln",))


def _title(report: dict[str, Any], args: argparse.Namespace) -> str:
    return str(args.title or report.get("title") or "jln bench")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
