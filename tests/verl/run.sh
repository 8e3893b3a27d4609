#!/usr/bin/env bash
# CI step of the verl integration (kept out of the base suite so the base install stays light).
# Creates/uses a separate virtual environment with stock verl 0.9.1 on CPU (torch pinned to the
# CPU build by .ci/constraints.txt, verl's dependency closure by .ci/constraints-verl.txt; vLLM
# is not installed: no PPO step runs here) and runs tests/verl. Extra arguments go to pytest.
#   bash tests/verl/run.sh -q
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
VENV="${DRKERNEL_VERL_VENV:-$ROOT/.venv-verl}"
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip install -q --disable-pip-version-check
     -c "$ROOT/.ci/constraints.txt" -c "$ROOT/.ci/constraints-verl.txt")
# torch first, alone: nothing later may resolve a different (CUDA) build.
"${PIP[@]}" torch
"${PIP[@]}" -e "$ROOT[env,train-cpu-test]"
cd "$ROOT"
export VERL_LOGGING_LEVEL="${VERL_LOGGING_LEVEL:-WARN}"
# pytest exits 5 when it collects no test: that is a failure here too.
exec "$VENV/bin/python" -m pytest -p no:cacheprovider -o asyncio_default_fixture_loop_scope=function tests/verl "$@"
