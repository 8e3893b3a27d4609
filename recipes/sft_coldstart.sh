#!/usr/bin/env bash
# Cold-start SFT (before RL) with verl 0.9.1's SFT trainer on the multi-turn trajectories the
# agent exports (`drkernel.agent.sft.export_sft`: one {"messages": [...]} dialogue per line).
#
#   SFT_JSONL=runs/sft.jsonl MODEL_PATH=Qwen/Qwen3-8B-Base bash recipes/sft_coldstart.sh
#   bash recipes/sft_coldstart.sh --dry-run [key=value ...]   # print the composed config, start nothing
# Multi-node: run on every node with NNODES, NODE_RANK and MASTER_ADDR set (torchrun rendezvous).
# Extra key=value arguments are Hydra overrides of drkernel/config/drkernel_sft.yaml.
#
# Environment (defaults in brackets):
#   MODEL_PATH      base model [Qwen/Qwen3-8B-Base] (Qwen/Qwen3-14B-Base for the 14B)
#   SFT_JSONL       the agent's SFT export; converted to SFT_FILES first when set
#   SFT_FILES       parquet with a `messages` column [data/sft.parquet]
#   VAL_FILES       optional validation parquet [null]
#   NNODES          nodes [1]; GPUS_PER_NODE GPUs per node [8]
#   NODE_RANK       this node's rank [0]; MASTER_ADDR rank-0 address [127.0.0.1]; MASTER_PORT [29500]
#   EXPERIMENT      run name [coldstart]
#   OUTPUT_DIR      checkpoints [checkpoints/drkernel-sft/$EXPERIMENT]
#   PYTHON          interpreter [python3]
set -euo pipefail
PY="${PYTHON:-python3}"
DRY_RUN=0
OVERRIDES=()
for arg in "$@"; do
  if [ "$arg" = "--dry-run" ]; then DRY_RUN=1; else OVERRIDES+=("$arg"); fi
done

MODEL_PATH="${MODEL_PATH:-Qwen/Qwen3-8B-Base}"
SFT_FILES="${SFT_FILES:-data/sft.parquet}"
VAL_FILES="${VAL_FILES:-null}"
NNODES="${NNODES:-1}"
GPUS_PER_NODE="${GPUS_PER_NODE:-8}"
EXPERIMENT="${EXPERIMENT:-coldstart}"
OUTPUT_DIR="${OUTPUT_DIR:-checkpoints/drkernel-sft/$EXPERIMENT}"

ARGS=(
  model.path="$MODEL_PATH"
  data.train_files="$SFT_FILES"
  data.val_files="$VAL_FILES"
  trainer.nnodes="$NNODES"
  trainer.n_gpus_per_node="$GPUS_PER_NODE"
  trainer.experiment_name="$EXPERIMENT"
  trainer.default_local_dir="$OUTPUT_DIR"
)

if [ "$DRY_RUN" = "1" ]; then
  exec "$PY" -m drkernel train --backend verl --dry-run --config-name=drkernel_sft "${ARGS[@]}" "${OVERRIDES[@]}"
fi
if [ -n "${SFT_JSONL:-}" ]; then
  "$PY" -m drkernel.verl.sft_data "$SFT_JSONL" "$SFT_FILES"
fi
CONFIG_DIR="$("$PY" -c 'from drkernel.config import CONFIG_DIR; print(CONFIG_DIR)')"
exec "$PY" -m torch.distributed.run --nnodes="$NNODES" --node_rank="${NODE_RANK:-0}" \
  --nproc_per_node="$GPUS_PER_NODE" --master_addr="${MASTER_ADDR:-127.0.0.1}" --master_port="${MASTER_PORT:-29500}" \
  -m verl.trainer.sft_trainer --config-path="$CONFIG_DIR" --config-name=drkernel_sft \
  "${ARGS[@]}" "${OVERRIDES[@]}"
