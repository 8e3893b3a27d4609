"""The messages between the grader and a worker process (versioned: a remote worker speaks it).

Every message is one JSON object (never pickle: the worker runs untrusted code). Requests carry
``{"v": PROTOCOL_VERSION, "op": ...}`` and the fields of their dataclass; replies carry
``{"v", "op", "ok", "findings"}`` and the fields of theirs, or of :class:`Failure` when ``ok`` is
false. A reply is *hostile input*: :func:`parse_reply` keeps only the declared fields and checks
their types, and anything else is a :class:`ProtocolError` (charged to the candidate).

Sequence for one worker (each request answered before the next is sent)::

    worker -> hello (Hello: ready, pid, device)          once torch/triton/CUDA are up (warm)
    load    (LoadRequest)   -> LoadReply                 role candidate: confined, audited, ModelNew built
                                                         role reference: the task's Model alone
                                                         (GPU: a child forked before the import,
                                                         without GPU, compiles the kernels ahead;
                                                         the grader awaits it while the worker idles)
    run     (RunRequest)    -> RunReply   (x trials)     inputs drawn in the worker from ``seed``
    time    (TimeRequest)   -> TimeReply                 warm-up + timed calls (+ device records: records)
        worker -> {"op": "spot", "call": i}              after each timed call (candidate): keep it?
        grader -> b"1" | b"0"                            decided now, by the grader
    events  (EventsRequest) -> EventsReply               device records (after a timing without them, or none)
    exit

Inputs are drawn in the worker from a hidden seed sent in the request that uses them (the grader
draws the same inputs with the same code, :meth:`LoadedTask.draw_inputs`), so no input tensor
crosses the boundary; only outputs come back, as raw files (:mod:`drkernel.env.process.tensor_io`).
``findings`` are ``[hack id, detail]`` pairs: what the worker's audit saw since its last reply.

**The channel is shared with the candidate's code** (it runs in the worker's process and can reach
the socket's descriptor). Every request therefore carries a fresh random ``nonce`` that the worker
holds only in its request loop's locals (frames and ``gc`` are closed to the candidate) and echoes in
its reply and in its spot questions; the grader refuses any message without it. A frame the
candidate writes cannot name the nonce, so it ends the evaluation as a forged message instead of
being read as the harness's reply (a made-up timing, say).
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

PROTOCOL_VERSION = 9


class ProtocolError(ValueError):
    """A message that does not follow this protocol."""


# -- requests ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LoadRequest:
    op: ClassVar[str] = "load"
    role: str
    """``candidate`` or ``reference``."""
    task_source: str
    task_name: str
    device: str
    task_size: str
    entry_point: str
    init_seed: int
    candidate_file: str | None = None
    reference_backend: str = "eager"
    kernel_suffix: str = "__dk"
    """Appended to the compiled names of the candidate's kernels (chosen by the grader)."""
    parameter_shapes: list[list[int]] = field(default_factory=list)
    """The reference's parameter shapes, in order: ModelNew must hold the same."""
    buffer_shapes: list[list[int]] = field(default_factory=list)
    launch_budget_ms: float = 1.0
    stage_bytes: int = 0
    """Bytes of the output stage the grader reserved for this candidate's outputs (0: files only)."""
    launch_budget_verdict: dict[str, Any] | None = None
    """The grader's probe of the launch budget's hold on this device, made while it held the GPU
    exclusively (:func:`drkernel.env.measure.budget.device_verdict`): ``verified``, ``blocks``,
    ``regs_per_thread``, ``probe_gap_ms``, ``reason``. A worker whose hold has the same shape takes
    it instead of probing beside other evaluations' kernels; None: the worker probes."""
    part: str = "all"
    """A candidate's load in two requests, so that the grader holds the GPU gate only for the part
    that can run kernels: ``prepare`` (the task, the stage, the profiler, the confinement: host work
    only, needs the grader's ``launch_budget_verdict``), then ``candidate`` (the sampler's warm-up,
    the candidate's import and build); ``all``: both in one request."""


