#!/usr/bin/env bash
# Every GPU path of drkernel in one call, on a CUDA machine (no internet needed):
#   bash tests/gpu/run.sh [stage ...]     stages: tests fixtures spread single fused (default: all)
# Results go to $OUT (default /tmp/drkernel-gpu): logs, results.json, summary.md, plots.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
OUT="${OUT:-/tmp/drkernel-gpu}"
mkdir -p "$OUT"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PY="${PYTHON:-python3}"
STAGES="${*:-tests fixtures spread single fused}"
# BENCH_TASKS="0*,1*" limits the suite stages to matching tasks (a long suite can be split over calls).
TASKS_ARG=(); SUFFIX=""
if [ -n "${BENCH_TASKS:-}" ]; then TASKS_ARG=(--tasks "$BENCH_TASKS"); SUFFIX="-${BENCH_PART:-part}"; fi
status=0
echo "== device"; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
$PY -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
for stage in $STAGES; do
  echo "== $stage"
  case "$stage" in
    tests)    $PY -m pytest tests/gpu -o addopts="" -q -ra -s -p no:cacheprovider 2>&1 | tee "$OUT/gpu_tests.log" || status=1 ;;
    fixtures) DRKERNEL_TEST_DEVICE=cuda $PY -m pytest tests/env/test_fixtures.py -o addopts="" -q -ra -p no:cacheprovider 2>&1 \
                | tee "$OUT/fixtures_cuda.log" || status=1 ;;
    spread)   $PY tests/gpu/timing_spread.py --task "${SPREAD_TASK:-tests/gpu/tasks/matmul_2k.py}" \
                --candidate "${SPREAD_CANDIDATE:-tests/gpu/candidates/matmul_honest.py}" --repeats 10 \
                --out "$OUT/spread.json" 2>&1 | tee "$OUT/spread.log" || status=1 ;;
    single)   $PY -m drkernel.cli bench --suite envs/single_ops --device cuda "${TASKS_ARG[@]}" \
                --out "$OUT/single_ops$SUFFIX" 2>&1 | tee "$OUT/bench_single$SUFFIX.log" || status=1 ;;
    fused)    $PY -m drkernel.cli bench --suite envs/fused_ops --device cuda "${TASKS_ARG[@]}" \
                --out "$OUT/fused_ops$SUFFIX" 2>&1 | tee "$OUT/bench_fused$SUFFIX.log" || status=1 ;;
    *) echo "unknown stage $stage"; status=2 ;;
  esac
done
exit $status
