"""Many robots' position-supervisor state in arrays, one row (slot) per robot.

A :class:`PositionSupervisor` keeps its robot's state (the command it last returned and
that command's change, the last readable pose, its sag and places of rest, the kernel's
anchors) in attributes, which one ``filter`` call reads and writes.
:mod:`tether.safety.position.batch` runs many robots at once; gathering those attributes
into arrays and scattering them back cost more per row than the compiled arithmetic
itself. So the compiled supervisors of one signature (those the batch path runs as one
array: same kernel constants, inputs read alike) share one :class:`RobotStates`
(:func:`states_for`), each robot with a slot of its own once it first runs there, and a
robot's state lives in exactly one of two places:

- on the supervisor (``here[slot]`` false, or no slot yet): what the per-row path uses;
- in the slot (``here[slot]`` true): what the compiled call (``kernel.filter_batch``:
  a batch, or a single common call of the action supervisor) reads and writes.

The compiled call asks for a row's state when it is not in its slot, and the caller moves
it there (``PositionSupervisor._push``, per row, only for a robot whose last call took
the per-row path); the per-row path, ``take_state`` and a backup action move it back
first (``_pull``). The action level (:class:`PositionActionSupervisor`: the action it
last returned and the command behind it) has its own flag, ``action_here``, since a
position supervisor can be called on its own.

Invariants: the state a supervisor acts on is the state it would hold had every call been
a per-row call (values are stored as float64 and float32 exactly as the attributes hold
them, so moving them is lossless; ``tests/safety/test_position_states.py`` mixes the
calls round by round and compares every robot's state after every one); a slot serves
one supervisor at a time (claimed by it, released when it is collected, cleared when
claimed again); the arrays are written under :attr:`lock` (growth replaces them, copying
every row); a robot's own row is read without it, by that robot's call alone, whose value
every copy holds.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import numpy as np

from tether.compiled import writable
from tether.safety.position import kernel

NO_BITS = np.empty((0, 0), np.uint32)  # the previous commands' bits of rows without one

# Slots a new set of states holds; it doubles when full.
_FIRST_CAPACITY = 64

_BY_SIGNATURE: dict[int, RobotStates] = {}
_BY_SIGNATURE_LOCK = threading.Lock()


def states_for(signature: int, n: int, anchors_shape: tuple[int, ...]) -> RobotStates:
    """The states of every supervisor with ``signature`` in this process (one per signature)."""
    with _BY_SIGNATURE_LOCK:
        states = _BY_SIGNATURE.get(signature)
        if states is None:
            states = _BY_SIGNATURE[signature] = RobotStates(n, anchors_shape)
        return states


class RobotStates:
    """The slots of one prototype's robots (``n`` joints; anchors as ``kernel.new_anchors``)."""

    def __init__(self, n: int, anchors_shape: tuple[int, ...]) -> None:
        self.n = n
        self._anchors_shape = anchors_shape
        self.lock = threading.Lock()
        self._used = 0
        # Slots given back by collected supervisors (list.append is atomic: a finalizer
        # may run on any thread, at any allocation, and never takes the lock).
        self._free: list[int] = []
        self._fixed: tuple[Any, ...] | None = None
        self._allocate(_FIRST_CAPACITY)
        # The kernel's per-row answers (kind and check bits; the report row: see
        # ``kernel.filter_batch``), read under :attr:`lock`; ``run`` grows them to its rows.
        self.codes = np.zeros((_FIRST_CAPACITY, 2), np.int64)
        self.report = np.zeros((_FIRST_CAPACITY, kernel.report_width(n)))

    def _allocate(self, capacity: int) -> None:
        n = self.n
        # Four tables, which the kernel takes whole (kernel.FLAG_*, WIDE_*, NARROW_*), and
        # one view per field. Flags: whether the slot holds the position level's state,
        # its last command, its last pose, the action level's state, its last action.
        # Float64 rows: the last command's candidate and change, the last readable pose,
        # the arm's sag, the offsets it showed at its latest place of rest and at the one
        # before, where that place is.
        # Float32 rows: the last command returned, the last action returned, the command
        # that action came from (and the same as bits, for comparing them by bits).
        self.flags = _grown(getattr(self, "flags", None), capacity, (kernel.FLAGS,), np.bool_)
        self.wide = _grown(getattr(self, "wide", None), capacity, (kernel.WIDE, n), np.float64)
        self.narrow = _grown(
            getattr(self, "narrow", None), capacity, (kernel.NARROW, n), np.float32
        )
        self.anchors = _grown(
            getattr(self, "anchors", None), capacity, self._anchors_shape, np.float64
        )
        self.bits = self.narrow.view(np.uint32)
        flags, wide, narrow = self.flags, self.wide, self.narrow
        self.here = flags[:, kernel.FLAG_HERE]
        self.has_last = flags[:, kernel.FLAG_HAS_LAST]
        self.has_pose = flags[:, kernel.FLAG_HAS_POSE]
        self.action_here = flags[:, kernel.FLAG_ACTION_HERE]
        self.has_action = flags[:, kernel.FLAG_HAS_ACTION]
        self.candidate = wide[:, kernel.WIDE_CANDIDATE]
        self.change = wide[:, kernel.WIDE_CHANGE]
        self.pose = wide[:, kernel.WIDE_POSE]
        self.sag = wide[:, kernel.WIDE_SAG]
        self.rest_sag = wide[:, kernel.WIDE_REST_SAG]
        self.earlier_sag = wide[:, kernel.WIDE_EARLIER_SAG]
        self.rest_pose = wide[:, kernel.WIDE_REST_POSE]
        self.out32 = narrow[:, kernel.NARROW_OUT]
        self.action32 = narrow[:, kernel.NARROW_ACTION]
        self.command32 = narrow[:, kernel.NARROW_COMMAND]
        self.capacity = capacity

    def claim(self, owner: Any) -> int:
        """A slot for ``owner`` (caller holds :attr:`lock`), empty, released when
        ``owner`` is collected."""
        if self._free:
            slot = self._free.pop()
        else:
            if self._used == self.capacity:
                self._allocate(2 * self.capacity)
            slot = self._used
            self._used += 1
        self.here[slot] = False
        self.action_here[slot] = False
        weakref.finalize(owner, self._free.append, slot)
        return slot

    def move_out(self, slot: int, column: int) -> bool:
        """Whether the slot held one level's state (flag ``column``: ``kernel.FLAG_HERE``
        or ``FLAG_ACTION_HERE``), which it no longer does: the caller, that robot's own
        call, then reads the slot's values back onto its supervisor. The flag is read once
        without the lock (only the robot's own calls move its state) and cleared under it."""
        if not self.flags[slot, column]:
            return False
        with self.lock:
            if not self.flags[slot, column]:
                return False
            self.flags[slot, column] = False
            return True

    def run(
        self,
        supervisor: Any,
        obs: np.ndarray,
        proposals: np.ndarray,
        has_previous: np.ndarray,
        handed: np.ndarray,
        acting: tuple[np.ndarray, np.ndarray, float] | None,
        slots: np.ndarray,
    ) -> np.ndarray:
        """``kernel.filter_batch`` of these rows (``supervisor``: one of the signature's
        ``PositionSupervisor``s; ``acting``: the action map's center, half range and clamp,
        the ``proposals`` being actions) over these slots: the executed commands, or the
        actions returned; each row's kind and check bits in :attr:`codes`, its report in
        :attr:`report`, which the caller reads before it releases :attr:`lock`."""
        fixed = self._fixed
        if fixed is None:
            # The signature's kernel constants and observation reading, alike for every
            # supervisor of it.
            packed = supervisor._packed
            fixed = self._fixed = (
                packed.joints, packed.geo, packed.obstacles, packed.groups,
                *supervisor._reading(),
            )  # fmt: skip
        joints, geo, obstacles, groups, q_start, v_start, bounds, dt = fixed
        if not (obs.flags.writeable and proposals.flags.writeable and handed.flags.writeable):
            obs, proposals, handed = writable(obs), writable(proposals), writable(handed)
        rows = len(proposals)
        if rows > len(self.codes):
            self.codes = np.zeros((rows, 2), np.int64)
            self.report = np.zeros((rows, kernel.report_width(self.n)))
        center, half, clamp = acting if acting is not None else (bounds[0], bounds[0], 0.0)
        return kernel.filter_batch(
            joints, geo, obstacles, groups,
            obs, q_start, v_start, bounds, dt, proposals, has_previous, handed,
            acting is not None, center, half, clamp,
            slots, self.flags, self.wide, self.narrow, self.bits, self.anchors,
            self.codes, self.report,
        )  # fmt: skip

    @property
    def in_use(self) -> int:
        """Slots held by live supervisors."""
        return self._used - len(self._free)


def _grown(old: np.ndarray | None, capacity: int, row: tuple[int, ...], dtype: Any) -> np.ndarray:
    """A zeroed array of ``capacity`` rows of shape ``row``, ``old``'s rows copied in."""
    array = np.zeros((capacity, *row), dtype)
    if old is not None:
        array[: len(old)] = old
    return array