@dataclass(frozen=True)
class RunRequest:
    """One checked call on inputs ``draw_inputs(seed, distribution)``, with the model's initial
    parameter values transformed by ``reload_seed`` (None: the initial values themselves)."""

    op: ClassVar[str] = "run"
    seed: int
    distribution: str
    grad_mode: str = "no_grad"
    prefill: str = "nan"
    prefill_bytes: int = 0
    out_name: str = "out"
    reload_seed: int | None = None


@dataclass(frozen=True)
class TimeRequest:
    """Calls on inputs ``draw_inputs(seeds[i]) * factors[i]``; the first ``warmup`` are not timed.
    ``spot``: ask the grader after each timed call whether to keep its output."""

    op: ClassVar[str] = "time"
    seeds: list[int]
    factors: list[float]
    warmup: int
    reload_seeds: list[int] = field(default_factory=list)
    """Fresh parameter values for each call (empty: keep the current ones)."""
    spot: bool = True
    launch_budget_ms: float = 1.0
    records: bool = True
    """The profiler's device records in the reply. False: the profiler runs on, and the grader asks
    for them with an :class:`EventsRequest` once it has let go of the GPU (stopping the profiler
    and reading its records is host work that no other evaluation's timing needs to wait for)."""


@dataclass(frozen=True)
class EventsRequest:
    op: ClassVar[str] = "events"


@dataclass(frozen=True)
class ExitRequest:
    op: ClassVar[str] = "exit"


REQUESTS: dict[str, type] = {c.op: c for c in (LoadRequest, RunRequest, TimeRequest, EventsRequest, ExitRequest)}
Request = typing.Union[LoadRequest, RunRequest, TimeRequest, EventsRequest, ExitRequest]


def encode_request(req: Any, nonce: str = "") -> bytes:
    return json.dumps({"v": PROTOCOL_VERSION, "op": req.op, "nonce": nonce, **dataclasses.asdict(req)}).encode()


def decode_request(raw: bytes) -> Any:
    """Worker side: bytes -> request dataclass (ProtocolError on a version or shape mismatch)."""
    return decode_envelope(raw)[0]


def decode_envelope(raw: bytes) -> tuple[Any, str]:
    """Worker side: bytes -> (request dataclass, the request's nonce, to echo in every message)."""
    return _request_from(_json_object(raw))


def _request_from(data: dict[str, Any]) -> tuple[Any, str]:
    """A request's JSON object -> (request dataclass, its nonce); ProtocolError on a bad envelope."""
    nonce = data.pop("nonce", "")
    if not isinstance(nonce, str):
        raise ProtocolError("the request's nonce is not a string")
    if data.get("v") != PROTOCOL_VERSION:
        raise ProtocolError(f"protocol version {data.get('v')!r}, this worker speaks {PROTOCOL_VERSION}")
    cls = REQUESTS.get(data.get("op"))
    if cls is None:
        raise ProtocolError(f"unknown op {data.get('op')!r}")
    return _build(cls, data), nonce


# -- replies ----------------------------------------------------------------------------------------
@dataclass
class Hello:
    op: ClassVar[str] = "hello"
    ready: bool = False
    pid: int = 0
    device: str = "cpu"
    start_s: float = 0.0
    """Seconds the worker spent starting (imports, CUDA context)."""
    start_parts: dict[str, float] = field(default_factory=dict)
    """Where ``start_s`` went, by phase (``cuda_context``, ``launch_budget``, ``fences``, ``cupti``...)."""


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
    load_s: float = 0.0
    buffers_reloaded: bool = True
    """Whether the candidate's floating buffers mirror the reference's (then they are reloaded too)."""
    isolation: dict[str, Any] = field(default_factory=dict)
    """What confines the candidate's process (Landlock ABI, what is refused), for the record."""
    phases_s: dict[str, float] = field(default_factory=dict)
    """The worker's own timers of the load's parts (diagnostics; the candidate could forge them)."""


