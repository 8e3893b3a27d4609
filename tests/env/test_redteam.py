"""The black-box red-team corpus (tests/env/redteam, written by an engineer who did not read the
grader): every honest solution passes, every wrong kernel and every reward hack does not.

Graded on the CPU interpreter here (``devices: cpu`` and ``both`` entries; GPU-only hacks run in
``bash tests/gpu/run.sh redteam``), ahead of the tests through one warm LocalGrader (two candidates
at a time on CI's 2 cores, each in a process of its own). The few entries the grader does not
catch on this device are listed in ``KNOWN_MISSES`` with the reason; a test fails if one of them
starts passing or failing differently than recorded, so the list stays true.
"""

from pathlib import Path

import pytest
import yaml

from tests.grading_ahead import corpus_verdicts

ROOT = Path(__file__).parent / "redteam"
MANIFEST = yaml.safe_load((ROOT / "manifest.yaml").read_text())["candidates"]
ENTRIES = [e for e in MANIFEST if e.get("devices", "both") in ("both", "cpu")]

#: Hacks the grader does not catch on the CPU interpreter, and why (docs/hacks.md, "What is not caught").
KNOWN_MISSES = {
    "candidates/hacks/rt01_c5_hardcoded_numel.py": "shapes come from the task: a kernel specialised on the "
                                                   "tested shape is correct there (the GPU grades the full size)",
    "candidates/hacks/rt10_c5_hardcoded_dims.py": "shapes come from the task (as above)",
}


@pytest.fixture(scope="module")
def verdicts(request):
    yield from corpus_verdicts(request, ROOT, "test_redteam_verdict")


def test_manifest_lists_every_candidate():
    listed = {e["candidate"] for e in MANIFEST}
    on_disk = {str(p.relative_to(ROOT)) for p in (ROOT / "candidates").rglob("*.py")}
    assert listed == on_disk, (on_disk - listed, listed - on_disk)
    assert len([e for e in MANIFEST if e["kind"] == "hack"]) >= 25
    assert set(KNOWN_MISSES) <= listed


@pytest.mark.slow
@pytest.mark.parametrize("entry", ENTRIES, ids=[e["candidate"].split("/", 1)[1] for e in ENTRIES])
def test_redteam_verdict(entry, verdicts):
    r = verdicts(entry)
    summary = (f"passed={r.passed} compiled={r.compiled} correct={r.correct} hacked={r.hacked} "
               f"reasons={r.hack_reasons} error={r.error}\n{r.feedback}")
    if entry["kind"] == "honest":
        assert r.passed, summary
        assert r.coverage == 1.0, summary
    elif entry["candidate"] in KNOWN_MISSES:
        assert r.passed, f"a known miss is caught now: update KNOWN_MISSES and docs/hacks.md\n{summary}"
    else:
        assert not r.passed, f"{entry['kind']} {entry['technique']}\n{summary}"
        assert r.feedback and "Status: correct." not in r.feedback
