"""The openpi websocket protocol on its own port, for ``openpi_client`` users.

``openpi_client.websocket_client_policy.WebsocketClientPolicy`` connects, reads one
msgpack metadata frame, then sends msgpack-numpy observation dicts and reads one reply
per observation. This endpoint speaks that protocol unchanged:

- on connect: the metadata frame (policy name and version, action horizon and
  dimension, the inputs and the observation-key mapping);
- per observation: ``{"actions": (H, D) float32, "policy_timing": {...},
  "server_timing": {...}, "tether": {...}}`` where ``actions`` are the supervised actions
  (``H`` the policy's action horizon, 1 for a vector policy, every step supervised in
  order), ``server_timing`` holds openpi's ``infer_ms`` and
  ``prev_total_ms`` beside tether's queue, safety and total times, and ``tether`` the
  version, the proposed actions, each step's verdict and the degradation level;
- an error: a text frame with the message, then close code 1011, which the client
  raises as ``RuntimeError``; an oversized message is closed 1009 by the websocket layer;
- ``GET /healthz``: 200 while a verified policy is loaded, 503 otherwise;
- ``Authorization: Api-Key <token>`` is required when the server has a bearer token
  (``security.bearer_token_file``), refused with HTTP 401 otherwise; health stays open.

Observation dicts may nest (``{"images": {"cam": ...}}`` reads as key ``images/cam``);
``openpi.observation_keys`` maps keys to the policy's inputs, ``openpi.ignored_keys``
lists keys accepted and unused (``prompt``), and any other key is refused, so a typo
never goes unnoticed. Arrays are decoded from their bytes with an allowlist of dtypes:
nothing from the network is unpickled (msgpack-numpy's pickle fallback is not used).

Unlike openpi's own server, which runs inference inside its handler and so serves one
client at a time, every connection's observations go through the server's batcher,
admission and supervisor (``tether.serving.gateway``): concurrent robots share forward
passes, and each connection has its own supervisor whose previous action is the last
step it sent on that connection (the last step of the last chunk: openpi's
``ActionChunkBroker`` executes a chunk to its end before it asks again).

Invariant: every ``actions`` array sent is the supervisor's output; a connection's bad
message closes that connection only.
"""

from __future__ import annotations

import hmac
import http
import logging
import ssl
import time
from collections.abc import Mapping
from typing import Any

import msgpack
import numpy as np
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode
from websockets.http11 import Request, Response

from tether.safety.verdict import check_names
from tether.serving.errors import REQUEST_ERRORS, RequestInvalid, ServerSetupError, status_code
from tether.serving.gateway import ActionGateway
from tether.serving.security import bearer_token
from tether.serving.validation import TensorSpec

log = logging.getLogger(__name__)

HEALTH_PATH = "/healthz"
_CLOSE_REASON_BYTES = 120  # a close frame's reason is at most 123 bytes

# dtypes an observation array may arrive in; anything else (objects, voids) is refused.
_FLOATS = frozenset({"<f2", "<f4", "<f8"})
_DTYPES = _FLOATS | {"|u1", "|i1", "<u2", "<i2", "<u4", "<i4", "<u8", "<i8", "|b1"}


def unpack_observation(data: bytes, max_depth: int = 8) -> dict[str, Any]:
    """A msgpack-numpy message as a flat ``{key/path: value}`` dict, or ``RequestInvalid``."""
    try:
        decoded = msgpack.unpackb(data, object_hook=_decode_array, raw=False)
    except RequestInvalid:
        raise
    except (ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError) as exc:
        raise RequestInvalid(
            f"the observation is not a msgpack-numpy message ({exc}); send what "
            "openpi_client.msgpack_numpy.packb produces"
        ) from None
    if not isinstance(decoded, dict):
        raise RequestInvalid(
            f"the observation is a {type(decoded).__name__}, expected a dict of arrays"
        )
    flat: dict[str, Any] = {}
    _flatten(decoded, "", flat, max_depth)
    return flat


