"""The supervisor for commanded joint positions: the last thing between a policy's
position command and the robot's impedance controller.

``PositionSupervisor.filter(observation, command_rad, previous_command_rad,
observation_age_s=...)`` returns the command to execute (float32, shape (n,), rad) and a
verdict. Per cycle, in order, each a named check (a :class:`SafetyCheck` bit) whose
verdict entry says how far it moved the command:

1. finite and shaped (``INVALID_SHAPE``, ``NON_FINITE``: the backup replaces it; an
   unreadable observation, ``INVALID_OBSERVATION``, repeats the last command known: one
   that is misshapen, non-finite, or outside the physical envelope, a joint more than
   ``observation_range_slack_rad`` beyond its range or faster than
   ``observation_speed_factor`` times its velocity limit);
2. joint range with margin (where the arm settles under the command: the command plus
   its sag toward the limit, see 6), 3. per-step change (velocity limit × period),
   4. change of that change against the previous command (acceleration limit × period²),
   5. the impedance torque the command demands within the motor limits
   (``POSITION``, ``VELOCITY``, ``ACCELERATION``, ``TORQUE``; per-joint intervals,
   :mod:`tether.safety.position.envelope`): a command inside all of them passes
   bit-identical, any other is moved to the nearest point inside them;
6. workspace box and obstacle clearance of the collision spheres along the whole
   segment from the measured pose to the command (``WORKSPACE``, ``OBSTACLE``;
   :mod:`tether.safety.segment`): a command whose segment breaches a margin, and is no
   better than where the arm is (nor, from the previous command, than that command), is
   backed off along the segment to where it is clear, else (an arm already deep inside a
   margin: a hand pushed it there) the previous command moved part of the way out of it
   (``SegmentClearance.way_out`` with ``kernel.RETREAT_*``; not with ``way_out`` off),
   step after step until the arm follows, else the previous command is held (a sagging
   arm sinks once, not every step), else it is ramped toward the measured pose inside
   the intervals, else set to the measured pose itself (the clearance outranks the rate
   limits: the previous command held as it is, else the pose; the next command's
   change is then judged against none). A moving arm whose coasting distance (its speed
   braked at the guaranteed deceleration, plus a step of delay) would take it deeper
   into a margin brakes the same way, whatever the command asks. Every command is
   judged where the arm settles under it: the command plus the robot's **sag**, the
   offset from its command the arm shows at rest under a steady one (an unmodelled
   payload or weak motors hold it below its commands), bounded per joint by torque
   limit / stiffness, trusted away from the place it was seen only as far as the place
   of rest before agrees (``_learn_sag``); the pose is braked to with the command that
   holds the arm there, the pose less the sag;
7. a stale observation (``STALE``) gets the backup, which holds the last command.

The arithmetic of checks 2-6 runs in the compiled kernel
(:mod:`tether.safety.position.kernel`, bit-identical) where numba is installed and the
kinematics have the closed forms it evaluates, else in Python (``compiled`` says which;
``compiled=False`` forces Python). :mod:`tether.safety.position.batch` filters many
robots' commands in one call, and :class:`PositionActionSupervisor` a single common call
the same way; both keep the robot's state in its slot of
:mod:`tether.safety.position.states`, from which every other call moves it back first.

The previous change (for check 4) is remembered: when ``previous_command_rad`` is the
command this supervisor last returned, its change is the one it made; otherwise (the
first step, a human's command) the measured velocity × period stands in for it.

Invariants: ``filter`` never raises on its inputs and never returns a non-finite
command; the returned command lies inside every interval whenever they can all hold
together, and always inside the hard range; filtering the returned command again
(from the same supervisor state) returns it unchanged. The state belongs to one robot:
use one supervisor per robot session.
"""

from __future__ import annotations

import copy
import math
import operator
import threading
from collections.abc import Iterator, Sequence
from itertools import compress
from typing import Any, NamedTuple

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from tether.safety.backups import BackupConfig
from tether.safety.chain_gravity import chain_gravity
from tether.safety.kinematics import Kinematics
from tether.safety.limits import SafetyLimits
from tether.safety.position import kernel
from tether.safety.position.backups import CommandBackup, make_command_backup
from tether.safety.position.envelope import MOVED_CHECKS, CommandEnvelope
from tether.safety.position.impedance import ImpedanceModel
from tether.safety.position.states import RobotStates, states_for
from tether.safety.position.verdict import PositionVerdict
from tether.safety.segment import SegmentClearance
from tether.safety.supervisor import _array, _flags, _floats
from tether.safety.verdict import (
    CLIP_BEFORE_CAST as _HUGE,
    INVALID_PREVIOUS_BIT as _INVALID_PREVIOUS,
    INVALID_SHAPE_BIT as _INVALID_SHAPE,
    NON_FINITE_BIT as _NON_FINITE,
    PASSED,
    REPLACING_BITS as _REPLACING,
    STALE_BIT as _STALE,
    TAKEOVER_BIT as _TAKEOVER,
    ActionSource,
    SafetyCheck,
    SafetyVerdict,
)


