#!/usr/bin/env bash
# One prepared run for an NVIDIA GPU (or TPU) machine; installs nothing.
#
#   bench/gpu.sh OUT_DIR                          # every part, under 8 minutes
#   bench/gpu.sh OUT_DIR --parts check,tune,main  # some parts
#   bench/gpu.sh OUT_DIR --dry-run                # tiny shapes, to check the script anywhere (CPU too)
#
# Uses whatever jax, flax, torch (CUDA) and triton are installed, runs jln from this checkout
# (PYTHONPATH, no pip install), and writes to OUT_DIR (at most 8 files, none in subfolders):
#   env.txt      the machine: GPU, driver, jax devices and versions
#   check.txt    jln parity --impl pallas: the Pallas kernels against float64 torch, forward
#                and backward, every op and RMSNorm convention, float32/bfloat16/float16;
#                then bench/gpu_export.py: the kernels under jax.export and on the host CPU
#   tune.json    bench/gpu_tune.py: Pallas tilings at 32768x4096 bfloat16 against copy and XLA
#   main.json    32768x4096 bfloat16: layer_norm, rms_norm, add_layer_norm, add_rms_norm;
#   main.md      fwd, bwd (alone) and fwd+bwd; jln (auto, xla, pallas), flax, jnp, torch,
#                torch.compile; copy (XLA and torch device-to-device) in the same run
#   sweep.json   layer_norm fwd and bwd against width 256..16384 (32768 rows), bfloat16,
#                float16 and float32: jln xla and pallas, flax, torch (the 2026-11-30 H200 run's
#                sweep, 1024..16384 in bfloat16 and float32, took 39 s of its 203)
#   tiles_*.json --parts tiles only: Pallas tilings at 16384 wide (float32, bfloat16) and 1024
#   wide.json    --parts wide only (bench/gpu_wide.py, hard timeout 300 s, about 4-5 minutes):
#   wide.md      layer_norm and rms_norm fwd and bwd at widths 16384, 32768, 65536, 4096, 1024
#                (2**26 elements each), bfloat16 and float32: the Pallas wide path (column
#                chunks), the one-tile kernels (up to 16384), XLA, and the copy floor measured
#                in the same run; each kernel's largest difference from XLA on that shape.
#                Widths run in that order; what is left past its 250 s budget is recorded
#                as skipped.
#                Run it alone:  bench/gpu.sh OUT_DIR --parts wide
#   log.txt      everything printed
# Each part has a time budget (cases past it are recorded as skipped) and a hard timeout; the
# hard timeouts of the default parts add up to 475 s.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
out="${1:?usage: bench/gpu.sh OUT_DIR [--dry-run] [--parts check,tune,main,sweep,tiles,wide]}"
shift
dry=""
parts="check,tune,main,sweep"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --dry-run) dry=1 ;;
    --parts) parts="$2"; shift ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
  shift
done
mkdir -p "$out"
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
export XLA_PYTHON_CLIENT_PREALLOCATE=false   # torch shares the device with JAX
export TF_CPP_MIN_LOG_LEVEL=2
py=python3
want() { [[ ",$parts," == *",$1,"* ]]; }
exec > >(tee -a "$out/log.txt") 2>&1
start=$SECONDS

{
  echo "# jln on $(hostname), $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  (nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader 2>/dev/null || true) | sed 's/^/GPU: /'
  $py - <<'PY' 2>&1 || true
import importlib.metadata as md, platform
import jax
print("python", platform.python_version(), "| jax devices:", jax.devices())
for p in ("jax", "jaxlib", "flax", "torch", "triton", "numpy"):
    try:
        print(f"  {p} {md.version(p)}")
    except md.PackageNotFoundError:
        print(f"  {p} not installed")
PY
} > "$out/env.txt"
cat "$out/env.txt"

if [[ -n "$dry" ]]; then
  shape=(--rows 64 --widths 256); tune=(--rows 64 --width 256 --reps 2 --buffers 2)
  reps=(--reps 2 --warmup 1); sweep=(--rows 64 --widths 256,512); check_dtypes=f32
  widerun=(--elements 16384 --widths 320 --reps 2 --buffers 1 --budget-s 200 --wide-tiles 4x64x4/2x64x4)
