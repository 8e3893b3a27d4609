"""One table of integrity findings (drkernel.env.guards.hacks): every id the checks can emit is in it, the
docs list every id, and the feedback names what was seen."""

import re
from pathlib import Path

from drkernel.env.guards.hacks import HACKS, feedback_line
from drkernel.env.result import EvalResult

ROOT = Path(__file__).resolve().parents[2]


def _emitted_ids() -> set[str]:
    """Ids passed to the places that record findings, read from the source."""
    ids = set()
    patterns = [r'self\.add\("([a-z_]+)"', r'Finding\("([a-z_]+)"', r'finding\("([a-z_]+)"', r'_add\("([a-z_]+)"',
                r'note\("([a-z_]+)"', r'_guarded\([^,]+, "([a-z_]+)"', r'gate\(\("([a-z_]+)"',
                r'\("(harness_tampered|forbidden_operation|host_compute)", f?"']
    for path in (ROOT / "drkernel" / "env").rglob("*.py"):
        text = path.read_text()
        for pat in patterns:
            ids.update(re.findall(pat, text))
    banned = re.search(r"_BANNED_IMPORTS = \{(.*?)\n\}", (ROOT / "drkernel/env/guards/static_checks.py").read_text(), re.S)
    ids.update(re.findall(r'"([a-z_]+)": \{', banned.group(1)))
    return ids


def test_every_emitted_id_is_in_the_table():
    emitted = _emitted_ids()
    assert {"forbidden_operation", "host_compute", "timing_module", "try_except", "harness_tampered"} <= emitted
    assert emitted <= set(HACKS), emitted - set(HACKS)


def test_the_docs_list_every_id():
    doc = (ROOT / "docs" / "hacks.md").read_text()
    missing = [h for h in HACKS if f"`{h}`" not in doc]
    assert not missing, missing


def test_feedback_names_what_was_seen():
    r = EvalResult(compiled=True, correct=True)
    r.add_hack("timing_module")
    r.details["integrity"] = [{"id": "timing_module", "detail": "line 3: imports time"}]
    from drkernel.env.judge.feedback import build_feedback

    text = build_feedback(r)
    assert "Importing time or timeit is not allowed" in text and "line 3: imports time" in text
    assert "must not be reassigned" not in text  # a bare `import time` is not a patch
    assert feedback_line("no_such_id") == "integrity check no_such_id fired."
