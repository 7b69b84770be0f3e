#!/usr/bin/env bash
# Regenerate the committed CPU results: bench/results/cpu.{json,png,md}.
#
#   bench/run_cpu.sh [OUT_DIR]          (default: bench/results)
#
# Everything runs on one core: the process is pinned with taskset (when present), torch gets
# one thread, and XLA sizes its intra-op pool (which jln's native kernels share) from the
# pinned affinity. XLA_FLAGS' --xla_cpu_multi_thread_eigen=false alone is not enough: XLA:CPU
# still runs its loop fusions on its intra-op pool (measured on 2 cores: XLA's float32 RMSNorm
# forward took 409 us unpinned, 602 us pinned), where torch with one thread would not. On a
# small or shared machine, runtimes that spin-wait on each other's cores would also measure
# the machine, not the norm. torch.compile (inductor) compiles slowly on CPU; once its budget
# is spent the remaining torch.compile cases are recorded as skipped with that reason.
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
pin=()
if command -v taskset >/dev/null 2>&1; then
  pin=(taskset -c "$(python -c 'import os; print(min(os.sched_getaffinity(0)))')")
fi
"${pin[@]}" python -m jln.cli.bench \
  --elements 1048576 --widths 256,1024,4096,16384 --dtypes float32,bfloat16,float16 \
  --reps 21 --torch-threads 1 --compile-budget-s 240 \
  --title "jln bench: CPU (one core, pinned)" \
  --json "$out/cpu.json" --plot "$out/cpu.png" --md "$out/cpu.md" "$@"
echo "wrote $out/cpu.json $out/cpu.png $out/cpu.md"
