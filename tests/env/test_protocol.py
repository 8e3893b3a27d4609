"""The worker protocol (typed, versioned JSON) and the grader-side reference cache."""

import json

import pytest
import torch

from drkernel.env import protocol as P
from drkernel.env.conformance import PROBE_TASK
from drkernel.env.tasks.prepared import PreparedCache, TrialKey
from drkernel.env.tasks.task import Task


def test_requests_round_trip_with_their_version():
    req = P.RunRequest(seed=5, distribution="scaled", grad_mode="enable_grad", prefill_bytes=16, out_name="t1")
    raw = P.encode_request(req)
    assert json.loads(raw)["v"] == P.PROTOCOL_VERSION
    assert P.decode_request(raw) == req
    with pytest.raises(P.ProtocolError, match="version"):
        P.decode_request(json.dumps({"v": 1, "op": "run", "seed": 5, "distribution": "native"}).encode())
    with pytest.raises(P.ProtocolError, match="unknown op"):
        P.decode_request(json.dumps({"v": P.PROTOCOL_VERSION, "op": "shell"}).encode())


def test_replies_are_parsed_as_hostile_input():
    ok = P.parse_reply(P.encode_reply(P.RunReply(launches=2, call_s=0.5), [["host_compute", "x"]]), "run")
    assert ok.ok and ok.body.launches == 2 and ok.findings == [["host_compute", "x"]]
    fail = P.parse_reply(P.encode_reply(P.Failure(stage="timing", error="boom")), "time")
    assert not fail.ok and fail.body.stage == "timing" and fail.body.fault == "candidate"
    good = json.loads(P.encode_reply(P.RunReply()))
    for bad in ({**good, "launches": "many"}, {**good, "call_s": "fast"}, {**good, "v": 99},
                {**good, "op": "time"}, {**good, "ok": "yes"}, {**good, "findings": "nothing"},
                {**good, "findings": [["only one"]]}, {**good, "findings": [[1, 2]]}, [1, 2]):
        with pytest.raises(P.ProtocolError):
            P.parse_reply(json.dumps(bad).encode(), "run")
    assert not hasattr(P.parse_reply(json.dumps({**good, "evil": 1}).encode(), "run").body, "evil")


def test_references_are_computed_once_per_task_and_seed():
    cache = PreparedCache()
    task = Task.from_source(PROBE_TASK, name="probe")
    p = cache.get(task, "small", "cpu")
    assert cache.get(Task.from_source(PROBE_TASK, name="probe"), "small", "cpu") is p  # loaded once
    a = p.reference(1, TrialKey(7, "negated"))
    b = p.reference(1, TrialKey(7, "negated"))
    assert a is b and (p.misses, p.hits) == (1, 1)
    assert torch.equal(a.out, -2.0 * p.loaded.draw_inputs(7, "native")[0])


LINEAR_TASK = """
import torch

class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.lin(x)

def get_inputs():
    return [torch.randn(3, 8)]

def get_init_inputs():
    return []
"""


def test_the_reference_is_built_once_ahead_and_every_model_is_a_copy_of_it(monkeypatch):
    """prebuild (outside the GPU gate) builds; template moves that build, never runs it; each
    parameter variant is a copy (running one changes neither the template nor the others); forget
    drops the models at the evaluation's end and keeps the outputs."""
    from drkernel.env.tasks.task import LoadedTask, reload_parameters

    builds = []
    real_build = LoadedTask.build_model
    monkeypatch.setattr(LoadedTask, "build_model", lambda self, *a, **k: builds.append(1) or real_build(self, *a, **k))
    p = PreparedCache().get(Task.from_source(LINEAR_TASK, name="linear"), "small", "cpu")
    p.prebuild(11)
    p.prebuild(11)
    assert len(builds) == 1
    template = p.template(11)
    assert len(builds) == 1 and p.template(11) is template
    plain, varied = p.model(11), p.model(11, reload_seed=5)
    assert plain is not template and varied is not template and plain is not varied
    expected = p.pristine(11)
    reload_parameters(expected, 5)
    assert torch.equal(varied.lin.weight, expected.lin.weight)
    assert torch.equal(plain.lin.weight, template.lin.weight) and not torch.equal(plain.lin.weight, varied.lin.weight)
    out = p.reference(11, TrialKey(3, "native"), 5)
    assert torch.equal(out.out, expected(*p.loaded.draw_inputs(3, "native")).detach())
    with torch.no_grad():
        plain.lin.weight.add_(1.0)  # a model that ran (and kept state) never reaches the template
    assert not torch.equal(plain.lin.weight, template.lin.weight)
    builds.clear()
    p.use(11)
    p.use(11)  # two evaluations under this seed (a prompt's samples)
    p.forget(11)
    assert p.template(11) is template and p.model(11) is plain  # the other one still runs: kept
    p.forget(11)
    assert p.reference(11, TrialKey(3, "native"), 5) is out  # outputs stay cached
    assert p.model(11) is not plain and len(builds) == 1  # models are rebuilt


