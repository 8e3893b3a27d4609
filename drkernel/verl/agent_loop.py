"""``drkernel_kernel_agent``: drkernel's episode runner as a verl agent loop, token-in/token-out.

verl instantiates one :class:`KernelAgentLoop` per sample (``rollout.n`` per prompt) inside its
agent-loop workers and awaits :meth:`KernelAgentLoop.run`. The loop runs
:func:`drkernel.agent.episode.run_episode` (prompt -> generate -> extract code -> grade -> feedback,
``drkernel.agent.max_turns`` turns) with :class:`ServerTokenGenerate` as the generation backend:

- the first prompt is tokenised once with verl's Continuous Token builder (chat template plus
  generation prompt); each later call appends only the new messages (the feedback) to the running
  token stream, and the model's own tokens are the ids the server sampled, never re-tokenised text.
  So the row the trainer sees is exactly the token stream the rollout generated (token-in/token-out);
- each reply is capped at ``min(max_tokens_per_turn, what is left of rollout.response_length)``:
  verl never has to cut a response, and when no room is left the episode simply ends there (its
  turns so far are kept and trained, instead of training on a context different from the one
  that was sampled: Dr. Kernel's code left-truncates long training prompts, so its log-probs
  were recomputed on a shorter context than vLLM sampled from);
- grading goes through the ``Grader`` protocol chosen by ``drkernel.grader.kind``;
- testing only (``drkernel.agent.solution_mix`` > 0, default 0): some episodes answer with the
  suite's bundled solution instead of sampling (:func:`solution_turns`), so that an untrained
  model's run still grades real kernels. The reply's token ids go into the same stream as sampled
  ones, and their rollout log-probs are the rollout engine's own (vLLM ``prompt_logprobs`` of
  the forced tokens), so the trainer sees the same token-in/token-out row as for a sampled reply.

The output (:class:`KernelAgentLoopOutput`) is one row per trajectory: ``response_mask`` is 1 on
the model's tokens, ``rollout_log_probs`` are the server's log-probs (0 on feedback tokens), and
``rm_scores`` holds each turn's reward on that turn's last model token. Extra fields for drkernel's
trainer: ``tok_turn_index`` (L,), and per-turn ``turn_rewards``, ``turn_exists``, ``turn_correct``,
``turn_hacked``, ``turn_coverage``, ``turn_speedup`` (T,; columns of the turn table,
:func:`drkernel.turns.turn_rows`), ``failed`` (1,); in
``extra_fields``: ``reward_extra_info`` (the group filter's ``last_turn_reward`` and more),
``turn_results`` (each turn's verdict) and ``rollout_timing`` (the episode's generation and grading
wall time, its evaluation count and sampled tokens; drkernel's trainer logs them as
``drkernel/rollout/*``).
"""

from __future__ import annotations

import functools
import itertools
import logging
import time
import uuid
from pathlib import Path
from typing import Any

import torch

from verl.experimental.agent_loop.agent_loop import (
    AgentLoopBase,
    AgentLoopMetrics,
    AgentLoopOutput,
    _agent_loop_registry,
    register as _register_loop,
)

from drkernel.agent.extract import kernel_reply
from drkernel.agent.types import Generation, Message
from drkernel.turns import TurnTable, turn_exists, turn_rows, turns_to_last_tokens

logger = logging.getLogger(__name__)

AGENT_NAME = "drkernel_kernel_agent"

__all__ = ["AGENT_NAME", "KernelAgentLoop", "KernelAgentLoopOutput", "ServerTokenGenerate", "ResponseBudgetExhausted",
           "bundled_solution", "solution_reply", "solution_turns", "register"]

END_OF_TURN_TOKENS = ("<|im_end|>", "<|eot_id|>", "<|end|>")
"""Chat-template end-of-turn tokens a forced reply ends with (the first in the vocabulary; else EOS)."""


class ResponseBudgetExhausted(RuntimeError):
    """No room is left in ``rollout.response_length`` for another reply: the episode ends here."""


