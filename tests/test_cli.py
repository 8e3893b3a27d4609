"""`drkernel eval-kernel`: exit 0 whenever the evaluation ran, 2 with a one-line reason for bad input."""

import json
import subprocess
import sys
from pathlib import Path

FIX = Path(__file__).parent / "env" / "fixtures"
TASK = FIX / "tasks" / "relu.py"
HONEST = FIX / "candidates" / "honest" / "relu_basic.py"


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "drkernel.cli", *args], capture_output=True, text=True, timeout=300)


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


def test_eval_kernel_bad_input_exits_2_with_one_line(tmp_path):
    p = cli("eval-kernel", "--task", str(tmp_path / "missing.py"), "--candidate", str(HONEST))
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "task file not found" in p.stderr
    bad_task = tmp_path / "task.py"
    bad_task.write_text("import torch\n")  # no Model/get_inputs
    p = cli("eval-kernel", "--task", str(bad_task), "--candidate", str(HONEST), "--device", "cpu")
    assert p.returncode == 2 and "does not define Model" in p.stderr
    p = cli("eval-kernel", "--task", str(TASK), "--candidate", str(tmp_path / "nope.py"))
    assert p.returncode == 2 and "candidate file not found" in p.stderr


def test_import_drkernel_is_light():
    code = ("import sys, drkernel, drkernel.advantages.trloo, drkernel.env.result; "
            "print(','.join(m for m in ('triton', 'verl', 'vllm', 'ray', 'transformers') if m in sys.modules))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.strip() == "", p.stdout + p.stderr
