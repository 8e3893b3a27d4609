"""Dual-clip PPO policy loss with asymmetric bounds, and loss aggregation.

Notation (shapes ``(N, L)``: N rows, L padded response tokens):

- ``log pi_theta``: log-probs of the sampled tokens under the policy being trained (carries grad);
- ``log pi_old``: the same under the weights that produced the advantages (no grad);
- ``r_t = exp(clamp(log pi_theta - log pi_old, -20, 20))``: the PPO ratio;
- ``A_t``: per-token advantage (TRLOO broadcast to the turn's tokens);
- ``m_t``: the final loss mask (after the meaningful-turn mask, MRS and PRS).

Per token (dual-clip PPO, Ye et al. 2020; Dr. Kernel recipe eps_low 0.2, eps_high 0.28, c = 3)::

    L1 = -A r,   L2 = -A clip(r, 1 - eps_low, 1 + eps_high),   l = max(L1, L2)
    l  = min(l, -A c)    where A < 0          (dual clip: bounds the loss of a huge ratio)
    l  = l * w_t         with truncated IS weights w_t = min(rho_t, U), when given (no gradient)

then ``l`` is aggregated over tokens and rows (``agg_loss``) and divided by ``loss_scale_factor``.

One optimizer step per rollout batch (the recipe) means ``pi_theta = pi_old`` at the update, so
``r = 1`` and the clips never bind (so in Dr. Kernel's recipe they are inert); they matter with
several mini-batches or epochs per batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

__all__ = [
    "AGG_MODES",
    "PolicyLossConfig",
    "agg_loss",
    "approx_kl",
    "entropy_from_logits",
    "minibatch_denominators",
    "policy_loss",
    "ppo_clip_token_loss",
]

AGG_MODES = (
    "token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
    "seq-sum-no-norm",
)
"""Accepted ``mode`` values of ``agg_loss`` (module doc of ``agg_loss`` for the formulas)."""

_LOG_RATIO_BOUND = 20.0


@dataclass
class PolicyLossConfig:
    """Policy-loss settings; defaults are the Dr. Kernel recipe (clip 0.2 / 0.28, dual clip 3,
    seq-mean-token-sum / 1000, no extreme-risk masking). The field names
    are ``policy_loss``'s keyword arguments: ``policy_loss(..., **dataclasses.asdict(cfg))``."""

    clip_low: float = 0.2
    """eps_low: the ratio is clipped below at 1 - eps_low."""
    clip_high: float = 0.28
    """eps_high: the ratio is clipped above at 1 + eps_high (asymmetric "clip-higher")."""
    clip_c: float | None = 3.0
    """c > 1 of the dual clip: for A < 0 the loss is at most -A c; None = no dual clip."""
    agg_mode: str = "seq-mean-token-sum"
    """How token losses become one number: one of ``AGG_MODES``."""
    loss_scale_factor: float = 1000.0
    """The aggregated loss is divided by this (recipe 1000 with seq-mean-token-sum)."""
    entropy_coef: float = 0.0
    """Entropy bonus: ``loss -= entropy_coef * agg(entropy)`` (recipe 0)."""
    extreme_risk_threshold: float | None = None
    """Zero the loss of tokens with ``pi_old < threshold`` and ``A < 0`` (suggested 1e-5 to 1e-7);
    None = off (recipe)."""

    def __post_init__(self) -> None:
        _check_clip(self.clip_low, self.clip_high, self.clip_c)
        if self.agg_mode not in AGG_MODES:
            raise ValueError(f"unknown agg_mode {self.agg_mode!r}; known: {', '.join(AGG_MODES)}")
        if not self.loss_scale_factor > 0:
            raise ValueError(f"loss_scale_factor must be > 0, got {self.loss_scale_factor}")


def _check_clip(clip_low: float, clip_high: float, clip_c: float | None) -> None:
    if not 0 <= clip_low < 1 or not clip_high >= 0:
        raise ValueError(f"need 0 <= clip_low < 1 and clip_high >= 0, got {clip_low}, {clip_high}")
    if clip_c is not None and not clip_c > 1:
        raise ValueError(f"dual-clip constant clip_c must be > 1, got {clip_c}")


