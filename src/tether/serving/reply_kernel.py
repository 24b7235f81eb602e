"""A batch of ``ControlReply`` messages written as protobuf wire bytes in one compiled call.

``encode`` writes every row's reply (``step_index``, ``episode_id`` and the
``ActionResponse`` of a single-step policy) into one byte buffer, field for field in the
order and with the omissions of protobuf's own serializer, so each row's bytes equal
``ControlReply.SerializeToString()`` of the message ``tether.serving.convert`` builds
(``tests/serving/test_reply_kernel.py`` holds it to that). The columns come from
``tether.serving.convert.encode_control_replies``; the numbers of a row sit in two
tables so the call unboxes few arguments:

* ``raw`` (rows, 4 * (2 * act_dim + 2)) uint8: a float32 table viewed as its
  little-endian bytes, a row holding the safe action, the proposed action, the
  log-probability and the verdict's correction norm;
* ``ints`` (rows, ``INT_COLUMNS``) int64, every entry >= 0: the columns named ``I_*``
  (step index, the wire enums of source and check bits and degradation, the end of the
  row's joints in ``joints``: the first ``ROW_COLUMNS``; then the timings);
* ``episodes`` / ``episode_ends``: the rows' episode ids, UTF-8, end to end;
* ``version``: the encoded ``PolicyVersion`` every row of the batch names;
* ``names`` / ``name_ends``: the name of check bit ``b`` (empty where no check has that
  bit), end to end.

Without numba (or with ``TETHER_WIRE_COMPILED=0``) the same functions run as Python.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tether.compiled import compiler, import_numba, warm_once

numba: Any = import_numba("TETHER_WIRE_COMPILED")  # None: plain Python (see tether.compiled)
AVAILABLE = numba is not None
_compiled = compiler(numba)

# Columns of ``ints``.
(
    I_STEP,
    I_SOURCE,
    I_CHECKS,
    I_DEGRADATION,
    I_JOINTS_END,
    I_QUEUE_NS,
    I_INFERENCE_NS,
    I_SAFETY_NS,
    I_TOTAL_NS,
    I_BATCH_SIZE,
) = range(10)
INT_COLUMNS = 10
ROW_COLUMNS = I_JOINTS_END + 1  # the columns read off each row's step and verdict

# Bytes a varint of a non-negative int64 takes at most, a length prefix (below 2**35),
# and a row's tags, prefixes and numbers at most, beyond its floats, strings and joints.
_VARINT_MAX = 10
_LENGTH_MAX = 5
_ROW_FIXED = (
    (1 + _VARINT_MAX) + 2 * (1 + _LENGTH_MAX)  # step_index; episode_id's, action's prefixes
    + 2 * (1 + _LENGTH_MAX) + 5 + 4  # the two vectors' prefixes; log_prob; status "ok"
    + (1 + _LENGTH_MAX)  # version's prefix
    + (1 + _LENGTH_MAX) + 2 * (1 + _VARINT_MAX) + 5 + (1 + _LENGTH_MAX)  # safety: prefix,
    # source, checks, correction_norm, the joints' prefix
    + (1 + _LENGTH_MAX) + 5 * (1 + _VARINT_MAX)  # timings
    + (1 + _VARINT_MAX)  # degradation
)  # fmt: skip
_NAME_PREFIX = 1 + _LENGTH_MAX  # each check name's tag and length


@_compiled
def _varint_size(value: int) -> int:
    size = 1
    while value >= 0x80:
        value >>= 7
        size += 1
    return size


@_compiled
def _put_varint(out: np.ndarray, at: int, value: int) -> int:
    while value >= 0x80:
        out[at] = (value & 0x7F) | 0x80
        value >>= 7
        at += 1
    out[at] = value
    return at + 1


@_compiled
def _put_bytes(out: np.ndarray, at: int, source: np.ndarray, start: int, end: int) -> int:
    for k in range(start, end):
        out[at] = source[k]
        at += 1
    return at


@_compiled
def _nonzero(raw: np.ndarray, at: int) -> int:
    """Whether the float32 at byte ``at`` has any bit set (protobuf omits +0.0 alone)."""
    return int(raw[at] | raw[at + 1] | raw[at + 2] | raw[at + 3])


@_compiled
def _field_size(tag_and_value: int) -> int:
    """Bytes of a varint field whose one-byte tag precedes ``tag_and_value``; 0 if it is 0."""
    return 0 if tag_and_value == 0 else 1 + _varint_size(tag_and_value)


@_compiled
def _verdict_size(
    row: np.ndarray, norm_bits: int, joints: np.ndarray, joint_start: int, name_ends: np.ndarray
) -> tuple[int, int]:
    """(the SafetyVerdict's size, the size of its packed joints)."""
    size = _field_size(row[I_SOURCE]) + _field_size(row[I_CHECKS])
    checks = row[I_CHECKS]
    for bit in range(name_ends.shape[0] - 1):
        length = name_ends[bit + 1] - name_ends[bit]
        if length and (checks >> bit) & 1:
            size += 1 + _varint_size(length) + length
    if norm_bits != 0:
        size += 5
    packed = 0
    for k in range(joint_start, row[I_JOINTS_END]):
        packed += _varint_size(joints[k])
    if packed:
        size += 1 + _varint_size(packed) + packed
    return size, packed


@_compiled
def _nested_size(length: int) -> int:
    """Bytes of a length-delimited field (one-byte tag) holding ``length`` bytes."""
    return 1 + _varint_size(length) + length


@_compiled
def _timings_size(row: np.ndarray) -> int:
    size = 0
    for column in range(I_QUEUE_NS, I_BATCH_SIZE + 1):
        size += _field_size(row[column])
    return size


@_compiled
def encode(
    raw: np.ndarray,
    ints: np.ndarray,
    episodes: np.ndarray,
    episode_ends: np.ndarray,
    version: np.ndarray,
    joints: np.ndarray,
    names: np.ndarray,
    name_ends: np.ndarray,
    out: np.ndarray,
    ends: np.ndarray,
) -> int:
    """Write every row's ``ControlReply`` into ``out``; row ``i`` ends at ``ends[i]``.
    Returns the bytes written. ``out`` must hold ``capacity(...)`` bytes."""
    rows = raw.shape[0]
    act = (raw.shape[1] // 4 - 2) // 2
    at = 0
    # A plain int, not a literal (tether.compiled).
    joint_start = zero = int(0)  # noqa: UP018, RUF046
    for i in range(rows):
        row = ints[i]
        log_prob_bits = _nonzero(raw[i], 8 * act)
        norm_bits = _nonzero(raw[i], 8 * act + 4)
        verdict, packed = _verdict_size(row, norm_bits, joints, joint_start, name_ends)
        timings = _timings_size(row)
        vector = _nested_size(4 * act)
        body = (
            2 * vector
            + (5 if log_prob_bits != 0 else 0)
            + 4  # status "ok"
            + _nested_size(version.shape[0])
            + _nested_size(verdict)
            + _nested_size(timings)
            + _field_size(row[I_DEGRADATION])
        )
        # ControlReply: step_index = 1, episode_id = 2, action = 4.
        if row[I_STEP]:
            out[at] = 0x08
            at = _put_varint(out, at + 1, row[I_STEP])
        episode_start, episode_end = episode_ends[i], episode_ends[i + 1]
        if episode_end > episode_start:
            out[at] = 0x12
            at = _put_varint(out, at + 1, episode_end - episode_start)
            at = _put_bytes(out, at, episodes, episode_start, episode_end)
        out[at] = 0x22
        at = _put_varint(out, at + 1, body)
        # ActionResponse 1: action, packed floats.
        out[at] = 0x0A
        at = _put_varint(out, at + 1, 4 * act)
        at = _put_bytes(out, at, raw[i], zero, 4 * act)
        if log_prob_bits != 0:  # 2: log_prob
            out[at] = 0x15
            at = _put_bytes(out, at + 1, raw[i], 8 * act, 8 * act + 4)
        out[at] = 0x1A  # 3: status "ok"
        out[at + 1] = 2
        out[at + 2] = 0x6F
        out[at + 3] = 0x6B
        at += 4
        out[at] = 0x22  # 4: version
        at = _put_varint(out, at + 1, version.shape[0])
        at = _put_bytes(out, at, version, zero, version.shape[0])
        out[at] = 0x2A  # 5: safety
        at = _put_varint(out, at + 1, verdict)
        if row[I_SOURCE]:
            out[at] = 0x08
            at = _put_varint(out, at + 1, row[I_SOURCE])
        checks = row[I_CHECKS]
        if checks:
            out[at] = 0x10
            at = _put_varint(out, at + 1, checks)
        for bit in range(name_ends.shape[0] - 1):
            length = name_ends[bit + 1] - name_ends[bit]
            if length and (checks >> bit) & 1:
                out[at] = 0x1A
                at = _put_varint(out, at + 1, length)
                at = _put_bytes(out, at, names, name_ends[bit], name_ends[bit + 1])
        if norm_bits != 0:
            out[at] = 0x25
            at = _put_bytes(out, at + 1, raw[i], 8 * act + 4, 8 * act + 8)
        if packed:
            out[at] = 0x2A
            at = _put_varint(out, at + 1, packed)
            for k in range(joint_start, row[I_JOINTS_END]):
                at = _put_varint(out, at, joints[k])
        joint_start = row[I_JOINTS_END]
        out[at] = 0x32  # 6: timings
        at = _put_varint(out, at + 1, timings)
        for column in range(I_QUEUE_NS, I_BATCH_SIZE + 1):
            if row[column]:
                out[at] = (column - I_QUEUE_NS + 1) << 3
                at = _put_varint(out, at + 1, row[column])
        if row[I_DEGRADATION]:  # 7: degradation
            out[at] = 0x38
            at = _put_varint(out, at + 1, row[I_DEGRADATION])
        out[at] = 0x42  # 8: proposed_action, packed floats
        at = _put_varint(out, at + 1, 4 * act)
        at = _put_bytes(out, at, raw[i], 4 * act, 8 * act)
        ends[i] = at
    return at


def capacity(
    rows: int, act_dim: int, episodes: int, version: int, joints: int, names: int, name_count: int
) -> int:
    """Bytes ``encode`` may write at most: ``rows`` rows of ``act_dim`` actions, their
    episode ids (``episodes`` bytes in all), the encoded version (``version`` bytes) in
    every row, ``joints`` joint indices in all (each a varint), and in every row at most
    every one of the ``name_count`` check names (``names`` bytes together)."""
    per_row = _ROW_FIXED + 8 * act_dim + version + names + name_count * _NAME_PREFIX
    return rows * per_row + episodes + joints * _VARINT_MAX


def _compile_all() -> None:
    raw = np.zeros((1, 16), dtype=np.uint8)
    ints = np.zeros((1, INT_COLUMNS), dtype=np.int64)
    blob = np.frombuffer(b"\0", dtype=np.uint8)  # read-only, as the callers' blobs
    bounds = np.zeros(2, dtype=np.int64)
    out = np.zeros(capacity(1, 1, 1, 1, 0, 1, 1), dtype=np.uint8)
    ends = np.zeros(1, dtype=np.int64)
    joints = np.zeros(0, dtype=np.int64)
    encode(raw, ints, blob, bounds, blob, joints, blob, bounds, out, ends)


warm = warm_once(AVAILABLE, _compile_all)
"""Compile ``encode`` (or load it from numba's cache) before it serves; seconds taken
(0.0 after the first call, or without numba)."""
