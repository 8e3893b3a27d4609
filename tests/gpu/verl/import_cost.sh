#!/usr/bin/env bash
# Where a verl process's start goes: every process of verl's chain (driver, TaskRunner, FSDP
# workers, the vLLM server, its engine core and worker, the agent-loop workers) imports these
# modules on its own, one after another. Times each import in a fresh interpreter (RUNS times,
# default 1; a second run has a warm page cache), then the slowest modules of verl's trainer and vLLM's engine by
# `python -X importtime` (self time, cumulative time).
#   OUT=/tmp/out bash tests/gpu/verl/import_cost.sh      # after install.sh; writes $OUT/import_cost.log
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
cd "$ROOT"
source tests/gpu/verl/env.sh
PY="${PYTHON:-python3}"
OUT="${OUT:-/tmp/drkernel-gpu}"
mkdir -p "$OUT"
{
  echo "python: $($PY -c 'import sys; print(sys.version.split()[0], "dont_write_bytecode", sys.flags.dont_write_bytecode, "pycache_prefix", sys.pycache_prefix)')"
  echo "PYTHONDONTWRITEBYTECODE=${PYTHONDONTWRITEBYTECODE:-<unset>}"
  echo "bytecode files in $VERL_SITE: $(find "$VERL_SITE" -name '*.pyc' 2>/dev/null | wc -l)," \
       "sources: $(find "$VERL_SITE" -name '*.py' 2>/dev/null | wc -l)"
  tdir=$($PY -c 'import os, torch; print(os.path.dirname(torch.__file__))' 2>/dev/null)
  echo "bytecode files in $tdir: $(find "$tdir" -name '*.pyc' 2>/dev/null | wc -l)," \
       "sources: $(find "$tdir" -name '*.py' 2>/dev/null | wc -l)"
  for mod in torch triton transformers ray vllm vllm.v1.engine.async_llm verl.trainer.main_ppo drkernel.verl.plugin \
             drkernel.env.process.harness; do
    for i in $(seq "${RUNS:-1}"); do
      s=$($PY -c "import time; t = time.perf_counter(); import $mod; print(f'{time.perf_counter() - t:.2f}')" 2>/dev/null | tail -1)
      echo "import $mod (run $i): ${s:-failed} s"
    done
  done
  for mod in verl.trainer.main_ppo vllm.v1.engine.async_llm; do
    echo "-- slowest imports of $mod (cumulative us | self us | module), top 25 by cumulative"
    $PY -X importtime -c "import $mod" 2>&1 >/dev/null | grep '^import time:' | grep -v 'self \[us\]' \
      | awk -F'|' '{gsub(/import time: */, "", $1); print $2 "|" $1 "|" $3}' | sort -t'|' -k1 -n -r | head -25
  done
} 2>&1 | tee "$OUT/import_cost.log"
