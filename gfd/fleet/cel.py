"""Whether a device meets a DeviceClass's or a claim's CEL selector, as Kubernetes' DRA
allocator decides it, or "cannot tell" (with why) where gfd does not evaluate it exactly."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gfd.fleet.model import Device, Version

if TYPE_CHECKING:
    from gfd.fleet import celeval, cellib

MAX_LENGTH = 10 * 1024
"""``CELSelectorExpressionMaxLength`` (``k8s.io/api/resource/v1``): the API server refuses a
longer selector."""
BUDGET = 10_000
"""Steps (parse-tree nodes visited, elements and characters made) one evaluation may take:
a selector of the driver's or gfd's takes under 100; the allocator's own limit is 1,000,000
cost units (``CELSelectorExpressionMaxCost``), which gfd's interpreter would need seconds
for."""
CACHE = 4096
"""Expressions kept compiled by one Evaluator."""
OUTCOMES = 65536
"""Outcomes kept by one Evaluator, by expression and what of the device it reads (a fleet's
identical GPUs differ only in attributes a selector seldom reads: uuid, pciBusID)."""


_LITERAL = r"""(?:'([^'\\\n]*)'|"([^"\\\n]*)")"""
_CLAUSE = re.compile(
    rf"\s*(?:device\.driver|device\.attributes\[{_LITERAL}\]\.([A-Za-z_][A-Za-z0-9_]*))"
    rf"\s*==\s*{_LITERAL}\s*")
_SEMVER = re.compile(
    r"(0|[1-9][0-9]{0,18})\.(0|[1-9][0-9]{0,18})\.(0|[1-9][0-9]{0,18})"
    r"(?:-(?:0|[1-9][0-9]{0,18}|[0-9]*[A-Za-z-][0-9A-Za-z-]*)"
    r"(?:\.(?:0|[1-9][0-9]{0,18}|[0-9]*[A-Za-z-][0-9A-Za-z-]*))*)?"
    r"(?:\+[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*)?")
"""A semantic version blang/semver's ``Parse`` surely takes (numbers kept within uint64)."""


def _plain(expression: str, device: Device) -> Outcome | None:
    """The selectors the driver's chart and most classes hold -- string equalities over
    ``device.driver`` and the device's string attributes, joined by ``&&``, in either quote
    style -- decided without the interpreter, as CEL decides them (a missing attribute an
    error that a false clause beside it overrides: ``&&`` is commutative over errors); None
    for anything else, and wherever a version attribute might fail to parse (the interpreter
    then answers, exactly as it would have)."""
    clauses = expression.split("&&")
    if len(clauses) > 8 or any(isinstance(v, Version) and not _SEMVER.fullmatch(v)
                               for v in device.attributes.values()):
        return None
    error = ""
    for clause in clauses:
        m = _CLAUSE.fullmatch(clause)
        if m is None:
            return None
        domain, name, want = (m.group(1) or m.group(2)), m.group(3), \
            (m.group(4) if m.group(4) is not None else m.group(5))
        if name is None:
            have: object = device.driver
        else:
            key = name if domain == device.driver else f"{domain}/{name}"
            if key not in device.attributes:
                error = error or f"CEL runtime error: no such key: {name}"
                continue
            have = device.attributes[key]
            if not isinstance(have, str) or isinstance(have, Version):
                return None  # another type beside a string: the interpreter's to say
        if have != want:
            return Outcome(False)
    return Outcome(None, error) if error else Outcome(True)


@dataclass(frozen=True, slots=True)
class Outcome:
    matched: bool | None
    """None: cannot tell."""
    reason: str = ""
    """For None: one line saying why."""


class Evaluator:
    """Compiles each expression once (a cache inside the instance; no module-level mutable
    state). cel-python (``celpy``) is imported on first use."""

    def __init__(self, *, budget: int = BUDGET) -> None:
        self._budget = budget
        self._compiled: dict[str, celeval.Compiled | str] = {}
        self._parser: Any = None
        self._patterns: cellib.Patterns | None = None
        self._outcomes: dict[tuple[Any, ...], Outcome] = {}
        self._versions: dict[str, str] = {}

    def _compile(self, expression: str) -> celeval.Compiled | str:
        from gfd.fleet import celeval

        found = self._compiled.get(expression)
        if found is None:
            if self._parser is None:
                self._parser = celeval.parser()
            found = celeval.compile_expression(self._parser, expression)
            if len(self._compiled) >= CACHE:
                del self._compiled[next(iter(self._compiled))]
            self._compiled[expression] = found
        return found

    def evaluate(self, expression: str, device: Device) -> Outcome:
        if len(expression.encode()) > MAX_LENGTH:
            return Outcome(None, f"longer than the API server allows ({MAX_LENGTH} bytes, "
                                 "CELSelectorExpressionMaxLength)")
        try:
            return _plain(expression, device) or self._evaluate(expression, device)
        except Exception as exc:
            return Outcome(None, _line(f"not evaluated here: {type(exc).__name__}: {exc}"))

    def _evaluate(self, expression: str, device: Device) -> Outcome:
        from gfd.fleet import celeval, cellib

        compiled = self._compile(expression)
        if isinstance(compiled, str):
            return Outcome(None, _line(compiled))
        bad = celeval.bad_version(device, self._versions)
        if bad:
            return Outcome(None, f"CEL runtime error: {bad}")
        key = (expression, compiled.key(device))
        found = self._outcomes.get(key)
        if found is None:
            if self._patterns is None:
                self._patterns = cellib.Patterns()
            matched, reason = celeval.run(compiled, celeval.device_value(device),
                                          patterns=self._patterns, budget=self._budget)
            found = Outcome(matched, _line(reason))
            if len(self._outcomes) >= OUTCOMES:
                del self._outcomes[next(iter(self._outcomes))]
            self._outcomes[key] = found
        return found

    def matches(self, expression: str, device: Device) -> bool | None:
        return self.evaluate(expression, device).matched


def _line(reason: str, *, width: int = 200) -> str:
    """A reason as one line of at most ``width`` characters (a key or a pattern quoted in it
    may be long, or hold a newline)."""
    flat = " ".join(reason.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def matches(expression: str, device: Device) -> bool | None:
    """Whether ``device`` meets ``expression``; None when that cannot be told (a one-off
    Evaluator: callers evaluating many should keep one)."""
    return Evaluator().matches(expression, device)
