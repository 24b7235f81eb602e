"""tether.serving: the gRPC edge (see docs/protocol.md and docs/architecture.md).

Which policy version serves a request, and how one becomes live, is the versions
layer's (``tether.versions``); the server takes its ``PolicyVersions`` as ``versions=``.

Public API, by module (nothing is imported here, so a robot-side install that only
uses the client does not load torch or MuJoCo):

- ``server``: ``PolicyServer`` (start/stop/set_engine; health, reflection, metrics),
  ``run_until_signal``; ``launch``: ``build_server(bundle, config)``, ``serve``
- ``config``: ``ServerConfig`` (+ ``BatcherConfig``, ``AdmissionConfig``,
  ``ValidationConfig``, ``SecurityConfig``), ``ServerConfig.from_yaml``
- ``supervision``: ``SupervisorFactory``, ``SessionSupervisor`` (one per session)
- ``batcher``: ``DynamicBatcher``; ``admission``: ``Admission``, ``TokenBucket``
- ``client``: ``PolicyClient``, ``AsyncPolicyClient``, sessions, ``ClientOptions``;
  ``client.sim_robot``: ``SimRobotClient``
- ``errors``: ``ServingError`` and one subclass per status code; ``status_code`` (with
  ``VERSION_STATUS``, the status code of each ``tether.versions`` error)
- ``admin``: ``AdminServicer``, ``admin_servicer(versions)``, ``start_admin_server``;
  ``versions_launch``: ``serve_versions`` (a server with versions, AdminService, SIGHUP)
"""
