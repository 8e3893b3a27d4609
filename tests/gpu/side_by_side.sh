#!/usr/bin/env bash
# Several tests/gpu/run.sh jobs at once, one GPU each, on a machine with several GPUs (device time
# is held per machine, not per GPU: independent stages side by side cost one stage's time):
#   OUT=/tmp/out JOB_TIMEOUT=330 bash tests/gpu/side_by_side.sh "0:tests" "1:redteam precision" "2:single"
# Each "GPU:STAGES" runs `tests/gpu/run.sh STAGES` with CUDA_VISIBLE_DEVICES=GPU and OUT=$OUT/gpuGPU,
# its output in $OUT/gpuGPU.log, cut at JOB_TIMEOUT seconds (default 540). Timing stages (ab,
# spread, loadspread) measure a machine shared with the others: run those alone. Exit status: 1 if
# any job failed.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
OUT="${OUT:-/tmp/drkernel-gpu}"
mkdir -p "$OUT"
pids=(); names=()
for job in "$@"; do
  gpu="${job%%:*}"; stages="${job#*:}"
  [ "$gpu" != "$job" ] && [[ "$gpu" =~ ^[0-9]+$ ]] || { echo "side_by_side: '$job' is not GPU:STAGES" >&2; exit 2; }
  mkdir -p "$OUT/gpu$gpu"
  # shellcheck disable=SC2086 # (the stages are words)
  CUDA_VISIBLE_DEVICES="$gpu" OUT="$OUT/gpu$gpu" timeout --kill-after=15 "${JOB_TIMEOUT:-540}" \
    bash "$ROOT/tests/gpu/run.sh" $stages > "$OUT/gpu$gpu.log" 2>&1 &
  pids+=($!); names+=("GPU $gpu: $stages")
done
status=0
for i in "${!pids[@]}"; do
  wait "${pids[$i]}"; rc=$?
  echo "side_by_side: ${names[$i]}: exit $rc"
  [ $rc -eq 0 ] || status=1
done
exit $status
