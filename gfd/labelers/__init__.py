"""Labelers: pure functions from a Snapshot (and options) to labels, one module per area."""
