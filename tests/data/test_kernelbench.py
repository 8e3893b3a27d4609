"""Tests for drkernel/data/kernelbench.py and `drkernel data import-kernelbench`, on a fake checkout."""

from pathlib import Path

import pytest
import yaml

from drkernel.cli import main
from drkernel.data.kernelbench import COPYRIGHT, KernelBenchImportError, import_kernelbench
from drkernel.env.tasks.suite import load_suite
from drkernel.env.tasks.task import Task

TASK = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """{doc}"""
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return []
'''


def _fake_checkout(root: Path, nested: bool = True) -> Path:
    base = root / "KernelBench" if nested else root
    files = {
        "level1": ["1_Square_matrix_multiplication_.py", "19_ReLU.py", "100_HingeLoss.py"],
        "level2": ["1_Conv2D_ReLU_BiasAdd.py"],
        "level4": ["1_deepseek-ai_deepseek-coder-6.7b-base_bs1.py"],
    }
    for level, names in files.items():
        (base / level).mkdir(parents=True)
        for name in names:
            (base / level / name).write_text(TASK.format(doc=name))
    (base / "level1" / "helpers.py").write_text("x = 1\n")  # not N_Name.py: skipped
    (base / "level2" / "7_NoModel.py").write_text("def get_inputs():\n    return []\n")  # no Model: skipped
    if nested:
        (root / "LICENSE").write_text(f"MIT License\n\n{COPYRIGHT}\n\nPermission is hereby granted ...\n")
    return root


def test_import_default_levels(tmp_path):
    src = _fake_checkout(tmp_path / "kb")
    out = tmp_path / "envs" / "kernelbench"
    report = import_kernelbench(src, out)
    assert report.levels == [1, 2]  # default 1 2 3, level 3 absent; level 4 only on request
    assert report.tasks == {1: 3, 2: 1} and report.suite_id == "kernelbench-v0"
    assert len(report.skipped) == 2
    suite = load_suite(out)  # env.yaml passes validation
    assert suite.id == "kernelbench-v0" and "size_env_var" not in suite.config
    assert [t.id for t in suite.tasks] == ["l1_001_Square_matrix_multiplication", "l1_019_ReLU",
                                           "l1_100_HingeLoss", "l2_001_Conv2D_ReLU_BiasAdd"]
    assert all(t.solution is None for t in suite.tasks)
    cfg = suite.eval_config(device="cuda")
    assert cfg.distributions == ("native",) and cfg.trials_per_distribution == 5 and cfg.timing_trials == 100
    # every task keeps the notice and still loads
    relu = suite.task("l1_019_ReLU").path.read_text()
    assert relu.startswith("# From KernelBench level1/19_ReLU.py") and COPYRIGHT in relu.splitlines()[1]
    assert relu.endswith(TASK.format(doc="19_ReLU.py"))
    Task.from_file(suite.task("l1_019_ReLU").path).load("full")
    notice = (out / "NOTICE.md").read_text()
    assert COPYRIGHT in notice and "MIT License" in notice and "Permission is hereby granted" in notice
    assert (out / "LICENSE.KernelBench").read_text().startswith("MIT License")  # copied from the checkout
    assert "drkernel bench --suite" in (out / "README.md").read_text()
    assert yaml.safe_load((out / "env.yaml").read_text())["prompt_template"] == "triton_kernelbench"


def test_flat_layout_explicit_levels_and_id(tmp_path):
    src = _fake_checkout(tmp_path / "kb", nested=False)
    report = import_kernelbench(src, tmp_path / "out", [4], suite_id="kb_l4-v1")
    assert report.tasks == {4: 1}
    assert [t.id for t in load_suite(tmp_path / "out").tasks] == ["l4_001_deepseek_ai_deepseek_coder_6_7b_base_bs1"]
    # no LICENSE in the checkout: the standard MIT text with KernelBench's copyright is written
    assert COPYRIGHT in (tmp_path / "out" / "LICENSE.KernelBench").read_text()


def test_errors(tmp_path):
    src = _fake_checkout(tmp_path / "kb")
    with pytest.raises(KernelBenchImportError, match="not found"):
        import_kernelbench(tmp_path / "missing", tmp_path / "o")
    (tmp_path / "empty").mkdir()
    with pytest.raises(KernelBenchImportError, match="no KernelBench/level"):
        import_kernelbench(tmp_path / "empty", tmp_path / "o")
    with pytest.raises(KernelBenchImportError, match=r"level\(s\) \[3\] not found"):
        import_kernelbench(src, tmp_path / "o", [1, 3])
    import_kernelbench(src, tmp_path / "o", [1])
    with pytest.raises(KernelBenchImportError, match="not empty"):
        import_kernelbench(src, tmp_path / "o", [2])
    report = import_kernelbench(src, tmp_path / "o", [2], force=True)  # replaces tasks/
    assert [t.id for t in load_suite(tmp_path / "o").tasks] == ["l2_001_Conv2D_ReLU_BiasAdd"]
    assert report.n_tasks == 1


def test_cli(tmp_path, capsys):
    src = _fake_checkout(tmp_path / "kb")
    out = tmp_path / "suite"
    assert main(["data", "import-kernelbench", str(src), "--out", str(out), "--levels", "1", "2"]) == 0
    assert "4 tasks (level1: 3, level2: 1)" in capsys.readouterr().out
    assert main(["data", "import-kernelbench", str(tmp_path / "nope"), "--out", str(out)]) == 2
    assert "KernelBench directory not found" in capsys.readouterr().err
    # the imported suite builds into data
    assert main(["data", "build", "--suite", str(out), "--out", str(tmp_path / "kb.jsonl")]) == 0
