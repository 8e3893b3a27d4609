"""A crashing, hanging, hostile or greedy candidate is a failed result, never a grader crash."""

import os
from pathlib import Path

import pytest

from drkernel.env.conformance import PROBE_TASK, _KERNEL
from drkernel.env.config import EvalConfig
from drkernel.env.evaluation import evaluate

FAST = EvalConfig(device="cpu", measure_performance=False, profile=False, trials_per_distribution=1,
                  distributions=("native",), determinism_check=False)


def grade(body: str, **overrides):
    return evaluate(PROBE_TASK, _KERNEL + body, seed=0, config=FAST.with_overrides(**overrides))


@pytest.mark.slow
def test_memory_hog_is_killed_at_the_cap():
    r = grade('''
class ModelNew(nn.Module):
    def forward(self, x):
        hog = [torch.ones(64 << 20) for _ in range(64)]  # 16 GiB, touched page by page
        return _launch(x)
''', memory_limit_mb=1500)
    assert r.compiled and not r.correct
    assert "memory limit exceeded" in r.error.message


@pytest.mark.slow
def test_hang_at_import_times_out_as_a_compile_failure():
    r = grade('''
import time
time.sleep(600)
class ModelNew(nn.Module):
    def forward(self, x):
        return _launch(x)
''', load_timeout_s=6)
    assert not r.compiled and r.error.stage == "compile" and "timed out" in r.error.message


@pytest.mark.slow
def test_exit_in_constructor_is_a_compile_failure():
    r = grade('''
import os
from pathlib import Path
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        os._exit(0)
    def forward(self, x):
        return _launch(x)
''')
    assert not r.compiled and r.error.stage == "compile" and "exit code 0" in r.error.message


def test_native_crash_in_forward_is_a_failed_result():
    r = grade('''
import os
from pathlib import Path
class ModelNew(nn.Module):
    def forward(self, x):
        os.abort()
        return _launch(x)
''')
    assert r.compiled and not r.correct and r.error.stage == "correctness"
    assert "SIGABRT" in r.error.message


@pytest.mark.slow
def test_exception_message_is_trimmed_to_the_candidates_frames():
    r = grade('''
class ModelNew(nn.Module):
    def forward(self, x):
        raise ValueError("boom " * 2000)
''')
    assert not r.correct and "ValueError" in r.error.message and len(r.error.message) < 2600
    assert "drkernel/env/" not in r.error.message  # (no frame of the harness)


@pytest.mark.slow
@pytest.mark.parametrize("ret", ["(x * 2.0, x)", "None", "x.tolist()"])
def test_non_tensor_outputs_fail_correctness(ret):
    r = grade(f'''
class ModelNew(nn.Module):
    def forward(self, x):
        _launch(x)
        return {ret}
''')
    assert r.compiled and not r.correct and "expected a single torch.Tensor" in r.error.message


@pytest.mark.slow
def test_broken_reference_is_a_task_error_not_a_verdict():
    from drkernel.env.tasks.task import TaskError

    broken = PROBE_TASK.replace("return x * 2.0", "raise RuntimeError('reference bug')")
    with pytest.raises(TaskError, match="reference bug"):
        evaluate(broken, _KERNEL + "\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return _launch(x)\n",
                 seed=0, config=FAST)


@pytest.mark.slow
def test_evaluate_restores_the_callers_tf32_settings():
    import torch

    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        grade("\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return _launch(x)\n")
        assert torch.backends.cuda.matmul.allow_tf32 is True
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


def test_a_candidate_cannot_kill_its_zygote():
    """A forked candidate's parent is the zygote, not the grader. Signalling it is refused (the audit
    refuses os.kill; where the kernel has Landlock scoping, so does the kernel): that candidate is
    flagged and the next candidate passes."""
    from drkernel.env.process.sandbox import start_method_default

    if start_method_default() != "zygote":
        pytest.skip("candidate processes are exec'd here (DRKERNEL_WORKER_START)")
    r = grade('''
import os, signal
class ModelNew(nn.Module):
    def forward(self, x):
        os.kill(os.getppid(), signal.SIGKILL)
        return _launch(x)
''')
    assert r.compiled and not r.passed and "forbidden_operation" in r.hack_reasons, r.error
    assert any("os.kill" in i["detail"] for i in r.details["integrity"]), r.details["integrity"]
    assert grade('''
class ModelNew(nn.Module):
    def forward(self, x):
        return _launch(x)
''').passed


