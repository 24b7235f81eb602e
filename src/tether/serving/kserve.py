"""KServe v2 / Triton ``inference.GRPCInferenceService`` on tether's gRPC port.

``tritonclient.grpc`` and perf_analyzer call a tether server as they call Triton:
ServerLive, ServerReady, ModelReady, ServerMetadata, ModelMetadata and ModelInfer. Any
other method of Triton's service (repository, statistics, streaming) is not in the
served proto and gRPC answers it UNIMPLEMENTED.

A ModelInfer request names the model (``kserve.model_name``, default ``tether``, or the
live version's name as Describe reports it) and optionally a version (a version id
selects it as a pin, empty means the live one); its input tensors are decoded from
``raw_input_contents`` (little-endian, as tritonclient sends them) or from ``contents``,
checked by name, datatype and shape, and each row goes through the same batcher,
admission and supervisor as ``GetAction`` (``tether.serving.gateway``). The reply
carries the supervised action (output ``action``), what the policy proposed
(``proposed_action``) and the supervisor's check bits (``safety_checks``) in
``raw_output_contents``, with the request's ``id`` echoed. A policy with named inputs
takes one input tensor per input (FP32 state, UINT8 images, each ``[N, *shape]``); a
policy with an action horizon ``H > 1`` answers ``action`` and ``proposed_action`` of
shape ``[N, H, D]`` and ``safety_checks`` ``[N, H]``, every step supervised in order and the version that computed
it in ``model_version`` (and the degradation level it was supervised at in the
``degradation`` parameter).

Invariant: every ``action`` in a reply is a supervisor's safe action; a bad request is
answered INVALID_ARGUMENT (or the status tether.v1 gives the same failure) naming the
tensor, what was expected and what was found, and touches nothing else.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version as package_version
from typing import Any, TypeAlias

import grpc
import numpy as np

from tether.kserve import grpc_predict_v2_pb2 as kpb, grpc_predict_v2_pb2_grpc as kpb_grpc
from tether.serving.decoding import Undecodable, refuse, tolerant
from tether.serving.errors import REQUEST_ERRORS, RequestInvalid, status_code
from tether.serving.gateway import ACTION_OUTPUT, ActionGateway
from tether.serving.validation import TensorSpec
from tether.versions.protocols import EngineLike

Context: TypeAlias = "grpc.aio.ServicerContext[Any, Any]"

INFERENCE_SERVICE = kpb.DESCRIPTOR.services_by_name["GRPCInferenceService"].full_name
PLATFORM = "tether"

# KServe v2 datatype names and the numpy dtypes they travel as (little-endian).
DATATYPES: dict[str, np.dtype[np.generic]] = {
    "FP32": np.dtype("<f4"),
    "UINT8": np.dtype("u1"),
    "UINT32": np.dtype("<u4"),
}
_NAMES = {dtype: name for name, dtype in DATATYPES.items()}

STATELESS_ROBOT = "(ModelInfer)"  # the degradation machine's name for KServe callers
PROPOSED_OUTPUT = "proposed_action"
CHECKS_OUTPUT = "safety_checks"
OUTPUTS = (ACTION_OUTPUT, PROPOSED_OUTPUT, CHECKS_OUTPUT)


_Param = kpb.InferParameter


class ModelNotFound(RequestInvalid):
    """A request for a model this server does not serve."""

    code = grpc.StatusCode.NOT_FOUND


@dataclass(frozen=True, slots=True)
class _Target:
    engine: EngineLike
    pin: int | None


def _server_version() -> str:
    try:
        return package_version("tether")
    except PackageNotFoundError:  # a source tree that was never installed
        return "0"


class InferenceService(kpb_grpc.GRPCInferenceServiceServicer):
    """The KServe v2 handlers; see the module docstring."""

    def __init__(self, gateway: ActionGateway) -> None:
        self._gateway = gateway
        self._model_name = gateway.config.kserve.model_name
        # Stateless, like GetAction: its callers share one supervisor.
        self._supervisor = gateway.supervisors(STATELESS_ROBOT)
        self._server_version = _server_version()
        self._described: dict[
            tuple[int, tuple[str, ...]], list[kpb.ModelInferResponse.InferOutputTensor]
        ] = {}

    # ------------------------------------------------------------------ readiness

    async def ServerLive(
        self, request: kpb.ServerLiveRequest, context: Context
    ) -> kpb.ServerLiveResponse:
        return kpb.ServerLiveResponse(live=True)

    async def ServerReady(
        self, request: kpb.ServerReadyRequest, context: Context
    ) -> kpb.ServerReadyResponse:
        return kpb.ServerReadyResponse(ready=self._gateway.models.live_engine() is not None)

    async def ModelReady(
        self, request: kpb.ModelReadyRequest, context: Context
    ) -> kpb.ModelReadyResponse:
        try:
            self._target(request.name, request.version)
        except REQUEST_ERRORS:
            return kpb.ModelReadyResponse(ready=False)
        return kpb.ModelReadyResponse(ready=True)

    async def ServerMetadata(
        self, request: kpb.ServerMetadataRequest, context: Context
    ) -> kpb.ServerMetadataResponse:
        return kpb.ServerMetadataResponse(name="tether", version=self._server_version)

    async def ModelMetadata(
        self, request: kpb.ModelMetadataRequest, context: Context
    ) -> kpb.ModelMetadataResponse:
        try:
            target = self._target(request.name, request.version)
        except REQUEST_ERRORS as exc:
            await context.abort(status_code(exc), str(exc))
        act_dim = self._gateway.spec.act_dim
        steps = [] if self._gateway.horizon == 1 else [self._gateway.horizon]
        reply = kpb.ModelMetadataResponse(
            name=request.name,
            versions=[str(target.engine.version.id)],
            platform=PLATFORM,
        )
        for tensor in self._gateway.inputs:
            reply.inputs.add(
                name=tensor.name, datatype=_NAMES[tensor.dtype], shape=[-1, *tensor.shape]
            )
        reply.outputs.add(name=ACTION_OUTPUT, datatype="FP32", shape=[-1, *steps, act_dim])
        reply.outputs.add(name=PROPOSED_OUTPUT, datatype="FP32", shape=[-1, *steps, act_dim])
        reply.outputs.add(name=CHECKS_OUTPUT, datatype="UINT32", shape=[-1, *steps])
        return reply

    # ------------------------------------------------------------------ ModelInfer

    async def ModelInfer(
        self, request: kpb.ModelInferRequest, context: Context
    ) -> kpb.ModelInferResponse:
        arrival = time.perf_counter_ns()
        metrics = self._gateway.metrics
        metrics.in_flight.inc()
        version = "none"
        try:
            target = self._target(request.model_name, request.model_version)
            observations, named = self._observations(request)
            wanted = _requested_outputs(request)
            params = request.parameters
            deterministic = (
                params["deterministic"].bool_param if "deterministic" in params else True
            )
            remaining = context.time_remaining()
            batched = await self._gateway.act(
                observations,
                # The connection, not an id it claims (as GetAction): a claimed id could
                # spend another robot's bucket.
                client=context.peer(),
                supervisor=self._supervisor,
                pin=target.pin,
                inputs=named,
                deterministic=deterministic,
                deadline=None if remaining is None else time.monotonic() + remaining,
            )
        except REQUEST_ERRORS as exc:
            code = status_code(exc)
            self._finish(code.name, version, arrival)
            await context.abort(code, str(exc))
        except asyncio.CancelledError:
            self._finish("CANCELLED", version, arrival)
            raise
        outcomes = [b.value for b in batched]
        served = outcomes[0].version
        version = str(served.id)
        rows = len(outcomes)
        chunked = self._gateway.horizon > 1
        contents: list[bytes] = []
        for name in wanted:
            if name == ACTION_OUTPUT:
                column = np.stack([o.actions if chunked else o.action for o in outcomes])
            elif name == PROPOSED_OUTPUT:
                column = np.stack(
                    [o.proposed_actions if chunked else o.proposed_action for o in outcomes]
                )
            elif chunked:
                column = np.array(
                    [[int(v.checks) for v in o.verdicts] for o in outcomes], dtype=np.uint32
                )
            else:
                column = np.fromiter((int(o.verdict.checks) for o in outcomes), np.uint32, rows)
            contents.append(np.ascontiguousarray(column, dtype=_output_dtype(name)).tobytes())
        # Built in one constructor call from cached tensor descriptions: filling the reply
        # field by field cost ~70 µs a request (measured), five times this.
        reply = kpb.ModelInferResponse(
            model_name=request.model_name,
            model_version=version,
            id=request.id,
            parameters={"degradation": _Param(string_param=outcomes[0].degradation.name)},
            outputs=self._output_tensors(rows, wanted),
            raw_output_contents=contents,
        )
        self._finish("OK", version, arrival)
        return reply

    def _output_tensors(
        self, rows: int, names: tuple[str, ...]
    ) -> list[kpb.ModelInferResponse.InferOutputTensor]:
        """The descriptions of the outputs ``names`` for ``rows`` rows (cached)."""
        key = (rows, names)
        cached = self._described.get(key)
        if cached is None:
            act_dim = self._gateway.spec.act_dim
            steps = [] if self._gateway.horizon == 1 else [self._gateway.horizon]
            cached = [
                kpb.ModelInferResponse.InferOutputTensor(
                    name=name,
                    datatype=_NAMES[_output_dtype(name)],
                    shape=[rows, *steps] if name == CHECKS_OUTPUT else [rows, *steps, act_dim],
                )
                for name in names
            ]
            if len(self._described) < 4096:
                self._described[key] = cached
        return cached

    def _finish(self, status: str, version: str, arrival_ns: int) -> None:
        metrics = self._gateway.metrics
        metrics.in_flight.dec()
        seconds = (time.perf_counter_ns() - arrival_ns) / 1e9
        metrics.request("ModelInfer", status, version, seconds)

    def _target(self, name: str, version: str) -> _Target:
        """The engine a request for model ``name``, version ``version`` is served by."""
        live = self._gateway.models.live_engine()
        names = {self._model_name} | ({live.version.name} if live is not None else set())
        if name not in names:
            served = ", ".join(repr(n) for n in sorted(names))
            raise ModelNotFound(
                f"Request for unknown model: {name!r} is not found; this server serves "
                f"{served} (kserve.model_name, or the live version's name)"
            )
        pin: int | None = None
        if version:
            if not version.isdigit():
                raise RequestInvalid(
                    f"model_version is {version!r}, expected a version id (digits) or empty "
                    "for the live version"
                )
            pin = int(version)
        return _Target(self._gateway.engine_for(pin), pin)

    def _observations(
        self, request: kpb.ModelInferRequest
    ) -> tuple[np.ndarray, dict[str, np.ndarray] | None]:
        """The request's state rows and, for a policy with named inputs, every input's
        validated rows by name (see ``ActionGateway``)."""
        inputs = request.inputs
        expected = self._gateway.inputs
        if len(inputs) != len(expected):
            names = ", ".join(repr(t.name) for t in expected)
            raise RequestInvalid(
                f"ModelInferRequest has {len(inputs)} input tensors, expected "
                f"{len(expected)} ({names})"
            )
        raw = request.raw_input_contents
        if raw and len(raw) != len(inputs):
            raise RequestInvalid(
                f"raw_input_contents has {len(raw)} entries for {len(inputs)} inputs; send "
                "one entry per input, or none and the values in contents"
            )
        arrays: dict[str, np.ndarray] = {}
        for i, tensor in enumerate(inputs):
            field = f"inputs[{tensor.name!r}]"
            spec = self._gateway.input_named(tensor.name, f"inputs[{i}].name")
            if spec.name in arrays:
                raise RequestInvalid(f"{field} appears twice; send each input once")
            array = _decode(tensor, raw[i] if raw else None, spec, field)
            arrays[spec.name] = self._gateway.check_rows(array, spec, field)
        rows = {a.shape[0] for a in arrays.values()}
        if len(rows) > 1:
            raise RequestInvalid(
                f"the input tensors carry different row counts {sorted(rows)}; every input "
                "needs one row per request item"
            )
        signature = self._gateway.signature
        state = arrays[signature.state.name]
        return state, (arrays if signature.named else None)


def _decode(
    tensor: kpb.ModelInferRequest.InferInputTensor,
    raw: bytes | None,
    spec: TensorSpec,
    field: str,
) -> np.ndarray:
    """The tensor's values in its declared datatype and shape, or the refusal."""
    dtype = DATATYPES.get(tensor.datatype)
    if dtype is None or dtype != spec.dtype:
        raise RequestInvalid(
            f"{field} has datatype {tensor.datatype!r}, expected {_NAMES[spec.dtype]!r}"
        )
    shape = tuple(int(d) for d in tensor.shape)
    if any(d < 0 for d in shape):
        raise RequestInvalid(f"{field} has shape {list(shape)}, expected non-negative sizes")
    count = int(np.prod(shape, dtype=np.int64)) if shape else 1
    if raw is not None:
        if len(raw) != count * dtype.itemsize:
            raise RequestInvalid(
                f"{field} has {len(raw)} bytes in raw_input_contents, expected "
                f"{count * dtype.itemsize} for shape {list(shape)} of {tensor.datatype}"
            )
        return np.frombuffer(raw, dtype=dtype).reshape(shape)
    contents = tensor.contents
    values = contents.fp32_contents if dtype.kind == "f" else contents.uint_contents
    if len(values) != count:
        kind = "fp32_contents" if dtype.kind == "f" else "uint_contents"
        raise RequestInvalid(
            f"{field} has {len(values)} values in contents.{kind}, expected {count} for "
            f"shape {list(shape)}"
        )
    top = (1 << (8 * dtype.itemsize)) - 1
    if dtype.kind == "u" and len(values) and max(values) > top:
        raise RequestInvalid(f"{field} has a value above {top}, the largest {tensor.datatype}")
    return np.fromiter(values, dtype, count).reshape(shape)


