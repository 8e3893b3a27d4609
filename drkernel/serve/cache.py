"""The result cache: a resubmitted kernel (frequent in RL: a policy repeats itself within and across
groups) costs nothing, and a cached verdict is one the grader would give again.

The key is ``sha256`` of the canonical JSON of::

    (task source, entry point, candidate source, seed, resolved EvalConfig, grader version, runtime)

The *resolved* config (the grader's base config with the request's ``options`` applied) is hashed,
not the options as sent, so ``{}`` and ``{"device": "cpu"}`` on a CPU grader share an entry, while
the same options on a grader with another base config do not. The grader version is
``drkernel.__version__`` plus a digest of the environment's source files (everything under
``drkernel/env`` except this service), so a changed check, tolerance or timing protocol can never
serve a stale verdict. The runtime is what else decides a verdict (:func:`runtime_identity`): the
torch, Triton and CUDA versions and the device model (an H100 and an H200 never share an entry).
``seed=None`` (hidden, unpredictable inputs) is part of the key like any other value: a
resubmission gets the verdict drawn on the first submission's fresh inputs.

**What may be reused** (:func:`transient_reason`): only a verdict on the candidate. Unusable tasks
and environment failures are never verdicts; a verdict decided by a failure of the candidate's
process is reused only when that failure is the candidate's own:

==============================  ==========================================================
``details["failure_kind"]``     reused?
==============================  ==========================================================
absent (passed, wrong, hacked,  yes: the kernel's behaviour
compile error)
``crash`` with an exit code or  yes: the kernel ended its process (``os._exit``, SIGSEGV,
a signal of its own             SIGABRT, ...)
``memory``, ``flood``           yes: the kernel's allocations and output
``forged``                      yes: a message on the harness's channel without its nonce
``crash`` by SIGKILL/SIGTERM,   no (``worker_died``): something outside killed the worker
or with no exit status          (the OOM killer, an operator) or its status was lost
``timeout``                     no: a deadline also passes when the machine is loaded
``protocol``                    no: a broken reply cannot be pinned on the kernel
``cancelled``, any other kind   no
==============================  ==========================================================
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

from drkernel.env.grader import GraderBase, Options
from drkernel.env.result import EvalResult
from drkernel.env.tasks.task import Task
from drkernel.serve.codec import decode_result, encode_result
from drkernel.serve.jobs import open_db

#: ``failure_kind``s that are the candidate's own doing: verdicts ending in them are reused.
CANDIDATE_FAILURE_KINDS = frozenset({"crash", "memory", "flood", "forged"})
#: Signals that end a worker from outside (the OOM killer, an operator, a supervisor).
EXTERNAL_SIGNALS = frozenset({"SIGKILL", "SIGTERM"})
# the sandbox's crash message ends its first line with "(exit code N)" or "(killed by SIGX)"
_EXIT_STATUS = re.compile(r"\((?:exit code -?\d+|killed by (\w+))\)")


@functools.lru_cache(maxsize=1)
def grader_version() -> str:
    """``<drkernel version>+<12 hex digits of the environment's sources>``."""
    import drkernel
    import drkernel.env as env

    root = Path(env.__file__).parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        digest.update(rel.encode() + b"\0" + path.read_bytes() + b"\0")
    return f"{drkernel.__version__}+{digest.hexdigest()[:12]}"


def runtime_identity(devices: Sequence[str] = ("cpu",)) -> dict[str, str | None]:
    """The torch, Triton and CUDA versions and the model of ``devices`` (``"cpu"``, ``"cuda"``:
    every visible GPU, or ``"cuda:N"``): distinct models are joined with `` + ``."""
    return dict(_runtime_identity(tuple(devices)))


