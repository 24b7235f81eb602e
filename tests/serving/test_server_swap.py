"""Live swaps on a real PolicyServer under load: every request answered, by exactly one version.

Robots call GetAction continuously on 127.0.0.1 port 0 while an operator, through the
real AdminService, loads versions live, rolls back and reloads the model directory. The
registry drives the server's live model holder through its LiveChange listener, so each
swap lands between batches. No request may fail, and every reply's proposed action must
be exactly what its named version computes for that observation.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import numpy as np

from tests.serving.admin_harness import AUTH, OPERATOR
from tests.versions.builders import arm_observations, derived, make_engine, nudged
from tether.policy.bundle import PolicyBundle
from tether.policy.engine import PolicyEngine
from tether.safety.supervisor import Supervisor
from tether.serving.admin import admin_servicer, start_admin_server
from tether.serving.config import AdmissionConfig, ServerConfig
from tether.serving.launch import build_server
from tether.spec import RobotSpec
from tether.v1 import (
    admin_pb2 as apb,
    admin_pb2_grpc as apb_grpc,
    policy_pb2 as pb,
    policy_pb2_grpc as pb_grpc,
)
from tether.versions.facade import PolicyVersions, VersionsConfig
from tether.versions.records import VersionState
from tether.versions.server_gate import ServerGateConfig
from tether.versions.stages.shadow import ShadowConfig


def test_swaps_and_reload_under_load_fail_no_request(
    base_bundle: PolicyBundle,
    tmp_path: Path,
    spec: RobotSpec,
    supervisor: Supervisor,
    loop: asyncio.AbstractEventLoop,
) -> None:
    models = tmp_path / "models"
    bundles = {
        i: derived(base_bundle, tmp_path / f"v{i}", i, f"v{i}", lambda k, t, i=i: nudged(k, t) * i)
        for i in (2, 3)
    }
    versions = PolicyVersions(
        VersionsConfig(model_dir=models, reload_makes_live=True),
        engine_factory=make_engine,
        shadow_supervisor=supervisor,
    )
    versions.load(tmp_path / "base")
    # Robots here call as fast as they can; the per-client rate limit is not under test.
    config = ServerConfig(port=0, metrics_port=None, admission=AdmissionConfig(rate_limit_hz=0))
    server = build_server(tmp_path / "base", config)
    versions.drive(server.models)  # the wiring under test
    obs = arm_observations(spec, 6, seed=4)
    replies: list[tuple[int, int, np.ndarray]] = []
    failures: list[str] = []

    async def robot(stub: pb_grpc.PolicyServiceStub, row: int, stop: asyncio.Event) -> None:
        request = pb.ActionRequest(
            observation=obs[row].tolist(), deterministic=True, client_id=f"robot-{row}"
        )
        while not stop.is_set():
            try:
                reply = await stub.GetAction(request, timeout=10)
            except grpc.aio.AioRpcError as exc:
                failures.append(f"{exc.code().name}: {exc.details()}")
                continue
            replies.append(
                (row, reply.version.policy_version, np.asarray(reply.proposed_action, np.float32))
            )

    async def scenario() -> None:
        await server.start()
        admin_server, admin_port = await start_admin_server(admin_servicer(versions, AUTH), AUTH)
        meta = (("authorization", f"Bearer {OPERATOR}"),)
        stop = asyncio.Event()
        async with (
            grpc.aio.insecure_channel(server.address) as channel,
            grpc.aio.insecure_channel(f"127.0.0.1:{admin_port}") as admin_channel,
        ):
            stub = pb_grpc.PolicyServiceStub(channel)
            admin = apb_grpc.AdminServiceStub(admin_channel)
            robots = [asyncio.create_task(robot(stub, r, stop)) for r in range(len(obs))]
            await asyncio.sleep(0.3)
            await admin.LoadBundle(
                apb.LoadBundleRequest(path=str(bundles[2].path), make_live=True), metadata=meta
            )
            await asyncio.sleep(0.3)
            await admin.Rollback(apb.RollbackRequest(reason="test"), metadata=meta)
            await asyncio.sleep(0.3)
            derived(base_bundle, models / "v3", 3, "v3", lambda k, t: nudged(k, t) * 3)
            reloaded = await admin.Reload(apb.ReloadRequest(), metadata=meta)
            assert [e.id for e in reloaded.loaded] == [3]
            await asyncio.sleep(0.3)
            stop.set()
            await asyncio.gather(*robots)
        await admin_server.stop(0)
        await server.stop(0)

    asyncio.run_coroutine_threadsafe(scenario(), loop).result(120)
    assert failures == []
    engines: dict[int, PolicyEngine] = {v: versions.registry.engine(v) for v in (1, 2, 3)}
    reference = {v: e.act(obs, deterministic=True).actions for v, e in engines.items()}
    seen = set()
    for row, version, proposed in replies:
        np.testing.assert_array_equal(proposed, reference[version][row])
        seen.add(version)
    assert seen == {1, 2, 3}
    assert len(replies) > 100


def test_registry_as_the_servers_model_source_serves_pins_and_feeds_shadow(
    base_bundle: PolicyBundle,
    tmp_path: Path,
    spec: RobotSpec,
    supervisor: Supervisor,
    loop: asyncio.AbstractEventLoop,
) -> None:
    # The shadow queue holds every batch of this test, so none is dropped.
    shadow = ShadowConfig(steps=50, max_intervention_rate=1.0, queue_batches=1024)
    versions = PolicyVersions(
        VersionsConfig(promotion=ServerGateConfig(shadow=shadow)),
        engine_factory=make_engine,
        shadow_supervisor=supervisor,
    )
    versions.load(tmp_path / "base")
    server = build_server(
        tmp_path / "base",
        ServerConfig(port=0, metrics_port=None, admission=AdmissionConfig(rate_limit_hz=0)),
        versions=versions,
    )
    v2 = derived(base_bundle, tmp_path / "v2", 2, "v2", nudged)
    versions.load(v2.path, make_live=True)  # type: ignore[arg-type]
    candidate = make_engine(
        derived(base_bundle, tmp_path / "v3", 3, "v3", lambda k, t: nudged(k, t) * 2)
    )
    versions.submit_candidate(candidate)
    obs = arm_observations(spec, 1, seed=5)[0]

    async def scenario() -> list[int]:
        await server.start()
        seen = []
        async with grpc.aio.insecure_channel(server.address) as channel:
            stub = pb_grpc.PolicyServiceStub(channel)
            for pin in (None, 1, None):
                request = pb.ActionRequest(observation=obs.tolist(), deterministic=True)
                if pin is not None:
                    request.model_version = pin
                reply = await stub.GetAction(request, timeout=10)
                seen.append(reply.version.policy_version)
            for _ in range(versions.config.promotion.shadow.steps):
                await stub.GetAction(pb.ActionRequest(observation=obs.tolist()), timeout=10)
        await server.stop(0)
        return seen

    seen = asyncio.run_coroutine_threadsafe(scenario(), loop).result(120)
    assert seen == [2, 1, 2]  # a pin to the retired version 1 is served by it
    versions.promotion.wait_shadow(20.0)
    assert versions.registry.get(3).state is not VersionState.SHADOW  # shadow saw the batches
