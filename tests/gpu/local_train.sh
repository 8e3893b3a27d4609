#!/usr/bin/env bash
# drkernel train on one CUDA GPU for a few steps, grading on CUDA for real; prints the
# step time split into generation, grading and update (and writes it to $OUT/local_train/timings.json).
#   bash tests/gpu/local_train.sh                  # tiny model built locally (random weights)
#   MODEL=/path/to/local/hf/model STEPS=3 bash tests/gpu/local_train.sh
# Needs the `local` extra (transformers, tokenizers, peft, tensorboard, tqdm); nothing is downloaded.
# A random tiny model never writes a kernel, so every 2nd episode answers with the suite's bundled
# solution (--solution-mix 2, scored by the model and trained like a sampled reply): grading,
# profiling (PR/PRS) and the update all run. Drop it (SOLUTION_MIX=0) with a real model.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$ROOT"
OUT="${OUT:-/tmp/drkernel-gpu}"
RUN="$OUT/local_train"
rm -rf "$RUN"; mkdir -p "$RUN"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
PY="${PYTHON:-python3}"
$PY -c "import transformers, tokenizers" 2>/dev/null || {
  echo "local_train: needs the 'local' extra (pip install transformers tokenizers peft tensorboard tqdm)"; exit 2; }
MODEL_ARGS=(--tiny-hidden 256 --tiny-layers 4 --tokenizer-vocab 4000)
if [ -n "${MODEL:-}" ]; then MODEL_ARGS=(--model "$MODEL"); fi
$PY -m drkernel train --suite envs/single_ops --tasks "${TASKS:-01_relu,04_silu,08_sum_dim,13_softmax}" \
  --device cuda --max-steps "${STEPS:-4}" --out "$RUN" --prompts-per-step "${PROMPTS:-2}" --group-size "${GROUP:-4}" \
  --num-turns "${TURNS:-2}" --max-new-tokens "${MAX_NEW_TOKENS:-256}" --lr 1e-5 --micro-batch-size 4 \
  --solution-mix "${SOLUTION_MIX:-2}" --no-progress "${MODEL_ARGS[@]}" 2>&1 | tee "$RUN/train.log"
$PY - "$RUN" <<'PYEOF'
import json, sys
run = sys.argv[1]
rows = [json.loads(x) for x in open(f"{run}/metrics.jsonl")]
keys = [("step", "step"), ("total", "perf/step_time_s"), ("rollout", "perf/time_rollout_s"),
        ("generate", "perf/time_generate_s"), ("grade(sum)", "perf/time_grade_s"), ("logprob", "perf/time_logprob_s"),
        ("step_fn", "perf/time_step_fn_s"), ("update", "perf/time_update_s"), ("evals", "perf/evaluations"),
        ("evals/s", "perf/evaluations_per_s"), ("tok/s", "perf/tokens_per_s"),
        ("forwards", "perf/generation_calls"), ("rows/step", "perf/generation_batch_mean"), ("reward", "reward/mean"),
        ("turn1/correct", "turn1/correct")]
print(" | ".join(k for k, _ in keys))
for r in rows:
    print(" | ".join("-" if r.get(m) is None else (f"{r[m]:.3f}" if isinstance(r[m], float) else str(r[m])) for _, m in keys))
json.dump([{k: r.get(m) for k, m in keys} for r in rows], open(f"{run}/timings.json", "w"), indent=1)
print("note: grade(sum) adds up the grading calls, which overlap with each other and with generation;"
      " rollout = wall time of generation + grading")
PYEOF
