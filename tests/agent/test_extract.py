"""Tests for drkernel/agent/extract.py: the last fenced python block, never the whole text."""

import pytest

from drkernel.agent.extract import extract_code, fenced_blocks, strip_thinking

FULL = "import torch\n\n\nclass ModelNew(torch.nn.Module):\n    pass"


def test_last_python_block():
    text = f"First try:\n```python\nx = 1\n```\nBetter:\n```python\n{FULL}\n```\nDone."
    assert extract_code(text) == FULL + "\n"


def test_unlabelled_block_and_aliases():
    assert extract_code(f"```\n{FULL}\n```") == FULL + "\n"
    assert extract_code(f"```py\n{FULL}\n```") == FULL + "\n"
    assert extract_code(f"```Python3\n{FULL}\n```") == FULL + "\n"


@pytest.mark.parametrize("text", [
    "",
    None,
    "I think ModelNew should use a Triton kernel.\nclass ModelNew: pass",  # no fence: not the whole text
    "```bash\npip install triton\n```",  # other languages are never graded
    "```python\n\n   \n```",  # empty block
])
def test_none(text):
    assert extract_code(text) is None


def test_thinking_is_ignored():
    think = f"<think>draft:\n```python\nclass ModelNew: draft\n```\n</think>"
    assert extract_code(think + "\nNo code this time.") is None
    assert extract_code(think + f"\n```python\n{FULL}\n```") == FULL + "\n"
    # chat template already opened <think> in the prompt: only the part after </think> counts
    assert extract_code(f"reasoning ```python\nbad\n```\n</think>\n```python\n{FULL}\n```") == FULL + "\n"
    # cut off while thinking: everything is thinking
    assert extract_code(f"<think>let me write\n```python\n{FULL}\n```\nhmm") is None
    assert strip_thinking("<think>a</think>b") == "b"


def test_prefers_block_defining_modelnew_over_trailing_example():
    text = f"```python\n{FULL}\n```\nUsage:\n```python\nm = ModelNew()\nprint(m(x))\n```"
    assert extract_code(text) == FULL + "\n"
    # without any ModelNew definition, python-labelled beats unlabelled output
    text = "```python\nx = 1\n```\nOutput:\n```\ntorch.Size([4])\n```"
    assert extract_code(text) == "x = 1\n"
    # another entry point
    assert extract_code("```python\nclass NetNew: pass\n```\n```python\ny = 2\n```", entry_point="Net") == \
        "class NetNew: pass\n"


def test_fence_rules():
    # inline triple backticks in prose do not open a block
    text = f"Wrap code in ```python fences``` please.\n```python\n{FULL}\n```\ntrailing prose"
    assert extract_code(text) == FULL + "\n"
    # a longer fence holds an inner ``` line; tildes work; CRLF works
    inner = "s = '''\n```\n'''"
    assert fenced_blocks(f"````python\n{inner}\n````") == [("python", inner)]
    assert extract_code(f"~~~python\r\n{FULL}\r\n~~~\r\n") == FULL + "\n"
    # indented fence (inside a list item) is dedented
    assert extract_code("1. Code:\n   ```python\n   class ModelNew:\n       pass\n   ```") == \
        "class ModelNew:\n    pass\n"
    # an unclosed last block runs to the end of the text (Markdown); the grader then reports it
    assert extract_code(f"```python\n{FULL}") == FULL + "\n"
    # trailing prose after the closing fence is never captured (the paper's marker bug, ref §9.26)
    assert "Explanation" not in extract_code(f"# Kernel Implementation\n```python\n{FULL}\n```\nExplanation: fast")


def test_kernel_reply_is_what_extract_code_takes_back():
    from drkernel.agent.extract import kernel_reply

    code = "\n\nimport torch\n\nclass ModelNew(torch.nn.Module):\n    pass\n"
    reply = kernel_reply(code)
    assert reply == "Here is my kernel.\n```python\n" + code.strip("\n") + "\n```"
    assert extract_code(reply, entry_point="Model").strip() == code.strip()
