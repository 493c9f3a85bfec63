"""``gpu.machine``: the machine-type file trimmed and sanitised, ``unknown`` when unreadable
(docs/gfd-compatibility.md, "Machine type")."""

from __future__ import annotations

import pytest
from helpers.builders import P, gpu, labels, snapshot

from gfd.labelers.machine import machine
from gfd.labelers.options import LabelOptions

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


# --- the labeler itself, with its provenance (what `gfd explain` prints) ---


def test_the_raw_file_content_and_the_rules_are_kept() -> None:
    label = machine(snapshot(gpu(), machine=" DGX H100\n"), LabelOptions()).labels[
        P + "gpu.machine"]
    assert (label.value, label.raw, label.rules) == ("DGX-H100", " DGX H100\n",
                                                     ("trim whitespace", "sanitise"))


def test_an_unreadable_file_says_why_it_is_unknown() -> None:
    label = machine(snapshot(gpu(), machine=None), LabelOptions()).labels[P + "gpu.machine"]
    assert label.value == "unknown" and label.raw == "" and "unreadable" in label.rules[0]
