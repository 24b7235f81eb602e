"""Child processes a test module starts together and reads one by one.

Each child spends seconds importing torch or compiling kernels from an empty numba cache;
started at once, their start-ups overlap on a multi-core machine instead of adding up in
the suite's time. A test reads its own child's result when it runs.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path


class ChildRuns:
    """Named child processes, started by :meth:`start`, read by :meth:`output`."""

    def __init__(self) -> None:
        self._procs: dict[str, subprocess.Popen[str]] = {}
        self._done: dict[str, tuple[int, str, str]] = {}  # exit code, stdout, stderr

    def start(
        self,
        name: str,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> None:
        self._procs[name] = subprocess.Popen(
            list(argv),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=None if env is None else dict(env),
            cwd=cwd,
            start_new_session=True,  # its own group: a kill reaches what it started too
        )

    def output(self, name: str, timeout_s: float = 300.0) -> str:
        """The child's stdout once it ended (killed after ``timeout_s``); the test fails
        (with the output's end) unless it exited 0."""
        if name not in self._done:
            proc = self._procs[name]
            try:
                out, err = proc.communicate(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                _kill(proc)
                out, err = proc.communicate()
                err += f"\n[killed after {timeout_s} s]"
            self._done[name] = (proc.returncode, out, err)
        code, out, err = self._done[name]
        assert code == 0, out[-2000:] + err[-2000:]
        return out

    def close(self) -> None:
        """Kill what still runs (a test that never asked for its child)."""
        for proc in self._procs.values():
            if proc.poll() is None:
                _kill(proc)
            proc.communicate()


def _kill(proc: subprocess.Popen[str]) -> None:
    """Kill the child and every process it started (servers a benchmark spawned would
    otherwise hold its pipes open, and reading them would never end)."""
    with contextlib.suppress(ProcessLookupError):  # the group ended meanwhile
        os.killpg(proc.pid, signal.SIGKILL)
