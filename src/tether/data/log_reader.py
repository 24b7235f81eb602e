"""Read an experience log back, tolerating the torn tail a killed writer leaves behind.

A sealed chunk (footer present) is read as an Arrow IPC file. A chunk without a footer
(its writer was killed) is read as the IPC stream behind the file magic, batch by batch,
until the first incomplete message; what follows is reported as ``torn_bytes``, never
raised. Invariant: every row returned was completely written by a flush; no row is
returned twice or out of chunk order.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa

from tether.data.errors import LogFormatError
from tether.data.log_format import FILE_MAGIC, schema_dims, transition_arrays

if TYPE_CHECKING:
    from tether.data.replay.buffer import ReplayBuffer

CHUNK_PATTERN = re.compile(r"^chunk-(\d{8})\.arrow$")
_FOOTER_MAGIC = b"ARROW1"


@dataclass(frozen=True)
class ChunkReport:
    """What one chunk held when it was read."""

    path: Path
    rows: int
    sealed: bool  # the footer is there: the writer closed it
    torn_bytes: int  # bytes after the last complete batch (0 when sealed)


@dataclass(frozen=True)
class LogReport:
    """What a whole log held when it was read, chunk by chunk in order."""

    chunks: tuple[ChunkReport, ...]

    @property
    def rows(self) -> int:
        return sum(c.rows for c in self.chunks)

    @property
    def torn(self) -> tuple[ChunkReport, ...]:
        return tuple(c for c in self.chunks if not c.sealed)


def chunk_paths(directory: Path) -> list[Path]:
    """The log's chunk files in write order."""
    if not directory.is_dir():
        return []
    names = sorted(n for n in os.listdir(directory) if CHUNK_PATTERN.match(n))
    return [directory / n for n in names]


def chunk_sequence(path: Path) -> int:
    match = CHUNK_PATTERN.match(path.name)
    if match is None:
        raise LogFormatError(f"{path}: expected a name like chunk-00000001.arrow")
    return int(match.group(1))


def is_sealed(path: Path) -> bool:
    """True when the chunk ends with the IPC file footer magic (its writer closed it)."""
    size = path.stat().st_size
    if size < len(FILE_MAGIC) + len(_FOOTER_MAGIC):
        return False
    with path.open("rb") as f:
        f.seek(size - len(_FOOTER_MAGIC))
        return f.read() == _FOOTER_MAGIC


def read_chunk(path: Path) -> tuple[pa.Table | None, ChunkReport]:
    """The rows of one chunk (None if it holds not even a schema) and how it ended."""
    data = path.read_bytes()
    if is_sealed(path):
        table = pa.ipc.open_file(pa.py_buffer(data)).read_all()
        schema_dims(table.schema, str(path))
        return table, ChunkReport(path, table.num_rows, sealed=True, torn_bytes=0)
    if not data.startswith(FILE_MAGIC):
        return None, ChunkReport(path, 0, sealed=False, torn_bytes=len(data))
    source = pa.BufferReader(pa.py_buffer(data[len(FILE_MAGIC) :]))
    try:
        reader = pa.ipc.open_stream(source)
    except (pa.ArrowInvalid, OSError):
        return None, ChunkReport(path, 0, sealed=False, torn_bytes=len(data))
    schema_dims(reader.schema, str(path))
    batches: list[pa.RecordBatch] = []
    good = len(FILE_MAGIC) + source.tell()
    while True:
        try:
            batches.append(reader.read_next_batch())
        except StopIteration:
            break
        except (pa.ArrowInvalid, OSError):
            break  # the torn tail: a message the writer did not finish
        good = len(FILE_MAGIC) + source.tell()
    table = pa.Table.from_batches(batches, schema=reader.schema)
    return table, ChunkReport(path, table.num_rows, sealed=False, torn_bytes=len(data) - good)


def iter_chunks(directory: Path) -> Iterator[tuple[pa.Table | None, ChunkReport]]:
    """Each chunk's rows and report, in write order."""
    for path in chunk_paths(directory):
        yield read_chunk(path)


def read_log(directory: str | os.PathLike[str]) -> tuple[pa.Table | None, LogReport]:
    """All rows of the log at ``directory`` as one table (None if it has none)."""
    tables: list[pa.Table] = []
    reports: list[ChunkReport] = []
    for table, report in iter_chunks(Path(directory)):
        reports.append(report)
        if table is not None and table.num_rows:
            tables.append(table)
    return (pa.concat_tables(tables) if tables else None), LogReport(tuple(reports))


def rebuild_buffer(directory: str | os.PathLike[str], buffer: ReplayBuffer) -> LogReport:
    """Feed every logged transition, oldest first, into ``buffer``; report what was read.

    The buffer ends up as if it had ingested the same transitions live, so its ring holds
    the newest ones and its reservoir a sample of the rest.
    """
    reports: list[ChunkReport] = []
    for table, report in iter_chunks(Path(directory)):
        reports.append(report)
        if table is None or not table.num_rows:
            continue
        obs_dim, act_dim = schema_dims(table.schema, str(report.path))
        if (obs_dim, act_dim) != (buffer.obs_dim, buffer.act_dim):
            raise LogFormatError(
                f"{report.path}: holds obs_dim={obs_dim}, act_dim={act_dim}; the buffer expects "
                f"obs_dim={buffer.obs_dim}, act_dim={buffer.act_dim}; rebuild into a buffer "
                "made for this robot"
            )
        buffer.extend(transition_arrays(table))
    return LogReport(tuple(reports))
