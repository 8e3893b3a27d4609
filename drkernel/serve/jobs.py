"""The job store: every accepted submission is a row in a small SQLite file, so a restarted server
answers the jobs it accepted before it died.

A job moves ``queued -> running -> done | failed``. Two rules give exactly-once answers:

* **Idempotent submission.** A job's id is chosen by the client (``RemoteGrader`` draws a UUID per
  ``grade`` call and keeps it across retries) or by the server. Submitting an id again returns the
  existing job; it never creates a second one. The same id with a different request is a conflict.
* **First completion wins.** ``finish``/``fail`` only move a job that is not yet terminal
  (``UPDATE ... WHERE state IN ('queued', 'running')``), so a job evaluated twice (its worker died
  after grading but before the answer was read, or the server restarted mid-evaluation) still has
  exactly one stored answer, and every reader sees that one.

Results are stored as standard JSON (:mod:`drkernel.serve.codec`: NaN and infinities become
strings listed under ``"nonfinite"``), so every stored answer can be sent as it is.

Execution itself is at-least-once (a job running when the server died runs again after the
restart); the answer is exactly-once. Writes use SQLite's WAL journal: a committed row survives the
process being killed.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from drkernel.serve.codec import encode_result

QUEUED, RUNNING, DONE, FAILED = "queued", "running", "done", "failed"
TERMINAL = (DONE, FAILED)
STATES = (QUEUED, RUNNING, DONE, FAILED)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id        TEXT PRIMARY KEY,
    key       TEXT NOT NULL,
    state     TEXT NOT NULL,
    request   TEXT NOT NULL,
    result    TEXT,
    error     TEXT,
    attempts  INTEGER NOT NULL DEFAULT 0,
    cached    INTEGER NOT NULL DEFAULT 0,
    created   REAL NOT NULL,
    finished  REAL
);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state, created);
"""


class JobConflict(ValueError):
    """A job id was submitted again with a different request."""


@dataclass
class Job:
    """One submission and, once it is terminal, its single answer."""

    id: str
    key: str
    """Hash of (task, candidate, seed, resolved config, grader version): the result-cache key."""
    state: str
    request: dict[str, Any]
    result: dict[str, Any] | None = None
    """The EvalResult as a dict (``state == "done"``), encoded by :func:`~drkernel.serve.codec.encode_result`."""
    error: dict[str, Any] | None = None
    """``{"status": 422|503, "type": "task_error"|"environment_failure", "message": ...}`` (``failed``)."""
    attempts: int = 0
    """How many times an evaluation of this job was started (restarts make it more than 1)."""
    cached: bool = False
    """The answer came from the result cache (or a concurrent identical job), not a new evaluation."""
    created: float = field(default_factory=time.time)
    finished: float | None = None

    @property
    def terminal(self) -> bool:
        return self.state in TERMINAL

    def to_dict(self) -> dict[str, Any]:
        """The public view (``GET /v1/jobs/{id}``); the request itself is not echoed back."""
        return {"id": self.id, "state": self.state, "result": self.result, "error": self.error,
                "attempts": self.attempts, "cached": self.cached, "created": self.created,
                "finished": self.finished}


def open_db(path: str, *, synchronous_normal: bool = False) -> sqlite3.Connection:
    """One SQLite connection shared by a store's threads (guarded by the store's lock): autocommit,
    a 30 s busy timeout, the parent folder created, and WAL for a file database (readers never
    block the writer). ``synchronous_normal`` keeps commits durable across a killed process (not
    across a power loss) at far less cost than FULL."""
    if path != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=30)
    if path != ":memory:":
        db.execute("PRAGMA journal_mode=WAL")
        if synchronous_normal:
            db.execute("PRAGMA synchronous=NORMAL")
    return db


