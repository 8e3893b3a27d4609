"""OpenRLHF's remote reward route (``--remote_rm_url http://host/v1/openrlhf/reward?token=...``) on a
real ``drkernel serve``: the request OpenRLHF sends ({"query", "prompts", "labels"}) and the answer
it reads ({"rewards", "scores", "extra_logs"}).

* With the real LocalGrader on the CPU: the bundled solution earns the reward ``/v1/evaluate`` +
  ``drkernel.rewards`` give it, a wrong kernel and a hack 0, a reply without a kernel 0.
* The soak (the echo grader, as in test_exactly_once.py): a batch of 64 is answered with the same
  rewards as ``/v1/evaluate``, exactly once, though the server is SIGKILLed while grading it and
  OpenRLHF's client sends the batch again to the restarted server."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="needs the 'serve' extra")
httpx = pytest.importorskip("httpx", reason="needs the 'serve' extra")

from drkernel.env.result import EvalResult  # noqa: E402
from drkernel.integrations.openrlhf import build_rows, encode_label  # noqa: E402
from drkernel.rewards import compute_reward  # noqa: E402
from drkernel.serve.codec import decode_result  # noqa: E402
from drkernel.serve.openrlhf import EXTRA_LOGS, parse_batch, parse_label, response_text  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
SUITE = REPO / "envs" / "single_ops"
FIX = REPO / "tests" / "env" / "fixtures" / "candidates"
TOKEN = "rm-token"
ECHO = ("--grader", "tests.service.echo_grader:make", "--no-warmup")
NO_TIMING = {"measure_performance": False, "profile": False}


def chat(prompt: str, response: str) -> tuple[str, str]:
    """(query, prompt) as OpenRLHF builds them: the chat-templated prompt, then the decoded response."""
    templated = f"<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n"
    return templated + response + "<|im_end|>", templated


def fenced(code: str) -> str:
    """A reply as a model ends it: the closing fence, then at once its end-of-turn token (chat())."""
    return f"Here is my kernel.\n```python\n{code.strip()}\n```"


def post_like_openrlhf(url: str, payload: dict, tries: int = 30, timeout: float = 180.0) -> dict:
    """OpenRLHF's client: POST the JSON, raise_for_status, retry the same payload on any error."""
    last: Exception | None = None
    for _ in range(tries):
        try:
            r = httpx.post(url, json=payload, timeout=timeout)
            r.raise_for_status()
            return r.json()
        except httpx.HTTPError as exc:
            last = exc
            time.sleep(0.5)
    raise AssertionError(f"no answer after {tries} tries: {last}")


# --------------------------------------------------------------------------- protocol, no server


def test_labels_and_responses_parse_as_openrlhf_sends_them():
    row = build_rows(SUITE, tasks="01_relu", seed=3, options=NO_TIMING)[0]
    assert set(row) == {"prompt", "label"} and row["prompt"][0]["role"] == "user"
    label = parse_label(row["label"])
    assert label.task_name == "01_relu" and label.seed == 3 and label.options == NO_TIMING
    assert label.task_code == (SUITE / "tasks" / "01_relu.py").read_text()
    assert parse_label("class Model: pass").task_code == "class Model: pass"
    assert response_text("PROMPTreply", "PROMPT") == "reply" and response_text("x", "other") == "x"
    assert response_text("P```python\nx = 1\n```<|im_end|><|endoftext|>", "P") == "```python\nx = 1\n```"
    query, prompt = chat("task", fenced("class ModelNew:\n    pass"))
    assert parse_batch({"query": [query], "prompts": [prompt], "labels": ["class Model: pass"]}).samples[0].code \
        == "class ModelNew:\n    pass\n"
    # the prompt's reference code is never taken for the kernel: the response has none
    query, prompt = chat(row["prompt"][0]["content"], "I cannot do it.")
    batch = parse_batch({"query": [query], "prompts": [prompt], "labels": [row["label"]]})
    assert batch.samples[0].code is None
    for bad, message in [({"query": ["q"], "prompts": ["p"]}, "labels must be a list"),
                         ({"query": ["q"], "prompts": ["p"], "labels": ["{oops"]}, "labels\\[0\\]"),
                         ({"query": ["q"], "labels": [json.dumps({"entry_point": "Model"})]}, "no task_code"),
                         ({"query": "q", "labels": ["x"]}, "query must be a list"),
                         ({"query": ["q"], "labels": ["x"], "reward": {"name": "nope"}}, "reward")]:
        with pytest.raises(ValueError, match=message):
            parse_batch(bad)


# --------------------------------------------------------------------------- the real grader