else
  shape=(--rows 32768 --widths 4096); tune=(--rows 32768 --width 4096)
  reps=(--reps 20 --warmup 3); sweep=(--rows 32768 --widths 256,1024,4096,16384); check_dtypes=bf16,f16,f32
  widerun=(--elements 67108864 --widths 16384,32768,65536,4096,1024 --reps 20 --buffers 2 --budget-s 250)
fi

if want check; then
  # the kernels' numbers first: every op, forward and backward, against float64 torch
  timeout -s TERM 80 $py -m jln.cli.parity --impl pallas --no-modules --dtypes "$check_dtypes" \
    --no-progress --json "$out/check.json" > "$out/check.txt" 2>&1
  echo "check exit $? after $((SECONDS - start)) s"; grep -E "FAIL|^jln parity" "$out/check.txt" | tail -n 30
  # the kernels under jax.export (serialized where flatbuffers is installed) and jitted on the
  # host CPU: the XLA body they implement
  timeout -s TERM 20 $py "$here/gpu_export.py" >> "$out/check.txt" 2>&1
  echo "export exit $? after $((SECONDS - start)) s"; grep -E "^(ok|FAIL) |^gpu_export" "$out/check.txt"
fi

if want tune; then
  timeout -s TERM 100 $py "$here/gpu_tune.py" "$out/tune.json" "${tune[@]}"
  echo "tune exit $? after $((SECONDS - start)) s"
fi

if want main; then
  timeout -s TERM 170 $py -m jln.cli.bench "${shape[@]}" --dtypes bfloat16 \
    --ops 'layer_norm,rms_norm[torch],add_layer_norm,add_rms_norm[torch]' \
    --impls jln,jln-xla,jln-pallas,flax,jnp,torch,torch-compile --directions all \
    "${reps[@]}" --budget-s 140 --compile-budget-s 45 --quiet --headline jln-pallas,jln \
    --title "jln bench: 32768x4096 bfloat16" --json "$out/main.json" --md "$out/main.md"
  echo "main exit $? after $((SECONDS - start)) s"
fi

if want sweep; then
  timeout -s TERM 105 $py -m jln.cli.bench "${sweep[@]}" --dtypes bfloat16,float16,float32 \
    --ops layer_norm --impls jln-xla,jln-pallas,flax,torch --directions fwd,bwd "${reps[@]}" \
    --budget-s 90 --quiet --headline jln-pallas \
    --title "jln bench: width sweep, 32768 rows" --json "$out/sweep.json"
  echo "sweep exit $? after $((SECONDS - start)) s"
fi

if want tiles; then
  # tiles away from 4096: wide rows (16384, float32 and bfloat16) and narrow rows (1024)
  g="$here/gpu_tune.py"
  if [[ -n "$dry" ]]; then wide=(--rows 64 --reps 2 --buffers 2); narrow=(--rows 64 --reps 2 --buffers 2)
  else wide=(--rows 8192); narrow=(--rows 131072); fi
  timeout -s TERM 65 $py "$g" "$out/tiles_16384_f32.json" --width 16384 --dtype float32 "${wide[@]}" \
    --ops layer_norm --fwd-tiles 1x16,1x32 --bwd-tiles 512x1x16,512x1x32,256x1x32
  timeout -s TERM 55 $py "$g" "$out/tiles_16384_bf16.json" --width 16384 --dtype bfloat16 "${wide[@]}" \
    --ops layer_norm --fwd-tiles 1x16,1x32 --bwd-tiles 512x1x16,512x1x32
  timeout -s TERM 55 $py "$g" "$out/tiles_1024_bf16.json" --width 1024 --dtype bfloat16 "${narrow[@]}" \
    --ops layer_norm --fwd-tiles 8x8,8x4,4x4,16x8,16x16 --bwd-tiles 512x4x8,512x4x4,512x8x8
  echo "tiles exit $? after $((SECONDS - start)) s"
fi

if want wide; then
  # the wide-row path (column chunks) against the one-tile kernels, XLA and the copy floor
  timeout -s TERM 300 $py "$here/gpu_wide.py" "$out/wide.json" --md "$out/wide.md" "${widerun[@]}"
  echo "wide exit $? after $((SECONDS - start)) s"
  [[ -f "$out/wide.md" ]] && cat "$out/wide.md"
fi

[[ -f "$out/main.md" ]] && cat "$out/main.md"
echo "done in $((SECONDS - start)) s"
