"""``drkernel_sync``: verl's synchronous v1 trainer with the Dr. Kernel step as its advantage stage.

verl's hooks do not reach far enough for the paper's recipe, so two methods are overridden (and
nothing else; rollout, log-prob recomputation, the actor update, checkpointing and validation
are verl's):

- ``_compute_advantage``: verl's version fetches only uid/mask/scores/log-probs and calls one
  estimator. MRS with the per-turn token veto (absent from verl 0.9.1), PRS (needs each turn's
  correctness and coverage) and the meaningful-turn mask need the turn structure the agent loop
  stores (``tok_turn_index``, ``turn_*``), so this version fetches those fields as well, runs
  :func:`drkernel.step.dr_kernel_step` through :func:`drkernel.verl.step_adapter.run_step` (the batch as
  a :class:`~drkernel.verl.step_adapter.VerlBatchBackend`, drkernel's ``TrainerBackend`` contract), and
  writes back ``advantages``, ``returns``, the final ``response_mask`` (and ``loss_mask``, equal) and, when
  truncated IS is on, ``rollout_is_weights``. Metrics: ``drkernel/*`` (step) and
  ``drkernel/kernel/turn{t}/*`` (per-turn correctness and Fast@p, per sample).
- ``_build_replay_buffer``: the zero-variance group filter with buffering. verl's replay buffer
  already holds finished prompt groups until ``data.train_batch_size`` of them are usable and
  refills evicted ones; its DAPO filter only knows "std == 0". :class:`DrKernelReplayBuffer`
  evicts with drkernel's own :func:`drkernel.rewards.filter_groups` on each trajectory's
  last-turn reward after the meaningful-turn zeroing (what the step filters on), so a step never
  has to be skipped: the groups wait in verl's buffer instead of in the step's state.

Register with ``trainer.v1.trainer_mode=drkernel_sync`` (the plugin registers it). verl's base
class reads its mode back from that setting and compares it with ``"sync"`` (dataloader refill,
TransferQueue bookkeeping, checkpoints), so :attr:`DrKernelPPOTrainer.trainer_mode` always says
``"sync"``: this trainer is verl's sync trainer, registered under its own name.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from typing import Any

import numpy as np
import torch

import transfer_queue as tq
from tensordict import TensorDict
from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer
from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY, register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.workers.utils.padding import response_to_nested as to_nested

from drkernel.verl.step_adapter import STEP_FIELDS, run_step

logger = logging.getLogger(__name__)

TRAINER_NAME = "drkernel_sync"
FILTER_METRIC = "last_turn_reward"
"""``reward_extra_info`` key the agent loop writes: the last existing turn's reward (0 if masked)."""

__all__ = ["TRAINER_NAME", "DrKernelPPOTrainer", "DrKernelReplayBuffer", "classify_groups", "register"]


def classify_groups(values_by_uid: dict[str, list[float]], *, std_threshold: float, min_group_size: int) -> set[str]:
    """The uids drkernel's group filter drops (low last-turn reward variance, or too few trajectories)."""
    from drkernel.rewards import filter_groups

    uids = sorted(values_by_uid)
    rewards = torch.tensor([v for u in uids for v in values_by_uid[u]], dtype=torch.float64)
    groups = [u for u in uids for _ in values_by_uid[u]]
    if not groups:
        return set()
    selection, _ = filter_groups(rewards, groups, std_threshold=std_threshold, min_group_size=min_group_size)
    return set(uids) - {str(g) for g in selection.kept_groups}


