"""OpenRLHF's remote reward model protocol, as the grading service speaks it.

An OpenRLHF run names the service as its reward model::

    --remote_rm_url 'http://grader:8000/v1/openrlhf/reward?token=<token>'   (or .../get_reward)

and POSTs, for a batch of samples (OpenRLHF 0.9: one sample per request; earlier versions: a
whole micro-batch), with no header of its own (hence the token in the URL)::

    {"query":   [<prompt + response, decoded with special tokens>, ...],
     "prompts": [<prompt>, ...],
     "labels":  [<the dataset's --label_key value>, ...]}

It reads back ``rewards`` (one float per sample) and, when present, ``scores`` (its dynamic
filtering and logging) and ``extra_logs`` (per-sample values it logs); older versions read all three
unconditionally, so all three are always sent::

    {"rewards": [R_i], "scores": [c_i], "extra_logs": {"kernel_correct": [...], ...}, "job_ids": [...]}

Per sample ``i``:

* **label** (:func:`parse_label`): a JSON object ``{"task_code": <reference source>,
  "entry_point": "Model", "task_name": ..., "seed": <int, optional>, "options": {...}}`` as
  :func:`drkernel.integrations.openrlhf.build_rows` writes it, or the reference source itself.
* **response** (:func:`response_text`): ``query`` with its ``prompt`` cut off (the prompt's first
  occurrence and everything before it; the whole query when the prompt is not found), so the
  reference's code in the prompt is never graded, and cut at the first end-of-turn token
  (``<|im_end|>``, ``<|eot_id|>``, ...; OpenRLHF decodes them into the query).
* **kernel**: the agent's extractor (:func:`drkernel.agent.extract.locate_code`); no kernel:
  ``R = no_code_reward`` (0), nothing graded.
* **grading**: one job of the service, exactly as ``POST /v1/evaluate`` would make it (same
  checks, options, cache, queue and store), under the id :func:`job_id` (a hash of the request),
  so a batch that OpenRLHF sends again after a timeout or a server restart joins the jobs it made
  the first time: each sample is answered exactly once.
  (The same sample sent later, identical kernel, task, seed and options, is answered from its
  stored job, as the result cache would answer it.)
* **reward**: :mod:`drkernel.rewards` of the result (default: the recipe,
  ``R = 0.5 c + 0.5 c min(s, 3) + 0.5 c cov``, 0 when hacked); ``scores`` is ``c`` (1.0 when the
  kernel compiled, is correct and is not hacked), so OpenRLHF's dynamic filtering keeps groups that
  are neither all solved nor all failed.

Extensions of drkernel's own (OpenRLHF sends neither): a body may carry ``options`` (EvalConfig
overrides for every sample), ``reward`` (a :class:`~drkernel.rewards.RewardConfig` as a dict) and
``no_code_reward``.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from drkernel.env.result import EvalResult
    from drkernel.rewards import RewardConfig

ROUTES = ("/v1/openrlhf/reward", "/get_reward")
"""Where the service answers OpenRLHF (``/get_reward`` is the path of OpenRLHF's own reward server)."""

EXTRA_LOGS = ("kernel_correct", "kernel_compiled", "kernel_hacked", "kernel_speedup", "kernel_coverage",
              "kernel_has_code", "kernel_cached")
"""Keys of ``extra_logs``: per sample, 1.0/0.0 flags and the raw speedup and coverage (0 when absent)."""


@dataclass
class Label:
    """What a sample's label says about its task."""

    task_code: str
    entry_point: str = "Model"
    task_name: str = "task"
    seed: int | None = None
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class Sample:
    """One sample of a batch: its label and the kernel of its response (None: none found)."""

    index: int
    label: Label
    code: str | None


@dataclass
class Batch:
    samples: list[Sample]
    options: dict[str, Any]
    reward: "RewardConfig"
    no_code_reward: float = 0.0


def parse_label(label: Any) -> Label:
    """A label: a JSON object (or a dict) with ``task_code``, or the reference source itself."""
    data: Any = label
    if isinstance(label, str) and label.lstrip().startswith("{"):
        try:
            data = json.loads(label)
        except json.JSONDecodeError as exc:
            raise ValueError(f"label looks like JSON but does not parse: {exc}") from None
    if isinstance(data, str):
        if not data.strip():
            raise ValueError("label is empty: it must be the task's reference source or a JSON object with task_code")
        return Label(task_code=data)
    if not isinstance(data, dict):
        raise ValueError(f"label must be a string or an object, got {type(data).__name__}")
    unknown = sorted(set(data) - {"task_code", "entry_point", "task_name", "seed", "options", "task_id", "suite"})
    if unknown:
        raise ValueError(f"label has unknown key(s) {unknown}")
    if not isinstance(data.get("task_code"), str) or not data["task_code"].strip():
        raise ValueError("label has no task_code (the reference source)")
    seed = data.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ValueError(f"label seed must be an integer or null, got {seed!r}")
    options = data.get("options") or {}
    if not isinstance(options, dict):
        raise ValueError("label options must be an object of EvalConfig fields")
    entry_point = data.get("entry_point") or "Model"
    name = data.get("task_name") or data.get("task_id") or "task"
    if not isinstance(entry_point, str) or not isinstance(name, str):
        raise ValueError("label entry_point and task_name must be strings")
    return Label(task_code=data["task_code"], entry_point=entry_point, task_name=name, seed=seed, options=options)


END_MARKERS = ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>", "<|endoftext|>", "</s>")
"""End-of-turn and end-of-text tokens as OpenRLHF's query spells them (it decodes with special
tokens): the response ends at the first one."""


def response_text(query: str, prompt: str | None) -> str:
    """The response part of ``query``: after the first occurrence of ``prompt`` (all of ``query``
    when ``prompt`` is empty or not found, e.g. tokenisation changed its spelling), up to the first
    of :data:`END_MARKERS`. A model usually ends its reply right after the closing fence, so the
    query reads ``...```<|im_end|>``: left in, the marker would keep the fence from closing and be
    graded as code."""
    if prompt:
        at = query.find(prompt)
        if at >= 0:
            query = query[at + len(prompt):]
    cut = min((i for i in (query.find(m) for m in END_MARKERS) if i >= 0), default=len(query))
    return query[:cut]


def parse_batch(data: Any) -> Batch:
    """The samples of an OpenRLHF request body; ``ValueError`` naming the first problem."""
    from drkernel.agent.extract import extract_code
    from drkernel.rewards import RewardConfig

    if not isinstance(data, dict):
        raise ValueError(f"body must be a JSON object, got {type(data).__name__}")
    unknown = sorted(set(data) - {"query", "prompts", "labels", "options", "reward", "no_code_reward"})
    if unknown:
        raise ValueError(f"unknown key(s) {unknown}; OpenRLHF sends query, prompts and labels")
    queries = data.get("query")
    if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
        raise ValueError("query must be a list of strings (prompt + response per sample)")
    n = len(queries)
    prompts = data.get("prompts")
    if prompts is None:
        prompts = [None] * n
    labels = data.get("labels")
    if not isinstance(prompts, list) or len(prompts) != n or not all(p is None or isinstance(p, str) for p in prompts):
        raise ValueError(f"prompts must be a list of {n} strings (one per query)")
    if not isinstance(labels, list) or len(labels) != n:
        raise ValueError(f"labels must be a list of {n} labels (one per query): each the task's reference source "
                         f"or a JSON object with task_code")
    options = data.get("options") or {}
    if not isinstance(options, dict):
        raise ValueError("options must be an object of EvalConfig fields")
    reward = data.get("reward") or {}
    if not isinstance(reward, dict):
        raise ValueError("reward must be an object of RewardConfig fields")
    try:
        reward_config = RewardConfig(**reward)
    except (TypeError, ValueError, KeyError) as exc:
        raise ValueError(f"reward: {exc}") from None
    no_code = data.get("no_code_reward", 0.0)
    if isinstance(no_code, bool) or not isinstance(no_code, (int, float)) or not math.isfinite(no_code):
        raise ValueError("no_code_reward must be a finite number")
    samples = []
    for i, (query, prompt, label) in enumerate(zip(queries, prompts, labels)):
        try:
            parsed = parse_label(label)
        except ValueError as exc:
            raise ValueError(f"labels[{i}]: {exc}") from None
        code = extract_code(response_text(query, prompt), entry_point=parsed.entry_point)
        samples.append(Sample(index=i, label=parsed, code=code))
    return Batch(samples=samples, options=options, reward=reward_config, no_code_reward=float(no_code))


def job_id(request: dict[str, Any]) -> str:
    """The id of a sample's job: ``orm-`` and a hash of what is graded (task, entry point, name,
    candidate, seed, options), so a batch sent again names the same jobs."""
    text = json.dumps(request, sort_keys=True, separators=(",", ":"))
    return "orm-" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:48]


