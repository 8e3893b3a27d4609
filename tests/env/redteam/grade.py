"""Grade redteam candidates one at a time with the drkernel CLI (black box) and print one line each.

usage: python tests/env/redteam/grade.py [--device cpu] [--seed N] [--out DIR] CANDIDATE.py [...]
       python tests/env/redteam/grade.py --manifest [--kind hack] [--filter SUBSTR] [--out DIR]

The task of a candidate is read from manifest.yaml (or from the candidate's file name prefix rtNN_).
With --manifest each line also shows the recorded baseline_cpu verdict, and a summary at the end counts,
per kind and class, how many passed / were flagged hacked / failed. Entries marked `seeded: true`
(persistence across evaluations) are graded twice with --seed 0 and the second verdict is reported.
Runs strictly sequentially (one evaluation at a time).
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
PY = os.environ.get("DRKERNEL_PYTHON", "/work/main/.venv/bin/python")


def load_manifest():
    path = os.path.join(HERE, "manifest.yaml")
    if not os.path.exists(path):
        return []
    entries, cur = [], None
    for line in open(path):
        line = line.rstrip("\n")
        if line.startswith("- "):
            cur = {}
            entries.append(cur)
            line = "  " + line[2:]
        m = re.match(r"^\s+(\w+):\s*(.*)$", line)
        if m and cur is not None:
            cur[m.group(1)] = m.group(2).strip().strip('"')
    return entries


def task_for(cand, manifest):
    rel = os.path.relpath(os.path.abspath(cand), HERE)
    for e in manifest:
        if e.get("candidate") == rel:
            return os.path.join(HERE, e["task"])
    m = re.match(r"(rt\d\d)_", os.path.basename(cand))
    hits = glob.glob(os.path.join(HERE, "tasks", m.group(1) + "_*.py")) if m else []
    if len(hits) != 1:
        raise SystemExit(f"cannot tell the task of {cand}")
    return hits[0]


def verdict(r):
    if r.get("hacked"):
        return "hacked: [" + ", ".join(r.get("hack_reasons") or []) + "]"
    if r.get("compiled") and r.get("correct"):
        return "pass (speedup %.3g, coverage %s)" % (r.get("speedup") or 0.0, r.get("coverage"))
    err = r.get("error") or {}
    return "fail (%s: %s)" % (err.get("stage"), (err.get("message") or "")[:160].replace("\n", " "))


def grade(cand, task, device, seed, out_dir, extra):
    cmd = [PY, "-m", "drkernel.cli", "eval-kernel", "--task", task, "--candidate", cand,
           "--device", device, "--json"] + (["--seed", str(seed)] if seed is not None else []) + extra
    env = dict(os.environ, PYTHONPATH=ROOT)
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    try:
        r = json.loads(p.stdout)
    except ValueError:
        r = {"error": {"stage": "cli", "message": (p.stdout + p.stderr)[-400:]}}
    if out_dir:
        os.makedirs(out_dir, exist_ok=True)
        name = os.path.relpath(os.path.abspath(cand), os.path.join(HERE, "candidates")).replace("/", "__")
        with open(os.path.join(out_dir, name + ".json"), "w") as f:
            json.dump(r, f, indent=1)
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("candidates", nargs="*")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--manifest", action="store_true")
    ap.add_argument("--kind", default=None)
    ap.add_argument("--filter", default=None)
    ap.add_argument("--no-timing", action="store_true")
    a = ap.parse_args()
    manifest = load_manifest()
    cands = list(a.candidates)
    if a.manifest:
        cands += [os.path.join(HERE, e["candidate"]) for e in manifest
                  if (a.kind is None or e.get("kind") == a.kind) and (a.filter is None or a.filter in e["candidate"])]
    extra = ["--no-timing"] if a.no_timing else []
    by_path = {os.path.join(HERE, e["candidate"]): e for e in manifest}
    summary = {}
    for c in cands:
        e = by_path.get(os.path.abspath(c), {})
        if e.get("seeded") == "true" and a.manifest:
            grade(c, task_for(c, manifest), a.device, 0, None, extra)
            r = grade(c, task_for(c, manifest), a.device, 0, a.out, extra)
        else:
            r = grade(c, task_for(c, manifest), a.device, a.seed, a.out, extra)
        v = verdict(r)
        base = f"   [baseline: {e['baseline_cpu']}]" if e.get("baseline_cpu") else ""
        print(f"{os.path.relpath(os.path.abspath(c), HERE)}: {v}{base}", flush=True)
        key = e.get("kind", "?") + (" class " + e["class"] if e.get("class") else "")
        t = summary.setdefault(key, {"n": 0, "pass": 0, "hacked": 0, "fail": 0})
        t["n"] += 1
        t["pass" if v.startswith("pass") else "hacked" if v.startswith("hacked") else "fail"] += 1
    if a.manifest:
        print("\nkind/class            n  pass  hacked  fail")
        for k in sorted(summary):
            t = summary[k]
            print(f"{k:<20} {t['n']:>3} {t['pass']:>5} {t['hacked']:>7} {t['fail']:>5}")


if __name__ == "__main__":
    sys.exit(main())
