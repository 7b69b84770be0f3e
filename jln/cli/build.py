"""``jln build``: compile jln's native CPU kernels for this machine, ahead of any call.

On a CPU, ``impl="auto"`` runs jln's native kernels when they are built, and the XLA path
otherwise; no call compiles them (a build takes about a minute on 2 cores, minutes on a
loaded machine). This command does, once per jln, jaxlib and CPU, into ``$JLN_CACHE_DIR``
(default ``~/.cache/jln``): run it after ``pip install``, in a container image's build step,
in CI before the tests, or before timing anything. It builds the library (or finds it built),
loads it as ``impl="auto"`` would, and prints its path. A process that starts after it takes
the kernels without a compiler.

  jln build              build unless built, then load
  jln build --check      only say whether they are built and load (compiles nothing)
  jln build --force      rebuild even if built (e.g. with another ``$CXX``)
  jln build --jobs N     compile at most N of the library's parts at once (default: every core)

Exit status: 0 when the kernels are ready, 1 when they are not (``--check``: not built) or
cannot be built or loaded here (the reason is printed: no C++ compiler, ``JLN_NATIVE=0``, a
failed compile), 2 for a usage error.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="jln build",
        description="Compile jln's native CPU kernels for this machine now (or find them built) and print the "
        "library's path. impl='auto' takes them on a CPU once they are built; no call compiles them.",
    )
    what = p.add_mutually_exclusive_group()
    what.add_argument("--check", action="store_true",
                      help="compile nothing: exit 0 if the kernels are built and load, 1 if not")
    what.add_argument("--force", action="store_true", help="rebuild the kernels even if they are built")
    p.add_argument("--jobs", type=int, default=None, metavar="N",
                   help="compile at most N of the library's parts at once (default: every core this process may use)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``jln build``. Returns the process exit code."""
    parser = _parser()
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.jobs is not None and args.jobs < 1:
        parser.error(f"--jobs must be at least 1 (received {args.jobs}); omit it to use every core")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")  # the kernels are CPU kernels; no accelerator needed
    from jln.kernels import _cpu, _cpu_build

    start = time.perf_counter()
    if os.environ.get("JLN_NATIVE") == "0":  # as the norms would: nothing to build or load
        print(f"jln build: {_cpu.available()}", file=sys.stderr)
        return 1
    if args.check:
        if not _cpu_build.built():
            print(f"jln build --check: {_cpu_build.not_built_message()}", file=sys.stderr)
            return 1
    else:
        try:
            _cpu_build.build(force=args.force, jobs=args.jobs)
        except Exception as e:  # no compiler, a failed compile or link
            print(f"jln build: the native CPU kernels could not be built ({type(e).__name__}: {e})", file=sys.stderr)
            return 1
    reason = _cpu.available()
    if reason is not None:
        print(f"jln build: {reason}", file=sys.stderr)
        return 1
    print(f"jln build: native CPU kernels ready in {time.perf_counter() - start:.1f} s: {_cpu.library()}")
    made = _cpu_build.manifest()
    if made:
        print(f"jln build: built {made.get('built_at')} in {made.get('build_s')} s by "
              f"{made.get('compiler_version') or made.get('compiler')}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
