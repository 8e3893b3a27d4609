"""The integrations import their frameworks lazily: importing the modules (and calling the reward
without TRL) loads none of TRL, transformers, datasets, verifiers, Triton or FastAPI."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("trl", "transformers", "datasets", "verifiers", "triton", "fastapi", "ray", "vllm")


def test_integrations_import_light():
    code = ("import sys\n"
            "import drkernel.integrations, drkernel.integrations.trl, drkernel.integrations.openrlhf\n"
            "import drkernel.serve.openrlhf\n"
            f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
