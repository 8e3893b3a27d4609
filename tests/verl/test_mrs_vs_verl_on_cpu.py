"""drkernel's trajectory-level geometric MRS (one row per trajectory) makes the same decisions as
verl 0.9.1's built-in rollout rejection ``seq_mean_k1`` with ratio bounds ``0.999_1.001``; the
per-turn token veto is what verl lacks, and it is applied on top."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("verl")

from omegaconf import OmegaConf  # noqa: E402

from drkernel.correction.mismatch import MismatchConfig  # noqa: E402
from drkernel.step import DrKernelStepConfig, StepBatch, dr_kernel_step  # noqa: E402


def _batch(seed: int, n: int = 48, turns: int = 3, tok: int = 4, fb: int = 2):
    g = torch.Generator().manual_seed(seed)
    length = turns * (tok + fb)
    ti = torch.full((n, length), -1, dtype=torch.int64)
    for t in range(turns):
        ti[:, t * (tok + fb):t * (tok + fb) + tok] = t
    mask = ti >= 0
    mu = -torch.rand(n, length, generator=g)
    old = mu + torch.randn(n, length, generator=g) * 0.002  # |mean log rho| around the 1e-3 bound
    return mask, ti, mu, old


def _drkernel_mask(mask, ti, mu, old, veto):
    cfg = DrKernelStepConfig(mask_void_turn=False, prs=None, group_filter=False, target_num_groups=None,
                             samples_per_prompt=None,
                             mismatch=MismatchConfig(rs="geometric", rs_lower=0.999, rs_upper=1.001, token_veto=veto))
    n = mask.shape[0]
    res, _ = dr_kernel_step(StepBatch(response_mask=mask, old_log_probs=old, rollout_log_probs=mu, tok_turn_index=ti,
                                      turn_rewards=torch.zeros(n, int(ti.max()) + 1), group_ids=list(range(n))), cfg)
    out = torch.zeros_like(mask)
    out[res.kept_rows] = res.loss_mask
    return out


@pytest.mark.parametrize("seed", [0, 1])
def test_geometric_mrs_equals_verl_seq_mean_k1(seed: int) -> None:
    from verl import DataProto
    from verl.trainer.ppo.rollout_corr_helper import compute_rollout_correction_and_add_to_batch

    mask, ti, mu, old = _batch(seed)
    data = DataProto.from_dict(tensors={"response_mask": mask.long(), "old_log_probs": old, "rollout_log_probs": mu,
                                        "token_level_rewards": torch.zeros(mask.shape)})
    cfg = OmegaConf.create({"rollout_is": None, "rollout_is_threshold": 2.0, "rollout_is_batch_normalize": False,
                            "rollout_rs": "seq_mean_k1", "rollout_rs_threshold": "0.999_1.001", "bypass_mode": False,
                            "loss_type": "ppo_clip"})
    out, _ = compute_rollout_correction_and_add_to_batch(data, cfg)
    verl_mask = out.batch["response_mask"].bool()
    ours = _drkernel_mask(mask, ti, mu, old, veto=None)
    kept = int(ours.any(dim=1).sum())
    assert 0 < kept < mask.shape[0]  # the bound actually decides
    assert torch.equal(verl_mask, ours)
    # the veto (tau = 1e-4) additionally drops exactly the turn that holds a token with rho < tau
    row = int(ours.any(dim=1).nonzero()[0])
    old2 = old.clone()
    pos = int((ti[row] == 1).nonzero()[0])
    old2[row, pos] = mu[row, pos] - 10.0  # rho = e^-10 < 1e-4
    old2[row, pos + 1] = mu[row, pos + 1] + 10.0  # keep the row's mean log-ratio unchanged
    vetoed = _drkernel_mask(mask, ti, mu, old2, veto=1e-4)
    assert not bool(vetoed[row][ti[row] == 1].any())
    assert bool(vetoed[row][ti[row] != 1].eq(ours[row][ti[row] != 1]).all())
