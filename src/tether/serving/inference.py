"""The batch function: observations in, supervised actions out, one outcome per query.

Runs inside the batcher (on the event loop or its worker thread). Queries are grouped
by the engine that serves them (one group while a single version is live), each group
is one ``engine.act`` call, and then *every* row passes its session's supervisor with its
own previous action, at its own robot's level, the group in one call
(``tether.serving.supervision.decide_batch``: row for row what ``SessionSupervisor.decide``
returns; the position supervisor's rows in one compiled pass). Each row's
``safety_ns`` is its share of that call. This is the only place actions are produced, so
invariant 1 of the design holds here: no action leaves without the supervisor's
verdict, and the supervisor never returns a non-finite action.

A policy with an action horizon ``H > 1`` answers each row with a chunk: every step of
it passes the session's supervisor in order (``tether.safety.chunk.supervise_chunk``),
step ``k`` with step ``k - 1``'s safe action as its previous action and judged
``k * step_period_s`` older than the observation, so a chunk never carries an unchecked
step; the outcome holds the supervised chunk with one verdict per step.

A batch with ``ENCODE_ROWS`` or more Control steps of a single-step policy also writes
their replies (``ActionQuery.step``) as wire bytes in one compiled call
(``tether.serving.convert.encode_control_replies``; a reply built message by message
costs ~5 µs, a row of the batch call ~1 µs); their timings are read in the batch:
queue from the step's arrival to the batch's start, inference the batch's compute up to
the replies, total from arrival to the replies. A smaller batch leaves ``reply`` None
and the handler builds the message.

With a ``record`` hook (the recorder's ``record_steps``), every batch hands its answered
Control steps over as one ``AnsweredSteps``: the facts each step reported
(``ActionQuery.step``) beside the batch's own observation, proposed and safe action
arrays, unconverted, so the recorder's worker pairs and stores columns instead of an
object per step. A chunk policy's steps are
recorded with their chunk's step 0. The hook runs where the batch runs, before the
replies are delivered, and must only enqueue; a hook that raises is logged and never
fails the batch.

Invariant: ``run`` returns exactly one entry per query, in query order: an
``ActionOutcome`` or the error of that query alone (a ``ServingError`` or a
``tether.versions`` error).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

import numpy as np

from tether.data.clock import ingress_ns
from tether.data.step import AnsweredSteps, StepFacts
from tether.policy.errors import ObservationError
from tether.policy.kernel import all_within
from tether.safety.chunk import ChunkVerdict, supervise_chunk
from tether.safety.levels import DegradationLevel
from tether.safety.verdict import SafetyVerdict
from tether.serving.convert import encode_control_replies
from tether.serving.errors import REQUEST_ERRORS, RequestError, RequestInvalid
from tether.serving.supervision import SessionSupervisor, SupervisedRow, decide_batch
from tether.serving.validation import refusal
from tether.versions.facade import PolicyVersions
from tether.versions.holder import ModelSource
from tether.versions.protocols import EngineLike, VersionLike
from tether.versions.routing import RouteDecision

# From this many Control steps a batch encodes their replies in one call (µs per row,
# the batch call against a message each, benchmarks/bench_replies.py: 1 row 10-12 vs 6,
# 3 rows 4.3-4.9 vs 5.5-6.1, 4 rows 3.3-3.8 vs 5.3-5.7, 8 rows 2.5 vs 5.5, 64 rows 1.05
# vs 5.5; the batch's timings cost another 5-6 µs per batch, so about 4 rows break
# even; docs/benchmarks.md).
ENCODE_ROWS = 4

logger = logging.getLogger(__name__)


class ActionQuery(NamedTuple):
    """One validated request for an action. This and ``ActionOutcome`` are named tuples:
    immutable, and built for every step at a quarter of a frozen dataclass's cost."""

    observation: np.ndarray  # (obs_dim,) float32, finite
    deterministic: bool
    previous_action: np.ndarray | None  # what the robot executed last step, if known
    supervisor: SessionSupervisor  # the session's own supervisor (it keeps per-robot state)
    ingress_ns: int  # tether.data.ingress_ns() at arrival; the supervisor judges staleness
    pinned_version: int | None = None
    route: RouteDecision | None = None  # the registry's choice for this episode, if routed
    # Every named input of a policy that declares them (the state vector included, the
    # same array as ``observation``), validated against the engine's input specs.
    inputs: Mapping[str, np.ndarray] | None = None
    # The Control step this query answers: what the robot reported with it, recorded with
    # the answer; its outcome may then carry the encoded ControlReply (``ActionOutcome.reply``).
    step: StepFacts | None = None


