"""The feedback turn: what the model is told after each reply.

The grader writes the compact verdict text (``EvalResult.feedback``: the stage that failed with its
error trimmed, the first mismatching trial's statistics, hack reasons in words, speedup and
coverage with the profiler's top kernels; :func:`drkernel.env.judge.feedback.build_feedback`). The agent
adds what only it knows:

* a reply without a code block gets a plain statement of that (and, when the backend cut the
  reply at its token limit, says so: the usual cause);
* the text is capped at ``max_chars`` keeping its head and tail, so one verbose error cannot eat
  the context (the paper's code sent an untruncated JSON dump, drkernel-reference.md §9.20);
* it never contains the reward.

The capped text fills the suite's prompt template (``{feedback}``, :mod:`drkernel.agent.prompts`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from drkernel.agent.prompts import render_feedback

if TYPE_CHECKING:
    from drkernel.env.result import EvalResult

MAX_FEEDBACK_CHARS = 2000
"""Default cap on the feedback text (before the template's own words)."""


def cap_text(text: str, max_chars: int = MAX_FEEDBACK_CHARS) -> str:
    """``text`` if it fits, else its head and tail around a ``[... N characters cut ...]`` line."""
    text = text.strip()
    if max_chars <= 0 or len(text) <= max_chars:
        return text
    marker = f"\n[... {len(text) - max_chars} characters cut ...]\n"
    head = (max_chars * 2) // 5
    tail = max_chars - head
    return text[:head].rstrip() + marker + text[-tail:].lstrip()


def no_code_text(finish_reason: str | None, entry_point: str = "Model") -> str:
    """Feedback for a reply that held no usable code block (nothing was graded)."""
    text = (f"Status: no code found. Your reply had no ```python code block defining `class {entry_point}New`, "
            "so nothing was compiled or tested.")
    if finish_reason == "length":
        text += (" The reply was cut off at the token limit before the code block was complete: "
                 "keep the reasoning shorter and write the full program.")
    return text


def result_text(result: "EvalResult", max_chars: int = MAX_FEEDBACK_CHARS) -> str:
    """The grader's compact feedback for ``result`` (built here if the grader left it empty), capped."""
    text = result.feedback
    if not text.strip():
        from drkernel.env.judge.feedback import build_feedback

        text = build_feedback(result)
    return cap_text(text, max_chars)


def feedback_message(text: str, template: str = "triton_kernelbench", *, entry_point: str = "Model") -> str:
    """The user message of a feedback turn: ``text`` in the template's feedback wrapper."""
    return render_feedback(text, template, entry_point=entry_point)


__all__ = ["MAX_FEEDBACK_CHARS", "cap_text", "no_code_text", "result_text", "feedback_message"]
