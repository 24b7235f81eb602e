"""The ``ray`` suite's shared pieces: one local Ray instance per session, sized for 2 CPUs.

Every test here is marked ``ray``; the whole directory is skipped, with one line saying
why, when Ray is not importable (the ``ray`` extra is not installed).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tether.fleet.ray_support import INSTALL_HINT, ray_available


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/fleet/" in str(item.path).replace("\\", "/"):
            item.add_marker(pytest.mark.ray)
            if not ray_available():
                item.add_marker(pytest.mark.skip(reason=f"Ray is not installed ({INSTALL_HINT})"))


@pytest.fixture(scope="session")
def ray_session() -> Iterator[Any]:
    """One local Ray instance for the session: 2 CPUs, no dashboard, shut down at the end."""
    import ray

    from tether.fleet.system import NAMESPACE

    ray.init(
        address="local",  # never a cluster another process started on this machine
        num_cpus=2,
        include_dashboard=False,
        namespace=NAMESPACE,
        log_to_driver=False,
        configure_logging=False,
    )
    try:
        yield ray
    finally:
        ray.shutdown()
