"""The replay buffer the learner samples: storage, writer and sampler put together.

Each part is replaceable and has its own ``state_dict``; this class adds only a lock (so
a drain thread may ``extend`` while the learner thread samples), conversion from
:class:`Transition` objects, and saving to safetensors. Invariant: a batch returned by
:meth:`sample` is a copy; later writes never change it.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from safetensors.numpy import load_file, save_file

from tether.data.columns import TransitionArrays, TransitionTable
from tether.data.records import Transition, TransitionBatch
from tether.data.replay.sampler import RecentMixSampler, SampleIndex, SamplerConfig
from tether.data.replay.state import StateDict, expect
from tether.data.replay.storage import StorageConfig, TransitionStorage
from tether.data.replay.writer import ReservoirWriter, WriterConfig, WriterStats

_PARTS = ("storage", "writer", "sampler")


class ReplayBufferConfig(BaseModel):
    """The replay buffer's three parts, each with its own config."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    storage: StorageConfig = Field(
        default_factory=StorageConfig, description="ring and reservoir sizes (transitions)"
    )
    writer: WriterConfig = Field(
        default_factory=WriterConfig, description="reservoir admission (probabilities)"
    )
    sampler: SamplerConfig = Field(
        default_factory=SamplerConfig, description="recent/older mix of each batch (fraction, s)"
    )


@dataclass(frozen=True)
class ReplayStats:
    ring_size: int
    reservoir_size: int
    ingested: int  # transitions ever passed to extend()
    reservoir: WriterStats


class ReplayBuffer:
    """Fixed-capacity replay of transitions with a recent/older sampling mix."""

    def __init__(
        self,
        obs_dim: int,
        act_dim: int,
        config: ReplayBufferConfig | None = None,
        *,
        storage: TransitionStorage | None = None,
        writer: ReservoirWriter | None = None,
        sampler: RecentMixSampler | None = None,
    ) -> None:
        self.config = config or ReplayBufferConfig()
        self.storage = storage or TransitionStorage(obs_dim, act_dim, self.config.storage)
        if (self.storage.obs_dim, self.storage.act_dim) != (obs_dim, act_dim):
            raise ValueError(
                f"storage holds obs_dim={self.storage.obs_dim}, act_dim={self.storage.act_dim}; "
                f"the buffer was asked for obs_dim={obs_dim}, act_dim={act_dim}"
            )
        self.writer = writer or ReservoirWriter(self.config.writer)
        self.sampler = sampler or RecentMixSampler(self.config.sampler)
        self._lock = threading.Lock()
        self._ingested = 0

    @property
    def obs_dim(self) -> int:
        return self.storage.obs_dim

    @property
    def act_dim(self) -> int:
        return self.storage.act_dim

    def __len__(self) -> int:
        return len(self.storage)

    def extend(self, data: TransitionArrays | Sequence[Transition]) -> None:
        """Append transitions, oldest first."""
        if not isinstance(data, TransitionArrays):
            data = TransitionArrays.from_transitions(data, self.obs_dim, self.act_dim)
        if len(data) and (data.obs_dim, data.act_dim) != (self.obs_dim, self.act_dim):
            raise ValueError(
                f"transitions have obs_dim={data.obs_dim}, act_dim={data.act_dim}; this buffer "
                f"holds obs_dim={self.obs_dim}, act_dim={self.act_dim}"
            )
        with self._lock:
            self.writer.extend(self.storage, data)
            self._ingested += len(data)

    def put(self, transitions: TransitionTable) -> None:
        """Recorder-sink form of :meth:`extend`, for a learner in the server's process."""
        self.extend(transitions.arrays)

    def sample(self, batch_size: int) -> TransitionBatch:
        """``batch_size`` transitions, ``recent_fraction`` of them from the recent window."""
        return self.sample_rows(batch_size)[0]

    def sample_rows(self, batch_size: int) -> tuple[TransitionBatch, SampleIndex]:
        """Like :meth:`sample`, also returning which storage rows were drawn."""
        with self._lock:
            index = self.sampler.sample(self.storage, batch_size)
            return self.storage.rows.batch_of(index.rows), index

    def stats(self) -> ReplayStats:
        with self._lock:
            return ReplayStats(
                ring_size=self.storage.ring_size,
                reservoir_size=self.storage.reservoir_size,
                ingested=self._ingested,
                reservoir=self.writer.stats(),
            )

    def state_dict(self) -> StateDict:
        """Copies of every part's state, keys prefixed by part (safetensors-ready)."""
        with self._lock:
            state: StateDict = {"ingested": np.array([self._ingested], dtype=np.int64)}
            for part in _PARTS:
                for key, value in getattr(self, part).state_dict().items():
                    state[f"{part}.{key}"] = np.array(value, copy=True)
        return state

    def load_state_dict(self, state: Mapping[str, np.ndarray]) -> None:
        """Restore all parts, or (on a ReplayStateError) none of them."""
        ingested = expect(state, "ingested", (1,), "ReplayBuffer")
        with self._lock:
            apply = []
            for part in _PARTS:
                prefix = f"{part}."
                sub = {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}
                apply.append(getattr(self, part).prepare_load(sub))
            for step in apply:
                step()
            self._ingested = int(ingested[0])

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the whole buffer state to a safetensors file (no pickle)."""
        save_file(self.state_dict(), str(path))

    def load(self, path: str | os.PathLike[str]) -> None:
        """Restore a state written by :meth:`save` into this (same-sized) buffer."""
        self.load_state_dict(load_file(str(path)))
