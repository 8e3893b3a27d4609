"""``drkernel serve``: one grading server per machine, serving that machine's GPUs through ``LocalGrader``.

    drkernel serve --host 0.0.0.0 --port 8000 --device cuda --gpus 0,1 --token-env DRKERNEL_SERVE_TOKEN
    drkernel serve --device cpu --workers 2 --port 8000          # CPU interpreter (tests, laptops)

Jobs and cached verdicts live in ``--state-dir`` (default ``./.drkernel-serve``: ``jobs.sqlite`` and
``cache.sqlite``): restarting the server with the same directory answers the jobs it accepted before
and keeps its cached verdicts. ``--clear-cache`` empties the cache and exits; deleting the directory
clears everything. Also runnable as ``python -m drkernel serve``. The service itself is
:mod:`drkernel.serve`; this module only parses, builds it and runs it.

Without a token (``--token`` or ``$DRKERNEL_SERVE_TOKEN``) the service runs open, and says so on
stderr: anyone who reaches the port can submit code to run.

Exit codes (:mod:`drkernel.cli.common`): 0 after a clean stop (or ``--clear-cache``); 2 for unusable
arguments or a missing ``serve`` extra; 3 for ``--device cuda`` without a visible GPU.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from pathlib import Path
from typing import Any

from drkernel.cli.common import MissingExtra, UsageError, notice
from drkernel.serve import TOKEN_ENV


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``drkernel serve`` flags."""
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (0.0.0.0: every interface)")
    parser.add_argument("--port", type=int, default=8000, help="TCP port (default 8000)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="cpu: Triton interpreter; cuda: this machine's GPUs")
    parser.add_argument("--gpus", default=None,
                        help="comma-separated GPU indices to serve (sets CUDA_VISIBLE_DEVICES); default all")
    parser.add_argument("--workers", type=int, default=None,
                        help="evaluations run at once (default: the grader's own: one per GPU, or the CPU count)")
    parser.add_argument("--queue-size", type=int, default=256,
                        help="jobs waiting beyond the running ones; more are answered 429 with Retry-After")
    parser.add_argument("--state-dir", default=".drkernel-serve",
                        help="directory of the SQLite job store (jobs.sqlite) and result cache (cache.sqlite)")
    parser.add_argument("--no-cache", action="store_true", help="grade every submission, even repeats")
    parser.add_argument("--cache-max-entries", "--cache-size", dest="cache_max_entries", type=int, default=100_000,
                        help="cached verdicts kept; past it the least recently used tenth is dropped")
    parser.add_argument("--max-jobs", type=int, default=100_000,
                        help="answered jobs kept; past it the oldest tenth is deleted (unanswered ones never are)")
    parser.add_argument("--clear-cache", action="store_true",
                        help="delete every cached verdict in --state-dir, print how many, and exit")
    parser.add_argument("--transient-retries", type=int, default=2,
                        help="further evaluations of a job whose outcome was transient (a worker killed from "
                             "outside; a timeout under load: at most one) before it is answered, uncached")
    parser.add_argument("--token", default=None,
                        help=f"bearer token clients must send (default: ${TOKEN_ENV} when set; else open)")
    parser.add_argument("--eval-options", default=None,
                        help='JSON object of EvalConfig overrides for the base protocol, e.g. \'{"timing_trials": 20}\'')
    parser.add_argument("--cpu-fast", action="store_true",
                        help="the lighter CPU protocol of drkernel.env.config.cpu_fast (tests, CI)")
    parser.add_argument("--max-body-mb", type=float, default=2.0, help="largest request body, MiB")
    parser.add_argument("--no-warmup", action="store_true",
                        help="report ready without grading the probe kernel first")
    parser.add_argument("--grader", default=None, metavar="MODULE:FACTORY",
                        help="serve another Grader: FACTORY(config, capacity) -> Grader (default: LocalGrader)")
    parser.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"),
                        help="server log level (default info)")


