"""Control-session messages shared by the blocking and the asyncio session.

One place builds the open and step messages and decides what a reply means, so both
clients behave identically: a reply for another step (late, after a watchdog miss) is
stale and skipped; a ``StepError`` becomes the watchdog's backup, never an exception in
the control loop.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from tether.serving.client.records import ActionResult
from tether.v1 import policy_pb2 as pb


@dataclass(frozen=True)
class RobotIdentity:
    """What a robot declares when it opens a session (see ``SessionOpen``)."""

    robot_id: str
    spec_fingerprint: str
    obs_dim: int
    act_dim: int
    joint_names: tuple[str, ...]
    pinned_version: int | None = None  # serve the whole session from this version

    def open_message(self) -> pb.ControlStep:
        return pb.ControlStep(
            open=pb.SessionOpen(
                robot_id=self.robot_id,
                spec_fingerprint=self.spec_fingerprint,
                obs_dim=self.obs_dim,
                act_dim=self.act_dim,
                joint_names=list(self.joint_names),
                model_version=self.pinned_version,
            )
        )


class EpisodeCounter:
    """Episode id and step index of the next step; a finished episode starts a new one."""

    def __init__(self) -> None:
        self.episode_id = uuid.uuid4().hex
        self.step_index = 0

    def start(self, episode_id: str | None = None) -> None:
        self.episode_id = episode_id or uuid.uuid4().hex
        self.step_index = 0

    def advance(self, episode_over: bool) -> None:
        if episode_over:
            self.start()
        else:
            self.step_index += 1


def action_request(
    observation: np.ndarray,
    *,
    deterministic: bool,
    client_id: str,
    model_version: int | None,
    inputs: Mapping[str, np.ndarray] | None = None,
) -> pb.ActionRequest:
    """The ``GetAction`` request both clients send; ``inputs`` are a policy's named
    inputs besides the state (images, see ``Describe.inputs``)."""
    return pb.ActionRequest(
        observation=np.asarray(observation, dtype=np.float32).ravel().tolist(),
        deterministic=deterministic,
        client_id=client_id,
        model_version=model_version,
        inputs=input_tensors(inputs),
    )


def input_tensors(inputs: Mapping[str, np.ndarray] | None) -> list[pb.InputTensor]:
    """Named inputs as ``InputTensor`` messages: uint8 arrays as bytes, others as float32."""
    out: list[pb.InputTensor] = []
    for name, value in (inputs or {}).items():
        array = np.asarray(value)
        tensor = pb.InputTensor(name=name, shape=list(array.shape))
        if array.dtype == np.uint8:
            tensor.uint8_values = np.ascontiguousarray(array).tobytes()
        else:
            tensor.float32_values.extend(array.astype(np.float32).ravel().tolist())
        out.append(tensor)
    return out


def step_message(
    counter: EpisodeCounter,
    observation: np.ndarray,
    *,
    reward: float,
    terminated: bool,
    truncated: bool,
    executed_action: np.ndarray | None,
    deterministic: bool,
    watchdog_misses: int,
    success: bool = False,
    task_id: str = "",
    final_distance_m: float | None = None,
) -> pb.ControlStep:
    """One step; ``task_id`` and ``final_distance_m`` let the canary pair this episode with
    another of the same task (an empty id or a missing distance: never paired)."""
    return pb.ControlStep(
        step=pb.StepData(
            observation=np.asarray(observation, dtype=np.float32).ravel().tolist(),
            reward=reward,
            terminated=terminated,
            truncated=truncated,
            episode_id=counter.episode_id,
            step_index=counter.step_index,
            executed_action=[]
            if executed_action is None
            else np.asarray(executed_action, dtype=np.float32).ravel().tolist(),
            client_timestamp_ns=time.monotonic_ns(),
            deterministic=deterministic,
            watchdog_misses=watchdog_misses,
            success=success,
            task_id=task_id,
            final_distance_m=final_distance_m,
        )
    )


def answers(reply: pb.ControlReply, counter: EpisodeCounter) -> bool:
    """Whether ``reply`` answers the step now waiting (not a late one)."""
    return reply.episode_id == counter.episode_id and reply.step_index == counter.step_index


def result_of(reply: pb.ControlReply) -> ActionResult | str:
    """The action in ``reply``, or the reason it has none."""
    kind = reply.WhichOneof("kind")
    if kind == "action":
        return ActionResult.from_proto(reply.action)
    if kind == "error":
        return f"step refused by the server (status {reply.error.code}): {reply.error.message}"
    return f"unexpected reply kind {kind!r} for a step"
