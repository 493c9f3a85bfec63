"""Property tests: the ``nvidia-smi compute-policy --list`` parser on any text.

Promises: ``gpu.timeslice`` is one of ``default``/``short``/``medium``/``long``; nvidia-smi
is only a helper (its absence is normal) and garbage from it never breaks a cycle; the parser
never crashes.
"""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from fuzz.strategies import fuzz_settings, texts
from gfd.readers.smi import TIMESLICE_VALUES, parse_timeslices

SUPPORTED = """\
+-------------------------------------+
| GPU compute policies:               |
| GPU   Name                 Value    |
|=====================================|
| 0     Timeslice            Default  |
| 1     Timeslice            Long     |
+-------------------------------------+
"""
GEFORCE = "Failed to get compute policies for GPU 0 : Not Supported\n"

# Lines shaped like the table's rows, with hostile variations in every column.
rows = st.builds(
    lambda box1, index, name, value, box2, pad: f"{box1}{pad}{index}{pad}{name}{pad}{value}"
                                                f"{pad}{box2}",
    st.sampled_from(["|", "│", "┃", "", " | "]),
    st.one_of(st.integers(0, 10**30).map(str), st.sampled_from(["-1", "0x1", "٣", "", "1.0"])),
    st.sampled_from(["Timeslice", "TIMESLICE", "timeslice", "Timeslice ", "Other", "Time slice"]),
    st.one_of(st.sampled_from(["Default", "short", "MEDIUM", "Long", "Longer", "N/A", "", "İ",
                               "\u017fhort", "\u212a"]), texts),
    st.sampled_from(["|", "│", "┃", "", "|||"]),
    st.sampled_from([" ", "   ", "\t", "\u00a0", "\u3000"]),
)
outputs = st.one_of(
    texts,
    st.lists(st.one_of(rows, texts), max_size=12).map("\n".join),
    st.lists(rows, max_size=12).map("\r\n".join),
)


def _check(output: str) -> dict[int, str]:
    result = parse_timeslices(output)
    assert isinstance(result, dict)
    for index, value in result.items():
        assert type(index) is int and index >= 0
        assert value in TIMESLICE_VALUES
    return result


def test_real_outputs_parse() -> None:
    """gpu.timeslice: the real table shape gives per-GPU policies; GeForce's
    failure text gives none."""
    assert _check(SUPPORTED) == {0: "default", 1: "long"}
    assert _check(GEFORCE) == {}


@fuzz_settings(200)
@given(outputs)
@example(SUPPORTED)
@example(GEFORCE)
@example(SUPPORTED.replace("|", "│"))
@example("0 Timeslice Default\x850 Timeslice Long\u20281 Timeslice short")
def test_any_output_never_crashes_and_gives_only_known_policies(output: str) -> None:
    """Any text gives a dict of int GPU index -> one of default, short,
    medium, long; nothing else, never an exception."""
    _check(output)


def test_an_absurdly_long_gpu_index_is_skipped_not_a_crash() -> None:
    """nvidia-smi output never breaks a cycle, and the parser never crashes: a row
    with a 5000-digit GPU index is garbage, to be skipped like any unparseable row."""
    output = SUPPORTED + f"| {'1' * 5000}     Timeslice            Default  |\n"
    assert _check(output) == {0: "default", 1: "long"}
