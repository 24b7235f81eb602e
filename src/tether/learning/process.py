"""The learner as its own OS process, and the object in the parent that keeps it alive.

:func:`learner_main` runs in a ``spawn``-ed child: it pins itself to its cores
(``os.sched_setaffinity``), lowers its priority, caps torch's threads, loads the bundle,
attaches to the shared weights and the transition channel and runs a
:class:`~tether.learning.learner.Learner` until told to stop.

:class:`LearnerProcess` lives in the serving (parent) process. A crash of the child
is an event, never an exception in the parent: serving continues on the weights already
published, and :class:`LearnerProcess` restarts the child from its last checkpoint after a
back-off, up to ``max_restarts`` within ``restart_window_s`` (then it gives up, with an
event). Only the bundle path, names of shared-memory blocks and JSON config cross the
process boundary; weights travel through shared memory.
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing as mp
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tether.data.channel import TransitionChannel
from tether.learning.errors import LearnerProcessError
from tether.learning.learner import N_COUNTERS, Learner, LearnerCounters
from tether.learning.learner_config import LearnerConfig
from tether.learning.placement import learner_placement
from tether.lifeline import die_with_parent
from tether.policy.bundle import load_bundle
from tether.policy.shared_weights import SharedWeights
from tether.shared_flag import SharedFlag

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LearnerLaunch:
    """What the child needs, as plain values (config as JSON)."""

    config_json: str
    bundle_path: str
    weights_name: str
    checkpoint_dir: str | None
    verdict_dir: str | None
    resume: bool
    cores: tuple[int, ...]
    torch_threads: int
    parent_pid: int


def _place(launch: LearnerLaunch, nice: int) -> None:
    try:
        os.sched_setaffinity(0, launch.cores)
    except OSError as exc:
        raise LearnerProcessError(
            f"cannot pin the learner to cores {launch.cores} ({exc}); set LearnerConfig.cores "
            f"to a subset of the available cores {sorted(os.sched_getaffinity(0))}"
        ) from exc
    if nice:
        os.nice(nice)
    torch.set_num_threads(launch.torch_threads)


def learner_main(
    launch: LearnerLaunch,
    channel: TransitionChannel,
    counters: Any,
    stop: SharedFlag,
) -> None:
    """Entry point of the learner process."""
    # Ctrl-C reaches the whole process group; the parent decides when the learner stops,
    # and if the parent dies the learner goes with it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent(launch.parent_pid)
    config = LearnerConfig.model_validate_json(launch.config_json)
    _place(launch, config.nice)
    bundle = load_bundle(launch.bundle_path)
    weights = SharedWeights.attach(launch.weights_name, bundle.architecture)
    learner = Learner(
        bundle,
        config,
        channel=channel,
        weights=weights,
        checkpoint_dir=None if launch.checkpoint_dir is None else Path(launch.checkpoint_dir),
        verdict_dir=None if launch.verdict_dir is None else Path(launch.verdict_dir),
        counters=np.frombuffer(counters, dtype=np.int64),
        resume=launch.resume,
    )
    learner.run(stop)


class LearnerEventKind(StrEnum):
    STARTED = "started"
    CRASHED = "crashed"
    RESTARTED = "restarted"
    STOPPED = "stopped"
    GAVE_UP = "gave_up"


@dataclass(frozen=True)
class LearnerEvent:
    kind: LearnerEventKind
    time_s: float  # time.time() of the event (wall clock, for logs and reports)
    pid: int | None
    exitcode: int | None
    message: str


class LearnerProcess:
    """Starts the learner process, watches it, and restarts it from its checkpoint."""

    def __init__(
        self,
        bundle_path: str | os.PathLike[str],
        config: LearnerConfig,
        *,
        weights: SharedWeights,
        channel: TransitionChannel,
        checkpoint_dir: str | os.PathLike[str] | None = None,
        verdict_dir: str | os.PathLike[str] | None = None,
        on_event: Callable[[LearnerEvent], None] | None = None,
    ) -> None:
        self.config = config
        self._bundle_path = str(bundle_path)
        self._weights = weights
        self._channel = channel
        self._checkpoint_dir = None if checkpoint_dir is None else str(checkpoint_dir)
        # Where the learner writes <version>.json gate verdicts (see tether.versions.verdict_files).
        self.verdict_dir = None if verdict_dir is None else Path(verdict_dir)
        self._on_event = on_event
        # Decided here, in the parent, from the cores it may use now: a child inherits the
        # parent's affinity, which the runtime may narrow to the serving cores later.
        placement = learner_placement()
        self.cores = config.cores if config.cores is not None else placement.learner_cores
        self.torch_threads = (
            config.torch_threads if config.torch_threads is not None else placement.torch_threads
        )
        self._ctx = mp.get_context("spawn")
        # A raw (lock-free) int64 array: one writer (the child), aligned 8-byte stores.
        self._counters: Any = self._ctx.Array(ctypes.c_int64, N_COUNTERS, lock=False)
        self._stop = SharedFlag(self._ctx)
        self._stopping = threading.Event()
        self._spawn_lock = threading.Lock()  # a restart and stop() never interleave
        self._events: list[LearnerEvent] = []
        self._events_lock = threading.Lock()
        self._crash_times: deque[float] = deque()
        self._process: Any = None
        self._watcher: threading.Thread | None = None

    @property
    def pid(self) -> int | None:
        return None if self._process is None else self._process.pid

    def is_alive(self) -> bool:
        return self._process is not None and self._process.is_alive()

    def counters(self) -> LearnerCounters:
        return LearnerCounters(*(int(v) for v in np.frombuffer(self._counters, dtype=np.int64)))

    def events(self) -> tuple[LearnerEvent, ...]:
        with self._events_lock:
            return tuple(self._events)

    def start(self) -> None:
        if self._process is not None:
            raise LearnerProcessError("learner already started; stop() it before starting again")
        self._spawn(resume=True)
        self._emit(LearnerEventKind.STARTED, "learner process started")
        self._watcher = threading.Thread(target=self._watch, name="learner-watch", daemon=True)
        self._watcher.start()

    def prepare_stop(self) -> None:
        """From now on an exit of the learner is a stop, never a crash to restart."""
        self._stopping.set()

    def stop(self, timeout_s: float = 30.0) -> None:
        """Ask the learner to checkpoint and exit; kill it if it does not within ``timeout_s``."""
        with self._spawn_lock:
            self._stopping.set()
            self._stop.set()
            process = self._process
        if process is not None:
            process.join(timeout_s)
            if process.is_alive():
                process.kill()
                process.join(5)
        if self._watcher is not None:
            self._watcher.join(timeout_s)
        self._emit(LearnerEventKind.STOPPED, "learner stopped on request")

    def _spawn(self, *, resume: bool) -> None:
        launch = LearnerLaunch(
            config_json=self.config.model_dump_json(),
            bundle_path=self._bundle_path,
            weights_name=self._weights.name,
            checkpoint_dir=self._checkpoint_dir,
            verdict_dir=None if self.verdict_dir is None else str(self.verdict_dir),
            resume=resume,
            cores=self.cores,
            torch_threads=self.torch_threads,
            parent_pid=os.getpid(),
        )
        process = self._ctx.Process(
            target=learner_main,
            args=(launch, self._channel, self._counters, self._stop),
            name="tether-learner",
            daemon=True,
        )
        process.start()
        self._process = process

    def _emit(self, kind: LearnerEventKind, message: str, exitcode: int | None = None) -> None:
        event = LearnerEvent(kind, time.time(), self.pid, exitcode, message)
        with self._events_lock:
            self._events.append(event)
        log = (
            logger.warning
            if kind in (LearnerEventKind.CRASHED, LearnerEventKind.GAVE_UP)
            else logger.info
        )
        log("learner %s: %s", kind.value, message)
        if self._on_event is not None:
            self._on_event(event)

    def _watch(self) -> None:
        while not self._stopping.is_set():
            process = self._process
            process.join(0.1)
            if process.is_alive() or self._stopping.is_set():
                continue
            code = process.exitcode
            self._emit(
                LearnerEventKind.CRASHED,
                f"learner process {process.pid} exited with code {code}; serving continues on "
                "the published weights",
                exitcode=code,
            )
            now = time.monotonic()
            self._crash_times.append(now)
            while self._crash_times and now - self._crash_times[0] > self.config.restart_window_s:
                self._crash_times.popleft()
            if len(self._crash_times) > self.config.max_restarts:
                self._emit(
                    LearnerEventKind.GAVE_UP,
                    f"{len(self._crash_times)} crashes within {self.config.restart_window_s:.0f} s "
                    f"(max_restarts={self.config.max_restarts}); learning stays off until restarted",
                )
                return
            if self._stopping.wait(self.config.restart_backoff_s):
                return
            with self._spawn_lock:
                if self._stopping.is_set():  # stop() began during the back-off
                    return
                self._spawn(resume=True)
            self._emit(LearnerEventKind.RESTARTED, "learner restarted from its last checkpoint")
