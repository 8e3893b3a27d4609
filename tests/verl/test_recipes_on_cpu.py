"""Every recipe's --dry-run prints the composed config and exits 0 without starting Ray."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("verl")

import yaml  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
RECIPES = {
    "train_14b.sh": ("actor_rollout_ref", "hkust-nlp/drkernel-14b-coldstart"),
    "train_8b.sh": ("actor_rollout_ref", "hkust-nlp/drkernel-8b-coldstart"),
    "sft_coldstart.sh": ("model", "Qwen/Qwen3-8B-Base"),
}


def test_every_recipe_is_tested() -> None:
    assert sorted(p.name for p in (ROOT / "recipes").glob("*.sh") if not p.name.startswith("_")) == sorted(RECIPES)


def test_recipe_dry_runs(tmp_path) -> None:
    # all three at once: each spends most of its time importing verl
    env = {**os.environ, "PYTHON": sys.executable, "PATH": f"{tmp_path}:{os.environ['PATH']}",
           "TRAIN_FILES": "/data/train.parquet", "GRADER_KIND": "http", "GRADER_URL": "http://grader:8000"}
    # a `ray` on PATH that fails loudly: a dry run must never call it
    (tmp_path / "ray").write_text("#!/bin/sh\necho 'ray was called' >&2\nexit 97\n")
    (tmp_path / "ray").chmod(0o755)
    procs = {name: subprocess.Popen(["bash", str(ROOT / "recipes" / name), "--dry-run", "trainer.total_epochs=2"],
                                    cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for name in RECIPES}
    for name, proc in procs.items():
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, f"{name}: {err[-3000:]}"
        cfg = yaml.safe_load(out)
        node, model = RECIPES[name]
        path = cfg["actor_rollout_ref"]["model"]["path"] if node == "actor_rollout_ref" else cfg["model"]["path"]
        assert path == model
        assert cfg["trainer"]["total_epochs"] == 2  # extra arguments are Hydra overrides
        if name.startswith("train_"):
            assert cfg["data"]["train_files"] == "/data/train.parquet"
            assert cfg["drkernel"]["grader"] == {**cfg["drkernel"]["grader"], "kind": "http",
                                                 "url": "http://grader:8000"}
        assert "ray was called" not in err
    assert not list(tmp_path.glob("checkpoints"))  # nothing was written or started


def test_candidates_get_one_cuda_queue_unless_told_otherwise(tmp_path) -> None:
    """The RL recipes forward DRKERNEL_WORKER_CUDA_CONNECTIONS=1 to every Ray process of the job (the
    graders' candidate processes read it); WORKER_CUDA_CONNECTIONS (or the variable itself) sets
    another count, and an empty value leaves CUDA's default (nothing forwarded)."""
    env = {k: v for k, v in os.environ.items() if k not in ("WORKER_CUDA_CONNECTIONS", "DRKERNEL_WORKER_CUDA_CONNECTIONS")}
    env["PYTHON"] = sys.executable
    got = {}
    for name, extra in (("default", {}), ("four", {"WORKER_CUDA_CONNECTIONS": "4"}),
                        ("inherited", {"DRKERNEL_WORKER_CUDA_CONNECTIONS": "2"}), ("off", {"WORKER_CUDA_CONNECTIONS": ""})):
        proc = subprocess.run(["bash", str(ROOT / "recipes" / "train_8b.sh"), "--dry-run"], cwd=tmp_path,
                              env={**env, **extra}, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        env_vars = ((yaml.safe_load(proc.stdout).get("ray_kwargs") or {}).get("ray_init") or {}).get("runtime_env") or {}
        got[name] = (env_vars.get("env_vars") or {}).get("DRKERNEL_WORKER_CUDA_CONNECTIONS")
    assert got == {"default": "1", "four": "4", "inherited": "2", "off": None}
    # the caller's own override of the variable wins (no duplicate key for Hydra to refuse)
    own = "+ray_kwargs.ray_init.runtime_env.env_vars.DRKERNEL_WORKER_CUDA_CONNECTIONS='8'"
    proc = subprocess.run(["bash", str(ROOT / "recipes" / "train_8b.sh"), "--dry-run", own], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert yaml.safe_load(proc.stdout)["ray_kwargs"]["ray_init"]["runtime_env"]["env_vars"][
        "DRKERNEL_WORKER_CUDA_CONNECTIONS"] == "8"
    for bad in ("0", "33", "one"):
        proc = subprocess.run(["bash", str(ROOT / "recipes" / "train_8b.sh"), "--dry-run"], cwd=tmp_path,
                              env={**env, "WORKER_CUDA_CONNECTIONS": bad}, capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and "WORKER_CUDA_CONNECTIONS must be an integer from 1 to 32" in proc.stderr


def test_sft_data_conversion(tmp_path) -> None:
    import json

    import pyarrow.parquet as pq

    from drkernel.verl.sft_data import jsonl_to_parquet

    rec = {"messages": [{"role": "user", "content": "task"}, {"role": "assistant", "content": "a1"},
                        {"role": "user", "content": "feedback"}, {"role": "assistant", "content": "a2"}],
           "task": "01_relu", "turn": 2, "reward": 1.7, "turn_rewards": [0.0, 1.7]}
    src = tmp_path / "sft.jsonl"
    src.write_text(json.dumps(rec) + "\n")
    assert jsonl_to_parquet(src, tmp_path / "sft.parquet") == 1
    rows = pq.read_table(tmp_path / "sft.parquet").to_pylist()
    assert rows[0]["messages"] == rec["messages"] and rows[0]["task"] == "01_relu"
    src.write_text(json.dumps({"messages": rec["messages"][:3]}) + "\n")
    with pytest.raises(ValueError, match="assistant"):
        jsonl_to_parquet(src, tmp_path / "bad.parquet")


def test_a_grader_url_alone_places_grading_on_that_service(tmp_path) -> None:
    """GRADER_URL without GRADER_KIND: the recipe grades over HTTP on the service's GPUs, not inside
    the agent-loop workers on the training GPUs (docs/scaling-14b.md: colocated grading does not
    scale past two GPUs); without a URL it stays local."""
    env = {k: v for k, v in os.environ.items() if k not in ("GRADER_KIND", "GRADER_URL")}
    env["PYTHON"] = sys.executable
    kinds = {}
    for url in ("http://grader:8000", None):
        e = {**env, **({"GRADER_URL": url} if url else {})}
        proc = subprocess.run(["bash", str(ROOT / "recipes" / "train_8b.sh"), "--dry-run"], cwd=tmp_path, env=e,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        kinds[url] = yaml.safe_load(proc.stdout)["drkernel"]["grader"]
    assert kinds["http://grader:8000"]["kind"] == "http" and kinds["http://grader:8000"]["url"] == "http://grader:8000"
    assert kinds[None]["kind"] == "local"
