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

The pairer sees only each step's key and a reference to where its data lies (an int the
caller chooses, ``StepBlock`` rows numbered in arrival order by the recorder); it answers
with pairs of references, and the caller gathers the transitions' columns for all of
them at once. It is single-threaded on purpose: the recorder's worker thread owns it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field

from tether.data.step import StepBlock

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
    # Steps refused before pairing: shapes other than the recorder's, an unknown action
    # source, or a value beyond its column's type (counted by the recorder).
    malformed: int
    episodes_ended: int  # episodes closed by a terminated/truncated step
    episodes_abandoned: int  # episodes closed by a new episode or the session's end
    open_episodes: int


class Pairs:
    """References of paired steps: transition ``k`` joins ``held[k]`` to ``nexts[k]``."""

    __slots__ = ("held", "nexts")

    def __init__(self) -> None:
        self.held: list[int] = []
        self.nexts: list[int] = []

    def __len__(self) -> int:
        return len(self.held)


@dataclass
class _Episode:
    episode_id: str
    cursor: int = -1  # highest index consumed in order (held, or given up)
    held: int | None = None  # reference of step ``cursor``, waiting for its successor
    pending: dict[int, tuple[int, bool]] = field(default_factory=dict)  # index: (ref, ends)
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
    """Turns a stream of step keys (any order, any duplicates) into pairs of references."""

    def __init__(self, reorder_window_steps: int = 8) -> None:
        if reorder_window_steps < 1:
            raise ValueError(f"reorder_window_steps must be at least 1, got {reorder_window_steps}")
        self._window = reorder_window_steps
        self._sessions: dict[str, _Session] = {}
        self._n = dict.fromkeys(PairingStats.__dataclass_fields__, 0)

    def add_block(self, block: StepBlock, first_ref: int, out: Pairs) -> None:
        """Take every row of ``block`` in order, row ``i`` as reference ``first_ref + i``;
        append the pairs they complete to ``out``."""
        before = len(out.held)
        sessions = self._sessions
        held, nexts = out.held, out.nexts
        ends = (block.terminated | block.truncated).tolist()
        keys = zip(
            block.session_ids, block.episode_ids, block.step_indices.tolist(), ends, strict=True
        )
        for ref, (session_id, episode_id, index, ends_episode) in enumerate(keys, first_ref):
            session = sessions.get(session_id)
            episode = None if session is None else session.current
            if (
                episode is not None
                and episode.episode_id == episode_id
                and index == episode.cursor + 1
                and not episode.pending
                and not episode.ended
                and not ends_episode
            ):
                # The common step: the successor of the one held, nothing waiting (so
                # none above it seen), the episode going on: paired here, inline.
                if episode.held is not None:
                    held.append(episode.held)
                    nexts.append(ref)
                episode.held = ref
                episode.cursor = episode.highest = index
            else:
                self._add(session_id, episode_id, index, ends_episode, ref, out)
        self._n["steps"] += len(block)
        self._n["transitions"] += len(out.held) - before

    def end_session(self, session_id: str, out: Pairs) -> None:
        """The session is over: pair what can still be paired, count the gaps, forget it."""
        session = self._sessions.pop(session_id, None)
        if session is not None and session.current is not None:
            before = len(out.held)
            self._retire(session, session.current, out)
            self._n["transitions"] += len(out.held) - before

    def live_refs(self) -> Iterator[int]:
        """Every reference a later step may still be paired with (held or pending)."""
        for session in self._sessions.values():
            episode = session.current
            if episode is None or episode.ended:
                continue
            if episode.held is not None:
                yield episode.held
            for ref, _ in episode.pending.values():
                yield ref

    def stats(self) -> PairingStats:
        open_episodes = sum(
            1 for s in self._sessions.values() if s.current is not None and not s.current.ended
        )
        return PairingStats(**{**self._n, "open_episodes": open_episodes})

    def _add(
        self, session_id: str, episode_id: str, index: int, ends: bool, ref: int, out: Pairs
    ) -> None:
        session = self._sessions.get(session_id)
        if session is None:  # not setdefault: it would build a _Session for every step
            session = self._sessions[session_id] = _Session()
        episode = session.current
        if episode is None or episode.episode_id != episode_id:
            if episode_id in session.closed:
                self._n["late"] += 1
                return
            if episode is not None:
                self._retire(session, episode, out)
            episode = session.current = _Episode(episode_id)
        if index == episode.cursor + 1 and not episode.pending and not episode.ended:
            episode.highest = index
            self._take(episode, ref, ends, out)
        elif self._classify(episode, index):
            episode.pending[index] = (ref, ends)
            episode.highest = max(episode.highest, index)
            self._advance(episode, out)
            while not episode.ended and episode.highest - episode.cursor > self._window:
                self._give_up_gap(episode)
                self._advance(episode, out)

    def _classify(self, episode: _Episode, index: int) -> bool:
        """Count a step that cannot be used; True if it is new to its episode."""
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

    def _advance(self, episode: _Episode, out: Pairs) -> None:
        while not episode.ended and episode.cursor + 1 in episode.pending:
            self._take(episode, *episode.pending.pop(episode.cursor + 1), out)

    def _take(self, episode: _Episode, ref: int, ends: bool, out: Pairs) -> None:
        """Step ``ref`` is the successor of the held step: pair the two, and hold it."""
        if episode.held is not None:
            out.held.append(episode.held)
            out.nexts.append(ref)
        episode.held = ref
        episode.cursor += 1
        if ends:
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

    def _retire(self, session: _Session, episode: _Episode, out: Pairs) -> None:
        """Close ``episode`` because its session moved on to another one."""
        session.closed.append(episode.episode_id)
        if episode.ended:
            return
        self._n["episodes_abandoned"] += 1
        self._advance(episode, out)
        while episode.pending and not episode.ended:
            self._give_up_gap(episode)
            self._advance(episode, out)
