"""Import a local KernelBench checkout as a drkernel suite.

KernelBench (https://github.com/ScalingIntelligence/KernelBench) is MIT-licensed,
Copyright (c) 2023 Anne Ouyang, Simon Guo, Azalia Mirhoseini. The importer copies the task files,
keeps that notice (NOTICE.md and the license text in the suite, and a two-line header in every
copied file) and writes an env.yaml with KernelBench-appropriate defaults. Nothing is downloaded:
point it at a checkout you already have.

Accepted layouts: ``DIR/KernelBench/level1/*.py`` (the repository root) or ``DIR/level1/*.py``.
Task ``levelL/N_Name.py`` becomes ``tasks/lL_NNN_Name.py`` (zero-padded, so ids sort by level, then
number). Files are not executed while importing (level 4 needs ``transformers``).
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

COPYRIGHT = "Copyright (c) 2023 Anne Ouyang, Simon Guo, Azalia Mirhoseini"
UPSTREAM = "https://github.com/ScalingIntelligence/KernelBench"
DEFAULT_LEVELS = (1, 2, 3)
"""Level 4 (whole HF models) needs ``transformers`` and full-size GPUs: ask for it explicitly."""

MIT_LICENSE = f"""MIT License

{COPYRIGHT}

Permission is hereby granted, free of charge, to any person obtaining a copy
of this software and associated documentation files (the "Software"), to deal
in the Software without restriction, including without limitation the rights
to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
copies of the Software, and to permit persons to whom the Software is
furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all
copies or substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
SOFTWARE.
"""

_TASK_FILE = re.compile(r"^(\d+)_(.+)\.py$")


class KernelBenchImportError(ValueError):
    """The source directory is not a usable KernelBench checkout, or the destination is taken."""


@dataclass
class ImportReport:
    suite_dir: Path
    suite_id: str
    levels: list[int]
    tasks: dict[int, int] = field(default_factory=dict)
    """Tasks copied per level."""
    skipped: list[str] = field(default_factory=list)
    """Files left out, with the reason."""

    @property
    def n_tasks(self) -> int:
        return sum(self.tasks.values())


def find_levels_root(src: str | os.PathLike) -> Path:
    """The directory holding ``level1/``, ``level2/``... (``DIR/KernelBench`` or ``DIR`` itself)."""
    src = Path(src)
    if not src.is_dir():
        raise KernelBenchImportError(f"KernelBench directory not found: {src}")
    for root in (src / "KernelBench", src):
        if root.is_dir() and any(p.is_dir() and re.fullmatch(r"level\d+", p.name) for p in root.iterdir()):
            return root
    raise KernelBenchImportError(f"{src} has no KernelBench/level<N>/ or level<N>/ directories")


def _find_license(src: Path, root: Path) -> str | None:
    for d in (root, src, root.parent):
        for name in ("LICENSE", "LICENSE.md", "LICENSE.txt"):
            p = d / name
            if p.is_file():
                text = p.read_text(encoding="utf-8", errors="replace")
                if "MIT" in text or "Permission is hereby granted" in text:
                    return text
    return None


def _sanitize(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]+", "_", name).strip("_") or "task"


def _header(level: int, filename: str) -> str:
    return (f"# From KernelBench level{level}/{filename} ({UPSTREAM}).\n"
            f"# MIT License, {COPYRIGHT}. See NOTICE.md in this suite.\n")


def _env_yaml(suite_id: str, levels: list[int], n_tasks: int) -> str:
    level_txt = ", ".join(str(lv) for lv in levels)
    return f"""\
# Written by `drkernel data import-kernelbench` from a local KernelBench checkout (see NOTICE.md).
id: {suite_id}
description: KernelBench level(s) {level_txt}, {n_tasks} tasks (MIT, {COPYRIGHT})
entry_point: Model
# KernelBench tasks have one (GPU-sized) shape each and do not read DRKERNEL_TASK_SIZE, so
# `--device cpu` runs them at full size under the Triton interpreter: slow.
correctness:
  # KernelBench draws 5 trials of get_inputs(). Its tasks do not declare INPUT_DISTRIBUTIONS, and
  # some inputs must not be negated or rescaled (log of probabilities, ...): native inputs only.
  trials_per_distribution: 5
  distributions: [native]
  # fp32 tolerance of drkernel: |out - ref| <= atol * rms(ref) + rtol * |ref|. KernelBench's own
  # allclose(atol=rtol=1e-2) also accepts fp16/bf16 arithmetic and TF32 matmuls; raise these
  # (and bump the id) to reproduce its numbers.
  atol: 1.0e-4
  rtol: 1.0e-4
timing:
  warmup: 5
  trials: 100
  reference_backend: eager
prompt_template: triton_kernelbench
"""


def _notice(levels: list[int], counts: dict[int, int]) -> str:
    per_level = "\n".join(f"- level{lv}: {counts.get(lv, 0)} tasks" for lv in levels)
    return f"""# Notice: tasks from KernelBench

