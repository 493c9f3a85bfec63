"""Fixtures for the fault tests: `gfd run` processes that are always reaped."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from test_run import Agent


@pytest.fixture
def agents() -> Iterator[list[Agent]]:
    """Agents started by a test; any still running at teardown are killed and reaped."""
    started: list[Agent] = []
    yield started
    for agent in started:
        if agent.proc.poll() is None:
            agent.proc.kill()
            agent.proc.wait()
        if not agent.log.closed:
            agent.log.close()
