"""The event loop a serving process runs on: uvloop or asyncio's own.

Every Control step is a handful of loop callbacks: grpc.aio's poller wakes the loop, the
stream's task resumes, the step's future is resolved by the batch, the reply's write
completes. asyncio's own loop runs that bookkeeping in Python (``_run_once``, its
handles, ``call_soon``); uvloop runs it in C on libuv. At 64 robots on a 2-core machine
the same server answered 6-20 % more actions per second on uvloop (median 8 % over five
runs), and bare grpc.aio echoed up to 8 % more (``benchmarks/bench_peers.py``,
docs/benchmarks.md).

``ServerConfig.event_loop`` chooses:

- ``auto`` (the default): uvloop where it is installed (a dependency of tether on every
  platform uvloop supports), else asyncio's loop;
- ``uvloop``: uvloop, and an error at start where it is not installed;
- ``asyncio``: asyncio's loop.

Busy polling (``ServerConfig.busy_poll_us``, ``tether.serving.busy_poll``) works on
either. ``run`` is the one way tether's entry points (``tether serve``, ``tether run``)
start their loop; ``loop_factory`` gives the same choice to code that runs a loop in a
thread of its own (the test harness, a fleet edge).
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Callable, Coroutine
from types import ModuleType
from typing import Any, Literal, TypeVar

from tether.errors import ConfigError

T = TypeVar("T")

EventLoopKind = Literal["auto", "uvloop", "asyncio"]
EVENT_LOOPS: tuple[EventLoopKind, ...] = ("auto", "uvloop", "asyncio")


class EventLoopUnavailable(ConfigError):
    """The configured event loop cannot run on this machine."""


def _uvloop() -> ModuleType | None:
    try:
        return importlib.import_module("uvloop")
    except ImportError:
        return None


def loop_factory(kind: EventLoopKind = "auto") -> Callable[[], asyncio.AbstractEventLoop]:
    """What makes the loop ``kind`` names (see the module docstring)."""
    if kind not in EVENT_LOOPS:
        raise ValueError(f"event_loop is {kind!r}, expected one of {list(EVENT_LOOPS)}")
    if kind != "asyncio":
        uvloop = _uvloop()
        if uvloop is not None:
            make: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
            return make
        if kind == "uvloop":
            raise EventLoopUnavailable(
                "event_loop is uvloop, but uvloop is not installed here (pip install uvloop; "
                "it has no Windows build); set event_loop to auto to fall back to asyncio's loop"
            )
    return asyncio.new_event_loop


def loop_name(loop: asyncio.AbstractEventLoop) -> str:
    """``uvloop`` or ``asyncio``: which loop this is (the server logs it at start)."""
    return "uvloop" if type(loop).__module__.split(".")[0] == "uvloop" else "asyncio"


def run(main: Coroutine[Any, Any, T], kind: EventLoopKind = "auto") -> T:
    """``asyncio.run(main)`` on the loop ``kind`` chooses."""
    try:
        factory = loop_factory(kind)
    except BaseException:
        main.close()  # never awaited: say so quietly instead of a RuntimeWarning
        raise
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(main)
