"""The experience log: an append-only directory of Arrow chunks that survives a SIGKILL.

``put`` (called by the recorder's worker) only queues transitions in memory; a flusher
thread writes them as one record batch at least every ``flush_interval_s`` and on
``flush()``/``close()``, so a crash loses at most the last interval. Invariants:

* a chunk is only ever appended to while open, then sealed (footer written) and never
  modified again; the only rewrite is the repair of a torn chunk on the next open, done
  by writing a sealed copy beside it and renaming it over (atomic), so no file is ever
  unreadable;
* every row that a returned ``flush()`` reported is readable after a SIGKILL of this
  process (with ``fsync`` it also survives a power cut);
* retention removes whole sealed chunks, oldest first, and says so in a log line.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import pyarrow as pa
from pydantic import BaseModel, ConfigDict, Field

from tether.data.columns import TransitionTable
from tether.data.errors import DataError, LogFormatError
from tether.data.log_format import log_schema, record_batch, schema_dims
from tether.data.log_reader import chunk_paths, chunk_sequence, is_sealed, read_chunk

logger = logging.getLogger(__name__)

# Rows a flush converts and appends at a time. A second of 64 robots is ~8,000 rows, whose
# conversion in one piece held the GIL for milliseconds at a time and set the Control
# p99 (docs/benchmarks.md); between slices the serving loop takes the GIL.
FLUSH_SLICE_ROWS = 512


# What a row that cannot be stored raises while it is converted (a source code beyond the
# known ones is an IndexError, a string column holding something else an ArrowException).
_UNSTORABLE = (ValueError, TypeError, OverflowError, IndexError, pa.ArrowException)


class ExperienceLogConfig(BaseModel):
    """How often the log flushes, how big its chunks get, and how much it keeps."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    flush_interval_s: float = Field(
        default=1.0,
        gt=0,
        le=60,
        description="longest time a put() transition waits before reaching disk (s)",
    )
    fsync: bool = Field(
        default=True, description="fsync each flush so flushed rows also survive a power cut (bool)"
    )
    chunk_max_bytes: int = Field(
        default=64 * 2**20,
        ge=4096,
        description="size after which a chunk is sealed and a new one begun (bytes)",
    )
    retention_max_bytes: int = Field(
        default=8 * 2**30,
        ge=4096,
        description="total size above which the oldest chunks are removed (bytes)",
    )
    max_pending_rows: int = Field(
        default=1_000_000,
        ge=1,
        description="rows put() may queue while the disk lags before it raises (rows)",
    )


@dataclass(frozen=True)
class ExperienceLogStats:
    """What the log has written and removed since it was opened."""

    rows_flushed: int
    pending_rows: int
    flushes: int  # record batches appended (a flush writes one per FLUSH_SLICE_ROWS rows)
    chunks_written: int
    chunks_removed: int
    bytes_removed: int
    torn_chunks_repaired: int
    torn_bytes_dropped: int
    rows_rejected: int  # transitions that could not be stored (wrong dims or source), dropped
    flush_errors: int
    last_error: str


@dataclass(frozen=True)
class _OpenChunk:
    path: Path
    file: BinaryIO
    writer: pa.ipc.RecordBatchFileWriter


