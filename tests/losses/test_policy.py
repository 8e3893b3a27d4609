"""Tests for drkernel/losses/policy.py: dual-clip PPO, aggregation, micro-batches, metrics."""

import dataclasses
import math

import pytest
import torch

from drkernel.losses import (
    AGG_MODES,
    PolicyLossConfig,
    agg_loss,
    approx_kl,
    entropy_from_logits,
    policy_loss,
    ppo_clip_token_loss,
)


def _token(adv, ratio, **kw):
    logp = torch.log(torch.tensor([ratio], dtype=torch.float64))
    loss, r, clipped, dual = ppo_clip_token_loss(logp, torch.zeros_like(logp), torch.tensor([adv], dtype=torch.float64), **kw)
    return loss.item(), bool(clipped.item()), bool(dual.item())


def test_reference_examples_and_clip_branches():
    # A = -1, r = 5: L1 = 5, L2 = -(-1)*1.28 = 1.28, max 5 (L1: the ratio clip does not bind),
    # then the dual clip min(5, 3) = 3
    assert _token(-1.0, 5.0) == (pytest.approx(3.0), False, True)
    # without the dual clip the loss is max(L1, L2) = 5
    assert _token(-1.0, 5.0, clip_c=None)[0] == pytest.approx(5.0)
    # A = +1, r = 1.5: max(-1.5, -1.28) = -1.28, the upper clip 1 + 0.28 binds
    assert _token(1.0, 1.5) == (pytest.approx(-1.28), True, False)
    # A = +1, r = 0.5: max(-0.5, -0.8) = -0.5: unclipped (no bonus for lowering a good token)
    assert _token(1.0, 0.5) == (pytest.approx(-0.5), False, False)
    # A = -1, r = 0.5: max(0.5, 0.8) = 0.8: the lower clip 1 - 0.2 binds
    assert _token(-1.0, 0.5) == (pytest.approx(0.8), True, False)
    # A = -2, r = 1.25 (inside [0.8, 1.28]): L = 2.5, below the dual cap 6: plain -A r
    assert _token(-2.0, 1.25) == (pytest.approx(2.5), False, False)
    # asymmetric bounds: A = +1, r = 1.25 is inside 1.28 but outside a symmetric 1.2
    assert _token(1.0, 1.25)[0] == pytest.approx(-1.25)
    assert _token(1.0, 1.25, clip_high=0.2)[0] == pytest.approx(-1.2)


def test_aggregation_modes_on_the_reference_vector():
    # rows [1, 2, 3] and [4] (padded to L = 4): s = [6, 4], n = [3, 1]
    loss = torch.tensor([[1.0, 2.0, 3.0, 99.0], [4.0, 99.0, 99.0, 99.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]])
    assert agg_loss(loss, mask, "token-mean").item() == pytest.approx(10 / 4)
    assert agg_loss(loss, mask, "seq-mean-token-sum").item() == pytest.approx(5.0)  # (6 + 4) / 2
    assert agg_loss(loss, mask, "seq-mean-token-mean").item() == pytest.approx(3.0)  # (2 + 4) / 2
    assert agg_loss(loss, mask, "seq-mean-token-sum-norm").item() == pytest.approx(10 / (2 * 4))
    assert agg_loss(loss, mask, "seq-mean-token-sum-norm", norm_len=10).item() == pytest.approx(0.5)
    assert agg_loss(loss, mask, "seq-sum-no-norm").item() == pytest.approx(10.0)
    # an all-masked row does not count among the rows of the seq-mean modes
    loss3 = torch.cat([loss, torch.full((1, 4), 7.0)])
    mask3 = torch.cat([mask, torch.zeros(1, 4, dtype=torch.long)])
    assert agg_loss(loss3, mask3, "seq-mean-token-sum").item() == pytest.approx(5.0)
    # the recipe's scale: seq-mean-token-sum / 1000 = 0.005 (via policy_loss: A = -l, r = 1 gives l)
    adv = -loss
    lp = torch.zeros_like(loss, requires_grad=True)
    out, _ = policy_loss(lp, torch.zeros_like(loss), adv, mask, loss_scale_factor=1000.0)
    assert out.item() == pytest.approx(0.005)
    with pytest.raises(ValueError, match="known: token-mean"):
        agg_loss(loss, mask, "mean")


def test_empty_mask_gives_zero_loss_with_a_graph():
    lp = torch.zeros(2, 3, requires_grad=True)
    for mode in AGG_MODES:
        out, m = policy_loss(lp, torch.zeros(2, 3), torch.ones(2, 3), torch.zeros(2, 3, dtype=torch.bool), agg_mode=mode)
        assert out.item() == 0.0
        out.backward()
        assert math.isnan(m["actor/pg_clipfrac"])


