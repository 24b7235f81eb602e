"""The small, fast fleet the ``ray`` suite runs: 4 robots on 2 edges, one learner."""

from __future__ import annotations

from pathlib import Path

from tether.runtime.config import RunConfig


def fleet_config(out_dir: Path, *, duration_s: float = 120.0) -> RunConfig:
    return RunConfig.build(
        {
            "backend": "ray",
            "fast": False,
            "dashboard": "off",
            "duration_s": duration_s,
            "snapshot_interval_s": 1.0,
            "out_dir": str(out_dir),
            "fleet": {"robots": 4, "baseline": False},
            "drift": {"preset": "none"},
            "ray": {"edges": 2, "sync_interval_s": 0.1},
            "learner": {
                # SAC publishes on a healthy arm too; the hindsight learner publishes only
                # a reach change worth the gate (a centimetre), which an undrifted arm
                # seldom asks for. These tests judge the fleet, not the learner.
                "algorithm": "sac",
                "torch_threads": 1,
                "nice": 0,
                "checkpoint_interval_s": 2.0,
                "updates_per_transition": 0.05,
                # The broadcast is what these tests judge, not the gate: publications go
                # live at once (the clearly labelled unsafe option) so promotions come fast.
                "publication": {"min_interval_s": 1.0, "promote_directly": True},
                "gate": {"simulation": {"enabled": False}},
                "fine_tune_interval_factor": 1.0,
            },
        }
    )