def build_service(args: argparse.Namespace) -> Any:
    """The GradingService for parsed ``args`` (no server started)."""
    from drkernel.env.config import EvalConfig, cpu_fast
    from drkernel.env.grader import LocalGrader
    from drkernel.serve.app import GradingService, ServiceSettings
    from drkernel.serve.cache import ResultCache
    from drkernel.serve.jobs import JobStore

    overrides = json.loads(args.eval_options) if args.eval_options else {}
    if not isinstance(overrides, dict):
        raise ValueError("--eval-options must be a JSON object")
    config = EvalConfig(device=args.device)
    if args.cpu_fast:
        config = cpu_fast(config)
    config = config.with_overrides(**overrides).validate()
    if args.workers is not None and args.workers < 1:
        raise ValueError("--workers must be >= 1")
    if args.transient_retries < 0:
        raise ValueError("--transient-retries must be >= 0")
    state = Path(args.state_dir)
    store = JobStore(state / "jobs.sqlite", max_answered=args.max_jobs)
    cache = None if args.no_cache else ResultCache(state / "cache.sqlite", max_entries=args.cache_max_entries)
    settings = ServiceSettings(max_queue=args.queue_size, max_body_bytes=int(args.max_body_mb * (1 << 20)),
                               token=args.token or os.environ.get(TOKEN_ENV) or None, warmup=not args.no_warmup,
                               transient_retries=args.transient_retries)
    factory = _import_factory(args.grader) if args.grader else _local_factory(LocalGrader)
    return GradingService(lambda: factory(config, args.workers), base_config=config, store=store, cache=cache,
                          settings=settings)


def _local_factory(cls: Any) -> Any:
    return lambda config, capacity: cls(config, capacity=capacity)


def _import_factory(spec: str) -> Any:
    import importlib

    module, _, attr = spec.partition(":")
    if not module or not attr:
        raise ValueError(f"--grader must be MODULE:FACTORY, got {spec!r}")
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"--grader {spec}: {exc}") from exc


def main(args: argparse.Namespace) -> int:
    """Serve until interrupted. Unusable arguments raise ``UsageError`` (exit 2); no CUDA device for
    ``--device cuda`` raises ``EnvironmentFailure`` (exit 3)."""
    if args.clear_cache:
        return clear_cache(Path(args.state_dir))
    try:
        import uvicorn

        from drkernel.serve.app import create_app
    except ModuleNotFoundError as exc:
        raise MissingExtra("serve", "drkernel serve", exc.name) from exc
    if args.gpus:
        if args.device != "cuda":
            raise UsageError("--gpus needs --device cuda")
        os.environ["CUDA_VISIBLE_DEVICES"] = args.gpus  # before anything creates a CUDA context
    try:
        service = build_service(args)
    except (ValueError, TypeError) as exc:  # json.JSONDecodeError is a ValueError
        raise UsageError(str(exc)) from exc
    if args.device == "cuda":
        import torch

        from drkernel.env.result import EnvironmentFailure

        if not torch.cuda.is_available():
            raise EnvironmentFailure(f"--device cuda but no CUDA device is visible "
                                     f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r})")
    if not service.settings.token:
        notice("drkernel serve", f"no token: the service runs open (no auth) on {args.host}:{args.port}; "
                                 f"set ${TOKEN_ENV} or pass --token to require a bearer token")
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    uvicorn.run(create_app(service), host=args.host, port=args.port, log_level=args.log_level)
    return 0


def clear_cache(state_dir: Path) -> int:
    """``drkernel serve --clear-cache``: empty ``state_dir``'s result cache (a running server's too:
    SQLite shares the file); jobs and their answers stay."""
    from drkernel.serve.cache import ResultCache

    path = state_dir / "cache.sqlite"
    if not path.exists():
        print(f"no result cache at {path}")
        return 0
    cache = ResultCache(path)
    try:
        print(f"deleted {cache.clear()} cached verdict(s) from {path}")
    finally:
        cache.close()
    return 0


__all__ = ["add_arguments", "main", "build_service", "clear_cache", "TOKEN_ENV"]
