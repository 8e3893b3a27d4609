#!/usr/bin/env bash
# Device side, after every chunk is staged (tests/gpu/verl/README.md):
#   bash tests/gpu/verl/install.sh       # then: export PYTHONPATH=/tmp/verl-site:$PYTHONPATH
# (the stage scripts source tests/gpu/verl/env.sh, which also exports the bytecode prefix; a command
# of your own should source it too, or its processes compile everything on import)
# Re-joins vllm from its parts, checks every file against SHA256SUMS, installs all wheels with
# `pip install --no-index --no-deps --no-compile --target $VERL_SITE` (/tmp/verl-site), compiles
# their bytecode, the image's and this checkout's into one prefix (tests/gpu/pycache.sh, which env.sh
# then exports; VERL_COMPILE=0 skips) and writes
# drkernel's egg-info there (its `verl.plugins` entry point, from setup.py) so that `import verl`
# loads drkernel's plugin as in a pip install. Prints what it installed. Idempotent: a second run
# with the same SHA256SUMS re-checks, brings the bytecode up to date and prints.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
STAGE="${VERL_STAGE:-/tmp/verl-stage}"
SITE="${VERL_SITE:-/tmp/verl-site}"
PY="${PYTHON:-python3}"
cd "$STAGE"
[ -f SHA256SUMS ] && [ -f MANIFEST ] || { echo "install: no SHA256SUMS/MANIFEST in $STAGE: stage the chunks first" >&2; exit 2; }
missing=$(while read -r chunk file; do [ -f "$file" ] || echo "$chunk"; done < MANIFEST | sort -u | tr '\n' ' ')
[ -z "$missing" ] || { echo "install: files of chunk(s) $missing are not staged" >&2; exit 2; }
t0=$SECONDS
for first in *.whl.part-00; do
  [ -e "$first" ] || continue
  whole="${first%.part-00}"
  [ -f "$whole" ] || cat "$whole".part-* > "$whole"
done
if ! sha256sum --quiet -c SHA256SUMS; then
  echo "install: checksum mismatch (above); re-stage the chunk holding that file" >&2; exit 3
fi
echo "install: $(grep -c . SHA256SUMS) files match SHA256SUMS"
stamp="$(sha256sum SHA256SUMS | cut -c1-16)"
if [ "$(cat "$SITE/.verl-stage-installed" 2>/dev/null || true)" != "$stamp" ]; then
  rm -rf "$SITE"; mkdir -p "$SITE"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --disable-pip-version-check \
    --target "$SITE" ./*.whl
  echo "$stamp" > "$SITE/.verl-stage-installed"
else
  echo "install: already installed in $SITE (same SHA256SUMS)"
fi
# drkernel's entry points (verl.plugins) without installing the package itself: the working tree
# stays the code that runs (PYTHONPATH=$ROOT first).
( cd "$ROOT" && "$PY" setup.py -q egg_info --egg-base "$SITE" >/dev/null 2>&1 ) \
  || echo "install: WARNING: drkernel egg_info failed; set VERL_USE_EXTERNAL_MODULES=drkernel.verl.plugin"
printf 'install: %s\n' "$(ls "$SITE" | grep -E '\.(dist|egg)-info$' | sed -E 's/\.(dist|egg)-info$//' | tr '\n' ' ')"
# Bytecode once, in parallel, into one prefix that env.sh then exports (tests/gpu/pycache.sh): the
# image writes none (PYTHONDONTWRITEBYTECODE=1) and ships torch without any. VERL_COMPILE=0 skips.
"$PY" -c 'import sys; print(f"install: python writes bytecode: {not sys.flags.dont_write_bytecode}")' || true
if [ "${VERL_COMPILE:-1}" != 0 ]; then
  VERL_SITE="$SITE" PYTHON="$PY" bash "$ROOT/tests/gpu/pycache.sh" | sed 's/^pycache:/install:/' \
    || echo "install: WARNING: no bytecode prefix (above); every process compiles what it imports"
fi
printf 'install: %d distributions in %s, %s MiB, %d s\n' "$(ls "$SITE" | grep -cE '\.(dist|egg)-info$')" \
  "$SITE" "$(du -sm "$SITE" | cut -f1)" "$((SECONDS - t0))"