class ServerTokenGenerate:
    """A ``drkernel.agent`` Generate backend over verl's LLM server manager, one per episode.

    Keeps the running token stream of the episode (``runtime_ids``) and, for the response part
    (everything after the first prompt), the mask, the rollout log-probs and the turn of each token.
    """

    def __init__(self, loop: AgentLoopBase, sampling_params: dict[str, Any], *, response_length: int,
                 prompt_length: int, max_tokens_per_turn: int, forced_replies: dict[int, str] | None = None):
        self.loop = loop
        self.forced_replies = dict(forced_replies or {})  # turn -> reply text (solution mix; testing only)
        self.forced_turns: list[int] = []
        self.generate_s = 0.0  # wall time in the server's generate calls
        self.sampled_tokens = 0
        self.sampling_params = dict(sampling_params)
        self.response_length = int(response_length)
        self.prompt_length = int(prompt_length)
        self.max_tokens_per_turn = int(max_tokens_per_turn)
        self.request_id = uuid.uuid4().hex  # sticky routing: one server keeps the prefix cache
        self.prompt_ids: list[int] = []
        self.runtime_ids: list[int] = []
        self.response_mask: list[int] = []
        self.response_logprobs: list[float] = []
        self.tok_turn: list[int] = []
        self.messages: list[Message] = []  # the messages runtime_ids encodes (assistant replies included)
        self.turns = 0
        self.budget_exhausted = False
        self.extra_fields: dict[str, Any] = {}

    @property
    def response_ids(self) -> list[int]:
        return self.runtime_ids[len(self.prompt_ids):]

    def _align(self, merge, *, turn: int, assistant_logprobs: list[float] | None = None) -> None:
        mask, logprobs = self.loop.continuous_token_builder.align_response_metadata(
            merge, self.response_mask, self.response_logprobs, assistant_logprobs=assistant_logprobs)
        tok_turn = list(self.tok_turn)
        if merge.removed_prefix_token_count:
            tok_turn = tok_turn[: -merge.removed_prefix_token_count]
        tok_turn += [-1] * len(merge.inserted_token_ids)
        tok_turn += [turn if merge.kind == "assistant" else -1] * merge.appended_token_count
        if not (len(mask) == len(tok_turn) == len(merge.token_ids) - len(self.prompt_ids)):
            raise RuntimeError("Continuous Token merge changed the prompt part of the stream")
        self.runtime_ids, self.response_mask, self.response_logprobs, self.tok_turn = (
            list(merge.token_ids), mask, list(logprobs or []), tok_turn)

    async def _extend_context(self, messages: list[Message]) -> None:
        builder = self.loop.continuous_token_builder
        if not self.prompt_ids:
            ids = await self.loop.loop.run_in_executor(None, lambda: builder.build_initial_tokens(messages))
            if len(ids) > self.prompt_length:  # a failure, not an early end (data.filter_overlong_prompts)
                raise ValueError(
                    f"the first prompt has {len(ids)} tokens, more than rollout.prompt_length={self.prompt_length}")
            self.prompt_ids = list(ids)
            self.runtime_ids = list(ids)
            self.messages = [dict(m) for m in messages]
            return
        n = len(self.messages)
        if [dict(m) for m in messages[:n]] != self.messages:
            raise RuntimeError("the episode's context is not append-only (context trimming must be off in verl)")
        merge = await self.loop.loop.run_in_executor(
            None, lambda: builder.merge_context_tokens(self.messages, list(messages), self.runtime_ids))
        if len(merge.token_ids) - len(self.prompt_ids) >= self.response_length:
            raise ResponseBudgetExhausted("no room left in rollout.response_length for another reply")
        self._align(merge, turn=-1)
        self.messages = [dict(m) for m in messages]

    async def __call__(self, messages: list[Message], **sampling: Any) -> Generation:
        try:
            await self._extend_context(messages)
        except ResponseBudgetExhausted:
            self.budget_exhausted = True
            raise
        room = self.response_length - len(self.response_mask)
        params = {**self.sampling_params, **sampling, "max_tokens": max(1, min(self.max_tokens_per_turn, room))}
        forced = self._forced_ids(room)
        t0 = time.perf_counter()
        if forced is not None:
            token_ids, logprobs, out = await self._score_forced(forced, params)
            self.forced_turns.append(self.turns)
        else:
            out = await self.loop.server_manager.generate(request_id=self.request_id, prompt_ids=list(self.runtime_ids),
                                                          sampling_params=params)
            token_ids = list(out.token_ids)[: params["max_tokens"]]
            logprobs = list(out.log_probs)[: len(token_ids)] if out.log_probs else [0.0] * len(token_ids)
            self.sampled_tokens += len(token_ids)
        self.generate_s += time.perf_counter() - t0
        merge = self.loop.continuous_token_builder.merge_assistant_tokens(self.runtime_ids, token_ids)
        self._align(merge, turn=self.turns, assistant_logprobs=logprobs)
        text = self.loop.tokenizer.decode(token_ids, skip_special_tokens=True)
        self.messages.append({"role": "assistant", "content": text})
        self.turns += 1
        steps = out.extra_fields or {}  # weight versions that generated this episode (staleness control)
        if steps.get("min_global_steps") is not None:
            self.extra_fields.setdefault("min_global_steps", steps["min_global_steps"])
        if steps.get("max_global_steps") is not None:
            self.extra_fields["max_global_steps"] = steps["max_global_steps"]
        if forced is not None:
            finish = "stop"  # a forced reply ends with its end-of-turn token
        else:
            finish = "length" if len(token_ids) >= params["max_tokens"] else (out.stop_reason or "stop")
        return Generation(text=text, token_ids=token_ids, logprobs=logprobs, prompt_token_ids=list(self.runtime_ids[
            : len(self.runtime_ids) - len(token_ids)]), finish_reason=finish,
            usage={"prompt_tokens": len(self.runtime_ids) - len(token_ids), "completion_tokens": len(token_ids)})

    def _forced_ids(self, room: int) -> list[int] | None:
        """The token ids of this turn's forced reply (text + end-of-turn token), or None to sample.

        A forced reply that does not fit in what is left of ``rollout.response_length`` (one token
        of headroom kept for the engine) is not forced: the turn is sampled as usual.
        """
        text = self.forced_replies.get(self.turns)
        if text is None:
            return None
        tok = self.loop.tokenizer
        ids = list(tok.encode(text, add_special_tokens=False)) + [_end_of_turn_id(tok)]
        if len(ids) >= room:
            logger.warning("solution_mix: the bundled solution (%d tokens) does not fit in the %d tokens left; "
                           "sampling turn %d instead", len(ids), room, self.turns + 1)
            return None
        return ids

    async def _score_forced(self, ids: list[int], params: dict[str, Any]):
        """Rollout log-probs of a forced reply: the engine's ``prompt_logprobs`` over context + reply.

        One request with the reply appended to the prompt, ``max_tokens=1`` (the sampled token is
        dropped) and ``prompt_logprobs=0``; verl's vLLM server returns the log-prob of each prompt
        token given its prefix in ``extra_fields["prompt_logprobs"]`` (entry j is token j + 1).
        """
        context = len(self.runtime_ids)
        score_params = {**params, "max_tokens": 1, "prompt_logprobs": 0}
        out = await self.loop.server_manager.generate(request_id=self.request_id,
                                                      prompt_ids=list(self.runtime_ids) + list(ids),
                                                      sampling_params=score_params)
        rows = (out.extra_fields or {}).get("prompt_logprobs")
        if rows is None or len(rows) < context + len(ids) - 1:
            raise RuntimeError("solution_mix needs the rollout server's prompt_logprobs (verl's vLLM server returns "
                               "them in TokenOutput.extra_fields['prompt_logprobs'])")
        logprobs = [float(rows[context + k - 1][0]) for k in range(len(ids))]
        return list(ids), logprobs, out


