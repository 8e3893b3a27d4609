"""drkernel_sync's advantage stage through TransferQueue-shaped data (nested tensors, uid stack),
and its replay-buffer group filter."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("verl")

from tensordict import NonTensorStack, TensorDict  # noqa: E402

from drkernel.verl import trainer as trainer_mod  # noqa: E402
from drkernel.verl.config import step_config  # noqa: E402
from drkernel.verl.estimator import trloo_token_advantages  # noqa: E402


def _nested(rows, dtype):
    return torch.nested.as_nested_tensor([torch.tensor(r, dtype=dtype) for r in rows], layout=torch.jagged)


def _tq_batch():
    """4 trajectories of one prompt, 2 turns (3 model tokens, 2 feedback tokens, 3 model tokens)."""
    mask = [[1, 1, 1, 0, 0, 1, 1, 1]] * 3 + [[1, 1, 1]]  # the 4th ran out of room after turn 1
    ti = [[0, 0, 0, -1, -1, 1, 1, 1]] * 3 + [[0, 0, 0]]
    turn_rewards = [[0.0, 1.2], [0.7, 0.9], [0.0, 0.0], [0.5, 0.0]]
    rm = []
    for m, r in zip(mask, turn_rewards):
        row = [0.0] * len(m)
        row[2] = r[0]
        if len(m) > 3:
            row[7] = r[1]
        rm.append(row)
    logp = [[-0.1] * len(m) for m in mask]
    td = TensorDict({
        "response_mask": _nested(mask, torch.int64),
        "tok_turn_index": _nested(ti, torch.int64),
        "rm_scores": _nested(rm, torch.float32),
        "old_log_probs": _nested(logp, torch.float32),
        "rollout_log_probs": _nested(logp, torch.float32),
        "turn_rewards": torch.tensor(turn_rewards),
        "turn_exists": torch.tensor([[True, True]] * 3 + [[True, False]]),
        "turn_correct": torch.tensor([[False, True], [True, True], [False, False], [True, False]]),
        "turn_coverage": torch.tensor([[float("nan"), 0.9], [0.8, 0.9], [float("nan")] * 2, [0.9, float("nan")]]),
        "turn_speedup": torch.tensor([[float("nan"), 1.3], [1.1, 1.25], [float("nan")] * 2, [0.9, float("nan")]]),
        "failed": torch.tensor([[False]] * 4),
        "uid": NonTensorStack(*["p0"] * 4),
    }, batch_size=4)
    return td, mask, rm


class _Meta:
    keys = ["p0_0_0", "p0_1_0", "p0_2_0", "p0_3_0"]
    partition_id = "train"

    def __len__(self):
        return 4


def test_compute_advantage_reads_and_writes_transfer_queue_fields(monkeypatch) -> None:
    from drkernel.train import compose

    td, mask, rm = _tq_batch()
    written = {}

    def get(keys, partition_id, select_fields):
        assert set(select_fields) >= {"uid", "tok_turn_index", "turn_rewards", "old_log_probs", "rollout_log_probs"}
        return td.select(*[f for f in select_fields if f in td.keys()])

    def put(keys, partition_id, fields):
        written.update(fields=fields, keys=keys)
        return "meta"

    monkeypatch.setattr(trainer_mod.tq, "kv_batch_get", get)
    monkeypatch.setattr(trainer_mod.tq, "kv_batch_put", put)
    cfg = compose(["actor_rollout_ref.rollout.n=4"])
    t = object.__new__(trainer_mod.DrKernelPPOTrainer)  # no GPUs, no Ray: only the advantage stage
    t._step_config = step_config(cfg, samples_per_prompt=4)
    t._step_state = None
    t._generator = torch.Generator().manual_seed(0)
    metrics = {}
    assert t._compute_advantage(_Meta(), metrics) == "meta"
    out = written["fields"]
    assert set(out.keys()) == {"advantages", "returns", "response_mask", "loss_mask"}
    adv = out["advantages"]
    assert adv.is_nested and [len(r) for r in adv.unbind()] == [len(m) for m in mask]
    # meaningful-turn mask: trajectory 1 (0.7 then 0.9) is fine; all four turns exist, no regression
    # after success except none here; TRLOO over the padded rows equals the bare estimator
    width = max(len(m) for m in mask)
    pm = torch.tensor([m + [0] * (width - len(m)) for m in mask])
    prm = torch.tensor([r + [0.0] * (width - len(r)) for r in rm])
    expected, _ = trloo_token_advantages(prm, pm, ["p0"] * 4)
    got = torch.stack([torch.nn.functional.pad(r, (0, width - len(r))) for r in adv.unbind()])
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    assert metrics["drkernel/kernel/turn2/correct"] == pytest.approx(2 / 3)
    assert metrics["drkernel/kernel/turn1/num_samples"] == 4.0
    assert "drkernel/trloo/adv_mean" in metrics


def test_rollout_metrics_from_the_episodes_extra_fields(monkeypatch) -> None:
    timing = [{"generate_s": 1.0 + i, "grade_s": 2.0 * i, "evaluations": i, "sampled_tokens": 10 * i,
               "grade_stage_s": {"references": 0.5 * i, "timing": 1.0}, "reference_cached": i // 2,
               "warm_process": i} for i in range(4)]
    extras = NonTensorStack(*[{"rollout_timing": t, "reward_extra_info": {"solution_turns": float(i % 2)}}
                              for i, t in enumerate(timing)])
    td = TensorDict({"extra_fields": extras}, batch_size=4)

    def get(keys, partition_id, select_fields):
        assert select_fields == ["extra_fields"]
        return td

    monkeypatch.setattr(trainer_mod.tq, "kv_batch_get", get)
    t = object.__new__(trainer_mod.DrKernelPPOTrainer)
    m = t._rollout_metrics(_Meta())
    assert m["drkernel/rollout/evaluations"] == 6.0 and m["drkernel/rollout/grade_s/sum"] == 12.0
    assert m["drkernel/rollout/grade_s/max"] == 6.0 and m["drkernel/rollout/generate_s/mean"] == 2.5
    assert m["drkernel/rollout/sampled_tokens"] == 60.0 and m["drkernel/rollout/solution_turns"] == 2.0
    # where grading's time went: stage seconds summed, shares of evaluations over 6
    assert m["drkernel/rollout/grade_stage_s/references"] == 3.0 and m["drkernel/rollout/grade_stage_s/timing"] == 4.0
    assert m["drkernel/rollout/reference_cached_frac"] == 2 / 6 and m["drkernel/rollout/warm_process_frac"] == 1.0
    # metrics only: a batch without the field logs nothing and never fails the step
    monkeypatch.setattr(trainer_mod.tq, "kv_batch_get", lambda **kw: TensorDict({}, batch_size=4))
    assert t._rollout_metrics(_Meta()) == {}


def test_the_trainer_is_verls_sync_trainer_under_its_registry_name(monkeypatch) -> None:
    """verl's base reads trainer.v1.trainer_mode (``drkernel_sync``) into self.trainer_mode and
    compares it with "sync" (refill, TransferQueue bookkeeping, checkpoints): it must read "sync".
    With the group filter on, the dataloader fetches one prompt at a time (exact refill), as verl
    arranges for its own DAPO filter."""
    from drkernel.train import compose

    seen = {}

    def base_init(self, config):  # what verl's PPOTrainer.__init__ does with the mode, without Ray
        self.config = config
        self.trainer_mode = config.trainer.v1.trainer_mode
        seen["mode"] = self.trainer_mode
        seen["sync_cfg"] = config.trainer.v1.get(self.trainer_mode, None)

    monkeypatch.setattr(trainer_mod.PPOTrainerSync, "__init__", base_init)
    cfg = compose([])
    assert cfg.trainer.v1.trainer_mode == "drkernel_sync"
    t = trainer_mod.DrKernelPPOTrainer(cfg)
    assert seen == {"mode": "sync", "sync_cfg": {}} and t.trainer_mode == "sync"
    assert cfg.data.gen_batch_size == 1
    with pytest.raises(ValueError, match="sync trainer"):
        t.trainer_mode = "separate_async"
    cfg_off = compose(["drkernel.group_filter.enable=false"])
    trainer_mod.DrKernelPPOTrainer(cfg_off)
    assert cfg_off.data.get("gen_batch_size") is None


def test_init_starts_node_graders_after_verls_init(monkeypatch) -> None:
    """The node's graders are started ahead once verl's init (FSDP, vLLM) is done, with the
    run's drkernel.grader settings; not before (vLLM sizes its cache against the free memory)."""
    from drkernel.train import compose

    order = []
    monkeypatch.setattr(trainer_mod.PPOTrainerSync, "__init__", lambda self, config: setattr(self, "config", config))
    monkeypatch.setattr(trainer_mod.PPOTrainerSync, "init", lambda self: order.append("verl init") or "done")
    import drkernel.verl.grading as grading

    monkeypatch.setattr(grading, "prestart", lambda settings: order.append(("prestart", settings["kind"])) or "thread")
    t = trainer_mod.DrKernelPPOTrainer(compose(["drkernel.grader.kind=node"]))
    assert order == []
    assert t.init() == "done" and order == ["verl init", ("prestart", "node")] and t._grader_prestart == "thread"


