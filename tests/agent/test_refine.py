"""Tests for drkernel/agent/scaling.py and the OpenAI backend: multi-turn runs over several tasks,
driven by a real OpenAI-compatible HTTP server on loopback that replays scripted replies, graded by
a synthetic environment whose verdicts are known, so every summary number can be checked by hand."""

import asyncio
import json

import pytest

from drkernel.agent.episode import EpisodeConfig
from drkernel.agent.openai_backend import GenerationError, OpenAIGenerate
from drkernel.agent.scaling import RunDir, ScalingConfig, format_table, refine, select_turns
from drkernel.agent.sft import export_sft, sft_records
from drkernel.env.tasks.task import Task
from tests.agent.marker_scorer import MarkerScorer, kernel
from tests.agent.scripted_server import ScriptedServer, fenced, kernel_policy


def task(name: str) -> Task:
    src = (f"import torch\n# TASK-{name}\n\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
           f"        return x\n\n\ndef get_inputs():\n    return [torch.randn(4)]\n\n\ndef get_init_inputs():\n"
           f"    return []\n")
    return Task.from_source(src, name=name)


# A: wrong, then 1.5x, then 2.0x.  B: no code, then a compile error, then 0.8x (twice).
# C: a hack, then 1.2x, then a reply without code (a regression after success).
SCRIPT = {
    "TASK-A": {"first": fenced(kernel(verdict_="wrong")), "after_incorrect": fenced(kernel(1.5)),
               "after_correct": fenced(kernel(2.0))},
    "TASK-B": {"first": "I would fuse the loads, but let me think more first.",
               "after_no_code": fenced(kernel(verdict_="compile_error")), "after_compile": fenced(kernel(0.8)),
               "after_correct": fenced(kernel(0.8))},
    "TASK-C": {"first": fenced(kernel(verdict_="hack")), "after_hack": fenced(kernel(1.2)),
               "after_correct": "Done, the previous kernel is final."},
}


def run(tasks, scorer, url, out=None, *, scaling=None, max_retries=0, **kw):
    gen = OpenAIGenerate(url, "scripted", api_key="test", timeout=10, max_retries=max_retries)
    return asyncio.run(refine(tasks, gen, scorer, EpisodeConfig(max_turns=(scaling or ScalingConfig()).max_turns),
                              scaling or ScalingConfig(max_turns=3), out, progress=False, **kw))


@pytest.fixture()
def server():
    with ScriptedServer(kernel_policy(SCRIPT)) as s:
        yield s


def test_three_tasks_concurrently_summary_by_hand(server, tmp_path):
    scorer = MarkerScorer(capacity=2, delay_s=0.05)
    report = run([task("A"), task("B"), task("C")], scorer, server.url, tmp_path / "run",
                 generation_concurrency=3)
    assert report.errors == {}
    assert len(server.requests) == 9
    assert len(scorer.calls) == 7  # B turn 1 and C turn 3 have no code: nothing graded
    assert scorer.peak == 2  # bounded by the grader's capacity, and episodes really overlapped
    a, b, c = report.trajectories
    assert [t.status for t in b.turns] == ["no_code", "graded", "graded"]
    assert "no code found" in b.turns[0].feedback and b.turns[0].reward == 0.0
    # recipe reward: 0.5 c + 0.5 c min(s, 3) + 0.5 c cov (coverage 1.0 here)
    assert a.turn_rewards == pytest.approx([0.0, 0.5 + 0.75 + 0.5, 0.5 + 1.0 + 0.5])
    assert c.turn_rewards == pytest.approx([0.0, 0.5 + 0.6 + 0.5, 0.0])
    assert c.turn_mask == [True, True, False]  # regression after a success is not trained
    assert b.turn_mask == [True, True, True]
    # the code span points at the code inside the reply
    t = a.turns[1]
    assert t.reply[t.code_span[0]:t.code_span[1]].strip() == t.code.strip()
    # the feedback turn carries the verdict, never the reward
    assert "output is incorrect" in a.turns[0].feedback and "reward" not in a.turns[0].feedback.lower()

    s = report.summary
    # turn 1: A wrong, B no code, C hacked
    assert s["per_turn"][0] == {"turn": 1, "num_tasks": 3, "correct_rate": 0.0, "fast@1": 0.0, "fast@1.2": 0.0,
                                "hack_rate": pytest.approx(1 / 3), "mean_speedup": None,
                                "no_code_rate": pytest.approx(1 / 3)}
    # turn 2: A 1.5x, B compile error, C 1.2x
    p2 = s["per_turn"][1]
    assert (p2["correct_rate"], p2["fast@1"], p2["fast@1.2"], p2["hack_rate"]) == pytest.approx((2 / 3, 2 / 3, 2 / 3, 0))
    assert p2["mean_speedup"] == pytest.approx(1.35)
    # turn 3: A 2.0x, B 0.8x, C no code
    p3 = s["per_turn"][2]
    assert (p3["correct_rate"], p3["fast@1"], p3["fast@1.2"]) == pytest.approx((2 / 3, 1 / 3, 1 / 3))
    assert p3["mean_speedup"] == pytest.approx(1.4)
    # best candidate per task: A 2.0 (turn 3), B 0.8 (turn 3), C 1.2 (turn 2)
    best = s["best"]
    assert (best["correct_rate"], best["fast@1"], best["fast@1.2"], best["hack_rate"]) == pytest.approx((1, 2 / 3, 2 / 3, 0))
    assert best["mean_speedup"] == pytest.approx(4 / 3)
    assert {k: v["best_turn"] for k, v in s["tasks"].items()} == {"A": 3, "B": 3, "C": 2}
    assert s["best_by_turn"][1]["correct_rate"] == pytest.approx(2 / 3)

    out = tmp_path / "run"
    assert json.loads((out / "summary.json").read_text())["best"]["fast@1.2"] == pytest.approx(2 / 3)
    assert (out / "summary.png").stat().st_size > 1000
    assert (out / "tasks/A/turn_001/kernel.py").read_text().startswith("import torch")
    assert json.loads((out / "tasks/A/turn_000/result.json").read_text())["correct"] is False
    assert "no code found" in (out / "tasks/B/turn_000/feedback.md").read_text()
    assert not (out / "tasks/B/turn_000/kernel.py").exists()
    assert len(RunDir(out).load_trajectories()) == 3
    table = format_table(s)
    assert "best" in table and "fast@1.2" in table


