"""The robot side of the edge: clients, the control-loop session, the watchdog, a sim robot.

``PolicyClient`` (blocking) and ``AsyncPolicyClient`` (asyncio) call ``GetAction`` and
``Describe`` and open ``Control`` sessions whose ``step`` never blocks past the control
deadline: on a miss the session's watchdog returns a flagged backup action instead.
``PolicyClient.get_chunk`` returns an ``ActionChunk`` and ``ActionChunkBroker`` executes
chunks one step per control cycle, prefetching the next and never running a stale step.
``SimRobotClient`` (``tether.serving.client.sim_robot``) drives the built-in arm through
a session; it is not imported here so a robot-side install needs no MuJoCo.
"""

from tether.serving.client.aio import AsyncControlSession, AsyncPolicyClient
from tether.serving.client.chunks import ActionChunk, ActionChunkBroker, BrokeredStep
from tether.serving.client.options import ClientOptions
from tether.serving.client.records import ActionResult, PolicyVersionInfo, ServerTimingsInfo
from tether.serving.client.sync import ControlSession, PolicyClient

__all__ = [
    "ActionChunk",
    "ActionChunkBroker",
    "ActionResult",
    "AsyncControlSession",
    "AsyncPolicyClient",
    "BrokeredStep",
    "ClientOptions",
    "ControlSession",
    "PolicyClient",
    "PolicyVersionInfo",
    "ServerTimingsInfo",
]
