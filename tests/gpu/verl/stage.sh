#!/usr/bin/env bash
# Device side, one staging call per chunk (tests/gpu/verl/README.md):
#   bash tests/gpu/verl/stage.sh N       # run from the repo root with `.whl/cN` carried
# Copies the carried .whl/cN into $VERL_STAGE (/tmp/verl-stage) and prints what is there so far
# against MANIFEST. Must take about a second: the machine stays warm only ~30 s between calls.
set -euo pipefail
N="${1:?usage: stage.sh N (the chunk number carried as .whl/cN)}"
STAGE="${VERL_STAGE:-/tmp/verl-stage}"
SRC=".whl/c$N"
[ -d "$SRC" ] || { echo "stage: $SRC is not here (carry it: carry=[\".whl/c$N\"])" >&2; exit 2; }
mkdir -p "$STAGE"
cp -f "$SRC"/* "$STAGE"/
total=$(grep -c . "$STAGE/MANIFEST")
have=0; missing=()
while read -r chunk file; do
  if [ -f "$STAGE/$file" ]; then have=$((have + 1)); else missing+=("$chunk"); fi
done < "$STAGE/MANIFEST"
chunks_missing=$(printf '%s\n' "${missing[@]:-}" | sort -u | grep . | tr '\n' ' ' || true)
echo "stage: c$N copied ($(ls "$SRC" | wc -l) files); $have of $total files staged in $STAGE;" \
  "chunks still missing: ${chunks_missing:-none}"
