"""Tests for drkernel/agent/prompts.py: template registry and rendering."""

import pytest

from drkernel.agent.extract import extract_code
from drkernel.agent.prompts import (PromptTemplate, get_template, list_templates, register_template,
                                    render_feedback, render_prompt)

REFERENCE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        d = {"k": 1}  # braces must survive
        return torch.relu(x)


def get_inputs():
    return [torch.randn(4, 4)]


def get_init_inputs():
    return []
'''


def test_first_turn_contains_reference_and_rules():
    text = render_prompt("triton_kernelbench", REFERENCE)
    assert REFERENCE.strip() in text
    assert '{"k": 1}' in text and "{reference_code}" not in text and "{new_class}" not in text
    for must in ("@triton.jit", "class ModelNew(nn.Module)", "same arguments", "fp32", 'input_precision="ieee"',
                 "try/except", "caching", "streams", "threads", "```python"):
        assert must in text, must
    # the reference is shown in a python block, and a reply's last block is what gets graded
    assert extract_code(text) is not None


def test_entry_point_is_substituted():
    text = render_prompt("triton_kernelbench", REFERENCE.replace("Model", "Net"), entry_point="Net")
    assert "class NetNew(nn.Module)" in text and "ModelNew" not in text


def test_feedback_is_compact():
    fb = "Status: compiled, but the output is incorrect.\nError (correctness):\ntrial 1: max |diff| 0.5"
    text = render_feedback(fb)
    assert text.startswith("Server feedback:\n" + fb)
    assert "ModelNew" in text and "```python" in text
    assert len(text) < len(fb) + 400
    assert "(no feedback)" in render_feedback("  ")
    # a value is substituted once: feedback quoting a placeholder stays literal
    assert "{new_class}" in render_feedback("saw {new_class} in the log")


def test_registry():
    assert "triton_kernelbench" in list_templates()
    t = get_template("triton_kernelbench")
    assert register_template(t) is t  # same template again is fine
    with pytest.raises(ValueError, match="already registered"):
        register_template(PromptTemplate("triton_kernelbench", "x {reference_code}", "{feedback}"))
    with pytest.raises(KeyError, match="known: .*triton_kernelbench"):
        render_prompt("nope", REFERENCE)


def test_suite_prompts_are_the_first_prompt_of_each_selected_task_in_suite_order():
    from pathlib import Path

    from drkernel.agent.prompts import suite_prompts
    from drkernel.env import load_suite

    root = Path(__file__).resolve().parents[2] / "envs" / "single_ops"
    every = suite_prompts(root)
    suite = load_suite(root)
    assert [p.task_id for p in every] == [t.id for t in suite.tasks]
    relu = suite_prompts(suite, tasks="01_relu")  # a loaded suite or its path
    assert len(relu) == 1 and relu[0].task_id == "01_relu" and relu[0].suite_id == suite.id
    assert relu[0].source == (root / "tasks" / "01_relu.py").read_text()
    assert relu[0].text == render_prompt(suite.prompt_template, relu[0].source, entry_point=suite.entry_point)
    with pytest.raises(ValueError, match="no task of suite .* matches 'no_such_task'"):
        suite_prompts(root, tasks="no_such_task")
