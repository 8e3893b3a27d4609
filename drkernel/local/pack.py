"""Episodes -> one token row per trajectory, and the log-probs of its policy tokens.

**Layout** (the step function's, ``drkernel.step``): trajectory i is one sequence

    [prompt of turn 1][reply 1][feedback and template tokens][reply 2] ... [reply T]

``tok_ids[i, l]`` are its tokens (right-padded), ``policy_mask[i, l]`` is True exactly on the
tokens the policy sampled (the replies, stop tokens included), ``tok_turn_index[i, l]`` is the
0-based turn of a policy token and -1 elsewhere, ``rollout_log_probs[i, l]`` is the backend's
``log mu`` of a policy token.

The prompt of turn t+1 must extend the sequence so far token for token (HFGenerate splices its
own replies back in, so it does). A trajectory whose context was rewritten (context trimming
dropped an old turn, a re-tokenised reply drifted) cannot be laid out as one sequence: it is
packed up to the break and flagged ``failed`` so the step masks all its turns
(``pack/prefix_break_frac`` counts them). Turns with no generation (context overflow) hold no
tokens and do not exist for the step.

A trajectory is any object with ``turns`` (each with ``generation``, a
:class:`~drkernel.agent.types.Generation` or None, and ``reward``; optionally ``result``) and
``failed``: :class:`drkernel.agent.types.Trajectory` and :class:`drkernel.local.toy.ToyTrajectory`
both are. The per-turn columns (reward, passed, coverage, speedup, hacked) are the turn table's,
:func:`drkernel.turns.turn_table`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from drkernel.turns import turn_table


@dataclass
class PackedBatch:
    """N trajectories, S token positions, T turns."""

    tok_ids: torch.Tensor  # (N, S) long, right-padded with pad_id
    attention_mask: torch.Tensor  # (N, S) bool: real tokens
    policy_mask: torch.Tensor  # (N, S) bool: tokens the policy sampled
    tok_turn_index: torch.Tensor  # (N, S) long: 0-based turn of a policy token, -1 elsewhere
    rollout_log_probs: torch.Tensor  # (N, S) float: log mu of policy tokens, 0 elsewhere
    turn_rewards: torch.Tensor  # (N, T) float
    turn_exists: torch.Tensor  # (N, T) bool: the turn holds tokens
    turn_correct: torch.Tensor  # (N, T) bool: the turn's kernel passed
    turn_coverage: torch.Tensor  # (N, T) float: Triton coverage, NaN = none
    turn_speedup: torch.Tensor  # (N, T) float: speedup, NaN = none
    turn_hacked: torch.Tensor  # (N, T) bool: the turn's kernel was flagged as a hack
    failed: torch.Tensor  # (N,) bool: the episode failed or could not be laid out
    metrics: dict[str, float]

    @property
    def num_rows(self) -> int:
        return int(self.tok_ids.shape[0])


def pack_trajectories(trajectories: Sequence[Any], num_turns: int, pad_id: int) -> PackedBatch:
    """Lay ``trajectories`` out as one row each (module docstring); the per-turn columns are the
    turn table's (:func:`drkernel.turns.turn_table`)."""
    table = turn_table(trajectories, num_turns)  # raises if a trajectory has more than num_turns turns
    rows: list[tuple[list[int], list[int], list[float]]] = []  # ids, turn index (-1), log mu
    n = len(trajectories)
    exists = torch.zeros(n, num_turns, dtype=torch.bool)
    failed = table.failed.clone()
    breaks = 0
    for i, traj in enumerate(trajectories):
        ids: list[int] = []
        turn_of: list[int] = []
        logmu: list[float] = []
        broken = False
        for t, turn in enumerate(traj.turns):
            gen = turn.generation
            if broken or gen is None or not gen.token_ids:
                continue
            if gen.prompt_token_ids is None or gen.logprobs is None or len(gen.logprobs) != len(gen.token_ids):
                raise ValueError("training needs token ids, prompt token ids and log-probs from the generation "
                                 "backend (token-in/token-out); this backend did not return them")
            prompt = list(gen.prompt_token_ids)
            if prompt[:len(ids)] != ids:
                broken = True  # the context was rewritten: this turn cannot continue the row
                continue
            extra = prompt[len(ids):]  # the turn's tokens then sit at the table's token span
            ids += extra + list(gen.token_ids)
            turn_of += [-1] * len(extra) + [t] * len(gen.token_ids)
            logmu += [0.0] * len(extra) + [float(x) for x in gen.logprobs]
            exists[i, t] = True
        if broken:
            breaks += 1
            failed[i] = True
        rows.append((ids, turn_of, logmu))

    width = max((len(r[0]) for r in rows), default=0)
    width = max(width, 1)
    tok_ids = torch.full((n, width), pad_id, dtype=torch.long)
    attn = torch.zeros(n, width, dtype=torch.bool)
    turn_index = torch.full((n, width), -1, dtype=torch.long)
    log_mu = torch.zeros(n, width, dtype=torch.float32)
    for i, (ids, turn_of, logmu) in enumerate(rows):
        k = len(ids)
        tok_ids[i, :k] = torch.tensor(ids, dtype=torch.long)
        attn[i, :k] = True
        turn_index[i, :k] = torch.tensor(turn_of, dtype=torch.long)
        log_mu[i, :k] = torch.tensor(logmu, dtype=torch.float32)
    policy = turn_index >= 0
    metrics = {
        "pack/prefix_break_frac": breaks / n if n else 0.0,
        "pack/seq_len_mean": float(attn.sum(1).double().mean()) if n else 0.0,
        "pack/seq_len_max": float(width),
        "pack/policy_tokens": float(policy.sum()),
    }
    return PackedBatch(tok_ids=tok_ids, attention_mask=attn, policy_mask=policy, tok_turn_index=turn_index,
                       rollout_log_probs=log_mu, turn_rewards=table.reward, turn_exists=exists,
                       turn_correct=table.passed, turn_coverage=table.coverage, turn_speedup=table.speedup,
                       turn_hacked=table.hacked, failed=failed, metrics=metrics)