@pytest.mark.parametrize("method", ["zygote", "exec"])
def test_both_start_methods_give_a_ready_worker_in_its_own_group(method):
    import os

    from drkernel.env.process.sandbox import CandidateProcess

    with CandidateProcess("cpu", start=method) as p:
        p.wait_ready(120)
        assert p.start_method == method and p.hello.pid == p.proc.pid == p.pgid
        assert os.getpgid(p.proc.pid) == p.proc.pid != os.getpgid(0)
    assert p.proc.poll() is not None  # closed: the group was killed and the exit seen


@pytest.mark.parametrize("method", ["zygote", "exec"])
def test_workers_run_the_graders_package_whatever_the_callers_directory(method, tmp_path, monkeypatch):
    """``python -m`` imports from the working directory first: a grader run from a directory that
    holds another drkernel (an older checkout) started workers from that one (an A/B run of two
    versions graded every candidate of the old arm with the new worker)."""
    from drkernel.env.process.sandbox import CandidateProcess

    (tmp_path / "drkernel").mkdir()
    (tmp_path / "drkernel" / "__init__.py").write_text("raise ImportError('the caller directory drkernel')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MALLOC_ARENA_MAX", "5")  # a start-time variable: a fresh zygote, started from here
    with CandidateProcess("cpu", start=method) as p:
        p.wait_ready(120)
        assert p.start_method == method  # a zygote that failed to start would have fallen back to exec


def test_the_worker_environment_keeps_the_working_directory_off_sys_path(tmp_path):
    """An exec'd worker starts in its work directory, which the candidate can write: with ``python
    -m``, a module the candidate left there would shadow one the harness imports later."""
    import subprocess
    import sys

    from drkernel.env.process.sandbox import worker_env

    out = subprocess.run([sys.executable, "-m", "site"], env=worker_env("cpu"), cwd=tmp_path,
                         capture_output=True, text=True, timeout=60).stdout
    assert "sys.path = [" in out and str(tmp_path) not in out, out


def test_worker_cuda_connections_reach_gpu_workers_only(monkeypatch):
    """DRKERNEL_WORKER_CUDA_CONNECTIONS sets CUDA_DEVICE_MAX_CONNECTIONS in a GPU worker's
    environment (not the grader's own, not a CPU worker's); unset, CUDA keeps its default, even
    when the grader's process has a value of its own (verl sets one for Megatron); a value CUDA
    would not take is refused by name."""
    from drkernel.env.process.sandbox import worker_env
    from drkernel.env.result import EnvironmentFailure

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("CUDA_DEVICE_MAX_CONNECTIONS", raising=False)
    monkeypatch.delenv("DRKERNEL_WORKER_CUDA_CONNECTIONS", raising=False)
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in worker_env("cuda:1")
    monkeypatch.setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1")  # the trainer's, not the candidates'
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in worker_env("cuda:1")
    monkeypatch.delenv("CUDA_DEVICE_MAX_CONNECTIONS")
    monkeypatch.setenv("DRKERNEL_WORKER_CUDA_CONNECTIONS", " 1 ")
    env = worker_env("cuda:1")
    assert env["CUDA_DEVICE_MAX_CONNECTIONS"] == "1" and env["CUDA_VISIBLE_DEVICES"] == "1"
    assert not any(k.startswith("DRKERNEL_WORKER_CUDA") for k in env)  # the grader's knob stays the grader's
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in worker_env("cpu")
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in os.environ
    for bad in ("0", "33", "two", "1.5"):
        monkeypatch.setenv("DRKERNEL_WORKER_CUDA_CONNECTIONS", bad)
        with pytest.raises(EnvironmentFailure, match="DRKERNEL_WORKER_CUDA_CONNECTIONS must be an integer from 1 to 32"):
            worker_env("cuda:0")


def test_unknown_start_method_is_named(monkeypatch):
    from drkernel.env.result import EnvironmentFailure
    from drkernel.env.process.sandbox import start_method_default

    monkeypatch.setenv("DRKERNEL_WORKER_START", "spawn")
    with pytest.raises(EnvironmentFailure, match="DRKERNEL_WORKER_START must be one of"):
        start_method_default()


