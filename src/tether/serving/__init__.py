"""tether.serving (see docs/architecture.md)."""