class KernelAgentLoopOutput(AgentLoopOutput):
    """verl's output plus the turn structure drkernel's trainer reads (see the module docstring)."""

    tok_turn_index: list[int] = []
    turn_rewards: list[float] = []
    turn_exists: list[bool] = []
    turn_correct: list[bool] = []
    turn_hacked: list[bool] = []
    turn_coverage: list[float] = []
    turn_speedup: list[float] = []
    failed: bool = False

    def as_dict(self) -> dict[str, Any]:
        out = super().as_dict()
        for key in ("tok_turn_index", "turn_rewards", "turn_exists", "turn_correct", "turn_hacked",
                    "turn_coverage", "turn_speedup", "failed"):
            out.pop(key, None)
        ti = torch.tensor(self.tok_turn_index, dtype=torch.int64)
        rewards = torch.tensor(self.turn_rewards, dtype=torch.float32)
        out["rm_scores"] = turns_to_last_tokens(rewards[None], ti[None])[0]  # r_t on turn t's last model token
        out["tok_turn_index"] = ti
        out["turn_rewards"] = rewards
        out["turn_exists"] = torch.tensor(self.turn_exists, dtype=torch.bool)
        out["turn_correct"] = torch.tensor(self.turn_correct, dtype=torch.bool)
        out["turn_hacked"] = torch.tensor(self.turn_hacked, dtype=torch.bool)
        out["turn_coverage"] = torch.tensor(self.turn_coverage, dtype=torch.float32)
        out["turn_speedup"] = torch.tensor(self.turn_speedup, dtype=torch.float32)
        out["failed"] = torch.tensor([self.failed], dtype=torch.bool)
        return out


