"""The fleet on a local Ray instance: 4 simulated robots on 2 edge servers, one learner.

One fleet runs for the whole module (in a thread, as ``tether run --backend ray`` would
run it), and the tests act on it in order: promotions reach every edge; an edge killed
mid-run comes back on its port and its robots reconnect; the learner killed mid-run
resumes from its checkpoint while the edges keep serving; losing the version service
leaves every edge serving its live version. The last test reads the run directory the
fleet left behind.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fleet.fleet_config import fleet_config

pytestmark = pytest.mark.ray

_WAIT_S = 30.0


def wait_for(what: str, check: Callable[[], Any], timeout_s: float = _WAIT_S) -> Any:
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except Exception as exc:  # an actor restarting: ask again
            last = exc
        else:
            if last:
                return last
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}; last: {last!r}")


class RunningFleet:
    def __init__(self, system: Any, thread: threading.Thread, run_dir: Path) -> None:
        self.system = system
        self.thread = thread
        self.run_dir = run_dir
        self.ray = system.ray

    def edge(self, edge_id: str) -> Any:
        return self.system.edges[edge_id]

    def status(self, edge_id: str) -> Any:
        return self.ray.get(self.edge(edge_id).status.remote(), timeout=10)

    def serving(self) -> dict[str, int | None]:
        return {
            edge_id: self.ray.get(e.serving_version.remote(), timeout=10)
            for edge_id, e in self.system.edges.items()
        }

    def live(self) -> int | None:
        return self.system.fleet_versions().live_version

    def learner(self) -> Any:
        return self.ray.get(self.system.learner.status.remote(), timeout=10)


@pytest.fixture(scope="module")
def fleet(ray_session: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningFleet]:
    from tether.fleet.system import FleetSystem
    from tether.runtime.system import new_run_dir

    config = fleet_config(tmp_path_factory.mktemp("fleet-runs"), duration_s=600.0)
    run_dir = new_run_dir(config.out_dir)
    system = FleetSystem(config, run_dir)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            system.run()
        except BaseException as exc:  # surfaced by the fixture's teardown
            errors.append(exc)

    thread = threading.Thread(target=run, name="fleet", daemon=True)
    thread.start()
    running = RunningFleet(system, thread, run_dir)
    wait_for("the robots to start", lambda: (run_dir / "events.jsonl").stat().st_size > 0, 120)
    yield running
    system.request_stop()
    thread.join(120)
    assert not thread.is_alive(), "the fleet did not stop within 120 s"
    assert not errors, errors


def test_every_edge_serves_the_same_live_version_after_each_promotion(
    fleet: RunningFleet,
) -> None:
    first = fleet.live()
    seen: list[int] = []
    for _ in range(2):
        previous = seen[-1] if seen else first
        live = wait_for("a promotion", lambda p=previous: (v := fleet.live()) != p and v)
        # Within a few sync intervals every edge serves it (or a newer one it was replaced by).
        wait_for(
            f"every edge to serve version {live}",
            lambda lv=live: all(v is not None and v >= lv for v in fleet.serving().values()),
            10.0,
        )
        seen.append(live)
    served = fleet.system.fleet_versions().serving
    assert set(served) == {"edge-0", "edge-1"}
    assert seen[1] > seen[0] > (first or 0)


def test_a_learner_killed_mid_run_resumes_from_its_checkpoint(fleet: RunningFleet) -> None:
    # A checkpoint written after the learner has updated (the first ones may come before
    # its replay holds a mini-batch, and resuming from those is resuming from update 0).
    updated = wait_for("a learner update", lambda: (s := fleet.learner()).counters.updates and s)
    before = wait_for(
        "a learner checkpoint after an update",
        lambda: (s := fleet.learner()).counters.checkpoints > updated.counters.checkpoints and s,
    )
    steps = {e: fleet.status(e).steps_served for e in ("edge-0", "edge-1")}
    fleet.ray.kill(fleet.system.learner, no_restart=False)
    after = wait_for(
        "the learner to be restarted by Ray",
        lambda: (s := fleet.learner()).pid != before.pid and s,
        60.0,
    )
    assert after.restarted
    assert after.resumed_from_updates > 0
    # The edges served all along.
    for edge_id, n in steps.items():
        assert fleet.status(edge_id).steps_served > n
    # ...and it drains the replay actor again.
    wait_for("the restarted learner to pull transitions", lambda: fleet.learner().pulled > 0, 20.0)


def test_an_edge_killed_mid_run_comes_back_and_its_robots_reconnect(fleet: RunningFleet) -> None:
    before = fleet.status("edge-1")
    fleet.ray.kill(fleet.edge("edge-1"), no_restart=False)
    after = wait_for(
        "edge-1 to be restarted by Ray",
        lambda: (s := fleet.status("edge-1")).pid != before.pid and s,
        60.0,
    )
    assert after.restarted
    assert after.address == before.address  # the same port: where its robots look
    live = fleet.live()
    # It catches up with the fleet's live version, and its robots step on it again.
    wait_for(
        "the restarted edge to serve the live version",
        lambda: (v := fleet.status("edge-1").serving_version) is not None and v >= (live or 0),
        20.0,
    )
    steps = fleet.status("edge-1").steps_served
    wait_for(
        "edge-1's robots to reconnect and step",
        lambda: fleet.status("edge-1").steps_served > steps + 50,
        30.0,
    )


def test_losing_the_version_service_leaves_every_edge_serving_its_live_version(
    fleet: RunningFleet,
) -> None:
    serving = fleet.serving()
    live = fleet.live()
    wait_for(
        "every edge to serve the live version", lambda: set(fleet.serving().values()) == {live}
    )
    fleet.ray.kill(fleet.system.service, no_restart=True)
    steps = {e: fleet.status(e).steps_served for e in serving}
    time.sleep(1.5)
    for edge_id in serving:
        status = fleet.status(edge_id)
        assert status.serving_version == live
        assert status.sync_failures > 0
        assert status.steps_served > steps[edge_id]


def test_the_run_directory_records_the_backend_placement_and_the_faults(
    fleet: RunningFleet,
) -> None:
    fleet.system.request_stop()
    fleet.thread.join(120)
    run_dir = fleet.run_dir
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    kinds = [e["kind"] for e in events]
    assert kinds[0] == "start"
    assert kinds[-1] == "stop"
    assert events[0]["details"]["backend"] == "ray"
    assert {"edge_restart", "learner_restart", "promotion", "candidate"} <= set(kinds)
    placement = json.loads((run_dir / "fleet.json").read_text())
    roles = sorted(a["role"] for a in placement["actors"])
    assert roles == ["edge", "edge", "learner", "replay", "versions"]
    assert (run_dir / "report.html").exists()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["backend"].startswith("ray")
    assert sorted(a.split(" (")[1].split(")")[0] for a in summary["actors"]) == roles
    stop = events[-1]["details"]
    assert stop["replay"]["offered"] > 0
    assert stop["replay"]["offered"] == (
        stop["replay"]["consumed"] + stop["replay"]["dropped"] + stop["replay"]["held"]
    )
