"""verl's compute_advantage with algorithm.adv_estimator=trloo equals drkernel's step function."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("verl")

from omegaconf import OmegaConf  # noqa: E402

from drkernel.step import DrKernelStepConfig, StepBatch, dr_kernel_step  # noqa: E402
from drkernel.verl import estimator  # noqa: E402
from drkernel.verl.layout import turn_index_from_mask  # noqa: E402


def _verl_advantages(rewards: torch.Tensor, mask: torch.Tensor, uids: list[str], gamma: float = 1.0):
    from verl import DataProto
    from verl.trainer.ppo.ray_trainer import compute_advantage

    estimator.register()
    data = DataProto.from_dict(tensors={"token_level_rewards": rewards, "response_mask": mask},
                               non_tensors={"uid": np.array(uids, dtype=object)})
    cfg = OmegaConf.create({"gamma": gamma, "lam": 1.0, "adv_estimator": "trloo"})
    out = compute_advantage(data, adv_estimator="trloo", gamma=gamma, config=cfg)
    return out.batch["advantages"], out.batch["returns"]


def _random_batch(seed: int, n: int = 12, turns: int = 3, tok: int = 3, fb: int = 2):
    """n trajectories, up to `turns` turns of `tok` tokens separated by `fb` feedback tokens."""
    g = torch.Generator().manual_seed(seed)
    length = turns * tok + (turns - 1) * fb + 2
    mask = torch.zeros(n, length, dtype=torch.int64)
    ti = torch.full((n, length), -1, dtype=torch.int64)
    rewards = torch.zeros(n, length)
    turn_rewards = torch.zeros(n, turns, dtype=torch.float64)
    for i in range(n):
        k = int(torch.randint(1, turns + 1, (1,), generator=g))  # this trajectory's turns
        for t in range(k):
            start = t * (tok + fb)
            mask[i, start:start + tok] = 1
            ti[i, start:start + tok] = t
            r = float(torch.rand(1, generator=g) * 2.5) if torch.rand(1, generator=g) > 0.3 else 0.0
            rewards[i, start + tok - 1] = r
            turn_rewards[i, t] = r
    uids = [f"p{i % 4}" for i in range(n)]
    return mask, ti, rewards, turn_rewards, uids


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("gamma", [1.0, 0.9])
def test_verl_compute_advantage_equals_step(seed: int, gamma: float) -> None:
    mask, ti, rewards, turn_rewards, uids = _random_batch(seed)
    adv, ret = _verl_advantages(rewards, mask, uids, gamma)
    cfg = DrKernelStepConfig(estimator="trloo", gamma=gamma, mask_void_turn=False, mismatch=None, prs=None,
                             group_filter=False, target_num_groups=None, samples_per_prompt=None)
    res, _ = dr_kernel_step(StepBatch(response_mask=mask.bool(), old_log_probs=torch.zeros(mask.shape),
                                      tok_turn_index=ti, turn_rewards=turn_rewards, group_ids=uids), cfg)
    expected = torch.zeros(mask.shape, dtype=torch.float64)
    expected[res.kept_rows] = res.tok_advantages.double()
    torch.testing.assert_close(adv.double(), expected, atol=1e-5, rtol=1e-5)
    # returns: G_{i,t} = sum_{k >= t} gamma^(k-t) r_{i,k} on turn t's tokens
    for i in range(mask.shape[0]):
        for t in range(turn_rewards.shape[1]):
            g = sum(gamma ** (k - t) * float(turn_rewards[i, k]) for k in range(t, turn_rewards.shape[1]))
            sel = ti[i] == t
            if bool(sel.any()):
                assert torch.allclose(ret[i, sel].double(), torch.full((int(sel.sum()),), g, dtype=torch.float64),
                                      atol=1e-5)


def test_reference_worked_example_through_verl() -> None:
    """Reference §1.4 turn 1 and 3 (no meaningful-turn mask in the bare estimator):
    turn-1 advantages +0.433, -2.9, +2.167, +0.3."""
    rew = [[0, 1.0, 1.5], [0, 0, 0], [1.0, 1.2, 1.6], [1.1, 0, 1.3]]
    mask = torch.tensor([[1, 1, 0, 1, 1, 0, 1, 1]] * 4)
    tr = torch.zeros(4, 8)
    for i, r in enumerate(rew):
        tr[i, 1], tr[i, 4], tr[i, 7] = r
    adv, ret = _verl_advantages(tr, mask, ["p"] * 4)
    torch.testing.assert_close(adv[:, 0], torch.tensor([0.4333, -2.9, 2.1667, 0.3]), atol=1e-3, rtol=0)
    torch.testing.assert_close(adv[:, 6], torch.tensor([0.5333, -1.4667, 0.6667, 0.2667]), atol=1e-3, rtol=0)
    torch.testing.assert_close(ret[:, 0], torch.tensor([2.5, 0.0, 3.8, 2.4]))
    assert bool((adv[:, 2] == 0).all()) and bool((adv[:, 5] == 0).all())  # feedback tokens


def test_turn_index_from_mask_runs() -> None:
    mask = torch.tensor([[1, 1, 0, 0, 1, 0, 1], [0, 1, 1, 1, 0, 0, 0]])
    assert turn_index_from_mask(mask).tolist() == [[0, 0, -1, -1, 1, -1, 2], [-1, 0, 0, 0, -1, -1, -1]]


def test_explicit_turn_index_matches_runs_and_singleton_group() -> None:
    mask, ti, rewards, _, uids = _random_batch(5)
    a1, _ = estimator.trloo_token_advantages(rewards, mask, uids)
    a2, _ = estimator.trloo_token_advantages(rewards, mask, uids, tok_turn_index=ti)
    torch.testing.assert_close(a1, a2)
    # one row alone in its group: baseline 0, A = G
    a, g = estimator.trloo_token_advantages(rewards[:1], mask[:1], None)
    torch.testing.assert_close(a, g)


def test_row_rejected_by_verl_rollout_correction_drops_out() -> None:
    """verl's sequence-level rejection zeroes a row's mask but leaves its reward: no crash, the row
    gets 0 and leaves its group, the others are TRLOO over the remaining rows."""
    mask, ti, rewards, _, uids = _random_batch(3)
    cut = mask.clone()
    cut[0] = 0
    adv, _ = _verl_advantages(rewards, cut, uids)
    assert bool((adv[0] == 0).all())
    keep = list(range(1, mask.shape[0]))
    ref, _ = estimator.trloo_token_advantages(rewards[keep], mask[keep], [uids[i] for i in keep])
    torch.testing.assert_close(adv[keep], ref)
