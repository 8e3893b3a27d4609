"""``drkernel train``: the local trainer's flags (one per TrainConfig field), the backends, and the
new-user trips (unknown suite or tasks, --tasks without --suite, the verl backend without its extra,
the deprecated --local)."""

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from drkernel.cli import train as cli
from drkernel.cli.app import main

ROOT = Path(__file__).resolve().parents[2]


def _parse(argv):
    parser = argparse.ArgumentParser()
    cli.add_arguments(parser)
    return parser.parse_args(argv)


def _one_error_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("drkernel train: error: "), err
    return lines[0]


def test_flags_cover_the_config_and_parse_types():
    args = _parse(["--suite", "envs/single_ops", "--max-steps", "3", "--device", "cpu", "--out", "x",
                   "--lr", "1e-4", "--no-mrs", "--lora", "--target-groups", "none", "--grade-profile", "true"])
    assert args.backend == "local" and args.suite == "envs/single_ops" and args.max_steps == 3 and args.lr == 1e-4
    assert args.mrs is False and args.lora is True and args.target_groups is None and args.grade_profile is True


def test_help_text_comes_from_the_field_docstrings(capsys):
    with pytest.raises(SystemExit):
        _parse(["--help"])
    out = capsys.readouterr().out
    assert "--max-steps N" in out and "Advantage estimator by registry name" in out and "--backend" in out


def test_bad_values_exit_2_with_one_line(capsys, tmp_path):
    assert main(["train", "--env", "toy", "--estimator", "nope", "--out", str(tmp_path)]) == 2
    assert "unknown advantage estimator" in _one_error_line(capsys.readouterr().err)
    assert main(["train", "--env", "toy", "lr=3"]) == 2  # a Hydra override without --backend verl
    assert "need --backend verl" in _one_error_line(capsys.readouterr().err)


def test_unknown_suite_exits_2_naming_it_and_the_suites(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(["train", "--suite", "envs/single_op", "--max-steps", "1"]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "envs/single_op:" in line and "envs/single_ops" in line and "envs/fused_ops" in line


def test_unknown_tasks_exit_2_naming_the_bad_part_and_the_tasks(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(["train", "--suite", "envs/single_ops", "--tasks", "01_relu,zz_typo", "--max-steps", "1"]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "'zz_typo'" in line and "single_ops" in line and "01_relu" in line and "28_index_select" in line


def test_tasks_without_suite_exit_2(capsys, tmp_path):
    # before: trained the toy task silently
    assert main(["train", "--tasks", "01_relu", "--max-steps", "1", "--out", str(tmp_path / "o")]) == 2
    assert "--tasks needs --suite" in _one_error_line(capsys.readouterr().err)
    assert not (tmp_path / "o").exists()


def test_local_is_a_deprecated_no_op(capsys, tmp_path):
    assert main(["train", "--local", "--env", "toy", "--dry-run", "--out", str(tmp_path / "o")]) == 0
    captured = capsys.readouterr()
    notes = [line for line in captured.err.splitlines() if line]
    assert len(notes) == 1 and notes[0].startswith("drkernel train: note: --local is deprecated")
    assert '"env": "toy"' in captured.out
    assert main(["train", "--env", "toy", "--dry-run"]) == 0
    assert "deprecated" not in capsys.readouterr().err
    assert main(["train", "--local", "--backend", "verl"]) == 2
    _one_error_line(capsys.readouterr().err)


def test_local_dry_run_prints_the_config_and_trains_nothing(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    out = tmp_path / "run"
    assert main(["train", "--suite", "envs/single_ops", "--tasks", "01_relu", "--dry-run", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert '"suite": "envs/single_ops"' in text and '"env": "suite"' in text and not out.exists()


def test_verl_backend_rejects_local_flags(capsys):
    assert main(["train", "--backend", "verl", "--lr", "3", "--dry-run"]) == 2
    assert "--lr" in _one_error_line(capsys.readouterr().err)


SIMULATE_NO_TRAIN_EXTRA = (
    "import sys\n"
    "for name in ('omegaconf', 'hydra', 'verl'):\n"
    "    sys.modules[name] = None  # import raises ModuleNotFoundError, as without the extra\n"
    "sys.argv = [sys.argv[0], *sys.argv[1:]]\n"
    "import runpy\n"
    "runpy.run_module(sys.argv.pop(1), run_name='__main__', alter_sys=True)\n")


@pytest.mark.parametrize("argv", [["drkernel.train", "--dry-run"],
                                  ["drkernel", "train", "--backend", "verl", "--dry-run", "trainer.total_epochs=1"]])
def test_verl_dry_run_without_the_train_extra_exits_2_naming_it(argv):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("DRKERNEL_DEBUG", None)
    p = subprocess.run([sys.executable, "-c", SIMULATE_NO_TRAIN_EXTRA, *argv], capture_output=True, text=True,
                       timeout=120, cwd=ROOT, env=env)
    assert p.returncode == 2, p.stderr
    line = _one_error_line(p.stderr)
    assert "'train' extra" in line and "pip install -e '.[train]'" in line and p.stdout == ""


def test_python_dash_m_drkernel_train_is_the_verl_backend():
    from drkernel import train

    assert "alias of ``drkernel train --backend verl``" in train.__doc__
    assert callable(train.compose) and callable(train.check_config)  # re-exported for old imports


def test_verl_backend_hands_the_hydra_arguments_through(monkeypatch):
    from drkernel.verl import launch

    calls = []
    monkeypatch.setattr(launch, "dry_run", lambda argv: calls.append(("dry", list(argv))) or 0)
    monkeypatch.setattr(launch, "hydra_main", lambda argv: calls.append(("run", list(argv))) or 0)
    hydra_args = ["--config-name=drkernel_sft", "trainer.total_epochs=2", "+x.y=1", "~z", "data.train_files=a b"]
    assert main(["train", "--backend", "verl", "--dry-run", *hydra_args]) == 0
    assert main(["train", "--backend", "verl", "--cfg", "job", "a=1"]) == 0
    assert calls == [("dry", hydra_args), ("run", ["--cfg", "job", "a=1"])]


def test_split_config_args():
    from drkernel.verl.launch import DEFAULT_CONFIG, split_config_args

    assert split_config_args(["a=1"]) == (DEFAULT_CONFIG, None, ["a=1"])
    assert split_config_args(["--config-name", "x", "-cp=/c", "b=2"]) == ("x", "/c", ["b=2"])
    with pytest.raises(ValueError):
        split_config_args(["--config-name"])