def test_parameter_shapes_come_from_the_build_without_a_model_on_the_device(monkeypatch):
    """The grader asks for the shapes outside the GPU gate: from the CPU build, never a device copy."""
    p = PreparedCache().get(Task.from_source(LINEAR_TASK, name="linear"), "small", "cpu")
    monkeypatch.setattr(type(p), "template", lambda *a, **k: (_ for _ in ()).throw(AssertionError("template")))
    monkeypatch.setattr(type(p), "model", lambda *a, **k: (_ for _ in ()).throw(AssertionError("model")))
    params, buffers = p.shapes(3)
    assert params == [[4, 8], [4]] and buffers == []


def test_evaluations_under_one_seed_build_the_reference_once_whoever_asks_first():
    """prebuild builds outside every lock an evaluation inside the gate could wait for; a second
    caller under the same seed waits for that build instead of making its own."""
    import threading

    from drkernel.env.tasks.task import LoadedTask

    p = PreparedCache().get(Task.from_source(LINEAR_TASK, name="linear"), "small", "cpu")
    started, go, builds = threading.Event(), threading.Event(), []
    real = LoadedTask.build_model

    def slow_build(self, *a, **k):
        builds.append(1)
        started.set()
        go.wait(5)
        return real(self, *a, **k)

    LoadedTask.build_model = slow_build
    try:
        got = []
        threads = [threading.Thread(target=lambda: got.append(p.prebuild(21))) for _ in range(3)]
        threads[0].start()
        assert started.wait(5)
        assert p._seed_lock(21).acquire(timeout=1)  # the build holds no stripe lock meanwhile
        p._seed_lock(21).release()
        for t in threads[1:]:
            t.start()
        go.set()
        for t in threads:
            t.join(5)
    finally:
        LoadedTask.build_model = real
    assert len(builds) == 1 and len(got) == 3 and got[0] is got[1] is got[2]


@pytest.mark.slow
def test_evaluate_executes_the_task_once(monkeypatch):
    """Cost (issue 8): the task ran three times plus two reference builds per evaluation."""
    from drkernel.env.config import EvalConfig
    from drkernel.env.conformance import FAST_OPTIONS, HONEST
    from drkernel.env.evaluation import evaluate

    loads, builds = [], []
    real_load, real_build = Task.load, __import__("drkernel.env.tasks.task", fromlist=["LoadedTask"]).LoadedTask.build_model
    monkeypatch.setattr(Task, "load", lambda self, *a, **k: loads.append(1) or real_load(self, *a, **k))
    from drkernel.env.tasks.task import LoadedTask

    monkeypatch.setattr(LoadedTask, "build_model", lambda self, *a, **k: builds.append(1) or real_build(self, *a, **k))
    r = evaluate(PROBE_TASK, HONEST, seed=0, config=EvalConfig(device="cpu").with_overrides(**FAST_OPTIONS))
    assert r.passed and len(loads) == 1 and len(builds) == 1


