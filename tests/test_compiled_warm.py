"""``tether.compiled.warm_once``: a warm-up runs once, and a long one says why the start
waits (once per process)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import pytest

from tether import compiled

Warm = Callable[[float], Callable[[], float]]


@pytest.fixture
def warm_for(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> tuple[list[int], Warm]:
    """(the compiles run, a ``warm()`` whose compile takes the seconds given), with the
    notice due after 0.1 s and not yet given in this process; warnings captured."""
    monkeypatch.setattr(compiled, "COMPILING_NOTICE_S", 0.1)
    monkeypatch.setattr(compiled, "_TOLD", threading.Event())
    caplog.set_level(logging.WARNING, logger="tether.compiled")
    calls: list[int] = []

    def compile_for(seconds: float) -> None:
        calls.append(1)
        threading.Event().wait(seconds)

    return calls, lambda seconds: compiled.warm_once(True, lambda: compile_for(seconds))


def test_a_slow_first_warm_up_says_it_is_compiling(
    warm_for: tuple[list[int], Warm], caplog: pytest.LogCaptureFixture
) -> None:
    calls, make = warm_for
    warm, other = make(0.4), make(0.4)
    assert warm() >= 0.4
    assert warm() == 0.0
    assert other() >= 0.4  # the process was told once: the second kernel says nothing
    assert calls == [1, 1]
    (record,) = caplog.records
    assert "compiling" in record.getMessage()
    assert __name__ in record.getMessage()


def test_a_quick_warm_up_says_nothing(
    warm_for: tuple[list[int], Warm], caplog: pytest.LogCaptureFixture
) -> None:
    calls, make = warm_for
    assert make(0.0)() < 0.1
    threading.Event().wait(0.3)  # past the notice's time: it was cancelled
    assert compiled.warm_once(False, lambda: calls.append(1))() == 0.0  # no numba: nothing
    assert calls == [1]
    assert caplog.records == []
