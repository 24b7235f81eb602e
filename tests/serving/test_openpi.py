"""openpi: the real ``openpi_client.WebsocketClientPolicy`` against a tether server.

openpi-client runs in its own venv and process (tests/serving/client_venv.py). The
server supervises with limits tight enough to correct the policy, so replies that
skipped the supervisor would fail the comparison.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from tests.serving.client_venv import clients_python, run_client
from tests.serving.serving_harness import MakeServer, server_config
from tests.serving.test_kserve import rows, supervised, tight_limits
from tether.errors import TetherError
from tether.policy.engine import PolicyEngine
from tether.serving.supervision import SupervisorFactory
from tether.spec import RobotSpec

__all__ = ["clients_python"]


def openpi_config(**openpi: object) -> object:
    return server_config(openpi={"port": 0, **openpi})


def test_openpi_client_gets_supervised_actions_batched_across_robots(
    make_server: MakeServer, engine: PolicyEngine, arm: RobotSpec, clients_python: Path
) -> None:
    running = make_server(
        openpi_config(),
        engine=engine,
        supervisors=SupervisorFactory(arm, limits=tight_limits(arm)),
    )
    port = running.server.openpi_port
    assert port
    obs = rows(arm, 8, seed=4)
    report = run_client(
        clients_python, "openpi_calls.py", str(port), json.dumps(obs.tolist()), "protocol"
    )

    meta = report["metadata"]
    assert meta["server"] == "tether"
    assert meta["action_horizon"] == 1
    assert meta["action_dim"] == arm.act_dim
    assert meta["policy_version"] == engine.version.id
    assert meta["observation_keys"] == {"observation/state": "observation"}

    first = report["first"]
    assert first["dtype"] == "float32"
    assert np.asarray(first["actions"]).shape == (1, arm.act_dim)
    proposed, safe = supervised(engine, arm, obs[0])
    np.testing.assert_allclose(first["proposed"][0], proposed, atol=1e-6)
    np.testing.assert_allclose(first["actions"][0], safe, atol=1e-6)
    assert not np.allclose(safe, proposed), "the limits must make the supervisor act"
    assert first["safety"][0]["checks"], first["safety"]
    assert {"infer_ms", "queue_ms", "safety_ms", "total_ms"} <= set(first["server_timing"])
    assert "prev_total_ms" in report["second_timing"]

    for i, replies in report["robots"].items():
        assert replies is not None, f"robot {i} did not finish beside the bad clients"
        assert len(replies) == 20
        expected = engine.act(obs[int(i)][None], True).actions[0]
        for reply in replies:
            np.testing.assert_allclose(reply["proposed"][0], expected, atol=1e-6)
            assert np.all(np.isfinite(reply["actions"]))
            assert reply["version"] == engine.version.id

    errors = report["errors"]
    for case in ("key", "dtype", "shape", "nan"):
        assert "\nINVALID_ARGUMENT: " in errors[case]["text"], (case, errors[case])
        assert errors[case]["close"] == 1011, (case, errors[case])
    assert "unexpected key(s) ['state']" in errors["key"]["text"]
    assert "dtype uint8, expected float32" in errors["dtype"]["text"]
    assert f"expected [N, {arm.obs_dim}]" in errors["shape"]["text"]
    assert "expected a finite number" in errors["nan"]["text"]
    assert errors["oversized"]["close"] == 1009
    np.testing.assert_allclose(report["after_errors"]["proposed"][0], proposed, atol=1e-6)
    assert (
        running.metric(
            "tether_requests_total", method="openpi", status="OK", version=str(engine.version.id)
        )
        >= 162
    )


def test_api_key_is_checked_and_healthz_stays_open(
    make_server: MakeServer,
    engine: PolicyEngine,
    arm: RobotSpec,
    clients_python: Path,
    tmp_path: Path,
) -> None:
    token = tmp_path / "token.txt"
    token.write_text("s3cret\n")
    config = server_config(openpi={"port": 0}, security={"bearer_token_file": str(token)})
    running = make_server(config, engine=engine)
    port = running.server.openpi_port
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as reply:
        assert reply.status == 200
        assert reply.read() == b"OK\n"
    obs = rows(arm, 1, seed=5)
    report = run_client(
        clients_python, "openpi_calls.py", str(port), json.dumps(obs.tolist()), "auth", "s3cret"
    )
    assert report["without"] == 401
    assert report["wrong"] == 401
    assert np.asarray(report["with"]["actions"]).shape == (1, arm.act_dim)


def test_healthz_reports_no_policy(make_server: MakeServer) -> None:
    running = make_server(openpi_config(), engine=None)
    port = running.server.openpi_port
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10)
    info.value.close()  # an open response holds the server's shutdown for its close timeout
    assert info.value.code == 503


def test_a_mapping_to_an_unknown_input_stops_startup(make_server: MakeServer) -> None:
    with pytest.raises(TetherError, match="not an input of the served policy"):
        make_server(openpi_config(observation_keys={"observation/state": "state"}))
