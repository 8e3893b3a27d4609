"""The one table of integrity findings: id, what it means, and the sentence the policy model reads.

Every check that can mark a candidate ``hacked`` names one of these ids (static checks on the
source, the worker's audit of what the candidate did, the grader's analysis of the device
activity). The feedback text, ``docs/hacks.md`` and the bench report read this table; a test keeps
them in step. A finding carries its own detail (``EvalResult.details["integrity"]``: what exactly
was seen, with a line number where there is one); the feedback shows the first detail of each id.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Hack:
    id: str
    description: str
    """What the check looks for (for people: docs, reports)."""
    feedback: str
    """One sentence for the policy model: what was detected and why it is not allowed."""
    origin: str
    """``static`` (the source), ``runtime`` (what the candidate's process did), ``device`` (the GPU activity)."""


_TABLE = (
    # -- static: the candidate's syntax tree --------------------------------------------------------
    Hack("no_triton_kernel", "no @triton.jit function is defined",
         "No @triton.jit kernel is defined: the computation must be written as Triton kernels.", "static"),
    Hack("forward_no_launch", "ModelNew.forward cannot reach any Triton kernel",
         "ModelNew.forward never launches a Triton kernel (a kernel that is defined but not used does not count).",
         "static"),
    Hack("try_except", "try/except in the source (a fallback path around a kernel)",
         "try/except is not allowed: it can hide a failing kernel behind a PyTorch fallback.", "static"),
    Hack("reference_access", "subclassing or calling the reference Model, relative or unknown imports",
         "Reusing the reference Model (subclassing it, super().forward) or importing modules other than torch, "
         "triton, numpy, math and typing helpers is not allowed.", "static"),
    Hack("threads", "threads, processes, executors or async in the source",
         "Threads, processes and executors are not allowed: all work must happen in the forward call.", "static"),
    Hack("cuda_stream", "CUDA stream or graph creation and switching",
         "Creating or switching CUDA streams or graphs is not allowed.", "static"),
    Hack("tensor_subclass", "torch.Tensor subclasses, __torch_function__ / __torch_dispatch__",
         "Tensor subclasses and __torch_function__/__torch_dispatch__ are not allowed.", "static"),
    Hack("timing_module", "imports time or timeit",
         "Importing time or timeit is not allowed: timing is the grader's job.", "static"),
    Hack("timer_patch", "assigning to or setattr on library attributes (timers, checkers, torch functions)",
         "Library attributes (torch, triton, timers, checkers) must not be reassigned.", "static"),
    Hack("global_state", "global torch settings: TF32, matmul precision, default dtype, seeds, threads",
         "Global torch settings (TF32, matmul precision, default dtype, seeds, threads, hooks) must not be changed.",
         "static"),
    Hack("output_cache", "functools caches, module-level containers written at run time, global, tensors kept on self",
         "Results must not be cached or kept across calls (every call gets new inputs and parameters).", "static"),
    Hack("introspection", "gc, inspect, sys, frames, __dict__/__code__/__globals__, exec/eval, torch._C",
         "Introspection (gc, inspect, sys, frames, exec/eval, internals such as torch._C) is not allowed.",
         "static"),
    Hack("file_access", "os, pathlib, io, pickle, sockets, open, torch.load/save",
         "File, OS and network access is not allowed.", "static"),
    Hack("idle_wait", "inline PTX that reads a GPU clock or sleeps (%globaltimer, %clock64, nanosleep)",
         "Kernels must not read the GPU's clock or sleep: waiting inside a kernel only pads its time.", "static"),
    Hack("kernel_python", "a @triton.jit body calls something Triton cannot compile (a Python helper, NumPy, torch)",
         "A @triton.jit kernel may call only triton.language, other @triton.jit functions and simple builtins: "
         "calling Python, NumPy or torch code inside a kernel runs it on the host.", "static"),
    # -- runtime: what the candidate's process did ---------------------------------------------------
    Hack("forbidden_operation", "an operation the worker's audit refused: frames, gc, files, network, "
         "processes, ctypes, code objects, exec, imports of other modules, threads",
         "Your code tried an operation that kernels have no use for (it was refused).", "runtime"),
    Hack("global_state_changed", "process-wide state changed by the candidate: module hooks, dispatcher "
         "registrations, torch function/dispatch modes, backend flags, trace/profile hooks, patched functions",
         "Your code changed process-wide state (hooks, operator registrations, backend flags or library "
         "functions); kernels must leave it as they found it.", "runtime"),
    Hack("harness_tampered", "the grader's own functions or measurement markers were changed or forged",
         "The evaluation harness was modified or its measurements were forged.", "runtime"),
    Hack("host_compute", "tensor data moved to the host during forward (numpy, tolist, device-to-host copies)",
         "Moving tensor data to the host (numpy, tolist, .cpu()) inside forward is not allowed: the work must "
         "run in your Triton kernels.", "runtime"),
    Hack("no_triton_launch", "no own Triton kernel ran in any checked call",
         "None of your Triton kernels ran during forward.", "runtime"),
    Hack("launch_inconsistent", "some calls ran no own Triton kernel (first call only, one grad mode, "
         "timed calls only)",
         "Your Triton kernels did not run on every call (e.g. only on the first call or only in one grad mode).",
         "runtime"),
    Hack("output_aliases_input", "the output shares storage with an input where the reference's does not",
         "The output shares memory with an input.", "runtime"),
    Hack("input_mutated", "an input changed during the call",
         "The inputs were modified in place.", "runtime"),
    Hack("lazy_output", "the output is not a plain dense tensor with its own storage (expanded constant, lazy)",
         "The output must be a plain dense torch.Tensor with real storage.", "runtime"),
    Hack("stale_memory", "the output changes when freed memory is pre-filled with other garbage",
         "The output depends on uninitialised or stale memory.", "runtime"),
    Hack("timed_output_mismatch", "an output of a timed call, chosen after the call returned, was wrong",
         "Outputs of timed calls were wrong (cached results or skipped work).", "runtime"),
    Hack("other_threads", "CPU time on threads of the candidate's process other than the one that runs its calls "
         "(a TorchScript fork, a native thread pool, threads started from C), read from /proc by the grader",
         "Work ran on other threads of your process (for example a TorchScript fork or a native thread pool): "
         "all work must happen in the forward call, on its own thread.", "runtime"),
    Hack("side_stream", "device work of a call on another stream than the call's (it is timed all the same)",
         "Work ran on another CUDA stream than the call's; streams are not allowed.", "device"),
    Hack("work_outside_call", "own kernels ran between the calls, outside every call's timed window (work "
         "deferred past the end of forward, e.g. by a hook the harness triggers)",
         "Your kernels ran after forward returned, outside the call: all work must happen inside forward.",
         "device"),
)

HACKS: dict[str, Hack] = {h.id: h for h in _TABLE}
"""Every integrity id, by id."""


def feedback_line(hack_id: str, detail: str | None = None) -> str:
    """The sentence for one finding, with what was seen when there is a detail."""
    hack = HACKS.get(hack_id)
    text = hack.feedback if hack else f"integrity check {hack_id} fired."
    if detail:
        text = text.rstrip(".") + f" ({detail[:160]})."
    return text


__all__ = ["Hack", "HACKS", "feedback_line"]