def test_on_policy_gradient_is_reinforce():
    # At pi_theta = pi_old (r = 1) d l / d log pi = -A. token-mean over 3 valid tokens:
    # grad = -A m / 3 = [-1/3, +2/3, 0 | -0.5/3, 0, 0]
    adv = torch.tensor([[1.0, -2.0, 5.0], [0.5, 7.0, 7.0]])
    mask = torch.tensor([[True, True, False], [True, False, False]])
    lp = torch.full((2, 3), -1.3, requires_grad=True)
    out, m = policy_loss(lp, lp.detach().clone(), adv, mask, agg_mode="token-mean")
    out.backward()
    expected = torch.tensor([[-1 / 3, 2 / 3, 0.0], [-0.5 / 3, 0.0, 0.0]])
    assert torch.allclose(lp.grad, expected)
    assert m["actor/pg_clipfrac"] == 0.0 and m["actor/ppo_kl_k1"] == 0.0 and m["actor/ratio_mean"] == 1.0


@pytest.mark.parametrize("mode", AGG_MODES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_micro_batches_with_mini_batch_denominators_sum_to_the_full_loss(mode, seed):
    g = torch.Generator().manual_seed(seed)
    n, length = 7, 5
    old = -torch.rand(n, length, generator=g) * 3
    new = (old + 0.3 * torch.randn(n, length, generator=g)).requires_grad_(True)
    adv = torch.randn(n, length, generator=g)
    mask = torch.rand(n, length, generator=g) < 0.7
    mask[3] = False  # an empty row
    full, _ = policy_loss(new, old, adv, mask, agg_mode=mode, loss_scale_factor=10.0)
    (grad_full,) = torch.autograd.grad(full, new)
    num_tokens = float(mask.sum())
    num_seqs = float(mask.any(dim=1).sum())
    total = 0.0
    for rows in (slice(0, 2), slice(2, 5), slice(5, 7)):  # uneven split
        part, _ = policy_loss(new[rows], old[rows], adv[rows], mask[rows], agg_mode=mode,
                              loss_scale_factor=10.0, num_tokens=num_tokens, num_seqs=num_seqs,
                              norm_len=length)
        total = total + part
    (grad_micro,) = torch.autograd.grad(total, new)
    assert total.item() == pytest.approx(full.item(), rel=1e-6, abs=1e-7)
    assert torch.allclose(grad_micro, grad_full, atol=1e-7)


def test_is_weights_multiply_the_token_loss():
    # r = 1: l = -A; weights [2, 0.5] -> token losses [-2, -0.5]; seq-mean-token-sum over 1 row
    adv = torch.tensor([[1.0, 1.0]])
    lp = torch.zeros(1, 2, requires_grad=True)
    w = torch.tensor([[2.0, 0.5]])
    out, m = policy_loss(lp, torch.zeros(1, 2), adv, torch.ones(1, 2), is_weights=w)
    assert out.item() == pytest.approx(-2.5)
    assert m["actor/is_weight_mean"] == pytest.approx(1.25)


def test_metrics_clip_fractions_and_kl():
    # 4 tokens, A = +1: ratios 1, 1.5 (clipped), 1, 2 (clipped); A = -1 on a ratio 5 token (dual)
    old = torch.zeros(1, 5)
    new = torch.log(torch.tensor([[1.0, 1.5, 1.0, 2.0, 5.0]]))
    adv = torch.tensor([[1.0, 1.0, 1.0, 1.0, -1.0]])
    _, m = policy_loss(new, old, adv, torch.ones(1, 5, dtype=torch.bool))
    # L2 > L1 on r = 1.5 and 2 (A > 0); for A < 0 and r = 5, L1 = 5 > L2 = 1.28: the dual clip binds
    assert m["actor/pg_clipfrac"] == pytest.approx(2 / 5)
    assert m["actor/pg_clipfrac_dual"] == pytest.approx(1 / 5)
    assert m["actor/ratio_max"] == pytest.approx(5.0) and m["actor/ratio_min"] == pytest.approx(1.0)
    assert m["actor/ppo_kl_k1"] == pytest.approx(-(math.log(1.5) + math.log(2) + math.log(5)) / 5)


def test_approx_kl_and_entropy_worked_numbers():
    log_r = torch.log(torch.tensor([[2.0, 0.5]]))
    mask = torch.ones(1, 2, dtype=torch.bool)
    assert approx_kl(log_r, torch.zeros(1, 2), mask, "k1") == pytest.approx(0.0)
    # ((2 - 1 - ln 2) + (0.5 - 1 + ln 2)) / 2 = 0.25
    assert approx_kl(log_r, torch.zeros(1, 2), mask, "k3") == pytest.approx(0.25)
    assert math.isnan(approx_kl(log_r, torch.zeros(1, 2), ~mask))
    assert entropy_from_logits(torch.tensor([[0.0, 0.0]])).item() == pytest.approx(math.log(2))
    assert entropy_from_logits(torch.tensor([0.0, 0.0, 0.0, 0.0], dtype=torch.bfloat16)).item() == pytest.approx(math.log(4))
    # entropy bonus lowers the loss by coef * agg(H)
    lp = torch.zeros(1, 2, requires_grad=True)
    h = torch.full((1, 2), 0.5)
    base, _ = policy_loss(lp, torch.zeros(1, 2), torch.ones(1, 2), mask, agg_mode="token-mean")
    bonus, mb = policy_loss(lp, torch.zeros(1, 2), torch.ones(1, 2), mask, agg_mode="token-mean",
                            entropy=h, entropy_coef=0.1)
    assert bonus.item() == pytest.approx(base.item() - 0.05)
    assert mb["actor/entropy"] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="entropy"):
        policy_loss(lp, torch.zeros(1, 2), torch.ones(1, 2), mask, entropy_coef=0.1)


