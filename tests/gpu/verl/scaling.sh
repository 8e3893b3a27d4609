#!/usr/bin/env bash
# The verl stage at several GPU counts, one run after another on one machine (the wheels staged and
# installed once: tests/gpu/verl/README.md), then one table (scaling.py):
#   OUT=/tmp/out PRESET=1.5b STEPS=3 bash tests/gpu/verl/scaling.sh 1 2 4 2:2
# Each argument is GPUS[:TP]; run K uses GPUs 0..GPUS-1 (CUDA_VISIBLE_DEVICES), the same per-GPU
# batch (ppo_steps.sh), results in $OUT/scale-$PRESET-g$GPUS-tp$TP/. Writes $OUT/scaling.md.
# No checkpoint is saved (trainer.save_freq=-1: the steps are what is measured; the SFT chain and
# the verl stage save theirs). GRADER_KIND (local by default; node: one grading actor per GPU,
# shared by the node's agent-loop workers) places grading; GRADER_SPARES sets drkernel.grader.spares (warm
# candidate processes per GPU; unset = the grader's default). PPO_TIMEOUT (per run, default 500 s: the
# 4-GPU run needed ~410 s for 3 steps) bounds each run. FIRST_GPU [0] shifts the GPUs (run K uses
# FIRST_GPU..FIRST_GPU+GPUS-1) and RAY_STOP=0 leaves Ray alone after each run, for a run beside another
# Ray job on the same machine (give each its own RAY_TMPDIR). DRKERNEL_WORKER_CUDA_CONNECTIONS (exported)
# gives the grader's candidate processes that many CUDA hardware queues (ppo_steps.sh forwards it to
# Ray's processes; the label says it). Exit status: 1 if any run failed.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
cd "$ROOT"
source tests/gpu/verl/env.sh
PY="${PYTHON:-python3}"
OUT="${OUT:-/tmp/drkernel-gpu}"
PRESET="${PRESET:-1.5b}"
export PPO_TIMEOUT="${PPO_TIMEOUT:-500}"
# NVLink multicast off (the device's KINDS.md): NCCL, torch symmetric memory and NVSHMEM
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
status=0
summaries=()
for spec in "$@"; do
  g="${spec%%:*}"; tp="${spec#*:}"; [ "$tp" = "$spec" ] && tp=1
  label="scale-$PRESET-g$g-tp$tp${GRADER_KIND:+-$GRADER_KIND}${GRADER_SPARES:+-s$GRADER_SPARES}${DRKERNEL_WORKER_CUDA_CONNECTIONS:+-conn$DRKERNEL_WORKER_CUDA_CONNECTIONS}"
  OUT="$OUT" GPUS="$g" TP="$tp" PRESET="$PRESET" LABEL="$label" \
    CUDA_VISIBLE_DEVICES="$(seq -s, "${FIRST_GPU:-0}" $((${FIRST_GPU:-0} + g - 1)))" bash tests/gpu/verl/ppo_steps.sh trainer.save_freq=-1 \
    ${GRADER_KIND:+drkernel.grader.kind=$GRADER_KIND} ${GRADER_SPARES:+drkernel.grader.spares=$GRADER_SPARES} || status=1
  # nothing of this run may hold a GPU in the next
  [ "${RAY_STOP:-1}" = 0 ] || ray stop --force > /dev/null 2>&1 || true
  summaries+=("$OUT/$label/summary.json")
done
$PY tests/gpu/verl/scaling.py "${summaries[@]}" | tee "$OUT/scaling.md"
exit $status
