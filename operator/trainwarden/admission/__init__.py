"""The admission policy slice (docs/architecture.md)."""
