"""tether.data (see docs/architecture.md)."""
