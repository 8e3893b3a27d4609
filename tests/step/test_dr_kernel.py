"""Tests for drkernel/step/dr_kernel.py: the Dr. Kernel step order, stage by stage and end to end.

Layout used throughout: one row per trajectory, T = 3 turns, each turn 2 policy tokens followed by
one feedback token (turn index -1): tok_turn_index = [0, 0, -1, 1, 1, -1, 2, 2].
"""

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from drkernel.advantages import get_advantage
from drkernel.correction import MismatchConfig
from drkernel.rewards import PRSConfig
from drkernel.step import DrKernelStepConfig, StepBatch, StepState, dr_kernel_step

TURN_INDEX = [0, 0, -1, 1, 1, -1, 2, 2]
L = len(TURN_INDEX)

# Reference §1.4, rewards before the loss mask (D's turn 2 raw 0: a post-success regression).
R14 = [[0.0, 1.0, 1.5], [0.0, 0.0, 0.0], [1.0, 1.2, 1.6], [1.1, 0.0, 1.3]]
# Hand-worked TRLOO advantages (the worked example of the trloo docstring):
# turn 1: N = 4, sum G = 8.7: A = 2.5 - 6.2/3, 0 - 8.7/3, 3.8 - 4.9/3, 2.4 - 6.3/3
# turn 2: N = 3 (D out), sum G = 5.3: A = 2.5 - 2.8/2, 0 - 5.3/2, 2.8 - 2.5/2; D 0
# turn 3: N = 4, sum G = 4.4: A = 1.5 - 2.9/3, 0 - 4.4/3, 1.6 - 2.8/3, 1.3 - 3.1/3
A14 = [
    [2.5 - 6.2 / 3, 2.5 - 1.4, 1.5 - 2.9 / 3],
    [-2.9, -2.65, -4.4 / 3],
    [3.8 - 4.9 / 3, 2.8 - 1.25, 1.6 - 2.8 / 3],
    [2.4 - 2.1, 0.0, 1.3 - 3.1 / 3],
]


def make_batch(rewards=R14, groups=None, *, log_rho=None, coverage=None, correct=None, **kw):
    """A batch in the module's layout; log rho = log pi_old - log mu per token (default 0)."""
    r = torch.tensor(rewards, dtype=torch.float64)
    n = r.shape[0]
    ti = torch.tensor(TURN_INDEX).expand(n, L).clone()
    old = torch.full((n, L), -0.5, dtype=torch.float64)
    rho = torch.zeros(n, L, dtype=torch.float64) if log_rho is None else log_rho
    cor = (r > 0) if correct is None else correct
    cov = torch.ones(n, 3, dtype=torch.float64) if coverage is None else coverage
    return StepBatch(
        response_mask=ti >= 0,
        old_log_probs=old,
        tok_turn_index=ti,
        turn_rewards=r,
        group_ids=["p"] * n if groups is None else groups,
        rollout_log_probs=old - rho,
        turn_correct=cor,
        turn_coverage=cov,
        **kw,
    )


def one_group(**kw):
    return DrKernelStepConfig(target_num_groups=1, samples_per_prompt=4, **kw)


def tok(turn_values):
    """Per-turn (N, 3) values on the token layout (0 on feedback tokens)."""
    t = torch.tensor(turn_values, dtype=torch.float64)
    ti = torch.tensor(TURN_INDEX)
    return torch.where(ti >= 0, t[:, ti.clamp(min=0)], torch.zeros(()))


