"""Tests for drkernel/turns.py: the turn table of a trajectory and the token <-> turn layout."""

from __future__ import annotations

import math

import pytest
import torch

from drkernel.agent.types import Generation, Trajectory, Turn
from drkernel.env.result import EvalResult
from drkernel.turns import (
    TurnTable,
    result_fields,
    row_cells,
    tokens_to_turns,
    turn_boundaries,
    turn_exists,
    turn_index_from_mask,
    turn_rows,
    turn_table,
    turns_to_last_tokens,
    turns_to_tokens,
)


def _turn(t: int, reward: float, result: EvalResult | None, prompt: list[int] | None, reply: list[int],
          meaningful: bool = True) -> Turn:
    gen = Generation(text="r", token_ids=reply, logprobs=[-0.5] * len(reply), prompt_token_ids=prompt)
    return Turn(index=t, prompt=[], reply="r", code=None, code_span=None, result=result, reward=reward,
                feedback="", meaningful=meaningful, generation=gen)


def three_turns() -> Trajectory:
    """A 3-turn episode, its token stream (positions) laid out as one row:

        0 1 2 | 3 4   | 5 6      | 7 8 9  | 10     | 11
        prompt| reply1| feedback | reply2 | fb     | reply3
    turn 1: compiles, wrong (reward 0); turn 2: passes, speedup 1.3, coverage 0.9 (reward 1.3);
    turn 3: no code (no result, reward 0), a post-success regression (not meaningful).
    """
    return Trajectory("t", turns=[
        _turn(0, 0.0, EvalResult(compiled=True, correct=False), [1, 2, 3], [4, 5]),
        _turn(1, 1.3, EvalResult(compiled=True, correct=True, speedup=1.3, coverage=0.9), [1, 2, 3, 4, 5, 6, 7],
              [8, 9, 10]),
        _turn(2, 0.0, None, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11], [12], meaningful=False),
    ])


# --------------------------------------------------------------------------- hand-worked example


def test_turn_rows_of_a_three_turn_trajectory_by_hand() -> None:
    rows = turn_rows(three_turns())
    assert [r.index for r in rows] == [0, 1, 2]
    assert [r.reward for r in rows] == [0.0, 1.3, 0.0]
    assert [r.meaningful for r in rows] == [True, True, False]
    assert [r.graded for r in rows] == [True, True, False]
    assert [r.compiled for r in rows] == [True, True, False]
    assert [r.correct for r in rows] == [False, True, False]
    assert [r.passed for r in rows] == [False, True, False]
    assert [r.hacked for r in rows] == [False, False, False]
    assert rows[1].speedup == 1.3 and rows[1].coverage == 0.9
    assert math.isnan(rows[0].speedup) and math.isnan(rows[2].coverage)
    assert [r.token_span for r in rows] == [(3, 5), (7, 10), (11, 12)]
    assert [r.num_tokens for r in rows] == [2, 3, 1]


def test_turn_table_stacks_and_back_pads() -> None:
    failed = Trajectory("f", turns=[_turn(0, 0.5, EvalResult(compiled=True, correct=True, hacked=True), None, [7])],
                        error="grading failed")
    table = turn_table([three_turns(), failed, Trajectory("empty")], num_turns=3)
    assert table.exists.tolist() == [[True] * 3, [True, False, False], [False] * 3]
    assert table.reward.dtype == torch.float64
    assert table.reward.tolist() == [[0.0, 1.3, 0.0], [0.5, 0.0, 0.0], [0.0] * 3]
    assert table.meaningful.tolist() == [[True, True, False], [True, False, False], [False] * 3]
    assert table.passed.tolist() == [[False, True, False], [False] * 3, [False] * 3]  # the hacked one fails
    assert table.hacked.tolist() == [[False] * 3, [True, False, False], [False] * 3]
    assert table.token_start.tolist() == [[3, 7, 11], [-1, -1, -1], [-1, -1, -1]]  # no prompt ids: no span
    assert table.token_end.tolist() == [[5, 10, 12], [-1, -1, -1], [-1, -1, -1]]
    assert table.num_tokens.tolist() == [[2, 3, 1], [1, 0, 0], [0, 0, 0]]
    assert table.failed.tolist() == [False, True, False]
    assert math.isnan(table.speedup[0, 2]) and table.speedup[0, 1] == 1.3
    assert table.row(0)["reward"] == [0.0, 1.3, 0.0] and table.num_turns == 3
    assert turn_table([three_turns()]).num_turns == 3  # default T: the longest
    with pytest.raises(ValueError, match="more than num_turns"):
        turn_table([three_turns()], num_turns=2)