def test_config_defaults_are_the_recipe_and_feed_policy_loss():
    cfg = PolicyLossConfig()
    assert (cfg.clip_low, cfg.clip_high, cfg.clip_c) == (0.2, 0.28, 3.0)
    assert (cfg.agg_mode, cfg.loss_scale_factor, cfg.entropy_coef) == ("seq-mean-token-sum", 1000.0, 0.0)
    lp = torch.zeros(1, 3, requires_grad=True)
    out, _ = policy_loss(lp, torch.zeros(1, 3), -torch.ones(1, 3), torch.ones(1, 3), **dataclasses.asdict(cfg))
    assert out.item() == pytest.approx(3 / 1000)  # s = 3 (l = 1 per token), one row, / 1000
    for bad in (dict(clip_c=1.0), dict(clip_low=1.0), dict(agg_mode="sum"), dict(loss_scale_factor=0)):
        with pytest.raises(ValueError):
            PolicyLossConfig(**bad)


def test_extreme_risk_masking_zeroes_unlikely_negative_tokens_only():
    # tokens: (pi_old = 1e-6, A = -1) masked; (1e-6, A = +1) kept; (0.5, A = -1) kept. r = 1.
    old = torch.log(torch.tensor([[1e-6, 1e-6, 0.5]]))
    adv = torch.tensor([[-1.0, 1.0, -1.0]])
    lp = old.clone().requires_grad_(True)
    mask = torch.ones(1, 3, dtype=torch.bool)
    out, m = policy_loss(lp, old, adv, mask, agg_mode="token-mean", extreme_risk_threshold=1e-5)
    # token losses -A r = [1 -> 0, -1, 1]; token-mean keeps all 3 in the denominator: (0 - 1 + 1)/3
    assert out.item() == pytest.approx(0.0)
    out.backward()
    assert lp.grad[0, 0].item() == 0.0 and lp.grad[0, 2].item() == pytest.approx(1 / 3)
    assert m["actor/extreme_risk_frac"] == pytest.approx(1 / 3)
    base, _ = policy_loss(lp, old, adv, mask, agg_mode="token-mean")
    assert base.item() == pytest.approx(1 / 3)


def test_minibatch_denominators():
    from drkernel.losses import minibatch_denominators

    mask = torch.tensor([[1, 1, 0], [0, 0, 0], [1, 0, 0]])
    assert minibatch_denominators(mask) == {"num_tokens": 3.0, "num_seqs": 2.0}


def test_garbage_off_the_mask_never_reaches_loss_or_gradient():
    # NaN/inf old log-probs and advantages on padding must not poison the loss or the gradient
    # token 2: finite ratio but NaN advantage: without sanitising, grad = 0 * NaN = NaN there
    old = torch.tensor([[-1.0, -2.0, float("-inf")]])
    adv = torch.tensor([[1.0, float("nan"), float("inf")]])
    lp = torch.tensor([[-1.0, -2.0, -3.0]], requires_grad=True)
    mask = torch.tensor([[True, False, False]])
    for mode in ("token-mean", "seq-mean-token-sum"):
        out, m = policy_loss(lp, old, adv, mask, agg_mode=mode)
        (grad,) = torch.autograd.grad(out, lp)
        assert out.item() == pytest.approx(-1.0)  # -A r on the one valid token
        assert torch.isfinite(grad).all() and grad[0].tolist() == pytest.approx([-1.0, 0.0, 0.0])
        assert m["actor/ratio_max"] == 1.0
