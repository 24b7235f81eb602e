"""The experience log's on-disk format: one Arrow schema, and conversions to and from it.

A chunk is an Arrow IPC *file* (Feather v2: ``pandas.read_feather`` and
``pyarrow.ipc.open_file`` read it) whose record batches are the flushes of the writer
(``FLUSH_SLICE_ROWS`` rows at most each).
Because the IPC file format is the IPC stream format between a magic prefix and a
footer, a chunk whose writer was killed before the footer is still readable batch by
batch up to its torn tail. Invariant: every chunk of one log has the same schema,
including ``obs_dim``/``act_dim`` in its metadata.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from tether.data.columns import TransitionArrays, TransitionTable
from tether.data.errors import LogFormatError
from tether.data.step import ACTION_SOURCES

FORMAT = "tether.experience-log/1"
FILE_MAGIC = b"ARROW1\x00\x00"  # what precedes the stream messages in an IPC file
_SOURCE_NAMES = np.array(ACTION_SOURCES, dtype=object)


def log_schema(obs_dim: int, act_dim: int) -> pa.Schema:
    """The schema of every chunk of a log for ``obs_dim``/``act_dim``."""
    obs = pa.list_(pa.float32(), obs_dim)
    act = pa.list_(pa.float32(), act_dim)
    fields = [
        ("session_id", pa.string()),
        ("robot_id", pa.string()),
        ("episode_id", pa.string()),
        ("step_index", pa.int64()),
        ("observation", obs),
        ("proposed_action", act),
        ("action", act),
        ("reward", pa.float32()),
        ("next_observation", obs),
        ("terminated", pa.bool_()),
        ("truncated", pa.bool_()),
        ("action_source", pa.string()),
        ("safety_checks", pa.int64()),
        ("policy_version", pa.int64()),
        ("weights_sha256", pa.string()),
        ("ingress_ns", pa.int64()),
        ("next_ingress_ns", pa.int64()),
        ("client_timestamp_ns", pa.int64()),
    ]
    metadata = {"format": FORMAT, "obs_dim": str(obs_dim), "act_dim": str(act_dim)}
    return pa.schema(fields, metadata=metadata)


def schema_dims(schema: pa.Schema, where: str) -> tuple[int, int]:
    """``(obs_dim, act_dim)`` of a chunk's schema; LogFormatError if it is not ours."""
    meta = schema.metadata or {}
    if meta.get(b"format") != FORMAT.encode():
        raise LogFormatError(
            f"{where}: expected an experience log chunk with format {FORMAT!r}, "
            f"found {meta.get(b'format')!r}; point the log at a directory tether wrote"
        )
    return int(meta[b"obs_dim"]), int(meta[b"act_dim"])


def record_batch(transitions: TransitionTable, schema: pa.Schema) -> pa.RecordBatch:
    """``transitions`` as a record batch of ``schema``, column by column."""
    arrays = transitions.arrays

    def fixed(matrix: np.ndarray) -> pa.Array:
        return pa.FixedSizeListArray.from_arrays(pa.array(matrix.reshape(-1)), matrix.shape[1])

    columns = {
        "session_id": pa.array(transitions.session_ids, pa.string()),
        "robot_id": pa.array(transitions.robot_ids, pa.string()),
        "episode_id": pa.array(transitions.episode_ids, pa.string()),
        "step_index": pa.array(transitions.step_indices),
        "observation": fixed(arrays.observations),
        "proposed_action": fixed(arrays.proposed_actions),
        "action": fixed(arrays.actions),
        "reward": pa.array(arrays.rewards),
        "next_observation": fixed(arrays.next_observations),
        "terminated": pa.array(arrays.terminated),
        "truncated": pa.array(arrays.truncated),
        "action_source": pa.array(_SOURCE_NAMES.take(arrays.action_sources), pa.string()),
        "safety_checks": pa.array(arrays.safety_checks),
        "policy_version": pa.array(arrays.policy_versions),
        "weights_sha256": pa.array(transitions.weights_sha256, pa.string()),
        "ingress_ns": pa.array(arrays.ingress_ns),
        "next_ingress_ns": pa.array(arrays.next_ingress_ns),
        "client_timestamp_ns": pa.array(transitions.client_timestamp_ns),
    }
    return pa.record_batch([columns[name] for name in schema.names], schema=schema)


def transition_arrays(table: pa.Table) -> TransitionArrays:
    """The numeric columns of a log table, in row order."""
    obs_dim, act_dim = schema_dims(table.schema, "log table")

    def matrix(name: str, width: int) -> np.ndarray:
        flat = table.column(name).combine_chunks().flatten().to_numpy(zero_copy_only=False)
        return np.ascontiguousarray(flat.reshape(-1, width), dtype=np.float32)

    def vector(name: str, dtype: type[np.generic]) -> np.ndarray:
        return np.asarray(table.column(name).to_numpy(), dtype=dtype)

    sources = table.column("action_source")
    codes = np.full(table.num_rows, 255, dtype=np.uint8)
    for code, name in enumerate(ACTION_SOURCES):
        codes[np.asarray(pc.equal(sources, name).to_numpy(zero_copy_only=False))] = code
    if table.num_rows and codes.max() == 255:
        unknown = sorted(set(sources.to_pylist()) - set(ACTION_SOURCES))
        raise LogFormatError(
            f"log table: action_source must be one of {ACTION_SOURCES}, found {unknown}"
        )
    return TransitionArrays(
        observations=matrix("observation", obs_dim),
        proposed_actions=matrix("proposed_action", act_dim),
        actions=matrix("action", act_dim),
        rewards=vector("reward", np.float32),
        next_observations=matrix("next_observation", obs_dim),
        terminated=vector("terminated", np.bool_),
        truncated=vector("truncated", np.bool_),
        action_sources=codes,
        safety_checks=vector("safety_checks", np.int64),
        policy_versions=vector("policy_version", np.int64),
        ingress_ns=vector("ingress_ns", np.int64),
        next_ingress_ns=vector("next_ingress_ns", np.int64),
    )
