"""Sequential test-time scaling: the best kernel a model reaches by revising it over turns.

    # against any OpenAI-compatible server (e.g. `vllm serve Qwen/Qwen3-8B`)
    python examples/refine_loop.py --base-url http://localhost:8000/v1 --model Qwen/Qwen3-8B \
        --suite envs/single_ops --max-turns 5 --iterations 10 --remain-turns 4 --select best --out runs/tts
    # or a local Hugging Face model
    python examples/refine_loop.py --hf-model /path/to/model --task my_task.py --device cuda --out runs/one

Same as `drkernel refine ...` (drkernel/cli/refine.py; the logic lives in drkernel.agent: scaling,
episode), with the same exit codes. Rerun the same command to continue a killed run; see --help for
every option.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from drkernel.cli.refine import run  # noqa: E402

if __name__ == "__main__":
    sys.exit(run(prog="refine_loop.py"))
