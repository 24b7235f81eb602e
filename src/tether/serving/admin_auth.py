"""Who may call AdminService: bearer tokens with a role, checked before any handler runs.

Tokens live in a file (never in the YAML config), one per line: ``<role> <name> <token>``
with role ``viewer`` (may list versions) or ``operator`` (may change them); ``#`` starts
a comment. The interceptor guards only ``/tether.v1.AdminService/`` methods:

- no ``authorization: Bearer <token>`` metadata, or a token that is not in the file →
  ``UNAUTHENTICATED`` (as PolicyService answers: the caller is not known);
- a known token whose role is below the method's → ``PERMISSION_DENIED``.

Invariant: every AdminService method has an entry in :data:`METHOD_ROLES` (a test checks
it against the proto), and a method without one is refused, never let through.
Tokens are compared in constant time.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path
from typing import Any, TypeAlias

import grpc

from tether.serving.errors import ServerSetupError

Handler: TypeAlias = "grpc.RpcMethodHandler[Any, Any]"

ADMIN_PREFIX = "/tether.v1.AdminService/"


class AdminRole(IntEnum):
    VIEWER = 1
    OPERATOR = 2


METHOD_ROLES: dict[str, AdminRole] = {
    "ListVersions": AdminRole.VIEWER,
    "LoadBundle": AdminRole.OPERATOR,
    "Unload": AdminRole.OPERATOR,
    "SetTraffic": AdminRole.OPERATOR,
    "Promote": AdminRole.OPERATOR,
    "Rollback": AdminRole.OPERATOR,
    "Resume": AdminRole.OPERATOR,
    "Reload": AdminRole.OPERATOR,
}


@dataclass(frozen=True)
class AdminIdentity:
    name: str
    role: AdminRole


@dataclass(frozen=True)
class AdminToken:
    token: str
    identity: AdminIdentity


class AdminAuth:
    """The tokens an admin server accepts; resolves call metadata to an identity."""

    def __init__(self, tokens: Iterable[AdminToken]) -> None:
        self._tokens = tuple(tokens)
        if not self._tokens:
            raise ServerSetupError(
                "AdminService needs at least one token; add a line '<role> <name> <token>' "
                "to the admin token file"
            )
        for t in self._tokens:
            if len(t.token) < 16:
                raise ServerSetupError(
                    f"admin token of {t.identity.name!r} has {len(t.token)} characters; use at "
                    "least 16 random characters (e.g. `openssl rand -hex 24`)"
                )

    @classmethod
    def from_file(cls, path: Path) -> AdminAuth:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ServerSetupError(f"admin token file {path} cannot be read: {exc}") from exc
        tokens = []
        for number, raw in enumerate(text.splitlines(), start=1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split()
            if len(parts) != 3 or parts[0].upper() not in AdminRole.__members__:
                raise ServerSetupError(
                    f"{path}:{number}: expected '<viewer|operator> <name> <token>', got "
                    f"{len(parts)} fields starting with {parts[0]!r}"
                )
            role, name, token = parts
            tokens.append(AdminToken(token, AdminIdentity(name, AdminRole[role.upper()])))
        return cls(tokens)

    def identify(self, metadata: Iterable[tuple[str, str | bytes]] | None) -> AdminIdentity | None:
        """The identity behind the call's bearer token; None when no token was sent.

        Raises :class:`PermissionError` for a token that is sent but unknown.
        """
        for key, value in metadata or ():
            if key != "authorization":
                continue
            sent = value if isinstance(value, str) else value.decode("utf-8", "replace")
            scheme, _, token = sent.partition(" ")
            if scheme.lower() != "bearer" or not token:
                return None
            found = None
            for t in self._tokens:  # no early exit: timing does not reveal which matched
                if hmac.compare_digest(t.token.encode(), token.strip().encode()):
                    found = t.identity
            if found is None:
                raise PermissionError("the bearer token is not an admin token of this server")
            return found
        return None


class AdminAuthInterceptor(grpc.aio.ServerInterceptor):  # type: ignore[type-arg]
    """Checks AdminService calls against :class:`AdminAuth` and :data:`METHOD_ROLES`."""

    def __init__(self, auth: AdminAuth) -> None:
        self._auth = auth

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Handler]],
        handler_call_details: grpc.HandlerCallDetails,
    ) -> Handler:
        handler = await continuation(handler_call_details)
        method = handler_call_details.method
        if handler is None or not method.startswith(ADMIN_PREFIX):
            return handler
        name = method[len(ADMIN_PREFIX) :]
        try:
            identity = self._auth.identify(handler_call_details.invocation_metadata)
        except PermissionError as exc:
            return _deny(handler, grpc.StatusCode.UNAUTHENTICATED, f"{exc}")
        if identity is None:
            return _deny(
                handler,
                grpc.StatusCode.UNAUTHENTICATED,
                "AdminService needs 'authorization: Bearer <token>' metadata "
                "(tether admin --token ...)",
            )
        needed = METHOD_ROLES.get(name)
        if needed is None or identity.role < needed:
            wanted = "an unknown role" if needed is None else f"role {needed.name.lower()}"
            return _deny(
                handler,
                grpc.StatusCode.PERMISSION_DENIED,
                f"{identity.name} has role {identity.role.name.lower()}, but {name} needs "
                f"{wanted}; use an operator token",
            )
        return handler


def _deny(handler: Handler, code: grpc.StatusCode, message: str) -> Handler:
    async def refuse(request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        await context.abort(code, message)

    # Every AdminService method is unary-unary.
    return grpc.unary_unary_rpc_method_handler(
        refuse, handler.request_deserializer, handler.response_serializer
    )
