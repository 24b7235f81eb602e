"""What a client gets back: typed, numpy-backed views of the wire replies.

``ActionResult.from_watchdog`` marks an action the client made up itself (the control
deadline passed or the step failed): the robot can log it, count it, and never confuse
it with a policy action.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tether.v1 import policy_pb2 as pb

_SOURCES = {
    pb.ACTION_SOURCE_POLICY: "policy",
    pb.ACTION_SOURCE_CLIPPED: "clipped",
    pb.ACTION_SOURCE_BACKUP: "backup",
    pb.ACTION_SOURCE_HUMAN: "human",
}


@dataclass(frozen=True)
class PolicyVersionInfo:
    id: int
    weights_sha256: str
    name: str

    @classmethod
    def from_proto(cls, msg: pb.PolicyVersion) -> PolicyVersionInfo:
        return cls(msg.policy_version, msg.weights_sha256, msg.name)


@dataclass(frozen=True)
class ServerTimingsInfo:
    queue_ns: int
    inference_ns: int
    safety_ns: int
    total_ns: int
    batch_size: int

    @classmethod
    def from_proto(cls, msg: pb.ServerTimings) -> ServerTimingsInfo:
        return cls(msg.queue_ns, msg.inference_ns, msg.safety_ns, msg.total_ns, msg.batch_size)


@dataclass(frozen=True)
class VerdictInfo:
    """The server supervisor's verdict (``source`` is a ``tether.safety.ActionSource`` value)."""

    source: str
    checks: int
    check_names: tuple[str, ...]
    correction_norm: float
    joints: tuple[int, ...]

    @classmethod
    def from_proto(cls, msg: pb.SafetyVerdict) -> VerdictInfo:
        return cls(
            _SOURCES.get(msg.source, "unspecified"),
            msg.checks,
            tuple(msg.check_names),
            msg.correction_norm,
            tuple(msg.joints),
        )


@dataclass(frozen=True)
class ActionResult:
    """One action for the robot, from the server or from the client's watchdog."""

    action: np.ndarray  # (act_dim,) float32: what to execute
    proposed_action: np.ndarray | None  # the policy's proposal (None from the watchdog)
    log_prob: float
    version: PolicyVersionInfo | None
    verdict: VerdictInfo | None
    timings: ServerTimingsInfo | None
    degradation: int  # tether.safety.DegradationLevel value; -1 when unknown
    status: str  # "ok", or "backup" for a watchdog action
    from_watchdog: bool = False
    reason: str = ""  # why the watchdog acted (deadline, step error)
    # A chunk policy's whole answer (``action`` is its step 0): the supervised steps
    # (H, act_dim) and one verdict per step; None for a policy with horizon 1.
    chunk: np.ndarray | None = None
    chunk_verdicts: tuple[VerdictInfo, ...] = ()

    @classmethod
    def from_proto(cls, msg: pb.ActionResponse) -> ActionResult:
        chunk = None
        if msg.horizon > 1:
            chunk = np.asarray(msg.chunk, dtype=np.float32).reshape(msg.horizon, -1)
        return cls(
            chunk=chunk,
            chunk_verdicts=tuple(VerdictInfo.from_proto(v) for v in msg.chunk_safety),
            action=np.asarray(msg.action, dtype=np.float32),
            proposed_action=np.asarray(msg.proposed_action, dtype=np.float32),
            log_prob=msg.log_prob,
            version=PolicyVersionInfo.from_proto(msg.version),
            verdict=VerdictInfo.from_proto(msg.safety),
            timings=ServerTimingsInfo.from_proto(msg.timings),
            degradation=int(msg.degradation) - 1,
            status=msg.status,
        )

    @classmethod
    def backup(cls, action: np.ndarray, reason: str) -> ActionResult:
        return cls(
            action=np.asarray(action, dtype=np.float32),
            proposed_action=None,
            log_prob=0.0,
            version=None,
            verdict=None,
            timings=None,
            degradation=-1,
            status="backup",
            from_watchdog=True,
            reason=reason,
        )
