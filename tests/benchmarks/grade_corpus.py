"""Grade an adversarial corpus and tabulate the verdicts by kind and class.

    python tests/benchmarks/grade_corpus.py tests/env/redteam --device cpu --out redteam_cpu.json
    PYTHONPATH=old/checkout python tests/benchmarks/grade_corpus.py tests/env/redteam --device cuda

A corpus directory holds ``tasks/*.py``, ``candidates/{honest,wrong,hacks,shortcut}/*.py`` and optionally a
``manifest.yaml`` (entries with ``candidate``, ``task``, ``kind``, ``class``, ``devices``); without a
manifest a candidate's task is the task file sharing its first four characters. Uses only the
grader's stable public API (``LocalGrader``, ``EvalConfig``, ``Task``), so the same script grades with
an older drkernel on ``PYTHONPATH`` for a before/after table. A candidate counts as *caught* when it
does not pass (honest candidates must pass, everything else must not).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def load_entries(root: Path, device: str) -> list[dict]:
    manifest = root / "manifest.yaml"
    entries: list[dict] = []
    if manifest.exists():
        import yaml

        data = yaml.safe_load(manifest.read_text()) or []
        for e in data.get("candidates", []) if isinstance(data, dict) else data:
            entries.append({"candidate": e["candidate"].removeprefix("candidates/"),
                            "task": e["task"].removeprefix("tasks/"), "kind": e.get("kind"),
                            "class": e.get("class"), "devices": e.get("devices", "both")})
    else:
        tasks = {p.stem[:4]: p.name for p in (root / "tasks").glob("*.py")}
        for kind in ("honest", "wrong", "hacks"):
            for c in sorted((root / "candidates" / kind).glob("*.py")):
                entries.append({"candidate": f"{kind}/{c.name}", "task": tasks[c.stem[:4]],
                                "kind": {"hacks": "hack"}.get(kind, kind), "class": None, "devices": "both"})
    want = "gpu" if device.startswith("cuda") else "cpu"
    return [e for e in entries if e["devices"] in ("both", want)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("corpus")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--capacity", type=int, default=None)
    ap.add_argument("--out", default=None)
    ap.add_argument("--label", default=None, help="name of this grader version in the output")
    args = ap.parse_args(argv)

    import drkernel
    from drkernel.env import EvalConfig, LocalGrader, Task  # (public names: an older checkout has them too)

    root = Path(args.corpus)
    entries = load_entries(root, args.device)
    if args.device == "cpu":
        from drkernel.env.config import cpu_fast

        config = cpu_fast(EvalConfig(device="cpu"))
    else:
        config = EvalConfig(device=args.device)
    cand_root = root / "candidates"
    rows: list[dict] = []
    t0 = time.monotonic()
    with LocalGrader(config, capacity=args.capacity) as g:
        def one(e: dict) -> dict:
            task = Task.from_file(root / "tasks" / e["task"])
            src = (cand_root / e["candidate"]).read_text()
            try:
                r = g.grade(task, src)
                verdict = {"passed": r.passed, "compiled": r.compiled, "correct": r.correct, "hacked": r.hacked,
                           "reasons": list(r.hack_reasons), "speedup": r.speedup, "coverage": r.coverage,
                           "error": (r.error.stage + ": " + r.error.message[:200]) if r.error else None}
            except Exception as exc:  # noqa: BLE001 - an environment failure is reported, not graded
                verdict = {"passed": None, "error": f"{type(exc).__name__}: {exc}"[:300]}
            row = {**e, **verdict}
            row["caught"] = None if row.get("passed") is None else (
                row["passed"] if e["kind"] == "honest" else not row["passed"])
            print(("ok   " if row["caught"] else "MISS ") + f"{e['candidate']:<58} " + (
                "pass" if row.get("passed") else (",".join(row.get("reasons") or []) or (row.get("error") or "")[:70])),
                flush=True)
            return row

        with ThreadPoolExecutor(max_workers=g.capacity) as pool:
            rows = list(pool.map(one, entries))
    seconds = time.monotonic() - t0
    summary: dict[str, dict] = {}
    for kind in ("honest", "wrong", "hack", "shortcut"):
        ks = [r for r in rows if r["kind"] == kind]
        summary[kind] = {"n": len(ks), "ok": sum(bool(r["caught"]) for r in ks)}
    by_class: dict[str, dict] = {}
    for r in rows:
        if r["kind"] == "hack":
            c = by_class.setdefault(str(r.get("class")), {"n": 0, "caught": 0})
            c["n"] += 1
            c["caught"] += bool(r["caught"])
    out = {"grader": args.label or getattr(drkernel, "__file__", "?"), "device": args.device, "seconds": seconds,
           "evaluations_per_min": 60 * len(rows) / seconds if seconds else None, "summary": summary,
           "hacks_by_class": by_class, "rows": rows}
    print(f"\n{args.label or 'grader'} on {args.device}: honest {summary['honest']['ok']}/{summary['honest']['n']} "
          f"pass, wrong {summary['wrong']['ok']}/{summary['wrong']['n']} caught, hacks "
          f"{summary['hack']['ok']}/{summary['hack']['n']} caught"
          + (f", precision shortcuts {summary['shortcut']['ok']}/{summary['shortcut']['n']} caught"
             if summary["shortcut"]["n"] else "")
          + f" ({len(rows)} evaluations in {seconds:.0f} s)")
    for c, v in sorted(by_class.items()):
        print(f"  class {c}: {v['caught']}/{v['n']}")
    if args.out:
        Path(args.out).write_text(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
