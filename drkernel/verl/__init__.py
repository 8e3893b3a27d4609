"""drkernel on stock verl 0.9.1: a plugin, the kernel agent loop, and a trainer subclass.

Nothing here is imported by ``import drkernel``; verl, Ray and TransferQueue are imported only by
the submodules that need them:

- :mod:`drkernel.verl.plugin` — the ``verl.plugins`` entry point. ``import verl`` imports it in
  every verl process (TaskRunner, agent-loop workers, FSDP workers) and it registers the pieces
  below with verl's registries.
- :mod:`drkernel.verl.estimator` — the ``trloo`` advantage estimator for verl's
  ``compute_advantage`` (per-turn returns from per-token rewards at turn ends and a per-token turn
  index), computed by :func:`drkernel.step.dr_kernel_step`.
- :mod:`drkernel.verl.layout` — old names of the token <-> turn layout functions, which live in
  :mod:`drkernel.turns` (pure torch).
- :mod:`drkernel.verl.agent_loop` — ``drkernel_kernel_agent``: :func:`drkernel.agent.episode.run_episode`
  driven token-in/token-out through verl's LLM server manager, grading through a ``Grader``.
- :mod:`drkernel.verl.trainer` — ``drkernel_sync``: verl's synchronous v1 trainer with the
  advantage stage replaced by the Dr. Kernel step (MRS with the per-turn veto, PRS, the
  zero-variance group filter, TRLOO) and per-turn metrics.
- :mod:`drkernel.verl.step_adapter` — one verl batch through :func:`drkernel.step.dr_kernel_step`
  (pure torch; what the trainer runs between its TransferQueue read and write).
- :mod:`drkernel.verl.grading` — the grader of an agent-loop worker, by ``drkernel.grader.kind``.
- :mod:`drkernel.verl.config` — the ``drkernel:`` config node: defaults and conversion to the
  step's and the agent's settings.
- :mod:`drkernel.verl.sft_data` — the agent's SFT export (JSONL) -> parquet for verl's SFT trainer.
- :mod:`drkernel.verl.launch` — compose the Hydra config, check it, save it, and run verl's PPO
  (``drkernel train --backend verl``; ``python -m drkernel.train`` is its alias).
"""
