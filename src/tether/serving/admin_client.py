"""A small synchronous AdminService client (what ``tether admin`` uses).

Every call carries the bearer token and a deadline; TLS is used when a root certificate
is given. Errors come back as :class:`AdminCallError` naming the method, the status code
and the server's message, so a CLI can print them as they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import grpc

from tether.serving.errors import ServingError
from tether.v1 import admin_pb2 as apb, admin_pb2_grpc as apb_grpc


class AdminCallError(ServingError):
    """An AdminService call that the server refused or that could not reach it."""

    def __init__(self, method: str, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{method} failed with {code.name}: {details}")
        self.method = method
        self.status = code


class AdminClient:
    """Calls AdminService on ``target`` (``host:port``) as the holder of ``token``."""

    def __init__(
        self,
        target: str,
        token: str,
        *,
        root_certificates: Path | None = None,
        timeout_s: float = 30.0,
    ) -> None:
        if root_certificates is None:
            self._channel = grpc.insecure_channel(target)
        else:
            creds = grpc.ssl_channel_credentials(Path(root_certificates).read_bytes())
            self._channel = grpc.secure_channel(target, creds)
        self._stub = apb_grpc.AdminServiceStub(self._channel)  # type: ignore[no-untyped-call]
        self._metadata = (("authorization", f"Bearer {token}"),) if token else ()
        self._timeout_s = timeout_s

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _call(self, method: str, request: Any) -> Any:
        try:
            return getattr(self._stub, method)(
                request, metadata=self._metadata, timeout=self._timeout_s
            )
        except grpc.RpcError as exc:
            raise AdminCallError(method, exc.code(), exc.details() or "") from None

    def list_versions(self) -> apb.ListVersionsResponse:
        return self._call("ListVersions", apb.ListVersionsRequest())  # type: ignore[no-any-return]

    def load_bundle(self, path: str, *, make_live: bool = False) -> apb.VersionEntry:
        reply = self._call("LoadBundle", apb.LoadBundleRequest(path=path, make_live=make_live))
        return reply.version  # type: ignore[no-any-return]

    def unload(self, version: int) -> apb.VersionEntry:
        return self._call("Unload", apb.UnloadRequest(version=version)).version  # type: ignore[no-any-return]

    def set_traffic(self, weights: Mapping[int, float]) -> tuple[tuple[int, float], ...]:
        request = apb.SetTrafficRequest(
            weights=[apb.TrafficWeight(version=v, weight=w) for v, w in weights.items()]
        )
        reply = self._call("SetTraffic", request)
        return tuple((w.version, w.weight) for w in reply.weights)

    def promote(
        self, version: int, *, reason: str = "", skip_gate: bool = False
    ) -> apb.VersionEntry:
        request = apb.PromoteRequest(version=version, reason=reason, skip_gate=skip_gate)
        return self._call("Promote", request).version  # type: ignore[no-any-return]

    def rollback(self, reason: str = "") -> apb.RollbackResponse:
        return self._call("Rollback", apb.RollbackRequest(reason=reason))  # type: ignore[no-any-return]

    def resume(self, reason: str = "") -> apb.ResumeResponse:
        return self._call("Resume", apb.ResumeRequest(reason=reason))  # type: ignore[no-any-return]

    def reload(self) -> apb.ReloadResponse:
        return self._call("Reload", apb.ReloadRequest())  # type: ignore[no-any-return]
