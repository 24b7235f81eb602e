"""tether.learning (see docs/architecture.md)."""