def test_reference_1_4_numbers_through_the_whole_step():
    res, state = dr_kernel_step(make_batch(), one_group())
    assert not res.skipped and state.buffer is None
    assert torch.allclose(res.turn_advantages, torch.tensor(A14, dtype=torch.float64), atol=1e-12)
    # A +0.433, B -2.9, C +2.167, D +0.3 on turn 1 (the reference's rounded figures)
    assert res.turn_advantages[:, 0].tolist() == pytest.approx([0.433, -2.9, 2.167, 0.3], abs=1e-3)
    assert torch.allclose(res.tok_advantages, tok(A14), atol=1e-12)
    # D's turn-2 tokens (positions 3, 4) leave the loss; every other policy token trains
    expected_mask = torch.tensor(TURN_INDEX).expand(4, L) >= 0
    expected_mask = expected_mask.clone()
    expected_mask[3, 3:5] = False
    assert torch.equal(res.loss_mask, expected_mask)
    assert res.turn_loss_mask[3].tolist() == [True, False, True]
    assert res.kept_rows.tolist() == [0, 1, 2, 3] and res.group_ids == ["p"] * 4
    m = res.metrics
    assert m["turn_mask/regression_frac"] == pytest.approx(1 / 12)
    assert m["trloo/group_size_mean"] == pytest.approx((4 * 4 + 3 * 3 + 4 * 4) / 11)
    assert m["mrs/rejected_traj_frac"] == 0.0 and m["prs/masked_frac"] == 0.0
    assert m["reward/turn3/mean"] == pytest.approx(4.4 / 4)
    assert m["step/tokens_in"] == 24 and m["step/tokens_kept"] == 22
    for ns in ("turn_mask/", "reward/", "mrs/", "prs/", "filter/", "trloo/", "step/"):
        assert any(k.startswith(ns) for k in m), ns


def test_masked_turn_reward_is_zeroed_before_the_returns():
    # D's turn 2 carries a raw reward 0.7, but a precomputed loss mask drops that turn: its reward
    # must count 0, so D's turn-1 return stays 1.1 + 1.3 = 2.4 and every number of §1.4 holds.
    rewards = [row[:] for row in R14]
    rewards[3][1] = 0.7
    loss_mask = torch.tensor([[1, 1, 1], [1, 1, 1], [1, 1, 1], [1, 0, 1]]).bool()
    res, _ = dr_kernel_step(make_batch(rewards, turn_loss_mask=loss_mask), one_group())
    assert torch.allclose(res.turn_advantages, torch.tensor(A14, dtype=torch.float64), atol=1e-12)
    assert res.turn_rewards[3].tolist() == [1.1, 0.0, 1.3]


def test_failed_trajectory_is_masked_whole_and_dropped_as_dead():
    # B failed: all its turns leave the loss mask and the groups. Turn 1 then has N = 3 over
    # {A, C, D} with G = {2.5, 3.8, 2.4}, sum 8.7: A_A = 2.5 - 6.2/2 = -0.6.
    res, _ = dr_kernel_step(make_batch(failed=torch.tensor([False, True, False, False])), one_group())
    assert res.kept_rows.tolist() == [0, 2, 3]
    assert res.metrics["step/dead_rows_dropped"] == 1.0
    assert res.turn_advantages[0, 0].item() == pytest.approx(2.5 - 6.2 / 2)


def test_mrs_rejected_trajectory_keeps_its_place_in_peers_baselines():
    # C's tokens have mean log rho 0.0012: w = e^0.0012 > 1.001, the whole trajectory is rejected
    # (geometric MRS) and dropped as a dead row. Its returns still sit in A, B, D's baselines, so
    # their advantages are exactly the §1.4 numbers.
    log_rho = torch.zeros(4, L, dtype=torch.float64)
    log_rho[2] = 0.0012
    res, _ = dr_kernel_step(make_batch(log_rho=log_rho), one_group())
    assert res.kept_rows.tolist() == [0, 1, 3]
    expected = torch.tensor(A14, dtype=torch.float64)[[0, 1, 3]]
    assert torch.allclose(res.turn_advantages, expected, atol=1e-12)
    assert res.metrics["mrs/rs_rejected_traj_frac"] == pytest.approx(1 / 4)
    # 0.0008 (w = 1.0008) is inside [0.999, 1.001]: kept
    log_rho[2] = 0.0008
    res, _ = dr_kernel_step(make_batch(log_rho=log_rho), one_group())
    assert res.kept_rows.tolist() == [0, 1, 2, 3]


