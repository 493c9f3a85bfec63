"""Fixtures for the fault tests: `gfd run` processes that are always reaped (from test_run)."""

from test_run import agents

__all__ = ["agents"]
