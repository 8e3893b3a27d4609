"""A grading worker process: ``python -m drkernel.env.process.worker FD WORKDIR [STAGE_FD]`` (or forked by the zygote).

Started ahead of time (a *warm* spare): it imports torch and triton, creates the CUDA context when
it serves a GPU, compiles the launch-budget hold and the measurement fences, warms up the profiler,
and says hello. It then serves exactly one model and exits. It speaks :mod:`drkernel.env.protocol`
on socket ``FD``; outputs go back as raw bytes in the output stage ``STAGE_FD`` (shared memory the
grader maps, :mod:`drkernel.env.process.staging`) or, when they do not fit, in files in ``WORKDIR``
(:mod:`drkernel.env.process.tensor_io`).

A worker has one of two roles, fixed by its load request:

* ``candidate``: before the candidate's module is imported the process is confined
  (:mod:`drkernel.env.process.confine`: writes only in ``WORKDIR``, no network, no signals out), the audit
  hook and guards go in (:mod:`drkernel.env.guards.audit`), the global-state fingerprint is taken, the
  candidate's kernels are named (:func:`~drkernel.env.measure.launches.install_naming`) and, on a GPU, the
  CUDA profiler starts. **No reference model exists in this process**: reference outputs are the
  grader's and reference timings come from a ``reference`` worker.
* ``reference``: the task's ``Model`` alone, timed by exactly the same procedure
  (:func:`drkernel.env.measure.timing.run_calls`). No candidate code ever runs in it.

Inputs are drawn here, from the hidden seed in the request that uses them, with the grader's own
code (:meth:`LoadedTask.draw_inputs`). Every reply carries ``findings``: what the audit recorded and
what the fingerprint shows changed since the previous reply. Nothing here decides a verdict.

Faults: everything that fails after the candidate was imported is the candidate's (its code runs
in this process and may have provoked it), at the stage of the request: load -> compile, run ->
correctness, time -> timing. A failure before that is the harness's.
"""

from __future__ import annotations

import os
import sys
import time
from multiprocessing.connection import Connection

from drkernel.env.faults import CandidateError, trim_traceback
from drkernel.env.process.harness import Harness

_perf = time.perf_counter


#: Stage a failure of each request is reported at.
OP_STAGES = {"load": "compile", "run": "correctness", "time": "timing", "events": "profiling"}


def main(argv: list[str]) -> int:
    t_start = _perf()
    fd, workdir = int(argv[0]), argv[1]
    stage_fd = int(argv[2]) if len(argv) > 2 else None
    conn = Connection(fd)
    from drkernel.env import protocol as P
    from drkernel.env.process.interpreter import UNJUDGEABLE  # (imported before any candidate code, as the rest)

    device = os.environ.get("DRKERNEL_WORKER_DEVICE", "cpu")
    seal_slot: list = []  # the seal's check, put here at load (read by index: no lookup on a class)
    try:
        harness = Harness(workdir, device, fd, stage_fd, seal_slot=seal_slot)
        if device.startswith("cuda"):
            harness.warm_cuda()
        else:
            from drkernel.env.measure.profiling import warm_up

            warm_up()  # a no-op in a forked worker (the zygote did it)
        import drkernel.env.judge.compare  # noqa: F401 - imported ahead of the candidate, like everything used later
        import drkernel.env.tasks.task  # noqa: F401
        import drkernel.env.measure.timing  # noqa: F401
        conn.send_bytes(P.encode_reply(P.Hello(ready=True, pid=os.getpid(), device=device,
                                               start_s=_perf() - t_start, start_parts=harness.start_parts)))
    except BaseException as exc:  # noqa: BLE001 - report, then exit: an environment failure
        conn.send_bytes(P.encode_reply(P.Failure(stage="compile", error=f"{type(exc).__name__}: {exc}",
                                                 fault="harness")))
        return 3
    decode, encode = P.worker_codec()
    read, write, read_exactly, write_all, frame_head = os.read, os.write, P.read_exactly, P.write_all, P.frame_head

    def recv() -> bytes:
        """One framed message (as Connection.recv_bytes), read with the C function bound here."""
        n = int.from_bytes(read_exactly(read, fd, 4), "big", signed=True)
        if n == -1:
            n = int.from_bytes(read_exactly(read, fd, 8), "big", signed=False)
        return read_exactly(read, fd, n)
    import gc

    gc_isenabled, gc_disable, gc_enable = gc.isenabled, gc.disable, gc.enable  # bound before any candidate code
    cuda_sync = harness._cuda_sync if device.startswith("cuda") else None  # the C function

    def send(data: bytes) -> None:
        """The connection's framing (as Connection.send_bytes), written with the C function bound
        here: the reply leaves through nothing the candidate can rebind (the Connection class can be)."""
        write_all(write, fd, frame_head(len(data)))
        write_all(write, fd, data)
    while True:
        try:
            raw = recv()
        except EOFError:
            return 0
        try:
            req, nonce = decode(raw)  # the nonce stays in this frame (and the spot channel's closure)
        except P.ProtocolError as exc:
            send(encode(P.Failure(stage="compile", error=f"bad request: {exc}", fault="harness")))
            return 4
        if req.op == "exit":
            return 0
        stage = OP_STAGES[req.op]
        harness.spot.arm(nonce)
        harness.interpreted_news("unjudgeable")  # a failure of this request is judged by this request's records
        if harness.stage is not None:
            harness.stage.rewind()  # the grader copied the last request's outputs before sending this one
        try:
            reply = getattr(harness, f"op_{req.op}")(req)
        except CandidateError as exc:
            reply = P.Failure(stage=exc.stage, error=exc.message, fault="candidate")
        except BaseException as exc:  # noqa: BLE001 - after the candidate loaded, its process is its own
            fault = "candidate" if harness.candidate_file is not None else "harness"
            reply = P.Failure(stage=stage, error=trim_traceback(exc, harness.candidate_file), fault=fault)
        if isinstance(reply, P.Failure) and reply.fault == "candidate":
            unjudgeable = harness.interpreted_news("unjudgeable")  # the interpreter met what it cannot run
            if unjudgeable:  # never "incorrect": what a GPU would run, the CPU could not
                reply = P.Failure(stage=reply.stage, error=f"{UNJUDGEABLE}: {unjudgeable[0]} ({reply.error[:400]})",
                                  fault="candidate")
        harness.finish_request(full=False)
        if seal_slot:  # the checks above ran torch's Python: the harness's namespaces before its encoding
            seal_slot[0]("before the reply")
        data = encode(reply, harness.take_findings(), nonce)
        # The reply ends the request's hold of the GPU gate in the grader: code of the candidate's that
        # ran since its last call (a weakref callback as the op's frame let go of an object, a
        # finaliser on a collection while the reply was built) may have queued GPU work; it finishes
        # before the reply leaves, with no collection between the wait and the send.
        collecting = gc_isenabled()
        gc_disable()
        try:
            if cuda_sync is not None:
                cuda_sync()
            send(data)
        finally:
            if collecting:
                gc_enable()


if __name__ == "__main__":
    # started by exec: the modules a zygote preloads (importing a loaded module raises no audit event)
    from drkernel.env.process.preload import preload

    preload()
    sys.exit(main(sys.argv[1:]))