def test_geometric_mrs_averages_over_all_turns_of_the_trajectory():
    # A's turn 1 is off by 0.003 per token, turns 2 and 3 by 0: mean over 6 tokens 0.001 -> kept?
    # e^0.001 = 1.0010005 > 1.001: rejected. With 0.0027: mean 0.0009 -> e^0.0009 < 1.001: kept.
    log_rho = torch.zeros(4, L, dtype=torch.float64)
    log_rho[0, 0:2] = 0.0027
    res, _ = dr_kernel_step(make_batch(log_rho=log_rho), one_group())
    assert res.kept_rows.tolist() == [0, 1, 2, 3]
    log_rho[0, 0:2] = 0.003
    res, _ = dr_kernel_step(make_batch(log_rho=log_rho), one_group())
    assert res.kept_rows.tolist() == [1, 2, 3]


def test_token_veto_masks_only_its_turn():
    # One token of B's turn 3 has log rho = -10 < ln 1e-4 = -9.21: only B's turn-3 tokens go.
    # (Balance it with +10 on B's other turn-3 token so B's geometric mean stays 0.)
    log_rho = torch.zeros(4, L, dtype=torch.float64)
    log_rho[1, 6], log_rho[1, 7] = -10.0, 10.0
    res, _ = dr_kernel_step(make_batch(log_rho=log_rho), one_group())
    assert res.loss_mask[1].tolist() == [True, True, False, True, True, False, False, False]
    assert torch.allclose(res.turn_advantages, torch.tensor(A14, dtype=torch.float64), atol=1e-12)
    assert res.metrics["mrs/veto_rejected_turn_frac"] == pytest.approx(1 / 11)


def test_truncated_is_weights_when_enabled():
    # token-level TIS with U = 2: log rho 0.0005 on A's tokens -> w = e^0.0005; elsewhere 1; 0 off-mask
    log_rho = torch.zeros(4, L, dtype=torch.float64)
    log_rho[0] = 0.0005
    cfg = one_group(mismatch=MismatchConfig(is_level="token"))
    res, _ = dr_kernel_step(make_batch(log_rho=log_rho), cfg)
    assert res.is_weights is not None
    assert res.is_weights[0, 0].item() == pytest.approx(math.exp(0.0005))
    assert res.is_weights[0, 2].item() == 0.0  # feedback token
    assert res.is_weights[3, 3].item() == 0.0  # D's masked turn 2
    assert res.is_weights[1, 0].item() == pytest.approx(1.0)
    res, _ = dr_kernel_step(make_batch(), one_group())
    assert res.is_weights is None  # the recipe: no IS
    # turn level: A's turn-1 tokens carry log rho 0.0004 each -> w = e^0.0008 on turn 1 only;
    # trajectory level: the same product over all of A's turns, on every turn of A
    log_rho = torch.zeros(4, L, dtype=torch.float64)
    log_rho[0, 0:2] = 0.0004
    for level, turn2 in (("turn", 1.0), ("trajectory", math.exp(0.0008))):
        res, _ = dr_kernel_step(make_batch(log_rho=log_rho), one_group(mismatch=MismatchConfig(is_level=level)))
        w = res.is_weights[0]
        assert w[0].item() == pytest.approx(math.exp(0.0008)) and w[1].item() == pytest.approx(math.exp(0.0008))
        assert w[3].item() == pytest.approx(turn2) and w[2].item() == 0.0


