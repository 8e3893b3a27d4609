"""Prompt templates: the first user turn (instruction + reference) and the feedback turns.

A template is registered by name; a suite names its template in ``env.yaml``
(``prompt_template: triton_kernelbench``). Placeholders are filled by plain substitution, so
braces in the reference code need no escaping:

* first turn: ``{reference_code}``, ``{entry_point}`` (``Model``), ``{new_class}`` (``ModelNew``);
* feedback: ``{feedback}`` (``EvalResult.feedback``: compact text, never a JSON dump and never the
  reward, unlike the paper's code, drkernel-reference.md §9.20), ``{new_class}``.

The code block we ask for is the one :func:`drkernel.agent.extract.extract_code` takes: the last
fenced python block of the reply, so explanations go before it.
"""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass
from typing import Any

from drkernel._registry import Registry


@dataclass(frozen=True)
class PromptTemplate:
    """The text of the first user turn and of each feedback turn."""

    name: str
    first_turn: str
    """Instruction with ``{reference_code}``, ``{entry_point}`` and ``{new_class}`` placeholders."""
    feedback: str
    """Later turns, with ``{feedback}`` and ``{new_class}`` placeholders."""


_TEMPLATES: Registry[PromptTemplate] = Registry("prompt template", same=operator.eq)


def register_template(template: PromptTemplate) -> PromptTemplate:
    """Add ``template`` under its name; re-registering a name with different text is an error."""
    return _TEMPLATES.register(template.name, template)


def get_template(name: str) -> PromptTemplate:
    """The template registered as ``name``; an unknown name raises (a KeyError) listing the known ones."""
    return _TEMPLATES[name]


def list_templates() -> list[str]:
    return _TEMPLATES.names()


def _fill(text: str, values: dict[str, str]) -> str:
    # one pass over the placeholders: a value containing "{feedback}" is never substituted again
    pattern = re.compile("|".join(re.escape("{" + key + "}") for key in values))
    return pattern.sub(lambda m: values[m.group(0)[1:-1]], text)


def render_prompt(template_name: str, reference_code: str, *, entry_point: str = "Model") -> str:
    """The first user message for ``reference_code`` (a KernelBench-format task source)."""
    t = get_template(template_name)
    return _fill(t.first_turn, {"reference_code": reference_code.strip("\n"), "entry_point": entry_point,
                                "new_class": f"{entry_point}New"})


@dataclass(frozen=True)
class SuitePrompt:
    """One task of a suite with the agent's first prompt for it."""

    suite_id: str
    task_id: str
    entry_point: str
    source: str
    """The task's reference source (KernelBench format)."""
    text: str
    """The first user message (:func:`render_prompt` with the suite's or the given template)."""


def suite_prompts(suite: Any, *, tasks: str | None = None, template: str | None = None) -> list[SuitePrompt]:
    """The first prompt of each task of ``suite`` (a path or a loaded
    :class:`~drkernel.env.tasks.suite.Suite`) matching ``tasks`` (``Suite.select``'s id patterns;
    None: every task), in suite order, rendered with ``template`` (default: the suite's). Raises
    ValueError when no task matches."""
    from drkernel.env.tasks.suite import Suite, load_suite

    if not isinstance(suite, Suite):
        suite = load_suite(suite)
    template = template or suite.prompt_template
    out = []
    for t in suite.select(tasks):
        source = t.path.read_text(encoding="utf-8")
        out.append(SuitePrompt(suite.id, t.id, suite.entry_point, source,
                               render_prompt(template, source, entry_point=suite.entry_point)))
    if not out:
        raise ValueError(f"no task of suite {suite.id} matches {tasks!r}")
    return out


def render_feedback(feedback_text: str, template_name: str = "triton_kernelbench", *,
                    entry_point: str = "Model") -> str:
    """A later user message: the grader's compact feedback and the request for a better version."""
    t = get_template(template_name)
    return _fill(t.feedback, {"feedback": feedback_text.strip() or "(no feedback)",
                              "new_class": f"{entry_point}New"})


TRITON_KERNELBENCH = register_template(PromptTemplate(
    name="triton_kernelbench",
    first_turn="""\
You are an expert in GPU programming who writes high-performance Triton kernels.

The PyTorch program below defines `class {entry_point}(nn.Module)`, plus `get_inputs()` (the arguments \
of `forward`) and `get_init_inputs()` (the arguments of the constructor).

Write `class {new_class}(nn.Module)`: a faster drop-in replacement for `{entry_point}` whose forward pass \
computes its result in custom Triton kernels that you write.

Rules:
1. Do the math in your own `@triton.jit` kernels, launched from `{new_class}.forward`. PyTorch may be \
used only around them: allocating outputs (`torch.empty`), views and reshapes, `.contiguous()` and \
shape arithmetic. Do not compute any part of the result with torch or other library calls \
(no `torch.matmul`, `F.softmax`, `x.sum()`, `torch.relu`, ... on the data).
2. Keep the interface: `{new_class}.__init__` takes the same arguments as `{entry_point}.__init__`, and \
`forward` takes the same arguments and returns one tensor with the same shape and dtype. If \
`{entry_point}` holds parameters (for example an `nn.Linear`), create them the same way and in the same \
order so they get the same initial values.
3. Be exact to fp32: accumulate in fp32, do not downcast to fp16/bf16, and use \
`tl.dot(a, b, input_precision="ieee")` for matrix products (TF32 is not accurate enough).
4. Recompute the result on every call from the given inputs. Not allowed: try/except fallbacks, \
caching inputs or outputs between calls, extra CUDA streams or graphs, threads or processes, and \
modifying the inputs in place.
5. Make the program self-contained: import torch, torch.nn, triton and triton.language yourself, and \
do not import or subclass the reference.

Reference program:

```python
{reference_code}
```

Think it through, then answer with the complete new program (imports, Triton kernels and \
`class {new_class}`) in one ```python code block at the end of your reply.""",
    feedback="""\
Server feedback:
{feedback}

Using this feedback and your previous attempts, improve your implementation. Answer with the \
complete new program (imports, Triton kernels and `class {new_class}`) in one ```python code block \
at the end of your reply.""",
))


__all__ = ["PromptTemplate", "SuitePrompt", "register_template", "get_template", "list_templates", "render_prompt",
           "render_feedback", "suite_prompts", "TRITON_KERNELBENCH"]