def _requested_outputs(request: kpb.ModelInferRequest) -> tuple[str, ...]:
    if not request.outputs:
        return OUTPUTS
    names = tuple(o.name for o in request.outputs)
    for name in names:
        if name not in OUTPUTS:
            known = ", ".join(repr(n) for n in OUTPUTS)
            raise RequestInvalid(f"outputs names {name!r}, expected one of {known}")
    return names


def _output_dtype(name: str) -> np.dtype[np.generic]:
    return DATATYPES["UINT32"] if name == CHECKS_OUTPUT else DATATYPES["FP32"]


_METHODS = (
    ("ServerLive", kpb.ServerLiveRequest, kpb.ServerLiveResponse),
    ("ServerReady", kpb.ServerReadyRequest, kpb.ServerReadyResponse),
    ("ModelReady", kpb.ModelReadyRequest, kpb.ModelReadyResponse),
    ("ServerMetadata", kpb.ServerMetadataRequest, kpb.ServerMetadataResponse),
    ("ModelMetadata", kpb.ModelMetadataRequest, kpb.ModelMetadataResponse),
    ("ModelInfer", kpb.ModelInferRequest, kpb.ModelInferResponse),
)


def _checked(method: Callable[[Any, Context], Awaitable[Any]]) -> Any:
    """``method`` behind a refusal of undecodable bytes (INVALID_ARGUMENT, as tether.v1)."""

    async def handle(request: Any, context: Context) -> Any:
        if isinstance(request, Undecodable):
            await refuse(context, request)
            raise AssertionError("unreachable: abort raises")
        return await method(request, context)

    return handle


def add_inference_service(gateway: ActionGateway, server: grpc.aio.Server) -> InferenceService:
    """Register the KServe v2 service on ``server``; returns the servicer.

    Request bytes that do not parse are refused with INVALID_ARGUMENT by the handler
    (``tether.serving.decoding``), not answered UNKNOWN with a traceback in the log.
    """
    service = InferenceService(gateway)
    handlers = {
        name: grpc.unary_unary_rpc_method_handler(
            _checked(getattr(service, name)),
            request_deserializer=tolerant(request),
            response_serializer=response.SerializeToString,
        )
        for name, request, response in _METHODS
    }
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(INFERENCE_SERVICE, handlers),)
    )
    server.add_registered_method_handlers(INFERENCE_SERVICE, handlers)  # type: ignore[attr-defined]
    return service
