"""Actor weights shared between the learner process (one writer) and the server (readers).

A double buffer in ``multiprocessing.shared_memory``: a small int64 header plus two
slots, each big enough for every actor parameter (flat float32, in the order of
:func:`~tether.policy.networks.actor_parameter_shapes`). The writer fills the slot that
is *not* published, bumps that slot's sequence counter around the copy (odd while
writing), and then flips the published index -- one aligned 8-byte store. A reader
copies the published slot out and keeps the copy only if the slot's sequence counter
is the same even number before and after (a seqlock); otherwise it retries. Nothing
blocks: the writer never waits for readers and readers hold no lock during inference,
because they infer on their private copy.

Invariant: a snapshot a reader returns is byte-for-byte the tensors of exactly one
publication, tagged with that publication's version. This relies on the ordering of
plain stores and loads between separate numpy calls, which x86-64 (TSO) guarantees;
each numpy call is an opaque C call, so the compiler cannot reorder across it either.

The header also carries three words the server writes and the learner reads: the
degradation level (RESTRICTED: train, do not publish; PAUSED/TAKEOVER: stop), the
version live now, and the newest candidate version the server has finished judging
(promoted or rejected). The learner publishes one candidate at a time: nothing more
until that candidate's version is resolved, and then it builds on whatever is live.

Processes started with the ``spawn`` context share the creator's resource tracker, so
attaching does not make a child unlink the block when it exits; only the creator
(``create``) unlinks it, in :meth:`SharedWeights.close`.
"""

from __future__ import annotations

import math
import secrets
import time
from dataclasses import dataclass
from multiprocessing import shared_memory

import numpy as np
import torch

from tether.policy.errors import PolicyError
from tether.policy.manifest import VersionInfo, learner_version_name
from tether.policy.networks import ActorArchitecture, actor_parameter_shapes
from tether.policy.tensors import state_sha256

_MAGIC = 0x7E7E_5EED_0001
# Header fields (int64 indices).
_H_MAGIC, _H_PUBLISHED, _H_DEGRADATION, _H_COUNT, _H_PARAMS = 0, 1, 2, 3, 4
_H_LIVE, _H_RESOLVED = 5, 6  # -1: not written yet
_SLOT_FIELDS = 5  # seq, version, parent, published_ns, flags
_H_SLOTS = 8
_HEADER_INTS = _H_SLOTS + 2 * _SLOT_FIELDS
_HEADER_BYTES = _HEADER_INTS * 8
_NO_PARENT = -1
_SPIN_BEFORE_YIELD = 64


class SharedWeightsError(PolicyError, ValueError):
    """A shared-weights block that does not match the actor it is used with."""


@dataclass(frozen=True)
class WeightsSnapshot:
    """One publication, copied out of shared memory: safe to use while others publish."""

    version: int
    parent: int | None
    published_ns: int  # time.monotonic_ns() at publication (system-wide clock on Linux)
    state: dict[str, torch.Tensor]
    # The writer's configuration asked to skip the promotion gate: UNSAFE on hardware.
    promote_directly: bool = False

    def version_info(self, name: str | None = None) -> VersionInfo:
        """The :class:`VersionInfo` ``PolicyEngine.swap_weights`` expects for this snapshot."""
        return VersionInfo(
            id=self.version,
            name=name if name is not None else learner_version_name(self.version),
            weights_sha256=state_sha256(self.state),
            parent=self.parent,
        )