def test_one_zygote_per_device_replaced_only_when_a_start_time_variable_changes(monkeypatch):
    """Variables such as pytest's PYTEST_CURRENT_TEST change all the time: they reach each child,
    and must not start a zygote each (which once leaked one per evaluation). A variable read at
    start-up (OMP_NUM_THREADS) replaces the device's zygote and stops the old one."""
    from drkernel.env.process import zygote
    from drkernel.env.process.sandbox import CandidateProcess

    def start() -> "zygote.Zygote":
        with CandidateProcess("cpu", start="zygote") as p:
            p.wait_ready(120)
            assert p.start_method == "zygote"
        (_, z), = [v for k, v in zygote._zygotes.items() if k.startswith("cpu:")]
        return z

    monkeypatch.setenv("DRKERNEL_TEST_VOLATILE", "")  # stripped from worker envs: a no-op
    monkeypatch.setenv("SOME_VOLATILE_VAR", "1")
    first = start()
    monkeypatch.setenv("SOME_VOLATILE_VAR", "2")
    assert start() is first and first.alive
    monkeypatch.setenv("MALLOC_ARENA_MAX", "3")  # a start-time variable (OMP_NUM_THREADS is pinned to 1)
    second = start()
    assert second is not first and second.alive
    first.proc.wait(timeout=10)  # the old zygote was stopped


def test_a_zygote_answers_what_it_cannot_serve_drops_late_replies_and_goes_on(tmp_path):
    """A request the zygote cannot serve gets an error reply (the zygote stays up for the others); a
    reply to a request the grader gave up on is dropped, not taken as the next request's; a compiler
    whose job is unusable just exits."""
    import time

    from drkernel.env.process import zygote
    from drkernel.env.process.sandbox import worker_env

    z = zygote.Zygote(worker_env("cpu"))
    try:
        with pytest.raises(RuntimeError, match="unexpected number of file descriptors"):
            z._fork({"workdir": str(tmp_path)}, [], 10.0)  # a worker needs its descriptors
        with z._lock:
            z._sock.sendall(b'{"id": -5, "workdir": \n')  # cut short: unreadable
            deadline = time.monotonic() + 10
            while not z._replies and time.monotonic() < deadline:
                time.sleep(0.01)
            assert "unreadable request" in z._replies[0]["error"] and z._replies[0]["id"] is None
            z._replies[0]["id"] = -5  # (as an answer to an earlier request would carry)
        child = z.spawn_compiler(str(tmp_path), {"not": "a job"})  # its reply comes after the stale one
        assert child.wait(30) == 70 and z.alive and not z._replies
    finally:
        z.close()


def test_a_child_whose_request_was_given_up_on_is_killed_when_its_reply_comes(tmp_path):
    """A reply that comes after the grader stopped waiting names a child nobody tracks: it is killed
    as the reply arrives (not at some later request), and its end is not mistaken for a later
    child's."""
    import json
    import select
    import socket
    import time

    from drkernel.env.process import zygote
    from drkernel.env.process.sandbox import worker_env

    z = zygote.Zygote(worker_env("cpu"))
    ours, theirs = socket.socketpair()
    r, w = os.pipe()
    try:
        with z._lock:
            z._rid += 1
            z._abandoned.add(z._rid)  # as a _reply that timed out leaves it
            msg = json.dumps({"workdir": str(tmp_path), "env": worker_env("cpu"), "id": z._rid}).encode() + b"\n"
            socket.send_fds(z._sock, [msg], [theirs.fileno(), w])
        theirs.close()
        os.close(w)
        # a worker left alone would wait for requests forever; killed, its output pipe closes
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and select.select([r], [], [], 1.0)[0]:
            if not os.read(r, 1 << 16):
                break
        assert time.monotonic() < deadline, "the late child was not killed"
        while z._dropped and time.monotonic() < deadline:  # its exit report arrives and is discarded
            time.sleep(0.02)
        assert not z._dropped and not z._early_exits and not z._replies and not z._abandoned
    finally:
        os.close(r)
        ours.close()
        z.close()


def test_a_forked_worker_sees_the_environment_of_its_own_request(monkeypatch):
    body = '''
import os
from pathlib import Path
class ModelNew(nn.Module):
    def forward(self, x):
        assert os.environ.get("DRK_SANDBOX_PROBE") == "%s", os.environ.get("DRK_SANDBOX_PROBE")
        return _launch(x)
'''
    for value in ("a", "b"):
        monkeypatch.setenv("DRK_SANDBOX_PROBE", value)
        r = grade(body % value)
        assert r.correct, r.error  # (reading the environment is flagged as a hack; it ran, and saw it)


def test_an_unknown_start_argument_is_named():
    from drkernel.env.process.sandbox import CandidateProcess

    with pytest.raises(ValueError, match="start must be one of"):
        CandidateProcess("cpu", start="spawn")


