"""The output as it was when a call's window closed: the copy the timed calls' spot checks read.

Runs in the worker. After the window closes the harness runs Python of its own and of torch's (the
integrity checks, the device-wide sync, the question whether to keep the output), and every
function it looks up there lives in a namespace the candidate's code can rebind (a module's or a
class's attribute: neither raises an audit event). A rebinding that restores itself when first
called runs the candidate's code there, after the closing fence: work queued then is not timed, yet
it used to finish before the kept output was copied (the first outside red team's break: the real
kernel deferred to ``torch.device``, called by the harness's check, timed a 64-program relu at
1.4 ms instead of 55 ms, every output correct).

So the output is copied *before* any of that: ``arm`` (inside the window, after the forward
returned: the candidate's code may still run there, and whatever it queues is timed) notes where the
output lies, and ``commit`` (right after the closing fence is queued, on CUDA; right after the host
clock stops, on the CPU) queues one copy of its bytes through a C function bound here, with nothing
looked up in between: ``cudaMemcpyAsync`` on the call's stream (behind the fence, ahead of anything
queued later), or ``memmove``. The spot checks read that copy (:func:`make_capture`'s ``captured``);
work deferred past the window can no longer reach what they read. An output that is not a plain,
dense, contiguous tensor on the worker's device is not copied (the kept output is then read as it is
when the grader's answer arrives, as before: the correctness trials already require the reference's
contiguous layout).
"""

from __future__ import annotations

import ctypes
from typing import Any, Callable

_D2D = 3  # cudaMemcpyDeviceToDevice


def cuda_runtime() -> Any:
    """The CUDA runtime library torch loaded (``ctypes.CDLL``), or None when none can be found."""
    path = None
    try:
        with open("/proc/self/maps") as fh:
            for line in fh:
                if "libcudart" in line:
                    path = line.split()[-1]
                    break
    except OSError:
        return None
    for name in ([path] if path else []) + ["libcudart.so", "libcudart.so.13", "libcudart.so.12"]:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


def make_capture(torch: Any, device: str) -> tuple[Callable[[Any], None], Callable[[], None], Callable[[Any], Any]]:
    """``(arm, commit, captured)`` for one worker (made before the candidate loads).

    ``arm(out)``: inside the window; ``commit()``: right after it; ``captured(out)``: after the
    device-wide sync, the copy viewed as ``out``'s dtype and shape, or None when ``out`` was not
    copied. Raises RuntimeError when a torch function or dispatch mode is active then (it could
    answer for the harness's own tensor operations). ``captured.status`` says whether copies are
    made at all (not without a CUDA runtime library to call); a copy that fails leaves its output
    to be read as before."""
    base = torch._C.TensorBase
    tensor_type, uint8 = torch.Tensor, torch.uint8
    empty = torch.empty
    is_contiguous, data_ptr, numel, element_size = base.is_contiguous, base.data_ptr, base.numel, base.element_size
    view, narrow = base.view, base.narrow
    modes = (torch._C._len_torch_function_stack, torch._C._len_torch_dispatch_stack)
    cuda = device == "cuda"
    status = "copied as the window closes"
    clear_error = None
    if cuda:
        rt = cuda_runtime()
        if rt is None:  # (a statically linked torch): the kept outputs are read as before
            copy, status = None, "off: no CUDA runtime library found (kept outputs read when the answer arrives)"
        else:
            copy = rt.cudaMemcpyAsync
            copy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
            copy.restype = ctypes.c_int
            clear_error = rt.cudaGetLastError
    else:
        copy = ctypes.memmove
    state: dict[str, Any] = {"buf": None, "cap": 0, "args": None, "armed": None}

    def arm(out: Any) -> None:
        state["args"] = state["armed"] = None
        if copy is None or type(out) is not tensor_type or out.device.type != device or not is_contiguous(out):
            return
        n = numel(out) * element_size(out)
        if n <= 0:
            return
        if n > state["cap"]:
            state["buf"] = empty(n, dtype=uint8, device=device)
            state["cap"] = n
        dst = data_ptr(state["buf"])
        state["args"] = (dst, data_ptr(out), n, _D2D, None) if cuda else (dst, data_ptr(out), n)
        state["armed"] = out

    def commit() -> None:
        args = state["args"]
        if args is not None:
            rc = copy(*args)
            if cuda and rc != 0:  # the kept output is then read as before; the error is not left for torch
                state["armed"] = None
                clear_error()

    def captured(out: Any) -> Any:
        if modes[0]() or modes[1]():
            raise RuntimeError("a torch function or dispatch mode was left active after the call")
        if state["armed"] is not out or state["args"] is None:
            return None
        raw = narrow(state["buf"], 0, 0, state["args"][2])
        return view(view(raw, out.dtype), tuple(out.shape))

    captured.status = status  # type: ignore[attr-defined]
    return arm, commit, captured


__all__ = ["make_capture", "cuda_runtime"]
