"""A pretrained policy that drives the arm hard, kept as a fixed adversary for the supervisor.

It is the bundle ``tether`` shipped until 2026-11-30 (``pretrained-arm-seed3``: pretrained
without the supervisor, so it leans on joint limits and swings through the obstacle).
Safety tests pin episodes of it in which a weaker guard measurably failed; those episodes
only mean something for this exact policy, so it lives here instead of following the
shipped bundle, which is now pretrained with the supervisor in the loop and is gentler.
"""

from __future__ import annotations

from pathlib import Path

from tether.policy.bundle import PolicyBundle, load_bundle

ADVERSARY_BUNDLE = Path(__file__).parent / "assets" / "arm-hard-driver"


def load_adversary() -> PolicyBundle:
    """The adversary bundle, verified like any other."""
    return load_bundle(ADVERSARY_BUNDLE)
