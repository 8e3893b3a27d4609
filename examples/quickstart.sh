#!/usr/bin/env bash
# The main job on the embedded default, from a fresh clone, in one command:
#   bash examples/quickstart.sh [extra drkernel bench args]
# Sets up a virtual environment (.venv), installs drkernel, and grades the bundled single_ops suite's
# reference solutions with the local evaluator: on a CUDA GPU when there is one, otherwise on the CPU
# through Triton's interpreter (small sizes). Results: runs/quickstart/{results.json,summary.md,speedups.png}.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${DRKERNEL_VENV:-$ROOT/.venv}"
if [ ! -x "$VENV/bin/python" ]; then
  # On a GPU machine, reuse the system's CUDA build of torch; otherwise pin the CPU build.
  if command -v nvidia-smi >/dev/null 2>&1; then python3 -m venv --system-site-packages "$VENV"; else python3 -m venv "$VENV"; fi
fi
CONSTRAINTS=()
if ! command -v nvidia-smi >/dev/null 2>&1; then CONSTRAINTS=(-c "$ROOT/.ci/constraints.txt"); fi
"$VENV/bin/python" -m pip install -q --disable-pip-version-check "${CONSTRAINTS[@]}" -e "$ROOT[env,bench]"
cd "$ROOT"
exec "$VENV/bin/drkernel" bench --suite envs/single_ops --out runs/quickstart "$@"
