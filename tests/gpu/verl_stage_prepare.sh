#!/usr/bin/env bash
# Prepare, on a machine WITH internet, the wheels the GPU machine's verl stage needs
# (tests/gpu/run.sh verl; device steps in tests/gpu/verl/README.md):
#
#   bash tests/gpu/verl_stage_prepare.sh TARGET      # e.g. /work/main/.whl (a git-ignored folder of the
#                                                    # checkout the device calls send)
#
# 1. downloads every `name==version` of tests/gpu/verl_wheels.txt for CPython 3.12 manylinux x86_64
#    (--no-deps: the list is the whole closure) into $CACHE; antlr4-python3-runtime is sdist-only
#    on PyPI and is built into a wheel here;
# 2. strips ray (ray/jars/ray_dist.jar, *.js.map: 75.6 -> 43.4 MiB; the dashboard build stays,
#    without it ray.init waits ~60 s) and splits vllm into parts of at most $PART_MIB MiB;
# 3. writes SHA256SUMS (every wheel, every vllm part, the whole vllm wheel) and MANIFEST (which
#    file goes in which chunk);
# 4. packs TARGET/c1 ... TARGET/cN, each at most $CHUNK_MIB MiB (the repo, ~3 MiB, travels with
#    every call; the limit is 64 MiB a call). Every chunk holds SHA256SUMS and MANIFEST.
# Prints the total MiB and the number of chunks. Re-running reuses the downloads in $CACHE.
#
# Environment: CACHE [/tmp/drkernel-verl-wheels], CHUNK_MIB [59], PART_MIB [CHUNK_MIB - 1],
# PYTHON [python3] (any Python with pip; the wheels are chosen for 3.12 whatever it is).
set -euo pipefail
TARGET="${1:?usage: verl_stage_prepare.sh TARGET_DIR (e.g. /work/main/.whl)}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
LIST="$HERE/verl_wheels.txt"
CACHE="${CACHE:-/tmp/drkernel-verl-wheels}"
CHUNK_MIB="${CHUNK_MIB:-59}"
PART_MIB="${PART_MIB:-$((CHUNK_MIB - 1))}"
PY="${PYTHON:-python3}"
DL="$CACHE/download"
mkdir -p "$DL"

PLATFORMS=()
for p in manylinux_2_35 manylinux_2_34 manylinux_2_31 manylinux_2_28 manylinux_2_27 manylinux_2_17 manylinux2014 manylinux1; do
  PLATFORMS+=(--platform "${p}_x86_64")
done

norm() { echo "$1" | tr 'A-Z-.' 'a-z__'; }   # wheel file names use the normalised project name

have() {  # is name==version already downloaded?
  local n v f
  n="$(norm "$1")"; v="$2"
  for f in "$DL"/*.whl; do
    [ -e "$f" ] || continue
    local base; base="$(basename "$f")"
    [ "$(norm "${base%%-*}")" = "$n" ] && [ "$(echo "$base" | cut -d- -f2)" = "$v" ] && return 0
  done
  return 1
}

echo "== download into $DL"
while read -r spec; do
  spec="${spec%%#*}"; spec="$(echo "$spec" | xargs)"
  [ -n "$spec" ] || continue
  name="${spec%%==*}"; version="${spec##*==}"
  if have "$name" "$version"; then continue; fi
  if [ "$name" = "antlr4-python3-runtime" ]; then
    "$PY" -m pip wheel -q --no-deps -w "$DL" "$spec"
  else
    "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      "${PLATFORMS[@]}" -d "$DL" "$spec"
  fi
  have "$name" "$version" || { echo "no wheel for $spec" >&2; exit 1; }
done < "$LIST"

echo "== strip ray, split vllm"
WORK="$CACHE/work"
rm -rf "$WORK"; mkdir -p "$WORK"
for f in "$DL"/*.whl; do
  expected=0
  while read -r spec; do
    spec="${spec%%#*}"; spec="$(echo "$spec" | xargs)"; [ -n "$spec" ] || continue
    base="$(basename "$f")"
    if [ "$(norm "${base%%-*}")" = "$(norm "${spec%%==*}")" ] && [ "$(echo "$base" | cut -d- -f2)" = "${spec##*==}" ]; then
      expected=1; break
    fi
  done < "$LIST"
  [ "$expected" = 1 ] && cp "$f" "$WORK/"   # wheels of older lists stay in the cache, not in the chunks
done
RAY="$(ls "$WORK"/ray-*.whl)"
zip -q -d "$RAY" 'ray/jars/ray_dist.jar' '*.js.map' || { rc=$?; [ $rc -eq 12 ] || exit $rc; }  # 12: nothing to delete
VLLM="$(ls "$WORK"/vllm-*.whl)"
( cd "$WORK" && split -b "${PART_MIB}M" -d -a 2 "$(basename "$VLLM")" "$(basename "$VLLM").part-" )
( cd "$WORK" && sha256sum -- *.whl *.part-* > SHA256SUMS )
rm "$VLLM"   # travels as its parts; install.sh re-joins and checks it against SHA256SUMS

echo "== pack $TARGET/c1..cN (<= $CHUNK_MIB MiB each)"
"$PY" - "$WORK" "$TARGET" "$CHUNK_MIB" <<'PYEOF'
import os, shutil, sys
from pathlib import Path

work, target, limit = Path(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3]) * 2**20
files = sorted((p for p in work.iterdir() if p.name not in ("SHA256SUMS", "MANIFEST")),
               key=lambda p: (-p.stat().st_size, p.name))
# first fit decreasing; the vllm parts (largest) open the first chunks
chunks: list[list[Path]] = []
sizes: list[int] = []
room = limit - 64 * 1024  # SHA256SUMS and MANIFEST go in every chunk
for f in files:
    s = f.stat().st_size
    if s > room:
        sys.exit(f"{f.name} is {s / 2**20:.2f} MiB, over the chunk limit")
    for i, used in enumerate(sizes):
        if used + s <= room:
            chunks[i].append(f); sizes[i] += s
            break
    else:
        chunks.append([f]); sizes.append(s)
# the smallest chunk last: the last call (install + smoke + PPO steps) moves the least
order = sorted(range(len(chunks)), key=lambda i: -sizes[i])
chunks = [chunks[i] for i in order]; sizes = [sizes[i] for i in order]
for old in target.glob("c[0-9]*"):
    shutil.rmtree(old)
target.mkdir(parents=True, exist_ok=True)
manifest = []
for n, files_n in enumerate(chunks, 1):
    for f in files_n:
        manifest.append(f"c{n} {f.name}")
(work / "MANIFEST").write_text("\n".join(manifest) + "\n")
for n, files_n in enumerate(chunks, 1):
    d = target / f"c{n}"
    d.mkdir()
    for f in files_n:
        os.link(f, d / f.name) if os.stat(f).st_dev == os.stat(target).st_dev else shutil.copy2(f, d / f.name)
    for extra in ("SHA256SUMS", "MANIFEST"):
        shutil.copy2(work / extra, d / extra)
total = sum(sizes)
for n, s in enumerate(sizes, 1):
    print(f"c{n}: {len(chunks[n - 1])} files, {s / 2**20:.2f} MiB")
print(f"total {total / 2**20:.2f} MiB in {len(chunks)} chunks; {len(files)} files")
PYEOF
