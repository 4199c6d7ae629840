"""The kueue policy slice (docs/architecture.md)."""
