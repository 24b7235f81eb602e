"""Calls a tether server with the real ``tritonclient.grpc``; prints one JSON report.

Run by tests/serving/test_kserve.py in the client venv: ``triton_calls.py ADDRESS
OBS_JSON``, where OBS_JSON is a list of observation rows (float32 values); and by
tests/serving/test_chunk_serving.py as ``triton_calls.py ADDRESS OBS_JSON chunk
IMAGE_JSON`` for a policy with a state and an image input and an action horizon.
"""

import json
import sys

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException


def observation_input(rows: np.ndarray, name: str = "observation", datatype: str = "FP32"):
    tensor = grpcclient.InferInput(name, list(rows.shape), datatype)
    tensor.set_data_from_numpy(rows)
    return tensor


def refusal(call):
    try:
        call()
    except InferenceServerException as exc:
        return {"status": exc.status(), "message": exc.message()}
    return {"status": "OK", "message": ""}


def chunk(client, rows, image) -> dict:
    """One ModelInfer with both named inputs (image first: matched by name)."""
    result = client.infer(
        "tether",
        [observation_input(image[None], "image", "UINT8"), observation_input(rows[:1], "state")],
        request_id="chunk-1",
    )
    return {
        "metadata": client.get_model_metadata("tether", as_json=True),
        "action": result.as_numpy("action").tolist(),
        "checks": result.as_numpy("safety_checks").tolist(),
        "id": result.get_response().id,
    }


def main() -> None:
    address, obs_json = sys.argv[1], sys.argv[2]
    if len(sys.argv) > 3 and sys.argv[3] == "chunk":
        rows = np.asarray(json.loads(obs_json), dtype=np.float32)
        image = np.asarray(json.loads(sys.argv[4]), dtype=np.uint8)
        client = grpcclient.InferenceServerClient(address)
        print(json.dumps(chunk(client, rows, image)))
        return
    rows = np.asarray(json.loads(obs_json), dtype=np.float32)
    client = grpcclient.InferenceServerClient(address)
    report = {
        "live": client.is_server_live(),
        "ready": client.is_server_ready(),
        "model_ready": client.is_model_ready("tether"),
        "unknown_model_ready": client.is_model_ready("no-such-model"),
        "metadata": client.get_model_metadata("tether", as_json=True),
    }
    one = client.infer("tether", [observation_input(rows[:1])], request_id="req-7")
    report["one"] = {
        "action": one.as_numpy("action").tolist(),
        "proposed": one.as_numpy("proposed_action").tolist(),
        "checks": one.as_numpy("safety_checks").tolist(),
        "id": one.get_response().id,
        "model_version": one.get_response().model_version,
    }
    many = client.infer(
        "tether",
        [observation_input(rows)],
        outputs=[grpcclient.InferRequestedOutput("action")],
    )
    report["many"] = {
        "action": many.as_numpy("action").tolist(),
        "outputs": [o.name for o in many.get_response().outputs],
    }
    live = report["one"]["model_version"]
    pinned = client.infer("tether", [observation_input(rows[:1])], model_version=live)
    report["pinned"] = pinned.as_numpy("action").tolist()
    bad_name = observation_input(rows[:1], name="state")
    bad_dtype = observation_input(rows[:1].astype(np.uint8), datatype="UINT8")
    wide = np.zeros((1, rows.shape[1] + 1), np.float32)
    nan = rows[:1].copy()
    nan[0, 2] = np.nan
    huge = np.zeros((1, 40_000), np.float32)
    report["errors"] = {
        "name": refusal(lambda: client.infer("tether", [bad_name])),
        "dtype": refusal(lambda: client.infer("tether", [bad_dtype])),
        "shape": refusal(lambda: client.infer("tether", [observation_input(wide)])),
        "nan": refusal(lambda: client.infer("tether", [observation_input(nan)])),
        "oversized": refusal(lambda: client.infer("tether", [observation_input(huge)])),
        "model": refusal(lambda: client.infer("no-such-model", [observation_input(rows[:1])])),
        "version": refusal(
            lambda: client.infer("tether", [observation_input(rows[:1])], model_version="999")
        ),
        "unimplemented": refusal(lambda: client.get_model_repository_index()),
    }
    after = client.infer("tether", [observation_input(rows[:1])])
    report["after_errors"] = after.as_numpy("action").tolist()
    print(json.dumps(report))


if __name__ == "__main__":
    main()
