#!/usr/bin/env bash
# The verl stage of tests/gpu/run.sh: a few real verl PPO steps with vLLM rollouts on one GPU or
# more, through the recipes' entry point and config (python -m drkernel.train, drkernel_trainer.yaml)
# scaled down by tests/gpu/verl/overrides.txt. Needs the carried wheels installed
# (tests/gpu/verl/README.md: stage.sh, install.sh); nothing is downloaded.
#   OUT=/tmp/out STEPS=3 bash tests/gpu/verl/ppo_steps.sh [key=value ...]   # extra Hydra overrides
# Environment (defaults in brackets):
#   GPUS [1]       trainer.n_gpus_per_node; the batch grows with it (4 prompts x 4 samples per GPU,
#                  one agent-loop worker per GPU, 16 Ray CPUs per GPU): the same per-GPU batch
#   TP [1]         vLLM tensor parallelism (actor_rollout_ref.rollout.tensor_model_parallel_size)
#   PRESET [tiny]  make_tiny.py's model shape (tiny | 0.5b | 1.5b); built once per machine into
#                  $VERL_MODELS/$PRESET (/tmp/verl-models) and reused
#   MODEL_DIR      start from this Hugging Face model directory instead (the SFT chain's checkpoint)
#   LABEL [verl]   results go to $OUT/$LABEL; scratch to $VERL_WORK/$LABEL (/tmp/verl-run)
# Makes the single_ops parquet (drkernel data build), runs STEPS steps under PPO_TIMEOUT seconds,
# then writes to $OUT/$LABEL: ppo.log (the run's output, every line stamped with seconds since the
# launch; trimmed to its head and tail past 15 MiB), metrics.jsonl (verl's file logger), summary.md
# and summary.json (time by phase, start-up, throughput, memory, drkernel's per-turn metrics;
# summary.py), gpu_mem.csv (nvidia-smi's memory.used per GPU, every second), resolved_config.yaml, events.tfevents (TensorBoard) and checkpoint.txt (what was
# saved). Exit status: the run's.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
cd "$ROOT"
source tests/gpu/verl/env.sh
PY="${PYTHON:-python3}"
OUT="${OUT:-/tmp/drkernel-gpu}"
LABEL="${LABEL:-verl}"
RES="$OUT/$LABEL"
WORK="${VERL_WORK:-/tmp/verl-run}/$LABEL"
STEPS="${STEPS:-3}"
GPUS="${GPUS:-1}"
TP="${TP:-1}"
PRESET="${PRESET:-tiny}"
SUITE="$ROOT/envs/single_ops"
rm -rf "$WORK" "$RES"; mkdir -p "$WORK" "$RES"
t0=$SECONDS

echo "== verl ($LABEL): model and data"
$PY -m drkernel.cli data build --suite envs/single_ops --out "$WORK/data/train.parquet" --split-test 4 || exit 1
if [ -n "${MODEL_DIR:-}" ]; then
  MODEL="$MODEL_DIR"
  echo "verl: model $MODEL (given)"
else
  verl_model "$PRESET" --data "$WORK/data" || exit 1
  MODEL="$VERL_MODEL"
fi

mapfile -t OVERRIDES < <(sed -e '/^[[:space:]]*#/d' -e '/^[[:space:]]*$/d' \
  -e "s|\$MODEL|$MODEL|g; s|\$DATA|$WORK/data|g; s|\$WORK|$WORK|g; s|\$SUITE|$SUITE|g; s|\$STEPS|$STEPS|g" \
  -e "s|\$GPUS|$GPUS|g; s|\$TP|$TP|g; s|\$BATCH|$((4 * GPUS))|g; s|\$NCPUS|$((16 * GPUS))|g; s|\$LABEL|$LABEL|g" \
  tests/gpu/verl/overrides.txt)
# Ray's workers inherit this environment; forward the variables that matter explicitly as well.
export TENSORBOARD_DIR="$WORK/tensorboard" VERL_FILE_LOGGER_PATH="$RES/metrics.jsonl"
FORWARD=()
for k in PYTHONPATH VLLM_USE_FLASHINFER_SAMPLER VLLM_ENABLE_V1_MULTIPROCESSING HF_HUB_OFFLINE TRANSFORMERS_OFFLINE \
         TENSORBOARD_DIR VERL_FILE_LOGGER_PATH VERL_USE_EXTERNAL_MODULES DRKERNEL_WORKER_CUDA_CONNECTIONS PYTHONPYCACHEPREFIX; do
  [ -n "${!k:-}" ] && FORWARD+=("+ray_kwargs.ray_init.runtime_env.env_vars.$k='${!k}'")
done

echo "== verl ($LABEL): $STEPS PPO steps on $GPUS GPU(s), TP $TP, model $PRESET (python -m drkernel.train," \
     "${#OVERRIDES[@]} overrides; limit ${PPO_TIMEOUT:-420} s)"
# every line stamped with seconds since the launch (summary.py reads the start-up from them)
STAMP='import sys, time
t0 = time.monotonic()
for line in sys.stdin:
    sys.stdout.write(f"[{time.monotonic() - t0:7.1f}] {line}"); sys.stdout.flush()'
# what each GPU holds (FSDP ranks, vLLM, the grader's processes), sampled every second
if command -v nvidia-smi > /dev/null; then
  nvidia-smi --query-gpu=index,memory.used --format=csv,noheader,nounits -lms 1000 > "$RES/gpu_mem.csv" 2>/dev/null &
  smi=$!
fi
timeout --kill-after=20 "${PPO_TIMEOUT:-420}" $PY -m drkernel.train "${OVERRIDES[@]}" "${FORWARD[@]}" \
  "hydra.run.dir=$WORK/hydra" "$@" \
  > >($PY -u -c "$STAMP" > "$WORK/ppo.log") 2>&1 &
pid=$!
sleep 1
tail -n +1 -f "$WORK/ppo.log" --pid=$pid | grep --line-buffered -E \
  "\] == |drkernel:|step:[0-9]|Error|error:|Traceback|FAIL|WARNING.*drkernel|ray init|Total available GPUs|out of memory" \
  | grep --line-buffered -v -E "UserWarning|warnings.warn" | cut -c1-400
wait $pid; rc=$?
sleep 1  # (the stamping process drains the last lines)
[ -n "${smi:-}" ] && kill "$smi" 2>/dev/null
echo "== verl ($LABEL): drkernel.train exit $rc after $((SECONDS - t0)) s"
# a run cut off by the timeout leaves Ray's processes (and vLLM's engine) holding the GPU
[ $rc -eq 0 ] || [ "${RAY_STOP:-1}" = 0 ] || ray stop --force > /dev/null 2>&1 || true

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
$PY tests/gpu/verl/summary.py "$RES/metrics.jsonl" --ckpt "$WORK/ckpt" --log "$RES/ppo.log" \
  --json "$RES/summary.json" --gpu-mem "$RES/gpu_mem.csv" --label "$LABEL" --gpus "$GPUS" --tp "$TP" --preset "${MODEL_DIR:+sft:}$PRESET" \
  | tee "$RES/summary.md"
exit $rc
