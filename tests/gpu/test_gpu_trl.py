"""The TRL integration on a GPU: examples/trl_grpo.py's two GRPO steps with the policy on CUDA and
grading on CUDA, and the trainer's rewards of three known kernels equal to ``drkernel eval-kernel
--device cuda`` on them (tests/integrations/test_trl.py's check, run here with device="cuda")."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("trl", reason="needs the 'trl' extra's wheels")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

from tests.integrations.test_trl import _example, two_steps_and_known_rewards  # noqa: E402


@pytest.mark.parametrize("components", [False, True], ids=["total", "components"])
def test_two_grpo_steps_on_the_gpu_and_the_trainers_rewards_match_eval_kernel(components, tmp_path):
    two_steps_and_known_rewards(_example(), components, tmp_path, device="cuda")