class DrKernelReplayBuffer(ReplayBuffer):
    """verl's sync replay buffer whose group eviction is drkernel's zero-variance filter."""

    def __init__(self, *args: Any, std_threshold: float = 1e-3, min_group_size: int = 1, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.std_threshold = std_threshold
        self.min_group_size = min_group_size

    def _dapo_filtered_keys(self, partition_id: str) -> tuple[set[str], Counter]:
        if partition_id == "val" or self.filter_groups_metric is None:
            return set(), Counter()
        finished = self.finished_keys[partition_id]
        cache = self._dapo_classification_cache[partition_id]
        for uid in cache.keys() - finished:
            del cache[uid]
        new = finished - cache.keys()
        keys = [k for k in self.partitions[partition_id] if k.split("_")[0] in new]
        values: dict[str, list[float]] = defaultdict(list)
        if keys:
            data = tq.kv_batch_get(keys=keys, partition_id=partition_id, select_fields=["extra_fields"])
            for key, value in zip(keys, list(data["extra_fields"]), strict=True):
                extra = getattr(value, "data", value)
                info = extra.get("reward_extra_info", {}) if isinstance(extra, dict) else {}
                if self.filter_groups_metric not in info:
                    raise RuntimeError(f"trajectory {key} has no reward_extra_info[{self.filter_groups_metric!r}]")
                values[key.split("_")[0]].append(float(info[self.filter_groups_metric]))
        dropped = classify_groups({u: values.get(u, []) for u in new}, std_threshold=self.std_threshold,
                                  min_group_size=self.min_group_size)
        for uid in new:
            vals = values.get(uid, [])
            cache[uid] = (float(np.mean(vals)) if vals else 0.0) if uid in dropped else None
        filtered = {uid: v for uid, v in cache.items() if v is not None}
        return set(filtered), Counter(filtered.values())


class DrKernelPPOTrainer(PPOTrainerSync):
    """See the module docstring."""

    def __init__(self, config: Any):
        from drkernel.verl.config import drkernel_node, step_config

        self._node = drkernel_node(config)
        self._grader_prestart = None
        self._step_config = step_config(config, estimator=str(config.algorithm.adv_estimator),
                                        gamma=float(config.algorithm.gamma),
                                        samples_per_prompt=int(config.actor_rollout_ref.rollout.n))
        self._step_state = None
        self._generator = torch.Generator().manual_seed(int(self._node["seed"]))
        if self._node["group_filter"]["enable"]:
            # exact refill counts: one prompt per dataloader fetch, as verl sets it for its own DAPO filter
            from omegaconf import open_dict

            with open_dict(config):
                config.data.gen_batch_size = 1
        super().__init__(config)

    def init(self):
        """verl's init (the FSDP workers, the vLLM servers), then the node's graders started ahead
        (:func:`drkernel.verl.grading.prestart`), beside the agent-loop workers' start rather than
        inside step 1. After vLLM, not beside it: vLLM sizes its KV cache against the memory free
        when it starts, which the graders' warm processes would have taken."""
        from drkernel.verl.config import grader_settings
        from drkernel.verl.grading import prestart

        result = super().init()
        self._grader_prestart = prestart(grader_settings(self._node))
        return result

    @property
    def trainer_mode(self) -> str:
        """Always ``"sync"``: verl's base compares the mode with ``"sync"``, not with the registry name."""
        return "sync"

    @trainer_mode.setter
    def trainer_mode(self, value: str) -> None:
        if value not in ("sync", TRAINER_NAME):
            raise ValueError(f"{TRAINER_NAME} is verl's sync trainer; got trainer_mode={value!r}")

    def _build_replay_buffer(self) -> ReplayBuffer:
        if not self._node["group_filter"]["enable"]:
            return super()._build_replay_buffer()
        sampler = self.config.trainer.v1.sampler
        filter_cfg = self.config.algorithm.get("filter_groups", None) or {}
        return DrKernelReplayBuffer(
            trainer_mode="sync",
            trainer_config=self.config.trainer.v1.get("sync", {}),
            max_off_policy_threshold=sampler.max_off_policy_threshold,
            max_off_policy_strategy=sampler.max_off_policy_strategy,
            sampler_kwargs=sampler.sampler_kwargs,
            refill_fn=self._add_prompts_to_generate,
            filter_groups_metric=FILTER_METRIC,
            sync_refill_failed_groups=bool(sampler.get("sync_refill_failed_groups", False)),
            train_batch_size=self.config.data.train_batch_size,
            gen_batch_size=1,
            max_inflight_gen_batches=int(filter_cfg.get("max_inflight_gen_batches", 1) or 1),
            std_threshold=self._step_config.filter_std_threshold,
            min_group_size=self._step_config.resolved_min_group_size(),
        )

    def _compute_advantage(self, batch, metrics: dict):
        fields = ["uid", *STEP_FIELDS]
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields)
        nested_mask = data["response_mask"]
        uids = list(data["uid"].tolist()) if hasattr(data["uid"], "tolist") else list(data["uid"])
        padded = {k: v for k, v in data.to_padded_tensor().items() if k != "uid"}
        if padded.get("rollout_log_probs") is None:
            logger.warning("no rollout_log_probs in the batch: MRS is skipped (set rollout.calculate_log_probs=true)")
        out, step_metrics, self._step_state = run_step(padded, uids, self._step_config, self._step_state,
                                                       generator=self._generator)
        metrics.update(step_metrics)
        metrics.update(self._rollout_metrics(batch))
        out["loss_mask"] = out["response_mask"]  # verl's agent loop stores both; keep them equal
        written = TensorDict({k: to_nested(v, nested_mask) for k, v in out.items()}, batch_size=len(batch))
        return tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=written)


    def _rollout_metrics(self, batch) -> dict[str, float]:
        """``drkernel/rollout/*`` from the episodes' ``extra_fields['rollout_timing']`` (agent loop).

        Grading overlaps generation inside verl's ``gen`` phase, so these are sums and spreads of
        per-episode wall times, not a phase of the step: ``evaluations`` (count), ``grade_s/sum``,
        ``grade_s/max``, ``generate_s/mean``, ``generate_s/max``, ``sampled_tokens``,
        ``solution_turns`` (testing runs with ``drkernel.agent.solution_mix``); where grading's time
        went: ``grade_stage_s/<stage>`` (the results' ``stage_seconds`` summed over the step's
        evaluations), ``reference_cached_frac`` and ``warm_process_frac`` (shares of evaluations that
        found the task's reference outputs cached and a warm worker process).
        """
        try:
            data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["extra_fields"])
            extras = [getattr(v, "data", v) for v in list(data["extra_fields"])]
        except Exception as exc:  # noqa: BLE001 - metrics only: never fail a step for them
            logger.warning("drkernel: no rollout timing metrics (%s: %s)", type(exc).__name__, exc)
            return {}
        timing = [e.get("rollout_timing") for e in extras if isinstance(e, dict) and e.get("rollout_timing")]
        if not timing:
            return {}
        out = {
            "drkernel/rollout/evaluations": float(sum(t["evaluations"] for t in timing)),
            "drkernel/rollout/grade_s/sum": float(sum(t["grade_s"] for t in timing)),
            "drkernel/rollout/grade_s/max": float(max(t["grade_s"] for t in timing)),
            "drkernel/rollout/generate_s/mean": float(np.mean([t["generate_s"] for t in timing])),
            "drkernel/rollout/generate_s/max": float(max(t["generate_s"] for t in timing)),
            "drkernel/rollout/sampled_tokens": float(sum(t["sampled_tokens"] for t in timing)),
        }
        stages: dict[str, float] = {}
        for t in timing:
            for name, sec in (t.get("grade_stage_s") or {}).items():
                stages[name] = stages.get(name, 0.0) + float(sec)
        out.update({f"drkernel/rollout/grade_stage_s/{name}": sec for name, sec in sorted(stages.items())})
        evaluations = out["drkernel/rollout/evaluations"]
        if evaluations:
            for key in ("reference_cached", "warm_process"):
                out[f"drkernel/rollout/{key}_frac"] = float(sum(t.get(key, 0) for t in timing)) / evaluations
        infos = [e.get("reward_extra_info", {}) for e in extras if isinstance(e, dict)]
        if any("solution_turns" in i for i in infos):
            out["drkernel/rollout/solution_turns"] = float(sum(i.get("solution_turns", 0.0) for i in infos))
        return out


def register() -> None:
    """Register :class:`DrKernelPPOTrainer` as ``drkernel_sync`` (idempotent)."""
    if TRAINER_REGISTRY.get(TRAINER_NAME) is not DrKernelPPOTrainer:
        register_trainer(TRAINER_NAME)(DrKernelPPOTrainer)
