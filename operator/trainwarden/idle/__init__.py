"""The idle policy slice (docs/architecture.md)."""
