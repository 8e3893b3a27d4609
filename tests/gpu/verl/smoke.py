"""Import check of the verl + vLLM path (run by smoke.sh with env.sh's environment)."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.metadata
import sys
import time
import traceback
from collections import defaultdict

MODULES = [
    # versions first: a failure here explains the rest
    "torch", "transformers", "tokenizers", "ray", "vllm", "verl", "transfer_queue",
    # verl's PPO path (TaskRunner, v1 sync trainer, FSDP engine workers, agent loop, logging)
    "verl.trainer.main_ppo",
    "verl.trainer.ppo.v1.trainer_sync",
    "verl.trainer.ppo.v1.agent_loop_tq",
    "verl.workers.engine_workers",
    "verl.workers.engine.fsdp.transformer_impl",
    "verl.experimental.agent_loop.agent_loop",
    "verl.workers.rollout.vllm_rollout.vllm_async_server",
    "verl.trainer.ppo.v1.replay_buffer",
    "verl.experimental.reward_loop.reward_loop",
    "verl.checkpoint_engine",
    "verl.workers.rollout.vllm_rollout.vllm_rollout",
    "verl.utils.checkpoint.fsdp_checkpoint_manager",
    "verl.utils.tracking",
    "torch.utils.tensorboard",
    # vLLM: the async engine, its engine-core process, the OpenAI server, the GPU worker path
    "vllm.v1.engine.async_llm",
    "vllm.v1.engine.core",
    "vllm.v1.executor.multiproc_executor",
    "vllm.entrypoints.openai.api_server",
    "vllm.v1.worker.gpu_worker",
    "vllm.v1.worker.gpu_model_runner",
    "vllm.model_executor.models.qwen2",
    "vllm.model_executor.models.qwen3",
    "vllm.v1.attention.backends.flash_attn",
    "vllm.v1.sample.sampler",
    "vllm.v1.core.sched.scheduler",
    "vllm.model_executor.model_loader",
    "vllm.model_executor.model_loader.dummy_loader",
    # vLLM's compiled parts against the image's torch/CUDA (these need a GPU machine)
    "vllm._custom_ops",
    "vllm.device_allocator.cumem",
    "vllm.vllm_flash_attn",
    # drkernel's verl integration
    "drkernel.verl.plugin",
    "drkernel.verl.agent_loop",
    "drkernel.verl.trainer",
    "drkernel.train",
]

missing: dict[str, set[str]] = defaultdict(set)


class _Recorder(importlib.abc.MetaPathFinder):
    """Last on sys.meta_path: sees only the imports no other finder could satisfy."""

    def find_spec(self, fullname, path=None, target=None):
        if "." not in fullname:
            frame = sys._getframe(1)
            while frame and frame.f_globals.get("__name__", "").startswith(("importlib", "_frozen_importlib")):
                frame = frame.f_back
            missing[fullname].add(frame.f_globals.get("__name__", "?") if frame else "?")
        return None


def main(argv: list[str]) -> int:
    sys.meta_path.append(_Recorder())
    failed = 0
    for name in argv or MODULES:
        t0 = time.perf_counter()
        try:
            module = importlib.import_module(name)
        except BaseException as exc:  # noqa: BLE001 - report and go on (SystemExit included)
            failed += 1
            where = traceback.extract_tb(exc.__traceback__)[-1]
            print(f"FAIL {name}: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                  f"  [{where.filename}:{where.lineno}]", flush=True)
            continue
        version = getattr(module, "__version__", "") if "." not in name else ""
        print(f"ok   {name} {version} ({time.perf_counter() - t0:.1f} s)", flush=True)
    plugin = sys.modules.get("drkernel.verl.plugin")
    if plugin is not None:
        print(f"drkernel plugin registered: {plugin.REGISTERED}")
        if len(plugin.REGISTERED) != 3:
            failed += 1
            print("FAIL drkernel plugin: expected adv_estimator, agent_loop and trainer")
    eps = [ep.value for ep in importlib.metadata.entry_points(group="verl.plugins")]
    print(f"verl.plugins entry points: {eps}")
    if missing:
        print("looked for and not found (a guarded import is fine; an unguarded one failed above):")
        for name in sorted(missing):
            print(f"  {name:28s} <- {', '.join(sorted(missing[name])[:4])}")
    print(f"smoke: {len(argv or MODULES) - failed} ok, {failed} failed")
    return min(failed, 100)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
