#!/usr/bin/env bash
# The README's test command: set up a virtual environment (CPU builds pinned by
# .ci/constraints.txt, so pip never pulls CUDA wheels) and run the default test suite: every light
# extra (grader, bench, agent, local trainer, service, Ray pool, TRL and verifiers integrations). The verl integration has its own
# environment and command: bash tests/verl/run.sh.
# Extra arguments go to pytest, e.g. `bash tests/run.sh tests/advantages -q`.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${DRKERNEL_VENV:-$ROOT/.venv}"
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --disable-pip-version-check \
  -c "$ROOT/.ci/constraints.txt" -e "$ROOT[env,bench,dev,agent,local,serve,ray,trl,verifiers]"
cd "$ROOT"
# pytest exits 5 when it collects no test: that is a failure here too.
exec "$VENV/bin/python" -m pytest "$@"
