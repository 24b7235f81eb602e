"""tether.policy (see docs/architecture.md)."""