@functools.lru_cache(maxsize=8)
def _runtime_identity(devices: tuple[str, ...]) -> tuple[tuple[str, str | None], ...]:
    import torch

    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    names = set()
    for device in devices:
        if device == "cpu":
            names.add("cpu")
        elif device == "cuda":
            names.update(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
        else:
            names.add(torch.cuda.get_device_name(torch.device(device)))
    return (("torch", torch.__version__), ("triton", triton_version), ("cuda", torch.version.cuda),
            ("device", " + ".join(sorted(names)) or "none"))


def transient_reason(result: EvalResult | dict[str, Any]) -> str | None:
    """Why ``result`` must not be reused (``"timeout"``, ``"worker_died"``, ``"protocol"``, ...),
    or None when it is a verdict on the candidate (see the module docstring's table)."""
    data = result.to_dict() if isinstance(result, EvalResult) else result
    kind = (data.get("details") or {}).get("failure_kind")
    if kind is None:
        return None
    if kind not in CANDIDATE_FAILURE_KINDS:
        return str(kind)
    if kind != "crash":
        return None
    message = ((data.get("error") or {}).get("message") or "").split("\n", 1)[0]
    status = _EXIT_STATUS.findall(message)
    if not status or status[-1] in EXTERNAL_SIGNALS:
        return "worker_died"
    return None


def config_dict(config: Any) -> dict[str, Any]:
    """An EvalConfig as plain JSON values (tuples become lists)."""
    return json.loads(json.dumps(asdict(config)))


def cache_key(task_code: str, entry_point: str, candidate_code: str, seed: int | None,
              config: dict[str, Any], version: str | None = None,
              runtime: dict[str, Any] | None = None) -> str:
    """The cache key of one evaluation (see the module docstring). ``runtime`` defaults to
    :func:`runtime_identity` of ``config["device"]`` (``"cpu"`` when the config has none)."""
    if runtime is None:
        runtime = runtime_identity((config.get("device") or "cpu",))
    payload = {"task": task_code, "entry_point": entry_point, "candidate": candidate_code, "seed": seed,
               "config": config, "version": version or grader_version(), "runtime": runtime}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


class ResultCache:
    """Verdicts by key in SQLite (``path=":memory:"`` for a process-local cache), stored as
    standard JSON (:func:`~drkernel.serve.codec.encode_result`).

    ``max_entries`` bounds the table: past it, the least recently used tenth is dropped. Only
    reusable verdicts go in: :meth:`put` ignores a result :func:`transient_reason` rejects, and
    :meth:`get` misses on one (an entry written under an older rule).
    """

    def __init__(self, path: str | Path = ":memory:", *, max_entries: int = 100_000):
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        self.path = str(path)
        self.max_entries = max_entries
        self.hits = 0
        self.misses = 0
        self._db = open_db(self.path)
        self._lock = threading.Lock()
        with self._lock:
            self._db.execute("CREATE TABLE IF NOT EXISTS result_cache "
                             "(key TEXT PRIMARY KEY, result TEXT NOT NULL, used REAL NOT NULL)")

    def get(self, key: str) -> dict[str, Any] | None:
        """The stored result (encoded: decode it before ``EvalResult.from_dict``), or None."""
        with self._lock:
            row = self._db.execute("SELECT result FROM result_cache WHERE key = ?", (key,)).fetchone()
            result = encode_result(json.loads(row[0])) if row is not None else None
            if result is None or transient_reason(result) is not None:
                self.misses += 1
                return None
            self.hits += 1
            self._db.execute("UPDATE result_cache SET used = ? WHERE key = ?", (time.time(), key))
        return result

    def put(self, key: str, result: dict[str, Any]) -> bool:
        """Store ``result`` (an ``EvalResult.to_dict()``, encoded or not) under ``key``. False,
        and nothing stored, when it is not a reusable verdict."""
        if transient_reason(result) is not None:
            return False
        text = json.dumps(encode_result(result), allow_nan=False)
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO result_cache (key, result, used) VALUES (?, ?, ?)",
                             (key, text, time.time()))
            (n,) = self._db.execute("SELECT COUNT(*) FROM result_cache").fetchone()
            if n > self.max_entries:
                drop = n - self.max_entries + max(1, self.max_entries // 10)
                self._db.execute("DELETE FROM result_cache WHERE key IN "
                                 "(SELECT key FROM result_cache ORDER BY used LIMIT ?)", (drop,))
        return True

    def clear(self) -> int:
        """Delete every entry; returns how many there were."""
        with self._lock:
            return self._db.execute("DELETE FROM result_cache").rowcount

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM result_cache").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._db.close()


class CachedGrader(GraderBase):
    """Any :class:`~drkernel.env.grader.Grader` behind a :class:`ResultCache`.

    ``identity`` stands for the wrapped grader's base configuration in the key (pass the EvalConfig
    it was built with, or anything JSON-serialisable that changes when its verdicts would): the
    request's ``options`` are hashed on top of it, and so is ``runtime`` (default:
    :func:`runtime_identity` of the identity's ``device``, else of the CPU). Transient outcomes are
    returned, never cached (:func:`transient_reason`).
    """

    def __init__(self, grader: Any, cache: ResultCache | None = None, *, identity: Any = None,
                 runtime: dict[str, Any] | None = None):
        super().__init__(grader.capacity)
        self.grader = grader
        self.cache = cache if cache is not None else ResultCache()
        self.identity = config_dict(identity) if hasattr(identity, "__dataclass_fields__") else identity
        if runtime is None:
            device = self.identity.get("device") if isinstance(self.identity, dict) else None
            runtime = runtime_identity((device or "cpu",))
        self.runtime = runtime

    def key(self, task: Task, source: str, seed: int | None, options: Options | None) -> str:
        config = {"base": self.identity, "options": dict(options or {})}
        return cache_key(task.source, task.entry_point, source, seed, config, runtime=self.runtime)

    def grade(self, task: Task, source: str, *, seed: int | None = None,
              options: Options | None = None) -> EvalResult:
        key, hit = self._lookup(task, source, seed, options)
        if hit is not None:
            return hit
        return self._store(key, self.grader.grade(task, source, seed=seed, options=options))

    async def agrade(self, task: Task, source: str, *, seed: int | None = None,
                     options: Options | None = None) -> EvalResult:
        key, hit = self._lookup(task, source, seed, options)
        if hit is not None:
            return hit
        return self._store(key, await self.grader.agrade(task, source, seed=seed, options=options))

    def _lookup(self, task: Task, source: str, seed: int | None,
                options: Options | None) -> tuple[str, EvalResult | None]:
        """The request's key and its cached result, if any (the checks first)."""
        self._check(task, source, options)
        key = self.key(task, source, seed, options)
        hit = self.cache.get(key)
        return key, (EvalResult.from_dict(decode_result(hit)) if hit is not None else None)

    def _store(self, key: str, result: EvalResult) -> EvalResult:
        """Keep a fresh result under ``key`` (:meth:`ResultCache.put` skips transient ones); return it."""
        self.cache.put(key, result.to_dict())
        return result

    def close(self) -> None:
        super().close()
        self.grader.close()


__all__ = ["ResultCache", "CachedGrader", "cache_key", "grader_version", "config_dict", "runtime_identity",
           "transient_reason", "CANDIDATE_FAILURE_KINDS", "EXTERNAL_SIGNALS"]