def test_prs_rejects_low_coverage_correct_turns_but_they_stay_in_baselines():
    # C's turn 1 is correct with coverage 0.2 <= theta = 0.3: p = 0, rejected; 0.45 >= 0.4: kept.
    cov = torch.ones(4, 3, dtype=torch.float64)
    cov[2, 0] = 0.2
    cov[2, 1] = 0.45
    res, _ = dr_kernel_step(make_batch(coverage=cov), one_group())
    assert res.loss_mask[2].tolist() == [False, False, False, True, True, False, True, True]
    assert torch.allclose(res.turn_advantages, torch.tensor(A14, dtype=torch.float64), atol=1e-12)
    # correct (r > 0) trained turns: A 2, 3; C 1, 2, 3; D 1, 3 = 7, one rejected
    assert res.metrics["prs/correct_masked_frac"] == pytest.approx(1 / 7)
    # an incorrect turn with coverage 0 is always kept (B's turns)
    assert res.loss_mask[1].sum().item() == 6


def test_prs_inside_the_ramp_needs_a_generator_and_is_reproducible():
    cov = torch.ones(4, 3, dtype=torch.float64)
    cov[:, :] = 0.35  # p = 0.5 on every correct turn
    with pytest.raises(ValueError, match="Generator"):
        dr_kernel_step(make_batch(coverage=cov), one_group())
    a, _ = dr_kernel_step(make_batch(coverage=cov), one_group(), generator=torch.Generator().manual_seed(3))
    b, _ = dr_kernel_step(make_batch(coverage=cov), one_group(), generator=torch.Generator().manual_seed(3))
    assert torch.equal(a.loss_mask, b.loss_mask) and torch.equal(a.kept_rows, b.kept_rows)
    no_outcomes = make_batch()
    no_outcomes.turn_coverage = None
    with pytest.raises(ValueError, match="turn_correct"):
        dr_kernel_step(no_outcomes, one_group())
    # with PRS off the outcome fields are not needed
    res, _ = dr_kernel_step(no_outcomes, one_group(prs=None))
    assert torch.allclose(res.turn_advantages, torch.tensor(A14, dtype=torch.float64), atol=1e-12)


def _two_groups(rewards_p, rewards_q, ids=("p", "q"), extras=True):
    rewards = rewards_p + rewards_q
    groups = [ids[0]] * len(rewards_p) + [ids[1]] * len(rewards_q)
    ex = {"row_name": [f"{g}{i}" for i, g in enumerate(groups)], "ids": torch.arange(len(groups))} if extras else {}
    return make_batch(rewards, groups, extras=ex)


def test_group_filter_skips_and_buffers_then_trains_on_buffer_plus_new():
    cfg = DrKernelStepConfig(target_num_groups=2, samples_per_prompt=2)
    # step 1: group p has last-turn rewards {1.5, 0} (valid), q {0, 0} (std 0: dropped) -> 1 < 2: skip
    b1 = _two_groups([[0, 1.0, 1.5], [0, 0, 0]], [[0, 0, 0], [0, 0, 0]])
    res1, st1 = dr_kernel_step(b1, cfg)
    assert res1.skipped and res1.kept_rows.numel() == 0 and res1.tok_advantages.shape == (0, L)
    assert st1.skip_streak == 1 and st1.buffer.group_ids == ["p", "p"]
    assert st1.buffer.extras["row_name"] == ["p0", "p1"]
    assert res1.metrics["filter/skipped"] == 1.0 and res1.metrics["filter/num_low_variance"] == 1.0
    # step 2: a new valid group r -> buffer p + r = 2 groups: train on both
    b2 = _two_groups([[0, 0, 0.5], [0, 0, 0]], [[0, 0, 0], [0, 0, 0]], ids=("r", "s"))
    res2, st2 = dr_kernel_step(b2, cfg, st1)
    assert not res2.skipped and st2.buffer is None and st2.skip_streak == 0
    assert res2.num_buffered == 2
    assert res2.group_ids == ["p", "p", "r", "r"]
    assert res2.kept_rows.tolist() == [0, 1, 2, 3]  # buffer rows 0-1, new rows 0-1 (-> 2, 3)
    assert res2.extras["row_name"] == ["p0", "p1", "r0", "r1"]
    assert res2.extras["ids"].tolist() == [0, 1, 0, 1]
    # p's advantages are TRLOO within p: turn 3 G = {1.5, 0}: A = +-1.5
    assert res2.turn_advantages[:2, 2].tolist() == pytest.approx([1.5, -1.5])
    assert res2.turn_advantages[2:, 2].tolist() == pytest.approx([0.5, -0.5])
    assert res2.metrics["filter/buffered_rows_in"] == 2.0
    # a new batch must not reuse buffered prompt ids
    with pytest.raises(ValueError, match="unique per step"):
        dr_kernel_step(_two_groups([[0, 0, 1.0], [0, 0, 0]], [[0, 0, 0], [0, 0, 0]]), cfg, st1)