class SharedWeights:
    """Double-buffered actor weights in shared memory; one writer, any number of readers."""

    def __init__(
        self, shm: shared_memory.SharedMemory, arch: ActorArchitecture, *, owner: bool
    ) -> None:
        self.arch = arch
        self._shm = shm
        self._owner = owner
        self._shapes = actor_parameter_shapes(arch)
        self._n_params = sum(math.prod(s) for s in self._shapes.values())
        need = _HEADER_BYTES + 2 * 4 * self._n_params
        if shm.size < need:
            raise SharedWeightsError(
                f"shared weights block {shm.name!r} holds {shm.size} bytes, expected at least "
                f"{need} for an actor with {self._n_params} parameters; attach with the same "
                "ActorArchitecture the creator used"
            )
        self._header = np.ndarray((_HEADER_INTS,), dtype=np.int64, buffer=shm.buf)
        self._slots = np.ndarray(
            (2, self._n_params), dtype=np.float32, buffer=shm.buf, offset=_HEADER_BYTES
        )
        if owner:
            self._header[:] = 0
            self._header[_H_PUBLISHED] = -1
            self._header[_H_LIVE] = -1
            self._header[_H_RESOLVED] = -1
            self._header[_H_PARAMS] = self._n_params
            self._header[_H_MAGIC] = _MAGIC
        elif self._header[_H_MAGIC] != _MAGIC or self._header[_H_PARAMS] != self._n_params:
            raise SharedWeightsError(
                f"shared weights block {shm.name!r} has magic {int(self._header[_H_MAGIC]):#x} "
                f"and {int(self._header[_H_PARAMS])} parameters, expected {_MAGIC:#x} and "
                f"{self._n_params}; attach to a block made by SharedWeights.create for this actor"
            )

    @classmethod
    def create(cls, arch: ActorArchitecture, *, name: str | None = None) -> SharedWeights:
        """Allocate a new block (the creator unlinks it on :meth:`close`)."""
        n = sum(math.prod(s) for s in actor_parameter_shapes(arch).values())
        shm = shared_memory.SharedMemory(
            name=name or f"tether_w_{secrets.token_hex(6)}",
            create=True,
            size=_HEADER_BYTES + 2 * 4 * n,
        )
        return cls(shm, arch, owner=True)

    @classmethod
    def attach(cls, name: str, arch: ActorArchitecture) -> SharedWeights:
        """Open a block another process created."""
        try:
            shm = shared_memory.SharedMemory(name=name, create=False)
        except FileNotFoundError as exc:
            raise SharedWeightsError(
                f"no shared weights block named {name!r}; the server must create it "
                "(SharedWeights.create) before the learner attaches"
            ) from exc
        return cls(shm, arch, owner=False)

    @property
    def name(self) -> str:
        return self._shm.name

    @property
    def publications(self) -> int:
        """How many publications this block has seen."""
        return int(self._header[_H_COUNT])

    def _field(self, slot: int, field: int) -> int:
        return int(self._header[_H_SLOTS + slot * _SLOT_FIELDS + field])

    def _set_field(self, slot: int, field: int, value: int) -> None:
        self._header[_H_SLOTS + slot * _SLOT_FIELDS + field] = value

    # --- writer -------------------------------------------------------------------------

    def publish(
        self,
        version: int,
        state: dict[str, torch.Tensor],
        *,
        parent: int | None = None,
        promote_directly: bool = False,
    ) -> None:
        """Copy ``state`` into the idle slot, then make it the published one (single writer).

        ``promote_directly`` marks the version as meant to go live without the promotion
        gate; readers decide whether to honour it (unsafe on hardware).
        """
        if version < 0:
            raise SharedWeightsError(f"version must be >= 0, got {version}")
        missing = self._shapes.keys() - state.keys()
        extra = state.keys() - self._shapes.keys()
        if missing or extra:
            raise SharedWeightsError(
                f"actor state does not match the architecture: missing {sorted(missing)}, "
                f"unexpected {sorted(extra)}; publish the state of an Actor({self.arch})"
            )
        published = int(self._header[_H_PUBLISHED])
        slot = 0 if published < 0 else 1 - published
        seq = self._field(slot, 0)
        self._set_field(slot, 0, seq + 1)  # odd: a reader that sees it retries
        buf = self._slots[slot]
        offset = 0
        for key, shape in self._shapes.items():
            tensor = state[key]
            if tuple(tensor.shape) != shape:
                self._set_field(slot, 0, seq + 2)
                raise SharedWeightsError(
                    f"parameter {key!r} has shape {tuple(tensor.shape)}, expected {shape}"
                )
            n = math.prod(shape)
            buf[offset : offset + n] = tensor.detach().reshape(-1).numpy()
            offset += n
        self._set_field(slot, 1, version)
        self._set_field(slot, 2, _NO_PARENT if parent is None else parent)
        self._set_field(slot, 3, time.monotonic_ns())
        self._set_field(slot, 4, int(promote_directly))
        self._set_field(slot, 0, seq + 2)
        self._header[_H_PUBLISHED] = slot
        self._header[_H_COUNT] += 1

    # --- readers ------------------------------------------------------------------------

    def latest_version(self) -> int | None:
        """The published version id, without copying anything (None before the first)."""
        slot = int(self._header[_H_PUBLISHED])
        return None if slot < 0 else self._field(slot, 1)

    def read(self) -> WeightsSnapshot | None:
        """A consistent copy of the published weights, or None if nothing is published yet."""
        spins = 0
        while True:
            slot = int(self._header[_H_PUBLISHED])
            if slot < 0:
                return None
            seq_before = self._field(slot, 0)
            if seq_before % 2 == 0:
                version = self._field(slot, 1)
                parent = self._field(slot, 2)
                published_ns = self._field(slot, 3)
                flags = self._field(slot, 4)
                flat = self._slots[slot].copy()
                if self._field(slot, 0) == seq_before:
                    return WeightsSnapshot(
                        version=version,
                        parent=None if parent == _NO_PARENT else parent,
                        published_ns=published_ns,
                        state=self._unflatten(flat),
                        promote_directly=bool(flags & 1),
                    )
            # The writer lapped us (two publications during one copy): try the new slot.
            spins += 1
            if spins % _SPIN_BEFORE_YIELD == 0:
                time.sleep(0)

    def read_if_newer(self, version: int | None) -> WeightsSnapshot | None:
        """:meth:`read`, but only when the published version differs from ``version``."""
        latest = self.latest_version()
        if latest is None or latest == version:
            return None
        return self.read()

    def _unflatten(self, flat: np.ndarray) -> dict[str, torch.Tensor]:
        whole = torch.from_numpy(flat)
        state: dict[str, torch.Tensor] = {}
        offset = 0
        for key, shape in self._shapes.items():
            n = math.prod(shape)
            state[key] = whole[offset : offset + n].view(shape)
            offset += n
        return state

    # --- degradation level (server writes, learner reads) -------------------------------

    def set_degradation_level(self, level: int) -> None:
        """Record the serving side's degradation level (an int of ``DegradationLevel``)."""
        self._header[_H_DEGRADATION] = int(level)

    def degradation_level(self) -> int:
        return int(self._header[_H_DEGRADATION])

    # --- live and resolved versions (server writes, learner reads) -----------------------

    def set_live_version(self, version: int) -> None:
        """Record the version the server serves as live now (after every promotion/rollback)."""
        if version < 0:
            raise SharedWeightsError(f"live version must be >= 0, got {version}")
        self._header[_H_LIVE] = int(version)

    def live_version(self) -> int | None:
        """The version the server last declared live (None before it wrote one)."""
        v = int(self._header[_H_LIVE])
        return None if v < 0 else v

    def set_resolved_version(self, version: int) -> None:
        """Record that the server finished judging candidate ``version`` (promoted or rejected).

        Monotonic: an older version than the one recorded is ignored, so a late verdict
        on a superseded candidate cannot make the learner wait again.
        """
        if version < 0:
            raise SharedWeightsError(f"resolved version must be >= 0, got {version}")
        if version > int(self._header[_H_RESOLVED]):
            self._header[_H_RESOLVED] = int(version)

    def resolved_version(self) -> int | None:
        """The newest candidate version the server has resolved (None before the first)."""
        v = int(self._header[_H_RESOLVED])
        return None if v < 0 else v

    def pending_version(self) -> int | None:
        """The published version the server has not resolved yet, or None."""
        latest = self.latest_version()
        if latest is None:
            return None
        resolved = self.resolved_version()
        return latest if resolved is None or resolved < latest else None

    def close(self) -> None:
        """Detach; the creator also unlinks the block. Snapshots already read stay valid."""
        del self._header, self._slots
        self._shm.close()
        if self._owner:
            self._shm.unlink()

    def __enter__(self) -> SharedWeights:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
