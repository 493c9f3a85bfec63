"""The console scripts' start: a SIGHUP before the agent's own handlers is recorded, not fatal.

The process-level promise (a SIGHUP at any moment of start-up is a reload) is tested in
tests/faults/test_process_faults.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from gfd.launch import EarlyReload


@pytest.fixture
def restore_sighup() -> Iterator[None]:
    previous = signal.getsignal(signal.SIGHUP)
    yield
    signal.signal(signal.SIGHUP, previous)


def test_a_sighup_is_recorded_instead_of_ending_the_process(restore_sighup: None) -> None:
    early = EarlyReload().install()
    assert signal.getsignal(signal.SIGHUP) is early
    assert not early.requested
    os.kill(os.getpid(), signal.SIGHUP)
    assert early.requested


def test_the_launch_module_imports_nothing_heavy_before_it_holds_sighup() -> None:
    # the handler must be in place before the slow imports (click, yaml, the kube client)
    code = ("import sys, gfd.launch; heavy = [m for m in ('click', 'yaml', 'kubernetes', "
            "'pynvml', 'gfd.cli') if m in sys.modules]; print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=30).stdout
    assert out.strip() == "[]"