def token_log_probs(model: Any, tok_ids: torch.Tensor, attention_mask: torch.Tensor, *, temperature: float = 1.0,
                    with_entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``log pi(tok_ids[:, l] | tok_ids[:, :l])`` for every position (0 at l = 0), and optionally
    the entropy of the predictive distribution there, at the rollout's temperature.

    Args:
        model: an HF causal LM (its ``logits`` at position l predict token l + 1).
        tok_ids: (B, S) right-padded token ids. attention_mask: (B, S) bool.
        temperature: ``logits / temperature`` before the softmax, as in sampling (0 = 1).

    Returns:
        ``(log_probs, entropy)``: (B, S) each (entropy None unless asked), float32.
    """
    logits = model(input_ids=tok_ids, attention_mask=attention_mask.long()).logits[:, :-1].float()
    if temperature and temperature != 1.0:
        logits = logits / temperature
    log_z = torch.logsumexp(logits, dim=-1)
    picked = logits.gather(-1, tok_ids[:, 1:, None]).squeeze(-1)
    zero = torch.zeros(tok_ids.shape[0], 1, dtype=picked.dtype, device=picked.device)
    log_probs = torch.cat([zero, picked - log_z], dim=1)  # log p = z_tok - logsumexp(z)
    entropy = None
    if with_entropy:
        with torch.no_grad():
            p = torch.softmax(logits, dim=-1)
            h = log_z - (p * logits).sum(-1)  # H = logsumexp(z) - sum p z
        entropy = torch.cat([zero.detach(), h], dim=1)
    return log_probs, entropy


__all__ = ["PackedBatch", "pack_trajectories", "token_log_probs"]