def test_max_skip_steps_trains_on_what_there_is():
    cfg = DrKernelStepConfig(target_num_groups=2, samples_per_prompt=2, max_skip_steps=1)
    b = _two_groups([[0, 1.0, 1.5], [0, 0, 0]], [[0, 0, 0], [0, 0, 0]])
    res, st = dr_kernel_step(b, cfg, StepState(skip_streak=1))
    assert not res.skipped and res.group_ids == ["p", "p"] and st.skip_streak == 0
    res, st = dr_kernel_step(b, cfg, StepState(skip_streak=0))
    assert res.skipped and st.skip_streak == 1


def test_surplus_groups_are_drawn_with_the_generator():
    cfg = DrKernelStepConfig(target_num_groups=1, samples_per_prompt=2)
    b = _two_groups([[0, 1.0, 1.5], [0, 0, 0]], [[0, 0, 2.0], [0, 0, 0]], extras=False)
    with pytest.raises(ValueError, match="Generator"):
        dr_kernel_step(b, cfg)
    picks = set()
    for seed in range(8):
        res, _ = dr_kernel_step(b, cfg, generator=torch.Generator().manual_seed(seed))
        assert len(set(res.group_ids)) == 1 and res.metrics["filter/num_selected"] == 1.0
        picks.add(res.group_ids[0])
    assert picks == {"p", "q"}
    # without the filter every group trains
    res, _ = dr_kernel_step(b, DrKernelStepConfig(group_filter=False))
    assert res.group_ids == ["p", "p", "q", "q"]


