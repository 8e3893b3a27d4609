"""drkernel's ``verl.plugins`` entry point (declared in setup.py).

``import verl`` loads every entry point of the ``verl.plugins`` group in every process it runs in
(TaskRunner, agent-loop workers, FSDP workers, reward workers), because verl's registries are
filled per process. Loading this module registers:

- the ``trloo`` advantage estimator (``algorithm.adv_estimator=trloo``), :mod:`drkernel.verl.estimator`;
- the ``drkernel_kernel_agent`` agent loop (``actor_rollout_ref.rollout.agent.default_agent_loop``),
  :mod:`drkernel.verl.agent_loop`;
- the ``drkernel_sync`` trainer (``trainer.v1.trainer_mode``), :mod:`drkernel.verl.trainer`.

verl swallows plugin exceptions at DEBUG level, so each registration is tried on its own and a
failure is logged as a warning here (one broken piece must not hide the others). Set
``VERL_USE_EXTERNAL_PLUGINS=none`` to switch all plugins off, or list ``drkernel`` among others.
"""

from __future__ import annotations

import logging

logger = logging.getLogger(__name__)

REGISTERED: dict[str, str] = {}
"""What this process registered: ``{"adv_estimator": "trloo", ...}`` (a test reads it)."""


def _try(kind: str, name: str, fn) -> None:
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - verl would swallow it silently
        logger.warning("drkernel verl plugin: registering %s %r failed: %s: %s", kind, name, type(exc).__name__, exc)
    else:
        REGISTERED[kind] = name


def register_all() -> dict[str, str]:
    """Register the estimator, the agent loop and the trainer with verl (idempotent)."""
    from drkernel.verl import estimator

    _try("adv_estimator", estimator.ESTIMATOR_NAME, estimator.register)

    def agent_loop() -> None:
        from drkernel.verl import agent_loop as module

        module.register()

    _try("agent_loop", "drkernel_kernel_agent", agent_loop)

    def trainer() -> None:
        from drkernel.verl import trainer as module

        module.register()

    _try("trainer", "drkernel_sync", trainer)
    return dict(REGISTERED)


register_all()
