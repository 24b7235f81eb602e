"""The replay buffer, split into storage, writer and sampler (see docs/data.md)."""
