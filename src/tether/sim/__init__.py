"""tether.sim (see docs/architecture.md)."""
