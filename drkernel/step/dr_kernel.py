"""The Dr. Kernel training step (from the loss mask to dropping dead rows) as one pure function.

Both trainers (``drkernel.local`` and the verl integration) call :func:`dr_kernel_step` between
the rollout (plus the trainer's recomputation of ``log pi_old``) and the actor update, so they
apply the paper's recipe in the same order:

1. **Meaningful-turn mask** (§1.3): ``loss_mask_{i,t}`` = the turn exists, is not a post-success
   regression and its trajectory did not fail; ``response_mask *= loss_mask[turn(l)]``.
2. **MRS** (§2.1-2.3): trajectory-level geometric rejection (keep trajectory i iff
   ``L <= exp(mean over its valid tokens of log rho) <= U``, recipe [0.999, 1.001]), then the
   per-turn token veto (drop turn (i, t) if any of its tokens has ``rho < tau``, recipe 1e-4),
   then optional truncated IS weights ``min(w, U_is)``. ``log rho = log pi_old - log mu``.
3. **PRS** (§4.1): a correct turn with Triton coverage ``cov`` is kept with probability
   ``p = clamp((cov - theta) / f, 0, 1)`` (recipe theta 0.3, f 0.1); incorrect turns are kept.
4. **Rewards of masked turns zeroed**: ``r_{i,t} = 0`` where ``loss_mask_{i,t} = 0`` (so they
   add nothing to earlier turns' returns). MRS/PRS rejections do not zero rewards.
5. **Group filter** (§4.4, last-turn view): drop prompt groups whose last-turn rewards have an
   unbiased std below 1e-3 (and groups with fewer than ``min_group_size`` trajectories). With
   fewer than ``target_num_groups`` valid groups the step is **skipped** and the surviving rows
   are carried in the returned :class:`StepState` to the next call, which filters
   ``buffer + new batch`` again. With more, ``target_num_groups`` groups are drawn (complete
   groups first); the surplus is discarded, as in the reference.
6. **Advantages** by registry name (TRLOO default) on the per-turn ``(N, T)`` rewards with
   ``turn_mask = loss_mask``: a turn rejected by MRS/PRS keeps its G in its peers' baselines
   (§1.2, §9.12), while its own tokens get no loss. ``A_tok[i, l] = A[i, turn(l)] * m[i, l]``.
7. **Dead rows dropped**: trajectories with no token left in the final mask.

**Layout** (verl's agent-loop layout, also the local trainer's): one row per trajectory, all its
turns in one padded response of L tokens; ``tok_turn_index[i, l]`` is the 0-based turn of a
policy token and -1 on tokens that are not the policy's (environment feedback, padding).
Per-turn values are ``(N, T)``.

Note on the buffer: a skipped step makes no optimizer step, so the buffered rows' ``log pi_old``
are still those of the current weights when they are trained on at the next call.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from drkernel.advantages import get_advantage
from drkernel.advantages.trloo import trloo_advantages_with_metrics
from drkernel.correction.mismatch import MismatchConfig, apply_mismatch_correction
from drkernel.rewards.group_filter import filter_groups_last_turn
from drkernel.rewards.prs import PRSConfig, prs_keep_mask
from drkernel.rewards.turn_mask import meaningful_turn_mask
from drkernel.turns import turn_exists, turns_to_tokens

__all__ = ["DrKernelStepConfig", "StepBatch", "StepResult", "StepState", "dr_kernel_step"]

_INT_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


# --------------------------------------------------------------------------- config and data


@dataclass
class DrKernelStepConfig:
    """Settings of :func:`dr_kernel_step`; defaults are the Dr. Kernel recipe:
    TRLOO, gamma 1, MRS geometric [0.999, 1.001] + veto 1e-4, no IS, PRS turn 0.3/0.1, group
    filter on last-turn rewards with 16 prompts x 16 samples per step."""

    estimator: str = "trloo"
    """Advantage estimator, by registry name (``drkernel.advantages.list_advantages()``)."""
    gamma: float = 1.0
    """Discount across turns."""
    estimator_knobs: dict[str, Any] = field(default_factory=dict)
    """Extra keyword arguments of the estimator (e.g. ``{"norm_by_std": True}`` for grpo)."""
    mask_void_turn: bool = True
    """Meaningful-turn mask (§1.3); False = every existing turn of a non-failed trajectory trains."""
    mismatch: MismatchConfig | None = field(default_factory=MismatchConfig)
    """MRS: rejection mode and bounds, token veto, truncated IS. None = off. Modes keep the
    reference's meaning with one row per turn: ``geometric``/``sequence`` judge the trajectory
    (the row here), ``turn``/``turn_geo`` each turn, ``token`` each token."""
    prs: PRSConfig | None = field(default_factory=PRSConfig)
    """PRS settings; None = off. When on, the batch must carry ``turn_correct`` and
    ``turn_coverage`` (and ``turn_speedup`` with a speedup threshold)."""
    group_filter: bool = True
    """Zero-variance group filter with skip-and-buffer (reference ``rejection_sample=True``)."""
    filter_std_threshold: float = 1e-3
    """A group whose last-turn rewards have an unbiased std below this is dropped."""
    target_num_groups: int | None = 16
    """Groups trained per step (the recipe's prompts per step); fewer valid ones skip the step.
    None = train on every valid group, never skip."""
    samples_per_prompt: int | None = 16
    """n: a group with n trajectories is complete (preferred in the selection)."""
    min_group_size: int | None = None
    """Fewest trajectories a group needs; None = ``n // 2 + 1`` (1 without ``samples_per_prompt``)."""
    max_skip_steps: int | None = None
    """After this many consecutive skips, train on the valid groups there are (>= 1) instead of
    skipping again. None = skip without limit, as the reference does (its cap is never read)."""

    def __post_init__(self) -> None:
        get_advantage(self.estimator)  # unknown name: raises, listing the known ones
        if not 0.0 <= self.gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {self.gamma}")
        if self.target_num_groups is not None and self.target_num_groups < 1:
            raise ValueError(f"target_num_groups must be >= 1 or None, got {self.target_num_groups}")
        if self.max_skip_steps is not None and self.max_skip_steps < 0:
            raise ValueError(f"max_skip_steps must be >= 0 or None, got {self.max_skip_steps}")

    def resolved_min_group_size(self) -> int:
        if self.min_group_size is not None:
            return int(self.min_group_size)
        return self.samples_per_prompt // 2 + 1 if self.samples_per_prompt else 1


@dataclass
class StepBatch:
    """One rollout batch. N trajectories (rows), L response tokens, T turns."""

    response_mask: torch.Tensor
    """(N, L) bool or 0/1: the policy's own tokens (feedback and padding 0)."""
    old_log_probs: torch.Tensor
    """(N, L) ``log pi_old``, recomputed by the trainer with the rollout's weights."""
    tok_turn_index: torch.Tensor
    """(N, L) int: 0-based turn of each policy token, -1 elsewhere."""
    turn_rewards: torch.Tensor
    """(N, T) float: reward r_{i,t} of turn t (any value where the turn does not exist)."""
    group_ids: Sequence[Any] | torch.Tensor
    """Length-N prompt ids (``uid``): ints or strings, unique per prompt *and step* (a buffered
    batch meets the next step's ids)."""
    rollout_log_probs: torch.Tensor | None = None
    """(N, L) ``log mu`` from the rollout engine; None = no MRS (e.g. bypass mode)."""
    turn_exists: torch.Tensor | None = None
    """(N, T) bool; None = a turn exists iff it has at least one token in ``response_mask``."""
    turn_loss_mask: torch.Tensor | None = None
    """(N, T) bool, a precomputed meaningful-turn mask; None = computed from the rewards."""
    failed: torch.Tensor | None = None
    """(N,) bool: the trajectory ended in an error/timeout (all its turns masked); None = none."""
    turn_correct: torch.Tensor | None = None
    """(N, T) bool: the turn's kernel passed (compiled, correct, not hacked); PRS input."""
    turn_coverage: torch.Tensor | None = None
    """(N, T) float: Triton coverage of the turn's kernel, NaN = none; PRS input."""
    turn_speedup: torch.Tensor | None = None
    """(N, T) float speedups; PRS input only with ``prs.speedup_threshold``."""
    extras: dict[str, Any] = field(default_factory=dict)
    """Per-row payload the trainer needs later (``input_ids``, ``attention_mask``, trajectory
    objects...): tensors with N rows or length-N lists. It is buffered, concatenated and indexed
    with the rows and comes back in :attr:`StepResult.extras` for the kept rows. Tensors whose
    dim 1 differs between buffer and batch are right-padded with zeros."""
    turn_hacked: torch.Tensor | None = None
    """(N, T) bool: the turn's kernel was flagged as a hack. Metrics only
    (:func:`drkernel.step.backend.batch_turn_metrics`); the step does not read it."""


@dataclass
class ProcessedRows:
    """Rows after steps 1-4 (masks applied, rewards zeroed): what a skipped step buffers.
    Treat as opaque; it is public so a trainer can checkpoint :class:`StepState`."""

    response_mask: torch.Tensor  # (N, L) bool, after the loss mask, MRS and PRS
    old_log_probs: torch.Tensor  # (N, L)
    tok_turn_index: torch.Tensor  # (N, L) int64
    turn_rewards: torch.Tensor  # (N, T), 0 where the loss mask is 0
    turn_loss_mask: torch.Tensor  # (N, T) bool, loss mask AND exists (the estimator's turn_mask)
    turn_exists: torch.Tensor  # (N, T) bool
    group_ids: list[Any]
    is_weights: torch.Tensor | None  # (N, L) or None
    extras: dict[str, Any]

    @property
    def num_rows(self) -> int:
        return int(self.response_mask.shape[0])


@dataclass
class StepState:
    """State carried from one call to the next (the skip-and-buffer of §4.4)."""

    buffer: ProcessedRows | None = None
    """Rows of valid groups from skipped steps, waiting for enough groups."""
    skip_streak: int = 0
    """Consecutive skipped steps so far."""


@dataclass
class StepResult:
    """What the actor update needs. K kept rows; all tensors are on the input's device."""

    skipped: bool
    """True: make no optimizer step. Either too few valid groups (the rows wait in the new
    state) or no token survived the masks (K = 0)."""
    tok_advantages: torch.Tensor
    """(K, L) per-token advantages, 0 outside ``loss_mask``."""
    loss_mask: torch.Tensor
    """(K, L) bool final loss mask (response mask x loss mask x MRS x PRS)."""
    old_log_probs: torch.Tensor
    """(K, L) ``log pi_old`` of the kept rows."""
    is_weights: torch.Tensor | None
    """(K, L) truncated IS weights, or None when IS is off."""
    tok_turn_index: torch.Tensor
    """(K, L) turn index of the kept rows."""
    turn_advantages: torch.Tensor
    """(K, T) per-turn advantages A_{i,t}."""
    turn_rewards: torch.Tensor
    """(K, T) rewards after the loss mask zeroed masked turns."""
    turn_loss_mask: torch.Tensor
    """(K, T) bool, the turns that entered the advantage groups."""
    group_ids: list[Any]
    """Length-K prompt ids."""
    kept_rows: torch.Tensor
    """(K,) int64 indices into ``buffer + batch``: rows below ``num_buffered`` came from the
    buffer, ``kept_rows - num_buffered`` index the new batch."""
    num_buffered: int
    """Rows that were in the incoming state's buffer."""
    extras: dict[str, Any]
    """``extras`` of the kept rows."""
    metrics: dict[str, float]
    """Namespaced metrics: ``turn_mask/``, ``reward/``, ``mrs/``, ``prs/``, ``filter/``,
    ``<estimator>/`` (``trloo/``), ``step/``."""


# --------------------------------------------------------------------------- the step


def dr_kernel_step(
    batch: StepBatch,
    config: DrKernelStepConfig | None = None,
    state: StepState | None = None,
    *,
    generator: torch.Generator | None = None,
) -> tuple[StepResult, StepState]:
    """One Dr. Kernel step from rollout tensors to per-token advantages (module doc, steps 1-7).

    Args:
        batch: the new rollout batch (:class:`StepBatch`).
        config: settings; None = the recipe (:class:`DrKernelStepConfig`).
        state: the previous call's state; None = a fresh run (empty buffer).
        generator: randomness of PRS draws and of the group selection. Required when a PRS keep
            probability is strictly between 0 and 1 or when more valid groups exist than
            ``target_num_groups``; seed it once per run.

    Returns:
        ``(result, new_state)``. Pass ``new_state`` to the next call. When ``result.skipped``,
        the tensors are empty (K = 0) and no update should be made.

    Raises:
        ValueError: inconsistent shapes or dtypes, a policy token without a turn index, PRS on
            without ``turn_correct``/``turn_coverage``, group ids of the new batch that repeat
            buffered ones, or a generator needed but not given.

    Example (one group of 4, T = 3, no mismatch, every correct turn with full
    coverage): rewards A [0, 1.0, 1.5], B [0, 0, 0], C [1.0, 1.2, 1.6], D [1.1, 0, 1.3]. D's
    turn 2 is a post-success regression: masked, reward zeroed. TRLOO then gives per-turn
    advantages A [0.433, 1.1, 0.533], B [-2.9, -2.65, -1.467], C [2.167, 1.55, 0.667],
    D [0.3, 0, 0.267], broadcast to each turn's tokens; D's turn-2 tokens get no loss.
    """
    cfg = DrKernelStepConfig() if config is None else config
    state = StepState() if state is None else state
    metrics: dict[str, float] = {}

    new_rows = _process(batch, cfg, generator, metrics)  # steps 1-4
    buffered = state.buffer
    num_buffered = 0 if buffered is None else buffered.num_rows
    rows = new_rows if buffered is None else _concat(buffered, new_rows)

    # 5. group filter on last-turn rewards (after zeroing), with skip-and-buffer
    selected = torch.ones(rows.num_rows, dtype=torch.bool, device=rows.response_mask.device)
    skip = False
    if cfg.group_filter:
        sel, filter_metrics = filter_groups_last_turn(
            rows.turn_rewards, rows.group_ids, rows.turn_exists,
            std_threshold=cfg.filter_std_threshold,
            min_group_size=cfg.resolved_min_group_size(),
            target_num_groups=cfg.target_num_groups,
            target_group_size=cfg.samples_per_prompt,
            generator=generator,
        )
        metrics.update(filter_metrics)
        selected = sel.row_mask.to(selected.device)
        capped = cfg.max_skip_steps is not None and state.skip_streak >= cfg.max_skip_steps
        skip = not sel.enough and not (capped and len(sel.kept_groups) > 0)
        if skip:
            # keep every row of every surviving group for the next call
            new_state = StepState(buffer=_index(rows, selected), skip_streak=state.skip_streak + 1)
            metrics.update(_buffer_metrics(True, new_state, num_buffered))
            return _empty_result(rows, num_buffered, metrics), new_state
    new_state = StepState()
    metrics.update(_buffer_metrics(False, new_state, num_buffered))

    # 6. advantages on the selected rows; MRS/PRS-rejected turns stay in the groups
    sel_idx = torch.nonzero(selected).flatten()
    chosen = _index(rows, selected)
    turn_adv, adv_metrics = _advantages(chosen, cfg)
    metrics.update(adv_metrics)
    tok_adv = turns_to_tokens(turn_adv, chosen.tok_turn_index, chosen.response_mask)

    # 7. drop dead rows (nothing left to train on)
    alive = chosen.response_mask.any(dim=1)
    metrics["step/rows_selected"] = float(chosen.num_rows)
    metrics["step/dead_rows_dropped"] = float((~alive).sum())
    final = _index(chosen, alive)
    kept_rows = sel_idx[alive.to(sel_idx.device)]
    tok_adv = tok_adv[alive]
    turn_adv = turn_adv[alive]
    metrics["step/rows_kept"] = float(final.num_rows)
    metrics["step/tokens_kept"] = float(final.response_mask.sum())
    metrics["step/groups_kept"] = float(len(set(final.group_ids)))
    return (
        StepResult(
            skipped=final.num_rows == 0,
            tok_advantages=tok_adv,
            loss_mask=final.response_mask,
            old_log_probs=final.old_log_probs,
            is_weights=final.is_weights,
            tok_turn_index=final.tok_turn_index,
            turn_advantages=turn_adv,
            turn_rewards=final.turn_rewards,
            turn_loss_mask=final.turn_loss_mask,
            group_ids=final.group_ids,
            kept_rows=kept_rows,
            num_buffered=num_buffered,
            extras=final.extras,
            metrics=metrics,
        ),
        new_state,
    )


# --------------------------------------------------------------------------- steps 1-4


def _process(
    batch: StepBatch, cfg: DrKernelStepConfig, generator: torch.Generator | None, metrics: dict[str, float]
) -> ProcessedRows:
    """Steps 1-4 on the new batch: loss mask, MRS, PRS, rewards zeroed."""
    mask, turn_index, rewards, num_turns = _check_batch(batch)
    n = mask.shape[0]
    device = mask.device
    group_ids = _as_list(batch.group_ids, n, "group_ids")
    tokens_in = float(mask.sum())

    exists = turn_exists(turn_index, mask, num_turns) if batch.turn_exists is None else _bool(
        batch.turn_exists, (n, num_turns), "turn_exists", device
    )
    failed = None if batch.failed is None else _bool(batch.failed, (n,), "failed", device)

    # 1. meaningful-turn loss mask, into the response mask
    if batch.turn_loss_mask is not None:
        loss_mask = _bool(batch.turn_loss_mask, (n, num_turns), "turn_loss_mask", device) & exists
        if failed is not None:
            loss_mask = loss_mask & ~failed[:, None]
    elif cfg.mask_void_turn:
        loss_mask, tm_metrics = meaningful_turn_mask(rewards, exists, failed)
        metrics.update(tm_metrics)
    else:
        loss_mask = exists if failed is None else exists & ~failed[:, None]
    mask = mask & turns_to_tokens(loss_mask, turn_index)  # response_mask *= loss_mask[turn(l)]
    metrics.update(_reward_metrics(rewards, exists, loss_mask))

    # 2. MRS: trajectory rejection, per-turn veto, optional truncated IS
    is_weights = None
    if cfg.mismatch is not None and batch.rollout_log_probs is not None:
        mask, is_weights, mrs_metrics = _mrs(
            batch.old_log_probs, batch.rollout_log_probs, mask, turn_index, num_turns, cfg.mismatch
        )
        metrics.update(mrs_metrics)

    # 3. PRS on the turns that still have tokens
    if cfg.prs is not None:
        if batch.turn_correct is None or batch.turn_coverage is None:
            raise ValueError("PRS is on (config.prs) but the batch has no turn_correct/turn_coverage")
        alive_turns = turn_exists(turn_index, mask, num_turns)
        keep, prs_metrics = prs_keep_mask(
            batch.turn_coverage.to(device),
            _bool(batch.turn_correct, (n, num_turns), "turn_correct", device),
            alive_turns,
            None if batch.turn_speedup is None else batch.turn_speedup.to(device),
            threshold=cfg.prs.threshold,
            factor=cfg.prs.factor,
            mode=cfg.prs.mode,
            speedup_threshold=cfg.prs.speedup_threshold,
            generator=generator,
        )
        metrics.update(prs_metrics)
        mask = mask & turns_to_tokens(keep, turn_index)  # response_mask *= keep[turn(l)]

    # 4. rewards of masked turns zeroed (MRS/PRS-rejected turns keep theirs: baselines)
    zero = torch.zeros((), dtype=rewards.dtype, device=device)
    rewards = torch.where(loss_mask, rewards, zero)
    if is_weights is not None:
        is_weights = is_weights * mask
    metrics["step/rows_in"] = float(n)
    metrics["step/tokens_in"] = tokens_in
    metrics["step/tokens_after_masks"] = float(mask.sum())
    metrics["step/kept_token_frac"] = float(mask.sum()) / tokens_in if tokens_in else math.nan
    return ProcessedRows(
        response_mask=mask,
        old_log_probs=batch.old_log_probs.detach(),
        tok_turn_index=turn_index,
        turn_rewards=rewards,
        turn_loss_mask=loss_mask,
        turn_exists=exists,
        group_ids=group_ids,
        is_weights=is_weights,
        extras=dict(batch.extras),
    )


def _mrs(
    old_log_probs: torch.Tensor,
    rollout_log_probs: torch.Tensor,
    mask: torch.Tensor,
    turn_index: torch.Tensor,
    num_turns: int,
    config: MismatchConfig,
) -> tuple[torch.Tensor, torch.Tensor | None, dict[str, float]]:
    """MRS in the one-row-per-trajectory layout, by way of the reference's one-row-per-turn view.

    Row ``i T + t`` of the turn view holds, left-aligned, the tokens of turn t of trajectory i
    (``N T`` rows of ``L_turn`` = the longest turn's tokens; trajectory id i), so
    ``apply_mismatch_correction`` judges trajectories (geometric/sequence), turns (turn/turn_geo
    and the veto) or tokens exactly as the reference does on its flattened batch. The verdicts are
    scattered back onto the trajectory rows (turns own disjoint tokens). The view holds each turn
    token once: O(N L) memory, not O(N T L).
    """
    n, length = mask.shape
    if rollout_log_probs.shape != mask.shape:
        raise ValueError(f"rollout_log_probs {tuple(rollout_log_probs.shape)} != (N, L) {tuple(mask.shape)}")
    in_turn = turn_index >= 0
    pos = torch.zeros_like(turn_index)  # position of each token inside its turn
    for t in range(num_turns):  # T is small
        of_t = turn_index == t
        pos = torch.where(of_t, of_t.long().cumsum(dim=1) - 1, pos)
    turn_len = int(pos[in_turn].max()) + 1 if bool(in_turn.any()) else 1
    rows = torch.arange(n, device=mask.device)[:, None].expand(n, length)
    dest_row = (rows * num_turns + turn_index.clamp(min=0))[in_turn]  # turn-view row of each token
    dest_col = pos[in_turn]
    view = (n * num_turns, turn_len)

    def to_view(x: torch.Tensor, fill: float | bool) -> torch.Tensor:
        out = torch.full(view, fill, dtype=x.dtype, device=x.device)
        out[dest_row, dest_col] = x[in_turn]
        return out

    traj_ids = torch.arange(n, device=mask.device).repeat_interleave(num_turns)
    new_rows, weights, raw = apply_mismatch_correction(
        to_view(old_log_probs.detach(), 0.0),
        to_view(rollout_log_probs.detach(), 0.0),
        to_view(mask, False),
        traj_ids,
        config,
    )
    new_mask = torch.zeros_like(mask)
    new_mask[in_turn] = new_rows[dest_row, dest_col]
    if weights is not None:
        tok_weights = torch.zeros(mask.shape, dtype=weights.dtype, device=weights.device)
        tok_weights[in_turn] = weights[dest_row, dest_col]
        weights = tok_weights
    metrics = {"mrs/" + k.split("/", 1)[1]: v for k, v in raw.items()}  # mismatch/x -> mrs/x
    return new_mask & mask, weights, metrics


# --------------------------------------------------------------------------- step 6


def _advantages(rows: ProcessedRows, cfg: DrKernelStepConfig) -> tuple[torch.Tensor, dict[str, float]]:
    """Per-turn advantages of the selected rows, by registry name, with ``turn_mask = loss_mask``."""
    name = cfg.estimator
    if name == "trloo" and not cfg.estimator_knobs:
        return trloo_advantages_with_metrics(rows.turn_rewards, rows.group_ids, rows.turn_loss_mask, cfg.gamma)
    fn = get_advantage(name)
    adv = fn(rows.turn_rewards, rows.group_ids, rows.turn_loss_mask, cfg.gamma, **cfg.estimator_knobs)
    valid = rows.turn_loss_mask
    a = adv[valid].double()
    n = int(valid.sum())
    metrics = {
        f"{name}/adv_mean": float(a.mean()) if n else 0.0,
        f"{name}/adv_std": float(a.std(correction=0)) if n else 0.0,
        f"{name}/adv_abs_max": float(a.abs().max()) if n else 0.0,
        f"{name}/valid_frac": n / valid.numel() if valid.numel() else 0.0,
    }
    return adv, metrics


# --------------------------------------------------------------------------- helpers


def _check_batch(batch: StepBatch) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """Validate the token layout; return (mask bool, turn index int64, rewards float, T)."""
    mask = batch.response_mask
    if mask.dim() != 2:
        raise ValueError(f"response_mask must be (N, L), got shape {tuple(mask.shape)}")
    if mask.dtype != torch.bool:
        if bool(((mask != 0) & (mask != 1)).any()):
            raise ValueError("response_mask must be bool or 0/1")
        mask = mask.bool()
    if batch.old_log_probs.shape != mask.shape:
        raise ValueError(f"old_log_probs {tuple(batch.old_log_probs.shape)} != (N, L) {tuple(mask.shape)}")
    ti = batch.tok_turn_index
    if ti.shape != mask.shape or ti.dtype not in _INT_DTYPES:
        raise ValueError(f"tok_turn_index must be an int tensor of shape {tuple(mask.shape)}, got "
                         f"{tuple(ti.shape)} {ti.dtype}")
    ti = ti.long().to(mask.device)
    rewards = batch.turn_rewards
    if rewards.dim() != 2 or rewards.shape[0] != mask.shape[0]:
        raise ValueError(f"turn_rewards must be (N, T) with N = {mask.shape[0]}, got {tuple(rewards.shape)}")
    if not rewards.dtype.is_floating_point:
        rewards = rewards.to(torch.get_default_dtype())
    rewards = rewards.to(mask.device)
    num_turns = rewards.shape[1]
    if bool((mask & ~torch.isfinite(batch.old_log_probs.to(mask.device))).any()):
        raise ValueError("old_log_probs is NaN/inf on a token of response_mask")
    if bool((mask & (ti < 0)).any()):
        raise ValueError("a token in response_mask has tok_turn_index -1: every policy token needs its turn")
    if ti.numel() and (int(ti.min()) < -1 or int(ti.max()) >= num_turns):
        raise ValueError(f"tok_turn_index must be in [-1, T) with T = {num_turns} (turn_rewards' columns)")
    return mask, ti, rewards, num_turns


def _bool(x: Any, shape: tuple[int, ...], name: str, device: torch.device) -> torch.Tensor:
    t = torch.as_tensor(x, device=device).bool()
    if tuple(t.shape) != shape:
        raise ValueError(f"{name} must have shape {shape}, got {tuple(t.shape)}")
    return t


def _as_list(ids: Sequence[Any] | torch.Tensor, n: int, name: str) -> list[Any]:
    out = ids.tolist() if hasattr(ids, "tolist") else list(ids)
    if len(out) != n:
        raise ValueError(f"{name} must have length N = {n}, got {len(out)}")
    return out


def _index_extra(value: Any, keep: torch.Tensor, name: str) -> Any:
    if isinstance(value, torch.Tensor):
        return value[keep.to(value.device)]
    if isinstance(value, (list, tuple)):
        return [v for v, k in zip(value, keep.tolist()) if k]
    raise ValueError(f"extras[{name!r}] must be a tensor or a list, got {type(value).__name__}")


def _index(rows: ProcessedRows, keep: torch.Tensor) -> ProcessedRows:
    """Rows where the (N,) bool ``keep`` is True."""
    kl = keep.tolist()
    return ProcessedRows(
        response_mask=rows.response_mask[keep],
        old_log_probs=rows.old_log_probs[keep.to(rows.old_log_probs.device)],
        tok_turn_index=rows.tok_turn_index[keep],
        turn_rewards=rows.turn_rewards[keep],
        turn_loss_mask=rows.turn_loss_mask[keep],
        turn_exists=rows.turn_exists[keep],
        group_ids=[g for g, k in zip(rows.group_ids, kl) if k],
        is_weights=None if rows.is_weights is None else rows.is_weights[keep],
        extras={k: _index_extra(v, keep, k) for k, v in rows.extras.items()},
    )


def _pad_cat(a: torch.Tensor, b: torch.Tensor, value: float | int | bool = 0) -> torch.Tensor:
    """Concatenate along dim 0, right-padding dim 1 of the shorter one with ``value``."""
    if a.dim() >= 2 and a.shape[1] != b.shape[1] and a.shape[2:] == b.shape[2:]:
        width = max(a.shape[1], b.shape[1])

        def pad(t: torch.Tensor) -> torch.Tensor:
            if t.shape[1] == width:
                return t
            fill = torch.full((t.shape[0], width - t.shape[1], *t.shape[2:]), value, dtype=t.dtype, device=t.device)
            return torch.cat([t, fill], dim=1)

        a, b = pad(a), pad(b)
    if a.shape[1:] != b.shape[1:]:
        raise ValueError(f"cannot concatenate buffered rows {tuple(a.shape)} with new rows {tuple(b.shape)}")
    return torch.cat([a, b.to(a.device)], dim=0)


def _concat(old: ProcessedRows, new: ProcessedRows) -> ProcessedRows:
    """Buffered rows first, then the new batch's rows."""
    clash = set(old.group_ids) & set(new.group_ids)
    if clash:
        raise ValueError(
            f"group ids {sorted(map(str, clash))[:3]} appear in the buffer and in the new batch; "
            "make prompt ids unique per step (e.g. 'step<k>_<uuid>')"
        )
    if (old.is_weights is None) != (new.is_weights is None):
        raise ValueError("buffered and new rows disagree on IS weights (config changed between calls)")
    if set(old.extras) != set(new.extras):
        raise ValueError(f"extras keys differ: buffered {sorted(old.extras)} vs new {sorted(new.extras)}")
    extras: dict[str, Any] = {}
    for k, v in old.extras.items():
        w = new.extras[k]
        if isinstance(v, torch.Tensor) and isinstance(w, torch.Tensor):
            extras[k] = _pad_cat(v, w)
        elif isinstance(v, (list, tuple)) and isinstance(w, (list, tuple)):
            extras[k] = list(v) + list(w)
        else:
            raise ValueError(f"extras[{k!r}] changes type between buffered and new rows")
    return ProcessedRows(
        response_mask=_pad_cat(old.response_mask, new.response_mask, False),
        old_log_probs=_pad_cat(old.old_log_probs, new.old_log_probs, 0.0),
        tok_turn_index=_pad_cat(old.tok_turn_index, new.tok_turn_index, -1),
        turn_rewards=_pad_cat(old.turn_rewards, new.turn_rewards, 0.0),
        turn_loss_mask=_pad_cat(old.turn_loss_mask, new.turn_loss_mask, False),
        turn_exists=_pad_cat(old.turn_exists, new.turn_exists, False),
        group_ids=old.group_ids + new.group_ids,
        is_weights=None if old.is_weights is None else _pad_cat(old.is_weights, new.is_weights, 0.0),
        extras=extras,
    )


def _reward_metrics(rewards: torch.Tensor, exists: torch.Tensor, loss_mask: torch.Tensor) -> dict[str, float]:
    """``reward/``: raw turn rewards of the new batch over existing turns, overall and per turn."""
    out: dict[str, float] = {}
    r = rewards.detach().double()
    n = int(exists.sum())
    out["reward/mean"] = float(r[exists].mean()) if n else math.nan
    out["reward/max"] = float(r[exists].max()) if n else math.nan
    out["reward/min"] = float(r[exists].min()) if n else math.nan
    out["reward/trained_mean"] = float(r[loss_mask].mean()) if bool(loss_mask.any()) else math.nan
    for t in range(r.shape[1]):
        col = exists[:, t]
        out[f"reward/turn{t + 1}/mean"] = float(r[col, t].mean()) if bool(col.any()) else math.nan
    # last existing turn of each trajectory
    positions = torch.arange(r.shape[1], device=r.device).expand_as(r)
    last = torch.where(exists, positions, torch.full_like(positions, -1)).max(dim=1).values
    has = last >= 0
    if bool(has.any()):
        out["reward/last_turn_mean"] = float(r.gather(1, last.clamp(min=0)[:, None])[:, 0][has].mean())
    else:
        out["reward/last_turn_mean"] = math.nan
    return out


def _buffer_metrics(skipped: bool, state: StepState, num_buffered_in: int) -> dict[str, float]:
    buf = state.buffer
    return {
        "filter/skipped": 1.0 if skipped else 0.0,
        "filter/skip_streak": float(state.skip_streak),
        "filter/buffered_rows_in": float(num_buffered_in),
        "filter/buffered_rows": 0.0 if buf is None else float(buf.num_rows),
        "filter/buffered_groups": 0.0 if buf is None else float(len(set(buf.group_ids))),
    }


def _empty_result(rows: ProcessedRows, num_buffered: int, metrics: dict[str, float]) -> StepResult:
    none = torch.zeros(rows.num_rows, dtype=torch.bool, device=rows.response_mask.device)
    empty = _index(rows, none)
    metrics["step/rows_kept"] = 0.0
    metrics["step/tokens_kept"] = 0.0
    metrics["step/groups_kept"] = 0.0
    return StepResult(
        skipped=True,
        tok_advantages=torch.zeros(empty.old_log_probs.shape, dtype=empty.turn_rewards.dtype,
                                   device=empty.old_log_probs.device),
        loss_mask=empty.response_mask,
        old_log_probs=empty.old_log_probs,
        is_weights=empty.is_weights,
        tok_turn_index=empty.tok_turn_index,
        turn_advantages=torch.zeros_like(empty.turn_rewards),
        turn_rewards=empty.turn_rewards,
        turn_loss_mask=empty.turn_loss_mask,
        group_ids=[],
        kept_rows=torch.zeros(0, dtype=torch.long, device=rows.response_mask.device),
        num_buffered=num_buffered,
        extras=empty.extras,
        metrics=metrics,
    )
