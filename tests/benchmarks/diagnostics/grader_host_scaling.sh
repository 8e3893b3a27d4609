#!/usr/bin/env bash
# Does grading slow down when every GPU of a host grades at once? (GPU machine; no verl, no vLLM.)
#   OUT=/tmp/h bash tests/benchmarks/diagnostics/grader_host_scaling.sh 4
# Runs tests/benchmarks/bench_grader.py's capacity sweep (capacity $CAP [4], the 8 load-spread
# single_ops solutions, $ROUNDS [4] rounds) on GPU 0 alone, then one such process per GPU on GPUs
# 0..N-1 at once (each a LocalGrader on its one GPU, as verl's `drkernel.grader.kind=node` places
# them), with `vmstat 1` and `top` snapshots beside each arm. Prints each arm's evaluations/min per
# GPU and mean seconds per evaluation by grading stage (grader_host_scaling.py), so a stage that
# grows with the number of GPUs grading (not with the work per GPU) shows at a glance.
# SPARES sets the warm processes per GPU (default: the grader's own); an exported
# DRKERNEL_WORKER_CUDA_CONNECTIONS reaches the candidates (summary.md says which). Exit 1 if an arm failed.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
cd "$ROOT"
N="${1:-4}"
OUT="${OUT:-/tmp/grader-host-scaling}"
PY="${PYTHON:-python3}"
CAP="${CAP:-4}"
TASKS="${TASKS:-01_relu,07_broadcast_mul,13_softmax,15_layer_norm,18_matmul_square,22_cumsum,25_transpose_2d,27_embedding}"
mkdir -p "$OUT"

bench() {  # bench GPU LOG
  CUDA_VISIBLE_DEVICES="$1" $PY tests/benchmarks/bench_grader.py --device cuda --capacities "$CAP" --tasks "$TASKS" \
    --sweep-rounds "${ROUNDS:-4}" --skip-fresh ${SPARES:+--spares "$SPARES"} > "$2" 2>&1
}

arm() {  # arm NAME GPUS...
  local name="$1"; shift
  vmstat -n 1 > "$OUT/$name.vmstat" 2>&1 & local vm=$!
  ( while sleep 10; do top -b -n 1 -w 200 | head -40; echo; done ) > "$OUT/$name.top" 2>&1 & local tp=$!
  local pids=()
  for g in "$@"; do bench "$g" "$OUT/$name.gpu$g.log" & pids+=($!); done
  local rc=0
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  kill "$vm" "$tp" 2>/dev/null; wait "$vm" "$tp" 2>/dev/null
  echo "== $name: exit $rc"
  return $rc
}

status=0
arm alone 0 || status=1
arm "all$N" $(seq 0 $((N - 1))) || status=1
{ echo "DRKERNEL_WORKER_CUDA_CONNECTIONS=${DRKERNEL_WORKER_CUDA_CONNECTIONS:-} (unset: CUDA's default queues)"
  $PY tests/benchmarks/diagnostics/grader_host_scaling.py "$OUT"; } | tee "$OUT/summary.md"
exit $status
