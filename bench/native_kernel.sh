#!/usr/bin/env bash
# The native CPU forward kernels alone (no JAX dispatch around them), in cache and from
# memory, one core: builds bench/native_kernel.cc with the flags jln builds its kernels with
# and prints markdown tables.
#
#   bench/native_kernel.sh [OUT.md]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
include="$(python -c 'import jax; print(jax.ffi.include_dir())')"
flags="$(python -c 'from jln.kernels import _cpu_build; print(" ".join(f for f in _cpu_build.FLAGS if f not in ("-shared", "-fPIC")))')"
exe="$(mktemp -d)/native_kernel"
# shellcheck disable=SC2086
"${CXX:-c++}" $flags -I"$include" "$here/native_kernel.cc" -o "$exe"
pin=()
if command -v taskset >/dev/null 2>&1; then
  pin=(taskset -c "$(python -c 'import os; print(min(os.sched_getaffinity(0)))')")
fi
{
  echo "# jln native CPU forward kernels alone"
  echo
  echo "CPU: $(python -c 'from jln.cli._bench import harness; print(harness.cpu_model())'), one core. Medians; copy, layer_norm and rms_norm are sampled in turns; bytes: read x, write y."
  echo
  echo "In cache (65536 elements per buffer, 300 reps):"
  echo
  "${pin[@]}" "$exe" 65536 300
  echo
  echo "x from memory, y reused (as in jln bench: 1048576 elements per buffer, 32 input buffers, 2 output buffers, 40 reps):"
  echo
  "${pin[@]}" "$exe" 1048576 40 32 2
  echo
  echo "x and y from memory (16777216 elements per buffer, 21 reps):"
  echo
  "${pin[@]}" "$exe" 16777216 21
} | if [ $# -gt 0 ]; then tee "$1"; else cat; fi
