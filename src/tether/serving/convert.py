"""Typed records to wire messages: versions, verdicts, timings, action replies.

One function per message so the unary and streaming paths build replies identically.
Invariant: the action placed in a reply is the supervisor's safe action, never the
proposed one (which travels separately, labelled as such).

Replies are filled in place (``fill_action_response`` writes into the ``ControlReply``'s
own ``action`` field) rather than built as separate messages and copied in: every step
of every session builds one, and the copies were most of its cost.
"""

from __future__ import annotations

from tether.safety.verdict import ActionSource, SafetyVerdict, check_names
from tether.serving.batcher import Batched
from tether.serving.inference import ActionOutcome
from tether.v1 import policy_pb2 as pb
from tether.versions.protocols import VersionLike

_SOURCES = {
    ActionSource.POLICY: pb.ACTION_SOURCE_POLICY,
    ActionSource.CLIPPED: pb.ACTION_SOURCE_CLIPPED,
    ActionSource.BACKUP: pb.ACTION_SOURCE_BACKUP,
    ActionSource.HUMAN: pb.ACTION_SOURCE_HUMAN,
}


_LEVELS = (
    pb.DEGRADATION_LEVEL_NORMAL,
    pb.DEGRADATION_LEVEL_RESTRICTED,
    pb.DEGRADATION_LEVEL_PAUSED,
    pb.DEGRADATION_LEVEL_TAKEOVER,
)


def degradation_to_proto(level: int) -> pb.DegradationLevel:
    """``tether.safety.DegradationLevel`` (0..3) to the wire enum (1..4; 0 is unspecified)."""
    return (
        _LEVELS[int(level)] if 0 <= int(level) < len(_LEVELS) else pb.DEGRADATION_LEVEL_UNSPECIFIED
    )


def fill_verdict(message: pb.SafetyVerdict, verdict: SafetyVerdict) -> None:
    """Write ``verdict`` into an empty ``message``; fields left at their default stay unset."""
    message.source = _SOURCES.get(verdict.source, pb.ACTION_SOURCE_UNSPECIFIED)
    checks = int(verdict.checks)
    if checks:
        message.checks = checks
        message.check_names.extend(check_names(checks))
    if verdict.correction_norm:
        message.correction_norm = verdict.correction_norm
    if verdict.joints:
        message.joints.extend(verdict.joints)


def version_to_proto(version: VersionLike) -> pb.PolicyVersion:
    message = pb.PolicyVersion()
    fill_version(message, version)
    return message


def fill_version(message: pb.PolicyVersion, version: VersionLike) -> None:
    """Write ``version`` into an empty ``message``."""
    message.policy_version = version.id
    message.weights_sha256 = version.weights_sha256
    message.name = version.name


def action_response(batched: Batched[ActionOutcome], total_ns: int) -> pb.ActionResponse:
    reply = pb.ActionResponse()
    fill_action_response(reply, batched, total_ns)
    return reply


def fill_action_response(
    reply: pb.ActionResponse, batched: Batched[ActionOutcome], total_ns: int
) -> None:
    """Write the supervised answer into an empty ``reply`` (e.g. ``ControlReply.action``)."""
    outcome = batched.value
    reply.action.extend(outcome.action.tolist())
    reply.log_prob = outcome.log_prob
    reply.status = "ok"
    fill_version(reply.version, outcome.version)
    fill_verdict(reply.safety, outcome.verdict)
    timings = reply.timings
    timings.queue_ns = max(0, batched.queue_ns)
    timings.inference_ns = batched.batch_ns
    timings.safety_ns = outcome.safety_ns
    timings.total_ns = total_ns
    timings.batch_size = batched.batch_size
    reply.degradation = degradation_to_proto(outcome.degradation)
    reply.proposed_action.extend(outcome.proposed_action.tolist())
    chunk = outcome.chunk
    if chunk is not None:
        reply.horizon = chunk.horizon
        reply.chunk.extend(chunk.actions.reshape(-1).tolist())
        if outcome.proposed_chunk is not None:
            reply.proposed_chunk.extend(outcome.proposed_chunk.reshape(-1).tolist())
        for verdict in chunk.verdicts:
            fill_verdict(reply.chunk_safety.add(), verdict)