@dataclass
class RunReply:
    op: ClassVar[str] = "run"
    launches: int = 0
    """Launches of the candidate's kernels in the call (CPU interpreter; on a GPU the device records decide)."""
    call_s: float = 0.0
    foreign: float = 0.0
    """CPU: byte equivalents of torch work outside the candidate's kernels (drkernel.env.measure.profiling)."""
    not_tensor: str | None = None
    lazy: str | None = None
    aliases_input: bool = False
    dense: bool | None = None
    strides: list[int] | None = None
    """The output's strides (the file carries its values in row-major order, not its layout)."""
    mutated: list[int] = field(default_factory=list)
    out: dict[str, Any] | None = None
    draw_s: float = 0.0
    write_s: float = 0.0
    phases_s: dict[str, float] = field(default_factory=dict)
    """The worker's own timers of the call's parts (diagnostics; the candidate could forge them)."""
    interpreter: list[str] = field(default_factory=list)
    """CPU interpreter: what it decided in this call that a GPU decides otherwise (an autotuned
    kernel's config, :mod:`drkernel.env.process.interpreter`); diagnostics."""


@dataclass
class TimeReply:
    op: ClassVar[str] = "time"
    host_ms: list[float] = field(default_factory=list)
    """Host clock around each call (CPU: the timing; GPU: diagnostics)."""
    launch_ms: list[float] = field(default_factory=list)
    foreign: list[float] = field(default_factory=list)
    spot: list[dict[str, Any]] = field(default_factory=list)
    total_s: float = 0.0
    calls_without_launch: int = 0
    events: list[list[Any]] = field(default_factory=list)
    """GPU: ``[name, start_ns, duration_ns, stream]`` of every device record since the load."""
    persisting_l2_reset: bool | None = None
    launch_budget: dict[str, Any] | None = None
    """On CUDA: the hold used (``ms``, ``verified``, ``blocks``, ``reason`` when off); see budget.py."""
    phases_s: dict[str, float] = field(default_factory=dict)
    """Diagnostics: the worker's host seconds per part of the request (inputs, call, spot, ...)."""


@dataclass
class EventsReply:
    op: ClassVar[str] = "events"
    events: list[list[Any]] = field(default_factory=list)


REPLIES: dict[str, type] = {c.op: c for c in (Hello, LoadReply, RunReply, TimeReply, EventsReply)}
#: Keys of every reply's envelope: no reply may declare a field of these names (it would be read as the envelope's).
ENVELOPE_KEYS = frozenset({"v", "op", "ok", "nonce", "findings"})
assert not any(ENVELOPE_KEYS & {f.name for f in dataclasses.fields(c)} for c in REPLIES.values())


@dataclass
class Reply:
    """A parsed reply: ``body`` is the op's reply dataclass, or :class:`Failure`."""

    body: Any
    findings: list[list[str]] = field(default_factory=list)
    """``[hack id, detail]`` pairs the worker's audit recorded (charged to the candidate)."""

    @property
    def ok(self) -> bool:
        return not isinstance(self.body, Failure)


def encode_reply(body: Any, findings: list[list[str]] | None = None, nonce: str = "") -> bytes:
    ok = not isinstance(body, Failure)
    payload = {"v": PROTOCOL_VERSION, "op": body.op, "ok": ok, "nonce": nonce, "findings": list(findings or []),
               **dataclasses.asdict(body)}
    return json.dumps(payload, default=str).encode()


def worker_codec() -> tuple[Callable[[bytes], tuple[Any, str]], Callable[[Any, list[list[str]] | None, str], bytes]]:
    """``(decode_envelope, encode_reply)`` for the worker, built before the candidate's code exists
    from functions bound now: JSON through the C scanner and encoder, the replies' fields listed
    now. (``json.dumps``/``loads`` look their helpers up in modules, and ``dataclasses.asdict``
    copies every value through ``copy``'s dispatch table, a dict the candidate's code could change
    under a sealed module: a float of the reply rewritten on its way out.) Without the C
    accelerations, the plain functions (as before)."""
    import json.decoder as jd
    import json.encoder as je

    reply_fields = {cls: tuple(f.name for f in dataclasses.fields(cls)) for cls in (*REPLIES.values(), Failure, Hello)}
    c_encoder, c_scanner = getattr(je, "c_make_encoder", None), getattr(jd, "c_make_scanner", None)
    if c_encoder is None or c_scanner is None:
        return decode_envelope, encode_reply
    chunks = c_encoder(None, str, je.c_encode_basestring_ascii, None, ": ", ", ", False, False, True)
    scan = c_scanner(jd.JSONDecoder())
    join, failure, version = "".join, Failure, PROTOCOL_VERSION

    def encode(body: Any, findings: list[list[str]] | None = None, nonce: str = "") -> bytes:
        names = reply_fields[type(body)]
        payload = {"v": version, "op": body.op, "ok": type(body) is not failure, "nonce": nonce,
                   "findings": list(findings or [])}
        for name in names:
            payload[name] = getattr(body, name)
        return join(chunks(payload, 0)).encode()

    def decode(raw: bytes) -> tuple[Any, str]:
        try:
            text = raw.decode("utf-8")
            data, end = scan(text, 0)
        except (ValueError, StopIteration):
            raise ProtocolError("not JSON") from None
        if end != len(text) or type(data) is not dict:
            raise ProtocolError("not a JSON object")
        return _request_from(data)

    return decode, encode


