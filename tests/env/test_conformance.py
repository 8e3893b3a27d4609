"""Every executor backend passes the conformance suite (timeouts, output cap, crash isolation, seeds)."""

import pytest

from drkernel.env.conformance import check_executor
from drkernel.env.executors import get_executor, list_executors


@pytest.mark.slow
@pytest.mark.parametrize("name", ["local", "pool"])
def test_executor_conforms(name):
    executor = get_executor(name)
    try:
        results = check_executor(executor)
    finally:
        executor.close()
    failed = [f"{r.name}: {r.message}" for r in results if not r.ok]
    assert not failed, failed
    assert [r.name for r in results] == ["timeout_kills_children", "output_is_capped", "crash_does_not_poison",
                                         "seed_determines_inputs"]


def test_registry_errors():
    assert {"local", "pool"} <= set(list_executors())
    with pytest.raises(KeyError, match="known"):
        get_executor("nope")
