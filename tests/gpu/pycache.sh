#!/usr/bin/env bash
# Bytecode for a machine whose Python may not write it: compiles the interpreter's site-packages
# (torch, triton, ...), the carried verl site when installed ($VERL_SITE) and this checkout into one
# pycache prefix ($DRKERNEL_PYCACHE, /tmp/drkernel-pycache), which every process then reads through
# PYTHONPYCACHEPREFIX (tests/gpu/verl/env.sh exports it once this has run; install.sh runs it).
#   bash tests/gpu/pycache.sh [--measure]      # --measure: import times without and with it
# Why: the GPU image sets PYTHONDONTWRITEBYTECODE=1 and ships torch without .pyc files, so every
# Python process that imports torch (each of verl's chain, each grader's zygote) compiles torch's
# sources again: `import torch` 4.6 s without, 2.7 s with a prefix that then lacked the standard
# library, and a process that imports torch and makes a CUDA context 4.1 s against 2.2 s (H200; 15 s
# to compile 25,290 files once; docs/results/h200-2026-11-28d.md). With a prefix set Python looks for
# bytecode only there, so the standard library, the carried site and the checkout are compiled into it
# as well. Idempotent (compileall skips what is up to date). The prefix is this user's alone (created
# 0700, refused if another user owns it, not writable by others): every process that trusts it runs
# its bytecode before any confinement.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PY="${PYTHON:-python3}"
PREFIX="${DRKERNEL_PYCACHE:-/tmp/drkernel-pycache}"
# the standard library, then the interpreter's site-packages (those that exist), the carried site, the checkout
mapfile -t TARGETS < <("$PY" -c '
import os, site, sys, sysconfig
paths = [sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"]]
paths += [p for p in site.getsitepackages() if p.startswith(sys.prefix)]
paths = [os.path.realpath(p) for p in paths if os.path.isdir(p)]
# a directory inside another one listed is compiled (and counted) with it
keep = [p for p in dict.fromkeys(paths) if not any(p != q and p.startswith(q + os.sep) for q in paths)]
print("\n".join(keep))')
[ -d "${VERL_SITE:-/tmp/verl-site}" ] && TARGETS+=("${VERL_SITE:-/tmp/verl-site}")
TARGETS+=("$ROOT/drkernel")
if [ -e "$PREFIX" ] && [ ! -O "$PREFIX" ]; then
  echo "pycache: $PREFIX belongs to another user: refused (set DRKERNEL_PYCACHE to a directory of yours)" >&2
  exit 1
fi
mkdir -p -m 700 "$PREFIX"
imports() {  # label, then the environment to run under
  local label="$1"; shift
  for mod in torch triton "torch, triton, drkernel.env.process.harness"; do
    s=$(env "$@" "$PY" -c "import time; t = time.perf_counter(); import $mod; print(f'{time.perf_counter() - t:.2f}')" 2>/dev/null | tail -1)
    echo "pycache: import $mod, $label: ${s:-failed} s"
  done
  if command -v nvidia-smi > /dev/null; then  # what a grader worker's start costs before its first request
    s=$(env "$@" "$PY" -c "import time; t = time.perf_counter(); import torch; torch.ones(1, device='cuda'); print(f'{time.perf_counter() - t:.2f}')" 2>/dev/null | tail -1)
    echo "pycache: import torch and a CUDA context, $label: ${s:-failed} s"
  fi
}
if [ "${1:-}" = "--measure" ]; then
  echo "pycache: python writes bytecode: $("$PY" -c 'import sys; print(not sys.flags.dont_write_bytecode)');" \
       "torch .pyc next to its sources: $(find "$("$PY" -c 'import os, torch; print(os.path.dirname(torch.__file__))')" -name '*.pyc' | wc -l)"
  imports "no prefix" PYTHONPYCACHEPREFIX=
fi
t0=$SECONDS
rm -f "$PREFIX/.complete"
# compileall's status is not used: a few files of any large site do not compile (Python 2 test data)
PYTHONPYCACHEPREFIX="$PREFIX" "$PY" -m compileall -q -j 0 "${TARGETS[@]}" > /dev/null 2>&1 || true
chmod -R go-w "$PREFIX"
sources=$(find "${TARGETS[@]}" -name '*.py' 2>/dev/null | wc -l)
compiled=$(find "$PREFIX" -name '*.pyc' | wc -l)
echo "pycache: ${TARGETS[*]} compiled into $PREFIX in $((SECONDS - t0)) s ($compiled bytecode files for $sources sources)"
# env.sh exports the prefix only when it is whole: a prefix without the standard library's bytecode
# is slower than none (its imports compile in memory every time)
if [ "$sources" -gt 0 ] && [ $((compiled * 100)) -ge $((sources * 95)) ]; then
  touch "$PREFIX/.complete"
else
  echo "pycache: WARNING: only $compiled of $sources sources compiled; the prefix is not marked complete" >&2
fi
if [ "${1:-}" = "--measure" ]; then
  imports "prefix" PYTHONPYCACHEPREFIX="$PREFIX"
  imports "prefix, second run" PYTHONPYCACHEPREFIX="$PREFIX"
fi
