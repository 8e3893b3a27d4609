"""A suite as an OpenRLHF prompt dataset, rewarded by the grading service's OpenRLHF route.

    from drkernel.integrations.openrlhf import build_rows
    rows = build_rows("envs/single_ops")          # [{"prompt": [...messages], "label": "<json>"}, ...]
    # write them as JSON lines, then train with
    #   --prompt_data kernels.jsonl --input_key prompt --label_key label --apply_chat_template
    #   --remote_rm_url 'http://grader:8000/v1/openrlhf/reward?token=<token>'

OpenRLHF needs no drkernel extra: it speaks HTTP to ``drkernel serve`` (the route and the protocol:
:mod:`drkernel.serve.openrlhf`). Each row's ``label`` is :func:`encode_label`'s JSON object: the
reference source (``task_code``), ``entry_point``, ``task_name`` and, optionally, the hidden
``seed`` and EvalConfig ``options`` of the sample's grading; OpenRLHF hands it back unchanged with
each response.
"""

from __future__ import annotations

import json
import os
from typing import Any


def encode_label(task_code: str, *, entry_point: str = "Model", task_name: str = "task", seed: int | None = None,
                 options: dict[str, Any] | None = None) -> str:
    """The ``label`` the service's OpenRLHF route reads (:func:`drkernel.serve.openrlhf.parse_label`)."""
    data: dict[str, Any] = {"task_code": task_code, "entry_point": entry_point, "task_name": task_name}
    if seed is not None:
        data["seed"] = int(seed)
    if options:
        data["options"] = dict(options)
    return json.dumps(data, sort_keys=True)


def build_rows(suite: Any, *, tasks: str | None = None, conversational: bool = True, template: str | None = None,
               seed: int | None = None, options: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """One ``{"prompt", "label"}`` row per task of ``suite`` (a path or a loaded Suite): ``prompt``
    is the agent's first prompt (messages, or its text with ``conversational=False``); ``label``
    is :func:`encode_label` of the task (``seed``: the hidden seed of every grading; None: random)."""
    from drkernel.agent.prompts import suite_prompts

    return [{"prompt": [{"role": "user", "content": p.text}] if conversational else p.text,
             "label": encode_label(p.source, entry_point=p.entry_point, task_name=p.task_id, seed=seed, options=options)}
            for p in suite_prompts(suite, tasks=tasks, template=template)]


def write_jsonl(rows: list[dict[str, Any]], path: str | os.PathLike) -> None:
    """``rows`` as JSON lines (OpenRLHF's ``--prompt_data`` reads them)."""
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


__all__ = ["build_rows", "encode_label", "write_jsonl"]
