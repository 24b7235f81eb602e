"""Child processes die with the process that started them.

`tether run` starts the learner and the simulated robots as processes of their own. If the
run's main process is killed (SIGKILL, an OOM kill, a crashed terminal) nothing stops them
otherwise: they were seen keeping two cores busy long after their parent was gone. Linux's
parent-death signal ends a child the moment its parent exits, whatever the cause.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> None:
    """Ask the kernel to SIGKILL this process when its parent exits (Linux; elsewhere a no-op).

    ``parent_pid`` is the pid the parent had when it started this process: if that parent
    is already gone by the time this runs, the process exits at once instead.
    """
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent_pid:  # the parent died before the request took effect
        os._exit(1)
