"""``jln build``: compile jln's native CPU kernels now, so no later process waits for them.

On a CPU, ``impl="auto"`` runs jln's native kernels, which are compiled for the machine on
first use (about a minute on 2 cores) and cached (``$JLN_CACHE_DIR``, default
``~/.cache/jln``). Run this where that wait should not fall on a user's first call: in a
container image's build step, after ``pip install``, or before timing anything. It builds
the library, or finds it built, loads it as ``impl="auto"`` would, and prints its path.

Exit status: 0 when the kernels are ready, 1 when they cannot be built or loaded here (the
reason is printed: no C++ compiler, ``JLN_NATIVE=0``, a failed compile), 2 for a usage error.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence


def _parser() -> argparse.ArgumentParser:
    return argparse.ArgumentParser(
        prog="jln build",
        description="Compile jln's native CPU kernels for this machine now (or find them cached) and "
        "print the library's path, so that no later process waits for the build on its first CPU call.",
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``jln build``. Returns the process exit code."""
    _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    os.environ.setdefault("JAX_PLATFORMS", "cpu")  # the kernels are CPU kernels; no accelerator needed
    from jln.kernels import _cpu

    start = time.perf_counter()
    reason = _cpu.available()
    if reason is not None:
        print(f"jln build: {reason}", file=sys.stderr)
        return 1
    print(f"jln build: native CPU kernels ready in {time.perf_counter() - start:.1f} s: {_cpu.library()}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
