#!/usr/bin/env bash
# One prepared benchmark for an NVIDIA GPU (or TPU) machine; installs nothing.
#
#   bench/gpu.sh OUT_DIR              # the real run, under 8 minutes
#   bench/gpu.sh OUT_DIR --dry-run    # tiny shapes, to check the script on any machine (CPU too)
#
# Uses whatever jax, flax, torch (CUDA) and triton are installed, runs jln from this checkout
# (PYTHONPATH, no pip install), and writes to OUT_DIR:
#   gpu_main.{json,md,png}   32768x4096 bfloat16: layer_norm, rms_norm, add_layer_norm,
#                            add_rms_norm; fwd and fwd+bwd; jln xla + pallas, flax, jnp,
#                            tokamax, torch CUDA, torch.compile
#   gpu_sweep.{json,md,png}  GB/s against width 256..16384 (32768 rows), float32 and bfloat16,
#                            layer_norm and rms_norm
#   gpu.md                   both summaries, plus the machine's description
# Each part has a time budget (cases past it are recorded as skipped) and a hard timeout
# (SIGTERM: the cases measured so far are still written).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
out="${1:?usage: bench/gpu.sh OUT_DIR [--dry-run]}"
dry="${2:-}"
mkdir -p "$out"
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
export XLA_PYTHON_CLIENT_PREALLOCATE=false   # torch shares the device with JAX
export TF_CPP_MIN_LOG_LEVEL=2
extra=()
if [[ "$dry" == "--dry-run" ]]; then
  extra=(--rows 64 --widths 256 --reps 2 --warmup 1 --compile-budget-s 20)
fi
start=$SECONDS
{
  echo "# jln bench on $(hostname)"
  echo
  (nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || true) | sed 's/^/GPU: /'
  python - <<'PY' 2>/dev/null || true
import jax
print("JAX devices:", jax.devices())
PY
} > "$out/gpu_env.txt"
cat "$out/gpu_env.txt"

# Part 1: the headline case (about 4 minutes budgeted).
timeout -s TERM 270 python -m jln.cli.bench \
  --rows 32768 --widths 4096 --dtypes bfloat16 \
  --ops layer_norm,rms_norm,add_layer_norm,add_rms_norm --impls all \
  --reps 30 --warmup 3 --budget-s 210 --compile-budget-s 150 \
  --title "jln bench: 32768x4096 bfloat16" \
  --json "$out/gpu_main.json" --md "$out/gpu_main.md" --plot "$out/gpu_main.png" "${extra[@]}"
echo "part 1 exit $? after $((SECONDS - start)) s"

# Part 2: the width sweep, no torch.compile (about 3 minutes budgeted).
timeout -s TERM 170 python -m jln.cli.bench \
  --rows 32768 --widths 4096,16384,1024,256 --dtypes bfloat16,float32 \
  --ops layer_norm,rms_norm --impls jln-xla,jln-pallas,flax,flax-2pass,jnp,tokamax,torch \
  --reps 20 --warmup 2 --budget-s 130 \
  --title "jln bench: width sweep, 32768 rows" \
  --json "$out/gpu_sweep.json" --md "$out/gpu_sweep.md" --plot "$out/gpu_sweep.png" "${extra[@]}"
echo "part 2 exit $? after $((SECONDS - start)) s"

{
  cat "$out/gpu_env.txt"; echo
  cat "$out/gpu_main.md" 2>/dev/null; echo
  cat "$out/gpu_sweep.md" 2>/dev/null
} > "$out/gpu.md"
echo "wrote $out/gpu.md ($((SECONDS - start)) s)"