def test_result_fields_reads_dicts_and_objects() -> None:
    assert result_fields({"correct": True, "speedup": 2}) == {
        "graded": True, "compiled": True, "correct": True, "hacked": False, "speedup": 2.0,
        "coverage": pytest.approx(math.nan, nan_ok=True)}
    assert result_fields(None)["graded"] is False
    assert result_fields(EvalResult())["compiled"] is False


def test_token_layout_of_the_three_turn_trajectory_by_hand() -> None:
    # the row of three_turns(): turns on the reply tokens, -1 on prompt and feedback
    ti = torch.tensor([[-1, -1, -1, 0, 0, -1, -1, 1, 1, 1, -1, 2]])
    table = turn_table([three_turns()])
    spans = torch.full_like(ti, -1)
    for t in range(3):  # the table's token spans are exactly the layout's turns
        spans[0, int(table.token_start[0, t]):int(table.token_end[0, t])] = t
    assert torch.equal(spans, ti)
    first, last = turn_boundaries(ti)
    assert first.tolist() == [[3, 7, 11]] and last.tolist() == [[4, 9, 11]]
    assert torch.equal(first, table.token_start) and torch.equal(last + 1, table.token_end)
    rm = turns_to_last_tokens(table.reward, ti)  # verl's rm_scores: reward on each turn's last token
    assert rm.tolist() == [[0, 0, 0, 0, 0.0, 0, 0, 0, 0, 1.3, 0, 0.0]]
    assert tokens_to_turns(rm, ti).tolist() == [[0.0, 1.3, 0.0]]
    adv = torch.tensor([[0.5, -1.0, 2.0]])
    assert turns_to_tokens(adv, ti).tolist() == [[0, 0, 0, 0.5, 0.5, 0, 0, -1, -1, -1, 0, 2]]
    mask = ti >= 0
    mask[0, 4] = False
    assert turns_to_tokens(adv, ti, mask).tolist() == [[0, 0, 0, 0.5, 0, 0, 0, -1, -1, -1, 0, 2]]
    assert turns_to_tokens(torch.tensor([[True, False, True]]), ti).tolist() == [
        [False] * 3 + [True, True] + [False] * 5 + [False, True]]
    assert turn_exists(ti, num_turns=4).tolist() == [[True, True, True, False]]
    mask[0, 11] = False
    assert turn_exists(ti, mask).tolist() == [[True, True, False]]
    assert turn_index_from_mask((ti >= 0).long()).tolist() == ti.tolist()


def test_layout_docstring_examples_and_errors() -> None:
    ti = torch.tensor([[0, 0, -1, 1]])
    assert tokens_to_turns(torch.tensor([[0, 2, 0, 5]]), ti).tolist() == [[2, 5]]
    assert turns_to_tokens(torch.tensor([[2, 5]]), ti).tolist() == [[2, 2, 0, 5]]
    assert turns_to_last_tokens(torch.tensor([[2, 5]]), ti).tolist() == [[0, 2, 0, 5]]
    assert turn_exists(ti, torch.tensor([[1, 1, 0, 0]]), 3).tolist() == [[True, False, False]]
    assert turn_index_from_mask(torch.tensor([[1, 1, 0, 0, 1, 0, 1]])).tolist() == [[0, 0, -1, -1, 1, -1, 2]]
    with pytest.raises(ValueError, match="no turn"):
        tokens_to_turns(torch.tensor([[0.0, 0, 1, 0]]), ti)
    with pytest.raises(ValueError, match="num_turns"):
        turns_to_tokens(torch.tensor([[2.0]]), ti)
    with pytest.raises(ValueError, match="integer"):
        turn_exists(ti.float())
    # empty layouts
    assert tokens_to_turns(torch.zeros(2, 0), torch.zeros(2, 0, dtype=torch.long)).shape == (2, 0)
    assert turns_to_tokens(torch.zeros(2, 0), torch.full((2, 3), -1)).tolist() == [[0.0] * 3] * 2
    assert turn_boundaries(torch.full((1, 2), -1), 2)[0].tolist() == [[-1, -1]]