def _task_from_row(kwargs: dict[str, Any]):
    """The row of ``drkernel data build`` -> ``drkernel.env.Task`` (reference source in reward_model)."""
    from drkernel.env.tasks.task import Task

    reward_model = kwargs.get("reward_model") or {}
    extra = kwargs.get("extra_info") or {}
    source = reward_model.get("ground_truth")
    if not source:
        raise ValueError("dataset row has no reward_model.ground_truth (the reference source)")
    return Task.from_source(source, name=str(extra.get("task_id") or extra.get("uuid") or "task"),
                            entry_point=str(extra.get("entry_point") or "Model"))


class KernelAgentLoop(AgentLoopBase):
    """The multi-turn kernel agent (module docstring). Settings come from the ``drkernel`` node."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> KernelAgentLoopOutput:
        from drkernel.agent.episode import EpisodeConfig, finalize_trajectory, run_episode
        from drkernel.verl.config import drkernel_node, grader_settings, reward_config
        from drkernel.verl.grading import shared_grader

        node = drkernel_node(self.config)
        agent = node["agent"]
        task = _task_from_row(kwargs)
        messages = list(kwargs.get("raw_prompt") or [])
        self._solution_mix = int(agent.get("solution_mix") or 0) > 0
        forced = solution_turns(agent, kwargs, task_id=_task_id(kwargs), reference=task.source)
        backend = ServerTokenGenerate(
            self, sampling_params, response_length=int(self.rollout_config.response_length),
            prompt_length=int(self.rollout_config.prompt_length), max_tokens_per_turn=int(agent["max_tokens_per_turn"]),
            forced_replies=forced)
        episode = EpisodeConfig(max_turns=int(agent["max_turns"]), prompt_template=str(agent["prompt_template"]),
                                reward=reward_config(node), no_code_reward=float(agent["no_code_reward"]),
                                max_feedback_chars=int(agent["max_feedback_chars"]), seed=agent.get("seed"))
        grader = _TimedGrader(self._grader(grader_settings(node), shared_grader))
        # The dataset's first message is the rendered prompt (drkernel data build); start from it.
        generate = _FirstPromptFromRow(backend, messages) if messages else backend
        trajectory = await run_episode(task, generate, grader, episode, finalize=False)
        if trajectory.error and backend.budget_exhausted:
            trajectory.error = None  # out of room, not a failure: the turns played are trained
        finalize_trajectory(trajectory)
        return self._output(backend, trajectory, int(agent["max_turns"]), grader)

    def _grader(self, settings: dict[str, Any], shared) -> Any:
        grader = getattr(self, "grader", None)  # tests inject one
        return grader if grader is not None else shared(settings)

    def _output(self, backend: ServerTokenGenerate, trajectory, max_turns: int,
                grader: "_TimedGrader | None" = None) -> KernelAgentLoopOutput:
        turns = trajectory.turns[:max_turns]
        res = [t.result for t in turns]
        table = TurnTable.from_rows([turn_rows(trajectory)[:max_turns]], max_turns, failed=[trajectory.failed])
        ti = torch.tensor([backend.tok_turn], dtype=torch.long).reshape(1, -1)
        in_stream = turn_exists(torch.where(ti < max_turns, ti, -1), num_turns=max_turns)  # has model tokens
        exists = (table.exists & in_stream)[0].tolist()
        turn_rewards = table.reward[0].tolist()
        extra = dict(backend.extra_fields)
        last = max((i for i, e in enumerate(exists) if e), default=None)
        meaningful = table.meaningful[0].tolist()
        last_reward = turn_rewards[last] if last is not None and meaningful[last] else 0.0
        extra["reward_extra_info"] = {
            "reward": float(sum(turn_rewards)),
            "last_turn_reward": float(last_reward),
            "num_turns": float(len(turns)),
            "passed_any": float(any(r is not None and r.passed for r in res)),
            "failed": float(trajectory.failed),
        }
        if getattr(self, "_solution_mix", False):  # testing only: how many turns were the bundled solution
            extra["reward_extra_info"]["solution_turns"] = float(len(backend.forced_turns))
        extra["turn_results"] = [None if r is None else _compact(r) for r in res]  # no details: TQ carries it
        grade_s = grader.seconds if grader is not None else 0.0
        extra["rollout_timing"] = {  # read by drkernel's trainer (drkernel/rollout/* metrics)
            "generate_s": backend.generate_s, "grade_s": grade_s,
            "evaluations": grader.evaluations if grader is not None else 0, "sampled_tokens": backend.sampled_tokens,
            "grade_stage_s": dict(grader.stage_s) if grader is not None else {},
            "reference_cached": grader.reference_cached if grader is not None else 0,
            "warm_process": grader.warm_process if grader is not None else 0}
        return KernelAgentLoopOutput(
            prompt_ids=backend.prompt_ids,
            response_ids=backend.response_ids,
            response_mask=backend.response_mask,
            response_logprobs=backend.response_logprobs,
            reward_score=float(sum(turn_rewards)),
            num_turns=2 * len(turns),
            metrics=AgentLoopMetrics(generate_sequences=backend.generate_s, tool_calls=grade_s),
            extra_fields=extra,
            tok_turn_index=backend.tok_turn,
            turn_rewards=turn_rewards,
            turn_exists=exists,
            turn_correct=table.passed[0].tolist(),
            turn_hacked=table.hacked[0].tolist(),
            turn_coverage=table.coverage[0].tolist(),
            turn_speedup=table.speedup[0].tolist(),
            failed=trajectory.failed,
        )


class _TimedGrader:
    """The episode's view of the shared grader: counts its evaluations, their wall time, and where
    that time went (the results' ``stage_seconds`` summed; how many found the task's reference
    outputs cached and a warm worker process), so a slow rollout says whether grading waited on
    cold tasks, process starts or the GPU."""

    def __init__(self, grader: Any):
        self.grader = grader
        self.seconds = 0.0
        self.evaluations = 0
        self.stage_s: dict[str, float] = {}
        self.reference_cached = 0
        self.warm_process = 0

    @property
    def capacity(self) -> int:
        return self.grader.capacity

    async def agrade(self, *args: Any, **kwargs: Any):
        t0 = time.perf_counter()
        result = None
        try:
            result = await self.grader.agrade(*args, **kwargs)
            return result
        finally:
            self.seconds += time.perf_counter() - t0
            self.evaluations += 1
            details = getattr(result, "details", None) or {}
            for name, s in (details.get("stage_seconds") or {}).items():
                self.stage_s[name] = self.stage_s.get(name, 0.0) + float(s)
            self.reference_cached += bool(details.get("reference_cached"))
            self.warm_process += bool(details.get("warm_process"))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.grader, name)


_EPISODES = itertools.count()
"""Episodes started in this process: the sample index when the row carries no ``session_id``."""


def _task_id(kwargs: dict[str, Any]) -> str | None:
    extra = kwargs.get("extra_info") or {}
    return str(extra["task_id"]) if extra.get("task_id") else None


def _end_of_turn_id(tokenizer) -> int:
    vocab = tokenizer.get_vocab()
    for token in END_OF_TURN_TOKENS:
        if token in vocab:
            return int(vocab[token])
    if tokenizer.eos_token_id is None:
        raise ValueError("solution_mix: the tokenizer has no end-of-turn or EOS token to end a forced reply with")
    return int(tokenizer.eos_token_id)


@functools.lru_cache(maxsize=8)
def _suite_solutions(suite_dir: str) -> tuple[dict[str, str], dict[str, str]]:
    """``({task id: solution source}, {reference source (stripped): solution source})`` of a suite."""
    from drkernel.env import load_suite

    suite = load_suite(suite_dir)
    by_id, by_source = {}, {}
    for t in suite.tasks:
        if t.solution is not None and Path(t.solution).exists():
            solution = Path(t.solution).read_text(encoding="utf-8")
            by_id[t.id] = solution
            by_source[Path(t.path).read_text(encoding="utf-8").strip()] = solution
    if not by_id:
        raise ValueError(f"solution_mix: suite {suite_dir} has no bundled solutions")
    return by_id, by_source


def bundled_solution(suite_dir: str | Path, *, task_id: str | None = None, reference: str | None = None) -> str | None:
    """The suite's bundled solution of a task, by task id, else by its reference source; None if none."""
    by_id, by_source = _suite_solutions(str(Path(suite_dir).resolve()))
    if task_id is not None and task_id in by_id:
        return by_id[task_id]
    return by_source.get((reference or "").strip())


