"""The checkpoints policy slice (docs/architecture.md)."""
