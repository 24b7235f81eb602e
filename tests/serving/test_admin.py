"""AdminService on a real gRPC server on 127.0.0.1 port 0: auth, roles and every method."""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import subprocess
from pathlib import Path

import grpc
import pytest

from tests.serving.admin_harness import AUTH, OPERATOR, VIEWER, Admin
from tests.versions.builders import derived, make_engine, nudged
from tether.policy.bundle import PolicyBundle
from tether.policy.initialize import init_bundle
from tether.safety.levels import DegradationLevel
from tether.safety.supervisor import Supervisor
from tether.serving.admin import admin_servicer, start_admin_server
from tether.serving.admin_auth import METHOD_ROLES, AdminAuth, AdminIdentity, AdminRole
from tether.serving.admin_client import AdminCallError, AdminClient
from tether.serving.config import SecurityConfig
from tether.serving.errors import ServerSetupError
from tether.serving.security import server_credentials
from tether.spec import RobotSpec
from tether.v1 import admin_pb2 as apb
from tether.versions.facade import PolicyVersions, VersionsConfig


def test_every_admin_method_has_a_role() -> None:
    service = apb.DESCRIPTOR.services_by_name["AdminService"]
    assert set(METHOD_ROLES) == {m.name for m in service.methods}


def test_missing_token_is_unauthenticated(admin: Admin) -> None:
    with admin.client(token="") as c, pytest.raises(AdminCallError) as err:
        c.list_versions()
    assert err.value.status is grpc.StatusCode.UNAUTHENTICATED


def test_unknown_token_is_unauthenticated_like_the_policy_service(admin: Admin) -> None:
    """An unknown token says nothing about who calls: UNAUTHENTICATED, as PolicyService
    answers; PERMISSION_DENIED is for a known token lacking the role."""
    with admin.client(token="x" * 40) as c, pytest.raises(AdminCallError) as err:
        c.list_versions()
    assert err.value.status is grpc.StatusCode.UNAUTHENTICATED
    assert "not an admin token" in str(err.value)


def test_viewer_may_list_but_not_change(admin: Admin) -> None:
    with admin.client(VIEWER) as c:
        listing = c.list_versions()
        assert listing.live_version == 1
        for call in (lambda: c.rollback("x"), lambda: c.promote(1), lambda: c.reload()):
            with pytest.raises(AdminCallError) as err:
                call()
            assert err.value.status is grpc.StatusCode.PERMISSION_DENIED
            assert "needs role operator" in str(err.value)
    assert admin.registry.live() is not None


def test_load_split_promote_rollback_unload(
    admin: Admin, base_bundle: PolicyBundle, tmp_path: Path
) -> None:
    derived(base_bundle, tmp_path / "v2", 2, "v2", nudged)
    with admin.client() as c:
        entry = c.load_bundle(str(tmp_path / "v2"))
        assert (entry.id, entry.state) == (2, apb.VERSION_STATE_CANDIDATE)
        with pytest.raises(AdminCallError) as err:  # candidates never get traffic
            c.set_traffic({2: 1.0})
        assert err.value.status is grpc.StatusCode.FAILED_PRECONDITION
        promoted = c.promote(2, reason="bench test passed", skip_gate=True)
        assert promoted.state == apb.VERSION_STATE_LIVE
        assert "operator alice" in promoted.reason
        assert "gate skipped" in promoted.reason
        assert c.set_traffic({1: 1.0, 2: 3.0}) == ((1, 0.25), (2, 0.75))
        listing = c.list_versions()
        assert (listing.live_version, listing.last_known_good) == (2, 1)
        assert {e.id: e.traffic_weight for e in listing.versions} == {1: 0.25, 2: 0.75}
        back = c.rollback("operator saw oscillation")
        assert (back.live.id, back.rolled_back) == (1, 2)
        assert admin.registry.get(2).state.value == "rejected"
        assert c.unload(2).loaded is False
        with pytest.raises(AdminCallError) as err:
            c.unload(1)
        assert err.value.status is grpc.StatusCode.FAILED_PRECONDITION
        assert "is live" in str(err.value)
        with pytest.raises(AdminCallError) as err:
            c.load_bundle(str(tmp_path / "nowhere"))
        assert err.value.status is grpc.StatusCode.INVALID_ARGUMENT


def test_promoting_a_candidate_enters_the_gate(
    admin: Admin, base_bundle: PolicyBundle, tmp_path: Path
) -> None:
    derived(base_bundle, tmp_path / "v2", 2, "v2", nudged)
    with admin.client() as c:
        c.load_bundle(str(tmp_path / "v2"))
        entry = c.promote(2)
        assert entry.state == apb.VERSION_STATE_SHADOW
        assert c.list_versions().live_version == 1


def test_reload_registers_new_bundles_as_candidates(
    admin: Admin, base_bundle: PolicyBundle, tmp_path: Path
) -> None:
    shutil.copytree(tmp_path / "base", admin.models / "base")
    derived(base_bundle, admin.models / "next", 9, "next", nudged)
    with admin.client() as c:
        result = c.reload()
        assert [(e.id, e.state) for e in result.loaded] == [(9, apb.VERSION_STATE_CANDIDATE)]
        assert result.unchanged == [str(admin.models / "base")]
        assert c.reload().loaded == []