def test_estimator_by_registry_name():
    cfg = one_group(estimator="grpo")
    res, _ = dr_kernel_step(make_batch(), cfg)
    r = torch.tensor(R14, dtype=torch.float64)
    mask = torch.ones(4, 3, dtype=torch.bool)
    mask[3, 1] = False
    expected = get_advantage("grpo")(torch.where(mask, r, torch.zeros(())), ["p"] * 4, mask)
    assert torch.allclose(res.turn_advantages, expected)
    # GRPO's self-inclusive mean is (N-1)/N times TRLOO's advantage in a full cell (§1.6)
    assert res.turn_advantages[0, 0].item() == pytest.approx(A14[0][0] * 3 / 4)
    assert "grpo/adv_mean" in res.metrics
    with pytest.raises(ValueError, match="known"):
        DrKernelStepConfig(estimator="nope")


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rows_permute_with_the_batch(seed):
    # Property: the step is equivariant under a permutation of the rows (deterministic stages).
    g = torch.Generator().manual_seed(seed)
    n = 8
    rewards = (torch.rand(n, 3, generator=g) * 2 - 0.5).clamp(min=0).double()
    log_rho = (torch.rand(n, L, generator=g) - 0.5).double() * 0.004
    groups = [i % 2 for i in range(n)]
    cov = torch.where(torch.rand(n, 3, generator=g) < 0.5, 0.1, 0.9).double()
    cfg = DrKernelStepConfig(target_num_groups=None, samples_per_prompt=4)
    a, _ = dr_kernel_step(make_batch(rewards.tolist(), groups, log_rho=log_rho, coverage=cov), cfg)
    perm = torch.randperm(n, generator=g)
    b, _ = dr_kernel_step(
        make_batch(rewards[perm].tolist(), [groups[i] for i in perm], log_rho=log_rho[perm], coverage=cov[perm]), cfg
    )
    # map: row perm[j] of the original is row j of the permuted batch
    adv_a = torch.zeros(n, L, dtype=torch.float64)
    adv_a[a.kept_rows] = a.tok_advantages
    adv_b = torch.zeros(n, L, dtype=torch.float64)
    adv_b[b.kept_rows] = b.tok_advantages
    assert torch.allclose(adv_b, adv_a[perm], atol=1e-12)
    assert sorted(perm[b.kept_rows].tolist()) == a.kept_rows.tolist()


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_rejections_never_change_peers_advantages(seed):
    # Property (§1.2): MRS/PRS only remove a row's own tokens; every surviving token has the same
    # advantage as in a run with MRS and PRS off.
    g = torch.Generator().manual_seed(seed)
    n = 8
    rewards = (torch.rand(n, 3, generator=g) * 2 - 0.5).clamp(min=0).double()
    log_rho = (torch.rand(n, L, generator=g) - 0.5).double() * 0.004
    cov = torch.where(torch.rand(n, 3, generator=g) < 0.4, 0.1, 0.9).double()
    groups = [i % 2 for i in range(n)]
    batch = make_batch(rewards.tolist(), groups, log_rho=log_rho, coverage=cov)
    on, _ = dr_kernel_step(batch, DrKernelStepConfig(target_num_groups=None, samples_per_prompt=4))
    off, _ = dr_kernel_step(batch, DrKernelStepConfig(target_num_groups=None, samples_per_prompt=4, mismatch=None, prs=None))
    full = torch.zeros(n, L, dtype=torch.float64)
    full[off.kept_rows] = off.tok_advantages
    assert torch.allclose(on.tok_advantages, torch.where(on.loss_mask, full[on.kept_rows], torch.zeros(())))
    assert on.loss_mask.sum() < off.loss_mask.sum()  # the draw really rejected something


def test_input_validation():
    b = make_batch()
    b.tok_turn_index = b.tok_turn_index.clone()
    b.tok_turn_index[0, 0] = -1  # a policy token without a turn
    with pytest.raises(ValueError, match="needs its turn"):
        dr_kernel_step(b, one_group())
    b = make_batch()
    b.tok_turn_index = torch.full((4, L), 3)
    with pytest.raises(ValueError, match=r"\[-1, T\)"):
        dr_kernel_step(b, one_group())
    b = make_batch()
    b.old_log_probs = b.old_log_probs.clone()
    b.old_log_probs[2, 6] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        dr_kernel_step(b, one_group())
    b.old_log_probs[2, 6] = 0.0
    b.old_log_probs[2, 5] = float("nan")  # a feedback token: not the policy's, ignored
    dr_kernel_step(b, one_group())
    with pytest.raises(ValueError, match="length N"):
        dr_kernel_step(make_batch(groups=["p"] * 3), one_group())
    assert DrKernelStepConfig().resolved_min_group_size() == 9  # n // 2 + 1 with n = 16
    assert PRSConfig() == DrKernelStepConfig().prs and MismatchConfig() == DrKernelStepConfig().mismatch


def test_import_stays_light():
    heavy = ("verl", "vllm", "ray", "triton", "transformers")
    code = (
        "import sys\n"
        "import drkernel.step, drkernel.losses\n"
        f"print(','.join(m for m in {heavy!r} if m in sys.modules))\n"
    )
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": str(root) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"heavy modules imported: {out.stdout.strip()}"