def test_sft_export_filters_by_reward(server, tmp_path):
    report = run([task("A"), task("B"), task("C")], MarkerScorer(), server.url)
    path = tmp_path / "sft.jsonl"
    assert export_sft(report.trajectories, path, min_reward=1.5) == 2  # A (2.0) and C (1.6); B's best is 1.4
    recs = [json.loads(line) for line in path.read_text().splitlines()]
    by_task = {r["task"]: r for r in recs}
    a = by_task["A"]
    assert a["turn"] == 3 and a["reward"] == pytest.approx(2.0)
    roles = [m["role"] for m in a["messages"]]
    assert roles == ["user", "assistant", "user", "assistant", "user", "assistant"]
    assert "# speedup: 2.0" in a["messages"][-1]["content"]
    assert a["turn_rewards"] == pytest.approx([0.0, 1.75, 2.0])
    assert len(list(sft_records(report.trajectories, min_reward=0.0, per_trajectory="all"))) == 4  # A t2, A t3, B t3, C t2
    assert export_sft(report.trajectories, path, min_reward=3.0) == 0


def test_select_best_versus_last(tmp_path):
    # 2.0x first; after a correct kernel the model stops writing code; after no code it writes a
    # wrong kernel; after a wrong one, 1.1x. What it sees (the kept turn) decides what it writes.
    script = {"TASK-S": {"first": fenced(kernel(2.0)), "after_correct": "I am happy with it.",
                         "after_no_code": fenced(kernel(verdict_="wrong")), "after_incorrect": fenced(kernel(1.1))}}
    scaling = dict(max_turns=2, iterations=3, remain_turns=1)
    assert ScalingConfig(**scaling).total_turns == 4  # M + (I - 1)(M - R)
    with ScriptedServer(kernel_policy(script)) as srv:
        last = run([task("S")], MarkerScorer(), srv.url, scaling=ScalingConfig(**scaling, select="last"))
        best = run([task("S")], MarkerScorer(), srv.url, scaling=ScalingConfig(**scaling, select="best"))
    lt, bt = last.trajectories[0], best.trajectories[0]
    assert [t.status for t in lt.turns] == ["graded", "no_code", "graded", "graded"]
    assert [t.speedup for t in lt.turns] == [2.0, None, None, 1.1]
    assert [t.status for t in bt.turns] == ["graded", "no_code", "no_code", "no_code"]
    # best keeps turn 1 (the 2.0x kernel) as the context of turns 3 and 4: first prompt + that turn
    for t in bt.turns[2:]:
        assert [m["role"] for m in t.prompt] == ["user", "assistant", "user"]
        assert t.prompt[1]["content"] == bt.turns[0].reply
    # last keeps the previous turn
    assert lt.turns[3].prompt[1]["content"] == lt.turns[2].reply
    # either way the best candidate over all turns is the 2.0x kernel of turn 1
    assert last.summary["tasks"]["S"]["best_turn"] == best.summary["tasks"]["S"]["best_turn"] == 1
    assert last.summary["best"]["fast@1.2"] == 1.0