@pytest.mark.slow
def test_route_rewards_match_v1_evaluate_with_the_real_grader(make_server):
    server = make_server("--cpu-fast", "--workers", "2", "--token", TOKEN, "--no-cache").start()
    row = build_rows(SUITE, tasks="01_relu", seed=7, options=NO_TIMING)[0]
    kernels = {"solution": (SUITE / "solutions" / "01_relu.py").read_text(),
               "wrong": (FIX / "wrong" / "relu_identity.py").read_text(),
               "hack": (FIX / "hacks" / "decoy_kernel.py").read_text()}
    pairs = [chat(row["prompt"][0]["content"], fenced(code)) for code in kernels.values()]
    pairs.append(chat(row["prompt"][0]["content"], "no kernel, sorry"))
    payload = {"query": [q for q, _ in pairs], "prompts": [p for _, p in pairs], "labels": [row["label"]] * 4}

    r = httpx.post(server.url + "/v1/openrlhf/reward", json=payload, timeout=30)
    assert r.status_code == 401 and "?token=" in r.json()["detail"]
    answer = post_like_openrlhf(f"{server.url}/v1/openrlhf/reward?token={TOKEN}", payload)

    label = parse_label(row["label"])
    expected = []
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=120) as c:
        for code in kernels.values():
            body = {"task_code": label.task_code, "candidate_code": code.strip() + "\n", "seed": label.seed,
                    "options": label.options, "task_name": label.task_name}
            result = EvalResult.from_dict(decode_result(c.post("/v1/evaluate", json=body).json()))
            expected.append(compute_reward(result))
    assert expected == [0.5, 0.0, 0.0]  # recipe: 0.5 c (no timing: no speedup or coverage term)
    assert answer["rewards"] == expected + [0.0]
    assert answer["scores"] == [1.0, 0.0, 0.0, 0.0]
    assert set(answer["extra_logs"]) == set(EXTRA_LOGS)
    assert answer["extra_logs"]["kernel_hacked"] == [0.0, 0.0, 1.0, 0.0]
    assert answer["extra_logs"]["kernel_has_code"] == [1.0, 1.0, 1.0, 0.0]
    assert answer["job_ids"][3] is None and len(set(answer["job_ids"][:3])) == 3
    # OpenRLHF's own path name answers too (with the header, as a RemoteGrader user would send it)
    again = httpx.post(server.url + "/get_reward", json=payload, headers={"Authorization": f"Bearer {TOKEN}"},
                       timeout=120).json()
    assert again["rewards"] == answer["rewards"] and again["job_ids"] == answer["job_ids"]


# --------------------------------------------------------------------------- the soak


def _soak_batch(n: int) -> dict:
    """``n`` samples over 4 tasks; every third kernel is wrong; one in eight replies has no kernel."""
    queries, prompts, labels = [], [], []
    for i in range(n):
        label = encode_label(f"class Model: pass  # task {i % 4}", task_name=f"t{i % 4}", seed=i)
        body = "no code" if i % 8 == 7 else fenced(
            f"class ModelNew:\n    '{'wrong' if i % 3 == 0 else 'HONEST'} submission {i} SLEEP=0.1 '\n")
        query, prompt = chat(f"write task {i % 4}", body)
        queries.append(query), prompts.append(prompt), labels.append(label)
    return {"query": queries, "prompts": prompts, "labels": labels}


@pytest.mark.slow
def test_a_batch_of_64_is_answered_exactly_once_across_a_server_kill(make_server):
    server = make_server(*ECHO, "--workers", "2", "--no-cache", "--token", TOKEN).start()
    payload = _soak_batch(64)
    url = f"{server.url}/v1/openrlhf/reward?token={TOKEN}"
    answers: list[dict] = []
    client = threading.Thread(target=lambda: answers.append(post_like_openrlhf(url, payload, timeout=60)))
    client.start()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # kill it mid-batch: some samples answered, others queued
        time.sleep(0.2)
        rows = server.job_rows() if (server.state_dir / "jobs.sqlite").exists() else {}
        if sum(s == "done" for s, _ in rows.values()) >= 8:
            break
    server.kill()
    before = server.job_rows()
    assert 0 < sum(s == "done" for s, _ in before.values()) < len(before), before
    server.start()  # the client's retry of the same batch joins the jobs the store re-queued
    client.join(timeout=120)
    assert len(answers) == 1
    answer = answers[0]

    # the same rewards as /v1/evaluate for each sample (echo grader: HONEST passes, 0.5; wrong 0)
    batch = parse_batch(payload)
    expected = []
    with httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60) as c:
        for sample in batch.samples:
            if sample.code is None:
                expected.append(0.0)
                continue
            body = {"task_code": sample.label.task_code, "candidate_code": sample.code, "seed": sample.label.seed,
                    "task_name": sample.label.task_name}
            expected.append(compute_reward(EvalResult.from_dict(decode_result(c.post("/v1/evaluate",
                                                                                    json=body).json()))))
    assert answer["rewards"] == expected
    assert expected.count(0.5) == sum(1 for i in range(64) if i % 8 != 7 and i % 3 != 0)

    # exactly once: one job per sample with a kernel, each answered once; the resent batch (and
    # another resend now) created no job of its own
    ids = [j for j in answer["job_ids"] if j is not None]
    assert len(ids) == len(set(ids)) == 56
    after = server.job_rows()
    assert all(after[j][0] == "done" for j in ids)
    resent = post_like_openrlhf(url, payload)
    assert resent["rewards"] == answer["rewards"] and resent["job_ids"] == answer["job_ids"]
    final = server.job_rows()
    assert len([j for j in final if j.startswith("orm-")]) == 56
    for j in ids:  # answered before the kill: kept, not graded again
        if before.get(j, ("", 0))[0] == "done":
            assert final[j] == before[j]
