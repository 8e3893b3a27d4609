"""The agent-loop workers' grader is chosen by drkernel.grader.kind and shared per process."""

from __future__ import annotations

import pytest

pytest.importorskip("verl")

from drkernel.verl.config import DEFAULTS  # noqa: E402
from drkernel.verl.grading import make_grader, shared_grader  # noqa: E402


def test_local_grader_from_settings_and_shared() -> None:
    from drkernel.env.grader import LocalGrader

    settings = {**DEFAULTS["grader"], "device": "cpu", "capacity": 2, "options": {"timing_trials": 3}}
    g = make_grader(settings)
    try:
        assert isinstance(g, LocalGrader) and g.capacity == 2
        assert g.config.device == "cpu" and g.config.timing_trials == 3
    finally:
        g.close()
    assert shared_grader(settings) is shared_grader(dict(settings))


def test_bad_grader_settings() -> None:
    with pytest.raises(ValueError, match="local, ray or http"):
        make_grader({**DEFAULTS["grader"], "kind": "smoke-signals", "device": "cpu"})
    with pytest.raises(ValueError, match="url"):
        make_grader({**DEFAULTS["grader"], "kind": "http", "device": "cpu"})
