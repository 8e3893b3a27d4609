"""Tests for drkernel/data/build.py and `drkernel data build`: verl RLHFDataset rows, parquet/JSONL."""

import json
import sys
import uuid
from pathlib import Path

import pytest

from drkernel.agent.prompts import render_prompt
from drkernel.cli import main
from drkernel.data.build import build_dataset, build_rows, heldout_path, task_uuid

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

MINI = Path(__file__).parents[1] / "bench" / "fixtures" / "mini_suite"


def test_rows():
    rows = build_rows(MINI)
    assert [r["extra_info"]["task_id"] for r in rows] == ["01_relu", "02_add", "03_rowsum"]
    r = rows[1]
    source = (MINI / "tasks" / "02_add.py").read_text()
    assert r["data_source"] == "mini_suite-v0"
    assert r["ability"] == "kernel_optimization"
    assert r["prompt"] == [{"role": "user", "content": render_prompt("triton_kernelbench", source)}]
    assert r["reward_model"] == {"ground_truth": source, "style": "rule"}
    assert r["extra_info"] == {"task_id": "02_add", "entry_point": "Model", "suite": "mini_suite-v0", "index": 1,
                               "uuid": task_uuid("mini_suite-v0", "02_add", source), "split": "train"}
    assert "agent_name" not in r


def test_uuid_is_stable_and_content_sensitive():
    a = task_uuid("s-v0", "01_relu", "src")
    assert a == task_uuid("s-v0", "01_relu", "src") and uuid.UUID(a).version == 5
    assert len({a, task_uuid("s-v0", "01_relu", "src2"), task_uuid("s-v1", "01_relu", "src"),
                task_uuid("s-v0", "02_add", "src")}) == 4
    assert [r["extra_info"]["uuid"] for r in build_rows(MINI)] == [r["extra_info"]["uuid"] for r in build_rows(MINI)]


def test_parquet_roundtrip(tmp_path):
    out = tmp_path / "d" / "mini.parquet"
    assert build_dataset(MINI, out) == {"train": out}
    table = pq.read_table(out)
    assert table.num_rows == 3
    assert table.column_names == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
    schema = table.schema
    assert schema.field("data_source").type == pa.string()
    assert schema.field("prompt").type == pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))
    assert schema.field("reward_model").type == pa.struct([("ground_truth", pa.string()), ("style", pa.string())])
    extra = schema.field("extra_info").type
    assert [extra.field(i).name for i in range(extra.num_fields)] == ["task_id", "entry_point", "suite", "index",
                                                                     "uuid", "split"]
    assert extra.field("index").type == pa.int64()
    assert table.to_pylist() == build_rows(MINI)


def test_split_and_jsonl(tmp_path):
    out = tmp_path / "mini.jsonl"
    paths = build_dataset(MINI, out, split_test=1, seed=3)
    assert paths == {"train": out, "test": tmp_path / "mini_test.jsonl"} and heldout_path(out) == paths["test"]
    train = [json.loads(line) for line in out.read_text().splitlines()]
    test = [json.loads(line) for line in paths["test"].read_text().splitlines()]
    assert len(train) == 2 and len(test) == 1
    assert {r["extra_info"]["split"] for r in train} == {"train"} and test[0]["extra_info"]["split"] == "test"
    assert sorted(r["extra_info"]["index"] for r in train + test) == [0, 1, 2]
    # the same seed picks the same test task
    again = build_dataset(MINI, tmp_path / "again.jsonl", split_test=1, seed=3)
    assert json.loads(again["test"].read_text())["extra_info"]["task_id"] == test[0]["extra_info"]["task_id"]
    with pytest.raises(ValueError, match="between 1 and 2"):
        build_dataset(MINI, tmp_path / "x.jsonl", split_test=3)


def test_agent_name_column(tmp_path):
    out = build_dataset(MINI, tmp_path / "a.parquet", agent_name="drkernel_agent")["train"]
    assert pq.read_table(out).column("agent_name").to_pylist() == ["drkernel_agent"] * 3


def test_cli(tmp_path, capsys):
    out = tmp_path / "train.parquet"
    assert main(["data", "build", "--suite", str(MINI), "--out", str(out), "--split-test", "1"]) == 0
    assert pq.read_table(out).num_rows == 2 and pq.read_table(tmp_path / "train_test.parquet").num_rows == 1
    assert "wrote test" in capsys.readouterr().out
    assert main(["data", "build", "--suite", str(tmp_path / "missing"), "--out", str(out)]) == 2
    assert "suite directory not found" in capsys.readouterr().err
    assert main(["data", "build", "--suite", str(MINI), "--out", str(tmp_path / "x.csv")]) == 2
    assert main(["data", "build", "--suite", str(MINI), "--out", str(out), "--template", "nope"]) == 2
    assert "unknown prompt template" in capsys.readouterr().err


def test_missing_pyarrow_names_the_extra(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow -> ImportError
    assert main(["data", "build", "--suite", str(MINI), "--out", str(tmp_path / "x.parquet")]) == 2
    err = capsys.readouterr().err
    assert "pip install drkernel[bench]" in err and len(err.strip().splitlines()) == 1
    # JSONL needs nothing extra
    assert main(["data", "build", "--suite", str(MINI), "--out", str(tmp_path / "x.jsonl")]) == 0
