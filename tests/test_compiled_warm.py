"""``tether.compiled.warm_once``: a warm-up runs once, and a long one says why the start
waits (once per process)."""

from __future__ import annotations

import logging
import threading

import pytest

from tether import compiled


def _compile_for(seconds: float, calls: list[int]) -> None:
    calls.append(1)
    threading.Event().wait(seconds)


def test_a_slow_first_warm_up_says_it_is_compiling(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(compiled, "COMPILING_NOTICE_S", 0.05)
    monkeypatch.setattr(compiled, "_TOLD", threading.Event())
    calls: list[int] = []
    warm = compiled.warm_once(True, lambda: _compile_for(0.3, calls))
    other = compiled.warm_once(True, lambda: _compile_for(0.3, calls))
    with caplog.at_level(logging.WARNING, logger="tether.compiled"):
        assert warm() >= 0.3
        assert warm() == 0.0
        assert other() >= 0.3  # the process was told once: the second kernel says nothing
    assert calls == [1, 1]
    (record,) = caplog.records
    assert "compiling" in record.getMessage()
    assert __name__ in record.getMessage()


def test_a_quick_warm_up_says_nothing(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(compiled, "COMPILING_NOTICE_S", 0.5)
    monkeypatch.setattr(compiled, "_TOLD", threading.Event())
    calls: list[int] = []
    with caplog.at_level(logging.WARNING, logger="tether.compiled"):
        assert compiled.warm_once(True, lambda: _compile_for(0.0, calls))() < 0.5
        threading.Event().wait(0.6)  # past the notice's time: it was cancelled
        assert compiled.warm_once(False, lambda: _compile_for(0.0, calls))() == 0.0
    assert calls == [1]
    assert caplog.records == []
