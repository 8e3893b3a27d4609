"""The verl.plugins entry point registers drkernel's pieces in a fresh process; drkernel stays light."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("verl")

PROBE = r"""
import json, sys
import verl  # loads the verl.plugins entry points, as in every verl process (Ray actors included)
from verl.trainer.ppo.core_algos import get_adv_estimator_fn
from verl.experimental.agent_loop.agent_loop import _agent_loop_registry
from verl.trainer.ppo.v1 import get_trainer_cls
fn = get_adv_estimator_fn("trloo")
print(json.dumps({
    "estimator": f"{fn.__module__}.{fn.__qualname__}",
    "agent_loop": _agent_loop_registry["drkernel_kernel_agent"]["_target_"],
    "trainer": f"{get_trainer_cls('drkernel_sync').__module__}.{get_trainer_cls('drkernel_sync').__qualname__}",
}))
"""


def test_plugin_registers_in_a_fresh_process() -> None:
    from importlib.metadata import entry_points

    eps = {ep.name: ep.value for ep in entry_points(group="verl.plugins")}
    assert eps.get("drkernel") == "drkernel.verl.plugin"
    env = {k: v for k, v in os.environ.items() if k != "VERL_USE_EXTERNAL_PLUGINS"}
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {
        "estimator": "drkernel.verl.estimator.compute_trloo_advantage",
        "agent_loop": "drkernel.verl.agent_loop.KernelAgentLoop",
        "trainer": "drkernel.verl.trainer.DrKernelPPOTrainer",
    }
    assert "registering" not in out.stderr  # no piece failed to register


def test_import_drkernel_does_not_import_verl() -> None:
    code = ("import sys, drkernel, drkernel.verl, drkernel.verl.config, drkernel.config, drkernel.train; "
            "heavy = [m for m in ('verl', 'ray', 'vllm', 'transfer_queue', 'hydra') if m in sys.modules]; "
            "print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


def test_registration_is_idempotent() -> None:
    from drkernel.verl import agent_loop, estimator, trainer
    from drkernel.verl.plugin import register_all

    before = register_all()
    estimator.register()
    agent_loop.register()
    trainer.register()
    assert register_all() == before == {"adv_estimator": "trloo", "agent_loop": "drkernel_kernel_agent",
                                        "trainer": "drkernel_sync"}
