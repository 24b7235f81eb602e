"""The request path the drop-in protocols share: tensors in, supervised actions out.

The openpi websocket endpoint and the KServe v2 ``GRPCInferenceService`` decode their own
wire formats, then hand observations here; from here on a request goes exactly the way
``tether.v1.PolicyService.GetAction`` and ``Control`` go: validated, its version pin
resolved, admitted, queued in the server's one ``DynamicBatcher`` and supervised in the
``InferencePipeline`` by the supervisor the protocol passes in (one per openpi
connection, one shared by every stateless KServe call). A protocol cannot produce an
action any other way, so invariant 1 of the design holds for it as for ``tether.v1``.

The served policy's signature (:func:`served_signature`) is its named inputs, the state
vector first, and its action horizon: a vector policy has the one input
``observation`` and horizon 1; a chunk policy's inputs and horizon come from its bundle.

Invariant: ``act`` returns exactly one supervised outcome per observation row, in row
order, all computed by one version, or raises the ``ServingError`` / versions error of
this request alone.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import grpc
import numpy as np

from tether.data.clock import ingress_ns
from tether.serving.admission import Admission
from tether.serving.batcher import Batched, DynamicBatcher
from tether.serving.config import ServerConfig
from tether.serving.errors import RequestInvalid, ServingError
from tether.serving.inference import ActionOutcome, ActionQuery
from tether.serving.metrics import ServingMetrics
from tether.serving.served_spec import ServedSpec
from tether.serving.supervision import SessionSupervisor, SupervisorFactory
from tether.serving.validation import TensorSpec, refusal
from tether.versions.holder import ModelSource
from tether.versions.protocols import EngineLike

# The name of the one input of a vector-observation policy, on every protocol.
OBSERVATION_INPUT = "observation"
ACTION_OUTPUT = "action"


class VersionChanged(ServingError):
    """A multi-row request whose rows were served by different versions (retry it)."""

    code = grpc.StatusCode.UNAVAILABLE


@dataclass(frozen=True, slots=True)
class ServedSignature:
    """What a request must carry and what a reply holds, for every protocol."""

    inputs: tuple[TensorSpec, ...]  # the state vector first
    horizon: int  # actions per reply row

    @property
    def state(self) -> TensorSpec:
        return self.inputs[0]

    @property
    def extras(self) -> tuple[TensorSpec, ...]:
        """The named inputs besides the state vector."""
        return self.inputs[1:]

    @property
    def named(self) -> bool:
        """Whether the policy takes more than the one state vector."""
        return len(self.inputs) > 1


def served_signature(models: ModelSource, obs_dim: int) -> ServedSignature:
    """The live engine's inputs and horizon; a vector policy's when the engine declares
    none (engines other than ``PolicyEngine``, or no engine yet).

    Read once when a server starts: a swap keeps the bundle's architecture, so the
    signature holds for every version it serves.
    """
    engine = models.live_engine()
    specs = getattr(engine, "input_specs", None)
    horizon = int(getattr(engine, "horizon", 1))
    if not specs:
        return ServedSignature(
            (TensorSpec(OBSERVATION_INPUT, np.dtype(np.float32), (obs_dim,)),), horizon
        )
    return ServedSignature(
        tuple(TensorSpec(t.name, np.dtype(t.dtype), tuple(t.shape)) for t in specs), horizon
    )


class ActionGateway:
    """Validation, pins, admission and batching for a protocol front end."""

    def __init__(
        self,
        *,
        config: ServerConfig,
        spec: ServedSpec,
        models: ModelSource,
        batcher: DynamicBatcher[ActionQuery, ActionOutcome],
        admission: Admission,
        metrics: ServingMetrics,
        supervisors: SupervisorFactory,
    ) -> None:
        self.config = config
        self.spec = spec
        self.models = models
        self.metrics = metrics
        self.supervisors = supervisors
        self._batcher = batcher
        self._admission = admission
        self._max_abs = config.validation.max_abs_observation
        self.signature = served_signature(models, spec.obs_dim)
        self.inputs = self.signature.inputs
        self.horizon = self.signature.horizon

    @property
    def batcher(self) -> DynamicBatcher[ActionQuery, ActionOutcome]:
        return self._batcher

    def input_named(self, name: str, field: str) -> TensorSpec:
        for tensor in self.inputs:
            if tensor.name == name:
                return tensor
        known = ", ".join(repr(t.name) for t in self.inputs)
        raise RequestInvalid(f"{field} is {name!r}, expected one of the policy's inputs: {known}")

    def check_rows(self, array: np.ndarray, tensor: TensorSpec, field: str) -> np.ndarray:
        """``array`` (rows of ``tensor``) as a contiguous ``(N, *shape)`` batch of the
        tensor's dtype, or the refusal.

        Checks dtype, shape and, for a float input, finiteness and the magnitude bound
        (``validation.max_abs_observation``), naming the first offending entry.
        """
        if array.dtype != tensor.dtype:
            raise RequestInvalid(
                f"{field} has dtype {array.dtype}, expected {tensor.dtype} "
                f"(input {tensor.name!r}, see the model metadata)"
            )
        if array.ndim != len(tensor.shape) + 1 or tuple(array.shape[1:]) != tensor.shape:
            expected = ", ".join(["N", *(str(d) for d in tensor.shape)])
            raise RequestInvalid(
                f"{field} has shape {list(array.shape)}, expected [{expected}] "
                f"(input {tensor.name!r}: one row per request item)"
            )
        rows = array.shape[0]
        limit = self.config.batcher.max_batch_size
        if not 1 <= rows <= limit:
            raise RequestInvalid(
                f"{field} carries {rows} rows, expected between 1 and {limit} "
                "(batcher.max_batch_size)"
            )
        values = np.ascontiguousarray(array, dtype=tensor.dtype)
        if values.dtype.kind == "f" and values.size and not np.abs(values).max() <= self._max_abs:
            raise refusal(values, field, self._max_abs)
        return values

    def step_deadline(self) -> float | None:
        """A control step's deadline from now, as ``Control`` sets it."""
        return self.config.step_deadline(self.spec.control_period_s, time.monotonic())

    def engine_for(self, pin: int | None) -> EngineLike:
        """The engine that serves ``pin`` (None: the live one), or the versions error."""
        return self.models.engine_for(pin)

    async def act(
        self,
        observations: np.ndarray,
        *,
        client: str,
        supervisor: SessionSupervisor,
        previous_action: np.ndarray | None = None,
        pin: int | None = None,
        deterministic: bool = True,
        deadline: float | None = None,
        inputs: Mapping[str, np.ndarray] | None = None,
    ) -> list[Batched[ActionOutcome]]:
        """Supervised outcomes for the validated ``(N, obs_dim)`` rows (see the invariant).

        ``inputs`` holds every named input's validated ``(N, *shape)`` rows (the state
        input the same as ``observations``) for a policy with named inputs.

        Rows go to the batcher as separate queries, so they share forward passes with
        every other client's; a row's previous action is the one before it in the
        request (``previous_action`` for the first), as the supervisor's rate limits need.
        """
        self.models.engine_for(pin)  # refuse unservable pins before queueing
        ingress = ingress_ns()
        n = observations.shape[0]
        for _ in range(n):
            self._admission.admit(client)
        named: list[dict[str, np.ndarray] | None] = [None] * n
        if inputs is not None:
            named = [{k: v[i] for k, v in inputs.items()} for i in range(n)]
        if n == 1:
            query = ActionQuery(
                observations[0],
                deterministic,
                previous_action,
                supervisor,
                ingress,
                pin,
                inputs=named[0],
            )
            return [await self._batcher.submit(query, deadline)]
        # Several rows from one stateless caller: each is its own query, all in flight
        # together, each supervised with no previous action (they are not a sequence).
        queries = [
            ActionQuery(row, deterministic, None, supervisor, ingress, pin, inputs=named[i])
            for i, row in enumerate(observations)
        ]
        results = await _all(self._batcher, queries, deadline)
        versions = {b.value.version.id for b in results}
        if len(versions) > 1:
            # A reply names one version (design invariant 2); a swap landed between the
            # batches this request's rows were computed in.
            raise VersionChanged(
                f"the served version changed while this request's rows were computed "
                f"(versions {sorted(versions)}); retry, or pin model_version"
            )
        return results


async def _all(
    batcher: DynamicBatcher[ActionQuery, ActionOutcome],
    queries: Sequence[ActionQuery],
    deadline: float | None,
) -> list[Batched[ActionOutcome]]:
    tasks = [asyncio.ensure_future(batcher.submit(q, deadline)) for q in queries]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        raise