class ActionOutcome(NamedTuple):
    """The supervised answer to one query."""

    action: np.ndarray  # (act_dim,) float32: the safe action, the one that may be executed
    proposed_action: np.ndarray  # what the policy proposed
    log_prob: float
    version: VersionLike
    verdict: SafetyVerdict
    safety_ns: int
    degradation: DegradationLevel  # the level its robot was supervised at
    tightened: bool = False  # served under a canary's tightened limits (canary or control)
    trial: int = 0  # the paired share (canary or rollback check) it was served in; 0: none
    # A chunk policy's whole answer (``action``, ``proposed_action`` and ``verdict`` are
    # then its step 0): the supervised steps with each step's verdict, and what was proposed.
    chunk: ChunkVerdict | None = None
    proposed_chunk: np.ndarray | None = None  # (H, act_dim)
    # The ControlReply answering ``ActionQuery.step`` as wire bytes, when the batch
    # encoded it (see ``InferencePipeline``); None: the handler builds the message.
    reply: bytes | None = None

    @property
    def actions(self) -> np.ndarray:
        """The supervised steps ``(H, act_dim)`` (one row for a policy with H = 1)."""
        return self.action[None] if self.chunk is None else self.chunk.actions

    @property
    def proposed_actions(self) -> np.ndarray:
        return self.proposed_action[None] if self.proposed_chunk is None else self.proposed_chunk

    @property
    def verdicts(self) -> tuple[SafetyVerdict, ...]:
        return (self.verdict,) if self.chunk is None else self.chunk.verdicts


