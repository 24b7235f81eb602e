"""Pair consecutive control steps of one episode into transitions, and nothing else.

A transition ``(s_t, a_t, r_t, s_{t+1})`` needs step ``t`` (observation and the action
chosen for it) and step ``t+1`` (the reward of that action, the next observation, the
episode-end flags, and the action the robot really executed if a person overrode it).
:class:`StepPairer` matches them by ``(session_id, episode_id, step_index)``, never by
time, and keeps these invariants:

* a transition joins two steps whose indices differ by exactly one; a gap is counted as
  ``missing`` and never bridged;
* a step that arrives early waits, at most ``reorder_window_steps`` behind the highest
  index seen, for the ones before it; arriving behind others counts as ``out_of_order``;
* a step seen twice counts as a ``duplicate``; one whose slot was already given up as
  missing counts as ``late``; one after the episode's terminal step as ``after_end``;
  none of them changes what was paired;
* a terminated or truncated step closes its episode.

It is single-threaded on purpose: the recorder's worker thread owns it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from tether.data.records import Transition
from tether.data.step import ACTION_SOURCES, StepRecord

# Episodes a session remembers after closing them, so stragglers are counted, not reopened.
_CLOSED_EPISODES_REMEMBERED = 8
# Gaps an episode remembers, to tell a late step from a duplicate.
_GAPS_REMEMBERED = 64


@dataclass(frozen=True)
class PairingStats:
    """Counters of what the pairer saw, and of why anything could not be paired."""

    steps: int  # steps received
    transitions: int  # transitions emitted
    duplicates: int  # step index already received in its episode
    out_of_order: int  # arrived behind a higher index of its episode (still paired)
    missing: int  # step indices never received before their gap was given up
    late: int  # arrived after its gap was given up, or for an episode already closed
    after_end: int  # arrived after its episode's terminal step
    malformed: int  # pairs refused: shapes of the two steps disagree, or an unknown action source
    episodes_ended: int  # episodes closed by a terminated/truncated step
    episodes_abandoned: int  # episodes closed by a new episode or the session's end
    open_episodes: int


@dataclass
class _Episode:
    episode_id: str
    cursor: int = -1  # highest index consumed in order (held, or given up)
    held: StepRecord | None = None  # step ``cursor``, waiting for its successor
    pending: dict[int, StepRecord] = field(default_factory=dict)
    highest: int = -1
    gaps: deque[tuple[int, int]] = field(default_factory=lambda: deque(maxlen=_GAPS_REMEMBERED))
    ended: bool = False

    def in_gap(self, index: int) -> bool:
        return any(lo <= index < hi for lo, hi in self.gaps)


@dataclass
class _Session:
    current: _Episode | None = None
    closed: deque[str] = field(default_factory=lambda: deque(maxlen=_CLOSED_EPISODES_REMEMBERED))


class StepPairer:
    """Turns a stream of :class:`StepRecord` (any order, any duplicates) into transitions."""

    def __init__(self, reorder_window_steps: int = 8) -> None:
        if reorder_window_steps < 1:
            raise ValueError(f"reorder_window_steps must be at least 1, got {reorder_window_steps}")
        self._window = reorder_window_steps
        self._sessions: dict[str, _Session] = {}
        self._n = dict.fromkeys(PairingStats.__dataclass_fields__, 0)

    def add(self, step: StepRecord) -> list[Transition]:
        """Take one step; return the transitions it completes (often one, sometimes more)."""
        self._n["steps"] += 1
        session = self._sessions.get(step.session_id)
        if session is None:  # not setdefault: it would build a _Session for every step
            session = self._sessions[step.session_id] = _Session()
        episode = session.current
        out: list[Transition] = []
        if episode is None or episode.episode_id != step.episode_id:
            if step.episode_id in session.closed:
                self._n["late"] += 1
                return out
            if episode is not None:
                out.extend(self._retire(session, episode))
            episode = session.current = _Episode(step.episode_id)
        if step.step_index == episode.cursor + 1 and not episode.pending and not episode.ended:
            # The common step: the successor of the one held, nothing waiting (so none
            # above it seen): taken at once, without the pending table.
            episode.highest = step.step_index
            self._take(episode, step, out)
        elif self._classify(episode, step):
            episode.pending[step.step_index] = step
            episode.highest = max(episode.highest, step.step_index)
            self._advance(episode, out)
            while not episode.ended and episode.highest - episode.cursor > self._window:
                self._give_up_gap(episode)
                self._advance(episode, out)
        self._n["transitions"] += len(out)
        return out

    def end_session(self, session_id: str) -> list[Transition]:
        """The session is over: pair what can still be paired, count the gaps, forget it."""
        session = self._sessions.pop(session_id, None)
        out: list[Transition] = []
        if session is not None and session.current is not None:
            out = self._retire(session, session.current)
            self._n["transitions"] += len(out)
        return out

    def stats(self) -> PairingStats:
        open_episodes = sum(
            1 for s in self._sessions.values() if s.current is not None and not s.current.ended
        )
        return PairingStats(**{**self._n, "open_episodes": open_episodes})

    def _classify(self, episode: _Episode, step: StepRecord) -> bool:
        """Count a step that cannot be used; True if it is new to its episode."""
        index = step.step_index
        if episode.ended and index > episode.cursor:
            self._n["after_end"] += 1
        elif index <= episode.cursor:
            self._n["late" if episode.in_gap(index) else "duplicates"] += 1
        elif index in episode.pending:
            self._n["duplicates"] += 1
        else:
            if index < episode.highest:
                self._n["out_of_order"] += 1
            return True
        return False

    def _advance(self, episode: _Episode, out: list[Transition]) -> None:
        while not episode.ended and episode.cursor + 1 in episode.pending:
            self._take(episode, episode.pending.pop(episode.cursor + 1), out)

    def _take(self, episode: _Episode, nxt: StepRecord, out: list[Transition]) -> None:
        """``nxt`` is the successor of the held step: pair the two, and hold ``nxt``."""
        if episode.held is not None:
            transition = _pair(episode.held, nxt)
            if transition is None:
                self._n["malformed"] += 1
            else:
                out.append(transition)
        episode.held = nxt
        episode.cursor += 1
        if nxt.episode_ended:
            episode.ended = True
            self._n["episodes_ended"] += 1
            self._n["after_end"] += len(episode.pending)
            episode.pending.clear()

    def _give_up_gap(self, episode: _Episode) -> None:
        first = min(episode.pending)
        self._n["missing"] += first - episode.cursor - 1
        episode.gaps.append((episode.cursor + 1, first))
        # The held step's successor never came: its action is not paired with anything.
        episode.held = None
        episode.cursor = first - 1

    def _drain(self, episode: _Episode) -> list[Transition]:
        out: list[Transition] = []
        self._advance(episode, out)
        while episode.pending and not episode.ended:
            self._give_up_gap(episode)
            self._advance(episode, out)
        return out

    def _retire(self, session: _Session, episode: _Episode) -> list[Transition]:
        """Close ``episode`` because its session moved on to another one."""
        session.closed.append(episode.episode_id)
        if episode.ended:
            return []
        self._n["episodes_abandoned"] += 1
        return self._drain(episode)


def _pair(step: StepRecord, nxt: StepRecord) -> Transition | None:
    """The transition from ``step`` to ``nxt``; None if their shapes or the source are unusable."""
    override = nxt.executed_previous_action
    safe = step.safe_action
    action = safe if override is None else override
    observation = step.observation
    next_observation = nxt.observation
    if (
        step.action_source not in ACTION_SOURCES
        or observation.shape != next_observation.shape
        or action.shape != safe.shape
        or step.proposed_action.shape != safe.shape
    ):
        return None
    # Positional, in Transition's field order: the recorder builds one per served step.
    return Transition(
        step.session_id,
        step.robot_id,
        step.episode_id,
        step.step_index,
        observation,
        step.proposed_action,
        action,
        nxt.reward,
        next_observation,
        nxt.terminated,
        nxt.truncated,
        # A person's override is what the robot did, whatever the server proposed.
        step.action_source if override is None else "human",
        step.safety_checks,
        step.policy_version,
        step.weights_sha256,
        step.ingress_ns,
        nxt.ingress_ns,
        step.client_timestamp_ns,
    )