def test_select_turns_individual_best_not_window():
    from drkernel.agent.types import Turn

    turns = [Turn(index=i, prompt=[], reply=str(i), code=None, code_span=None, result=None, reward=r, feedback="")
             for i, r in enumerate([0.9, 0.0, 0.0, 1.2, 0.0])]
    assert [t.index for t in select_turns(turns, 2, "best")] == [0, 3]  # a window would take 2 adjacent turns
    assert [t.index for t in select_turns(turns, 2, "last")] == [3, 4]
    assert select_turns(turns, 0, "best") == []
    with pytest.raises(ValueError, match="remain_turns"):
        ScalingConfig(max_turns=2, remain_turns=2)


def test_server_down_keeps_finished_turns_and_resume_continues(tmp_path):
    out = tmp_path / "run"
    tasks = [task("A"), task("C")]
    scorer1 = MarkerScorer()
    with ScriptedServer(kernel_policy(SCRIPT), fail_after=3) as srv:
        report = run(tasks, scorer1, srv.url, out, max_retries=1)
    assert set(report.errors) == {"A", "C"}
    assert all("GenerationError" in e and "retries" in e and "503" in e for e in report.errors.values())
    done = sorted(out.glob("tasks/*/turn_*/turn.json"))
    assert len(done) == 3  # the three answered requests became finished turns
    mtimes = {p: p.stat().st_mtime_ns for p in done}
    assert not list(out.glob("tasks/*/trajectory.json"))  # incomplete tasks

    scorer2 = MarkerScorer()
    with ScriptedServer(kernel_policy(SCRIPT)) as srv:
        report2 = run(tasks, scorer2, srv.url, out)
        assert len(srv.requests) == 3  # only the missing turns are generated
    assert report2.errors == {} and report2.replayed_turns == 3
    graded_before = len(scorer1.calls)
    assert graded_before + len(scorer2.calls) == 5  # A: 3 graded, C: 2 graded; none graded twice
    assert {p: p.stat().st_mtime_ns for p in done} == mtimes  # finished turns untouched
    a, c = report2.trajectories
    assert a.turn_rewards == pytest.approx([0.0, 1.75, 2.0])
    assert c.turn_mask == [True, True, False]

    # a rerun of a finished run generates nothing; other settings are refused
    with ScriptedServer(kernel_policy(SCRIPT)) as srv:
        report3 = run(tasks, MarkerScorer(), srv.url, out)
        assert srv.requests == [] and report3.replayed_turns == 6
        with pytest.raises(ValueError, match="max_turns"):
            run(tasks, MarkerScorer(), srv.url, out, scaling=ScalingConfig(max_turns=4))
        # --overwrite starts over: the old turns are gone, everything is generated again
        report4 = run(tasks, MarkerScorer(), srv.url, out, scaling=ScalingConfig(max_turns=2), overwrite=True)
        assert report4.replayed_turns == 0 and len(srv.requests) == 4
        assert len(list(out.glob("tasks/*/turn_*/turn.json"))) == 4


def test_unreachable_server_fails_clearly():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    for backend in ("openai", "http"):
        gen = OpenAIGenerate(f"http://127.0.0.1:{port}/v1", "m", timeout=2, max_retries=1, backend=backend)
        with pytest.raises(GenerationError, match=f"127.0.0.1:{port}.*after 1 retries"):
            asyncio.run(gen([{"role": "user", "content": "hi"}]))


def test_http_fallback_backend_talks_to_the_server(server):
    gen = OpenAIGenerate(server.url, "scripted", backend="http", max_retries=0, temperature=0.5)
    reply = asyncio.run(gen([{"role": "user", "content": "# TASK-A"}], max_tokens=7))
    assert "verdict: wrong" in reply.text and reply.finish_reason == "stop" and reply.usage["completion_tokens"] > 0
    assert server.requests[-1]["temperature"] == 0.5 and server.requests[-1]["max_tokens"] == 7
