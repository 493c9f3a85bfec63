"""The CEL that gfd writes (``gfd selector --dra``'s claims, the driver's DeviceClasses),
evaluated on a device as the scheduler would: clauses joined by ``&&``, each an equality, a
``lowerAscii().matches()`` or a ``compareTo(quantity(...) | semver(...)) >= 0`` over
``device.driver``, ``device.attributes[domain].name`` or ``device.capacity[domain].name``.

Anything else is not guessed at: ``matches`` answers None ("cannot tell")."""

from __future__ import annotations

import re
from dataclasses import dataclass

from gfd.fleet.model import Device
from gfd.fleet.quantity import parse_quantity

_LIT = r"'((?:[^'\\]|\\.)*)'"
_REF = r"device\.(attributes|capacity)\['([^']+)'\]\.([A-Za-z0-9_]+)"
_REF_ANY = re.compile(_REF)
_EQ = re.compile(rf"{_REF}\s*==\s*{_LIT}")
_DRIVER = re.compile(rf"device\.driver\s*==\s*{_LIT}")
_MATCH = re.compile(rf"{_REF}\.lowerAscii\(\)\.matches\({_LIT}\)")
_CMP = re.compile(rf"{_REF}\.compareTo\((quantity|semver)\({_LIT}\)\)\s*>=\s*0")
_SEMVER = re.compile(r"v?([0-9]+)(?:\.([0-9]+))?(?:\.([0-9]+))?")


def _unquote(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text)


def _value(device: Device, where: str, domain: str, name: str) -> str | int | bool | None:
    if domain != device.driver:
        return None
    return device.attributes.get(name) if where == "attributes" else device.capacity.get(name)


def _version(text: str) -> tuple[int, int, int] | None:
    match = _SEMVER.match(str(text))
    if not match:
        return None
    return (int(match.group(1)), int(match.group(2) or 0), int(match.group(3) or 0))


def _clause(text: str, device: Device) -> bool | None:
    text = text.strip()
    while text.startswith("(") and text.endswith(")"):
        text = text[1:-1].strip()
    if m := _DRIVER.fullmatch(text):
        return device.driver == _unquote(m.group(1))
    if (m := _REF_ANY.match(text)) and m.group(2) != device.driver:
        return None  # a domain gfd does not read (the standard resource.kubernetes.io)
    if m := _EQ.fullmatch(text):
        value = _value(device, m.group(1), m.group(2), m.group(3))
        return value is not None and str(value) == _unquote(m.group(4))
    if m := _MATCH.fullmatch(text):
        value = _value(device, m.group(1), m.group(2), m.group(3))
        return value is not None and re.search(_unquote(m.group(4)), str(value).lower()) is not None
    if m := _CMP.fullmatch(text):
        value = _value(device, m.group(1), m.group(2), m.group(3))
        if value is None:
            return False
        if m.group(4) == "quantity":
            want = parse_quantity(_unquote(m.group(5)))
            return want is not None and int(value) >= want
        have, wanted = _version(str(value)), _version(_unquote(m.group(5)))
        return have is not None and wanted is not None and have >= wanted
    return None


def matches(expression: str, device: Device) -> bool | None:
    """Whether ``device`` meets the expression; None when it is not of the forms above."""
    result: bool | None = True
    for clause in expression.split("&&"):
        answer = _clause(clause, device)
        if answer is False:
            return False
        if answer is None:
            result = None
    return result


@dataclass(frozen=True, slots=True)
class Outcome:
    matched: bool | None
    """None: cannot tell."""
    reason: str = ""


class Evaluator:
    """Evaluates selectors on devices."""

    def evaluate(self, expression: str, device: Device) -> Outcome:
        verdict = matches(expression, device)
        return Outcome(verdict, "" if verdict is not None else "a form not evaluated here")

    def matches(self, expression: str, device: Device) -> bool | None:
        return matches(expression, device)
