"""tether.fleet: the same system on Ray (``tether run --backend ray``).

Placement: an edge policy server actor per group of robots (tether's own gRPC server,
supervisors and degradation machine: safety stays next to the robot), one learner
actor (the learner loop and its checkpoints; a GPU when the cluster has one), one
replay actor every edge streams transitions into, and the version service, a named
actor holding the fleet's registry, its gate hand-off and rollback. The control loop
never crosses Ray: robots talk gRPC to their edge.

Ray is imported only by the modules that need it (:func:`tether.fleet.ray_support.
require_ray`), so ``import tether`` and the embedded backend work without the extra.
See docs/architecture.md ("Fleet on Ray").
"""
