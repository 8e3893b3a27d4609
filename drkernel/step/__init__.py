"""The Dr. Kernel training step: rollout tensors -> masks, rejections, filter, advantages.

``dr_kernel_step(batch, config, state, generator=g) -> (result, new_state)`` applies reference
§0 steps 4-10 in one place for both trainers (local and verl). Needs torch and numpy only.
"""

from .dr_kernel import (
    DrKernelStepConfig,
    ProcessedRows,
    StepBatch,
    StepResult,
    StepState,
    dr_kernel_step,
)
from .layout import TurnRowPacking

__all__ = [
    "DrKernelStepConfig",
    "ProcessedRows",
    "StepBatch",
    "StepResult",
    "StepState",
    "TurnRowPacking",
    "dr_kernel_step",
]
