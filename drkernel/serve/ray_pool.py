"""``RayGrader``: a pool of Ray actors, one per GPU, behind the :class:`~drkernel.env.grader.Grader`
protocol.

    ray.init()                                      # or a cluster: ray.init(address="auto")
    grader = RayGrader(EvalConfig(device="cuda"))   # one actor per GPU of the cluster
    result = grader.grade(task, source, seed=0)     # or: await grader.agrade(...) from async code

* **Placement.** Each actor holds a :class:`~drkernel.env.grader.LocalGrader` (or what
  ``grader_factory`` builds) and asks Ray for ``num_gpus=1`` on CUDA (so Ray narrows
  ``CUDA_VISIBLE_DEVICES`` to its GPU) or ``num_cpus`` on CPU; ``resources={"kernel_gpu": 1}``
  pins actors to nodes that advertise a custom resource (grading GPUs apart from rollout GPUs).
* **Load balancing.** A call goes to the live actor with the fewest of this handle's calls in
  flight (ties broken at random); each actor runs up to ``capacity_per_actor`` calls at once.
* **Actor death.** Actors restart (``max_restarts``); a call whose actor died mid-evaluation is
  retried once on another actor, then raised as :class:`EnvironmentFailure` — never a verdict. Ray
  itself does not retry actor calls (``max_task_retries=0``), so no evaluation runs twice unseen.
* **Cancellation.** Cancelling an ``agrade`` cancels the actor call (``ray.cancel``); the actor's
  grader cancels the evaluation and its candidate processes end.
* **From other Ray workers.** A ``RayGrader`` pickles to its actor handles: pass it to a remote
  task or actor (verl's agent-loop workers) and call it there; only the handle that created the
  actors kills them on ``close()``. ``RayGrader.connect(name)`` attaches to a named pool.

Ray is imported here only.
"""

from __future__ import annotations

import asyncio
import os
import random
import threading
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, TypeVar

from drkernel.env.config import EvalConfig
from drkernel.env.grader import GraderBase, Options
from drkernel.env.result import EnvironmentFailure, EvalResult
from drkernel.env.tasks.task import Task, TaskError

GraderFactory = Callable[[EvalConfig, int], Any]
"""``factory(config, capacity) -> Grader``, run inside each actor (must be picklable)."""

_T = TypeVar("_T")


