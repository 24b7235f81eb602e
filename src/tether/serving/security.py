"""TLS credentials and bearer-token authentication for the gRPC server.

Both are read and checked once at startup: a missing file, an unreadable key, a
certificate that does not match its key, or an empty token file stops the server with a
``ServerSetupError`` naming the path, rather than failing later on the first handshake.
Health checks stay unauthenticated so probes (Kubernetes, grpc_health_probe) work
without secrets; every other method needs ``authorization: Bearer <token>``.
"""

from __future__ import annotations

import hmac
import ipaddress
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeAlias

import grpc

from tether.serving.config import SecurityConfig
from tether.serving.errors import ServerSetupError

# Methods anyone may call: liveness/readiness probes carry no credentials.
Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"

OPEN_METHOD_PREFIXES = ("/grpc.health.v1.Health/",)


def _read(path: Path, what: str) -> bytes:
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise ServerSetupError(
            f"{what} {path} does not exist; fix security.{what} or remove it to run without"
        ) from None
    except OSError as exc:
        raise ServerSetupError(f"{what} {path} cannot be read: {exc}") from exc
    if not data.strip():
        raise ServerSetupError(f"{what} {path} is empty")
    return data


def server_credentials(config: SecurityConfig) -> grpc.ServerCredentials | None:
    """TLS credentials from the configured PEM files, or None for plaintext."""
    cert_path, key_path = config.tls_cert_file, config.tls_key_file
    if cert_path is None and key_path is None:
        return None
    if cert_path is None or key_path is None:
        missing = "tls_cert_file" if cert_path is None else "tls_key_file"
        raise ServerSetupError(
            f"TLS needs both security.tls_cert_file and security.tls_key_file; {missing} is not set"
        )
    cert = _read(cert_path, "tls_cert_file")
    key = _read(key_path, "tls_key_file")
    try:
        # grpc accepts any bytes here and fails only at the first handshake; the ssl
        # module parses both and checks that the key belongs to the certificate.
        ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert_path, key_path)
    except ssl.SSLError as exc:
        raise ServerSetupError(
            f"TLS certificate {cert_path} and key {key_path} are not a valid PEM pair: {exc}"
        ) from exc
    return grpc.ssl_server_credentials([(key, cert)])


def bearer_token(config: SecurityConfig) -> str | None:
    if config.bearer_token_file is None:
        return None
    return _read(config.bearer_token_file, "bearer_token_file").decode().strip()


class BearerTokenInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    """Refuses calls without the right bearer token with UNAUTHENTICATED."""

    def __init__(self, token: str) -> None:
        self._expected = f"Bearer {token}".encode()

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or method.startswith(OPEN_METHOD_PREFIXES):
            return handler
        for key, value in handler_call_details.invocation_metadata or ():
            if key == "authorization":
                sent = value.encode() if isinstance(value, str) else bytes(value)
                if hmac.compare_digest(sent, self._expected):
                    return handler
                return _deny(handler, "the bearer token is not valid for this server")
        return _deny(handler, "missing 'authorization: Bearer <token>' metadata")


def _deny(handler: Handler, why: str) -> Handler:
    message = f"unauthenticated: {why}"

    async def unary(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

    async def streaming(
        request: Any, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[Any]:
        never: tuple[Any, ...] = ()
        for item in never:  # the yield makes this an async generator, as grpc expects
            yield item
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

    des, ser = handler.request_deserializer, handler.response_serializer
    if handler.request_streaming and handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(streaming, des, ser)
    if handler.request_streaming:
        return grpc.stream_unary_rpc_method_handler(unary, des, ser)
    if handler.response_streaming:
        return grpc.unary_stream_rpc_method_handler(streaming, des, ser)
    return grpc.unary_unary_rpc_method_handler(unary, des, ser)


def exposure_warning(host: str, *, tls: bool, token: bool) -> str | None:
    """What a server bound to ``host`` exposes that it should not, or None.

    Loopback is reachable from this machine alone; any other address puts robot commands
    (and a bearer token, if one is configured) on the network in the clear without TLS.
    """
    if tls or _is_loopback(host):
        return None
    if token:
        return (
            f"serving on {host} without TLS sends the bearer token in the clear: anyone on "
            "the network can read it and command the robots; set security.tls_cert_file and "
            "security.tls_key_file"
        )
    return (
        f"serving on {host} without TLS or a token: anyone who reaches this address can "
        "command the robots; set security.tls_cert_file/tls_key_file and "
        "security.bearer_token_file, or bind 127.0.0.1"
    )


def _is_loopback(host: str) -> bool:
    bare = host.strip("[]")
    if bare == "localhost":
        return True
    try:
        return ipaddress.ip_address(bare).is_loopback
    except ValueError:  # a host name: only its resolution would tell; assume exposed
        return False
