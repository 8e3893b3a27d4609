"""The worker protocol (typed, versioned JSON) and the grader-side reference cache."""

import json

import pytest
import torch

from drkernel.env import protocol as P
from drkernel.env.conformance import PROBE_TASK
from drkernel.env.prepared import PreparedCache, TrialKey
from drkernel.env.task import Task


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


@pytest.mark.slow
def test_evaluate_executes_the_task_once(monkeypatch):
    """Cost (issue 8): the task ran three times plus two reference builds per evaluation."""
    from drkernel.env.config import EvalConfig
    from drkernel.env.conformance import FAST_OPTIONS, HONEST
    from drkernel.env.evaluation import evaluate

    loads, builds = [], []
    real_load, real_build = Task.load, __import__("drkernel.env.task", fromlist=["LoadedTask"]).LoadedTask.build_model
    monkeypatch.setattr(Task, "load", lambda self, *a, **k: loads.append(1) or real_load(self, *a, **k))
    from drkernel.env.task import LoadedTask

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
