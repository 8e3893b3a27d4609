"""The messages between the grader and a candidate's worker process (versioned: a remote worker speaks it).

Every message is one JSON object (never pickle: the worker runs untrusted code). Requests carry
``{"v": PROTOCOL_VERSION, "op": ...}`` and the fields of their dataclass; replies carry
``{"v", "op", "ok", "tampered"}`` and the fields of theirs, or of :class:`Failure` when ``ok`` is
false. A reply is *hostile input*: :func:`parse_reply` keeps only the declared fields and checks
their types, and anything else is a :class:`ProtocolError` (charged to the candidate).

Sequence for one candidate (each request answered before the next is sent)::

    worker -> hello (Hello: ready, pid, device)            sent once torch/triton/CUDA are up (warm)
    load    (LoadRequest)    -> LoadReply                  reference + candidate built, same init seed
    run     (RunRequest)     -> RunReply  (x trials)       inputs drawn in the worker from ``seed``
    time    (TimeRequest)    -> TimeReply                  interleaved reference/candidate timing
    profile (ProfileRequest) -> ProfileReply               coverage
    exit

Inputs are drawn in the worker from a hidden seed sent in the request that uses it (the grader
draws the same inputs with the same code, :meth:`LoadedTask.draw_inputs`), so no input tensor
crosses the boundary; only candidate outputs come back, as raw files (:mod:`drkernel.env.tensor_io`).
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar

PROTOCOL_VERSION = 4


class ProtocolError(ValueError):
    """A message that does not follow this protocol."""


# -- requests ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LoadRequest:
    op: ClassVar[str] = "load"
    task_source: str
    task_name: str
    candidate_file: str
    device: str
    task_size: str
    entry_point: str
    init_seed: int
    reference_backend: str = "eager"


@dataclass(frozen=True)
class RunRequest:
    """One checked call on inputs ``draw_inputs(seed, distribution)``."""

    op: ClassVar[str] = "run"
    seed: int
    distribution: str
    grad_mode: str = "no_grad"
    prefill: str = "nan"
    prefill_bytes: int = 0
    out_name: str = "out"


@dataclass(frozen=True)
class TimeRequest:
    op: ClassVar[str] = "time"
    pool_seeds: list[int]
    factors: list[float]
    trials: int
    warmup: int
    spot: list[int] = field(default_factory=list)
    launch_budget_ms: float = 1.0


@dataclass(frozen=True)
class ProfileRequest:
    op: ClassVar[str] = "profile"
    seed: int
    calls: int = 3


@dataclass(frozen=True)
class ExitRequest:
    op: ClassVar[str] = "exit"


REQUESTS: dict[str, type] = {c.op: c for c in (LoadRequest, RunRequest, TimeRequest, ProfileRequest, ExitRequest)}
Request = typing.Union[LoadRequest, RunRequest, TimeRequest, ProfileRequest, ExitRequest]


def encode_request(req: Any) -> bytes:
    return json.dumps({"v": PROTOCOL_VERSION, "op": req.op, **dataclasses.asdict(req)}).encode()


def decode_request(raw: bytes) -> Any:
    """Worker side: bytes -> request dataclass (ProtocolError on a version or shape mismatch)."""
    data = _json_object(raw)
    if data.get("v") != PROTOCOL_VERSION:
        raise ProtocolError(f"protocol version {data.get('v')!r}, this worker speaks {PROTOCOL_VERSION}")
    cls = REQUESTS.get(data.get("op"))
    if cls is None:
        raise ProtocolError(f"unknown op {data.get('op')!r}")
    return _build(cls, data)


# -- replies ----------------------------------------------------------------------------------------
@dataclass
class Hello:
    op: ClassVar[str] = "hello"
    ready: bool = False
    pid: int = 0
    device: str = "cpu"
    start_s: float = 0.0
    """Seconds the worker spent starting (imports, CUDA context)."""


@dataclass
class Failure:
    """``ok: false``: the request failed. ``fault`` says whose failure it is."""

    op: ClassVar[str] = "failure"
    stage: str = "correctness"
    error: str = ""
    fault: str = "candidate"
    """``candidate`` (a verdict), ``harness`` (the worker itself broke before the candidate ran: an
    environment failure)."""


@dataclass
class LoadReply:
    op: ClassVar[str] = "load"
    threads_delta: int = 0
    load_s: float = 0.0


@dataclass
class RunReply:
    op: ClassVar[str] = "run"
    launches: dict[str, int] = field(default_factory=dict)
    launch_s: float = 0.0
    call_s: float = 0.0
    threads_delta: int = 0
    os_threads_delta: int = 0
    not_tensor: str | None = None
    lazy: str | None = None
    aliases_input: bool = False
    dense: bool | None = None
    mutated: list[int] = field(default_factory=list)
    out: dict[str, Any] | None = None
    draw_s: float = 0.0
    write_s: float = 0.0


@dataclass
class TimeReply:
    op: ClassVar[str] = "time"
    reference: dict[str, float] = field(default_factory=dict)
    candidate: dict[str, float] = field(default_factory=dict)
    candidate_event: dict[str, float] = field(default_factory=dict)
    candidate_host: dict[str, float] = field(default_factory=dict)
    reference_host: dict[str, float] = field(default_factory=dict)
    host_gap_ms: dict[str, float] = field(default_factory=dict)
    launch_ms: dict[str, float] = field(default_factory=dict)
    calls_without_launch: int = 0
    spot: list[dict[str, Any]] = field(default_factory=list)
    timed_total_ms: float = 0.0
    total_s: float = 0.0
    samples: dict[str, list[float]] = field(default_factory=dict)
    persisting_l2_reset: bool | None = None
    launch_budget: dict[str, Any] | None = None
    """On CUDA: the hold used (``ms``, ``verified``, ``blocks``, ``reason`` when off); see budget.py."""


@dataclass
class ProfileReply:
    op: ClassVar[str] = "profile"
    coverage: float | None = None
    reason: str | None = None
    """Why coverage is None (e.g. torch compute outside the candidate's kernels on the CPU)."""
    method: str = ""
    own_us: float = 0.0
    total_us: float = 0.0
    kernels: list[str] = field(default_factory=list)
    top: list[dict[str, Any]] = field(default_factory=list)
    torch_ops: dict[str, int] = field(default_factory=dict)


REPLIES: dict[str, type] = {c.op: c for c in (Hello, LoadReply, RunReply, TimeReply, ProfileReply)}


@dataclass
class Reply:
    """A parsed reply: ``body`` is the op's reply dataclass, or :class:`Failure`."""

    body: Any
    tampered: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not isinstance(self.body, Failure)


def encode_reply(body: Any, tampered: list[str] | None = None) -> bytes:
    ok = not isinstance(body, Failure)
    payload = {"v": PROTOCOL_VERSION, "op": body.op, "ok": ok, "tampered": sorted(set(tampered or [])),
               **dataclasses.asdict(body)}
    return json.dumps(payload, default=str).encode()


def parse_reply(raw: bytes, expect: str) -> Reply:
    """Grader side: a hostile worker's bytes -> :class:`Reply` for op ``expect``."""
    data = _json_object(raw)
    if data.get("v") != PROTOCOL_VERSION:
        raise ProtocolError(f"reply speaks protocol {data.get('v')!r}, expected {PROTOCOL_VERSION}")
    tampered = data.get("tampered", [])
    if not isinstance(tampered, list) or not all(isinstance(t, str) for t in tampered):
        raise ProtocolError("malformed 'tampered' list")
    if data.get("ok") is False:
        return Reply(_build(Failure, data), [t[:200] for t in tampered[:64]])
    if data.get("ok") is not True or data.get("op") != expect:
        raise ProtocolError(f"expected a {expect!r} reply, got op={data.get('op')!r} ok={data.get('ok')!r}")
    return Reply(_build(REPLIES[expect], data), [t[:200] for t in tampered[:64]])


# -- helpers ----------------------------------------------------------------------------------------
def _json_object(raw: bytes) -> dict[str, Any]:
    try:
        data = json.loads(raw)
    except ValueError:
        raise ProtocolError("not JSON") from None
    if not isinstance(data, dict):
        raise ProtocolError("not a JSON object")
    return data


_HINTS: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _build(cls: type, data: dict[str, Any]) -> Any:
    hints = _hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        if f.name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:  # type: ignore[misc]
                raise ProtocolError(f"{cls.__name__}: missing field {f.name!r}")
            continue
        value = data[f.name]
        if not _type_ok(value, hints[f.name]):
            raise ProtocolError(f"{cls.__name__}.{f.name}: unexpected value {str(value)[:80]!r}")
        kwargs[f.name] = float(value) if hints[f.name] is float else value
    return cls(**kwargs)


def _type_ok(value: Any, hint: Any) -> bool:
    origin = typing.get_origin(hint)
    if origin is typing.Union or origin is types.UnionType:
        return any(_type_ok(value, h) for h in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is Any:
        return True
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if origin is list:
        (item,) = typing.get_args(hint) or (Any,)
        return isinstance(value, list) and all(_type_ok(v, item) for v in value)
    if origin is dict:
        k, v = typing.get_args(hint) or (Any, Any)
        return isinstance(value, dict) and all(_type_ok(a, k) and _type_ok(b, v) for a, b in value.items())
    return isinstance(value, hint) if isinstance(hint, type) else True


__all__ = ["PROTOCOL_VERSION", "ProtocolError", "LoadRequest", "RunRequest", "TimeRequest", "ProfileRequest",
           "ExitRequest", "Hello", "Failure", "LoadReply", "RunReply", "TimeReply", "ProfileReply", "Reply",
           "encode_request", "decode_request", "encode_reply", "parse_reply"]
