#!/usr/bin/env bash
# Bytecode for a machine whose Python may not write it: compiles the interpreter's site-packages
# (torch, triton, ...), the carried verl site when installed ($VERL_SITE) and this checkout into one
# pycache prefix ($DRKERNEL_PYCACHE, /tmp/drkernel-pycache), which every process then reads through
# PYTHONPYCACHEPREFIX (tests/gpu/verl/env.sh exports it once this has run; install.sh runs it).
#   bash tests/gpu/pycache.sh [--measure]      # --measure: import times without and with it
# Why: the GPU image sets PYTHONDONTWRITEBYTECODE=1 and ships torch without .pyc files, so every
# Python process (each of verl's chain, each grader worker, each candidate process) compiles
# torch's sources again on import: `import torch` 4.6 s without, 2.7 s with the prefix, and a process
# that imports torch and makes a CUDA context 4.1 s against 2.2 s (H200, 15 s to compile 25,290
# files once; docs/results/h200-2026-11-28d.md). With a prefix set, Python looks for bytecode only there, hence
# the carried site and the checkout are compiled into it as well. Idempotent (compileall skips
# what is up to date).
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PY="${PYTHON:-python3}"
PREFIX="${DRKERNEL_PYCACHE:-/tmp/drkernel-pycache}"
SITES=$("$PY" -c 'import site, sys; print(" ".join(p for p in site.getsitepackages() if p.startswith(sys.prefix)))')
TARGETS=($SITES)
[ -d "${VERL_SITE:-/tmp/verl-site}" ] && TARGETS+=("${VERL_SITE:-/tmp/verl-site}")
TARGETS+=("$ROOT/drkernel")
imports() {  # label, then the environment to run under
  local label="$1"; shift
  for mod in torch triton "torch, triton, drkernel.env.process.harness"; do
    s=$(env "$@" "$PY" -c "import time; t = time.perf_counter(); import $mod; print(f'{time.perf_counter() - t:.2f}')" 2>/dev/null | tail -1)
    echo "pycache: import $mod, $label: ${s:-failed} s"
  done
}
if [ "${1:-}" = "--measure" ]; then
  echo "pycache: python writes bytecode: $("$PY" -c 'import sys; print(not sys.flags.dont_write_bytecode)');" \
       "torch .pyc next to its sources: $(find "$("$PY" -c 'import os, torch; print(os.path.dirname(torch.__file__))')" -name '*.pyc' | wc -l)"
  imports "no prefix" PYTHONPYCACHEPREFIX=
fi
t0=$SECONDS
PYTHONPYCACHEPREFIX="$PREFIX" "$PY" -m compileall -q -j 0 "${TARGETS[@]}" > /dev/null 2>&1 || true
echo "pycache: ${TARGETS[*]} compiled into $PREFIX in $((SECONDS - t0)) s ($(find "$PREFIX" -name '*.pyc' | wc -l) files)"
touch "$PREFIX/.complete"  # env.sh exports the prefix only once it is whole
if [ "${1:-}" = "--measure" ]; then
  imports "prefix" PYTHONPYCACHEPREFIX="$PREFIX"
  imports "prefix, second run" PYTHONPYCACHEPREFIX="$PREFIX"
fi
