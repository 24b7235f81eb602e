"""A stop flag survives a process SIGKILLed while polling it.

The learner polls its stop flag on every update and the simulated robots on every step.
``multiprocessing.Event.is_set`` takes a lock; a process killed inside it (the OOM
killer, the crash tests) kept the lock, and the restarted learner's next ``is_set`` and
the parent's ``set`` blocked forever (seen: a learner SIGKILLed mid-poll never updated
again, and its ``stop()`` hung the test for 300 s). ``SharedFlag`` holds no lock.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading

from tether.shared_flag import SharedFlag


def _spin(flag: SharedFlag, ready: SharedFlag) -> None:
    """Poll ``flag`` as fast as possible until it is set (saying ``ready`` first)."""
    ready.set()
    while not flag.is_set():
        pass


def test_a_poller_killed_mid_poll_leaves_the_flag_usable() -> None:
    ctx = multiprocessing.get_context("spawn")
    flag, ready = SharedFlag(ctx), SharedFlag(ctx)
    spinner = ctx.Process(target=_spin, args=(flag, ready), daemon=True)
    spinner.start()
    assert ready.wait(60), "the spinner never started"
    assert spinner.pid is not None
    os.kill(spinner.pid, signal.SIGKILL)  # almost surely inside is_set
    spinner.join(10)
    setter = threading.Thread(target=flag.set, daemon=True)
    setter.start()
    setter.join(5)
    assert not setter.is_alive(), "set() blocked on what the killed poller held"
    assert flag.wait(0.0)
    second = ctx.Process(target=_spin, args=(flag, SharedFlag(ctx)), daemon=True)
    second.start()
    second.join(60)
    assert second.exitcode == 0, "a new poller did not see the flag set"


def test_wait_returns_when_set_or_at_its_timeout() -> None:
    flag = SharedFlag(multiprocessing.get_context("spawn"))
    assert not flag.wait(0.02)
    assert not flag.is_set()
    threading.Timer(0.05, flag.set).start()
    assert flag.wait(5.0)
    assert flag.is_set()