def test_cpu_time_of_other_threads_is_read_from_proc():
    """The grader's other-threads check reads the scheduler's accounting of each thread."""
    import threading
    import time as _time

    import os

    from drkernel.env.process.procfs import cpu_seconds, thread_run_ns

    pid = os.getpid()
    before = thread_run_ns(pid)
    box = {}

    def burn():
        box["tid"] = threading.get_native_id()
        end = _time.thread_time() + 0.08
        while _time.thread_time() < end:
            pass
        box["after"] = thread_run_ns(pid).get(box["tid"], 0)  # read while the thread is alive

    t = threading.Thread(target=burn)
    t.start()
    t.join()
    assert box["tid"] != pid and box["tid"] not in before
    assert box["after"] >= 70e6  # ns on a CPU, to the nanosecond
    total, main = cpu_seconds(pid)
    assert total >= main >= 0  # the process figure includes every thread, exited ones too
    assert cpu_seconds(2 ** 22 + 12345) is None and thread_run_ns(2 ** 22 + 12345) == {}


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return "gone"


def test_a_discarded_worker_is_killed_and_reaped_before_the_pool_closes():
    """The grader's pool hands a finished evaluation's process to a background reaper: the
    candidate's group is sent SIGKILL before ``discard`` returns, and ``close`` waits until every
    discarded process has ended and its directory is gone."""
    import signal
    import time

    from drkernel.env.process.sandbox import WarmPool

    pool = WarmPool(spares=0)
    proc = pool.acquire("cpu", 120)
    pid, workdir = proc.proc.pid, proc.workdir
    pool.discard(proc)
    deadline = time.monotonic() + 5  # (SIGKILL was sent; the kernel ends the process within ms)
    while _state(pid) not in ("Z", "X", "gone") and time.monotonic() < deadline:
        time.sleep(0.005)
    assert _state(pid) in ("Z", "X", "gone")
    pool.discard(proc)  # a second discard is a no-op
    pool.close()
    assert pool.reaping == 0
    assert proc.proc.returncode == -signal.SIGKILL
    assert not workdir.exists()


@pytest.mark.parametrize("release", ["discard", "close"])
def test_a_cancelled_worker_is_still_reaped_when_released(release):
    """Cancellation kills the group (``kill``: the request in flight fails as ``cancelled``); the
    evaluation then releases the process, which must still end it and remove its directory and
    stage (a review found ``kill`` shadowed by the closing half, so a cancelled worker's directory,
    stage and connection leaked)."""
    from drkernel.env.evaluation import CancelToken
    from drkernel.env.process.sandbox import WarmPool

    pool = WarmPool(spares=0)
    try:
        proc = pool.acquire("cpu", 120)
        token = CancelToken()
        token.on_cancel(proc.kill)  # as Evaluation._acquire does
        token.cancel()
        assert proc.failure is not None and proc.failure.kind == "cancelled"
        (pool.discard if release == "discard" else type(proc).close)(proc)
    finally:
        pool.close()
    assert proc.proc.returncode is not None
    assert proc.conn.closed
    assert not proc.workdir.exists()


def test_a_load_in_two_parts_must_be_one_load(tmp_path):
    """The grader loads a candidate in two requests (LoadRequest.part: ``prepare`` outside the GPU
    gate, then ``candidate``). The worker takes the second half only right after its own first
    half, with every other field the same, and never a second load."""
    import dataclasses
    import shutil

    from drkernel.env.protocol import LoadRequest
    from drkernel.env.process.sandbox import CandidateProcess

    fixtures = Path(__file__).parent / "fixtures"
    task = (fixtures / "tasks" / "relu.py").read_text()

    def load(p, **kw):
        cand = p.workdir / "candidate.py"
        shutil.copy(fixtures / "candidates" / "honest" / "relu_basic.py", cand)
        base = LoadRequest(role="candidate", task_source=task, task_name="relu", device="cpu", task_size="small",
                           entry_point="Model", init_seed=7, candidate_file=str(cand), launch_budget_ms=0.0)
        return base, dataclasses.replace(base, **kw)

    with CandidateProcess("cpu") as p:
        p.wait_ready(120)
        base, candidate = load(p, part="candidate")
        r = p.request(candidate, 60)  # no prepare before it
        assert not r.ok and "prepare part" in r.body.error
    with CandidateProcess("cpu") as p:
        p.wait_ready(120)
        base, _ = load(p)
        assert p.request(dataclasses.replace(base, part="prepare"), 60).ok
        r = p.request(dataclasses.replace(base, part="candidate", init_seed=8), 60)  # not the same load
        assert not r.ok and "prepare part" in r.body.error
    with CandidateProcess("cpu") as p:
        p.wait_ready(120)
        base, _ = load(p)
        assert p.request(dataclasses.replace(base, part="prepare"), 60).ok
        assert p.request(dataclasses.replace(base, part="candidate"), 60).ok
        r = p.request(base, 60)
        assert not r.ok and "second load" in r.body.error
