"""What the grader reads of a process from ``/proc``, and how it ends a process group.

Memory (resident and proportional), CPU seconds per process and per thread, the fields of
``/proc/PID/stat``, the members of a process group and SIGKILL to all of them: read and done from
the grader, outside the candidate's reach. Shared by the candidate's process
(:mod:`drkernel.env.process.sandbox`), the zygote's children (:mod:`drkernel.env.process.zygote`) and the compiler
(:mod:`drkernel.env.process.precompile`), so none of them imports another for it. Standard library only.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any


def _status_kb(pid: int, name: str, key: str) -> int:
    """The ``key:`` line of ``/proc/PID/<name>`` in bytes (its value is in kB; 0 when absent)."""
    try:
        with open(f"/proc/{pid}/{name}") as fh:
            for line in fh:
                if line.startswith(key):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _rss_bytes(pid: int) -> int:
    return _status_kb(pid, "status", "VmRSS:")


def cpu_seconds(pid: int) -> tuple[float, float] | None:
    """``(process, main thread)`` CPU seconds (user + system) of ``pid``, read from ``/proc`` by the
    grader, outside the candidate's reach. The process figure includes every thread, exited ones
    too; the main thread's (``/proc/pid/task/pid``) is the one that runs the harness and the
    candidate's calls. Their difference is work on other threads: native thread pools (a
    TorchScript ``fork``, an OpenMP or BLAS pool), threads started from C, anything that computes
    beside the calls or outlives them. None when the process is gone."""
    tick = float(os.sysconf("SC_CLK_TCK"))

    def read(path: str) -> float:
        with open(path) as fh:
            fields = fh.read().rsplit(")", 1)[1].split()  # after "(comm)", which may hold spaces
        return (int(fields[11]) + int(fields[12])) / tick  # utime, stime (fields 14, 15)

    try:
        return read(f"/proc/{pid}/stat"), read(f"/proc/{pid}/task/{pid}/stat")
    except (OSError, ValueError, IndexError):
        return None


def thread_run_ns(pid: int) -> dict[int, int]:
    """Nanoseconds on a CPU of every live thread of ``pid`` (``/proc/pid/task/*/schedstat``: the
    scheduler's own accounting, exact to the nanosecond where ``stat`` counts 10 ms ticks)."""
    out: dict[int, int] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as fh:
                out[int(tid)] = int(fh.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return out


def proc_stat(pid: int | str) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after ``pid (comm)``: state, ppid, pgrp, ... (None: gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _group_pids(pgid: int, max_age_s: float = 0.0) -> list[int]:
    """The processes of group ``pgid``, from a scan of /proc at most ``max_age_s`` old: every
    candidate's memory watcher asks once a second, and with 24 of them (16 spares, 8 evaluations)
    their own scans were a quarter of the grader's CPU time on an H100 machine (py-spy)."""
    with _GROUPS_LOCK:
        now = time.monotonic()
        if max_age_s <= 0 or now - _GROUPS["at"] > max_age_s:
            groups: dict[int, list[int]] = {}
            try:
                for entry in os.listdir("/proc"):
                    if entry.isdigit():
                        fields = proc_stat(entry)
                        try:
                            groups.setdefault(int(fields[2]), []).append(int(entry))
                        except (TypeError, ValueError, IndexError):
                            continue
            except OSError:
                pass
            _GROUPS["at"], _GROUPS["map"] = now, groups
        return list(_GROUPS["map"].get(pgid, ()))


def _pss_bytes(pid: int) -> int:
    """Proportional set size: resident pages, each shared page divided among its sharers."""
    return _status_kb(pid, "smaps_rollup", "Pss:") or _rss_bytes(pid)


def group_pss_bytes(pgid: int) -> int:
    """Proportional resident bytes of the processes of group ``pgid`` (the member list at most
    0.5 s old)."""
    return sum(_pss_bytes(p) for p in set(_group_pids(pgid, max_age_s=0.5)) | {pgid})


def kill_group(pgid: int) -> None:
    """SIGKILL to process group ``pgid`` and to any member a fresh scan of /proc still finds."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for pid in _group_pids(pgid):
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


_GROUPS: dict[str, Any] = {"at": 0.0, "map": {}}
_GROUPS_LOCK = threading.Lock()