def ppo_clip_token_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    clip_c: float | None = 3.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-token dual-clip PPO loss (module doc), before masking and aggregation.

    Args:
        log_probs: (N, L) ``log pi_theta`` of the sampled tokens (carries the gradient).
        old_log_probs: (N, L) ``log pi_old`` (detached here).
        advantages: (N, L) ``A_t`` (detached here).
        clip_low: eps_low. clip_high: eps_high. clip_c: c of the dual clip, > 1; None = off.

    Returns:
        ``(loss, ratio, clipped, dual_clipped)``, all (N, L): the token loss ``l``; the ratio
        ``r`` (detached); where the clipped term ``L2`` binds (``L2 > L1``); where the dual clip
        binds (``A < 0`` and ``max(L1, L2) > -A c``).

    Examples (eps 0.2 / 0.28, c = 3):
        A = -1, r = 5: L1 = 5, L2 = 1.28, max 5, dual clip min(5, 3) = 3.
        A = +1, r = 1.5: max(-1.5, -1.28) = -1.28 (clipped at 1 + 0.28).
        A = +1, r = 0.5: max(-0.5, -0.8) = -0.5 (not clipped: a lower ratio never gets a bonus).
    """
    _check_clip(clip_low, clip_high, clip_c)
    if not log_probs.shape == old_log_probs.shape == advantages.shape:
        raise ValueError(
            "log_probs, old_log_probs and advantages must share one (N, L) shape, got "
            f"{tuple(log_probs.shape)}, {tuple(old_log_probs.shape)}, {tuple(advantages.shape)}"
        )
    adv = advantages.detach()
    log_ratio = (log_probs - old_log_probs.detach()).clamp(-_LOG_RATIO_BOUND, _LOG_RATIO_BOUND)
    ratio = torch.exp(log_ratio)  # r = pi_theta / pi_old
    loss1 = -adv * ratio  # L1 = -A r
    loss2 = -adv * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)  # L2 = -A clip(r, 1-eps_l, 1+eps_h)
    clipped = (loss2 > loss1).detach()
    loss = torch.maximum(loss1, loss2)  # l = max(L1, L2)
    if clip_c is None:
        dual = torch.zeros_like(clipped)
    else:
        cap = -adv * clip_c  # -A c
        dual = ((adv < 0) & (loss > cap)).detach()
        loss = torch.where(adv < 0, torch.minimum(loss, cap), loss)  # A < 0: l = min(l, -A c)
    return loss, ratio.detach(), clipped, dual


def agg_loss(
    token_loss: torch.Tensor,
    loss_mask: torch.Tensor,
    mode: str = "seq-mean-token-sum",
    *,
    num_tokens: float | None = None,
    num_seqs: float | None = None,
    norm_len: float | None = None,
) -> torch.Tensor:
    """Aggregate a per-token loss ``l`` over the mask ``m`` into one scalar.

    With ``s_i = sum_t l_{i,t} m_{i,t}``, ``n_i = sum_t m_{i,t}`` and the rows with ``n_i > 0``:

    - ``token-mean``: ``sum_i s_i / sum_i n_i`` (every token weighs the same).
    - ``seq-mean-token-sum`` (recipe): ``sum_i s_i / #rows`` (every row is one turn; long turns
      weigh more).
    - ``seq-mean-token-mean``: ``sum_i (s_i / n_i) / #rows`` (every row weighs the same).
    - ``seq-mean-token-sum-norm``: ``sum_i s_i / (#rows * L_norm)``, the fixed-scale variant
      (Dr. GRPO): token sums divided by a constant length ``L_norm`` instead of the row's own
      length. ``L_norm = norm_len``, default the padded length L; pass the configured maximum
      response length so the scale does not depend on the batch's padding. (verl's mode of this
      name divides by ``L_norm`` only, not by ``#rows``: multiply by ``#rows`` to get it.)
    - ``seq-sum-no-norm``: ``sum_i s_i``.

    An empty mask gives 0 (with the graph kept, so ``backward`` still works).

    **Micro-batches (gradient accumulation).** The denominators ``sum_i n_i`` (token-mean) and
    ``#rows`` (the seq-mean modes) belong to the *mini-batch* that makes one optimizer step. When
    a mini-batch is split into micro-batches, pass the mini-batch totals as ``num_tokens`` /
    ``num_seqs`` to every micro-batch call and ``backward`` each result as it is: the accumulated
    gradient is then exactly the mini-batch loss's gradient, whatever the split. Do not also
    multiply by ``len(micro) / len(mini)``: that double scaling (on top of counting the mini-batch
    size twice) is a bug of the reference (§9.5), whose effective learning rate depended on the
    split. A row must not be split across micro-batches (``seq-mean-token-mean`` needs its n_i).

    Args:
        token_loss: (N, L) per-token loss ``l``.
        loss_mask: (N, L) bool or 0/1 mask ``m``.
        mode: one of ``AGG_MODES``.
        num_tokens: ``sum_i n_i`` of the whole mini-batch (token-mean); default this call's.
        num_seqs: rows with ``n_i > 0`` in the whole mini-batch (seq-mean modes); default this
            call's.
        norm_len: ``L_norm`` of ``seq-mean-token-sum-norm``; default ``token_loss.shape[-1]``.

    Returns:
        0-d tensor.

    Example: token losses [1, 2, 3] and [4] (one row each): s = [6, 4], n = [3, 1].
    token-mean 10/4 = 2.5; seq-mean-token-sum (6 + 4)/2 = 5; seq-mean-token-mean (2 + 4)/2 = 3;
    seq-mean-token-sum-norm with L_norm = 4: 10/(2*4) = 1.25; seq-sum-no-norm 10.
    """
    if mode not in AGG_MODES:
        raise ValueError(f"unknown loss aggregation mode {mode!r}; known: {', '.join(AGG_MODES)}")
    if token_loss.shape != loss_mask.shape or token_loss.dim() != 2:
        raise ValueError(
            f"token_loss {tuple(token_loss.shape)} and loss_mask {tuple(loss_mask.shape)} must "
            "share one (N, L) shape"
        )
    mask = loss_mask.bool()
    masked = torch.where(mask, token_loss, torch.zeros((), dtype=token_loss.dtype, device=token_loss.device))
    seq_sum = masked.sum(dim=-1)  # s_i
    seq_len = mask.sum(dim=-1)  # n_i
    if mode == "seq-sum-no-norm":
        return seq_sum.sum()
    if mode == "token-mean":
        denom = float(seq_len.sum()) if num_tokens is None else float(num_tokens)
        return seq_sum.sum() / max(denom, 1.0)  # sum_i s_i / sum_i n_i
    rows = float((seq_len > 0).sum()) if num_seqs is None else float(num_seqs)
    rows = max(rows, 1.0)
    if mode == "seq-mean-token-sum":
        return seq_sum.sum() / rows  # mean_i s_i
    if mode == "seq-mean-token-mean":
        per_row = seq_sum / seq_len.clamp(min=1).to(seq_sum.dtype)  # s_i / n_i (0 for empty rows)
        return per_row.sum() / rows
    length = float(token_loss.shape[-1]) if norm_len is None else float(norm_len)
    if not length > 0:
        raise ValueError(f"norm_len must be > 0, got {norm_len}")
    return seq_sum.sum() / (rows * length)  # sum_i s_i / (#rows L_norm)


def minibatch_denominators(loss_mask: torch.Tensor) -> dict[str, float]:
    """The mini-batch totals that every micro-batch's ``agg_loss``/``policy_loss`` call needs:
    ``{"num_tokens": sum m, "num_seqs": rows with a valid token}``. Compute them once on the whole
    mini-batch's mask and pass them with ``**`` to each micro-batch call.

    Example: masks [[1, 1, 0], [0, 0, 0], [1, 0, 0]] give num_tokens 3, num_seqs 2.
    """
    mask = loss_mask.bool()
    return {"num_tokens": float(mask.sum()), "num_seqs": float(mask.any(dim=-1).sum())}


def approx_kl(
    log_p: torch.Tensor, log_q: torch.Tensor, mask: torch.Tensor, kind: str = "k3"
) -> float:
    """Token-mean estimate of ``KL(q || p)`` from tokens sampled from ``q``.

    With ``log r = log p - log q`` (clamped to +-20): ``k1 = -log r`` (unbiased, can be negative),
    ``k3 = r - 1 - log r`` (unbiased, >= 0, lower variance; http://joschu.net/blog/kl-approx.html).
    For the PPO update ``q = pi_old`` (the samples' policy, up to the rollout mismatch) and
    ``p = pi_theta``. Returns ``nan`` for an empty mask.

    Example: ``log r = [ln 2, ln 0.5]``: k1 = 0, k3 = ((2 - 1 - ln 2) + (0.5 - 1 + ln 2)) / 2 = 0.25.
    """
    m = mask.bool()
    if not bool(m.any()):
        return math.nan
    log_r = (log_p.detach().double() - log_q.detach().double())[m].clamp(-_LOG_RATIO_BOUND, _LOG_RATIO_BOUND)
    if kind == "k1":
        return float((-log_r).mean())  # k1 = -log r
    if kind == "k3":
        return float((torch.exp(log_r) - 1.0 - log_r).mean())  # k3 = r - 1 - log r
    raise ValueError(f"unknown KL estimator {kind!r}; known: 'k1', 'k3'")


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the categorical distribution at each position: ``H = logsumexp(z) - sum p z``.

    Args:
        logits: (..., V). Computed in float32 at least.

    Returns:
        (...) entropies in nats. Example: two equal logits give ln 2 = 0.6931.
    """
    z = logits.float() if logits.dtype in (torch.float16, torch.bfloat16) else logits
    log_p = torch.log_softmax(z, dim=-1)
    return -(log_p.exp() * log_p).sum(dim=-1)  # H = -sum_v p_v log p_v


def policy_loss(
    log_probs: torch.Tensor,
    old_log_probs: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.28,
    clip_c: float | None = 3.0,
    agg_mode: str = "seq-mean-token-sum",
    loss_scale_factor: float = 1.0,
    entropy_coef: float = 0.0,
    extreme_risk_threshold: float | None = None,
    is_weights: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
    num_tokens: float | None = None,
    num_seqs: float | None = None,
    norm_len: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The actor loss of one (micro-)batch: dual-clip PPO, IS weights, aggregation, scale.

    ``loss = agg(l * w, m') / loss_scale_factor - entropy_coef * agg(H, m) / loss_scale_factor``
    with ``l`` from ``ppo_clip_token_loss``, ``w`` the truncated IS weights (1 when None) and
    ``m' = m`` minus the extreme-risk tokens (``log pi_old < ln tau`` and ``A < 0``) when
    ``extreme_risk_threshold`` tau is set: pushing down a token the policy already gives less than
    tau only sharpens an already-unlikely choice (Dr. Kernel's option; off in its recipe). The
    denominators still count those tokens, so masking them never rescales the others.
    For gradient accumulation over micro-batches pass the mini-batch's ``num_tokens`` /
    ``num_seqs`` and sum the micro-batch losses (``agg_loss`` explains why, and why no extra
    ``len(micro)/len(mini)`` factor).

    Args:
        log_probs: (N, L) ``log pi_theta`` (carries the gradient).
        old_log_probs: (N, L) ``log pi_old``.
        advantages: (N, L) per-token advantages.
        loss_mask: (N, L) bool or 0/1, the final loss mask.
        clip_low, clip_high, clip_c: PPO clip (``ppo_clip_token_loss``).
        agg_mode: one of ``AGG_MODES``.
        loss_scale_factor: divisor of the aggregated loss (the recipe's config uses 1000).
        entropy_coef: entropy bonus coefficient; needs ``entropy`` (with grad) when non-zero.
        extreme_risk_threshold: tau in (0, 1), or None = off.
        is_weights: (N, L) truncated IS weights ``w_t`` (detached here), or None.
        entropy: (N, L) token entropies, for the bonus and the ``actor/entropy`` metric.
        num_tokens, num_seqs, norm_len: mini-batch denominators (``agg_loss``).

    Returns:
        ``(loss, metrics)``: 0-d tensor, and floats over this call's valid tokens:
        ``actor/pg_loss`` (the aggregated PPO term, before the scale), ``actor/pg_clipfrac``
        (share of tokens where the ratio clip binds), ``actor/pg_clipfrac_dual`` (where the dual
        clip binds), ``actor/ppo_kl_k1``, ``actor/ppo_kl_k3`` (``approx_kl`` of
        ``KL(pi_old || pi_theta)``), ``actor/ratio_mean|min|max``, ``actor/num_tokens``,
        ``actor/entropy`` (if given), ``actor/is_weight_mean`` (if given). Empty mask: ``nan``
        fractions and a zero loss.
    """
    if entropy_coef and entropy is None:
        raise ValueError("entropy_coef != 0 needs the token entropies (entropy=...)")
    if not loss_scale_factor > 0:
        raise ValueError(f"loss_scale_factor must be > 0, got {loss_scale_factor}")
    mask = loss_mask.bool()
    if mask.shape != log_probs.shape:
        raise ValueError(f"loss_mask {tuple(mask.shape)} != log_probs {tuple(log_probs.shape)}")
    # Off-mask tokens get r = 1 and A = 0 before any arithmetic: padding may hold NaN/inf (vLLM
    # pads with -1, buffers with anything), and NaN * 0 in the backward of a masked select is NaN.
    zero = torch.zeros((), dtype=advantages.dtype, device=advantages.device)
    old_log_probs = torch.where(mask, old_log_probs.detach(), log_probs.detach())
    advantages = torch.where(mask, advantages.detach(), zero)
    token_loss, ratio, clipped, dual = ppo_clip_token_loss(
        log_probs, old_log_probs, advantages, clip_low=clip_low, clip_high=clip_high, clip_c=clip_c
    )
    if is_weights is not None:
        if is_weights.shape != token_loss.shape:
            raise ValueError(f"is_weights {tuple(is_weights.shape)} != {tuple(token_loss.shape)}")
        token_loss = token_loss * is_weights.detach().to(token_loss.dtype)  # l * w_t
    risky = torch.zeros_like(mask)
    if extreme_risk_threshold is not None:
        if not 0 < extreme_risk_threshold < 1:
            raise ValueError(f"extreme_risk_threshold must be in (0, 1), got {extreme_risk_threshold}")
        # log pi_old < ln tau and A < 0: no loss on the token
        risky = mask & (old_log_probs.detach() < math.log(extreme_risk_threshold)) & (advantages.detach() < 0)
        token_loss = torch.where(risky, torch.zeros((), dtype=token_loss.dtype, device=token_loss.device), token_loss)
    if num_tokens is None:
        num_tokens = float(mask.sum())
    if num_seqs is None:
        num_seqs = float(mask.any(dim=-1).sum())
    kw = dict(num_tokens=num_tokens, num_seqs=num_seqs, norm_len=norm_len)
    pg_loss = agg_loss(token_loss, mask, agg_mode, **kw)
    loss = pg_loss
    if entropy_coef:
        loss = loss - entropy_coef * agg_loss(entropy, mask, agg_mode, **kw)  # entropy bonus
    loss = loss / loss_scale_factor

    n = int(mask.sum())

    def frac(x: torch.Tensor) -> float:
        return float((x & mask).sum()) / n if n else math.nan

    valid_ratio = ratio[mask].double()
    metrics = {
        "actor/pg_loss": float(pg_loss.detach()),
        "actor/pg_clipfrac": frac(clipped),
        "actor/pg_clipfrac_dual": frac(dual),
        "actor/ppo_kl_k1": approx_kl(log_probs, old_log_probs, mask, "k1"),
        "actor/ppo_kl_k3": approx_kl(log_probs, old_log_probs, mask, "k3"),
        "actor/ratio_mean": float(valid_ratio.mean()) if n else math.nan,
        "actor/ratio_min": float(valid_ratio.min()) if n else math.nan,
        "actor/ratio_max": float(valid_ratio.max()) if n else math.nan,
        "actor/num_tokens": float(n),
    }
    if entropy is not None:
        metrics["actor/entropy"] = float(entropy.detach().double()[mask].mean()) if n else math.nan
    if extreme_risk_threshold is not None:
        metrics["actor/extreme_risk_frac"] = frac(risky)
    if is_weights is not None:
        metrics["actor/is_weight_mean"] = float(is_weights.detach().double()[mask].mean()) if n else math.nan
    return loss, metrics
