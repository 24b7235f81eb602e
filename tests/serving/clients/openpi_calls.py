"""Calls a tether openpi endpoint with the real ``openpi_client``; prints one JSON report.

Run by tests/serving/test_openpi.py in the client venv:
``openpi_calls.py PORT OBS_JSON MODE [API_KEY | IMAGE_JSON]``; MODE is ``protocol``
(replies, concurrent clients, every kind of bad message), ``auth`` (the Api-Key header)
or ``chunk`` (a state and an image in, an action chunk out; tests/serving/test_chunk_serving.py).
"""

import json
import sys
import threading

import numpy as np
from openpi_client import websocket_client_policy
from websockets.exceptions import ConnectionClosed, InvalidStatus


def connect(port, api_key=None):
    return websocket_client_policy.WebsocketClientPolicy("127.0.0.1", port, api_key=api_key)


def refusal(port, observation):
    """What a fresh client gets for ``observation``: the error text and the close code."""
    policy = connect(port)
    try:
        policy.infer(observation)
    except RuntimeError as exc:
        text = str(exc)
    except ConnectionClosed as exc:
        return {"text": None, "close": exc.rcvd.code if exc.rcvd else None}
    else:
        return {"text": "no error", "close": None}
    try:
        policy._ws.recv(timeout=10)
    except ConnectionClosed as exc:
        return {"text": text, "close": exc.rcvd.code if exc.rcvd else None}
    return {"text": text, "close": "still open"}


def reply_of(result):
    return {
        "actions": result["actions"].tolist(),
        "dtype": str(result["actions"].dtype),
        "server_timing": sorted(result["server_timing"]),
        "proposed": result["tether"]["proposed_actions"].tolist(),
        "safety": result["tether"]["safety"],
        "version": result["tether"]["policy_version"],
    }


def protocol(port, rows):
    report = {}
    policy = connect(port)
    report["metadata"] = policy.get_server_metadata()
    first = policy.infer({"observation/state": rows[0], "prompt": "reach the target"})
    report["first"] = reply_of(first)
    second = policy.infer({"observation": {"state": rows[1]}})
    report["second_timing"] = sorted(second["server_timing"])

    # Eight robots at once, each on its own connection, while bad clients come and go.
    results = {}

    def robot(i):
        mine = connect(port)
        out = []
        for _ in range(20):
            out.append(reply_of(mine.infer({"observation/state": rows[i]})))
        results[i] = out

    threads = [threading.Thread(target=robot, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    wide = np.zeros(rows.shape[1] + 1, np.float32)
    nan = rows[0].copy()
    nan[3] = np.nan
    report["errors"] = {
        "key": refusal(port, {"state": rows[0]}),
        "dtype": refusal(port, {"observation/state": rows[0].astype(np.uint8)}),
        "shape": refusal(port, {"observation/state": wide}),
        "nan": refusal(port, {"observation/state": nan}),
        "oversized": refusal(port, {"observation/state": np.zeros(600_000, np.float32)}),
    }
    for t in threads:
        t.join(60)
    report["robots"] = {str(i): results.get(i) for i in range(8)}
    report["after_errors"] = reply_of(policy.infer({"observation/state": rows[0]}))
    return report


def auth(port, rows, api_key):
    report = {}
    try:
        connect(port)
        report["without"] = "connected"
    except InvalidStatus as exc:
        report["without"] = exc.response.status_code
    try:
        connect(port, api_key="wrong")
        report["wrong"] = "connected"
    except InvalidStatus as exc:
        report["wrong"] = exc.response.status_code
    policy = connect(port, api_key=api_key)
    report["with"] = reply_of(policy.infer({"observation/state": rows[0]}))
    return report


def chunk(port, rows, image):
    policy = connect(port)
    result = policy.infer({"observation/state": rows[0], "observation/image": image})
    return {"metadata": policy.get_server_metadata(), "reply": reply_of(result)}


def main():
    port, rows = int(sys.argv[1]), np.asarray(json.loads(sys.argv[2]), dtype=np.float32)
    mode = sys.argv[3]
    if mode == "chunk":
        image = np.asarray(json.loads(sys.argv[4]), dtype=np.uint8)
        print(json.dumps(chunk(port, rows, image)))
        return
    report = protocol(port, rows) if mode == "protocol" else auth(port, rows, sys.argv[4])
    print(json.dumps(report))


if __name__ == "__main__":
    main()
