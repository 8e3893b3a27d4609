#!/usr/bin/env bash
# The verl stage of tests/gpu/run.sh: a few real verl PPO steps with vLLM rollouts on one GPU,
# through the recipes' entry point and config (python -m drkernel.train, drkernel_trainer.yaml)
# scaled down by tests/gpu/verl/overrides.txt. Needs the carried wheels installed
# (tests/gpu/verl/README.md: stage.sh, install.sh); nothing is downloaded.
#   OUT=/tmp/out STEPS=3 bash tests/gpu/verl/ppo_steps.sh [key=value ...]   # extra Hydra overrides
# Builds a tiny random Qwen2 + a BPE tokenizer (make_tiny.py) and the single_ops parquet (drkernel
# data build), runs STEPS steps under PPO_TIMEOUT seconds, then writes to $OUT/verl: ppo.log (the
# run's output, trimmed to its head and tail past 15 MiB), metrics.jsonl (verl's file logger),
# summary.md (time by phase, throughput, drkernel's per-turn metrics; summary.py), resolved_config.yaml,
# events.tfevents (TensorBoard) and checkpoint.txt (what was saved). Scratch (model, data,
# checkpoint, TensorBoard) goes to $VERL_WORK (/tmp/verl-run). Exit status: the run's.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
cd "$ROOT"
source tests/gpu/verl/env.sh
PY="${PYTHON:-python3}"
OUT="${OUT:-/tmp/drkernel-gpu}"
RES="$OUT/verl"
WORK="${VERL_WORK:-/tmp/verl-run}"
STEPS="${STEPS:-3}"
SUITE="$ROOT/envs/single_ops"
rm -rf "$WORK" "$RES"; mkdir -p "$WORK" "$RES"
t0=$SECONDS

echo "== verl: tiny model and data"
$PY -m drkernel.cli data build --suite envs/single_ops --out "$WORK/data/train.parquet" --split-test 4 || exit 1
$PY tests/gpu/verl/make_tiny.py --out "$WORK/model" --suite envs/single_ops --data "$WORK/data" 2>&1 \
  | grep -v -E "Writing model shards|UserWarning|warnings.warn" || exit 1

mapfile -t OVERRIDES < <(sed -e '/^[[:space:]]*#/d' -e '/^[[:space:]]*$/d' \
  -e "s|\$MODEL|$WORK/model|g; s|\$DATA|$WORK/data|g; s|\$WORK|$WORK|g; s|\$SUITE|$SUITE|g; s|\$STEPS|$STEPS|g" \
  tests/gpu/verl/overrides.txt)
# Ray's workers inherit this environment; forward the variables that matter explicitly as well.
export TENSORBOARD_DIR="$WORK/tensorboard" VERL_FILE_LOGGER_PATH="$RES/metrics.jsonl"
FORWARD=()
for k in PYTHONPATH VLLM_USE_FLASHINFER_SAMPLER VLLM_ENABLE_V1_MULTIPROCESSING HF_HUB_OFFLINE TRANSFORMERS_OFFLINE \
         TENSORBOARD_DIR VERL_FILE_LOGGER_PATH VERL_USE_EXTERNAL_MODULES; do
  [ -n "${!k:-}" ] && FORWARD+=("+ray_kwargs.ray_init.runtime_env.env_vars.$k='${!k}'")
done

echo "== verl: $STEPS PPO steps (python -m drkernel.train, ${#OVERRIDES[@]} overrides; limit ${PPO_TIMEOUT:-420} s)"
timeout --kill-after=20 "${PPO_TIMEOUT:-420}" $PY -m drkernel.train "${OVERRIDES[@]}" "${FORWARD[@]}" \
  "hydra.run.dir=$WORK/hydra" "$@" \
  > "$WORK/ppo.log" 2>&1 &
pid=$!
tail -n +1 -f "$WORK/ppo.log" --pid=$pid | grep --line-buffered -E \
  "^== |drkernel:|step:[0-9]|Error|error:|Traceback|FAIL|WARNING.*drkernel|ray init|Total available GPUs|out of memory" \
  | grep --line-buffered -v -E "UserWarning|warnings.warn" | cut -c1-400
wait $pid; rc=$?
echo "== verl: drkernel.train exit $rc after $((SECONDS - t0)) s"
# a run cut off by the timeout leaves Ray's processes (and vLLM's engine) holding the GPU
[ $rc -eq 0 ] || ray stop --force > /dev/null 2>&1 || true

size=$(stat -c %s "$WORK/ppo.log" 2>/dev/null || echo 0)
if [ "$size" -gt $((15 * 1024 * 1024)) ]; then
  { head -c $((2 * 1024 * 1024)) "$WORK/ppo.log"; echo; echo "[... trimmed ...]"; tail -c $((12 * 1024 * 1024)) "$WORK/ppo.log"; } > "$RES/ppo.log"
else
  cp "$WORK/ppo.log" "$RES/ppo.log"
fi
cp "$WORK/ckpt/resolved_config.yaml" "$RES/" 2>/dev/null || true
events=$(ls -S "$WORK"/tensorboard/events.* 2>/dev/null | head -1)
[ -n "$events" ] && cp "$events" "$RES/events.tfevents"
(cd "$WORK" && find ckpt -type f -printf '%10s  %p\n' 2>/dev/null | sort -k2) > "$RES/checkpoint.txt"
$PY tests/gpu/verl/summary.py "$RES/metrics.jsonl" --ckpt "$WORK/ckpt" | tee "$RES/summary.md"
exit $rc