def _flatten(node: Mapping[Any, Any], prefix: str, out: dict[str, Any], depth: int) -> None:
    if depth <= 0:
        raise RequestInvalid(f"the observation nests deeper than allowed at {prefix!r}")
    for key, value in node.items():
        if not isinstance(key, str):
            raise RequestInvalid(f"observation key {key!r} is not a string")
        path = f"{prefix}/{key}" if prefix else key
        if isinstance(value, dict):
            _flatten(value, path, out, depth - 1)
        else:
            out[path] = value


def _decode_array(obj: dict[Any, Any]) -> Any:
    if b"__ndarray__" in obj:
        dtype, data, shape = obj.get(b"dtype"), obj.get(b"data"), obj.get(b"shape")
        if not isinstance(dtype, str) or dtype not in _DTYPES:
            raise RequestInvalid(
                f"an observation array has dtype {dtype!r}, expected a numeric dtype "
                "(float32 for state, uint8 for images)"
            )
        if not isinstance(data, bytes) or not isinstance(shape, list | tuple):
            raise RequestInvalid("an observation array lacks its data bytes or its shape")
        dims = tuple(shape)
        if not all(isinstance(d, int) and d >= 0 for d in dims):
            raise RequestInvalid(f"an observation array has shape {list(dims)}")
        np_dtype = np.dtype(dtype)
        count = int(np.prod(dims, dtype=np.int64)) if dims else 1
        if count * np_dtype.itemsize != len(data):
            raise RequestInvalid(
                f"an observation array of shape {list(dims)} and dtype {dtype} holds "
                f"{len(data)} bytes, expected {count * np_dtype.itemsize}"
            )
        return np.frombuffer(data, dtype=np_dtype, count=count).reshape(dims)
    if b"__npgeneric__" in obj:
        dtype = obj.get(b"dtype")
        if not isinstance(dtype, str) or dtype not in _DTYPES:
            raise RequestInvalid(f"an observation scalar has dtype {dtype!r}")
        return np.asarray(obj.get(b"data"), dtype=np.dtype(dtype))
    return obj


def pack(message: Mapping[str, Any]) -> bytes:
    """``message`` in openpi's msgpack-numpy layout (arrays as ``__ndarray__`` maps)."""
    packed: bytes = msgpack.packb(message, default=_encode_array, use_bin_type=True)
    return packed


def _encode_array(obj: Any) -> Any:
    if isinstance(obj, np.ndarray):
        return {
            b"__ndarray__": True,
            b"data": obj.tobytes(),
            b"dtype": obj.dtype.str,
            b"shape": obj.shape,
        }
    if isinstance(obj, np.generic):
        return {b"__npgeneric__": True, b"data": obj.item(), b"dtype": obj.dtype.str}
    raise TypeError(f"cannot pack {type(obj).__name__}")


