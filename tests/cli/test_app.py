"""The ``drkernel`` parser and its one error convention; ``drkernel eval-kernel``: exit 0 whenever the
evaluation ran, 2 with a one-line reason for bad input."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

FIX = Path(__file__).resolve().parents[1] / "env" / "fixtures"
TASK = FIX / "tasks" / "relu.py"
HONEST = FIX / "candidates" / "honest" / "relu_basic.py"


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "drkernel.cli", *args], capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_eval_kernel_json_pass_and_fail(tmp_path):
    p = cli("eval-kernel", "--task", str(TASK), "--candidate", str(HONEST), "--device", "cpu", "--json", "--seed", "3")
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    for key in ("compiled", "correct", "hacked", "hack_reasons", "speedup", "coverage", "kernel_ms", "reference_ms",
                "error", "feedback"):
        assert key in res
    assert res["passed"] and res["speedup"] > 0 and 0 <= res["coverage"] <= 1
    broken = tmp_path / "broken.py"
    broken.write_text("class ModelNew(:\n")
    p = cli("eval-kernel", "--task", str(TASK), "--candidate", str(broken), "--device", "cpu", "--json")
    assert p.returncode == 0  # the evaluation ran; the verdict is in the result
    res = json.loads(p.stdout)
    assert not res["compiled"] and res["error"]["stage"] == "compile"


def test_eval_kernel_bad_input_exits_2_with_one_line(tmp_path, capsys):
    from drkernel.cli import main

    assert main(["eval-kernel", "--task", str(tmp_path / "missing.py"), "--candidate", str(HONEST)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "task file not found" in err
    bad_task = tmp_path / "task.py"
    bad_task.write_text("import torch\n")  # no Model/get_inputs
    assert main(["eval-kernel", "--task", str(bad_task), "--candidate", str(HONEST), "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not define Model" in err
    assert main(["eval-kernel", "--task", str(TASK), "--candidate", str(tmp_path / "nope.py")]) == 2
    assert "candidate file not found" in capsys.readouterr().err
    not_utf8 = tmp_path / "latin1.py"
    not_utf8.write_bytes(b"# caf\xe9\n")
    assert main(["eval-kernel", "--task", str(TASK), "--candidate", str(not_utf8)]) == 2
    assert "cannot read candidate file" in capsys.readouterr().err


def test_import_drkernel_is_light():
    code = ("import sys, drkernel, drkernel.advantages.trloo, drkernel.env.result; "
            "print(','.join(m for m in ('triton', 'verl', 'vllm', 'ray', 'transformers') if m in sys.modules))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.strip() == "", p.stdout + p.stderr


# -- the parser: one module per command, imported only when it runs ---------------------------------

def test_help_lists_every_command_without_importing_torch():
    code = ("import sys, contextlib, io\n"
            "import drkernel.cli as cli\n"
            "for name in (None, 'eval-kernel', 'bench', 'data'):\n"
            "    cli.build_parser(name)\n"
            "out = io.StringIO()\n"
            "with contextlib.redirect_stdout(out):\n"
            "    try:\n"
            "        cli.main(['--help'])\n"
            "    except SystemExit as exc:\n"
            "        assert exc.code == 0\n"
            "print([m for m in ('torch', 'triton', 'numpy') if m in sys.modules])\n"
            "print(out.getvalue())\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    first, _, help_text = p.stdout.partition("\n")
    assert first == "[]"
    for name in ("eval-kernel", "bench", "data", "train", "serve", "refine"):
        assert f"    {name}" in help_text


def test_python_dash_m_drkernel_runs_the_cli(tmp_path):
    p = subprocess.run([sys.executable, "-m", "drkernel", "eval-kernel", "--task", str(tmp_path / "x.py"),
                        "--candidate", str(HONEST)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and p.stderr.startswith("drkernel eval-kernel: error: task file not found")


COMMAND_MODULE = '''
import argparse
from drkernel.cli import UsageError
from drkernel.env.result import EnvironmentFailure

def add_arguments(parser):
    parser.add_argument("--n", type=int, required=True)
    parser.add_argument("--fail", choices=["usage", "env", "bug"])

def main(args):
    if args.fail == "usage":
        raise UsageError("bad --n\\nsecond line")
    if args.fail == "env":
        raise EnvironmentFailure("no GPU\\nsecond line")
    if args.fail == "bug":
        raise ZeroDivisionError("a bug is a traceback")
    return args.n
'''


@pytest.fixture
def fake_commands(tmp_path, monkeypatch):
    """The command table with a present command (a module on sys.path), a missing one, and one whose
    module needs a package that is not installed."""
    from drkernel.cli import app

    (tmp_path / "fake_cmd_ok.py").write_text(COMMAND_MODULE)
    (tmp_path / "fake_cmd_needs_dep.py").write_text("import no_such_dependency_pkg\n")
    (tmp_path / "fake_cmd_not_a_command.py").write_text("x = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    table = app.COMMANDS + (app.Command("ok", "fake_cmd_ok", "a present command"),
                            app.Command("gone", "drkernel.no_such_package.cli", "a missing one", extra="train"),
                            app.Command("needs", "fake_cmd_needs_dep", "a missing dependency", extra="serve"),
                            app.Command("odd", "fake_cmd_not_a_command", "no add_arguments/main"))
    monkeypatch.setattr(app, "COMMANDS", table)
    return app


def test_lazy_command_delegates_with_the_exit_codes(fake_commands, capsys, monkeypatch):
    main = fake_commands.main
    monkeypatch.delenv("DRKERNEL_DEBUG", raising=False)
    assert main(["ok", "--n", "7"]) == 7
    assert main(["ok", "--n", "1", "--fail", "usage"]) == 2
    assert capsys.readouterr().err == "drkernel ok: error: bad --n\n"
    assert main(["ok", "--n", "1", "--fail", "env"]) == 3
    assert capsys.readouterr().err == "drkernel ok: error: environment failure: no GPU\n"
    assert main(["ok", "--n", "1", "--fail", "bug"]) == 1  # a runtime error: one line, no traceback
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("drkernel ok: error: ZeroDivisionError: a bug is a traceback")
    assert "DRKERNEL_DEBUG=1" in err
    monkeypatch.setenv("DRKERNEL_DEBUG", "1")
    assert main(["ok", "--n", "1", "--fail", "bug"]) == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and err.rstrip().endswith("a bug is a traceback")
    with pytest.raises(SystemExit) as exc:
        main(["ok"])  # its own arguments are parsed: --n is required
    assert exc.value.code == 2


def test_missing_command_module_is_listed_and_exits_2_with_one_line(fake_commands, capsys):
    main = fake_commands.main
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "gone" in out and "a missing one" in out and "needs" in out
    assert main(["gone", "--any", "args", "-x"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "'gone' needs module drkernel.no_such_package.cli" in err and "pip install -e '.[train]'" in err
    assert main(["needs", "--help"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "'needs' needs the package 'no_such_dependency_pkg'" in err and "'.[serve]'" in err
    with pytest.raises(TypeError, match="fake_cmd_not_a_command is not a drkernel command module"):
        main(["odd"])


def test_command_in():
    from drkernel.cli.app import command_in

    assert command_in(["-h"]) is None and command_in(["bench", "--suite", "x"]) == "bench"
    assert command_in(["--", "bench"]) is None


def test_error_classes_map_to_the_documented_exit_codes(capsys):
    from drkernel.cli.common import JobFailed, MissingExtra, ServiceUnavailable, UsageError, run_command

    def raising(exc):
        def run(args):
            raise exc
        return run

    assert run_command("drkernel x", raising(UsageError("bad value")), None) == 2
    assert run_command("drkernel x", raising(MissingExtra("train", "the verl backend", "omegaconf")), None) == 2
    assert run_command("drkernel x", raising(ServiceUnavailable("http://h:1/v1 does not answer")), None) == 3
    assert run_command("drkernel x", raising(JobFailed("2 tasks failed")), None) == 1
    assert run_command("drkernel x", lambda args: None, None) == 0
    lines = capsys.readouterr().err.splitlines()
    assert lines == ["drkernel x: error: bad value",
                     "drkernel x: error: the verl backend needs the 'train' extra (no module 'omegaconf'): "
                     "pip install -e '.[train]'",
                     "drkernel x: error: http://h:1/v1 does not answer",
                     "drkernel x: error: 2 tasks failed"]


def test_the_convention_is_documented():
    from drkernel.cli import common

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    for text in (common.__doc__, readme):
        assert "DRKERNEL_DEBUG=1" in text
        for code in ("0", "1", "2", "3"):
            assert f"\n{code} " in text or f"| {code} |" in text or f"`{code}`" in text, code