def test_group_filter_classification() -> None:
    dropped = trainer_mod.classify_groups(
        {"same": [1.0, 1.0, 1.0], "signal": [0.0, 1.5, 0.2], "tiny": [0.5, 0.5004, 0.5], "small": [0.0, 2.0]},
        std_threshold=1e-3, min_group_size=3)
    # std below 1e-3 (same, tiny) or fewer than 3 trajectories (small): evicted and refilled by verl
    assert dropped == {"same", "tiny", "small"}


def test_replay_buffer_is_built_from_the_config_and_evicts_with_drkernels_filter(monkeypatch) -> None:
    from drkernel.train import compose

    cfg = compose(["actor_rollout_ref.rollout.n=3"])
    t = object.__new__(trainer_mod.DrKernelPPOTrainer)
    t.config = cfg
    t.trainer_mode = "sync"
    from drkernel.verl.config import drkernel_node

    t._node = drkernel_node(cfg)
    t._step_config = step_config(cfg, samples_per_prompt=3)
    buf = t._build_replay_buffer()  # verl's ReplayBuffer constructor accepts drkernel's arguments
    assert isinstance(buf, trainer_mod.DrKernelReplayBuffer)
    assert buf.filter_groups_metric == "last_turn_reward" and buf.train_batch_size == 16
    assert buf.min_group_size == 2 and buf.std_threshold == pytest.approx(1e-3)

    # three finished groups in verl's bookkeeping; their trajectories' last-turn rewards in TQ
    values = {"good": [0.0, 1.7, 0.4], "flat": [0.9, 0.9, 0.9], "small": [1.0]}
    keys = [f"{u}_{i}_0" for u, vs in values.items() for i in range(len(vs))]
    for k in keys:
        buf.partitions["train"][k] = {"status": "success"}
    buf.finished_keys["train"].update(values)

    def get(keys, partition_id, select_fields):
        assert select_fields == ["extra_fields"]
        return {"extra_fields": [{"reward_extra_info": {"last_turn_reward": values[k.split("_")[0]][int(k.split("_")[1])]}}
                                 for k in keys]}

    monkeypatch.setattr(trainer_mod.tq, "kv_batch_get", get)
    dropped, counts = buf._dapo_filtered_keys("train")
    assert dropped == {"flat", "small"}
    assert buf._dapo_classification_cache["train"]["good"] is None
    assert buf._dapo_filtered_keys("val") == (set(), {})
