"""Typed records to wire messages: versions, verdicts, timings, action replies.

One function per message so the unary and streaming paths build replies identically.
Invariant: the action placed in a reply is the supervisor's safe action, never the
proposed one (which travels separately, labelled as such).

Replies are filled in place (``fill_action_response`` writes into the ``ControlReply``'s
own ``action`` field) rather than built as separate messages and copied in: every step
of every session builds one, and the copies were most of its cost. A batch of Control
replies of a single-step policy is written as wire bytes instead, every row in one
compiled call (``encode_control_replies``, ``tether.serving.reply_kernel``): the same
bytes ``SerializeToString`` makes of the message built here.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate
from typing import TYPE_CHECKING, Any

import numpy as np

from tether.safety.levels import DegradationLevel
from tether.safety.verdict import ActionSource, SafetyCheck, SafetyVerdict, check_names
from tether.serving import reply_kernel
from tether.serving.batcher import Batched
from tether.v1 import policy_pb2 as pb
from tether.versions.protocols import VersionLike

if TYPE_CHECKING:
    from tether.serving.inference import ActionOutcome

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


# The wire enum of each source and level, and the name of each check bit, as
# ``encode_control_replies`` hands them to the kernel.
_SOURCE_CODES = {source: int(code) for source, code in _SOURCES.items()}
_LEVEL_CODES = tuple(int(degradation_to_proto(level)) for level in DegradationLevel)
_CHECK_BITS = max(int(check).bit_length() for check in SafetyCheck)
_NAMES = [check_names(1 << bit) for bit in range(_CHECK_BITS)]
_NAME_BLOB = np.frombuffer(
    "".join(names[0] if names else "" for names in _NAMES).encode(), dtype=np.uint8
)
_NAME_ENDS = np.cumsum([0] + [len(names[0]) if names else 0 for names in _NAMES], dtype=np.int64)
_NO_JOINTS = np.zeros(0, dtype=np.int64)
_UINT32_MAX = 2**32 - 1
_NO_BYTES = np.frombuffer(b"", dtype=np.uint8)


class _VersionBytes:
    """The encoded ``PolicyVersion`` of the last version asked for."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        # One attribute, replaced whole: a batch on another thread reads a matching pair.
        self._last: tuple[VersionLike | None, np.ndarray] = (None, _NO_BYTES)

    def of(self, version: VersionLike) -> np.ndarray:
        last, blob = self._last
        if version is not last:
            blob = np.frombuffer(version_to_proto(version).SerializeToString(), dtype=np.uint8)
            self._last = (version, blob)
        return blob


_VERSION = _VersionBytes()


def encode_control_replies(
    steps: Sequence[tuple[Any, ...]],
    actions: np.ndarray,
    proposed: np.ndarray,
    log_probs: np.ndarray,
    verdicts: Sequence[SafetyVerdict],
    levels: Sequence[DegradationLevel],
    version: VersionLike,
    timings: np.ndarray,
) -> list[bytes]:
    """Every row's ``ControlReply`` as wire bytes, in one compiled call: row ``i`` answers
    step ``steps[i]`` (a tuple that starts with its index and episode id: ``StepFacts``)
    with the safe action ``actions[i]``, what was proposed, its verdict and level, and
    ``timings[i]`` (queue, inference, safety, total ns, batch size; int64 >= 0). The bytes
    equal ``SerializeToString`` of the reply that ``fill_action_response`` fills (a
    single-step policy's: no chunk)."""
    rows, act_dim = actions.shape
    # A row's step and verdict as one flat list, converted once (a conversion per column
    # cost more than the kernel itself for a small batch).
    norms: list[float] = []
    columns: list[int] = []
    joint_list: list[int] = []
    for step, verdict, level in zip(steps, verdicts, levels, strict=True):
        norms.append(verdict.correction_norm)
        joint_list += verdict.joints
        columns += (
            step[0],
            _SOURCE_CODES.get(verdict.source, 0),
            int(verdict.checks),
            _LEVEL_CODES[level],
            len(joint_list),
        )
    floats = np.concatenate(
        (actions, proposed, log_probs.reshape(rows, 1), np.array(norms).reshape(rows, 1)),
        axis=1,
        dtype="<f4",
    )
    ints = np.empty((rows, reply_kernel.INT_COLUMNS), dtype=np.int64)
    ints[:, : reply_kernel.ROW_COLUMNS] = np.array(columns).reshape(rows, reply_kernel.ROW_COLUMNS)
    ints[:, reply_kernel.ROW_COLUMNS :] = timings
    joints = _NO_JOINTS
    if joint_list:
        if min(joint_list) < 0 or max(joint_list) > _UINT32_MAX:
            raise ValueError(
                f"a verdict names joint {min(joint_list)} or {max(joint_list)}, outside "
                "the wire's uint32; the reply cannot carry it"
            )
        joints = np.array(joint_list, dtype=np.int64)
    episode_ids = [step[1] for step in steps]
    text = "".join(episode_ids).encode()
    lengths = list(map(len, episode_ids))
    if len(text) != sum(lengths):  # not all ASCII: count each id's UTF-8 bytes
        lengths = [len(episode.encode()) for episode in episode_ids]
    episode_ends = np.array([0, *accumulate(lengths)], dtype=np.int64)
    episodes = np.frombuffer(text, dtype=np.uint8)
    blob = _VERSION.of(version)
    out = np.empty(
        reply_kernel.capacity(
            rows, act_dim, len(text), len(blob), len(joints), len(_NAME_BLOB), _CHECK_BITS
        ),
        dtype=np.uint8,
    )
    ends = np.empty(rows, dtype=np.int64)
    size = reply_kernel.encode(
        floats.view(np.uint8),
        ints,
        episodes,
        episode_ends,
        blob,
        joints,
        _NAME_BLOB,
        _NAME_ENDS,
        out,
        ends,
    )
    if size > len(out):  # never: capacity bounds every field; checked, not trusted
        raise AssertionError(f"the reply encoder wrote {size} bytes into {len(out)}")
    data = out[:size].tobytes()
    bounds = [0, *ends.tolist()]
    return [data[bounds[i] : bounds[i + 1]] for i in range(rows)]