def _to(batch, device):
    for name in ("response_mask", "old_log_probs", "tok_turn_index", "turn_rewards", "rollout_log_probs",
                 "turn_correct", "turn_coverage"):
        setattr(batch, name, getattr(batch, name).to(device))
    return batch


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_tensors_with_a_cpu_generator_match_cpu():
    # PRS inside its ramp and a surplus-group draw, both from one CPU generator: same keeps on GPU.
    from drkernel.losses import policy_loss

    cov = torch.full((8, 3), 0.35, dtype=torch.float64)
    groups = ["p"] * 4 + ["q"] * 4
    rewards = R14 + [[0.0, 0.5, 1.0], [0.0, 0.0, 0.0], [0.2, 0.0, 0.0], [0.0, 0.0, 2.0]]
    cfg = DrKernelStepConfig(target_num_groups=1, samples_per_prompt=4)
    cpu, _ = dr_kernel_step(make_batch(rewards, groups, coverage=cov), cfg, generator=torch.Generator().manual_seed(5))
    gpu, _ = dr_kernel_step(_to(make_batch(rewards, groups, coverage=cov), "cuda"), cfg,
                            generator=torch.Generator().manual_seed(5))
    assert gpu.tok_advantages.is_cuda and gpu.loss_mask.is_cuda
    assert torch.equal(gpu.loss_mask.cpu(), cpu.loss_mask) and gpu.group_ids == cpu.group_ids
    assert torch.allclose(gpu.tok_advantages.cpu(), cpu.tok_advantages)
    lp = gpu.old_log_probs.clone().requires_grad_(True)
    loss, m = policy_loss(lp, gpu.old_log_probs, gpu.tok_advantages, gpu.loss_mask)
    loss.backward()
    assert lp.grad.is_cuda and m["actor/ratio_mean"] == 1.0


def _step_loop(rewards, groups, turn_index, mask, log_rho, correct, coverage, *, lower, upper, tau, theta, std_thr):
    """Readable reference of the step with plain loops (deterministic settings: PRS hard cut, no
    group selection). Shares no code with the library. Returns {row: [token advantages]}."""
    n, num_turns, length = len(rewards), len(rewards[0]), len(turn_index[0])
    exists = [[any(mask[i][l] and turn_index[i][l] == t for l in range(length)) for t in range(num_turns)]
              for i in range(n)]
    loss = [[False] * num_turns for _ in range(n)]
    for i in range(n):
        for t in range(num_turns):
            earlier_success = any(exists[i][k] and rewards[i][k] > 0 for k in range(t))
            loss[i][t] = exists[i][t] and not (earlier_success and rewards[i][t] <= 0)
    m = [[mask[i][l] and turn_index[i][l] >= 0 and loss[i][turn_index[i][l]] for l in range(length)] for i in range(n)]
    # MRS: geometric trajectory test and per-turn veto, both on the loss-masked tokens
    keep_traj = []
    for i in range(n):
        vals = [max(-20.0, min(20.0, log_rho[i][l])) for l in range(length) if m[i][l]]
        keep_traj.append(not vals or lower <= math.exp(sum(vals) / len(vals)) <= upper)
    vetoed = [[any(m[i][l] and turn_index[i][l] == t and log_rho[i][l] < math.log(tau) for l in range(length))
               for t in range(num_turns)] for i in range(n)]
    m2 = [[m[i][l] and keep_traj[i] and not vetoed[i][turn_index[i][l]] for l in range(length)] for i in range(n)]
    # PRS, hard cut: a live correct turn with coverage < theta is dropped
    alive = [[any(m2[i][l] and turn_index[i][l] == t for l in range(length)) for t in range(num_turns)] for i in range(n)]
    drop = [[alive[i][t] and correct[i][t] and coverage[i][t] < theta for t in range(num_turns)] for i in range(n)]
    m3 = [[m2[i][l] and not drop[i][turn_index[i][l]] for l in range(length)] for i in range(n)]
    r = [[rewards[i][t] if loss[i][t] else 0.0 for t in range(num_turns)] for i in range(n)]
    # group filter on last existing turn's reward
    last = {}
    for i in range(n):
        ts = [t for t in range(num_turns) if exists[i][t]]
        if ts:
            last[i] = r[i][ts[-1]]
    kept_groups = set()
    for g in set(groups):
        vals = [last[i] for i in last if groups[i] == g]
        if len(vals) >= 2:
            mean = sum(vals) / len(vals)
            std = math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1))
            if std < std_thr:
                continue
        if vals:
            kept_groups.add(g)
    sel = [i for i in range(n) if groups[i] in kept_groups and i in last]
    # TRLOO over the selected rows, turn_mask = loss
    big_g = {i: [sum(r[i][k] for k in range(t, num_turns)) for t in range(num_turns)] for i in sel}
    out = {}
    for i in sel:
        adv = []
        for t in range(num_turns):
            if not loss[i][t]:
                adv.append(0.0)
                continue
            peers = [j for j in sel if groups[j] == groups[i] and loss[j][t] and j != i]
            adv.append(big_g[i][t] - (sum(big_g[j][t] for j in peers) / len(peers) if peers else 0.0))
        toks = [adv[turn_index[i][l]] if m3[i][l] else 0.0 for l in range(length)]
        if any(m3[i]):
            out[i] = toks
    return out


