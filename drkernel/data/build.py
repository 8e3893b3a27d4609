"""A suite as RL training data: one row per task, in verl's RLHFDataset format.

Row layout (drkernel-reference.md §8.2; verl reads it with ``data.prompt_key=prompt``)::

    data_source   str    the suite id (metrics are grouped by it)
    prompt        list   [{"role": "user", "content": <rendered first-turn prompt>}]
    ability       str    "kernel_optimization"
    reward_model  dict   {"ground_truth": <reference source>, "style": "rule"}
    extra_info    dict   {"task_id", "entry_point", "suite", "index", "uuid", "split"}
    agent_name    str    only with ``agent_name=...``: verl's per-row agent loop override

``uuid`` is a stable hash of (suite id, task id, reference source): the same task text always gets
the same uuid, and editing the reference gives a new one (so a cached reference timing keyed by
uuid can never go stale). ``index`` is the task's position in the suite.

Parquet is written with pyarrow (``pip install drkernel[bench]``); a path ending in ``.jsonl``
writes JSON lines instead, with no extra dependency.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import uuid as uuid_lib
from pathlib import Path
from typing import Any

from drkernel.agent.prompts import suite_prompts
from drkernel.env.tasks.suite import Suite

ABILITY = "kernel_optimization"
UUID_NAMESPACE = uuid_lib.UUID("5b0b7c3e-4a0e-5d6e-9a51-6472b6b1e7a1")
"""Fixed namespace of the task uuids (uuid5), so they are stable across machines and versions."""


def task_uuid(suite_id: str, task_id: str, reference_source: str) -> str:
    """uuid5 of ``suite_id/task_id/sha256(reference)``: stable for identical task text."""
    digest = hashlib.sha256(reference_source.encode("utf-8")).hexdigest()
    return str(uuid_lib.uuid5(UUID_NAMESPACE, f"{suite_id}/{task_id}/{digest}"))


def build_rows(suite: Suite | str | os.PathLike, *, template: str | None = None,
               agent_name: str | None = None) -> list[dict[str, Any]]:
    """One RLHFDataset row per task of ``suite`` (in suite order, ``split`` = "train")."""
    rows = []
    for index, p in enumerate(suite_prompts(suite, template=template)):
        row: dict[str, Any] = {
            "data_source": p.suite_id,
            "prompt": [{"role": "user", "content": p.text}],
            "ability": ABILITY,
            "reward_model": {"ground_truth": p.source, "style": "rule"},
            "extra_info": {"task_id": p.task_id, "entry_point": p.entry_point, "suite": p.suite_id, "index": index,
                           "uuid": task_uuid(p.suite_id, p.task_id, p.source), "split": "train"},
        }
        if agent_name:
            row["agent_name"] = agent_name
        rows.append(row)
    return rows


def split_rows(rows: list[dict[str, Any]], n_test: int, seed: int = 0) -> tuple[list[dict], list[dict]]:
    """``(train, test)``: ``n_test`` rows drawn with ``random.Random(seed)``; both keep suite order."""
    if not 0 < n_test < len(rows):
        raise ValueError(f"--split-test must be between 1 and {len(rows) - 1} for {len(rows)} tasks, got {n_test}")
    picked = set(random.Random(seed).sample(range(len(rows)), n_test))
    train, test = [], []
    for i, row in enumerate(rows):
        row = {**row, "extra_info": {**row["extra_info"], "split": "test" if i in picked else "train"}}
        (test if i in picked else train).append(row)
    return train, test


def _schema(with_agent_name: bool):
    from drkernel.data._deps import require

    pa = require("pyarrow", "writing parquet")
    fields = [
        ("data_source", pa.string()),
        ("prompt", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
        ("ability", pa.string()),
        ("reward_model", pa.struct([("ground_truth", pa.string()), ("style", pa.string())])),
        ("extra_info", pa.struct([("task_id", pa.string()), ("entry_point", pa.string()), ("suite", pa.string()),
                                  ("index", pa.int64()), ("uuid", pa.string()), ("split", pa.string())])),
    ]
    if with_agent_name:
        fields.append(("agent_name", pa.string()))
    return pa, pa.schema(fields)


def write_rows(rows: list[dict[str, Any]], path: str | os.PathLike) -> Path:
    """Write ``rows`` to ``path``: ``.jsonl`` as JSON lines, anything else as parquet."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".jsonl":
        with path.open("w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
        return path
    pa, schema = _schema(bool(rows) and "agent_name" in rows[0])
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    return path


def heldout_path(out: str | os.PathLike) -> Path:
    """Where the test split goes: ``data/x.parquet`` -> ``data/x_test.parquet``."""
    out = Path(out)
    return out.with_name(f"{out.stem}_test{out.suffix}")


def build_dataset(suite: Suite | str | os.PathLike, out: str | os.PathLike, *, split_test: int = 0, seed: int = 0,
                  template: str | None = None, agent_name: str | None = None) -> dict[str, Path]:
    """Write the suite's rows to ``out`` (with ``split_test=N``: N random tasks go to
    :func:`heldout_path` instead). Returns ``{"train": path[, "test": path]}``."""
    rows = build_rows(suite, template=template, agent_name=agent_name)
    if not split_test:
        return {"train": write_rows(rows, out)}
    train, test = split_rows(rows, split_test, seed)
    return {"train": write_rows(train, out), "test": write_rows(test, heldout_path(out))}


__all__ = ["build_rows", "build_dataset", "split_rows", "write_rows", "task_uuid", "heldout_path", "ABILITY"]