def read_exactly(read: Callable[[int, int], bytes], fd: int, n: int) -> bytes:
    """``n`` bytes from ``fd`` through ``read`` (the caller's ``os.read``, bound before the candidate
    loaded); EOFError when the other end closed."""
    parts, got = [], 0
    while got < n:
        chunk = read(fd, min(n - got, 1 << 20))
        if not chunk:
            raise EOFError
        parts.append(chunk)
        got += len(chunk)
    return b"".join(parts)


def write_all(write: Callable[[int, Any], int], fd: int, data: bytes) -> None:
    """All of ``data`` to ``fd`` through ``write`` (the caller's ``os.write``)."""
    view = memoryview(data)
    while view:
        view = view[write(fd, view):]


def frame_head(n: int) -> bytes:
    """The length prefix of a message of ``n`` bytes, as ``multiprocessing.connection.Connection``
    frames it (4 bytes big-endian, or -1 and 8 bytes beyond 2 GiB)."""
    if n <= 0x7FFFFFFF:
        return n.to_bytes(4, "big", signed=True)
    return (-1).to_bytes(4, "big", signed=True) + n.to_bytes(8, "big", signed=False)


class ForgedMessage(ProtocolError):
    """A message on the worker's channel without its request's nonce: not the harness's."""


def parse_reply(raw: bytes, expect: str, nonce: str | None = None) -> Reply:
    """Grader side: a hostile worker's bytes -> :class:`Reply` for op ``expect``; with ``nonce``, a
    reply that does not echo it is :class:`ForgedMessage`."""
    data = _json_object(raw)
    if data.get("v") != PROTOCOL_VERSION:
        raise ProtocolError(f"reply speaks protocol {data.get('v')!r}, expected {PROTOCOL_VERSION}")
    if nonce is not None and data.get("nonce") != nonce:
        raise ForgedMessage(f"a {str(data.get('op'))[:20]!r} message without the request's nonce")
    findings = data.get("findings", [])
    if not isinstance(findings, list) or not all(
            isinstance(f, list) and len(f) == 2 and all(isinstance(x, str) for x in f) for f in findings):
        raise ProtocolError("malformed 'findings' list")
    findings = [[f[0][:64], f[1][:300]] for f in findings[:64]]
    if data.get("ok") is False:
        return Reply(_build(Failure, data), findings)
    if data.get("ok") is not True or data.get("op") != expect:
        raise ProtocolError(f"expected a {expect!r} reply, got op={data.get('op')!r} ok={data.get('ok')!r}")
    return Reply(_build(REPLIES[expect], data), findings)


def spot_query(call: int, nonce: str) -> bytes:
    """The worker's question after timed call ``call`` (kept bytes-only: built without json)."""
    return b'{"v": %d, "op": "spot", "call": %d, "nonce": "%s"}' % (PROTOCOL_VERSION, call, nonce.encode("ascii"))


def is_spot_query(data: Any) -> bool:
    """A worker's mid-request question (``{"op": "spot", "call": i}``) rather than a reply."""
    return isinstance(data, dict) and data.get("op") == "spot" and "ok" not in data


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


__all__ = ["PROTOCOL_VERSION", "ProtocolError", "LoadRequest", "RunRequest", "TimeRequest",
           "EventsRequest", "ExitRequest", "Hello", "Failure", "LoadReply", "RunReply", "TimeReply",
           "EventsReply", "Reply",
           "encode_request", "decode_request", "decode_envelope", "encode_reply", "parse_reply",
           "is_spot_query", "spot_query", "ForgedMessage"]
