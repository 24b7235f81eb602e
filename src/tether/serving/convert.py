"""Typed records to wire messages: versions, verdicts, timings, action replies.

One function per message so the unary and streaming paths build replies identically.
Invariant: the action placed in a reply is the supervisor's safe action, never the
proposed one (which travels separately, labelled as such).
"""

from __future__ import annotations

from functools import lru_cache

from tether.safety.verdict import ActionSource, SafetyCheck, SafetyVerdict
from tether.serving.batcher import Batched
from tether.serving.holder import VersionLike
from tether.serving.inference import ActionOutcome
from tether.v1 import policy_pb2 as pb

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


@lru_cache(maxsize=256)
def check_names(checks: int) -> tuple[str, ...]:
    """Names of the single-bit checks set in ``checks``, lowest bit first."""
    return tuple(
        m.name or str(m.value)
        for m in SafetyCheck
        if m.value and m.value & (m.value - 1) == 0 and checks & m.value
    )


def verdict_to_proto(verdict: SafetyVerdict) -> pb.SafetyVerdict:
    checks = int(verdict.checks)
    return pb.SafetyVerdict(
        source=_SOURCES.get(verdict.source, pb.ACTION_SOURCE_UNSPECIFIED),
        checks=checks,
        check_names=check_names(checks),
        correction_norm=verdict.correction_norm,
        joints=verdict.joints,
    )


def version_to_proto(version: VersionLike) -> pb.PolicyVersion:
    return pb.PolicyVersion(
        policy_version=version.id, weights_sha256=version.weights_sha256, name=version.name
    )


def action_response(batched: Batched[ActionOutcome], total_ns: int) -> pb.ActionResponse:
    outcome = batched.value
    return pb.ActionResponse(
        action=outcome.action.tolist(),
        log_prob=outcome.log_prob,
        status="ok",
        version=version_to_proto(outcome.version),
        safety=verdict_to_proto(outcome.verdict),
        timings=pb.ServerTimings(
            queue_ns=max(0, batched.queue_ns),
            inference_ns=batched.batch_ns,
            safety_ns=outcome.safety_ns,
            total_ns=total_ns,
            batch_size=batched.batch_size,
        ),
        degradation=degradation_to_proto(outcome.degradation),
        proposed_action=outcome.proposed_action.tolist(),
    )