class InferencePipeline:
    """``run(queries)`` for the batcher: group by engine, act, supervise every row."""

    def __init__(
        self,
        models: ModelSource,
        *,
        on_actions: Callable[[EngineLike, Sequence[np.ndarray]], None] | None = None,
        versions: PolicyVersions | None = None,
        step_period_s: float = 0.0,
        max_abs_observation: float | None = None,
        record: Callable[[AnsweredSteps], object] | None = None,
    ) -> None:
        self._models = models
        self._record = record
        # The bound on every observation entry (validation.max_abs_observation), checked
        # for a whole group at once; None: the callers checked their observations.
        self._max_abs = max_abs_observation
        # A chunk's step k is executed k control periods after step 0: the supervisor
        # judges its staleness at that age.
        self._step_period_s = step_period_s
        # With policy versions, routed steps run on the engine their route names, and
        # every batch is reported back (the shadow stage watches live batches).
        self._versions = versions
        self._on_actions = on_actions

    def run(self, queries: Sequence[ActionQuery]) -> list[ActionOutcome | RequestError]:
        start_ns = ingress_ns()
        results: list[ActionOutcome | RequestError | None] = [None] * len(queries)
        groups: dict[int, tuple[EngineLike, list[int]]] = {}
        live: EngineLike | None = None  # the live engine, looked up once per batch
        for i, q in enumerate(queries):
            try:
                if q.route is not None and self._versions is not None:
                    engine = self._versions.engine_for_route(q.route)
                elif q.pinned_version is not None:
                    engine = self._models.engine_for(q.pinned_version)
                elif live is not None:
                    engine = live
                else:
                    engine = live = self._models.engine_for(None)
            except REQUEST_ERRORS as exc:
                results[i] = exc
                continue
            groups.setdefault(id(engine), (engine, []))[1].append(i)
        for engine, rows in groups.values():
            self._run_group(engine, [queries[i] for i in rows], rows, results, start_ns)
        out: list[ActionOutcome | RequestError] = []
        for r in results:
            assert r is not None  # every index was filled by a group or an error above
            out.append(r)
        return out

    def _run_group(
        self,
        engine: EngineLike,
        queries: list[ActionQuery],
        rows: list[int],
        results: list[ActionOutcome | RequestError | None],
        start_ns: int,
    ) -> None:
        obs, deterministic = _engine_input(queries)
        # One pass for the group: NaN compares false, Inf exceeds any finite bound; the
        # rows are told apart only when one failed.
        if self._max_abs is not None and not all_within(obs, self._max_abs):
            kept = self._refuse_observations(
                queries, rows, results, np.abs(obs).max(axis=1) <= self._max_abs
            )
            if kept:
                picked = [queries[k] for k in kept]
                self._run_group(engine, picked, [rows[k] for k in kept], results, start_ns)
            return
        try:
            named = _named_inputs(queries)
            # Named inputs exist only for a PolicyEngine that declared them
            # (gateway.served_signature), whose act() takes the mapping.
            batch = obs if named is None else named
            out = engine.act(batch, deterministic)  # type: ignore[arg-type]
        except (ObservationError, RequestInvalid) as exc:
            # The edge validated every query against the signature read at start; an
            # engine taking other inputs (a bundle of another signature loaded since)
            # refuses this group's queries alone, never the rest of the batch.
            for row in rows:
                results[row] = RequestInvalid(
                    f"the policy version serving this request takes other inputs than the "
                    f"server was started with: {exc}; restart the server with this bundle"
                )
            return
        version = out.version
        if out.actions.ndim == 3:
            self._run_chunks(
                engine, queries, rows, results, obs, out.actions, out.log_probs, version
            )
            return
        if self._versions is not None:
            self._versions.on_batch(version.id, obs, out.actions, _previous_actions(queries))
        # Every row at its own robot's level; the whole batch in one supervisor call,
        # row for row what each session's decide returns.
        now_ns = ingress_ns()
        supervised = [
            SupervisedRow(
                q.supervisor,
                q.observation,
                q.previous_action,
                (now_ns - q.ingress_ns) / 1e9,
                q.supervisor.level(),
                1.0 if q.route is None else q.route.tightening,
            )
            for q in queries
        ]
        start = time.perf_counter_ns()
        decided = decide_batch(supervised, out.actions, version.id, obs)
        per_row_ns = (time.perf_counter_ns() - start) // len(queries)
        safe = [np.asarray(action, dtype=np.float32) for action, _ in decided]
        replies: Sequence[bytes | None] = [None] * len(queries)
        if len(queries) >= ENCODE_ROWS and all(q.step is not None for q in queries):
            # A number the wire cannot carry (ValueError): the handlers' messages say so.
            with contextlib.suppress(ValueError):
                replies = _encode_replies(
                    queries,
                    safe,
                    out.actions,
                    out.log_probs,
                    decided,
                    supervised,
                    version,
                    start_ns,
                    per_row_ns,
                )
        # Per row only what differs by row; the rows' views and log-probs in one call each.
        for q, s, row, proposed, log_prob, action, (_, verdict), reply in zip(
            queries,
            supervised,
            rows,
            list(out.actions),
            out.log_probs.tolist(),
            safe,
            decided,
            replies,
            strict=True,
        ):
            # Positional, in field order: one outcome per row of every batch.
            results[row] = ActionOutcome(
                action,
                proposed,
                log_prob,
                version,
                verdict,
                per_row_ns,
                s.level,
                s.tightening < 1.0,
                0 if q.route is None else q.route.trial,
                None,  # chunk
                None,  # proposed_chunk
                reply,
            )
        if self._record is not None:
            self._record_steps(_answered(queries, obs, out.actions, safe, decided, version))
        if self._on_actions is not None:
            self._on_actions(engine, safe)

    def _record_steps(self, steps: AnsweredSteps | None) -> None:
        """Hand the group's answered Control steps (if any) to the ``record`` hook."""
        assert self._record is not None
        if steps is None:
            return
        try:
            self._record(steps)
        except Exception:  # recording never fails a batch; the steps are answered anyway
            logger.exception(
                "recording %d answered steps failed; they are not recorded", len(steps)
            )

    def _refuse_observations(
        self,
        queries: list[ActionQuery],
        rows: list[int],
        results: list[ActionOutcome | RequestError | None],
        fine: np.ndarray,
    ) -> list[int]:
        """Refuse each row whose observation is out of bounds (not ``fine``), alone; the
        indices of the others."""
        assert self._max_abs is not None
        kept: list[int] = []
        for k, ok in enumerate(fine.tolist()):
            if ok:
                kept.append(k)
                continue
            query = queries[k]
            field = "observation" if query.step is None else "step.observation"
            results[rows[k]] = refusal(query.observation, field, self._max_abs)
        return kept

    def _run_chunks(
        self,
        engine: EngineLike,
        queries: list[ActionQuery],
        rows: list[int],
        results: list[ActionOutcome | RequestError | None],
        obs: np.ndarray,
        chunks: np.ndarray,
        log_probs: np.ndarray,
        version: VersionLike,
    ) -> None:
        """Every row's chunk, every step supervised in order (see the module docstring)."""
        first_steps = np.ascontiguousarray(chunks[:, 0])
        if self._versions is not None:
            # The versions layer compares single actions: it sees each chunk's first step.
            self._versions.on_batch(version.id, obs, first_steps, _previous_actions(queries))
        safe_rows: list[np.ndarray] = []
        decided: list[tuple[np.ndarray, SafetyVerdict]] = []  # step 0 of each chunk
        for j, (q, row) in enumerate(zip(queries, rows, strict=True)):
            tightening = 1.0 if q.route is None else q.route.tightening
            level = q.supervisor.level()
            supervisor = q.supervisor

            def step(
                observation: np.ndarray,
                proposed: np.ndarray,
                previous: np.ndarray | None,
                age_s: float,
                supervisor: SessionSupervisor = supervisor,
                level: DegradationLevel = level,
                tightening: float = tightening,
            ) -> tuple[np.ndarray, SafetyVerdict]:
                return supervisor.decide(
                    observation,
                    proposed,
                    previous,
                    observation_age_s=age_s,
                    level=level,
                    policy_version=version.id,
                    tightening=tightening,
                )

            start = time.perf_counter_ns()
            chunk = supervise_chunk(
                step,
                q.observation,
                chunks[j],
                q.previous_action,
                observation_age_s=(ingress_ns() - q.ingress_ns) / 1e9,
                step_period_s=self._step_period_s,
            )
            elapsed = time.perf_counter_ns() - start
            safe_rows.append(chunk.actions[0])
            decided.append((chunk.actions[0], chunk.verdicts[0]))
            results[row] = ActionOutcome(
                action=chunk.actions[0],
                proposed_action=chunks[j, 0],
                log_prob=float(log_probs[j]),
                version=version,
                verdict=chunk.verdicts[0],
                safety_ns=elapsed,
                degradation=level,
                tightened=tightening < 1.0,
                trial=0 if q.route is None else q.route.trial,
                chunk=chunk,
                proposed_chunk=chunks[j],
            )
        if self._record is not None:
            self._record_steps(_answered(queries, obs, first_steps, safe_rows, decided, version))
        if self._on_actions is not None:
            self._on_actions(engine, safe_rows)