class ExperienceLog:
    """Append transitions to ``directory``; reopen the same directory to continue after a crash."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        obs_dim: int,
        act_dim: int,
        config: ExperienceLogConfig | None = None,
    ) -> None:
        self.config = config or ExperienceLogConfig()
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.obs_dim, self.act_dim = obs_dim, act_dim
        self._schema = log_schema(obs_dim, act_dim)
        # pyarrow imports pandas (when installed) on its first conversion of Python data:
        # ~0.25 s of imports under the GIL, which on the flusher thread, one interval into
        # serving, stalled every robot's step for that long (docs/benchmarks.md). Paid
        # here, at open, before anything is served.
        record_batch(TransitionTable.from_transitions([], obs_dim, act_dim), self._schema)
        self._pending: list[TransitionTable] = []
        self._pending_rows = 0
        self._pending_lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._chunk: _OpenChunk | None = None
        self._n = dict.fromkeys(ExperienceLogStats.__dataclass_fields__, 0)
        self._last_error = ""
        self._next_sequence = self._recover() + 1
        self._stop = threading.Event()
        self._closed = False
        self._flusher = threading.Thread(target=self._run, name="tether-log-flusher", daemon=True)
        self._flusher.start()

    def put(self, transitions: TransitionTable) -> None:
        """Queue ``transitions`` for the next flush (a recorder sink; cheap). Rows of other
        dimensions than the log's are counted as rejected and not queued."""
        if self._closed:
            raise DataError(f"experience log {self.directory} is closed; reopen it to append")
        dims = transitions.arrays.obs_dim, transitions.arrays.act_dim
        if len(transitions) and dims != (self.obs_dim, self.act_dim):
            self._reject(len(transitions), f"(obs_dim, act_dim) {dims}")
            return
        with self._pending_lock:
            if self._pending_rows >= self.config.max_pending_rows:
                raise DataError(
                    f"experience log {self.directory} has {self._pending_rows} unflushed rows, "
                    f"the limit is max_pending_rows={self.config.max_pending_rows}; the disk is "
                    f"failing or too slow (last error: {self._last_error or 'none'})"
                )
            self._pending.append(transitions)
            self._pending_rows += len(transitions)

    def flush(self) -> int:
        """Write everything queued so far; return the total rows flushed since opening.

        The rows are converted and appended ``FLUSH_SLICE_ROWS`` at a time, the GIL handed
        over between slices (the serving loop waits for it otherwise), and synced once."""
        with self._write_lock:
            with self._pending_lock:
                parts, self._pending = self._pending, []
                self._pending_rows = 0
            if not parts:
                return int(self._n["rows_flushed"])
            rows = TransitionTable.concat(parts)
            for start in range(0, len(rows), FLUSH_SLICE_ROWS):
                if start:
                    time.sleep(0)  # a thread waiting for the GIL takes it now
                self._append(rows, start)
            chunk = self._chunk
            if self.config.fsync and chunk is not None:
                os.fsync(chunk.file.fileno())
            return int(self._n["rows_flushed"])

    def _append(self, rows: TransitionTable, start: int) -> None:
        """Convert and write the slice of ``rows`` from ``start``; on a failure it and every
        later row go back to the front of the queue, in order, to be tried again (the
        slice without the rows it rejected), and the error is raised."""
        end = min(start + FLUSH_SLICE_ROWS, len(rows))
        try:
            batch, kept = self._convert(rows.slice(start, end))
        except Exception as exc:  # unforeseen: keep every row for the next try, loudly
            self._requeue(rows.slice(start, len(rows)), exc)
            raise
        if batch is not None:
            try:
                self._write(batch)
            except Exception as exc:
                self._abandon_chunk()
                self._requeue(TransitionTable.concat([kept, rows.slice(end, len(rows))]), exc)
                raise

    def _requeue(self, rows: TransitionTable, exc: Exception) -> None:
        with self._pending_lock:
            self._pending.insert(0, rows)
            self._pending_rows += len(rows)
        self._n["flush_errors"] += 1
        self._last_error = repr(exc)

    def close(self) -> None:
        """Flush, seal the open chunk, and stop the flusher thread."""
        if self._closed:
            return
        self._stop.set()
        self._flusher.join()
        self.flush()
        with self._write_lock:
            self._seal()
        self._closed = True

    def stats(self) -> ExperienceLogStats:
        with self._pending_lock:
            pending = self._pending_rows
        counts = {**self._n, "pending_rows": pending}
        del counts["last_error"]
        return ExperienceLogStats(**counts, last_error=self._last_error)

    def __enter__(self) -> ExperienceLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _run(self) -> None:
        while not self._stop.wait(self.config.flush_interval_s):
            try:
                self.flush()
            except Exception:  # kept pending and counted; retried next interval
                logger.exception("experience log %s: flush failed; will retry", self.directory)

    def _convert(self, rows: TransitionTable) -> tuple[pa.RecordBatch | None, TransitionTable]:
        """The rows as one record batch; rows that cannot be stored are counted and dropped,
        so one malformed transition cannot block every later flush."""
        try:
            return record_batch(rows, self._schema), rows
        except _UNSTORABLE:
            good = [row for row in range(len(rows)) if self._fits(rows.slice(row, row + 1))]
            self._reject(len(rows) - len(good), "a value beyond its column's type or source")
            if not good:
                return None, rows.slice(0, 0)
            kept = TransitionTable.concat([rows.slice(row, row + 1) for row in good])
            return record_batch(kept, self._schema), kept

    def _reject(self, rows: int, why: str) -> None:
        with self._pending_lock:  # put (the recorder's thread) and flushes both reject
            self._n["rows_rejected"] += rows
        logger.error(
            "experience log %s: rejected %d transitions (%s; it stores obs_dim=%d, act_dim=%d "
            "and the known action sources); they are not logged",
            self.directory,
            rows,
            why,
            self.obs_dim,
            self.act_dim,
        )

    def _fits(self, transition: TransitionTable) -> bool:
        try:
            record_batch(transition, self._schema)
        except _UNSTORABLE:
            return False
        return True

    def _write(self, batch: pa.RecordBatch) -> None:
        """Append ``batch`` (synced by ``flush`` after its last slice, or when sealed)."""
        chunk = self._chunk or self._open_chunk()
        chunk.writer.write_batch(batch)
        self._n["rows_flushed"] += batch.num_rows
        self._n["flushes"] += 1
        if chunk.path.stat().st_size >= self.config.chunk_max_bytes:
            self._seal()
            self._apply_retention()

    def _open_chunk(self) -> _OpenChunk:
        path = self.directory / f"chunk-{self._next_sequence:08d}.arrow"
        self._next_sequence += 1
        # Unbuffered: every write_batch reaches the OS at once, so SIGKILL cannot lose it.
        file = path.open("xb", buffering=0)
        self._chunk = _OpenChunk(path, file, pa.ipc.new_file(file, self._schema))
        self._n["chunks_written"] += 1
        return self._chunk

    def _seal(self) -> None:
        chunk, self._chunk = self._chunk, None
        if chunk is None:
            return
        chunk.writer.close()
        if self.config.fsync:
            os.fsync(chunk.file.fileno())
        chunk.file.close()

    def _abandon_chunk(self) -> None:
        """After a failed write: leave the chunk unsealed (its tail may be half a batch) so
        later rows go to a fresh chunk instead of behind bytes no reader can step over."""
        chunk, self._chunk = self._chunk, None
        if chunk is not None:
            try:
                chunk.file.close()
            except OSError:
                logger.exception("experience log %s: closing %s failed", self.directory, chunk.path)

    def _apply_retention(self) -> None:
        chunks = chunk_paths(self.directory)
        total = sum(p.stat().st_size for p in chunks)
        # The newest chunk always stays, even when it alone is above the limit.
        for path in chunks[:-1]:
            if total <= self.config.retention_max_bytes:
                break
            size = path.stat().st_size
            path.unlink()
            total -= size
            self._n["chunks_removed"] += 1
            self._n["bytes_removed"] += size
            logger.warning(
                "experience log %s: removed oldest chunk %s (%d bytes) to stay under "
                "retention_max_bytes=%d; %d bytes remain",
                self.directory,
                path.name,
                size,
                self.config.retention_max_bytes,
                total,
            )

    def _recover(self) -> int:
        """Check dims, repair torn chunks left by a killed writer; return the last sequence."""
        last = 0
        for leftover in self.directory.glob("chunk-*.repair"):
            leftover.unlink()  # a repair copy whose rename never happened; the original stands
        for path in chunk_paths(self.directory):
            last = max(last, chunk_sequence(path))
            if not is_sealed(path):
                self._repair(path)
                if not path.exists():
                    continue
            with pa.memory_map(str(path)) as source:
                dims = schema_dims(pa.ipc.open_file(source).schema, str(path))
            if dims != (self.obs_dim, self.act_dim):
                raise LogFormatError(
                    f"{path}: holds obs_dim={dims[0]}, act_dim={dims[1]}; this log was opened "
                    f"for obs_dim={self.obs_dim}, act_dim={self.act_dim}; use another directory "
                    "for another robot"
                )
        return last

    def _repair(self, path: Path) -> None:
        table, report = read_chunk(path)
        self._n["torn_chunks_repaired"] += 1
        self._n["torn_bytes_dropped"] += report.torn_bytes
        if table is None:
            path.unlink()
            logger.warning(
                "experience log %s: removed %s, a chunk whose writer died before its first "
                "flush completed (%d bytes, no complete rows)",
                self.directory,
                path.name,
                report.torn_bytes,
            )
            return
        tmp = path.with_suffix(".repair")
        with tmp.open("wb") as f:
            with pa.ipc.new_file(f, table.schema) as writer:
                writer.write_table(table)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        logger.warning(
            "experience log %s: %s was torn (its writer stopped without closing it): kept "
            "%d complete rows, dropped a %d-byte unfinished tail",
            self.directory,
            path.name,
            table.num_rows,
            report.torn_bytes,
        )