class OpenpiEndpoint:
    """The websocket server; ``await start()``, ``await close()``."""

    def __init__(self, gateway: ActionGateway) -> None:
        self._gateway = gateway
        self._config = gateway.config.openpi
        self._server: Server | None = None
        self._token: str | None = None
        self.port = 0
        self._mapping = self._check_mapping()

    def _check_mapping(self) -> dict[str, TensorSpec]:
        names = {t.name: t for t in self._gateway.inputs}
        mapping: dict[str, TensorSpec] = {}
        for key, name in self._config.observation_keys.items():
            if name not in names:
                raise ServerSetupError(
                    f"openpi.observation_keys maps {key!r} to {name!r}, which is not an "
                    f"input of the served policy; its inputs are {sorted(names)}"
                )
            mapping[key] = names[name]
        missing = set(names) - {t.name for t in mapping.values()}
        if missing:
            raise ServerSetupError(
                f"openpi.observation_keys feeds no key to the policy input(s) "
                f"{sorted(missing)}; map an openpi observation key to each"
            )
        return mapping

    async def start(self) -> None:
        cfg = self._config
        security = self._gateway.config.security
        self._token = bearer_token(security)
        context = None
        if security.tls_cert_file is not None and security.tls_key_file is not None:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(security.tls_cert_file, security.tls_key_file)
        try:
            self._server = await serve(
                self._handle,
                cfg.host,
                cfg.port if cfg.port is not None else 0,
                process_request=self._process_request,
                compression=None,
                max_size=cfg.max_message_bytes,
                ssl=context,
            )
        except OSError as exc:
            raise ServerSetupError(
                f"cannot bind the openpi websocket server to {cfg.host}:{cfg.port}: {exc}; "
                "choose another --openpi-port"
            ) from exc
        self.port = int(next(iter(self._server.sockets)).getsockname()[1])

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    # ------------------------------------------------------------------ HTTP side

    def _process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        if request.path == HEALTH_PATH:
            if self._gateway.models.live_engine() is None:
                return connection.respond(http.HTTPStatus.SERVICE_UNAVAILABLE, "no policy\n")
            return connection.respond(http.HTTPStatus.OK, "OK\n")
        if self._token is not None and not _api_key_valid(request.headers, self._token):
            return connection.respond(
                http.HTTPStatus.UNAUTHORIZED,
                "unauthenticated: send 'Authorization: Api-Key <token>' "
                "(WebsocketClientPolicy(api_key=...))\n",
            )
        return None

    # ------------------------------------------------------------------ websocket side

    def metadata(self) -> dict[str, Any]:
        """The frame sent on connect."""
        live = self._gateway.models.live_engine()
        spec = self._gateway.spec
        return {
            "server": "tether",
            "policy_name": "" if live is None else live.version.name,
            "policy_version": -1 if live is None else live.version.id,
            "action_horizon": self._gateway.horizon,
            "action_dim": spec.act_dim,
            "action_names": list(spec.action_names),
            "inputs": {
                t.name: {"dtype": str(t.dtype), "shape": list(t.shape)}
                for t in self._gateway.inputs
            },
            "observation_keys": dict(self._config.observation_keys),
        }

    async def _handle(self, ws: ServerConnection) -> None:
        gateway = self._gateway
        client = f"openpi:{ws.remote_address}"
        supervisor = gateway.supervisors(client)  # each connection is a robot of its own
        previous: np.ndarray | None = None
        prev_total_ms: float | None = None
        gateway.batcher.stream_opened()
        try:
            await ws.send(pack(self.metadata()))
            while True:
                try:
                    data = await ws.recv()
                except ConnectionClosed:
                    return
                arrival = time.perf_counter_ns()
                gateway.metrics.in_flight.inc()
                version = "none"
                try:
                    if isinstance(data, str):
                        raise RequestInvalid(
                            "the observation arrived as a text frame, expected a binary "
                            "msgpack-numpy message"
                        )
                    rows, named = self._inputs(unpack_observation(data))
                    batched = await gateway.act(
                        rows,
                        inputs=named,
                        client=client,
                        supervisor=supervisor,
                        previous_action=previous,
                        deterministic=self._config.deterministic,
                        deadline=gateway.step_deadline(),
                    )
                except REQUEST_ERRORS as exc:
                    code = status_code(exc)
                    self._finish(code.name, version, arrival)
                    await _refuse(ws, f"{code.name}: {exc}")
                    return
                outcome = batched[0].value
                version = str(outcome.version.id)
                previous = outcome.actions[-1]
                total_ns = time.perf_counter_ns() - arrival
                reply = _reply(batched[0], total_ns, prev_total_ms)
                try:
                    await ws.send(pack(reply))
                except ConnectionClosed:
                    self._finish("CANCELLED", version, arrival)
                    return
                self._finish("OK", version, arrival)
                prev_total_ms = (time.perf_counter_ns() - arrival) / 1e6
        finally:
            gateway.batcher.stream_closed()

    def _finish(self, status: str, version: str, arrival_ns: int) -> None:
        metrics = self._gateway.metrics
        metrics.in_flight.dec()
        metrics.request("openpi", status, version, (time.perf_counter_ns() - arrival_ns) / 1e9)

    def _inputs(
        self, observation: dict[str, Any]
    ) -> tuple[np.ndarray, dict[str, np.ndarray] | None]:
        """The state rows and, for a policy with named inputs, every input's rows, from
        one decoded observation (see the module docstring)."""
        ignored = set(self._config.ignored_keys)
        unknown = sorted(k for k in observation if k not in self._mapping and k not in ignored)
        if unknown:
            raise RequestInvalid(
                f"observation has unexpected key(s) {unknown}; expected "
                f"{sorted(self._mapping)} (openpi.observation_keys), and "
                f"{sorted(ignored)} are accepted and ignored (openpi.ignored_keys)"
            )
        arrays: dict[str, np.ndarray] = {}
        for key, tensor in self._mapping.items():
            if key not in observation:
                raise RequestInvalid(
                    f"observation has no key {key!r} (openpi.observation_keys maps it to "
                    f"input {tensor.name!r}); found {sorted(observation)}"
                )
            value = observation[key]
            if not isinstance(value, np.ndarray):
                raise RequestInvalid(
                    f"observation[{key!r}] is a {type(value).__name__}, expected a numpy "
                    f"array of shape {list(tensor.shape)}"
                )
            if tensor.dtype.kind == "f" and value.dtype.str in _FLOATS:
                value = value.astype(tensor.dtype, copy=False)
            arrays[tensor.name] = self._gateway.check_rows(
                value[None], tensor, f"observation[{key!r}]"
            )
        signature = self._gateway.signature
        state = arrays[signature.state.name]
        return state, (arrays if signature.named else None)


