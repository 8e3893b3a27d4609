"""The multi-turn kernel agent: prompts, code extraction, feedback turns, the episode runner, and
sequential test-time scaling.

Public names are imported lazily, so ``import drkernel.agent`` stays light (no torch, openai,
matplotlib or tqdm until used)::

    from drkernel.agent import EpisodeConfig, run_episode, run_episodes, OpenAIGenerate
    gen = OpenAIGenerate("http://localhost:8000/v1", model="Qwen/Qwen3-8B")
    trajectories = await run_episodes(tasks, gen, grader, EpisodeConfig(max_turns=3))

Modules: ``types`` (Generation, Generate, Turn, Trajectory), ``prompts``, ``extract``,
``feedback``, ``context`` (trimming), ``episode`` (the turn loop), ``scaling`` (test-time scaling,
the resumable output directory, summary.json), ``sft`` (SFT export), ``openai_backend``, ``cli``.
"""

from __future__ import annotations

from drkernel._lazy import lazy_exports

_EXPORTS = {
    "Generation": "drkernel.agent.types",
    "Generate": "drkernel.agent.types",
    "Turn": "drkernel.agent.types",
    "Trajectory": "drkernel.agent.types",
    "extract_code": "drkernel.agent.extract",
    "locate_code": "drkernel.agent.extract",
    "token_code_mask": "drkernel.agent.extract",
    "render_prompt": "drkernel.agent.prompts",
    "fit_context": "drkernel.agent.context",
    "tokenizer_counter": "drkernel.agent.context",
    "EpisodeConfig": "drkernel.agent.episode",
    "Limits": "drkernel.agent.episode",
    "Scorer": "drkernel.agent.episode",
    "run_episode": "drkernel.agent.episode",
    "run_episodes": "drkernel.agent.episode",
    "finalize_trajectory": "drkernel.agent.episode",
    "turn_tensors": "drkernel.agent.episode",
    "ScalingConfig": "drkernel.agent.scaling",
    "refine": "drkernel.agent.scaling",
    "refine_task": "drkernel.agent.scaling",
    "summarize": "drkernel.agent.scaling",
    "export_sft": "drkernel.agent.sft",
    "OpenAIGenerate": "drkernel.agent.openai_backend",
    "GenerationError": "drkernel.agent.openai_backend",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())
