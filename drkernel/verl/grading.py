"""Graders for verl's agent-loop workers, chosen by ``drkernel.grader.kind`` (local | node | ray | http).

One grader per worker process, built on first use and shared by every episode of that process
(agent-loop workers are long-lived Ray actors running many episodes concurrently on one event
loop). ``local``: a LocalGrader in the worker over every GPU it sees (each worker has its own);
``node``: one grading actor per GPU of the worker's node, shared by all the node's workers
(:meth:`~drkernel.serve.ray_pool.RayGrader.node_pool`); ``ray``: a pool of grading actors that ask
Ray for GPUs of their own; ``http``: drkernel's grading service. The Ray and HTTP graders live in
:mod:`drkernel.serve` and are imported only when chosen.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

__all__ = ["KINDS", "make_grader", "shared_grader", "prestart"]

KINDS = ("local", "node", "ray", "http")

_LOCK = threading.Lock()
_GRADERS: dict[str, Any] = {}


def make_grader(settings: Mapping[str, Any]) -> Any:
    """A new grader for the ``drkernel.grader`` settings (kind, device, capacity, url, num_actors, spares,
    profile, options)."""
    from drkernel.env.config import EvalConfig

    kind = settings.get("kind", "local")
    if kind not in KINDS:
        raise ValueError(f"drkernel.grader.kind must be one of {', '.join(KINDS)}, got {kind!r}")
    options = dict(settings.get("options") or {})
    if settings.get("profile") is not None:  # drkernel.grader.profile (None = EvalConfig's default, on)
        options = {"profile": bool(settings["profile"]), **options}
    config = EvalConfig(device=str(settings.get("device", "cuda"))).with_overrides(**options).validate()
    capacity = settings.get("capacity")
    spares = settings.get("spares")
    spares = None if spares is None else int(spares)
    if kind == "local":
        from drkernel.env.grader import LocalGrader

        return LocalGrader(config, capacity=capacity, spares=spares)
    if kind == "node":
        from drkernel.serve.ray_pool import RayGrader

        return RayGrader.node_pool(config, capacity_per_actor=int(capacity or 4), spares=spares)
    if kind == "ray":
        from drkernel.serve.ray_pool import RayGrader

        return RayGrader(config, num_actors=settings.get("num_actors"), spares=spares)
    else:  # http
        url = settings.get("url")
        if not url:
            raise ValueError("drkernel.grader.kind=http needs drkernel.grader.url")
        from drkernel.serve.remote import RemoteGrader

        return RemoteGrader(url, capacity=capacity)


def shared_grader(settings: Mapping[str, Any]) -> Any:
    """The process-wide grader for these settings (built once)."""
    key = repr(sorted((k, repr(v)) for k, v in settings.items()))
    with _LOCK:
        grader = _GRADERS.get(key)
        if grader is None:
            grader = _GRADERS[key] = make_grader(settings)
        return grader


def prestart(settings: Mapping[str, Any]) -> threading.Thread | None:
    """``kind=node``: create the node's grading actors now, in a background thread, so that their
    processes start and their warm processes with them while verl starts its agent-loop workers (the
    trainer calls this after vLLM's start: :meth:`drkernel.verl.trainer.DrKernelPPOTrainer.init`),
    not in step 1, where the first agent-loop worker created them and the first evaluations waited
    (step 1 took 84 s against 40 s steady on 4 x H200; not yet measured with this). The agent-loop workers
    attach to the same actors by name (:meth:`~drkernel.serve.ray_pool.RayGrader.node_pool`). Other
    kinds: None (a local grader belongs to its worker's process; ``ray`` and ``http`` are started
    elsewhere). A failure is printed, not raised: the workers then create the actors as before."""
    if settings.get("kind") != "node":
        return None

    def run() -> None:
        t0 = time.monotonic()
        try:
            shared_grader(settings)
            print(f"drkernel: the node's graders started ahead of step 1 ({time.monotonic() - t0:.1f} s)", flush=True)
        except Exception as exc:  # noqa: BLE001 - an optimisation; the workers retry on their own
            print(f"drkernel: starting the node's graders ahead failed ({type(exc).__name__}: {exc}); "
                  "the agent-loop workers will start them", flush=True)

    thread = threading.Thread(target=run, name="drkernel-grader-prestart", daemon=True)
    thread.start()
    return thread

