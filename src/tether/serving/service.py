"""``tether.v1.PolicyService``: the gRPC handlers of GetAction, Control and Describe.

Every request follows the same path: validate (INVALID_ARGUMENT), resolve the engine
(UNAVAILABLE / FAILED_PRECONDITION), admit (RESOURCE_EXHAUSTED), queue for a batch with
the caller's deadline (DEADLINE_EXCEEDED), then reply with the supervised action. The
observation's values are the one check made after queueing: the pipeline checks a whole
batch's against ``validation.max_abs_observation`` in one pass and refuses an offending
row alone (INVALID_ARGUMENT, naming the entry), as it would have been refused here. Each
failure is a ``ServingError`` that becomes exactly one status code; a request never
crashes the server. In a Control session a failed step is answered with a ``StepError``
reply and the session stays open, because a robot mid-task should fall back to its
watchdog for one cycle, not lose its session.

A policy with named inputs takes its state vector in ``observation`` and every other
input (images) in ``inputs`` (``InputTensor``, checked by name, dtype and shape); a
policy with an action horizon ``H > 1`` answers with the supervised chunk in ``chunk``
(one verdict per step in ``chunk_safety``), its step 0 in ``action``. Describe lists the
inputs and the horizon.

Invariant: every action in a reply came out of ``InferencePipeline``, i.e. passed the
session's (or the server's) supervisor.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any, TypeAlias

import grpc
import numpy as np

from tether.data.clock import ingress_ns
from tether.data.step import StepFacts
from tether.serving.admission import Admission, SessionTicket
from tether.serving.batcher import Batched, DynamicBatcher
from tether.serving.config import ServerConfig
from tether.serving.convert import (
    action_response,
    degradation_to_proto,
    fill_action_response,
    version_to_proto,
)
from tether.serving.decoding import REFUSALS, Undecodable, refuse
from tether.serving.errors import REQUEST_ERRORS, RequestInvalid, status_code
from tether.serving.gateway import served_signature
from tether.serving.inference import ActionOutcome, ActionQuery
from tether.serving.metrics import ServingMetrics
from tether.serving.served_spec import ServedSpec
from tether.serving.session import ControlSession
from tether.serving.supervision import SupervisorFactory
from tether.serving.validation import (
    WireTensor,
    identifier,
    named_inputs,
    observation,
    scalar,
    stored_int,
    vector,
    within,
)
from tether.v1 import policy_pb2 as pb, policy_pb2_grpc as pb_grpc
from tether.versions.facade import PolicyVersions
from tether.versions.holder import ModelSource

Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"
# The robot whose level GetAction's callers share (they name no robot).
STATELESS_ROBOT = "(GetAction)"


class PolicyService(pb_grpc.PolicyServiceServicer):
    """Handlers of the policy service; see the module docstring for the request path."""

    def __init__(
        self,
        *,
        config: ServerConfig,
        spec: ServedSpec,
        models: ModelSource,
        batcher: DynamicBatcher[ActionQuery, ActionOutcome],
        admission: Admission,
        metrics: ServingMetrics,
        supervisors: SupervisorFactory,
        end_session: Callable[[str], None] | None = None,
        after_reply: Callable[[], object] | None = None,
        safety_limits_json: str = "",
        versions: PolicyVersions | None = None,
    ) -> None:
        self._config = config
        self._spec = spec
        self._models = models
        self._batcher = batcher
        self._admission = admission
        self._metrics = metrics
        # GetAction is stateless: its callers share one supervisor, and one robot's level.
        self._supervisor = supervisors(STATELESS_ROBOT)
        self._supervisors = supervisors
        self._end_session = end_session
        # Called once a Control reply was handed to grpc (the recorder's nudge): work it
        # starts then overlaps the robot's turn-around instead of delaying the reply.
        self._after_reply = after_reply
        self._versions = versions
        self._degradation_level = supervisors.level
        self._safety_limits_json = safety_limits_json
        self._supervision_json = supervisors.supervision.model_dump_json()
        self._max_obs = config.validation.max_abs_observation
        # How long a Control step may wait for its batch (s), None: no limit of its own.
        self._step_limit_s = config.step_deadline(spec.control_period_s, 0.0)
        self._signature = served_signature(models, spec.obs_dim)

    # ------------------------------------------------------------------ GetAction

    async def GetAction(
        self, request: pb.ActionRequest | Undecodable, context: Context
    ) -> pb.ActionResponse:
        if isinstance(request, Undecodable):
            self._metrics.request("GetAction", "INVALID_ARGUMENT", "none", 0.0)
            await refuse(context, request)
            raise AssertionError("unreachable: abort raises")
        arrival = time.perf_counter_ns()
        ingress = ingress_ns()
        self._metrics.in_flight.inc()
        version = "none"
        try:
            obs = observation(request.observation, "observation", self._spec.obs_dim)
            named = self._inputs(obs, request.inputs, "inputs")
            identifier(request.client_id, "client_id", self._config.validation)
            pin = request.model_version if request.HasField("model_version") else None
            self._models.engine_for(pin)  # refuse unservable pins before queueing
            # The connection, not the client_id it claims: a claimed id could spend
            # another robot's bucket, and a fresh one per call would escape the limit.
            self._admission.admit(context.peer())
            query = ActionQuery(
                obs, request.deterministic, None, self._supervisor, ingress, pin, inputs=named
            )
            batched = await self._batcher.submit(query, _deadline(context))
            self._queued(batched)
            version = str(batched.value.version.id)
            reply = action_response(batched, time.perf_counter_ns() - arrival)
        except REQUEST_ERRORS as exc:
            code = status_code(exc)
            self._finish("GetAction", code.name, version, arrival)
            await context.abort(code, str(exc))
        except asyncio.CancelledError:  # the caller went away or its deadline passed
            self._finish("GetAction", "CANCELLED", version, arrival)
            raise
        self._finish("GetAction", "OK", version, arrival)
        return reply

    def _inputs(
        self, obs: np.ndarray, tensors: Sequence[WireTensor], field: str
    ) -> dict[str, np.ndarray] | None:
        """Every named input by name (the state is ``obs``), or None for a vector policy."""
        signature = self._signature
        if not signature.named:
            if len(tensors):
                raise RequestInvalid(
                    f"{field} carries {len(tensors)} tensor(s), but the served policy takes "
                    "only the observation vector; leave inputs empty"
                )
            return None
        named = named_inputs(tensors, signature.extras, field, self._max_obs)
        named[signature.state.name] = obs
        return named

    def _queued(self, batched: Batched[ActionOutcome]) -> None:
        self._metrics.queue_seconds.observe(max(0, batched.queue_ns) / 1e9)

    def _finish(self, method: str, status: str, version: str, arrival_ns: int) -> None:
        self._metrics.in_flight.dec()
        self._metrics.request(method, status, version, (time.perf_counter_ns() - arrival_ns) / 1e9)

    # ------------------------------------------------------------------ Control

    async def Control(
        self, request_iterator: AsyncIterator[pb.ControlStep | Undecodable], context: Context
    ) -> AsyncIterator[pb.ControlReply | bytes]:
        session, ticket = await self._open(request_iterator, context)
        # A call's deadline is fixed when it starts: read once, not on every step.
        stream_deadline = _deadline(context)
        self._batcher.stream_opened()
        try:
            live = self._models.live_engine()
            yield pb.ControlReply(
                opened=pb.SessionOpened(
                    session_id=session.session_id,
                    version=version_to_proto(live.version) if live else None,
                    degradation=degradation_to_proto(session.supervisor.level()),
                )
            )
            async for message in request_iterator:
                if isinstance(message, Undecodable):
                    # Like any bad step: refused, and the session goes on.
                    self._metrics.request("Control", "INVALID_ARGUMENT", "none", 0.0)
                    REFUSALS.refused(message)
                    code = grpc.StatusCode.INVALID_ARGUMENT.value[0]
                    yield pb.ControlReply(error=pb.StepError(code=code, message=message.message()))
                    continue
                if message.WhichOneof("kind") != "step":
                    await context.abort(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        "ControlStep.kind is 'open' after the session opened; expected 'step' "
                        "(open a new stream for a new session)",
                    )
                yield await self._step(session, ticket, message.step, stream_deadline)
                if self._after_reply is not None:
                    self._after_reply()
        finally:
            self._admission.close_session(ticket)
            self._batcher.stream_closed()
            if self._versions is not None:
                self._versions.end_session(session.session_id)
            if self._end_session is not None:
                self._end_session(session.session_id)

    async def _open(
        self, request_iterator: AsyncIterator[pb.ControlStep | Undecodable], context: Context
    ) -> tuple[ControlSession, SessionTicket]:
        first = None
        async for message in request_iterator:
            if isinstance(message, Undecodable):
                self._metrics.request("Control", "INVALID_ARGUMENT", "none", 0.0)
                await refuse(context, message)
                raise AssertionError("unreachable: abort raises")
            first = message
            break
        if first is None or first.WhichOneof("kind") != "open":
            found = "nothing" if first is None else repr(first.WhichOneof("kind"))
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"the first ControlStep of a session must be 'open', found {found}",
            )
            raise AssertionError("unreachable: abort raises")
        open_msg = first.open
        try:
            robot = identifier(open_msg.robot_id, "open.robot_id", self._config.validation)
            if not robot:
                raise RequestInvalid("open.robot_id is empty, expected the robot's name")
            pin = open_msg.model_version if open_msg.HasField("model_version") else None
            self._models.engine_for(pin)
            self._spec.check_session(open_msg)
            session = ControlSession(robot, self._supervisors(robot), pinned_version=pin)
            ticket = self._admission.open_session(session.session_id, robot, context.peer())
        except REQUEST_ERRORS as exc:
            code = status_code(exc)
            self._metrics.request("Control", code.name, "none", 0.0)
            await context.abort(code, str(exc))
        return session, ticket

    async def _step(
        self,
        session: ControlSession,
        ticket: SessionTicket,
        step: pb.StepData,
        stream_deadline: float | None,
    ) -> pb.ControlReply | bytes:
        """The reply to one step (the bytes the batch encoded, else a message). What the
        step reported travels with its query (``StepFacts``): the batch that answers it
        records it (``InferencePipeline``), fixed at the step's own time."""
        arrival = time.perf_counter_ns()
        ingress = ingress_ns()  # the one stamp pairing and staleness rest on
        self._metrics.in_flight.inc()
        version = "none"
        try:
            cfg = self._config.validation
            obs = observation(step.observation, "step.observation", self._spec.obs_dim)
            named = None
            if self._signature.named or len(step.inputs):
                named = self._inputs(obs, step.inputs, "step.inputs")
            reward = scalar(step.reward, "step.reward", cfg.max_abs_reward)
            stored_int(step.step_index, "step.step_index")
            stored_int(step.client_timestamp_ns, "step.client_timestamp_ns")
            episode = identifier(step.episode_id, "step.episode_id", cfg)
            task = identifier(step.task_id, "step.task_id", cfg)
            distance = _final_distance(step)
            executed = None
            if len(step.executed_action):
                executed = self._executed_action(step.executed_action)
            missed = session.misses_reported(step.watchdog_misses)
            if missed:
                self._metrics.watchdog_misses.inc(missed)
                live = self._models.live_engine()
                session.supervisor.watchdog_misses(
                    missed, live.version.id if live else None, session_step=session.steps
                )
            self._admission.admit_step(ticket)
            route = None
            if self._versions is not None and session.pinned_version is None:
                route = self._versions.route(session.session_id, episode, task)
            facts = StepFacts(  # positional, in field order, as the query: every step
                step.step_index,
                episode,
                session.session_id,
                session.robot_id,
                reward,
                step.terminated,
                step.truncated,
                executed,
                step.client_timestamp_ns,
            )
            query = ActionQuery(
                obs,
                step.deterministic,
                session.previous_action(episode, executed),
                session.supervisor,
                ingress,
                session.pinned_version,
                route,
                named,
                facts,
            )
            batched = await self._batcher.submit(query, self._step_deadline(stream_deadline))
            self._queued(batched)
        except asyncio.CancelledError:  # the robot disconnected mid-step
            self._finish("Control", "CANCELLED", version, arrival)
            raise
        except REQUEST_ERRORS as exc:
            code = status_code(exc)
            self._finish("Control", code.name, version, arrival)
            refusal = pb.ControlReply(
                step_index=step.step_index,
                episode_id=step.episode_id,
                error=pb.StepError(code=code.value[0], message=str(exc)),
            )
            return refusal
        outcome = batched.value
        version = str(outcome.version.id)
        session.answered(episode, outcome, step.terminated, step.truncated)
        if self._versions is not None:
            self._versions.on_step(outcome.version.id, outcome.verdict)
            finished = session.tally(
                episode,
                outcome,
                reward,
                step.terminated or step.truncated,
                step.success,
                task_id=task,
                final_distance_m=distance,
            )
            if finished is not None:
                self._versions.on_episode(finished)
        reply: pb.ControlReply | bytes | None = outcome.reply
        if reply is None:
            reply = pb.ControlReply(step_index=step.step_index, episode_id=step.episode_id)
            fill_action_response(reply.action, batched, time.perf_counter_ns() - arrival)
        self._finish("Control", "OK", version, arrival)
        return reply

    def _executed_action(self, values: Sequence[float]) -> np.ndarray:
        """The action the robot reports having executed, within the live policy's action
        bounds: anything else was never an action of this robot, and would enter the
        experience log as a person's."""
        field = "step.executed_action"
        executed = vector(values, field, self._spec.act_dim, 1e6)
        engine = self._models.live_engine()
        if engine is not None:
            within(executed, field, engine.action_low, engine.action_high)
        return executed

    def _step_deadline(self, stream: float | None) -> float | None:
        """A step is stale after ``control_step_deadline_s``, or at the stream's deadline."""
        limit = self._step_limit_s
        own = None if limit is None else time.monotonic() + limit
        if own is None or stream is None:
            return own if stream is None else stream
        return min(own, stream)

    # ------------------------------------------------------------------ Describe

    async def Describe(
        self, request: pb.DescribeRequest | Undecodable, context: Context
    ) -> pb.DescribeResponse:
        if isinstance(request, Undecodable):
            self._metrics.request("Describe", "INVALID_ARGUMENT", "none", 0.0)
            await refuse(context, request)
            raise AssertionError("unreachable: abort raises")
        engine = self._models.live_engine()
        cfg = self._config
        reply = pb.DescribeResponse(
            status="serving" if engine is not None else "no_policy",
            spec=self._spec.to_proto(),
            limits=pb.ServerLimits(
                max_batch_size=cfg.batcher.max_batch_size,
                batch_timeout_s=cfg.batcher.batch_timeout_s,
                max_queued_requests=cfg.admission.max_queued_requests,
                rate_limit_hz=self._admission.rate_hz,
                rate_burst=self._admission.burst,
                max_abs_observation=cfg.validation.max_abs_observation,
                max_message_bytes=cfg.max_message_bytes,
            ),
            degradation=degradation_to_proto(self._degradation_level()),
            safety_limits_json=self._safety_limits_json,
            supervision_json=self._supervision_json,
            action_horizon=self._signature.horizon,
        )
        if self._signature.named:
            for tensor in self._signature.inputs:
                reply.inputs.add(name=tensor.name, dtype=str(tensor.dtype), shape=tensor.shape)
        if engine is not None:
            reply.version.CopyFrom(version_to_proto(engine.version))
            reply.action_low.extend(np.asarray(engine.action_low, dtype=np.float32).tolist())
            reply.action_high.extend(np.asarray(engine.action_high, dtype=np.float32).tolist())
        self._metrics.request("Describe", "OK", "none", 0.0)
        return reply


def _final_distance(step: pb.StepData) -> float | None:
    """The robot's final task error, when it sent one (the canary pairs only such episodes)."""
    if not step.HasField("final_distance_m"):
        return None
    value = float(step.final_distance_m)
    if not math.isfinite(value) or value < 0.0:
        raise RequestInvalid(
            f"step.final_distance_m is {value}, expected a finite distance >= 0 (m) or none"
        )
    return value


def _deadline(context: Context) -> float | None:
    remaining = context.time_remaining()
    return None if remaining is None else time.monotonic() + remaining