class _Step(NamedTuple):
    """One command ready for the joint and Cartesian stages (see ``_prepare``)."""

    q: list[float]
    v: list[float]
    reference: list[float]  # the previous command, or q itself (the same list) without one
    change: list[float]
    command_in: list[float]  # the proposal's values, or the backup's target
    sag: list[float]  # how far the arm settles from a steady command (``_learn_sag``)
    command: np.ndarray | None  # the proposal as float32 (None: unusable)
    values: list[float] | None
    checks: int
    replacing: int  # the bits that make the backup replace the proposal


# (placed by the joint checks, inside them already, their bits, their squared moves,
# the Cartesian bits, the command to execute, whether the clearance stopped it outside
# the rate limits): what both paths of the stages return.
_Numbers = tuple[list[float], bool, int, Sequence[float], int, list[float], bool]

# Below this speed on every joint (rad/s) the arm's coasting distance is not checked.
_COASTING_SPEED = 0.05


class PositionSupervisorConfig(BaseModel):
    """How the position supervisor checks commands and which backup it uses."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backup: BackupConfig = Field(
        default_factory=lambda: BackupConfig(),
        description="Backup command for unusable or stale inputs and TAKEOVER (-)",
    )
    way_out: bool = Field(
        default=True,
        description="Move a command that would be held, with the arm more than "
        "kernel.RETREAT_TOLERANCE_M inside a breached margin (a hand left it there), part "
        "of the way out step after step, at any degradation level; off: hold it, and "
        "the arm moves only where a command takes it (-)",
    )
    sweep_spacing_m: float = Field(
        default=0.01,
        gt=0.0,
        description="Largest Cartesian distance between the poses checked along the segment "
        "from the measured pose to the command; keep it below twice the obstacle margin (m)",
    )
    observation_range_slack_rad: float = Field(
        default=0.5,
        gt=0.0,
        description="A joint reading further than this outside the joint's range makes the "
        "observation invalid (INVALID_OBSERVATION: the last command is held) (rad)",
    )
    observation_speed_factor: float = Field(
        default=5.0,
        gt=1.0,
        description="A joint speed above this multiple of its velocity limit makes the "
        "observation invalid (INVALID_OBSERVATION: the last command is held) (1)",
    )
    sweep_max_samples: int = Field(
        default=256,
        ge=1,
        description="Most poses checked along one segment; a longer one is sampled more "
        "sparsely (poses)",
    )


class PositionSupervisor:
    """Filters commanded joint positions against :class:`SafetyLimits`; see the module."""

    def __init__(
        self,
        limits: SafetyLimits,
        impedance: ImpedanceModel,
        *,
        kinematics: Kinematics | None = None,
        backup: CommandBackup | None = None,
        config: PositionSupervisorConfig | None = None,
        compiled: bool | None = None,
    ) -> None:
        self.limits = limits
        self.impedance = impedance
        self.config = cfg = config or PositionSupervisorConfig()
        self.kinematics = kinematics
        self._custom_backup = backup
        self.backup: CommandBackup = backup or make_command_backup(limits, cfg.backup)
        self.envelope = env = CommandEnvelope(limits, impedance)
        self._sag_bound = tuple(t / k for t, k in zip(env.torque, env.stiffness, strict=True))
        self._segment = SegmentClearance(
            limits, kinematics, spacing_m=cfg.sweep_spacing_m, max_samples=cfg.sweep_max_samples
        )
        self._chain_gravity = chain_gravity(kinematics, limits.n_joints)
        # 1 / (2b) per joint: a joint at speed v coasts v·|v|/(2b) while braking at b.
        self._half_over_brake = tuple(0.5 / b for b in limits.braking_deceleration_rad_s2)
        n = self._n = limits.n_joints
        self._all_joints = tuple(range(n))
        self._shape = (n,)
        self._q = slice(*limits.layout.joint_position)
        self._v = slice(*limits.layout.joint_velocity)
        self._min_obs = limits.min_obs_dim
        self._obs_dim = limits.observation_dim
        self._dt = limits.control_period_s
        self._zeros = [0.0] * n
        self._nowhere = [math.inf] * n
        self._range = tuple(zip(limits.position_low_rad, limits.position_high_rad, strict=True))
        slack = cfg.observation_range_slack_rad
        # Per joint, the readings an observation may hold: the range widened by the slack,
        # and speeds up to a multiple of the velocity limit.
        self._plausible = tuple(
            (lo - slack, hi + slack, cfg.observation_speed_factor * vmax)
            for lo, hi, vmax in zip(
                limits.position_low_rad,
                limits.position_high_rad,
                limits.velocity_limit_rad_s,
                strict=True,
            )
        )
        self._start_robot()
        # The compiled kernel's constants, when it can run this supervisor's arithmetic
        # (numba present, and the closed forms it evaluates: chain gravity and clearance,
        # or no kinematics at all); else the Python path.
        self._packed: kernel.Packed | None = None
        # Supervisors with equal signatures read their inputs alike and share the
        # kernel's constants: tether.safety.position.batch runs them as one array, their
        # robots' state in the RobotStates of that signature.
        self._signature = 0
        self._states: RobotStates | None = None
        if compiled if compiled is not None else kernel.ENABLED:
            self._packed = _packed_for(self)
            if self._packed is not None:
                kernel.warm()
                self._signature = _signature_of(self, self._packed)
                self._states = states_for(self._signature, n, self._anchors.shape)

    def fresh(self) -> PositionSupervisor:
        """A supervisor of another robot under the same limits: everything the limits,
        gains and kinematics give (and the kernel's constants) shared, no robot state.
        What a server does per session: a few µs, where constructing one takes ~0.3 ms."""
        other = copy.copy(self)
        other._segment = self._segment.fresh()
        other._start_robot()
        return other

    def __deepcopy__(self, memo: dict[int, Any]) -> PositionSupervisor:
        """Another supervisor continuing this robot from where it is now, on its own: a
        slot and memory of its own, so a ``filter`` on either leaves the other as it was
        (a what-if from the robot's state). What the limits, gains and kinematics give
        is shared, as :meth:`fresh` shares it."""
        twin = self.fresh()
        twin.take_state(self)  # brings this robot's state out of its slot first
        twin._anchors = self._anchors.copy()
        twin._segment = self._segment.continued()
        return twin

    def _start_robot(self) -> None:
        # The command this supervisor last returned (float32 values) and the change it
        # made, for the next step's acceleration check; the last readable pose, which an
        # unreadable observation holds when nothing better is known; the compiled
        # kernel's anchors of this robot; its slot in ``_states`` (-1: none yet), where
        # the batch path keeps that state while ``_states.here[slot]`` (see ``_pull``).
        self._last: tuple[list[float], list[float]] | None = None
        self._last_bytes = b""
        self._last_pose: list[float] | None = None
        # How far the arm settles from a steady command (q - command at rest, per joint):
        # what an unmodelled load (a payload, weak motors) makes it sag by, as its latest
        # place of rest shows it, or once it left, as that place and the place before
        # agree (``_learn_sag``); the offsets the arm showed at those two places; where
        # the latest began (infinitely far: none yet).
        self._sag = self._zeros
        self._rest_sag = self._zeros
        self._earlier_sag = self._zeros
        self._rest_pose = self._nowhere
        self._anchors = kernel.new_anchors(self._n)
        self._slot = -1
        self._slot_row = np.full(1, -1, np.intp)  # the slot as a batch of one takes it

    def with_limits(self, limits: SafetyLimits) -> PositionSupervisor:
        """The same supervisor (gains, kinematics, backup, config) enforcing other
        limits, with fresh robot state; pass the robot's state across with
        :meth:`take_state`."""
        return PositionSupervisor(
            limits,
            self.impedance,
            kinematics=self.kinematics,
            backup=self._custom_backup,
            config=self.config,
            compiled=self.compiled,
        )

    @property
    def compiled(self) -> bool:
        """Whether this supervisor's arithmetic runs in the compiled kernel."""
        return self._packed is not None

    def take_state(self, other: PositionSupervisor) -> None:
        """Continue the robot ``other`` has been supervising (its last command and
        change, its last readable pose, its sag and places of rest), e.g. across a
        change of degradation level."""
        if other is not self:
            other._pull()
            self._pull()
            self._last = other._last
            self._last_bytes = other._last_bytes
            self._last_pose = other._last_pose
            self._sag = other._sag
            self._rest_sag = other._rest_sag
            self._earlier_sag = other._earlier_sag
            self._rest_pose = other._rest_pose
            # Not the anchors: their clearances are measured against other's margins.

    def filter(
        self,
        observation: Any,
        command_rad: Any,
        previous_command_rad: Any | None = None,
        *,
        observation_age_s: float | None = None,
    ) -> tuple[np.ndarray, SafetyVerdict]:
        """The command to execute (float32 rad, shape (n,)) and what was done to it."""
        return self._run(observation, command_rad, previous_command_rad, observation_age_s, False)

    def backup_action(
        self, observation: Any, previous_command_rad: Any | None = None
    ) -> tuple[np.ndarray, SafetyVerdict]:
        """The backup command for this state (TAKEOVER, or a client-side watchdog miss);
        named as :meth:`Supervisor.backup_action`, so serving calls either alike."""
        return self._run(observation, None, previous_command_rad, None, True)

    def _run(
        self,
        observation: Any,
        proposed: Any,
        previous: Any,
        age_s: float | None,
        takeover: bool,
    ) -> tuple[np.ndarray, SafetyVerdict]:
        step = self._prepare(observation, proposed, previous, age_s, takeover)
        if not isinstance(step, _Step):
            return step  # an unreadable observation, answered already
        numbers = self._kernel_numbers if self._packed is not None else self._python_numbers
        return self._finish(step, numbers(*step[:6], not step.replacing))

    def _prepare(
        self,
        observation: Any,
        proposed: Any,
        previous: Any,
        age_s: float | None,
        takeover: bool,
    ) -> _Step | tuple[np.ndarray, SafetyVerdict]:
        """Steps 1 and 7 (and an unreadable observation's whole answer): what the joint
        and Cartesian stages get."""
        self._pull()
        state = self._read_state(observation)
        prev, own = self._previous(previous)
        if state is None:
            return self._unreadable(prev)
        q, v = state
        self._last_pose = q
        checks = 0 if previous is None or prev is not None else _INVALID_PREVIOUS
        dt = self._dt
        if prev is None:
            reference: list[float] = q
            change = [x * dt for x in v]
        elif own and self._last is not None:
            reference = prev
            change = self._last[1]
            self._learn_sag(q, v, prev, change)
        else:
            reference = prev
            change = [x * dt for x in v]
        command: np.ndarray | None = None
        values: list[float] | None = None
        if takeover:
            checks |= _TAKEOVER
        else:
            command, values = _command(proposed, self._n)
            if command is None:
                checks |= _NON_FINITE if values is not None else _INVALID_SHAPE
            if age_s is not None and not age_s <= self.limits.command_staleness_s:
                checks |= _STALE
        replacing = checks & _REPLACING
        if replacing:
            command_in = self.backup.target(q, reference)
        else:
            assert values is not None
            command_in = values
        return _Step(
            q, v, reference, change, command_in, self._sag, command, values, checks, replacing
        )

    def _learn_sag(
        self, q: list[float], v: list[float], command: list[float], change: list[float]
    ) -> None:
        """At rest under a steady command (every joint slower than ``_COASTING_SPEED``,
        the command's last change within ``kernel.STEADY_RAD``), the arm's offset from its
        command, each joint within what its motor can hold against the impedance (torque
        limit / stiffness), is the sag while the arm stays at this place of rest (within
        ``kernel.REST_APART_RAD`` of where it began, on every joint). Once it leaves, the
        sag is what this place and the place before agree on: per joint the smaller
        offset where both lie on one side, else none. A load sags the arm wherever it
        rests; a hand that held the arm still, or a payload since put down, showed an
        offset at one place only."""
        far = max(map(abs, map(operator.sub, q, self._rest_pose))) > kernel.REST_APART_RAD
        if max(map(abs, v)) <= _COASTING_SPEED and max(map(abs, change)) <= kernel.STEADY_RAD:
            if far:  # a new place of rest
                self._earlier_sag = self._rest_sag
                self._rest_pose = q
            self._sag = self._rest_sag = [
                -bound if d < -bound else bound if d > bound else d
                for d, bound in zip(map(operator.sub, q, command), self._sag_bound, strict=True)
            ]
        elif far:
            self._sag = [
                (a if abs(a) < abs(b) else b) if a * b > 0.0 else 0.0
                for a, b in zip(self._rest_sag, self._earlier_sag, strict=True)
            ]

    def _finish(self, step: _Step, numbers: _Numbers) -> tuple[np.ndarray, SafetyVerdict]:
        """The executed command and its verdict, from the stages' numbers."""
        q, _, reference, _, _, _, command, values, checks, replacing = step
        placed, inside, joint_checks, joint_moved, cartesian, candidate, stopped = numbers
        if not replacing:
            checks |= joint_checks
        out: np.ndarray | None = command if inside else np.array(placed, dtype=np.float32)
        if cartesian:
            checks |= cartesian
            out = np.array(candidate, dtype=np.float32)
        assert out is not None
        # A command the clearance stopped outside the rate limits is a standstill: the
        # next command's change is judged against none, not against that jump (which the
        # acceleration check would have the commands keep up at the velocity limit).
        change = self._zeros if stopped else list(map(operator.sub, candidate, reference))
        self._last = (candidate, change)
        self._last_bytes = out.tobytes()
        if replacing or values is None:
            return out, PositionVerdict(
                ActionSource.BACKUP, _flags(checks), _distance(candidate, q), self._all_joints
            )
        if candidate is values or candidate == values:
            if not checks:
                return out, PASSED
            return out, SafetyVerdict(ActionSource.POLICY, _flags(checks), 0.0, ())
        return out, self._corrected(values, placed, candidate, checks, joint_moved, cartesian)

    def _corrected(
        self,
        values: list[float],
        placed: list[float],
        candidate: list[float],
        checks: int,
        joint_moved: Sequence[float],
        cartesian: int,
    ) -> PositionVerdict:
        """The verdict on a proposal (``values``) the stages moved to ``candidate``."""
        moved: list[tuple[SafetyCheck, float]] = [
            (check, math.sqrt(squared))
            for check, squared in zip(MOVED_CHECKS, joint_moved, strict=True)
            if squared
        ]
        if cartesian:
            distance = _distance(candidate, placed)
            for check in (SafetyCheck.WORKSPACE, SafetyCheck.OBSTACLE):
                if cartesian & int(check):
                    moved.append((check, distance))
        joints = tuple(compress(self._all_joints, map(operator.ne, candidate, values)))
        return PositionVerdict(
            ActionSource.CLIPPED, _flags(checks), _distance(candidate, values), joints, tuple(moved)
        )

    def _python_numbers(
        self,
        q: list[float],
        v: list[float],
        reference: list[float],
        change: list[float],
        command: list[float],
        sag: list[float],
        exact: bool,
    ) -> _Numbers:
        """The joint and Cartesian stages in Python: the command placed by the joint
        checks (float32 values), whether it was inside them already, their bits and
        squared moves, the Cartesian bits and the command to execute."""
        gravity = self._gravity(q)
        joint = self.envelope.clip(q, v, gravity, reference, change, command, sag, exact=exact)
        placed = joint.values if joint.inside else _rounded(joint.values)
        cartesian = 0
        candidate = placed
        stopped = False
        if self._segment.active:
            cartesian, candidate, stopped = self._cartesian(
                q, v, gravity, reference, change, placed, sag
            )
        return placed, joint.inside, joint.checks, joint.moved, cartesian, candidate, stopped

    def _kernel_numbers(
        self,
        q: list[float],
        v: list[float],
        reference: list[float],
        change: list[float],
        command: list[float],
        sag: list[float],
        exact: bool,
    ) -> _Numbers:
        """:meth:`_python_numbers` in the compiled kernel (bit-identical)."""
        packed = self._packed
        assert packed is not None
        result: list[float] = kernel.step(
            packed.joints,
            packed.geo,
            packed.obstacles,
            packed.groups,
            self._anchors,
            np.array(q + v + reference + change + command + sag),
            exact,
            reference is not q,
        ).tolist()
        return self._unpack(result)

    def _unpack(self, result: list[float]) -> _Numbers:
        """The kernel's output row (``kernel.step``) as :meth:`_python_numbers` returns it."""
        n = self._n
        placed = result[:n]
        extra = result[2 * n :]
        cartesian = int(extra[kernel.OUT_CARTESIAN])
        return (
            placed,
            extra[kernel.OUT_INSIDE] != 0.0,
            int(extra[kernel.OUT_JOINT_CHECKS]),
            extra[:4],
            cartesian,
            result[n : 2 * n] if cartesian else placed,
            extra[kernel.OUT_STOPPED] != 0.0,
        )

    def _cartesian(
        self,
        q: list[float],
        v: list[float],
        gravity: list[float],
        reference: list[float],
        change: list[float],
        candidate: list[float],
        sag: list[float],
    ) -> tuple[int, list[float], bool]:
        """The Cartesian bits breached, the command to execute instead (see step 6) and
        whether it stops the command outside the rate limits (held as it is, or the
        pose); commands in and out are float32 values. A command is judged where the arm
        settles under it (the command plus the learnt ``sag``), and the pose is braked to
        with the command that holds the arm there (the pose less the sag)."""
        segment = self._segment
        held = reference is not q
        settled = _settled(candidate, sag)
        settled_reference = _settled(reference, sag) if held else q
        # Where the arm coasts to if it brakes now (its measured speed, the guaranteed
        # deceleration, a step of delay): if that is deeper into a margin than where it
        # is, the command brakes (held, else the pose) whatever it asks for, before the
        # segment to the command would see the breach.
        stop: list[float] | None = None
        if max(map(abs, v)) > _COASTING_SPEED:
            stop = [
                x + y * (abs(y) * half_over_b + self._dt)
                for x, y, half_over_b in zip(q, v, self._half_over_brake, strict=True)
            ]
        # The common case far from every wall and obstacle: the anchors prove all the
        # segments below clear at once (one pass instead of one per segment).
        poses = [q, settled]
        if held:
            poses.append(settled_reference)
        if stop is not None:
            poses.append(stop)
        if segment.proves_clear(poses):
            return 0, candidate, False
        bits, fraction = segment.clear_fraction(q, settled)
        # Inside a margin the command may not go deeper than the previous command either:
        # an arm sagging under an unmodelled load lags below its command, so a command
        # that is only "no worse than the arm" each step walks the arm into the obstacle.
        if held:
            deeper, _ = segment.clear_fraction(settled_reference, settled)
            if deeper:
                bits |= deeper
                fraction = 0.0  # backed off to the held command, or braked
        coasting = False
        if stop is not None:
            coast_bits = segment.breaches(q, stop)
            if coast_bits:
                bits |= coast_bits
                coasting = True
        if not bits:
            return 0, candidate, False
        envelope = self.envelope
        if coasting:
            fraction = 0.0
        pose_command = [x - d for x, d in zip(q, sag, strict=True)]
        targets = self._fallbacks(q, settled, sag, fraction, held, reference, bits, pose_command)
        for target in targets:
            placed = envelope.clip(q, v, gravity, reference, change, target, sag, exact=False)
            trial = _rounded(placed.values)
            arrives = _settled(trial, sag)
            if not segment.breaches(q, arrives) and not (
                held and segment.breaches(settled_reference, arrives)
            ):
                return bits, trial, False
        # The clearance outranks the rate limits: the previous command held as it is (a
        # moving command cannot be held within the acceleration limit, and a pose
        # commanded every step lets a sagging arm sink every step), else the pose.
        if held:
            trial = _rounded(envelope.hold(reference))
            if not segment.breaches(q, _settled(trial, sag)):
                return bits, trial, True
        return bits, _rounded(envelope.hold(pose_command)), True

    def _fallbacks(
        self,
        q: list[float],
        settled: list[float],
        sag: list[float],
        fraction: float,
        held: bool,
        reference: list[float],
        bits: int,
        pose_command: list[float],
    ) -> Iterator[list[float]]:
        """Step 6's targets for a breaching command, in turn (each made only when the one
        before it breached): backed off along the segment; deep inside a margin (a hand
        pushed the arm there), the previous command moved part of the way out, step after
        step until the arm follows; the previous command; the pose. A command reset to
        the measured pose every step lets an arm that sags under an unmodelled load sink
        by its sag every step (ratcheting into the obstacle); a held command lets it sink
        once, to where the impedance holds it, and the pose less the learnt sag holds it
        where it is. A held command ahead of a moving arm toward the obstacle breaches,
        and the pose (braking) is next."""
        if fraction > 0.0:
            yield [a + fraction * (b - a) - d for a, b, d in zip(q, settled, sag, strict=True)]
        if held:
            way = None
            if self.config.way_out:
                way = self._segment.way_out(
                    q,
                    bits,
                    kernel.RETREAT_PROBE_RAD,
                    kernel.RETREAT_TOLERANCE_M,
                    kernel.RETREAT_FRACTION,
                    kernel.RETREAT_RAD,
                )
            if way is not None:
                yield [r + w for r, w in zip(reference, way, strict=True)]
            yield reference
        yield pose_command

    def _reading(self) -> tuple[int, int, np.ndarray, float]:
        """Where an observation's joint positions and velocities start, the plausible
        readings as one (4, n) array (low, high, -vmax, vmax), and the period: what the
        kernel reads an observation with (alike for a signature; its ``RobotStates`` keeps
        it)."""
        low, high, vmax = (np.array(x) for x in zip(*self._plausible, strict=True))
        q, v, n = self._q, self._v, self._n
        # The layout's (start, stop) pairs of n joints each (SafetyLimits checks them).
        assert q.step is None
        assert v.step is None
        assert q.stop - q.start == v.stop - v.start == n
        bounds = np.ascontiguousarray(np.stack((low, high, -vmax, vmax)), dtype=np.float64)
        return q.start, v.start, bounds, self._dt

    def _common(self, observation: Any, age_s: float | None, previous: Any) -> int:
        """The observation's length when the compiled path can take this call whole: the
        kernel runs this supervisor, the observation is a 1-D float array of a length it
        reads, it is not stale, and the previous command is None or a float32 array of
        shape (n,) (whether it is this supervisor's own, the kernel tells by its bits);
        else 0."""
        if not (
            self._signature
            and type(observation) is np.ndarray
            and observation.ndim == 1
            and observation.dtype.char in "fd"
            and (age_s is None or age_s <= self.limits.command_staleness_s)
            and (
                previous is None
                or (
                    type(previous) is np.ndarray
                    and previous.dtype == np.float32
                    and previous.shape == self._shape
                )
            )
        ):
            return 0
        length: int = observation.shape[0]
        expected = self._obs_dim
        if length == expected if expected else length >= self._min_obs:
            return length
        return 0

    def _kernel_verdict(self, kind: int, checks: int, report: np.ndarray) -> SafetyVerdict:
        """The verdict on a row ``kernel.filter_batch`` answered with ``kind`` (not
        ROW_PASSED), from its check bits and its report row (its ``kernel.step`` row,
        then its proposed command)."""
        if kind == kernel.ROW_FLAGGED:
            return SafetyVerdict(ActionSource.POLICY, _flags(checks), 0.0, ())
        n = self._n
        values = report.tolist()
        cartesian = int(values[2 * n + kernel.OUT_CARTESIAN])
        return self._corrected(
            values[2 * n + kernel.OUT_EXTRA :],
            values[:n],
            values[n : 2 * n] if cartesian else values[:n],
            checks,
            values[2 * n : 2 * n + kernel.OUT_JOINT_CHECKS],
            cartesian,
        )

    def _pull(self) -> None:
        """This robot's state back on the supervisor, if the batch path left it in the slot."""
        slot = self._slot
        if slot < 0:
            return
        states = self._states
        assert states is not None
        if not states.move_out(slot, kernel.FLAG_HERE):
            return
        if states.has_last[slot]:
            self._last = (states.candidate[slot].tolist(), states.change[slot].tolist())
            self._last_bytes = states.out32[slot].tobytes()
        else:
            self._last = None
            self._last_bytes = b""
        self._last_pose = states.pose[slot].tolist() if states.has_pose[slot] else None
        self._sag = states.sag[slot].tolist()
        self._rest_sag = states.rest_sag[slot].tolist()
        self._earlier_sag = states.earlier_sag[slot].tolist()
        self._rest_pose = states.rest_pose[slot].tolist()
        self._anchors = states.anchors[slot].copy()

    def _push(self) -> int:
        """This robot's slot (claimed if it has none), its state moved there; the caller
        holds ``_states.lock``."""
        states = self._states
        assert states is not None
        slot = self._slot
        if slot < 0:
            slot = self._slot = states.claim(self)
            self._slot_row = np.full(1, slot, np.intp)
        if states.here[slot]:
            return slot
        last = self._last
        states.has_last[slot] = last is not None
        if last is not None:
            states.candidate[slot] = last[0]
            states.change[slot] = last[1]
            states.out32[slot] = np.frombuffer(self._last_bytes, np.float32)
        pose = self._last_pose
        states.has_pose[slot] = pose is not None
        if pose is not None:
            states.pose[slot] = pose
        states.sag[slot] = self._sag
        states.rest_sag[slot] = self._rest_sag
        states.earlier_sag[slot] = self._earlier_sag
        states.rest_pose[slot] = self._rest_pose
        states.anchors[slot] = self._anchors
        states.here[slot] = True
        return slot

    def _previous(self, previous: Any) -> tuple[list[float] | None, bool]:
        """A usable previous command (finite, inside the joint limits) or None, and
        whether it is the command this supervisor last returned."""
        if previous is None:
            return None, False
        last = self._last
        # The common case: the command this supervisor returned, handed back.
        if (
            last is not None
            and type(previous) is np.ndarray
            and previous.dtype == np.float32
            and previous.shape == self._shape
            and previous.tobytes() == self._last_bytes
        ):
            return last[0], True
        values = _floats(previous, self._n)
        if values is None:
            return None, False
        last = self._last
        if last is not None and values == last[0]:
            return values, True  # usable by construction
        for x, (lo, hi) in zip(values, self._range, strict=True):
            if not lo <= x <= hi:  # also false for NaN
                return None, False
        return values, False

    def _read_state(self, observation: Any) -> tuple[list[float], list[float]] | None:
        if type(observation) is np.ndarray and observation.dtype.char in "fd":
            obs: np.ndarray | None = observation
        else:
            obs = _array(observation)
        if obs is None or obs.ndim != 1 or obs.shape[0] < self._min_obs:
            return None
        if self._obs_dim and obs.shape[0] != self._obs_dim:
            return None
        values = obs.tolist()
        q = values[self._q]
        v = values[self._v]
        # Outside what the robot can physically be (a joint far beyond its range, a speed
        # far over its limit): a broken sensor or a garbled message, never a state to
        # steer from. The bounds are finite, so NaN and ±inf fail them too.
        for x, y, (lo, hi, vmax) in zip(q, v, self._plausible, strict=True):
            if not (lo <= x <= hi and -vmax <= y <= vmax):
                return None
        return q, v

    def _gravity(self, q: list[float]) -> list[float]:
        if self._chain_gravity is not None:
            return self._chain_gravity.torques(q)
        if self.kinematics is None:
            return self._zeros
        values = _floats(self.kinematics.gravity_torque(np.array(q)), self._n)
        if values is None or not all(map(math.isfinite, values)):
            # A broken model must not steer the arm: the torque check then assumes none.
            return self._zeros
        return values

    def _unreadable(self, prev: list[float] | None) -> tuple[np.ndarray, SafetyVerdict]:
        """An unreadable observation: repeat the last command known (the previous one,
        else the last this supervisor returned, else the last pose seen, else home)."""
        if prev is not None:
            known = prev
        elif self._last is not None:
            known = self._last[0]
        elif self._last_pose is not None:
            known = self._last_pose
        else:
            known = list(self.limits.home_position_rad)
        out = np.array(self.envelope.hold(known), dtype=np.float32)
        values = out.tolist()
        self._last = (values, self._zeros)
        self._last_bytes = out.tobytes()
        return out, PositionVerdict(
            ActionSource.BACKUP,
            SafetyCheck.INVALID_OBSERVATION,
            _distance(values, known),
            self._all_joints,
        )


def _command(proposed: Any, n: int) -> tuple[np.ndarray | None, list[float] | None]:
    """(float32 command, its values) for a finite command of shape (n,); (None, values)
    for a non-finite one; (None, None) for a wrong shape or a non-numeric value."""
    if isinstance(proposed, np.ndarray) and proposed.dtype == np.float32:
        if proposed.shape != (n,):
            return None, None
        values: list[float] = proposed.tolist()
        # float32 values cannot sum past float64's range: the sum is finite iff all are.
        if math.isfinite(sum(values)):
            return proposed, values
        return None, values
    floats = _floats(proposed, n)
    if floats is None:
        return None, None
    if not all(map(math.isfinite, floats)):
        return None, floats
    command = np.array(
        [-_HUGE if x < -_HUGE else _HUGE if x > _HUGE else x for x in floats], dtype=np.float32
    )
    return command, command.tolist()


def _settled(command: list[float], sag: list[float]) -> list[float]:
    """Where the arm settles under ``command``: the command plus its learnt sag."""
    return [x + d for x, d in zip(command, sag, strict=True)]


def _rounded(values: list[float]) -> list[float]:
    """``values`` as the float32 command will carry them."""
    rounded: list[float] = np.array(values, dtype=np.float32).tolist()
    return rounded


def _distance(a: Sequence[float], b: Sequence[float]) -> float:
    return math.dist(a, b)


_SIGNATURES: dict[tuple[Any, ...], int] = {}
_SIGNATURES_LOCK = threading.Lock()


def _signature_of(supervisor: PositionSupervisor, packed: kernel.Packed) -> int:
    """A small int, equal for supervisors whose inputs are read alike (layout, plausible
    readings, period, staleness) under the same kernel constants; never 0."""
    limits = supervisor.limits
    key = (
        packed.key,
        supervisor._plausible,
        limits.layout.joint_position,
        limits.layout.joint_velocity,
        supervisor._dt,
        limits.command_staleness_s,
        supervisor._obs_dim,
        supervisor._min_obs,
    )
    with _SIGNATURES_LOCK:
        return _SIGNATURES.setdefault(key, len(_SIGNATURES) + 1)


def _packed_for(supervisor: PositionSupervisor) -> kernel.Packed | None:
    """The kernel's constants for ``supervisor``, or None when the kernel cannot run it
    (numba missing; kinematics without the closed forms the kernel evaluates)."""
    if not kernel.AVAILABLE:
        return None
    segment = supervisor._segment
    if supervisor.kinematics is not None and supervisor._chain_gravity is None:
        return None
    if segment.active and (segment.chain is None or segment._reach is None):
        return None
    if supervisor.limits.n_joints < 2:
        return None
    return kernel.pack(
        supervisor.envelope,
        segment,
        supervisor._chain_gravity,
        supervisor._half_over_brake,
        _COASTING_SPEED,
        supervisor.config.way_out,
    )
