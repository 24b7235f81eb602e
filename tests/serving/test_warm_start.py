"""A started server has compiled every kernel signature its serving paths use.

A compile at a robot's first step (a second on a fresh install, far past a control
deadline) would turn that step into a watchdog backup. The check runs in a fresh
process, so no earlier test can have compiled a signature for it: it counts every numba
dispatcher's signatures in tether's modules after ``server.start()`` and again after
single steps (observations and previous actions read-only, as they come off the wire),
batched steps of several robots, unary calls, KServe v2 ModelInfer calls and openpi
websocket clients (msgpack-numpy arrays, read-only off the wire).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tether.safety.position import kernel

SCRIPT = textwrap.dedent(
    """
    import json, sys, threading
    import numpy as np
    from tests.serving.serving_harness import (
        RunningServer, relaxed_limits, server_config)
    from tether.policy.bundle import load_bundle
    from tether.policy.config import EngineConfig
    from tether.policy.engine import PolicyEngine
    from tether.policy.initialize import init_bundle
    from tether.serving.client import PolicyClient
    from tether.serving.served_spec import ServedSpec
    from tether.serving.server import PolicyServer
    from tether.serving.supervision import SupervisorFactory
    from tether.sim import arm_spec

    def signatures():
        from numba.core.registry import CPUDispatcher
        counts = {}
        for name, module in list(sys.modules.items()):
            if not name.startswith("tether"):
                continue
            for attr, value in list(vars(module).items()):
                if isinstance(value, CPUDispatcher):
                    counts[f"{name}.{attr}"] = len(value.signatures)
        return counts

    spec = arm_spec()
    init_bundle(sys.argv[1], spec, hidden_sizes=(64, 64), seed=3)
    server = PolicyServer(
        server_config(metrics_port=None, openpi={"port": 0}),
        spec=ServedSpec.from_robot_spec(spec),
        supervisors=SupervisorFactory(spec, limits=relaxed_limits(spec)),
        engine=PolicyEngine(load_bundle(sys.argv[1]), EngineConfig()),
    )
    running = RunningServer(server)
    warmed = signatures()
    rng = np.random.default_rng(0)
    low = np.asarray(spec.joint_position_low_rad)
    high = np.asarray(spec.joint_position_high_rad)

    def observation():
        obs = np.zeros(spec.obs_dim, np.float32)
        obs[: spec.act_dim] = rng.uniform(low, high)
        return obs

    def drive(robot, steps):
        with PolicyClient(running.address) as client:
            with client.session(spec, robot_id=robot) as session:
                for _ in range(steps):
                    session.step(observation())
            for _ in range(3):
                client.get_action(observation())

    def kserve():
        import grpc
        from tether.kserve import grpc_predict_v2_pb2 as kpb
        from tether.kserve import grpc_predict_v2_pb2_grpc as kpb_grpc
        with grpc.insecure_channel(running.address) as channel:
            stub = kpb_grpc.GRPCInferenceServiceStub(channel)
            for rows in (1, 3):
                values = np.stack([observation() for _ in range(rows)])
                raw = kpb.ModelInferRequest(model_name="tether")
                raw.inputs.add(name="observation", datatype="FP32", shape=list(values.shape))
                raw.raw_input_contents.append(values.tobytes())
                typed = kpb.ModelInferRequest(model_name="tether")
                typed.inputs.add(name="observation", datatype="FP32", shape=list(values.shape))
                typed.inputs[0].contents.fp32_contents.extend(values.ravel().tolist())
                for message in (raw, typed):
                    stub.ModelInfer(message, timeout=60)

    def openpi(steps):
        import msgpack
        from websockets.sync.client import connect
        from tether.serving.openpi import pack
        with connect(f"ws://127.0.0.1:{server.openpi_port}", max_size=None) as ws:
            ws.recv()  # the metadata
            for _ in range(steps):
                ws.send(pack({"observation/state": observation()}))
                reply = msgpack.unpackb(ws.recv())
                assert "actions" in reply, reply

    try:
        drive("alone", 20)
        kserve()
        openpi(10)
        threads = [threading.Thread(target=drive, args=(f"r{i}", 30)) for i in range(12)]
        threads += [threading.Thread(target=openpi, args=(30,)) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        served = signatures()
    finally:
        running.stop()
    print(json.dumps({k: (warmed.get(k), v) for k, v in served.items() if v != warmed.get(k)}))
    """
)


@pytest.mark.skipif(not kernel.AVAILABLE, reason="the compiled kernels are off here")
def test_serving_compiles_nothing_after_the_server_started(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "arm")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).resolve().parents[2],
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    compiled_while_serving = json.loads(done.stdout.strip().splitlines()[-1])
    assert compiled_while_serving == {}