def test_resume_leaves_takeover_in_the_operators_name(admin: Admin) -> None:
    with admin.client() as c:
        with pytest.raises(AdminCallError) as err:
            c.resume()
        assert err.value.status is grpc.StatusCode.FAILED_PRECONDITION
        admin.degradation.escalate(DegradationLevel.TAKEOVER, reason="e-stop pressed")
        reply = c.resume("area cleared")
    assert reply.operator == "alice"
    assert admin.degradation.level < DegradationLevel.TAKEOVER
    assert admin.degradation.history()[-1].operator == "alice"


def test_token_file_is_parsed_and_refuses_bad_lines(tmp_path: Path) -> None:
    good = tmp_path / "tokens"
    good.write_text(f"# who may administer\noperator alice {OPERATOR}\nviewer victor {VIEWER}\n")
    auth = AdminAuth.from_file(good)
    assert auth.identify([("authorization", f"Bearer {VIEWER}")]) == AdminIdentity(
        "victor", AdminRole.VIEWER
    )
    bad = tmp_path / "bad"
    bad.write_text("admin alice sometoken\n")
    with pytest.raises(ServerSetupError, match=":1: expected"):
        AdminAuth.from_file(bad)
    short = tmp_path / "short"
    short.write_text("operator alice 1234\n")
    with pytest.raises(ServerSetupError, match="at least 16"):
        AdminAuth.from_file(short)


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")
def test_admin_over_tls(
    base_bundle: PolicyBundle,
    tmp_path: Path,
    supervisor: Supervisor,
    loop: asyncio.AbstractEventLoop,
) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"),
            *("-subj", "/CN=localhost"),
            *("-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"),
            *("-keyout", str(key), "-out", str(cert)),
        ],
        check=True,
        capture_output=True,
    )
    versions = PolicyVersions(
        VersionsConfig(), engine_factory=make_engine, shadow_supervisor=supervisor
    )
    versions.load(tmp_path / "base")
    servicer = admin_servicer(versions, AUTH)
    assert servicer is not None
    credentials = server_credentials(SecurityConfig(tls_cert_file=cert, tls_key_file=key))
    server, port = asyncio.run_coroutine_threadsafe(
        start_admin_server(servicer, AUTH, credentials=credentials), loop
    ).result(10)
    try:
        with AdminClient(f"localhost:{port}", OPERATOR, root_certificates=cert) as c:
            assert c.list_versions().live_version == 1
        with (
            AdminClient(f"localhost:{port}", OPERATOR, timeout_s=2.0) as plain,
            pytest.raises(AdminCallError) as err,
        ):
            plain.list_versions()  # a plaintext client cannot talk to a TLS server
        assert err.value.status is grpc.StatusCode.UNAVAILABLE
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(0), loop).result(10)


def test_no_token_file_means_no_admin_service(supervisor: Supervisor) -> None:
    versions = PolicyVersions(
        VersionsConfig(), engine_factory=make_engine, shadow_supervisor=supervisor
    )
    assert admin_servicer(versions) is None


def test_a_bundle_for_another_robot_is_refused_naming_both_fingerprints(
    admin: Admin, spec: RobotSpec, tmp_path: Path
) -> None:
    """Same dims, other robot: it went live and drove the arm (other dims: INTERNAL on
    every request after)."""
    other = dataclasses.replace(
        spec, name="other-arm", observation_names=tuple(f"{n}_b" for n in spec.observation_names)
    )
    init_bundle(tmp_path / "other", other, hidden_sizes=(16,), seed=1, version_id=2)
    with admin.client() as c, pytest.raises(AdminCallError) as err:
        c.load_bundle(str(tmp_path / "other"), make_live=True)
    assert err.value.status is grpc.StatusCode.FAILED_PRECONDITION
    assert other.fingerprint() in str(err.value)
    assert spec.fingerprint() in str(err.value)
    assert admin.registry.live() is not None
    assert admin.registry.live().id == 1  # type: ignore[union-attr]
    assert [r.id for r in admin.registry.records()] == [1]
    # Reload from the model directory: the same refusal, reported for that directory.
    shutil.copytree(tmp_path / "other", admin.models / "other")
    with admin.client() as c, pytest.raises(AdminCallError) as err:
        c.reload()
    assert err.value.status is grpc.StatusCode.FAILED_PRECONDITION
    assert other.fingerprint() in str(err.value)
    assert [r.id for r in admin.registry.records()] == [1]


def test_a_bundle_with_another_request_signature_is_refused(
    admin: Admin, spec: RobotSpec, tmp_path: Path
) -> None:
    """Same robot, other inputs and horizon: the front ends read the signature once at
    start-up, so the version would fail every request sent to it."""
    init_bundle(
        tmp_path / "chunk",
        spec,
        hidden_sizes=(16,),
        seed=1,
        version_id=2,
        images=[("image", (8, 8, 3))],
        horizon=3,
        conv_channels=(4,),
        state_input="state",
    )
    with admin.client() as c, pytest.raises(AdminCallError) as err:
        c.load_bundle(str(tmp_path / "chunk"), make_live=True)
    assert err.value.status is grpc.StatusCode.FAILED_PRECONDITION
    assert "action horizon 3" in str(err.value)
    assert "image uint8[8, 8, 3]" in str(err.value)
    assert [r.id for r in admin.registry.records()] == [1]
