"""Versioned API types."""
