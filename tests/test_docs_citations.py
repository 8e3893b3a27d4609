"""Docstrings and docs stand on their own: no citation of the team's private reference notes."""

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CITATION = "reference " + "\u00a7"  # split so that this file does not match itself


def _files() -> list[Path]:
    files = sorted((ROOT / "drkernel").rglob("*.py"))
    files += sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
    return [f for f in files if f.is_file()]


def test_no_private_reference_citations() -> None:
    hits = [
        f"{f.relative_to(ROOT)}:{n}"
        for f in _files()
        for n, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1)
        if CITATION in line
    ]
    assert not hits, f"cite the paper or state the rule instead of {CITATION}N: {hits}"
