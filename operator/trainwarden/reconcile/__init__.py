"""Observe, decide (core), act (adapters), record status: one module per kind."""
