"""The ``jln`` console command: ``jln parity``, ``jln bench`` and ``jln build``."""

from __future__ import annotations

import difflib
import importlib
import os
import sys
from collections.abc import Iterable

_SUBCOMMANDS = {
    "parity": ("jln.cli.parity", "check jln's norms against torch, forward and backward"),
    "bench": ("jln.cli.bench", "jit-benchmark jln's norms against the alternatives and the copy floor"),
    "build": ("jln.cli.build", "compile jln's native CPU kernels now, so no later process waits for them"),
}


#: Short dtype names the console commands accept beside the full ones (``--dtypes bf16``).
DTYPE_ALIASES = {"f32": "float32", "fp32": "float32", "f64": "float64", "fp64": "float64",
                 "bf16": "bfloat16", "f16": "float16", "fp16": "float16", "half": "float16"}


def did_you_mean(given: str, valid: Iterable[str]) -> str:
    """`` Did you mean 'x'?`` for the closest of ``valid`` to an unknown ``given`` (``""`` when
    none is close), so both console commands answer a misspelt name alike.

    Example: ``did_you_mean("rms_norm_llama", ["rms_norm[llama]", "layer_norm"])`` is
    ``" Did you mean 'rms_norm[llama]'?"``.
    """
    valid = list(valid)
    # compare without the brackets and separators people spell differently (rms_norm_llama)
    def key(name: str) -> str:
        return "".join(ch for ch in name.lower() if ch.isalnum())

    keyed = {key(v): v for v in valid}
    close = difflib.get_close_matches(key(given), list(keyed), n=3, cutoff=0.6)
    if not close:
        return ""
    return " Did you mean " + " or ".join(repr(keyed[c]) for c in close) + "?"


def output_path_problem(path: str | None, flag: str) -> str | None:
    """Why ``path`` (given to ``flag``) cannot be written, checked before a long run rather than
    after it; None when it can be (or when no path was given)."""
    if not path:
        return None
    parent = os.path.dirname(os.path.abspath(path)) or "."
    if os.path.isdir(path):
        return f"{flag} {path!r} is a directory; give a file name."
    if not os.path.isdir(parent):
        return f"{flag} {path!r}: the directory {parent!r} does not exist; create it first."
    if not os.access(parent, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        return f"{flag} {path!r} is not writable here; choose another path."
    return None


def _usage() -> str:
    lines = ["usage: jln <command> [options]", "", "commands:"]
    lines += [f"  {name:<8} {help_}" for name, (_, help_) in _SUBCOMMANDS.items()]
    lines += ["", "Run `jln <command> --help` for a command's options."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``jln`` console script. Returns the process exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(_usage())
        return 0 if args else 2
    name, rest = args[0], args[1:]
    if name not in _SUBCOMMANDS:
        print(f"jln: unknown command {name!r};{did_you_mean(name, _SUBCOMMANDS)} Expected one of "
              f"{sorted(_SUBCOMMANDS)}.\n", file=sys.stderr)
        print(_usage(), file=sys.stderr)
        return 2
    module = importlib.import_module(_SUBCOMMANDS[name][0])
    return int(module.main(rest))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
