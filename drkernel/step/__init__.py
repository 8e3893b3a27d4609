"""The Dr. Kernel training step: rollout tensors -> masks, rejections, filter, advantages.

``dr_kernel_step(batch, config, state, generator=g) -> (result, new_state)`` applies reference
§0 steps 4-10 in one place for both trainers (local and verl). Needs torch and numpy only.
``TrainerBackend`` (``drkernel.step.backend``) is what each trainer supplies around it, and
``run_training_step(backend, config, state)`` the one training step built on it.
"""

from .dr_kernel import (
    DrKernelStepConfig,
    ProcessedRows,
    StepBatch,
    StepResult,
    StepState,
    dr_kernel_step,
)
from .backend import StepOutcome, TrainerBackend, batch_turn_metrics, run_training_step
from .layout import TurnRowPacking

__all__ = [
    "DrKernelStepConfig",
    "ProcessedRows",
    "StepBatch",
    "StepResult",
    "StepOutcome",
    "StepState",
    "TrainerBackend",
    "TurnRowPacking",
    "batch_turn_metrics",
    "dr_kernel_step",
    "run_training_step",
]
