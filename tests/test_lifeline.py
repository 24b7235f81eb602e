"""A child that asked to die with its parent is gone as soon as the parent is killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

# The parent starts a child, prints the child's pid, and waits; the child (which shares
# the parent's stdout) says "ready" once it asked to die with its parent, or at once.
_PARENT = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", {child!r}])
print(child.pid, flush=True)
time.sleep(120)
"""
_CHILD = """
import os, time
from tether.lifeline import die_with_parent
die_with_parent(os.getppid())
print("ready", flush=True)
time.sleep(120)
"""
_ORPHAN = "import time; print('ready', flush=True); time.sleep(120)"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as fh:  # a zombie waiting for init to reap it is gone too
        return fh.read().split()[2] != "Z"


def _child_after_parent_killed(child_code: str) -> tuple[int, bool]:
    parent = subprocess.Popen(
        [sys.executable, "-c", _PARENT.format(child=child_code)], stdout=subprocess.PIPE, text=True
    )
    assert parent.stdout is not None
    pid = int(parent.stdout.readline())
    assert parent.stdout.readline().strip() == "ready"
    parent.send_signal(signal.SIGKILL)
    parent.wait(timeout=10)
    # The lifeline's signal comes within milliseconds; a child without one outlives this.
    deadline = time.monotonic() + 1.5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return pid, _alive(pid)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signal is Linux")
def test_a_child_dies_with_its_killed_parent_and_would_not_without_the_lifeline() -> None:
    _, alive = _child_after_parent_killed(_CHILD)
    assert not alive
    orphan, alive = _child_after_parent_killed(_ORPHAN)
    try:
        assert alive  # the case the lifeline exists for
    finally:
        if _alive(orphan):
            os.kill(orphan, signal.SIGKILL)
