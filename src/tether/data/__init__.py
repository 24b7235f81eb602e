"""tether.data: ingress clock, step pairing, the experience log, replay, and transport.

See docs/data.md for the record fields, the pairing rules, the log's crash semantics and
the buffer's mixing and retention. Lower layers only: imports numpy, pyarrow, pydantic.
"""

from typing import TYPE_CHECKING

from tether.lazy import lazy_exports

if TYPE_CHECKING:
    from tether.data.channel import ChannelConfig, ChannelStats, TransitionChannel
    from tether.data.clock import ingress_ns
    from tether.data.columns import TransitionArrays, TransitionTable
    from tether.data.errors import ChannelError, DataError, LogFormatError, ReplayStateError
    from tether.data.log import ExperienceLog, ExperienceLogConfig, ExperienceLogStats
    from tether.data.log_reader import ChunkReport, LogReport, read_log, rebuild_buffer
    from tether.data.pairing import PairingStats, StepPairer
    from tether.data.recorder import Recorder, RecorderConfig, RecorderStats, TransitionSink
    from tether.data.records import Transition, TransitionBatch
    from tether.data.replay.buffer import ReplayBuffer, ReplayBufferConfig, ReplayStats
    from tether.data.replay.sampler import RecentMixSampler, SampleIndex, SamplerConfig
    from tether.data.replay.storage import StorageConfig, TransitionStorage
    from tether.data.replay.writer import ReservoirWriter, WriterConfig, WriterStats
    from tether.data.step import (
        ACTION_SOURCES,
        AnsweredSteps,
        StepBlock,
        StepFacts,
        StepRecord,
    )

__all__ = [
    "ACTION_SOURCES",
    "AnsweredSteps",
    "ChannelConfig",
    "ChannelError",
    "ChannelStats",
    "ChunkReport",
    "DataError",
    "ExperienceLog",
    "ExperienceLogConfig",
    "ExperienceLogStats",
    "LogFormatError",
    "LogReport",
    "PairingStats",
    "RecentMixSampler",
    "Recorder",
    "RecorderConfig",
    "RecorderStats",
    "ReplayBuffer",
    "ReplayBufferConfig",
    "ReplayStateError",
    "ReplayStats",
    "ReservoirWriter",
    "SampleIndex",
    "SamplerConfig",
    "StepBlock",
    "StepFacts",
    "StepPairer",
    "StepRecord",
    "StorageConfig",
    "Transition",
    "TransitionArrays",
    "TransitionBatch",
    "TransitionChannel",
    "TransitionSink",
    "TransitionStorage",
    "TransitionTable",
    "WriterConfig",
    "WriterStats",
    "ingress_ns",
    "read_log",
    "rebuild_buffer",
]

__getattr__, __dir__ = lazy_exports(__name__, __file__)
