"""A recorded corpus of the position supervisor's decisions, and its replay.

``python tests/safety/position_corpus.py`` runs the supervisor's Python path over
sequences of calls and writes each call's inputs and results to
``tests/safety/data/position_corpus.npz``: random states and commands (near and far, at
and beyond the joint ends, NaN/±Inf, stale, takeovers, unreadable observations, previous
commands handed back, made up or unusable) under the base and the tightened limits;
states close to the obstacle with commands into it; and closed loops on the MuJoCo arm,
nominal and drifted, of a random-target policy and the shipped position policy through
the action-space supervisor serving runs. :func:`replay` feeds the same calls to a fresh
supervisor (either path) and returns the calls whose result differs from the recorded
one in any bit: the action's float32 bytes, the verdict's class, source, check bits,
correction, joints and per-check moves.

The corpus pins what the supervisor decides; re-record it only for a change meant to
alter a decision, and say so in the commit.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from tether.safety import SafetyVerdict
from tether.safety.for_spec import limits_for
from tether.safety.position import PositionSupervisor
from tether.safety.position.actions import PositionActionSupervisor
from tether.safety.position.presets import arm_impedance
from tether.safety.verdict import ActionSource, SafetyCheck
from tether.sim import ArmEnv, ArmEnvConfig, ArmKinematics, arm_spec

PATH = Path(__file__).resolve().parent / "data" / "position_corpus.npz"
SPEC = arm_spec("position")
N = SPEC.n_joints
Q = slice(*SPEC.layout.joint_position)
V = slice(*SPEC.layout.joint_velocity)
LIMITS = limits_for(SPEC)
LOW = np.asarray(LIMITS.position_low_rad)
HIGH = np.asarray(LIMITS.position_high_rad)
VMAX = np.asarray(LIMITS.velocity_limit_rad_s)
KINEMATICS = ArmKinematics(SPEC)
WEIRD = (np.nan, np.inf, -np.inf, 1e30, -1e30, 3.4e38, 7.0, -7.0)
# The order of moved_rad entries: the joint checks, then the Cartesian ones.
MOVED_ORDER = (
    SafetyCheck.POSITION,
    SafetyCheck.VELOCITY,
    SafetyCheck.ACCELERATION,
    SafetyCheck.TORQUE,
    SafetyCheck.WORKSPACE,
    SafetyCheck.OBSTACLE,
)
SOURCES = tuple(ActionSource)
# Which supervisor a sequence runs: commands in rad, or actions through the spec's map.
POSITION, ACTIONS = 0, 1
# What a call hands over as the previous command.
PREV_NONE, PREV_LAST, PREV_GIVEN = 0, 1, 2


class Call(NamedTuple):
    sequence: int
    kind: int  # POSITION or ACTIONS
    factor: float  # limits tightened by this factor (1.0: the base limits)
    observation: np.ndarray  # float32 (obs_dim,)
    command: np.ndarray  # float32 (n,), rad or normalized by ``kind``
    prev_kind: int
    previous: np.ndarray  # float32 (n,), used with PREV_GIVEN
    age_s: float  # -1.0: None
    backup: bool


Supervisor = PositionSupervisor | PositionActionSupervisor


def make_supervisor(kind: int, factor: float, compiled: bool | None) -> Supervisor:
    limits = LIMITS if factor == 1.0 else LIMITS.tightened(factor)
    position = PositionSupervisor(limits, arm_impedance(), kinematics=KINEMATICS, compiled=compiled)
    assert compiled is None or position.compiled == compiled
    return position if kind == POSITION else PositionActionSupervisor(position, SPEC)


def invoke(supervisor: Supervisor, call: Call, last: Any) -> tuple[np.ndarray, SafetyVerdict]:
    previous = {PREV_NONE: None, PREV_LAST: last, PREV_GIVEN: call.previous}[call.prev_kind]
    if call.backup:
        return supervisor.backup_action(call.observation, previous)
    age = None if call.age_s == -1.0 else call.age_s
    return supervisor.filter(call.observation, call.command, previous, observation_age_s=age)


def observation(q: Any, v: Any) -> np.ndarray:
    out = np.zeros(SPEC.obs_dim, dtype=np.float32)
    out[Q] = q
    out[V] = v
    return out


# -- the calls ----------------------------------------------------------------------------


def _random_state(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    widen = rng.choice([0.0, 0.0, 0.0, 0.05, 0.6])
    q = rng.uniform(LOW - widen, HIGH + widen)
    speed = rng.choice([0.0, 0.0, 0.01, 0.05, 0.3, 0.8, 1.2, 1.2, 1.2, 6.0])
    return q, rng.uniform(-1.0, 1.0, N) * VMAX * speed


def _random_command(rng: np.random.Generator, q: np.ndarray, last: Any) -> np.ndarray:
    kind = rng.integers(10)
    if kind <= 3:  # a small step from the pose or the last command: often passes
        base = q if last is None or rng.random() < 0.3 else np.asarray(last, dtype=np.float64)
        scale = rng.choice([0.0, 1e-5, 1e-4, 3e-3, 0.03])
        return (base + rng.normal(0.0, scale, N)).astype(np.float32)
    if kind == 4:
        return rng.uniform(LOW - 0.5, HIGH + 0.5).astype(np.float32)
    if kind == 5:  # at or just beyond a joint's end
        out = np.where(rng.random(N) < 0.5, LOW, HIGH) + rng.normal(0.0, 0.05, N)
        return out.astype(np.float32)
    if kind == 6:
        out = q.astype(np.float32)
        with np.errstate(over="ignore"):
            out[rng.integers(N)] = rng.choice(WEIRD)
        return out
    if kind == 7 and last is not None:  # the last command handed back as the proposal
        return np.array(last, dtype=np.float32)
    return rng.uniform(LOW, HIGH).astype(np.float32)


def _random_previous(rng: np.random.Generator, q: np.ndarray) -> tuple[int, np.ndarray]:
    kind = rng.integers(10)
    none = np.zeros(N, dtype=np.float32)
    if kind <= 6:
        return PREV_LAST, none
    if kind == 7:
        return PREV_NONE, none
    if kind == 8:
        out = (q + rng.normal(0.0, 0.05, N)).astype(np.float32)
        if rng.random() < 0.3:
            with np.errstate(over="ignore"):
                out[rng.integers(N)] = rng.choice(WEIRD)
        return PREV_GIVEN, out
    return PREV_GIVEN, rng.uniform(LOW - 0.3, HIGH + 0.3).astype(np.float32)


def _random_observation(rng: np.random.Generator, q: np.ndarray, v: np.ndarray) -> np.ndarray:
    obs = observation(q, v)
    if rng.integers(60) == 0:
        with np.errstate(over="ignore"):
            obs[rng.integers(2 * N)] = rng.choice(WEIRD)
    return obs


def _near_obstacle(rng: np.random.Generator) -> np.ndarray:
    """A pose whose collision spheres are within a few centimetres of the obstacle margin."""
    from tether.safety.chain import chain_clearance

    chain = chain_clearance(LIMITS, KINEMATICS)
    assert chain is not None
    while True:
        q = rng.uniform(LOW, HIGH)
        if -0.02 < chain.obstacles(q.tolist()) < 0.04:
            return q


def random_calls(rng: np.random.Generator, first: int) -> Iterator[Call]:
    """Sequences of random calls at the position supervisor (ids from ``first``)."""
    for index in range(44):
        sequence = first + index
        factor = 0.5 if index % 4 == 3 else 1.0
        near_obstacle = index % 4 == 1
        near = near_obstacle or rng.random() < 0.5  # consecutive states, as a robot sends
        q, v = _random_state(rng)
        if near_obstacle:
            q, v = _near_obstacle(rng), rng.uniform(-0.5, 0.5, N) * VMAX
        toward = _near_obstacle(rng)
        last: Any = None
        for _ in range(60):
            if near:
                q = np.clip(q + v * LIMITS.control_period_s + rng.normal(0.0, 0.01, N), LOW, HIGH)
                v = np.clip(v + rng.normal(0.0, 0.3, N), -1.2 * VMAX, 1.2 * VMAX)
            else:
                q, v = _random_state(rng)
            obs = _random_observation(rng, q, v)
            if near_obstacle and rng.random() < 0.6:  # heading into the obstacle
                command = (q + np.clip(toward - q, -0.1, 0.1)).astype(np.float32)
            else:
                command = _random_command(rng, q, last)
            prev_kind, previous = _random_previous(rng, q)
            age = rng.choice([-1.0] * 14 + [0.0, 0.01, 0.05, 0.5, np.nan])
            backup = bool(rng.random() < 0.04)
            yield Call(sequence, POSITION, factor, obs, command, prev_kind, previous, age, backup)
            last = command  # a stand-in for the proposal helpers; replay hands back outputs


def closed_loop_calls(
    policy: Callable[[np.ndarray, int], np.ndarray],
    episodes: int,
    first: int,
    *,
    drifted: bool,
) -> Iterator[Call]:
    """The action-space supervisor (Python path) in a closed loop on the MuJoCo arm."""
    from tether.sim.drift import DriftSchedule

    drift = DriftSchedule.demo(start_step=0, ramp_steps=2) if drifted else None
    env = ArmEnv(seed=0, config=ArmEnvConfig(command_interface="position"), drift=drift)
    none = np.zeros(N, dtype=np.float32)
    for episode in range(episodes):
        supervisor = make_supervisor(ACTIONS, 1.0, compiled=False)
        obs, _ = env.reset(seed=episode)
        previous: np.ndarray | None = None
        for step in range(env.config.episode_steps):
            action = policy(obs, step).astype(np.float32)
            prev_kind = PREV_NONE if previous is None else PREV_LAST
            yield Call(first + episode, ACTIONS, 1.0, obs, action, prev_kind, none, -1.0, False)
            previous, _ = supervisor.filter(obs, action, previous)
            obs, _, terminated, truncated, _ = env.step(previous)
            if terminated or truncated:
                break


def random_target_policy(rng: np.random.Generator) -> Callable[[np.ndarray, int], np.ndarray]:
    """A policy of normalized targets: a new random target every 25 steps with jitter,
    and every 7th step a uniformly random action (far outside what a trained policy sends)."""
    target = np.zeros(N, dtype=np.float32)

    def policy(obs: np.ndarray, step: int) -> np.ndarray:
        nonlocal target
        if step % 25 == 0:
            target = rng.uniform(-1.1, 1.1, N).astype(np.float32)
        jitter = rng.normal(0.0, 0.05, N).astype(np.float32)
        return target + jitter if step % 7 else rng.uniform(-1.0, 1.0, N).astype(np.float32)

    return policy


def all_calls() -> list[Call]:
    import torch

    from tether.assets import load_pretrained_bundle
    from tether.policy import EngineConfig, PolicyEngine

    rng = np.random.default_rng(20261202)
    calls = list(random_calls(rng, 0))
    random_target = random_target_policy(rng)

    torch.set_num_threads(1)
    engine = PolicyEngine(
        load_pretrained_bundle(command_interface="position"), EngineConfig(execution="eager")
    )

    def shipped(obs: np.ndarray, step: int) -> np.ndarray:
        return engine.act(obs[None].astype(np.float32), step % 3 != 0).actions[0]

    for drifted in (False, True):
        calls += closed_loop_calls(random_target, 3, 100 + 10 * drifted, drifted=drifted)
        calls += closed_loop_calls(shipped, 2, 200 + 10 * drifted, drifted=drifted)
    return calls


# -- results --------------------------------------------------------------------------------


class Results(NamedTuple):
    action: np.ndarray  # float32 (C, n)
    verdict_class: np.ndarray  # int8: 0 SafetyVerdict, 1 PositionVerdict
    source: np.ndarray  # int8, index into ActionSource
    checks: np.ndarray  # int64 bits
    correction: np.ndarray  # float64
    joints: np.ndarray  # int8 bit mask of the changed joints
    moved: np.ndarray  # float64 (C, 6) in MOVED_ORDER, NaN where not listed


def run(calls: list[Call], compiled: bool | None) -> Results:
    """The calls through fresh supervisors (one per sequence), each handed back its own
    last output where the call says so."""
    out = _empty_results(len(calls))
    supervisor: Supervisor | None = None
    sequence = -1
    last: Any = None
    for i, call in enumerate(calls):
        if call.sequence != sequence:
            sequence = call.sequence
            supervisor = make_supervisor(call.kind, call.factor, compiled)
            last = None
        assert supervisor is not None
        action, verdict = invoke(supervisor, call, last)
        last = action
        _store(out, i, action, verdict)
    return out


def _empty_results(count: int) -> Results:
    return Results(
        np.zeros((count, N), np.float32),
        np.zeros(count, np.int8),
        np.zeros(count, np.int8),
        np.zeros(count, np.int64),
        np.zeros(count),
        np.zeros(count, np.int8),
        np.full((count, len(MOVED_ORDER)), np.nan),
    )


def _store(out: Results, i: int, action: np.ndarray, verdict: SafetyVerdict) -> None:
    assert action.dtype == np.float32
    assert action.shape == (N,)
    out.action[i] = action
    out.verdict_class[i] = 0 if type(verdict) is SafetyVerdict else 1
    out.source[i] = SOURCES.index(verdict.source)
    out.checks[i] = int(verdict.checks)
    out.correction[i] = verdict.correction_norm
    out.joints[i] = sum(1 << j for j in verdict.joints)
    for check, distance in getattr(verdict, "moved_rad", ()):
        out.moved[i, MOVED_ORDER.index(check)] = distance


def run_batched(calls: list[Call], compiled: bool | None) -> Results:
    """:func:`run`, with the sequences side by side: round ``t`` is every sequence's
    ``t``-th call, one ``filter_commands`` call for the command sequences and one
    ``filter_actions`` call for the action ones (backups as single calls)."""
    from tether.safety.position.batch import filter_actions, filter_commands

    out = _empty_results(len(calls))
    by_sequence: dict[int, list[int]] = {}
    for i, call in enumerate(calls):
        by_sequence.setdefault(call.sequence, []).append(i)
    sequences = list(by_sequence.values())
    supervisors = [
        make_supervisor(calls[s[0]].kind, calls[s[0]].factor, compiled) for s in sequences
    ]
    last: list[Any] = [None] * len(sequences)
    for t in range(max(len(s) for s in sequences)):
        rows: dict[int, list[tuple[int, int]]] = {POSITION: [], ACTIONS: []}
        for r, indices in enumerate(sequences):
            if t >= len(indices):
                continue
            i = indices[t]
            call = calls[i]
            if call.backup:
                action, verdict = invoke(supervisors[r], call, last[r])
                last[r] = action
                _store(out, i, action, verdict)
            else:
                rows[call.kind].append((r, i))
        for kind, members in rows.items():
            if not members:
                continue
            chosen = [calls[i] for _, i in members]
            previous = [
                {PREV_NONE: None, PREV_LAST: last[r], PREV_GIVEN: c.previous}[c.prev_kind]
                for (r, _), c in zip(members, chosen, strict=True)
            ]
            ages = [None if c.age_s == -1.0 else c.age_s for c in chosen]
            sups: Any = [supervisors[r] for r, _ in members]
            observations = [c.observation for c in chosen]
            if kind == POSITION:
                got = filter_commands(
                    sups, observations, [c.command for c in chosen], previous, ages
                )
            else:
                got = filter_actions(
                    sups, observations, np.stack([c.command for c in chosen]), previous, ages
                )
            for (r, i), (action, verdict) in zip(members, got, strict=True):
                last[r] = action
                _store(out, i, action, verdict)
    return out


def save(calls: list[Call], results: Results, path: Path = PATH) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(
        path,
        sequence=np.array([c.sequence for c in calls], np.int32),
        kind=np.array([c.kind for c in calls], np.int8),
        factor=np.array([c.factor for c in calls]),
        observation=np.stack([c.observation for c in calls]),
        command=np.stack([c.command for c in calls]),
        prev_kind=np.array([c.prev_kind for c in calls], np.int8),
        previous=np.stack([c.previous for c in calls]),
        age_s=np.array([c.age_s for c in calls]),
        backup=np.array([c.backup for c in calls]),
        **{f"out_{name}": value for name, value in results._asdict().items()},
    )


def load(path: Path = PATH) -> tuple[list[Call], Results]:
    with np.load(path) as data:
        calls = [
            Call(int(s), int(k), float(f), o, c, int(pk), p, float(a), bool(b))
            for s, k, f, o, c, pk, p, a, b in zip(
                data["sequence"],
                data["kind"],
                data["factor"],
                data["observation"],
                data["command"],
                data["prev_kind"],
                data["previous"],
                data["age_s"],
                data["backup"],
                strict=True,
            )
        ]
        results = Results(*(data[f"out_{name}"] for name in Results._fields))
    return calls, results


def differences(got: Results, want: Results) -> list[int]:
    """Indices of the calls whose results differ in any bit."""
    bad = np.zeros(len(want.action), dtype=bool)
    bad |= (got.action.view(np.uint32) != want.action.view(np.uint32)).any(axis=1)
    for name in ("verdict_class", "source", "checks", "joints"):
        bad |= getattr(got, name) != getattr(want, name)
    bad |= got.correction.view(np.uint64) != want.correction.view(np.uint64)
    bad |= (got.moved.view(np.uint64) != want.moved.view(np.uint64)).any(axis=1)
    return np.flatnonzero(bad).tolist()


def replay(compiled: bool | None, path: Path = PATH) -> tuple[int, list[int]]:
    """(calls replayed, indices whose results differ from the recording)."""
    calls, want = load(path)
    with np.errstate(over="ignore"):
        got = run(calls, compiled)
    return len(calls), differences(got, want)


def main() -> None:
    calls = all_calls()
    with np.errstate(over="ignore"):
        results = run(calls, compiled=False)
    save(calls, results)
    checks = results.checks
    fired = {c.name: int(np.count_nonzero(checks & int(c))) for c in SafetyCheck if c.name}
    print(f"{len(calls)} calls -> {PATH} ({PATH.stat().st_size} bytes); fired: {fired}")
    assert math.isfinite(float(np.abs(results.action).max()))


if __name__ == "__main__":
    main()