def _run_blocking(coro: Coroutine[Any, Any, _T]) -> _T:
    """Run ``coro`` to completion from synchronous code, on a private event loop; when this thread
    already runs a loop (a blocking call from async code), on a private thread's loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="RayGrader.grade") as pool:
        return pool.submit(asyncio.run, coro).result()


class GraderActor:
    """The actor class (wrapped with ``ray.remote`` at pool creation). Replies are plain dicts:
    ``{"result": {...}}``, ``{"task_error": msg}`` or ``{"environment_failure": msg}``."""

    def __init__(self, config: dict[str, Any], capacity: int, factory: GraderFactory | None,
                 spares: int | None = None):
        from drkernel.env.grader import LocalGrader

        cfg = EvalConfig().with_overrides(**config).validate()
        self.grader = (factory(cfg, capacity) if factory is not None
                       else LocalGrader(cfg, capacity=capacity, spares=spares))

    async def info(self) -> dict[str, Any]:
        import ray

        ctx = ray.get_runtime_context()
        return {"pid": os.getpid(), "node_id": ctx.get_node_id(), "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
                "capacity": self.grader.capacity, "spares": getattr(getattr(self.grader, "pool", None), "spares", None)}

    async def grade(self, task_source: str, task_name: str, entry_point: str, source: str, seed: int | None,
                    options: dict[str, Any]) -> dict[str, Any]:
        """An async actor method: ``ray.cancel`` of the call cancels ``agrade``, which ends the candidate."""
        task = Task.from_source(task_source, name=task_name, entry_point=entry_point)
        try:
            result = await self.grader.agrade(task, source, seed=seed, options=options)
            return {"result": result.to_dict()}
        except TaskError as exc:
            return {"task_error": str(exc)}
        except Exception as exc:  # noqa: BLE001 - EnvironmentFailure or a grader bug: never a verdict
            return {"environment_failure": f"{type(exc).__name__}: {exc}"}


def _started(actors: list[Any], timeout_s: float, *, kill: bool) -> list[dict[str, Any]]:
    """Every actor's ``info()`` once all are up; an actor that cannot start within ``timeout_s`` is
    an :class:`EnvironmentFailure` (with ``kill``, the actors are killed first)."""
    import ray

    try:
        return ray.get([a.info.remote() for a in actors], timeout=timeout_s)
    except Exception as exc:  # noqa: BLE001 - an actor that cannot start is an environment failure
        if kill:
            for a in actors:
                ray.kill(a)
        raise EnvironmentFailure(f"grading actors did not start within {timeout_s:.0f}s: "
                                 f"{type(exc).__name__}: {exc}") from exc


def _retryable() -> tuple[type[BaseException], ...]:
    import ray.exceptions as rex

    return (rex.RayActorError, rex.WorkerCrashedError, rex.NodeDiedError, rex.ObjectLostError,
            rex.LocalRayletDiedError)


class RayGrader(GraderBase):
    """A load-balanced pool of grading actors. See the module docstring.

    Args:
        config: base EvalConfig of every actor (per-call ``options`` override it).
        num_actors: actors to start (default: the cluster's GPUs on CUDA — or the nodes' total of
            the custom resource — and 1 on CPU).
        capacity_per_actor: concurrent evaluations per actor (its LocalGrader's capacity).
        num_gpus / num_cpus / resources: what each actor asks Ray for (default: 1 GPU on CUDA,
            1 CPU on CPU).
        grader_factory: builds the actor's grader instead of LocalGrader (picklable).
        spares: warm candidate processes per actor's device (None = LocalGrader's default).
        retries: re-tries of a call whose actor died (on another actor), then EnvironmentFailure.
        max_restarts: Ray restarts of a dead actor (-1: always).
        name, namespace: name the actors ``{name}-{i}`` so other drivers can ``connect``.
        start_timeout_s: how long to wait for every actor to come up.
    """

    def __init__(self, config: EvalConfig | None = None, *, num_actors: int | None = None,
                 capacity_per_actor: int = 1, num_gpus: float | None = None, num_cpus: float | None = None,
                 resources: dict[str, float] | None = None, grader_factory: GraderFactory | None = None,
                 retries: int = 1, max_restarts: int = -1, name: str | None = None, namespace: str | None = None,
                 runtime_env: dict[str, Any] | None = None, start_timeout_s: float = 300.0,
                 spares: int | None = None):
        import ray

        from drkernel.serve.cache import config_dict

        config = (config or EvalConfig()).validate()
        if not ray.is_initialized():
            ray.init()
        cuda = config.device.startswith("cuda")
        if num_actors is None:
            if resources:
                rname = next(iter(resources))
                num_actors = int(ray.cluster_resources().get(rname, 0) // max(resources[rname], 1e-9))
            elif cuda:
                num_actors = int(ray.cluster_resources().get("GPU", 0) // (num_gpus or 1))
            else:
                num_actors = 1
            if num_actors < 1:
                raise EnvironmentFailure(f"no grading resources in the Ray cluster for device {config.device!r} "
                                         f"(resources={resources}, cluster={ray.cluster_resources()})")
        if cuda and num_gpus is None and not resources:
            num_gpus = 1
        if not cuda and num_cpus is None:
            num_cpus = 1
        # an async actor: its grader bounds the evaluations; the extra slots keep info pings answered
        placement: dict[str, Any] = {"max_restarts": max_restarts, "max_task_retries": 0,
                                     "max_concurrency": capacity_per_actor + 4}
        if num_gpus:
            placement["num_gpus"] = num_gpus
        if num_cpus is not None:
            placement["num_cpus"] = num_cpus
        if resources:
            placement["resources"] = dict(resources)
        if runtime_env:
            placement["runtime_env"] = runtime_env
        if namespace:
            placement["namespace"] = namespace
        remote_cls = ray.remote(GraderActor)
        cfg = config_dict(config)
        actors = []
        for i in range(num_actors):
            opts = dict(placement, name=f"{name}-{i}") if name else placement
            actors.append(remote_cls.options(**opts).remote(cfg, capacity_per_actor, grader_factory, spares))
        self.actor_info = _started(actors, start_timeout_s, kill=True)
        self._setup(actors, capacity_per_actor, retries, owner=True)

    def _setup(self, actors: list[Any], capacity_per_actor: int, retries: int, owner: bool) -> None:
        GraderBase.__init__(self, len(actors) * capacity_per_actor)
        self.actors = actors
        self.capacity_per_actor = capacity_per_actor
        self.retries = retries
        self._owner = owner
        self._in_flight = [0] * len(actors)
        self._down = [False] * len(actors)  # a call to it failed: wait for its restart before using it
        self.restart_timeout_s = 300.0
        self._balance = threading.Lock()
        self.stats = {"calls": 0, "actor_deaths": 0, "environment_failures": 0}

    # -- pickling and attaching -----------------------------------------------------------------
    def __reduce__(self) -> tuple:
        return (RayGrader._attach, (self.actors, self.capacity_per_actor, self.retries))

    @classmethod
    def _attach(cls, actors: list[Any], capacity_per_actor: int, retries: int) -> "RayGrader":
        self = cls.__new__(cls)
        self._setup(list(actors), capacity_per_actor, retries, owner=False)
        return self

    @classmethod
    def node_pool(cls, config: EvalConfig, *, name: str = "drkernel-grader", capacity_per_actor: int = 4,
                  retries: int = 1, namespace: str | None = None, start_timeout_s: float = 300.0,
                  spares: int | None = None) -> "RayGrader":
        """One grading actor per GPU of *this* node (one on the CPU), shared by every caller on the
        node: the first creates the actors, the others attach to the same ones by name (Ray's
        ``get_if_exists``). Each actor holds a LocalGrader on its one device (``cuda:i``), so a
        task's reference outputs are prepared once per GPU, one pool of warm workers serves it, and
        one process's gate keeps every timed region on that GPU alone among the graders (verl's
        agent-loop workers each holding a LocalGrader over every GPU prepared every task up to
        workers x GPUs times and timed side by side: ``docs/scaling-14b.md``). The actors ask Ray for
        no GPU or CPU (they share the node's GPUs with the rollout, as the agent-loop workers'
        graders do) and are pinned to the node. No handle kills them on ``close()``: they end
        with the job."""
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from drkernel.serve.cache import config_dict

        config = config.validate()
        if not ray.is_initialized():
            ray.init()
        node = ray.get_runtime_context().get_node_id()
        if config.device.startswith("cuda"):
            import torch

            count = torch.cuda.device_count() if torch.cuda.is_available() else 0
            if count < 1:
                raise EnvironmentFailure(f"a node grader pool on {config.device!r}, but this node shows no GPU "
                                         f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r})")
            devices = [f"cuda:{i}" for i in range(count)]
        else:
            devices = [config.device]
        remote_cls = ray.remote(GraderActor)
        actors = []
        for device in devices:
            opts: dict[str, Any] = {
                "name": f"{name}-{node[:16]}-{device.replace(':', '')}", "get_if_exists": True,
                "num_gpus": 0, "num_cpus": 0, "max_restarts": -1, "max_task_retries": 0,
                "max_concurrency": capacity_per_actor + 4,
                "scheduling_strategy": NodeAffinitySchedulingStrategy(node_id=node, soft=False)}
            if namespace:
                opts["namespace"] = namespace
            actors.append(remote_cls.options(**opts).remote(config_dict(config.with_overrides(device=device)),
                                                            capacity_per_actor, None, spares))
        _started(actors, start_timeout_s, kill=False)  # (shared: another worker's handle may be using them)
        self = cls.__new__(cls)
        self._setup(actors, capacity_per_actor, retries, owner=False)
        return self

    @classmethod
    def connect(cls, name: str, *, namespace: str | None = None, capacity_per_actor: int = 1,
                retries: int = 1) -> "RayGrader":
        """Attach to the actors of a pool created with ``name`` (by this or another driver)."""
        import ray

        actors = []
        while True:
            try:
                actors.append(ray.get_actor(f"{name}-{len(actors)}", namespace=namespace))
            except ValueError:
                break
        if not actors:
            raise EnvironmentFailure(f"no grading actors named {name}-0, {name}-1, ... in namespace {namespace!r}")
        return cls._attach(actors, capacity_per_actor, retries)

    # -- protocol -------------------------------------------------------------------------------
    def grade(self, task: Task, source: str, *, seed: int | None = None,
              options: Options | None = None) -> EvalResult:
        """:meth:`agrade`, run to completion on a private event loop (one retry loop for both)."""
        return _run_blocking(self.agrade(task, source, seed=seed, options=options))

    async def agrade(self, task: Task, source: str, *, seed: int | None = None,
                     options: Options | None = None) -> EvalResult:
        self._check(task, source, options)
        args = (task.source, task.name, task.entry_point, source, seed, dict(options or {}))
        tried: set[int] = set()
        last: BaseException | None = None
        for _ in range(self.retries + 1):
            i = self._acquire(tried)
            try:
                if self._down[i]:
                    await self._await_up(i)
                ref = self.actors[i].grade.remote(*args)
                try:
                    reply = await ref
                except asyncio.CancelledError:
                    import ray

                    ray.cancel(ref)  # the actor cancels its agrade: the candidate's processes end
                    raise
                return self._unpack(reply)
            except _retryable() as exc:
                last = self._died(i, tried, exc)
            finally:
                self._release(i)
        return self._give_up(last)

    def close(self) -> None:
        """Kill the actors if this handle created them (attached copies leave them running)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._threads.shutdown(wait=False)
        if self._owner:
            import ray

            for actor in self.actors:
                try:
                    ray.kill(actor, no_restart=True)
                except Exception:  # noqa: BLE001 - already gone
                    pass

    # -- helpers --------------------------------------------------------------------------------
    def _acquire(self, exclude: set[int]) -> int:
        """The least loaded actor not in ``exclude``, preferring actors not known to be restarting."""
        with self._balance:
            candidates = [i for i in range(len(self.actors)) if i not in exclude] or list(range(len(self.actors)))
            candidates = [i for i in candidates if not self._down[i]] or candidates
            low = min(self._in_flight[i] for i in candidates)
            i = random.choice([i for i in candidates if self._in_flight[i] == low])
            self._in_flight[i] += 1
            self.stats["calls"] += 1
            return i

    def _release(self, i: int) -> None:
        with self._balance:
            self._in_flight[i] -= 1

    def _died(self, i: int, tried: set[int], exc: BaseException) -> BaseException:
        tried.add(i)
        with self._balance:
            self.stats["actor_deaths"] += 1
            self._down[i] = True
        return exc

    async def _await_up(self, i: int) -> None:
        """Wait until actor ``i`` answers again (Ray restarts it), or raise EnvironmentFailure (it is
        dead for good: ActorDiedError, or not back within ``restart_timeout_s``)."""
        import time

        import ray

        deadline = time.monotonic() + self.restart_timeout_s
        while True:
            try:
                await asyncio.wait_for(self.actors[i].info.remote(), max(1.0, deadline - time.monotonic()))
                self._down[i] = False
                return
            except (ray.exceptions.ActorUnavailableError, asyncio.TimeoutError) as exc:
                if time.monotonic() > deadline:
                    raise EnvironmentFailure(f"grading actor {i} did not come back: {type(exc).__name__}: "
                                             f"{str(exc)[:300]}") from exc
                await asyncio.sleep(0.2)

    def _give_up(self, last: BaseException | None) -> EvalResult:
        with self._balance:
            self.stats["environment_failures"] += 1
        raise EnvironmentFailure(f"grading actor died {self.retries + 1} time(s) on this evaluation; "
                                 f"last: {type(last).__name__}: {str(last)[:300]}")

    def _unpack(self, reply: dict[str, Any]) -> EvalResult:
        if "result" in reply:
            return EvalResult.from_dict(reply["result"])
        if "task_error" in reply:
            raise TaskError(reply["task_error"])
        raise EnvironmentFailure(reply.get("environment_failure", "grading actor failed"))

    def pids(self, timeout_s: float = 120.0) -> list[int]:
        """Process ids of the actors now, waiting for restarting ones (restarted actors get new ids)."""
        import time

        import ray

        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return [info["pid"] for info in ray.get([a.info.remote() for a in self.actors])]
            except ray.exceptions.ActorUnavailableError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)


__all__ = ["RayGrader", "GraderActor", "GraderFactory"]

