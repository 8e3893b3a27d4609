"""Tests for drkernel/cli/refine.py and examples/refine_loop.py: usage errors, and (slow) the scripted
run through the real CLI and the real grader on the CPU interpreter, killed and resumed."""

import subprocess
import sys
from pathlib import Path

import pytest

from drkernel.cli.app import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("argv, message", [
    (["--suite", "envs/single_ops"], "one of --base-url"),
    (["--base-url", "http://127.0.0.1:9/v1", "--suite", "envs/single_ops"], "needs --model"),
    (["--base-url", "http://x/v1", "--model", "m"], "exactly one of --suite"),
    (["--base-url", "http://x/v1", "--model", "m", "--task", "missing.py"], "task file not found"),
    (["--base-url", "http://x/v1", "--model", "m", "--suite", "envs/single_ops", "--tasks", "zzz"], "no task"),
    (["--base-url", "http://x/v1", "--model", "m", "--suite", "envs/nope"], "suites: envs/fused_ops, envs/single_ops"),
    (["--base-url", "http://x/v1", "--model", "m", "--task", "t.py", "--tasks", "a"], "--tasks needs --suite"),
    (["--base-url", "http://x/v1", "--model", "m", "--suite", "envs/single_ops", "--max-turns", "2",
      "--remain-turns", "2"], "remain_turns"),
    (["--hf-model", "/nonexistent", "--suite", "envs/single_ops"], "not a model directory"),
])
def test_usage_errors_exit_2(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    assert main(["refine", *argv, "--out", str(tmp_path / "o"), "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and err.startswith("drkernel refine: error: ")
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_scripted_run_real_grader_killed_and_resumed(tmp_path):
    out = tmp_path / "run"
    script = ROOT / "tests/benchmarks/diagnostics/agent_refine.py"
    proc = subprocess.run([sys.executable, str(script), "--device", "cpu",
                           "--tasks", "01_relu,06_hardtanh", "--max-turns", "2", "--iterations", "1",
                           "--remain-turns", "0", "--kill-after", "1", "--out", str(out), "--extra", "--no-timing"],
                          capture_output=True, text=True, timeout=500)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "FAIL" not in proc.stdout and "first run killed with 1 finished turn" in proc.stdout
    # the wrong kernel's feedback is the grader's mismatch statistics
    feedback = (out / "tasks/01_relu/turn_000/feedback.md").read_text()
    assert "output is incorrect" in feedback and "float64 value" in feedback
    assert "no code found" in (out / "tasks/06_hardtanh/turn_000/feedback.md").read_text()
    assert (out / "summary.png").is_file()
