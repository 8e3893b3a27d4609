"""The shell entry points stay runnable after files move: tests/gpu/run.sh parses and every file
path it (or a script it calls) names exists; the diagnostics live in tests/benchmarks/diagnostics."""

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ["tests/gpu/run.sh", "tests/gpu/local_train.sh", "tests/gpu/verl/ppo_steps.sh", "tests/gpu/verl/install.sh",
           "tests/gpu/pycache.sh", "tests/gpu/verl/import_cost.sh", "recipes/_train_rl.sh",
           "recipes/sft_coldstart.sh", "examples/quickstart.sh"]
PATH = re.compile(r"(?<![\w/.])((?:tests|envs|examples|recipes|docs)/[\w./-]*\.(?:py|sh|txt|json|yaml))")


@pytest.mark.parametrize("script", SCRIPTS)
def test_script_parses_and_its_paths_exist(script):
    path = ROOT / script
    assert path.is_file(), script
    subprocess.run(["bash", "-n", str(path)], check=True)
    missing = sorted({p for p in PATH.findall(path.read_text()) if not (ROOT / p).exists()})
    assert not missing, f"{script} names files that do not exist: {missing}"


def test_diagnostics_moved_out_of_tests_gpu():
    diagnostics = ["gemm_sweep", "l2_reset_cost", "placement_probe", "spread_diag", "timing_spread", "solution_speed",
                   "service_bench", "agent_refine"]
    for name in diagnostics:
        assert (ROOT / "tests/benchmarks/diagnostics" / f"{name}.py").is_file(), name
        assert not (ROOT / "tests/gpu" / f"{name}.py").exists(), name
    run_sh = (ROOT / "tests/gpu/run.sh").read_text()
    for name in ("timing_spread", "service_bench", "agent_refine", "solution_speed", "gemm_sweep"):  # its stages
        assert f"tests/benchmarks/diagnostics/{name}.py" in run_sh, name
