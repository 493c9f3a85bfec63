"""Property tests: the CEL evaluator on any expression and any device.

Promise: whatever the text (a dump may hold anything), ``Evaluator.evaluate`` returns an
Outcome, never raises; a None outcome carries a one-line reason; an expression it answers
answers alike every time (a kept outcome is the outcome a fresh evaluator gives).
"""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from fuzz.strategies import fuzz_settings, texts
from gfd.fleet.cel import Evaluator, Outcome
from gfd.fleet.model import Device, Version

A = "device.attributes['gpu.nvidia.com']"
PIECES = [
    A, "device.capacity['gpu.nvidia.com']", "device.driver", "device.attributes",
    "device.allowMultipleAllocations", ".type", ".productName", ".memory", ".count",
    ".driverVersion", "['gpu.nvidia.com']", "['x']", " == ", " != ", " && ", " || ", " ? ",
    " : ", " in ", " < ", " >= ", " + ", " - ", " * ", " / ", " % ", "!", "-", "(", ")", "[",
    "]", "{", "}", ",", ".", "'gpu'", '"Hopper"', "r'\\d+'", "'''x'''", "1", "0", "-1",
    "2.5", "3u", "9223372036854775807", "true", "false", "null", "has(", "size(", "int(",
    "string(", "quantity('40Gi')", "semver('550.0.0')", "quantity(", "semver(", ".compareTo(",
    ".isGreaterThan(", ".lowerAscii()", ".matches(", ".split(", ".join(", ".find(",
    ".all(x, ", ".exists(x, ", ".exists_one(x, ", ".map(x, ", ".filter(x, ", "x", "cel.bind(",
    ".min()", ".sum()", ".asInteger()", ".major()", "'(a)\\\\1'", "'^.*a100.*$'", "foo(",
    "sets.contains(", ".?", " ", "\\", "'", '"', "//",
]
expressions = st.one_of(
    texts,
    st.lists(st.sampled_from(PIECES), max_size=24).map("".join),
    st.text(alphabet="()[]{}!&|=<>?:.,'\"\\ abcdrxyz0129+-*/%", max_size=60),
)
DEVICES = (
    Device(driver="gpu.nvidia.com", pool="p", name="gpu-0", node="n",
           attributes={"type": "gpu", "productName": "NVIDIA H100 80GB HBM3", "count": 3,
                       "driverVersion": Version("550.54.15"), "on": True},
           capacity={"memory": 81559 * 2**20}),
    Device(driver="other.example.com", pool="p", name="d", node="n",
           attributes={"v": Version("1.0")}, capacity={}),
)


@fuzz_settings(300)
@given(expression=expressions)
@example(expression="(" * 5000)
@example(expression="[" * 3000 + "]" * 3000)
@example(expression=f"{A}.productName.matches('(a)\\\\1')")
@example(expression="[1,2,3,4,5,6,7,8,9,10].all(a, [1,2,3,4,5,6,7,8,9,10].all(b, "
                    "[1,2,3,4,5,6,7,8,9,10].all(c, [1,2,3,4,5,6,7,8,9,10].all(d, true))))")
@example(expression="quantity('1e999999999') == quantity('1')")
@example(expression="'\\uD800' == 'x'")
def test_evaluate_never_raises_and_says_why_it_cannot_tell(expression: str) -> None:
    evaluator = Evaluator()
    for device in DEVICES:
        got = evaluator.evaluate(expression, device)
        assert isinstance(got, Outcome)
        assert got.matched in (True, False, None)
        if got.matched is None:
            assert got.reason and "\n" not in got.reason
        assert evaluator.evaluate(expression, device) == got
        assert Evaluator().evaluate(expression, device) == got
