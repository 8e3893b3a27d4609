"""The precision corpus (tests/env/precision, written black-box against the task format): every honest
kernel -- about as accurate as eager PyTorch against a float64 oracle, whatever its summation order or
rounding, often more accurate -- passes; every precision shortcut (TF32/fp16/bf16/fp8 products or
internals, approximate transcendentals, fewer reduction terms, also hidden under a residual, an offset
or a bf16 input) and every wrong kernel does not.

`truth.py` beside the corpus grounds each label in numbers (the candidate's error against a float64
evaluation of the task, next to the reference's own error; manifest `measured`). Graded on the CPU
interpreter here (``devices: both`` and ``cpu`` entries; ``gpu`` entries need a GPU: default-precision
tl.dot is TF32 there, fp8 needs sm_89+), ahead of the tests through one warm LocalGrader, two
candidates at a time. Some honest entries also depend on interpreter gaps being closed (manifest
``cpu_note``): they are not skipped, the note says why such an entry fails on the CPU.
"""

from pathlib import Path

import pytest
import yaml

from tests.grading_ahead import corpus_verdicts

ROOT = Path(__file__).parent / "precision"
MANIFEST = yaml.safe_load((ROOT / "manifest.yaml").read_text())["candidates"]
ENTRIES = [e for e in MANIFEST if e.get("devices", "both") in ("both", "cpu")]
SEED = 2026  # fixed: CI's verdicts are reproducible (truth.py measures the margins over many seeds)


@pytest.fixture(scope="module")
def verdicts(request):
    yield from corpus_verdicts(request, ROOT, "test_precision_verdict", seed=SEED)


def test_manifest_lists_every_candidate():
    listed = {e["candidate"] for e in MANIFEST}
    on_disk = {str(p.relative_to(ROOT)) for p in (ROOT / "candidates").rglob("*.py")}
    assert listed == on_disk, (on_disk - listed, listed - on_disk)
    kinds = [e["kind"] for e in MANIFEST]
    assert kinds.count("honest") >= 20 and kinds.count("shortcut") >= 16 and kinds.count("wrong") >= 6
    for e in MANIFEST:
        assert e["kind"] in ("honest", "shortcut", "wrong"), e
        assert e["devices"] in ("both", "gpu", "cpu"), e
        assert (ROOT / e["task"]).is_file(), e
        assert e["candidate"].split("/")[1] == e["kind"], e
        assert e.get("technique") and e.get("measured"), e


@pytest.mark.slow
@pytest.mark.parametrize("entry", ENTRIES, ids=[e["candidate"].split("/", 1)[1] for e in ENTRIES])
def test_precision_verdict(entry, verdicts):
    r = verdicts(entry)
    summary = (f"passed={r.passed} compiled={r.compiled} correct={r.correct} hacked={r.hacked} "
               f"reasons={r.hack_reasons} error={r.error}\nmeasured: {entry.get('measured')}\n"
               f"cpu_note: {entry.get('cpu_note')}\n{r.feedback}")
    if entry["kind"] == "honest":
        assert r.passed, f"honest {entry['technique']}\n{summary}"
        assert r.coverage == 1.0, summary
    else:
        assert not r.passed, f"{entry['kind']} {entry['technique']}\n{summary}"
        assert r.feedback and "Status: correct." not in r.feedback, summary
