#!/usr/bin/env bash
# Regenerate the committed CPU results: bench/results/cpu.{json,png,md}.
#
#   bench/run_cpu.sh [OUT_DIR]          (default: bench/results)
#
# Both frameworks run single-threaded (XLA without its Eigen pool, torch.set_num_threads(1)):
# on a small or shared machine, multi-threaded runtimes that spin-wait on each other's cores
# turn a 1 ms kernel into a 20 ms scheduler quantum, which would measure the machine, not the
# norm. torch.compile (inductor) compiles slowly on CPU; once its budget is spent the remaining
# torch.compile cases are recorded as skipped with that reason.
# Extra arguments go to `jln bench` (e.g. --quick, --ops layer_norm).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
out="${1:-bench/results}"
shift || true
mkdir -p "$out"
case "$out" in /*) ;; *) out="$(cd "$(dirname "$out")" && pwd)/$(basename "$out")" ;; esac
cd "$root"  # relative paths: the recorded command names no machine path
case "$out" in "$root"/*) out="${out#"$root"/}" ;; esac
mkdir -p "$out"
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
export JAX_PLATFORMS=cpu
export XLA_FLAGS="--xla_cpu_multi_thread_eigen=false ${XLA_FLAGS:-}"
python -m jln.cli.bench \
  --elements 1048576 --widths 256,1024,4096,16384 --dtypes float32,bfloat16 \
  --reps 11 --torch-threads 1 --compile-budget-s 240 \
  --title "jln bench: CPU (single thread per framework)" \
  --json "$out/cpu.json" --plot "$out/cpu.png" --md "$out/cpu.md" "$@"
echo "wrote $out/cpu.json $out/cpu.png $out/cpu.md"