def test_row_cells_by_hand() -> None:
    c = row_cells(["a", "a", "b", "b"], torch.tensor([1, 2, -1, 1]))
    assert (c.num_traj, c.num_turns, c.traj_ids) == (2, 2, ["a", "b"])
    assert c.cell.tolist() == [0, 1, -1, 2] and c.traj.tolist() == [0, 0, 1, 1]
    with pytest.raises(ValueError, match="same"):
        row_cells(["a", "a"], torch.tensor([1, 1]))
    with pytest.raises(ValueError, match="1-based"):
        row_cells(["a"], torch.tensor([0]))


# --------------------------------------------------------------------------- properties


def _random_layout(seed: int, n: int = 6, length: int = 40, turns: int = 4):
    """Rows of contiguous turn blocks separated by feedback (-1), random lengths, some turns absent."""
    g = torch.Generator().manual_seed(seed)
    ti = torch.full((n, length), -1, dtype=torch.long)
    for i in range(n):
        pos = int(torch.randint(0, 4, (1,), generator=g))
        for t in range(turns):
            k = int(torch.randint(0, 6, (1,), generator=g))  # 0 = the turn has no token
            ti[i, pos:pos + k] = t
            pos += k + int(torch.randint(1, 4, (1,), generator=g))
            if pos >= length:
                break
    return ti, g


@pytest.mark.parametrize("seed", range(8))
def test_round_trips(seed: int) -> None:
    ti, g = _random_layout(seed)
    n, turns = ti.shape[0], 4
    values = torch.randn(n, turns, generator=g, dtype=torch.float64)
    exists = turn_exists(ti, num_turns=turns)
    # turn -> last token -> turn is the identity on turns with a token (0 on the others)
    back = tokens_to_turns(turns_to_last_tokens(values, ti), ti, turns)
    torch.testing.assert_close(back, torch.where(exists, values, torch.zeros_like(values)))
    # turn -> tokens (broadcast) -> the value on each turn's last token is the turn's value
    tok = turns_to_tokens(values, ti)
    _, last = turn_boundaries(ti, turns)
    picked = tok.gather(1, last.clamp(min=0))
    torch.testing.assert_close(picked[exists], values[exists])
    # and the broadcast sums to value x the turn's token count
    counts = tokens_to_turns((ti >= 0).double(), ti, turns)
    torch.testing.assert_close(tokens_to_turns(tok, ti, turns), values * counts)
    # boundaries agree with the run-of-ones recovery when turns are contiguous and separated
    recovered = turn_index_from_mask(ti >= 0)
    assert torch.equal(turn_exists(recovered, num_turns=turns).sum(1), exists.sum(1))


# --------------------------------------------------------------------------- equivalence with the old copies


def _naive_layout(ti: torch.Tensor, mask: torch.Tensor, tok_values: torch.Tensor, turn_values: torch.Tensor):
    """The definitions, token by token (the reference the vectorised functions are checked against)."""
    n, length = ti.shape
    turns = turn_values.shape[1]
    sums = torch.zeros(n, turns, dtype=tok_values.dtype)
    exists = torch.zeros(n, turns, dtype=torch.bool)
    first = torch.full((n, turns), -1)
    last = torch.full((n, turns), -1)
    broadcast = torch.zeros(n, length, dtype=turn_values.dtype)
    for i in range(n):
        for pos in range(length):
            t = int(ti[i, pos])
            if t < 0:
                continue
            sums[i, t] += tok_values[i, pos]
            exists[i, t] |= bool(mask[i, pos])
            first[i, t] = pos if first[i, t] < 0 else first[i, t]
            last[i, t] = pos
            broadcast[i, pos] = turn_values[i, t] if mask[i, pos] else 0
    return sums, exists, first, last, broadcast


