#!/usr/bin/env bash
# Dr. Kernel-14B RL (TRLOO + MRS + PR + PRS) on a Ray cluster with stock verl 0.9.1.
#
# Run the same command on every node (rank 0 is the Ray head and launches training):
#   NODE_RANK=0 NNODES=4 MODEL_PATH=hkust-nlp/drkernel-14b-coldstart TRAIN_FILES=data/train.parquet \
#     VAL_FILES=data/val.parquet GRADER_KIND=http GRADER_URL=http://grader:8000 bash recipes/train_14b.sh
#   NODE_RANK=1 NNODES=4 HEAD_ADDR=10.0.0.1 bash recipes/train_14b.sh           # each worker
#   bash recipes/train_14b.sh --dry-run [key=value ...]   # print the composed config, start nothing
# Extra key=value arguments are Hydra overrides of drkernel/config/drkernel_trainer.yaml.
#
# Environment (defaults in brackets):
#   MODEL_PATH      policy to start from [hkust-nlp/drkernel-14b-coldstart]: the cold-start SFT
#                   checkpoint, not the released RL model (reference §9.8)
#   TRAIN_FILES     `drkernel data build` parquet for training [data/train.parquet]
#   VAL_FILES       parquet for validation [data/val.parquet]
#   NNODES          nodes in the cluster [1]
#   GPUS_PER_NODE   GPUs per node [8]
#   NODE_RANK       0 on the head node, 1..NNODES-1 on workers [0]
#   HEAD_ADDR       address of the head node (workers only)
#   RAY_PORT        Ray head port [6379]
#   GRADER_KIND     local | node | ray | http [http when GRADER_URL is set, else local]: where kernels are
#                   graded (local: on the training GPUs, fine up to 2; docs/scaling-14b.md)
#   GRADER_URL      drkernel grading service URL (GRADER_KIND=http)
#   GRADER_DEVICE   cuda | cpu for local/ray graders [cuda]
#   WORKER_CUDA_CONNECTIONS  CUDA hardware queues of each candidate's process [1; empty: CUDA's 8]
#                   (recipes/_train_rl.sh says why)
#   EXPERIMENT      run name [dr_kernel_14b_trloo_mrs_pr_prs]
#   OUTPUT_DIR      checkpoints and resolved config [checkpoints/drkernel/$EXPERIMENT]
#   PYTHON          interpreter [python3]
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$HERE/_ray.sh"
drk_parse_args "$@"

MODEL_PATH="${MODEL_PATH:-hkust-nlp/drkernel-14b-coldstart}"
EXPERIMENT="${EXPERIMENT:-dr_kernel_14b_trloo_mrs_pr_prs}"
source "$HERE/_train_rl.sh"