@pytest.mark.parametrize("seed", range(6))
def test_step_agrees_with_a_readable_loop_reference(seed):
    g = torch.Generator().manual_seed(seed)
    n, num_turns, length = 12, 3, 9
    # turns of 3 tokens [t, t, -1]-style with random gaps and random lengths
    turn_index = torch.full((n, length), -1, dtype=torch.long)
    for i in range(n):
        k = int(torch.randint(1, num_turns + 1, (1,), generator=g))  # trajectories with 1..3 turns
        for t in range(k):
            width = int(torch.randint(1, 3, (1,), generator=g))
            turn_index[i, 3 * t: 3 * t + width] = t
    mask = turn_index >= 0
    rewards = torch.where(torch.rand(n, num_turns, generator=g) < 0.5, 0.0,
                          torch.rand(n, num_turns, generator=g) * 2).double()
    log_rho = ((torch.rand(n, length, generator=g) - 0.5) * 0.003).double()
    log_rho[torch.rand(n, length, generator=g) < 0.03] = -12.0  # veto and trajectory rejection
    for i in range(0, n, 4):  # a -12 balanced by a +12 in the same row: the veto alone fires
        valid = mask[i].nonzero().flatten()
        if valid.numel() >= 2:
            log_rho[i, valid[0]], log_rho[i, valid[-1]] = -12.0, 12.0
    correct = torch.rand(n, num_turns, generator=g) < 0.6
    coverage = torch.rand(n, num_turns, generator=g).double()
    groups = [i % 3 for i in range(n)]
    if seed % 2 == 0:  # group 2 gets equal rewards: the zero-variance filter drops it
        rewards[[i for i in range(n) if groups[i] == 2]] = 1.0
    old = torch.full((n, length), -1.0, dtype=torch.float64)
    batch = StepBatch(response_mask=mask, old_log_probs=old, tok_turn_index=turn_index, turn_rewards=rewards,
                      group_ids=groups, rollout_log_probs=old - log_rho, turn_correct=correct,
                      turn_coverage=coverage)
    cfg = DrKernelStepConfig(prs=PRSConfig(factor=0.0), target_num_groups=None, samples_per_prompt=None)
    res, _ = dr_kernel_step(batch, cfg)
    expected = _step_loop(rewards.tolist(), groups, turn_index.tolist(), mask.tolist(), log_rho.tolist(),
                          correct.tolist(), coverage.tolist(), lower=0.999, upper=1.001, tau=1e-4, theta=0.3,
                          std_thr=1e-3)
    assert res.kept_rows.tolist() == sorted(expected)
    for k, row in enumerate(res.kept_rows.tolist()):
        assert res.tok_advantages[k].tolist() == pytest.approx(expected[row], abs=1e-12)
