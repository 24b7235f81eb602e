"""Both paths of the position supervisor reproduce the recorded corpus bit for bit.

``tests/safety/data/position_corpus.npz`` holds thousands of calls recorded from the
Python path (``position_corpus.py`` says what they are and how to re-record them) with
every result: the action's float32 bytes and the verdict's class, source, check bits,
correction, joints and per-check moves. The Python path always replays it; the compiled
path (``tether.safety.position.kernel``) replays it where numba is installed.
"""

from __future__ import annotations

import numpy as np
import pytest

from safety import position_corpus as corpus
from tether.safety.position import kernel
from tether.safety.verdict import SafetyCheck


def test_the_corpus_exercises_every_position_check() -> None:
    calls, results = corpus.load()
    assert len(calls) >= 4000
    for check in (
        SafetyCheck.POSITION,
        SafetyCheck.VELOCITY,
        SafetyCheck.ACCELERATION,
        SafetyCheck.TORQUE,
        SafetyCheck.WORKSPACE,
        SafetyCheck.OBSTACLE,
        SafetyCheck.NON_FINITE,
        SafetyCheck.INVALID_OBSERVATION,
        SafetyCheck.INVALID_PREVIOUS,
        SafetyCheck.STALE,
        SafetyCheck.TAKEOVER,
    ):
        assert np.count_nonzero(results.checks & int(check)) >= 50, check
    passed = results.checks == 0
    assert 200 < np.count_nonzero(passed) < len(calls) - 1000
    # Closed loops on the nominal and the drifted arm, shipped and random-target.
    assert {c.sequence for c in calls if c.kind == corpus.ACTIONS} >= {100, 110, 200, 210}


def test_a_one_ulp_difference_is_caught() -> None:
    _, results = corpus.load()
    changed = results._replace(action=results.action.copy())
    changed.action[17, 2] = np.nextafter(changed.action[17, 2], np.float32(np.inf))
    assert corpus.differences(changed, results) == [17]


def test_the_python_path_reproduces_the_corpus() -> None:
    count, bad = corpus.replay(compiled=False)
    assert bad == [], f"{len(bad)} of {count} calls differ, first {bad[:10]}"


@pytest.mark.skipif(not kernel.AVAILABLE, reason="numba (the compiled path) is absent")
def test_the_compiled_path_reproduces_the_corpus() -> None:
    count, bad = corpus.replay(compiled=True)
    assert bad == [], f"{len(bad)} of {count} calls differ, first {bad[:10]}"


@pytest.mark.skipif(not kernel.AVAILABLE, reason="numba (the compiled path) is absent")
def test_the_corpus_in_batches_reproduces_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every sequence a row: each round one batched call per kind, mostly on the array
    path (``batch._array_group``), every call's result as recorded, to the bit."""
    from tether.safety.position import batch

    calls, want = corpus.load()
    on_arrays = [0]
    array_group = batch._array_group

    def counting(*args: object) -> list[int]:
        refused = array_group(*args)  # type: ignore[arg-type]
        on_arrays[0] += len(args[1]) - len(refused)  # type: ignore[arg-type]
        return refused

    monkeypatch.setattr(batch, "_array_group", counting)
    with np.errstate(over="ignore"):
        got = corpus.run_batched(calls, compiled=True)
    bad = corpus.differences(got, want)
    assert bad == [], f"{len(bad)} of {len(calls)} calls differ, first {bad[:10]}"
    # The array path answered most calls (the rest: backups, stale or unreadable
    # inputs, previous commands not the supervisor's own, the Python-path rows).
    assert on_arrays[0] > len(calls) // 2, (on_arrays[0], len(calls))
