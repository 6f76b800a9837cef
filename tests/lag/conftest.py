"""One real Ray session (2 CPUs) for every tests/lag module that asks for it; started on first use."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="package")
def ray_session():
    ray = pytest.importorskip("ray")
    if ray.is_initialized():  # another package left its session up: share it, leave it to its owner
        yield ray
        return
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)  # never join another
    yield ray
    ray.shutdown()
