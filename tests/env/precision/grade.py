"""Grade the precision corpus with the drkernel CLI (black box) and print one verdict line per entry.

usage: python tests/env/precision/grade.py [--device cpu|cuda] [--seed N] [--jobs 2] [--filter SUBSTR]
                                           [--all-devices] [--update-manifest]
                                           [--precision POLICY]

Runs `python -m drkernel.cli eval-kernel --task T --candidate C --device D --json` for every manifest
entry graded on that device (`both` plus `cpu` or `gpu`; --all-devices: every entry), at most --jobs at
a time (the interpreter from $DRKERNEL_PYTHON, default /work/main/.venv/bin/python, PYTHONPATH = repo
root, or $DRKERNEL_SRC to grade with another checkout's drkernel). An entry is right when an honest kernel passes and a shortcut or wrong kernel does not; the
summary lists the entries the grader gets wrong. --update-manifest records each verdict as
`current_grader_<device>` in manifest.yaml.
"""
import argparse
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
PY = os.environ.get("DRKERNEL_PYTHON", "/work/main/.venv/bin/python")


def grade(entry, device, seed, extra=()):
    cmd = [PY, "-m", "drkernel.cli", "eval-kernel", "--task", os.path.join(HERE, entry["task"]),
           "--candidate", os.path.join(HERE, entry["candidate"]), "--device", device, "--json"]
    if seed is not None:
        cmd += ["--seed", str(seed)]
    cmd += list(extra)
    env = dict(os.environ, PYTHONPATH=os.environ.get("DRKERNEL_SRC", ROOT))
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=os.environ.get("DRKERNEL_SRC", ROOT))
    try:
        return json.loads(p.stdout)
    except json.JSONDecodeError:
        return {"error": {"stage": "cli", "message": (p.stderr or p.stdout)[-300:]}}


def verdict(r):
    if r.get("compiled") and r.get("correct") and not r.get("hacked"):
        return "pass"
    if not r.get("compiled"):
        return "not compiled"
    if r.get("hacked"):
        return "hacked"
    return "incorrect"


def why(r):
    fb = (r.get("feedback") or "").splitlines()
    for pick in (lambda ln: ln.startswith("trial "), lambda ln: "max abs err" in ln,
                 lambda ln: ln.strip() and not ln.startswith(("Status", "Error"))):
        for line in fb:
            if pick(line):
                return line.strip()[:220]
    err = r.get("error") or {}
    return (err.get("message") or "").splitlines()[0][:160] if err.get("message") else ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--filter", default="")
    ap.add_argument("--all-devices", action="store_true")
    ap.add_argument("--update-manifest", action="store_true")
    ap.add_argument("--precision", default=None, help="passed to eval-kernel --precision (graders that have it)")
    args = ap.parse_args()
    mpath = os.path.join(HERE, "manifest.yaml")
    manifest = yaml.safe_load(open(mpath))
    here_dev = "cpu" if args.device == "cpu" else "gpu"
    entries = [e for e in manifest["candidates"] if args.filter in e["candidate"]
               and (args.all_devices or e.get("devices", "both") in ("both", here_dev))]
    wrong_verdicts = []
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        extra = ["--precision", args.precision] if args.precision else []
        results = pool.map(lambda e: (e, grade(e, args.device, args.seed, extra)), entries)
        for e, r in results:
            v = verdict(r)
            ok = (v == "pass") == (e["kind"] == "honest")
            if not ok:
                wrong_verdicts.append(e["candidate"])
            line = f"{'ok  ' if ok else 'MISS'} {e['kind']:8s} {v:12s} {e['candidate'][11:]:44s} {why(r) if v != 'pass' else ''}"
            print(line, flush=True)
            e[f"current_grader_{here_dev}"] = v if v == "pass" else f"{v}: {why(r)}"
    print(f"\n{len(entries) - len(wrong_verdicts)}/{len(entries)} right; wrong verdicts:")
    for c in wrong_verdicts:
        print("  ", c)
    if args.update_manifest:
        head = [ln for ln in open(mpath).read().splitlines() if ln.startswith("#")]
        with open(mpath, "w") as f:
            f.write("\n".join(head) + "\n")
            yaml.safe_dump(manifest, f, sort_keys=False, width=200, allow_unicode=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
