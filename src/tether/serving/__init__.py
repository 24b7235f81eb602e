"""tether.serving: the gRPC edge (see docs/protocol.md and docs/architecture.md).

Public API, by module (nothing is imported here, so a robot-side install that only
uses the client does not load torch or MuJoCo):

- ``server``: ``PolicyServer`` (start/stop/set_engine; health, reflection, metrics),
  ``run_until_signal``; ``launch``: ``build_server(bundle, config)``, ``serve``
- ``config``: ``ServerConfig`` (+ ``BatcherConfig``, ``AdmissionConfig``,
  ``ValidationConfig``, ``SecurityConfig``), ``ServerConfig.from_yaml``
- ``supervision``: ``SupervisorFactory``, ``SessionSupervisor`` (one per session)
- ``holder``: ``LiveModel`` and the ``ModelSource`` routing protocol
- ``batcher``: ``DynamicBatcher``; ``admission``: ``Admission``, ``TokenBucket``
- ``client``: ``PolicyClient``, ``AsyncPolicyClient``, sessions, ``ClientOptions``;
  ``client.sim_robot``: ``SimRobotClient``
- ``errors``: ``ServingError`` and one subclass per status code
"""
