"""The receipts policy slice (docs/architecture.md)."""
