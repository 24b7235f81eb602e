"""tether.versions: which policy version acts, and how a candidate becomes live.

The layer between the policy and the edge: no grpc, nothing of serving, learning or
runtime. The learner proposes candidates (``tether.learning.publication``); everything
after that is here. Nothing is imported by this file, so the learner process can use
its stages without loading the registry. By module:

- ``records``: ``VersionRecord``, ``VersionState``, ``VersionSource``, ``LiveChange``,
  ``VersionMetrics``, ``EpisodeOutcome``, ``GateStage``, ``Measurement``,
  ``StageVerdict``, ``GateRecord``; ``errors``: ``VersionError`` and its subclasses;
  ``protocols``: ``VersionLike``, ``EngineLike``, ``Supervises``
- ``registry``: ``ModelRegistry`` and its transition table ``TRANSITIONS``
- ``holder``: ``LiveModel`` and the ``ModelSource`` protocol; ``routing``:
  ``TrafficRouter`` (A/B split, canary share), ``RouteDecision``, ``Role``
- ``statistics``: the comparisons (``paired_difference`` and ``student_t_quantile`` for
  the canary, ``clearly_worse`` for the rollback monitor)
- ``stages``: ``offline``, ``simulation`` (learner side), ``shadow``, ``canary``
  (server side), each with its config
- the gate, in two halves over the same records: ``learner_gate``: ``LearnerGate``
  (the learner-side stages in order, before publication); ``server_gate``:
  ``ServerGate`` (the server-side stages, then promotion)
- ``rollback``: ``RollbackMonitor``; ``verdict_files``: the learner's verdicts on
  disk; ``model_dir``: bundles on disk, reload; ``intake``: learner publications
  into the registry
- ``facade``: ``PolicyVersions`` and ``VersionsConfig``, the one object a server wires

See docs/versions.md.
"""
