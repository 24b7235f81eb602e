"""RunJournal: what both systems (embedded and Ray) write of a run while it goes."""

from __future__ import annotations

from pathlib import Path

from tether.runtime.records import (
    EPISODES_FILE,
    EVENTS_FILE,
    EpisodeRecord,
    RobotSnapshot,
    RunEvent,
    RunJournal,
    read_jsonl,
)


def _episode(robot: str, n: int) -> EpisodeRecord:
    return EpisodeRecord(
        t_s=float(n),
        robot_id=robot,
        role="learning",
        episode=n,
        episode_return=-1.0,
        success=True,
        steps=50,
        interventions=0,
        backups=0,
        policy_version=1,
        violations=0,
        contacts=0,
        drift_phase="nominal",
    )


def _snapshot(robot: str, episodes: int) -> RobotSnapshot:
    return RobotSnapshot(robot, "learning", 50.0, 1.0, 2.0, -1.0, 1.0, 0, episodes, 1)


def test_robot_reports_are_filed_by_kind_and_the_latest_snapshot_wins(tmp_path: Path) -> None:
    journal = RunJournal(tmp_path)
    drift = RunEvent(t_s=1.0, kind="drift", message="gain 0.6", robot_id="robot-1")
    journal.take(
        [
            _snapshot("robot-1", 1),
            _episode("robot-1", 0),
            _snapshot("robot-0", 4),
            drift,
            _snapshot("robot-1", 2),
        ]
    )
    journal.event(RunEvent(t_s=2.0, kind="promotion", message="v2"))
    journal.close()
    assert [s.episodes for s in journal.robots()] == [4, 2]  # by robot id, the latest each
    assert [e.episode for e in read_jsonl(tmp_path / EPISODES_FILE, EpisodeRecord)] == [0]
    kinds = [e.kind for e in read_jsonl(tmp_path / EVENTS_FILE, RunEvent)]
    assert kinds == ["drift", "promotion"]
    assert [e.kind for e in journal.recent] == kinds


def test_the_dashboard_sees_only_the_last_few_events(tmp_path: Path) -> None:
    journal = RunJournal(tmp_path)
    for i in range(RunJournal.RECENT_EVENTS + 3):
        journal.event(RunEvent(t_s=float(i), kind="candidate", message=f"v{i}"))
    journal.close()
    assert journal.recent[0].message == "v3"
    assert len(journal.recent) == RunJournal.RECENT_EVENTS
    assert len(list(read_jsonl(tmp_path / EVENTS_FILE, RunEvent))) == RunJournal.RECENT_EVENTS + 3
