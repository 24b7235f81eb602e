"""The ``ray`` suite's shared pieces: one local Ray instance for the directory, sized for 2 CPUs.

Every test here is marked ``ray``; the whole directory is skipped, with one line saying
why, when Ray is not importable (the ``ray`` extra is not installed).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tether.fleet.ray_support import INSTALL_HINT, ray_available

_LAST_RAY_TEST: list[str] = []  # the node id of the last test here, once collected


def _is_here(item: pytest.Item) -> bool:
    return "tests/fleet/" in str(item.path).replace("\\", "/")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _is_here(item):
            item.add_marker(pytest.mark.ray)
            if not ray_available():
                item.add_marker(pytest.mark.skip(reason=f"Ray is not installed ({INSTALL_HINT})"))
    here = [item.nodeid for item in items if _is_here(item)]
    _LAST_RAY_TEST[:] = here[-1:]


def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """After the last test here, stop Ray: the rest of the suite does not share the 2 cores
    with an idle cluster's raylet, GCS and workers."""
    if item.nodeid in _LAST_RAY_TEST and ray_available():
        import ray

        ray.shutdown()


@pytest.fixture(scope="session")
def ray_session() -> Iterator[Any]:
    """One local Ray instance for this directory's tests: 2 CPUs, no dashboard, shut down
    after the last of them (:func:`pytest_runtest_teardown`) or at the end."""
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
