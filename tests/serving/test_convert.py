"""Replies filled in place carry exactly the fields of the supervised outcome."""

from __future__ import annotations

import numpy as np
from hypothesis import given, strategies as st

from tether.policy.manifest import VersionInfo
from tether.safety.levels import DegradationLevel
from tether.safety.verdict import ActionSource, SafetyCheck, SafetyVerdict, check_names
from tether.serving.batcher import Batched
from tether.serving.convert import action_response, fill_action_response
from tether.serving.inference import ActionOutcome
from tether.v1 import policy_pb2 as pb

_WIRE_SOURCE = {
    ActionSource.POLICY: pb.ACTION_SOURCE_POLICY,
    ActionSource.CLIPPED: pb.ACTION_SOURCE_CLIPPED,
    ActionSource.BACKUP: pb.ACTION_SOURCE_BACKUP,
    ActionSource.HUMAN: pb.ACTION_SOURCE_HUMAN,
}
floats = st.floats(-1.0, 1.0, width=32)
verdicts = st.builds(
    SafetyVerdict,
    source=st.sampled_from(list(ActionSource)),
    checks=st.integers(0, (1 << 12) - 1).map(SafetyCheck),
    correction_norm=st.floats(0.0, 10.0),
    joints=st.lists(st.integers(0, 6), max_size=7, unique=True).map(tuple),
)


def expected_response(
    safe: list[float],
    proposed: list[float],
    verdict: SafetyVerdict,
    version: VersionInfo,
    level: DegradationLevel,
    timings: tuple[int, int, int, int, int],
) -> pb.ActionResponse:
    """The reply built the plain way: one constructor, every field spelled out."""
    queue_ns, batch_ns, safety_ns, total_ns, size = timings
    return pb.ActionResponse(
        action=safe,
        log_prob=-0.5,
        status="ok",
        version=pb.PolicyVersion(
            policy_version=version.id, weights_sha256=version.weights_sha256, name=version.name
        ),
        safety=pb.SafetyVerdict(
            source=_WIRE_SOURCE[verdict.source],
            checks=int(verdict.checks),
            check_names=check_names(int(verdict.checks)),
            correction_norm=verdict.correction_norm,
            joints=verdict.joints,
        ),
        timings=pb.ServerTimings(
            queue_ns=queue_ns,
            inference_ns=batch_ns,
            safety_ns=safety_ns,
            total_ns=total_ns,
            batch_size=size,
        ),
        degradation=int(level) + 1,  # the wire enum reserves 0 for "unspecified"
        proposed_action=proposed,
    )


@given(
    safe=st.lists(floats, min_size=7, max_size=7),
    proposed=st.lists(floats, min_size=7, max_size=7),
    verdict=verdicts,
    version_id=st.integers(0, 2**40),
    level=st.sampled_from(list(DegradationLevel)),
    timings=st.tuples(*(st.integers(0, 2**40) for _ in range(4)), st.integers(1, 4096)),
)
def test_filled_reply_equals_the_plainly_built_one(
    safe: list[float],
    proposed: list[float],
    verdict: SafetyVerdict,
    version_id: int,
    level: DegradationLevel,
    timings: tuple[int, int, int, int, int],
) -> None:
    version = VersionInfo(id=version_id, name=f"v{version_id}", weights_sha256="ab" * 32)
    queue_ns, batch_ns, safety_ns, total_ns, size = timings
    outcome = ActionOutcome(
        action=np.asarray(safe, np.float32),
        proposed_action=np.asarray(proposed, np.float32),
        log_prob=-0.5,
        version=version,
        verdict=verdict,
        safety_ns=safety_ns,
        degradation=level,
    )
    batched = Batched(outcome, queue_ns, batch_ns, size)
    want = expected_response(safe, proposed, verdict, version, level, timings)

    reply = pb.ControlReply(step_index=4, episode_id="e")
    fill_action_response(reply.action, batched, total_ns)
    assert reply.WhichOneof("kind") == "action"
    assert reply.action == want
    assert action_response(batched, total_ns) == want
    # Same bytes on the wire as the plainly built reply.
    assert reply.action.SerializeToString(deterministic=True) == want.SerializeToString(
        deterministic=True
    )
