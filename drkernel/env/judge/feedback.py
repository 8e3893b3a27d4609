"""Compact feedback text for the policy model.

Not a JSON dump (drkernel-reference.md §9.20: the paper's code sent the whole server response,
scores and temp paths included). The model sees: the verdict, the failing stage with its error
trimmed to what matters, the first failing trial with shapes and error size, each integrity
finding as one sentence naming what was seen (:mod:`drkernel.env.guards.hacks`), and for a passing kernel
its speedup and coverage. Never the reward itself.
"""

from __future__ import annotations

from drkernel.env.guards.hacks import HACKS, feedback_line
from drkernel.env.result import EvalResult

#: Kept for callers that want the plain sentence of an id.
HACK_TEXT = {h.id: h.feedback for h in HACKS.values()}


def _trim(text: str, max_lines: int = 8, max_chars: int = 1200) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    text = "\n".join(lines[-max_lines:])
    return text if len(text) <= max_chars else "..." + text[-max_chars:]


def integrity_lines(r: EvalResult) -> list[str]:
    """One sentence per finding id, with the first detail seen for it."""
    details: dict[str, str] = {}
    for item in r.details.get("integrity") or []:
        if isinstance(item, dict) and item.get("id") not in details:
            details[str(item.get("id"))] = str(item.get("detail") or "")
    return [feedback_line(h, details.get(h)) for h in r.hack_reasons]


def build_feedback(r: EvalResult) -> str:
    parts: list[str] = []
    if not r.compiled:
        parts.append("Status: failed to compile/load.")
    elif r.hacked:
        parts.append("Status: rejected by the integrity checks.")
    elif not r.correct and r.error is not None and r.error.stage == "profiling":
        parts.append("Status: the output is correct, but the work is not done in your Triton kernels.")
    elif not r.correct:
        parts.append("Status: compiled, but the output is incorrect.")
    else:
        parts.append("Status: correct.")
    if r.hack_reasons:
        parts.append("Integrity:\n" + "\n".join(f"- {line}" for line in integrity_lines(r)))
    if r.error is not None:
        parts.append(f"Error ({r.error.stage}):\n{_trim(r.error.message)}")
    if r.correct and not r.hacked:
        if r.speedup is not None:
            parts.append(f"Performance: {r.kernel_ms:.4g} ms vs reference {r.reference_ms:.4g} ms "
                         f"(speedup {r.speedup:.2f}x).")
        if r.coverage is not None:
            parts.append(f"Coverage: {100 * r.coverage:.1f}% of the forward's device time is in your Triton kernels.")
            top = (r.details.get("profile") or {}).get("top") or []
            others = [t for t in top if not t.get("own")][:3]
            if others and r.coverage < 0.9:
                parts.append("Largest kernels not written by you: "
                             + ", ".join(f"{t['name'][:60]} ({t['us']:.1f} us)" for t in others) + ".")
    return "\n".join(parts)