def test_launch_budget_is_on_by_default_validated_and_sent_with_the_time_request():
    import pytest

    from drkernel.env.config import EvalConfig

    assert EvalConfig().launch_budget_ms == 1.0 and P.TimeRequest([1], [1.0], 0).launch_budget_ms == 1.0
    assert EvalConfig.from_env_yaml({"timing": {"launch_budget_ms": 0.5}}).launch_budget_ms == 0.5
    with pytest.raises(ValueError, match="launch_budget_ms"):
        EvalConfig(launch_budget_ms=-1).validate()
    req = P.TimeRequest(seeds=[1], factors=[1.0], warmup=0, reload_seeds=[3], launch_budget_ms=0.5)
    assert P.decode_request(P.encode_request(req)) == req



def test_spot_questions_are_told_apart_from_replies():
    """A worker asks mid-request whether to keep a timed output; a reply is never mistaken for one."""
    assert P.is_spot_query(json.loads(b'{"v": 5, "op": "spot", "call": 3}'))
    assert not P.is_spot_query(json.loads(P.encode_reply(P.TimeReply())))
    assert not P.is_spot_query([1]) and not P.is_spot_query({"op": "spot", "ok": True})


def test_a_reply_without_the_requests_nonce_is_forged():
    req, nonce = P.decode_envelope(P.encode_request(P.RunRequest(seed=3, distribution="native"), "n0nce"))
    assert req == P.RunRequest(seed=3, distribution="native") and nonce == "n0nce"
    genuine = P.encode_reply(P.RunReply(launches=1), [], nonce)
    assert P.parse_reply(genuine, "run", nonce).ok
    for forged in (P.encode_reply(P.RunReply(launches=1)), P.encode_reply(P.RunReply(launches=1), [], "guess")):
        with pytest.raises(P.ForgedMessage):
            P.parse_reply(forged, "run", nonce)
    assert json.loads(P.spot_query(7, nonce)) == {"v": P.PROTOCOL_VERSION, "op": "spot", "call": 7, "nonce": nonce}


@pytest.mark.parametrize("body", [P.LoadReply(), P.LoadReply(load_s=0.5, buffers_reloaded=False),
                                  P.RunReply(), P.TimeReply(), P.EventsReply()])
def test_every_reply_round_trips_whatever_its_own_fields_say(body):
    """A reply's fields sit beside the envelope's keys: a field named like one (``ok: false``) made a
    successful reply read as a failed request (an earlier precompile report did, on an H100)."""
    envelope = {"v", "op", "ok", "nonce", "findings"}
    assert not envelope & {f.name for f in __import__("dataclasses").fields(body)}
    reply = P.parse_reply(P.encode_reply(body, nonce="n"), body.op, "n")
    assert reply.ok and reply.body == body


def test_the_workers_codec_matches_the_plain_one():
    """The worker's reply encoder and request decoder (built from C functions before the candidate
    loads) produce and read exactly what the plain ones do."""
    import json

    from drkernel.env import protocol as P

    decode, encode = P.worker_codec()
    replies = [P.Hello(ready=True, pid=3, start_parts={"a": 0.5}), P.Failure(stage="timing", error="x\u00e9"),
               P.LoadReply(load_s=0.25, isolation={"k": "v"}), P.RunReply(launches=2, out={"stage": [0, 8]}),
               P.TimeReply(host_ms=[1.0, float("nan")], events=[["k", 1, 2, 7]], spot=[{"call": 1, "out": None}]),
               P.EventsReply(events=[])]
    for body in replies:
        mine = json.loads(encode(body, [["id", "detail"]], "n1"))
        plain = json.loads(P.encode_reply(body, [["id", "detail"]], "n1"))
        assert repr(mine) == repr(plain), (type(body).__name__, mine, plain)
    for req in (P.TimeRequest(seeds=[1, 2], factors=[1.0, 0.5], warmup=1), P.EventsRequest()):
        raw = P.encode_request(req, "nonce7")
        assert decode(raw) == P.decode_envelope(raw)
    for bad in (b"{", b"[1]", b'{"v": 1} x', b"\xff"):
        with pytest.raises(P.ProtocolError):
            decode(bad)
