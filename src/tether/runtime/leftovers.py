"""What an earlier ``tether run`` left running: found through its run directory, stopped.

Children die with the run's main process (``tether.lifeline.die_with_parent``); this is
the second line for whatever escaped it (a child started while its parent was being
killed, a platform without parent-death signals). Each run writes the pids of its
children, with their start times, to ``processes.json`` in its run directory and removes
the file when it stops. A new run in the same output directory reads every such file
whose run is gone and stops the processes it lists that are still alive, matched by pid
and start time, so a recycled pid is never signalled.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

import psutil

log = logging.getLogger(__name__)

PROCESS_FILE = "processes.json"
_TERM_WAIT_S = 3.0


def _identity(pid: int) -> dict[str, float | int] | None:
    try:
        return {"pid": pid, "started": psutil.Process(pid).create_time()}
    except psutil.Error:
        return None


def _alive(entry: dict[str, float | int]) -> psutil.Process | None:
    """The process ``entry`` names, if it still runs (same pid and start time)."""
    try:
        process = psutil.Process(int(entry["pid"]))
        if abs(process.create_time() - float(entry["started"])) > 0.01:
            return None  # the pid was reused by another process
        return process
    except (psutil.Error, KeyError, TypeError, ValueError):
        return None


def record_processes(run_dir: Path, children: list[int]) -> None:
    """Write this run's main pid and its ``children``'s to ``run_dir/processes.json``."""
    main = _identity(os.getpid())
    entries = [e for e in (_identity(pid) for pid in children) if e is not None]
    tmp = run_dir / f".{PROCESS_FILE}.tmp"
    tmp.write_text(json.dumps({"main": main, "children": entries}))
    tmp.replace(run_dir / PROCESS_FILE)


def forget_processes(run_dir: Path) -> None:
    """This run stopped everything it started: its file goes."""
    (run_dir / PROCESS_FILE).unlink(missing_ok=True)


def stop_leftovers(out_dir: Path) -> list[int]:
    """Stop the children of earlier runs under ``out_dir`` whose main process is gone;
    returns their pids. A run still alive is left alone."""
    stopped: list[int] = []
    for path in sorted(Path(out_dir).glob(f"*/{PROCESS_FILE}")):
        try:
            data = json.loads(path.read_text())
            main, children = data["main"], list(data["children"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring unreadable %s: %s", path, exc)
            continue
        if main is not None and _alive(main) is not None:
            continue  # that run is still going
        running = [p for p in (_alive(e) for e in children) if p is not None]
        for process in running:
            log.warning(
                "stopping pid %d (%s) left running by the earlier run in %s",
                process.pid,
                process.name(),
                path.parent,
            )
            try:
                process.terminate()
            except psutil.Error:
                continue
        deadline = time.monotonic() + _TERM_WAIT_S
        for process in running:
            try:
                process.wait(max(0.0, deadline - time.monotonic()))
            except psutil.TimeoutExpired:
                process.kill()
            except psutil.Error:
                pass
            stopped.append(process.pid)
        path.unlink(missing_ok=True)
    return stopped
