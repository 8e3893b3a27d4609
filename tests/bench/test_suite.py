"""Tests for drkernel/env/tasks/suite.py: loading a suite directory, env.yaml validation, task selection."""

import shutil
from pathlib import Path

import pytest

from drkernel.env.config import EvalConfig
from drkernel.env.tasks.suite import SuiteError, load_suite

MINI = Path(__file__).parent / "fixtures" / "mini_suite"


def _copy_suite(tmp_path: Path) -> Path:
    dst = tmp_path / "suite"
    shutil.copytree(MINI, dst)
    return dst


def test_load_mini_suite():
    suite = load_suite(MINI)
    assert suite.id == "mini_suite-v0"
    assert suite.root == MINI.resolve()
    assert suite.entry_point == "Model"
    assert suite.prompt_template == "triton_kernelbench"
    assert [t.id for t in suite.tasks] == ["01_relu", "02_add", "03_rowsum"]
    assert all(t.solution is not None and t.solution.name == t.filename for t in suite.tasks)
    assert suite.task("02_add").path.name == "02_add.py"
    assert load_suite(MINI / "env.yaml").id == suite.id  # the env.yaml path works too


def test_eval_config_cpu_is_light_and_overrides_win():
    suite = load_suite(MINI)
    cpu = suite.eval_config(device="cpu")
    # env.yaml: 1 trial per distribution, [native, negated]; cpu_fast: 1 warm-up, 3 timed calls
    assert cpu.device == "cpu" and cpu.trials_per_distribution == 1
    assert cpu.distributions == ("native", "negated")
    assert (cpu.warmup, cpu.timing_trials, cpu.spot_checks) == (1, 3, 1)
    full = suite.eval_config(device="cpu", light=False, timing_trials=7, task_size=None)
    assert full.timing_trials == 7 and full.warmup == 1  # warmup 1 comes from env.yaml itself
    cuda = suite.eval_config(device="cuda")
    assert cuda.device == "cuda" and cuda.timing_trials == 3 and cuda.spot_rate == EvalConfig().spot_rate


def test_select_patterns():
    suite = load_suite(MINI)
    assert [t.id for t in suite.select(None)] == ["01_relu", "02_add", "03_rowsum"]
    assert [t.id for t in suite.select("add")] == ["02_add"]  # substring
    assert [t.id for t in suite.select("0[13]_*")] == ["01_relu", "03_rowsum"]  # glob
    assert [t.id for t in suite.select("rowsum, relu")] == ["01_relu", "03_rowsum"]  # suite order kept
    assert suite.select("nothing") == []


def test_task_without_solution_is_allowed(tmp_path):
    root = _copy_suite(tmp_path)
    (root / "solutions" / "02_add.py").unlink()
    (root / "solutions" / "__init__.py").write_text("")  # private files are not tasks/solutions
    suite = load_suite(root)
    assert {t.id: t.solution is not None for t in suite.tasks} == {"01_relu": True, "02_add": False,
                                                                   "03_rowsum": True}
    shutil.rmtree(root / "solutions")
    assert all(t.solution is None for t in load_suite(root).tasks)


def test_missing_directory_and_env_yaml(tmp_path):
    with pytest.raises(SuiteError, match="not found"):
        load_suite(tmp_path / "nope")
    (tmp_path / "tasks").mkdir()
    with pytest.raises(SuiteError, match="no env.yaml"):
        load_suite(tmp_path)


def test_no_tasks(tmp_path):
    root = _copy_suite(tmp_path)
    shutil.rmtree(root / "tasks")
    with pytest.raises(SuiteError, match="no tasks"):
        load_suite(root)


@pytest.mark.parametrize("text, match", [
    ("id: x-v0\nsolutoins: 1\ntolerance: 2\n", r"unknown key\(s\) \['solutoins', 'tolerance'\]"),
    ("id: x-v0\ncorrectness: {atol: 1.0e-4, trails: 3}\n", r"unknown key\(s\) \['trails'\] in 'correctness'"),
    ("id: x-v0\ntiming: {iters: 3}\n", r"unknown key\(s\) \['iters'\] in 'timing'"),
    ("id: x-v0\ntiming: [1, 2]\n", "'timing' must be a mapping"),
    ("description: no id\n", "'id'"),
    ("id: x-v0\nsize_env_var: DRKERNEL_TASK_SIZE\n", "'size_env_var' is no longer an env.yaml key"),
    ("id: x-v0\ncorrectness: {distributions: [native, flipped]}\n", "unknown input distribution"),
    ("id: x-v0\ntiming: {reference_backend: tensorrt}\n", "reference_backend"),
    ("id: [unclosed\n", "not valid YAML"),
    ("- a\n- b\n", "must hold a mapping"),
])
def test_env_yaml_errors(tmp_path, text, match):
    root = _copy_suite(tmp_path)
    (root / "env.yaml").write_text(text)
    with pytest.raises(SuiteError, match=match):
        load_suite(root)


def test_minimal_env_yaml(tmp_path):
    root = _copy_suite(tmp_path)
    (root / "env.yaml").write_text("id: kb-v0\n")
    suite = load_suite(root)
    assert suite.description == ""
    assert suite.prompt_template == "triton_kernelbench"  # the default