def solution_reply(solution: str) -> str:
    """The reply text of a forced turn (:func:`drkernel.agent.extract.kernel_reply`, as the local
    trainer's ``--solution-mix``)."""
    return kernel_reply(solution)


def solution_turns(agent: dict[str, Any], kwargs: dict[str, Any], *, task_id: str | None = None,
                   reference: str | None = None) -> dict[int, str]:
    """Testing only: ``{turn: reply}`` of the turns this episode answers with the bundled solution.

    ``drkernel.agent.solution_mix = k`` (0 = off): in each group of ``rollout.n`` samples, sample
    ``j`` (verl's ``session_id``; a per-process episode count where a row has none) with
    ``j % k == 0`` answers with the task's bundled solution from ``drkernel.agent.solution_suite``,
    from turn ``(j // k) % max_turns`` (0-based) to the last, and samples the turns before that.
    With ``k = 2`` and ``n = 4``: sample 0 from turn 1, sample 2 from turn 2, samples 1 and 3 never,
    so every group has reward variance and turns of both kinds. A task with no bundled solution is
    never forced.
    """
    every = int(agent.get("solution_mix") or 0)
    if every <= 0:
        return {}
    if not agent.get("solution_suite"):
        raise ValueError("drkernel.agent.solution_mix > 0 needs drkernel.agent.solution_suite (a suite directory)")
    j = kwargs.get("session_id")
    j = next(_EPISODES) if j is None else int(j)
    if j % every:
        return {}
    solution = bundled_solution(agent["solution_suite"], task_id=task_id, reference=reference)
    if solution is None:
        return {}
    max_turns = int(agent["max_turns"])
    start = (j // every) % max_turns
    return {t: solution_reply(solution) for t in range(start, max_turns)}


def _compact(result) -> dict[str, Any]:
    """The verdict fields of an ``EvalResult`` (its ``details`` stay out of TransferQueue)."""
    full = result.to_dict()
    keep = ("compiled", "correct", "hacked", "hack_reasons", "speedup", "coverage", "kernel_ms", "reference_ms", "error")
    return {k: full.get(k) for k in keep}


class _FirstPromptFromRow:
    """Use the dataset's rendered first message(s) in place of the runner's own rendering of the task.

    ``drkernel data build`` already rendered the suite's prompt into the row; the runner renders the
    same template again. Replacing the head keeps whatever the dataset holds (e.g. a hand-edited
    prompt) as the model's context, and everything after the head is passed through unchanged.
    """

    def __init__(self, backend: ServerTokenGenerate, head: list[Message]):
        self.backend = backend
        self.head = [{"role": str(m["role"]), "content": str(m["content"])} for m in head]
        self.runner_head_len: int | None = None

    async def __call__(self, messages: list[Message], **sampling: Any) -> Generation:
        if self.runner_head_len is None:
            self.runner_head_len = len(messages)  # first call: the runner's head only
        return await self.backend(self.head + list(messages[self.runner_head_len:]), **sampling)


def register() -> None:
    """Register :class:`KernelAgentLoop` as ``drkernel_kernel_agent`` (idempotent)."""
    if _agent_loop_registry.get(AGENT_NAME, {}).get("_target_") != f"{__name__}.KernelAgentLoop":
        _register_loop(AGENT_NAME)(KernelAgentLoop)
