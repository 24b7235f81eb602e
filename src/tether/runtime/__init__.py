"""tether.runtime (see docs/architecture.md)."""
