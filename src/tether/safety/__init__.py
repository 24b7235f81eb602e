"""tether.safety (see docs/architecture.md)."""
