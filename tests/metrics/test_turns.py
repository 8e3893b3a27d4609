"""Tests for drkernel/metrics/turns.py: flat per-turn metrics for the trainers."""

import math

import pytest
import torch

from drkernel.metrics import results_to_turn_tensors, turn_metrics


def test_docstring_example_by_hand():
    # sample 0: pass s = 1.3, pass s = 0.9; sample 1: fail, pass s = 1.25
    results = [
        [{"correct": True, "speedup": 1.3}, {"correct": True, "speedup": 0.9}],
        [{"correct": False, "speedup": None}, {"correct": True, "speedup": 1.25}],
    ]
    m = turn_metrics(results, turn_rewards=torch.tensor([[1.15, 0.95], [0.0, 1.125]]))
    assert m["turn1/correct"] == 0.5 and m["turn1/fast@1.2"] == 0.5 and m["turn1/fast@1"] == 0.5
    assert m["turn2/correct"] == 1.0 and m["turn2/fast@1.2"] == 0.5 and m["turn2/fast@1"] == 0.5
    # best across turns: sample 0 best 1.3, sample 1 best 1.25: both >= 1.2
    assert m["best/fast@1.2"] == 1.0 and m["best/correct"] == 1.0
    assert m["turn2/geomean_speedup"] == pytest.approx(math.sqrt(0.9 * 1.25))
    assert m["turn1/reward_mean"] == pytest.approx(0.575)
    assert m["turn1/num_samples"] == 2.0


def test_ragged_trajectories_hacks_and_missing_kernels():
    # sample 0 has 1 turn (hacked, "correct" does not count), sample 1 has 2 turns (None = no kernel)
    results = [[{"correct": True, "hacked": True, "speedup": 5.0}], [None, {"correct": True, "speedup": 1.0, "compiled": True}]]
    t = results_to_turn_tensors(results)
    assert t["exists"].tolist() == [[True, False], [True, True]]
    m = turn_metrics(results)
    assert m["turn1/correct"] == 0.0 and m["turn1/hack_rate"] == 0.5
    assert m["turn2/num_samples"] == 1.0 and m["turn2/fast@1"] == 1.0 and m["turn2/fast@1.2"] == 0.0
    assert math.isnan(m["turn1/geomean_speedup"])


def test_tensor_inputs_match_nested_results():
    results = [[{"correct": True, "speedup": 1.2}, {"correct": False}], [{"correct": True, "speedup": 2.0}, {"correct": True, "speedup": 1.1}]]
    t = results_to_turn_tensors(results)
    a = turn_metrics(results)
    b = turn_metrics(correct=t["correct"], speedup=t["speedup"], hacked=t["hacked"], exists=t["exists"])
    assert a == b
    with pytest.raises(ValueError):
        turn_metrics()


def test_list_rewards_are_exact():
    m = turn_metrics([[{"correct": True, "speedup": 1.0}]], turn_rewards=[[1.8]])
    assert m["turn1/reward_mean"] == 1.8  # not float32's 1.7999999523
