"""Compact feedback text for the policy model.

Not a JSON dump (drkernel-reference.md §9.20: the paper's code sent the whole server response,
scores and temp paths included). The model sees: the verdict, the failing stage with its error
trimmed to what matters, the first failing trial with shapes and error size, the hack reason in
words, and for a passing kernel its speedup and coverage. Never the reward itself.
"""

from __future__ import annotations

from drkernel.env.result import EvalResult

HACK_TEXT = {
    "no_triton_kernel": "no @triton.jit kernel is defined",
    "forward_no_launch": "ModelNew.forward never launches a Triton kernel",
    "try_except": "try/except is not allowed (it can hide a failing kernel behind a fallback)",
    "reference_access": "the reference model is reused or an unknown module is imported",
    "threads": "threads or processes are not allowed",
    "cuda_stream": "creating or switching CUDA streams/graphs is not allowed",
    "tensor_subclass": "tensor subclasses and __torch_function__/__torch_dispatch__ are not allowed",
    "timer_patch": "library attributes (timers, checkers) must not be reassigned",
    "global_state": "global torch settings (TF32, precision, seeds, default dtype) must not be changed",
    "output_cache": "results must not be cached or kept across calls",
    "introspection": "introspection (gc, inspect, sys, exec/eval, frames) is not allowed",
    "file_access": "file, OS and network access is not allowed",
    "no_triton_launch": "no Triton kernel of yours was launched during forward",
    "launch_inconsistent": "your Triton kernels did not launch on every call (first call only, one grad mode, or untimed calls only)",
    "output_aliases_input": "the output shares memory with an input",
    "input_mutated": "the inputs were modified in place",
    "lazy_output": "the output must be a plain dense torch.Tensor with real storage",
    "stale_memory": "the output depends on uninitialised or stale memory",
    "timed_output_mismatch": "outputs of timed calls were wrong (caching or skipped work)",
    "harness_tampered": "the evaluation harness was modified",
    "threads_spawned": "new threads were started during forward",
    "side_stream": "work ran outside the timed stream (side streams or deferred work)",
}


def _trim(text: str, max_lines: int = 8, max_chars: int = 1200) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    text = "\n".join(lines[-max_lines:])
    return text if len(text) <= max_chars else "..." + text[-max_chars:]


def build_feedback(r: EvalResult) -> str:
    parts: list[str] = []
    if not r.compiled:
        parts.append("Status: failed to compile/load.")
    elif r.hacked:
        parts.append("Status: rejected by the integrity checks.")
    elif not r.correct:
        parts.append("Status: compiled, but the output is incorrect.")
    else:
        parts.append("Status: correct.")
    if r.hack_reasons:
        parts.append("Integrity: " + "; ".join(HACK_TEXT.get(h, h) for h in r.hack_reasons) + ".")
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
