#!/usr/bin/env bash
# The body shared by the RL recipes (train_14b.sh, train_8b.sh): sourced after the recipe has set
# its MODEL_PATH and EXPERIMENT defaults and parsed its arguments (drk_parse_args). The variables
# are documented at the top of each recipe.
TRAIN_FILES="${TRAIN_FILES:-data/train.parquet}"
VAL_FILES="${VAL_FILES:-data/val.parquet}"
NNODES="${NNODES:-1}"
GPUS_PER_NODE="${GPUS_PER_NODE:-8}"
# Where kernels are graded: with GRADER_URL set, on that service's dedicated GPUs (http, the
# placement for more than two training GPUs: graders on the training host slowed 4-5x per evaluation
# from 1 to 4 GPUs, one per worker (local) or one per GPU (node) alike, since every candidate process's
# CUDA context is created one at a time per host; docs/scaling-14b.md); without it, inside each
# agent-loop worker on the training GPUs (local). On a host that trains and grades, exporting
# DRKERNEL_WORKER_CUDA_CONNECTIONS=1 (and forwarding it to Ray's processes, as
# tests/gpu/verl/ppo_steps.sh does) made grading 2.6x faster per evaluation at 4 GPUs
# (docs/results/h200x4-2026-11-28c.md); it is opt-in until the GPU suites have run under it.
if [ -n "${GRADER_URL:-}" ] && [ "${GRADER_URL}" != null ]; then
  GRADER_KIND="${GRADER_KIND:-http}"
else
  GRADER_KIND="${GRADER_KIND:-local}"
fi
GRADER_URL="${GRADER_URL:-null}"
GRADER_DEVICE="${GRADER_DEVICE:-cuda}"
OUTPUT_DIR="${OUTPUT_DIR:-checkpoints/drkernel/$EXPERIMENT}"

ARGS=(
  actor_rollout_ref.model.path="$MODEL_PATH"
  data.train_files="$TRAIN_FILES"
  data.val_files="$VAL_FILES"
  trainer.nnodes="$NNODES"
  trainer.n_gpus_per_node="$GPUS_PER_NODE"
  trainer.experiment_name="$EXPERIMENT"
  trainer.default_local_dir="$OUTPUT_DIR"
  drkernel.grader.kind="$GRADER_KIND"
  drkernel.grader.url="$GRADER_URL"
  drkernel.grader.device="$GRADER_DEVICE"
)

if [ "$DRY_RUN" = "1" ]; then
  exec "$(drk_python)" -m drkernel train --backend verl --dry-run "${ARGS[@]}" "${OVERRIDES[@]}"
fi
drk_start_ray
exec "$(drk_python)" -m drkernel train --backend verl "${ARGS[@]}" "${OVERRIDES[@]}"