def _answered(
    queries: list[ActionQuery],
    obs: np.ndarray,
    proposed: np.ndarray,
    safe: list[np.ndarray],
    decided: Sequence[tuple[object, SafetyVerdict]],
    version: VersionLike,
) -> AnsweredSteps | None:
    """The group's Control steps as one hand-over; None if it holds none."""
    if len(queries) == 1:  # a lone robot's step: nothing to pick, nothing to convert
        only = queries[0]
        if only.step is None:
            return None
        return AnsweredSteps(
            [only.step],
            obs,
            proposed,
            safe,
            [decided[0][1]],
            [only.ingress_ns],
            version.id,
            version.weights_sha256,
        )
    facts = [q.step for q in queries]
    rows: Sequence[int] = range(len(queries))
    if None in facts:  # GetAction queries beside Control steps: not recorded
        rows = [i for i, f in enumerate(facts) if f is not None]
        if not rows:
            return None
        facts = [facts[i] for i in rows]
        obs, proposed = obs[rows], proposed[rows]
        safe = [safe[i] for i in rows]
        decided = [decided[i] for i in rows]
    return AnsweredSteps(
        facts,  # type: ignore[arg-type]  # the None rows were left out above
        obs,
        proposed,
        safe,
        [verdict for _, verdict in decided],
        [queries[i].ingress_ns for i in rows],
        version.id,
        version.weights_sha256,
    )


