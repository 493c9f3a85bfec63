"""``gpu.machine``: the machine-type file trimmed and sanitised, ``unknown`` when unreadable
(docs/gfd-compatibility.md, "Machine type")."""

from __future__ import annotations

import pytest
from helpers.builders import gpu, labels, snapshot

MACHINE_CASES = [
    ("DGX H100\n", "DGX-H100"),
    ("  PowerEdge XE9680  \n", "PowerEdge-XE9680"),
    ("g4dn.xlarge", "g4dn.xlarge"),
    ("ProLiant DL380 Gen10 (HPE)", "ProLiant-DL380-Gen10-HPE"),
    ("DGXA100 920-23687-2530-000", "DGXA100-920-23687-2530-000"),
    (None, "unknown"),
]


@pytest.mark.parametrize(("raw", "value"), MACHINE_CASES,
                         ids=[repr(r) for r, _ in MACHINE_CASES])
def test_machine_type_trimmed_and_sanitised(raw: str | None, value: str) -> None:
    assert labels(snapshot(gpu(), machine=raw))["gpu.machine"] == value