def answer(batch: Batch, results: list["EvalResult | None"], cached: list[bool], job_ids: list[str | None]
           ) -> dict[str, Any]:
    """The response body: ``rewards``, ``scores``, ``extra_logs`` (keys :data:`EXTRA_LOGS`), ``job_ids``."""
    from drkernel.rewards import compute_reward

    rewards, scores = [], []
    logs: dict[str, list[float]] = {k: [] for k in EXTRA_LOGS}
    for result, hit in zip(results, cached):
        if result is None:
            rewards.append(batch.no_code_reward)
            scores.append(0.0)
            for k in EXTRA_LOGS:
                logs[k].append(0.0)
            continue
        rewards.append(compute_reward(result, batch.reward))
        scores.append(float(result.passed))
        logs["kernel_correct"].append(float(result.passed))
        logs["kernel_compiled"].append(float(bool(result.compiled)))
        logs["kernel_hacked"].append(float(bool(result.hacked)))
        logs["kernel_speedup"].append(_finite(result.speedup))
        logs["kernel_coverage"].append(_finite(result.coverage))
        logs["kernel_has_code"].append(1.0)
        logs["kernel_cached"].append(float(hit))
    return {"rewards": rewards, "scores": scores, "extra_logs": logs, "job_ids": job_ids}


def _finite(x: float | None) -> float:
    return float(x) if x is not None and math.isfinite(x) else 0.0


__all__ = ["ROUTES", "EXTRA_LOGS", "END_MARKERS", "Label", "Sample", "Batch", "parse_label", "parse_batch", "response_text",
           "job_id", "answer"]