def _api_key_valid(headers: Headers, token: str) -> bool:
    sent = headers.get("Authorization")
    return sent is not None and hmac.compare_digest(sent.encode(), f"Api-Key {token}".encode())


async def _refuse(ws: ServerConnection, message: str) -> None:
    """openpi's error report: the message as a text frame, then close 1011."""
    try:
        await ws.send(message)
        reason = message.encode()[:_CLOSE_REASON_BYTES].decode(errors="ignore")
        await ws.close(CloseCode.INTERNAL_ERROR, reason)
    except ConnectionClosed:
        pass


def _reply(batched: Any, total_ns: int, prev_total_ms: float | None) -> dict[str, Any]:
    outcome = batched.value
    actions = np.ascontiguousarray(outcome.actions, dtype=np.float32)
    proposed = np.ascontiguousarray(outcome.proposed_actions, dtype=np.float32)
    infer_ms = batched.batch_ns / 1e6
    server_timing: dict[str, float] = {
        "infer_ms": infer_ms,
        "queue_ms": max(0, batched.queue_ns) / 1e6,
        "safety_ms": outcome.safety_ns / 1e6,
        "total_ms": total_ns / 1e6,
        "batch_size": float(batched.batch_size),
    }
    if prev_total_ms is not None:
        server_timing["prev_total_ms"] = prev_total_ms
    return {
        "actions": actions,
        "policy_timing": {"infer_ms": infer_ms},
        "server_timing": server_timing,
        "tether": {
            "policy_version": outcome.version.id,
            "policy_name": outcome.version.name,
            "proposed_actions": proposed,
            "safety": [  # one per step of ``actions``
                {
                    "source": verdict.source.value,
                    "checks": list(check_names(int(verdict.checks))),
                    "correction_norm": float(verdict.correction_norm),
                }
                for verdict in outcome.verdicts
            ],
            "degradation": outcome.degradation.name,
        },
    }
