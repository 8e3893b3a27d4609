#!/bin/bash
# usage: grade.sh TASK CAND [seed]  -> writes results/<cand>.json and prints summary
cd /work/wt-redteam
T=$1; C=$2; S=${3:-0}
name=$(basename $C .py)
out=tests/env/precision_redteam/results/$(basename $(dirname $C))__$name.s$S.json
PYTHONPATH=/work/wt-redteam timeout 600 /work/main/.venv/bin/python -m drkernel.cli eval-kernel --task $T --candidate $C --device cpu --json --seed $S > $out 2> $out.err
/work/main/.venv/bin/python - "$out" <<'PY'
import json,sys
try:
    r=json.load(open(sys.argv[1]))
except Exception as e:
    print(sys.argv[1], "PARSE FAIL", e); sys.exit()
msg=(r.get("error") or {}).get("message") or r.get("feedback") or ""
print(sys.argv[1].split('/')[-1], "correct=",r.get("correct"),"hacked=",r.get("hacked"), "|", str(msg)[:300].replace("\n"," "))
PY