The task files in `tasks/` come from KernelBench ({UPSTREAM}),
{COPYRIGHT}, distributed under the MIT License reproduced below
(also in `LICENSE.KernelBench`).

{per_level}

Changes made by `drkernel data import-kernelbench`: files renamed from `levelL/N_Name.py` to
`tasks/lL_NNN_Name.py`, and a two-line comment naming the source file and this notice added at the
top of each file. The code is otherwise unchanged.

---

{MIT_LICENSE}"""


def _readme(suite_id: str, suite_dir: Path, levels: list[int], n_tasks: int) -> str:
    return f"""# {suite_id}: KernelBench level(s) {", ".join(map(str, levels))}

{n_tasks} reference programs from KernelBench (MIT License, {COPYRIGHT}; see NOTICE.md),
imported with `drkernel data import-kernelbench`. There are no reference solutions: bench a
directory of candidates with the same file names.

    drkernel bench --suite {suite_dir} --solutions DIR --device cuda
    drkernel data build --suite {suite_dir} --out data/{suite_id}.parquet

The protocol is in env.yaml (native inputs only, 5 correctness trials, fp32 tolerance). The tasks
have GPU sizes only, so grading on the CPU interpreter is slow.
"""


def import_kernelbench(src: str | os.PathLike, out: str | os.PathLike, levels: Sequence[int] | None = None, *,
                       suite_id: str | None = None, force: bool = False) -> ImportReport:
    """Copy KernelBench ``levels`` from the checkout at ``src`` into the suite directory ``out``.

    Levels named explicitly must exist; with ``levels=None`` the :data:`DEFAULT_LEVELS` present are
    taken. ``out`` must be absent or empty unless ``force`` (which replaces its ``tasks/`` and the
    files written here). Raises :class:`KernelBenchImportError`.
    """
    src = Path(src)
    root = find_levels_root(src)
    present = sorted(int(p.name[5:]) for p in root.iterdir() if p.is_dir() and re.fullmatch(r"level\d+", p.name))
    if levels is None:
        chosen = [lv for lv in DEFAULT_LEVELS if lv in present]
        if not chosen:
            raise KernelBenchImportError(f"{root} has none of the default levels {list(DEFAULT_LEVELS)}; "
                                         f"present: {present} (pass --levels)")
    else:
        chosen = sorted(set(int(lv) for lv in levels))
        missing = [lv for lv in chosen if lv not in present]
        if missing:
            raise KernelBenchImportError(f"level(s) {missing} not found in {root}; present: {present}")
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not force:
        raise KernelBenchImportError(f"destination {out} exists and is not empty (use --force to replace it)")
    suite_id = suite_id or f"{_sanitize(out.resolve().name)}-v0"
    report = ImportReport(suite_dir=out, suite_id=suite_id, levels=chosen)

    staged: list[tuple[Path, str]] = []
    for lv in chosen:
        entries = sorted((p for p in (root / f"level{lv}").iterdir() if p.is_file() and p.suffix == ".py"),
                         key=lambda p: (int(m.group(1)) if (m := _TASK_FILE.match(p.name)) else 1 << 30, p.name))
        for p in entries:
            m = _TASK_FILE.match(p.name)
            if not m:
                report.skipped.append(f"level{lv}/{p.name}: name is not N_Name.py")
                continue
            text = p.read_text(encoding="utf-8", errors="replace")
            if not re.search(r"^class\s+Model\b", text, re.MULTILINE) or "def get_inputs" not in text:
                report.skipped.append(f"level{lv}/{p.name}: no class Model / get_inputs")
                continue
            staged.append((Path("tasks") / f"l{lv}_{int(m.group(1)):03d}_{_sanitize(m.group(2))}.py",
                           _header(lv, p.name) + text))
            report.tasks[lv] = report.tasks.get(lv, 0) + 1
    if not staged:
        raise KernelBenchImportError(f"no task files found in levels {chosen} of {root}")
    names = [str(rel) for rel, _ in staged]
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise KernelBenchImportError(f"two source files map to the same task name: {dup[:3]}")

    if out.is_dir() and force:
        shutil.rmtree(out / "tasks", ignore_errors=True)
    (out / "tasks").mkdir(parents=True, exist_ok=True)
    for rel, text in staged:
        (out / rel).write_text(text, encoding="utf-8")
    license_text = _find_license(src, root) or MIT_LICENSE
    (out / "LICENSE.KernelBench").write_text(license_text, encoding="utf-8")
    (out / "NOTICE.md").write_text(_notice(chosen, report.tasks), encoding="utf-8")
    (out / "README.md").write_text(_readme(suite_id, out, chosen, report.n_tasks), encoding="utf-8")
    (out / "env.yaml").write_text(_env_yaml(suite_id, chosen, report.n_tasks), encoding="utf-8")
    return report


__all__ = ["import_kernelbench", "find_levels_root", "ImportReport", "KernelBenchImportError", "COPYRIGHT",
           "DEFAULT_LEVELS"]
