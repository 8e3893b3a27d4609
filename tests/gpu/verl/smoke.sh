#!/usr/bin/env bash
# Device side, after install.sh: import every module of verl's PPO path, vLLM's async engine and
# OpenAI server, the GPU worker and drkernel's verl pieces, one after the other, printing each
# import's success or failure (never stopping at the first), then every top-level module some
# import looked for and did not find (also the ones a try/except swallowed), with who asked.
#   bash tests/gpu/verl/smoke.sh [module ...]      # exit status: number of failed imports
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
source "$HERE/env.sh"
exec "${PYTHON:-python3}" "$HERE/smoke.py" "$@"