def _encode_replies(
    queries: list[ActionQuery],
    safe: list[np.ndarray],
    proposed: np.ndarray,
    log_probs: np.ndarray,
    decided: list[tuple[np.ndarray, SafetyVerdict]],
    supervised: list[SupervisedRow],
    version: VersionLike,
    start_ns: int,
    safety_ns: int,
) -> list[bytes]:
    """The group's ControlReplies as wire bytes, timed now (see the module docstring)."""
    rows = len(queries)
    now_ns = ingress_ns()
    timings = np.empty((rows, 5), dtype=np.int64)
    arrivals = np.fromiter((q.ingress_ns for q in queries), np.int64, rows)
    np.maximum(start_ns - arrivals, 0, out=timings[:, 0])
    timings[:, 1] = max(0, now_ns - start_ns)
    timings[:, 2] = safety_ns
    np.maximum(now_ns - arrivals, 0, out=timings[:, 3])
    timings[:, 4] = rows
    return encode_control_replies(
        [q.step for q in queries],  # type: ignore[misc]  # run checked every row has one
        np.array(safe),
        proposed,
        log_probs,
        [verdict for _, verdict in decided],
        [s.level for s in supervised],
        version,
        timings,
    )


def _named_inputs(queries: list[ActionQuery]) -> dict[str, np.ndarray] | None:
    """The batch of every named input ``{name: (B, *shape)}``, or None for a vector policy."""
    first = queries[0].inputs
    if first is None:
        return None
    if len(queries) == 1:
        return {name: value[None] for name, value in first.items()}
    out: dict[str, np.ndarray] = {}
    for name in first:
        values = []
        for q in queries:
            if q.inputs is None or name not in q.inputs:
                raise RequestInvalid(
                    f"a query lacks input {name!r} that the others of its batch carry"
                )
            values.append(q.inputs[name])
        out[name] = np.stack(values)
    return out


def _engine_input(queries: list[ActionQuery]) -> tuple[np.ndarray, bool | np.ndarray]:
    """The batch's observations ``(B, obs_dim)`` and its deterministic flag(s).

    A flag shared by the whole batch goes to the engine as one bool, which spares it the
    per-row noise masking; a lone query's observation is passed as a view, not a copy.
    """
    if len(queries) == 1:
        return queries[0].observation[None], queries[0].deterministic
    # np.array of equal-length rows: np.stack's result without its per-row Python.
    obs = np.array([q.observation for q in queries])
    flags = np.fromiter((q.deterministic for q in queries), bool, len(queries))
    if flags.all() or not flags.any():
        return obs, bool(flags[0])
    return obs, flags


def _previous_actions(queries: list[ActionQuery]) -> np.ndarray | None:
    """The batch's previous executed actions ``(B, act_dim)``, or None if any is unknown.

    A lone query's is passed as a view, not stacked: stacking one row is a copy on every
    step of a single robot, for a server with policy versions.
    """
    if len(queries) == 1:
        only = queries[0].previous_action
        return None if only is None else only[None]
    previous = [q.previous_action for q in queries]
    if any(p is None for p in previous):
        return None
    return np.stack(previous)  # type: ignore[arg-type]
