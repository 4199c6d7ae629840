"""The budget policy slice (docs/architecture.md)."""
