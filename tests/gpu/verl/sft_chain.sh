#!/usr/bin/env bash
# The recipe chain on one GPU, for real: the agent's SFT export -> verl's SFT trainer through
# recipes/sft_coldstart.sh -> the RL stage (ppo_steps.sh) started from the SFT checkpoint.
#   OUT=/tmp/out bash tests/gpu/verl/sft_chain.sh
# 1. solution_episodes.py: 16 single_ops tasks played for two turns (reference, then the bundled
#    solution), graded on CUDA, exported with drkernel.agent.sft.export_sft, converted to parquet;
# 2. the SFT recipe with sft_overrides.txt on the tiny model (make_tiny.py, built once per machine):
#    4 steps, a checkpoint with its Hugging Face model (global_step_4/huggingface);
# 3. ppo_steps.sh with MODEL_DIR set to that model: STEPS (2) PPO steps, results in $OUT/sft-rl.
# Writes $OUT/sft/: sft.log, sft_metrics.jsonl (verl's file logger), checkpoint.txt. Needs the carried
# wheels installed (tests/gpu/verl/README.md). SFT_TIMEOUT [240] and PPO_TIMEOUT [330: start-up ~190 s, step 1 ~70 s] bound the stages.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
cd "$ROOT"
source tests/gpu/verl/env.sh
PY="${PYTHON:-python3}"
OUT="${OUT:-/tmp/drkernel-gpu}"
RES="$OUT/sft"
WORK="${VERL_WORK:-/tmp/verl-run}/sft"
rm -rf "$WORK" "$RES"; mkdir -p "$WORK" "$RES"
t0=$SECONDS

echo "== sft chain: the agent's export (2-turn episodes graded on CUDA)"
$PY tests/gpu/verl/solution_episodes.py --suite envs/single_ops --out "$WORK/data" --tasks 16 --device cuda \
  2>&1 | grep -v -E "UserWarning|warnings.warn" | tail -5 || exit 1
[ -f "$WORK/data/sft.parquet" ] || { echo "sft chain: no SFT parquet"; exit 1; }

verl_model tiny || exit 1
MODEL="$VERL_MODEL"

echo "== sft chain: verl SFT (recipes/sft_coldstart.sh, one GPU; limit ${SFT_TIMEOUT:-240} s)"
mapfile -t SFT_OVERRIDES < <(sed -e '/^[[:space:]]*#/d' -e '/^[[:space:]]*$/d' tests/gpu/verl/sft_overrides.txt)
t1=$SECONDS
VERL_FILE_LOGGER_PATH="$RES/sft_metrics.jsonl" MODEL_PATH="$MODEL" SFT_FILES="$WORK/data/sft.parquet" \
  GPUS_PER_NODE=1 NNODES=1 MASTER_PORT=29611 EXPERIMENT=sft_chain OUTPUT_DIR="$WORK/ckpt" \
  timeout --kill-after=20 "${SFT_TIMEOUT:-240}" bash recipes/sft_coldstart.sh "${SFT_OVERRIDES[@]}" \
  > "$RES/sft.log" 2>&1
rc=$?
grep -E "step:[0-9]|Saved hf_model|Total time|Error|Traceback" "$RES/sft.log" | cut -c1-300 | tail -12
echo "== sft chain: SFT exit $rc after $((SECONDS - t1)) s"
(cd "$WORK" && find ckpt -type f -printf '%10s  %p\n' 2>/dev/null | sort -k2) > "$RES/checkpoint.txt"
HF="$(ls -d "$WORK"/ckpt/global_step_*/huggingface 2>/dev/null | sort -V | tail -1)"
[ $rc -eq 0 ] && [ -n "$HF" ] && [ -f "$HF/config.json" ] || { echo "sft chain: no Hugging Face checkpoint"; exit 1; }
echo "sft chain: RL starts from $HF ($(ls "$HF" | tr '\n' ' '))"

echo "== sft chain: RL from the SFT checkpoint"
OUT="$OUT" LABEL=sft-rl MODEL_DIR="$HF" STEPS="${STEPS:-2}" PPO_TIMEOUT="${PPO_TIMEOUT:-330}" \
  bash tests/gpu/verl/ppo_steps.sh
rc=$?
echo "== sft chain: exit $rc after $((SECONDS - t0)) s"
exit $rc