@pytest.mark.parametrize("seed", range(6))
def test_layout_equals_the_definitions_and_the_public_adapters_on_random_batches(seed: int) -> None:
    from drkernel.advantages import token_level
    from drkernel.verl import layout

    ti, g = _random_layout(seed)
    n, length, turns = ti.shape[0], ti.shape[1], 4
    mask = (ti >= 0) & (torch.rand(n, length, generator=g) > 0.2)
    tok_rewards = torch.where(ti >= 0, torch.randn(n, length, generator=g), torch.zeros(n, length))
    values = torch.randn(n, turns, generator=g)
    sums, exists, first, last, broadcast = _naive_layout(ti, mask, tok_rewards, values)
    torch.testing.assert_close(tokens_to_turns(tok_rewards, ti, turns), sums)
    assert torch.equal(turn_exists(ti, mask, turns), exists)
    assert torch.equal(turn_boundaries(ti, turns)[0], first) and torch.equal(turn_boundaries(ti, turns)[1], last)
    assert torch.equal(turns_to_tokens(values, ti, mask), broadcast)
    # the public adapters give the same (same signatures as before the move)
    old_r, old_m = token_level.token_to_turn_rewards(tok_rewards, ti, mask, turns)
    torch.testing.assert_close(old_r, sums)
    assert torch.equal(old_m, exists) and torch.equal(token_level.turn_mask_from_tokens(ti, mask, turns), exists)
    assert torch.equal(token_level.turn_to_token(values, ti, mask), broadcast)
    torch.testing.assert_close(layout.turn_rewards_from_tokens(tok_rewards, ti, turns), sums)
    assert torch.equal(layout.turn_values_to_tokens(values, ti, mask), broadcast)


def _random_trajectories(seed: int, n: int = 5) -> list[Trajectory]:
    import random

    rng = random.Random(seed)
    out = []
    for i in range(n):
        turns, ids = [], [1, 2]
        for t in range(rng.randrange(0, 4)):
            reply = [rng.randrange(3, 50) for _ in range(rng.randrange(0, 4))]
            result = None if rng.random() < 0.3 else EvalResult(
                compiled=rng.random() < 0.8, correct=rng.random() < 0.6, hacked=rng.random() < 0.1,
                speedup=None if rng.random() < 0.3 else rng.uniform(0.5, 2), coverage=rng.choice([None, 0.2, 0.9]))
            turns.append(_turn(t, rng.choice([0.0, 0.5, 1.2]), result, list(ids), reply,
                               meaningful=rng.random() < 0.8))
            ids += reply + [99]
        out.append(Trajectory(f"t{i}", turns=turns, error="x" if rng.random() < 0.2 else None))
    return out


@pytest.mark.parametrize("seed", range(6))
def test_new_table_equals_the_old_copies_on_random_trajectories(seed: int) -> None:
    from drkernel.agent.episode import turn_tensors
    from drkernel.local.pack import pack_trajectories
    from drkernel.metrics.turns import results_to_turn_tensors

    trajs = _random_trajectories(seed)
    table = turn_table(trajs, 3)
    old = turn_tensors(trajs, 3)
    assert torch.equal(table.reward, old["turn_rewards"]) and torch.equal(table.exists, old["turn_exists"])
    assert torch.equal(table.meaningful, old["turn_mask"])
    packed = pack_trajectories(trajs, 3, 0)
    assert torch.equal(table.reward, packed.turn_rewards) and torch.equal(table.passed, packed.turn_correct)
    torch.testing.assert_close(table.coverage, packed.turn_coverage, equal_nan=True)
    torch.testing.assert_close(table.speedup, packed.turn_speedup, equal_nan=True)
    assert torch.equal(table.failed, packed.failed)
    assert torch.equal(table.num_tokens > 0, packed.turn_exists)  # no prefix breaks here
    from_results = results_to_turn_tensors([[t.result for t in tr.turns] for tr in trajs])
    t_max = from_results["correct"].shape[1]
    assert torch.equal((table.correct & table.compiled)[:, :t_max], from_results["correct"])
    assert torch.equal(table.hacked[:, :t_max], from_results["hacked"])
    assert torch.equal(table.exists[:, :t_max], from_results["exists"])
    torch.testing.assert_close(table.speedup[:, :t_max], from_results["speedup"], equal_nan=True)
    for i, tr in enumerate(trajs):  # spans index the packed row's turn tokens
        for t in range(len(tr.turns)):
            if table.num_tokens[i, t]:
                s, e = int(table.token_start[i, t]), int(table.token_end[i, t])
                assert packed.tok_turn_index[i, s:e].eq(t).all() and int(packed.tok_turn_index[i].eq(t).sum()) == e - s


def test_table_from_rows_matches_turn_table() -> None:
    trajs = _random_trajectories(0)
    a = turn_table(trajs, 3)
    b = TurnTable.from_rows([turn_rows(t) for t in trajs], 3, failed=[t.failed for t in trajs])
    for name in ("exists", "reward", "passed", "token_start", "failed"):
        assert torch.equal(getattr(a, name), getattr(b, name))
