"""Coverage: how much of the candidate's forward runs in its own Triton kernels (PR, PRS input).

On CUDA::

    coverage = sum(device time of kernel events named exactly like a launched own kernel)
               / sum(device time of all kernel, memcpy and memset events of the forward)

Only device-side activity counts (no CPU op time in the denominator, no aten op counted twice),
and names match exactly — not by substring either way, which let a kernel called ``mm`` claim
cuBLAS time in KernelGYM (drkernel-reference.md §9.21).

On the CPU interpreter an interpreted Triton kernel runs thousands of times slower than torch's
compiled operators, so a wall-time share would credit a token kernel with almost all of a forward
whose real work is a torch call (issue 8, defect 9). Instead torch's profiler lists the aten
*compute* operators the forward runs outside the candidate's own launches (allocations, views and
metadata are not compute)::

    coverage = 1.0                      when there are none: all the work is in own kernels
    coverage = None, reason = "..."     otherwise: their share cannot be measured on the interpreter

A runtime failure of the candidate here is its failure at the ``profiling`` stage.
"""

from __future__ import annotations

from typing import Any

#: aten operators that allocate, reshape or describe tensors without computing anything.
NON_COMPUTE = frozenset({
    "empty", "empty_like", "empty_strided", "zeros_like", "view", "reshape", "_reshape_alias", "as_strided",
    "expand", "expand_as", "t", "transpose", "permute", "squeeze", "unsqueeze", "flatten", "unflatten",
    "select", "slice", "narrow", "split", "chunk", "unbind", "detach", "alias", "lift_fresh", "resolve_conj",
    "resolve_neg", "is_nonzero", "item", "_local_scalar_dense", "size", "stride", "numel", "dim",
    "contiguous", "view_as", "unsafe_view", "_unsafe_view", "result_type", "set_", "to", "_to_copy",
    "empty_permuted", "_has_compatible_shallow_copy_type", "is_same_size", "stride", "movedim", "numpy_T",
})


def _candidate_failure(h: Any, exc: BaseException) -> Exception:
    from drkernel.env.worker import CandidateError, _trim_traceback

    return CandidateError("profiling", "ModelNew.forward raised while profiled: "
                          + _trim_traceback(exc, h.candidate_file))


def measure_coverage(h: Any, req: Any) -> Any:
    from drkernel.env.protocol import ProfileReply

    torch = h.torch
    inputs = h.pool_inputs(req.seed)
    calls = max(1, int(req.calls))
    from torch.profiler import ProfilerActivity, profile, record_function

    if not h.device.startswith("cuda"):
        try:
            with torch.no_grad():
                h.recorder.reset()
                h.model(*inputs)  # warm: the first interpreted launch is slower
                h.recorder.marker = record_function
                own_names: set[str] = set()
                with profile(activities=[ProfilerActivity.CPU]) as prof:
                    for _ in range(calls):
                        h.recorder.reset()
                        h.model(*inputs)
                        own_names |= set(h.recorder.counts)
        except BaseException as exc:  # noqa: BLE001
            raise _candidate_failure(h, exc) from None
        finally:
            h.recorder.marker = None
        launches = [ev.time_range for ev in prof.events() if ev.name == "drkernel::own_launch"]
        torch_ops: dict[str, int] = {}
        for ev in prof.events():
            if not ev.name.startswith("aten::") or ev.name[6:] in NON_COMPUTE:
                continue
            parent, nested = ev.cpu_parent, False
            while parent is not None:
                if parent.name.startswith("aten::") or parent.name == "drkernel::own_launch":
                    nested = True
                    break
                parent = parent.cpu_parent
            inside = any(r.start <= ev.time_range.start and ev.time_range.end <= r.end for r in launches)
            if not nested and not inside:
                torch_ops[ev.name] = torch_ops.get(ev.name, 0) + 1
        torch_ops = {k: -(-v // calls) for k, v in torch_ops.items()}  # per call, rounded up
        own_us = sum(r.end - r.start for r in launches) / calls
        if not own_names:
            return ProfileReply(coverage=0.0, method="cpu_profiler", own_us=0.0, kernels=[], torch_ops=torch_ops,
                                reason="no own Triton kernel launched while profiled")
        if torch_ops:
            listed = ", ".join(f"{k} x{v}" for k, v in sorted(torch_ops.items(), key=lambda kv: -kv[1])[:6])
            return ProfileReply(coverage=None, method="cpu_profiler", own_us=own_us, kernels=sorted(own_names),
                                torch_ops=torch_ops,
                                reason=(f"the forward runs torch compute outside its Triton kernels ({listed}); "
                                        "the Triton interpreter cannot measure their share of device time"))
        return ProfileReply(coverage=1.0, method="cpu_profiler", own_us=own_us, kernels=sorted(own_names),
                            torch_ops={})

    try:
        with torch.no_grad():
            h.recorder.reset()
            h.model(*inputs)  # warm: compile outside the profile
            own_names = set(h.recorder.counts)
            h.sync()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(calls):
                    h.recorder.reset()
                    h.model(*inputs)
                    own_names |= set(h.recorder.counts)
                h.sync()
    except BaseException as exc:  # noqa: BLE001
        raise _candidate_failure(h, exc) from None
    per_name: dict[str, float] = {}
    for ev in prof.events():
        dev_type = str(getattr(ev, "device_type", ""))
        if "CUDA" not in dev_type:
            continue
        us = float(getattr(ev, "device_time", 0.0) or getattr(ev, "cuda_time", 0.0) or 0.0)
        if us <= 0:
            continue
        per_name[ev.name] = per_name.get(ev.name, 0.0) + us
    total = sum(per_name.values())
    own = sum(us for name, us in per_name.items() if name in own_names)
    top = sorted(per_name.items(), key=lambda kv: -kv[1])[:8]
    return ProfileReply(coverage=(own / total) if total > 0 else None, own_us=own / calls, total_us=total / calls,
                        kernels=sorted(own_names), method="cuda_profiler",
                        reason=None if total > 0 else "no device activity recorded",
                        top=[{"name": n[:120], "us": us / calls, "own": n in own_names} for n, us in top])
