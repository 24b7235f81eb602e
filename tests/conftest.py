"""Suite-wide settings.

Hypothesis runs without its wall-clock checks (per-example deadline, slow-generation
health check): on a shared 2-core CI machine they measure the neighbours, not the code.
A test's own ``@settings`` still sets its example count.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings

settings.register_profile("tether", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("tether")
