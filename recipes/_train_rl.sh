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
# agent-loop worker on the training GPUs (local).
# WORKER_CUDA_CONNECTIONS [1]: CUDA hardware queues of each candidate's process
# (DRKERNEL_WORKER_CUDA_CONNECTIONS, forwarded to every Ray process of the job; empty: CUDA's default
# of 8). One queue makes a candidate's CUDA context 2.5-3x cheaper to tear down, and on a host that
# trains and grades that made grading 2.6x faster per evaluation at 4 GPUs
# (docs/results/h200x4-2026-11-28c.md); the red team (90 kernels) and tests/gpu gave the same verdicts
# under it (docs/results/h200-2026-11-28d.md). The cost: a candidate's own streams share one queue, so
# work it spreads over several streams overlaps less (single-stream kernels and references are
# unaffected). A `drkernel serve` grader (GRADER_URL) reads the variable from its own environment.
if [ -n "${GRADER_URL:-}" ] && [ "${GRADER_URL}" != null ]; then
  GRADER_KIND="${GRADER_KIND:-http}"
else
  GRADER_KIND="${GRADER_KIND:-local}"
fi
GRADER_URL="${GRADER_URL:-null}"
GRADER_DEVICE="${GRADER_DEVICE:-cuda}"
WORKER_CUDA_CONNECTIONS="${WORKER_CUDA_CONNECTIONS-${DRKERNEL_WORKER_CUDA_CONNECTIONS-1}}"
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
if [ -n "$WORKER_CUDA_CONNECTIONS" ]; then
  export DRKERNEL_WORKER_CUDA_CONNECTIONS="$WORKER_CUDA_CONNECTIONS"  # the Ray head started here inherits it
  # checked now, by the grader's own rule, rather than at the first evaluation minutes into the run
  "$(drk_python)" -c 'import sys
from drkernel.env.process.sandbox import worker_cuda_connections
from drkernel.env.result import EnvironmentFailure
try:
    worker_cuda_connections()
except EnvironmentFailure as exc:
    sys.exit(f"WORKER_CUDA_CONNECTIONS (empty: CUDA default): {exc}")' || exit 2
  # forwarded to every Ray process of the job, unless an override of the caller's already sets it
  case " ${OVERRIDES[*]:-} " in
    *"runtime_env.env_vars.DRKERNEL_WORKER_CUDA_CONNECTIONS="*) ;;
    *) ARGS+=("+ray_kwargs.ray_init.runtime_env.env_vars.DRKERNEL_WORKER_CUDA_CONNECTIONS='$WORKER_CUDA_CONNECTIONS'") ;;
  esac
else
  unset DRKERNEL_WORKER_CUDA_CONNECTIONS  # off: not even through the Ray head's environment
fi

if [ "$DRY_RUN" = "1" ]; then
  exec "$(drk_python)" -m drkernel train --backend verl --dry-run "${ARGS[@]}" "${OVERRIDES[@]}"
fi
drk_start_ray
exec "$(drk_python)" -m drkernel train --backend verl "${ARGS[@]}" "${OVERRIDES[@]}"