class JobStore:
    """SQLite-backed jobs. ``path=":memory:"`` keeps them in memory (tests; no restart survival).

    ``max_answered`` bounds the table: past it, the answered jobs finished longest ago are deleted
    (a tenth at a time, checked every 64 answers). Unanswered jobs are never deleted. A client that
    asks for a deleted job gets 404 and resubmits it (``RemoteGrader`` does), so the bound costs at
    most a second evaluation, never a second answer.
    """

    def __init__(self, path: str | Path = ":memory:", *, max_answered: int = 100_000):
        if max_answered < 1:
            raise ValueError(f"max_answered must be >= 1, got {max_answered}")
        self.path = str(path)
        self.max_answered = max_answered
        self._db = open_db(self.path, synchronous_normal=True)
        self._lock = threading.Lock()
        self._answers_since_prune = 0
        with self._lock:
            self._db.executescript(_SCHEMA)
            self._prune()

    # -- writes ---------------------------------------------------------------------------------
    def submit(self, job_id: str, key: str, request: dict[str, Any]) -> tuple[Job, bool]:
        """Insert a queued job, or return the existing one with that id. Returns ``(job, created)``.

        Raises :class:`JobConflict` when ``job_id`` exists with a different request (another key).
        """
        now = time.time()
        with self._lock:
            cur = self._db.execute(
                "INSERT OR IGNORE INTO jobs (id, key, state, request, created) VALUES (?, ?, ?, ?, ?)",
                (job_id, key, QUEUED, json.dumps(request), now))
            created = cur.rowcount == 1
            job = self._get(job_id)
        assert job is not None
        if not created and job.key != key:
            raise JobConflict(f"job id {job_id!r} already exists with a different request "
                              f"(task, candidate, seed or options differ); use a new id")
        return job, created

    def requeue(self, job_id: str) -> bool:
        """Put a job failed by an environment failure back in the queue (a client retrying it)."""
        with self._lock:
            cur = self._db.execute(
                "UPDATE jobs SET state = ?, error = NULL, finished = NULL WHERE id = ? AND state = ?",
                (QUEUED, job_id, FAILED))
            return cur.rowcount == 1

    def rekey(self, job_id: str, key: str) -> None:
        """Give a job a new cache key (a restarted server whose grader version or runtime changed)."""
        with self._lock:
            self._db.execute("UPDATE jobs SET key = ? WHERE id = ?", (key, job_id))

    def mark_running(self, job_id: str) -> bool:
        """``queued -> running`` (and count the attempt). False when the job is already terminal."""
        with self._lock:
            cur = self._db.execute(
                "UPDATE jobs SET state = ?, attempts = attempts + 1 WHERE id = ? AND state IN (?, ?)",
                (RUNNING, job_id, QUEUED, RUNNING))
            return cur.rowcount == 1

    def finish(self, job_id: str, result: dict[str, Any], *, cached: bool = False) -> bool:
        """Store the answer if the job has none yet. True when this call stored it."""
        text = json.dumps(encode_result(result), allow_nan=False)  # standard JSON, or a ValueError here
        with self._lock:
            cur = self._db.execute(
                "UPDATE jobs SET state = ?, result = ?, cached = ?, finished = ? "
                "WHERE id = ? AND state IN (?, ?)",
                (DONE, text, int(cached), time.time(), job_id, QUEUED, RUNNING))
            return self._answered(cur.rowcount == 1)

    def fail(self, job_id: str, *, status: int, kind: str, message: str) -> bool:
        """Store a failure (unusable task, environment failure) if the job has no answer yet."""
        error = {"status": status, "type": kind, "message": message}
        with self._lock:
            cur = self._db.execute(
                "UPDATE jobs SET state = ?, error = ?, finished = ? WHERE id = ? AND state IN (?, ?)",
                (FAILED, json.dumps(error), time.time(), job_id, QUEUED, RUNNING))
            return self._answered(cur.rowcount == 1)

    def _answered(self, stored: bool) -> bool:
        """Count an answer; every 64, delete the oldest answered jobs past ``max_answered``."""
        if stored:
            self._answers_since_prune += 1
            if self._answers_since_prune >= 64:
                self._prune()
        return stored

    def _prune(self) -> None:
        self._answers_since_prune = 0
        (n,) = self._db.execute("SELECT COUNT(*) FROM jobs WHERE state IN (?, ?)", TERMINAL).fetchone()
        if n > self.max_answered:
            drop = n - self.max_answered + self.max_answered // 10
            self._db.execute("DELETE FROM jobs WHERE id IN (SELECT id FROM jobs WHERE state IN (?, ?) "
                             "ORDER BY finished LIMIT ?)", (*TERMINAL, drop))

    # -- reads ----------------------------------------------------------------------------------
    def get(self, job_id: str) -> Job | None:
        with self._lock:
            return self._get(job_id)

    def unfinished(self) -> list[Job]:
        """Queued and running jobs, oldest first: what a restarted server must still answer."""
        with self._lock:
            rows = self._db.execute("SELECT * FROM jobs WHERE state IN (?, ?) ORDER BY created",
                                    (QUEUED, RUNNING)).fetchall()
        return [self._row(r) for r in rows]

    def counts(self) -> dict[str, int]:
        with self._lock:
            rows = self._db.execute("SELECT state, COUNT(*) FROM jobs GROUP BY state").fetchall()
        out = dict.fromkeys(STATES, 0)
        out.update({state: n for state, n in rows})
        return out

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _get(self, job_id: str) -> Job | None:
        row = self._db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
        return self._row(row) if row else None

    @staticmethod
    def _row(row: tuple) -> Job:
        job_id, key, state, request, result, error, attempts, cached, created, finished = row
        # encode_result again: rows written before results were encoded hold Python's NaN tokens
        return Job(id=job_id, key=key, state=state, request=json.loads(request),
                   result=encode_result(json.loads(result)) if result else None,
                   error=json.loads(error) if error else None,
                   attempts=attempts, cached=bool(cached), created=created, finished=finished)


__all__ = ["Job", "JobStore", "JobConflict", "QUEUED", "RUNNING", "DONE", "FAILED", "STATES", "TERMINAL"]
