"""The functions of Kubernetes' DRA CEL environment with cel-go's semantics: the strings
extension (version 2), Kubernetes' regex, lists, quantity and semver libraries, and the table
of every function and operator an evaluation binds."""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import re2
from celpy import celtypes as ct
from celpy.evaluation import CELEvalError

from gfd.fleet.celops import (
    INT_MAX,
    INT_MIN,
    OPERATORS,
    UINT_MAX,
    Meter,
    Quantity,
    Semver,
    Unsupported,
    Value,
    add,
    compare,
    equal,
    error,
    no_overload,
    numeric,
    semver_compare,
    size,
    to_bool,
    to_double,
    to_int,
    to_string,
    to_uint,
)

GO_SPACE = frozenset("\t\n\v\f\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000"
                     + "".join(chr(c) for c in range(0x2000, 0x200B)))
"""``unicode.IsSpace``: what Go's ``strings.TrimSpace`` (the strings extension's ``trim``)
removes."""
MAX_EXPONENT = 400
"""A quantity's decimal exponent beyond this is not evaluated (exact arithmetic on it would
take unbounded time; no device has such a quantity)."""
Function = Callable[..., Value]


# --------------------------------------------------------------------------- strings


def _strings(*args: Value, ints: int = 0) -> bool:
    """Whether the arguments are strings followed by ``ints`` ints."""
    head, tail = args[: len(args) - ints], args[len(args) - ints:]
    return all(isinstance(a, ct.StringType) for a in head) and \
        all(isinstance(a, ct.IntType) for a in tail)


def contains(s: Value, sub_: Value) -> Value:
    return ct.BoolType(sub_ in s) if _strings(s, sub_) else no_overload("contains", s, sub_)


def starts_with(s: Value, prefix: Value) -> Value:
    return ct.BoolType(s.startswith(prefix)) if _strings(s, prefix) \
        else no_overload("startsWith", s, prefix)


def ends_with(s: Value, suffix: Value) -> Value:
    return ct.BoolType(s.endswith(suffix)) if _strings(s, suffix) \
        else no_overload("endsWith", s, suffix)


def char_at(s: Value, i: Value) -> Value:
    if not _strings(s, i, ints=1):
        return no_overload("charAt", s, i)
    if not 0 <= int(i) <= len(s):
        return error(f"index out of range: {int(i)}")
    return ct.StringType(s[int(i)] if int(i) < len(s) else "")


def index_of(target: Value, item: Value, offset: Value = None) -> Value:
    if isinstance(target, ct.ListType) and offset is None:
        for i, element in enumerate(target):
            same = equal(element, item)
            if isinstance(same, ct.BoolType) and same:
                return ct.IntType(i)
        return ct.IntType(-1)
    args = (target, item) if offset is None else (target, item, offset)
    if not _strings(*args, ints=len(args) - 2):
        return no_overload("indexOf", *args)
    off = 0 if offset is None else int(offset)
    if item == "":
        return ct.IntType(off)
    if off < 0:
        return error(f"index out of range: {off}")
    return ct.IntType(target.find(item, off) if off < len(target) else -1)


def last_index_of(target: Value, item: Value, offset: Value = None) -> Value:
    if isinstance(target, ct.ListType) and offset is None:
        for i in range(len(target) - 1, -1, -1):
            same = equal(target[i], item)
            if isinstance(same, ct.BoolType) and same:
                return ct.IntType(i)
        return ct.IntType(-1)
    args = (target, item) if offset is None else (target, item, offset)
    if not _strings(*args, ints=len(args) - 2):
        return no_overload("lastIndexOf", *args)
    if offset is None:
        if item == "":
            return ct.IntType(len(target))
        if len(target.encode()) < len(item.encode()):
            return ct.IntType(-1)
        off = len(target) - 1
    else:
        off = int(offset)
        if item == "":
            return ct.IntType(off)
    if off < 0:
        return error(f"index out of range: {off}")
    if off >= len(target):
        return ct.IntType(-1)
    off = min(off, len(target) - len(item))
    return ct.IntType(target.rfind(item, 0, off + len(item)) if off >= 0 else -1)


_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_UPPER = str.maketrans("abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")


def lower_ascii(s: Value) -> Value:
    return ct.StringType(s.translate(_LOWER)) if _strings(s) else no_overload("lowerAscii", s)


def upper_ascii(s: Value) -> Value:
    return ct.StringType(s.translate(_UPPER)) if _strings(s) else no_overload("upperAscii", s)


def trim(s: Value) -> Value:
    if not _strings(s):
        return no_overload("trim", s)
    start, end = 0, len(s)
    while start < end and s[start] in GO_SPACE:
        start += 1
    while end > start and s[end - 1] in GO_SPACE:
        end -= 1
    return ct.StringType(s[start:end])


def go_replace(s: str, old: str, new: str, n: int) -> str:
    """Go's ``strings.Replace``."""
    return s.replace(old, new, n if n >= 0 else -1)


def go_split(s: str, sep: str, n: int) -> list[str]:
    """Go's ``strings.SplitN`` (``Split`` is n = -1)."""
    if n == 0:
        return []
    if sep == "":
        runes = list(s)
        if n < 0 or n > len(runes):
            n = len(runes)
        return [*runes[:n - 1], "".join(runes[n - 1:])] if n > 0 else []
    return s.split(sep, n - 1) if n > 0 else s.split(sep)


def bind_strings(meter: Meter) -> dict[str, Function]:
    """The functions that make strings or lists, charged to ``meter``."""

    def replace(s: Value, old: Value, new: Value, n: Value = None) -> Value:
        args = (s, old, new) if n is None else (s, old, new, n)
        if not _strings(*args, ints=len(args) - 3):
            return no_overload("replace", *args)
        count = s.count(old) if old else len(s) + 1
        meter.spend(len(s) + count * len(new))
        return ct.StringType(go_replace(s, old, new, -1 if n is None else int(n)))

    def split(s: Value, sep: Value, n: Value = None) -> Value:
        args = (s, sep) if n is None else (s, sep, n)
        if not _strings(*args, ints=len(args) - 2):
            return no_overload("split", *args)
        meter.spend(len(s))
        return ct.ListType([ct.StringType(p) for p in go_split(s, sep, -1 if n is None
                                                               else int(n))])

    def substring(s: Value, start: Value, end: Value = None) -> Value:
        args = (s, start) if end is None else (s, start, end)
        if not _strings(*args, ints=len(args) - 1):
            return no_overload("substring", *args)
        b, e = int(start), len(s) if end is None else int(end)
        if end is not None and b > e:
            return error(f"invalid substring range. start: {b}, end: {e}")
        for i in (b, e):
            if not 0 <= i <= len(s):
                return error(f"index out of range: {i}")
        meter.spend(e - b)
        return ct.StringType(s[b:e])

    def join(items: Value, sep: Value = None) -> Value:
        if not isinstance(items, ct.ListType) or \
                (sep is not None and not isinstance(sep, ct.StringType)):
            return no_overload("join", items)
        parts: list[str] = []
        for item in items:
            if not isinstance(item, ct.StringType):
                return error(f"join: invalid input: {item!r}")
            parts.append(str(item))
        meter.spend(sum(len(p) for p in parts))
        return ct.StringType(("" if sep is None else str(sep)).join(parts))

    return {"replace": replace, "split": split, "substring": substring, "join": join}


# --------------------------------------------------------------------------- regex


@dataclass(slots=True)
class Patterns:
    """RE2 patterns compiled once an evaluator (cel-go compiles a literal pattern once)."""

    compiled: dict[str, Any] = field(default_factory=dict)

    def get(self, pattern: str) -> Any:
        if pattern not in self.compiled:
            if re.search(r"(?<!\\)(?:\\\\)*\\C", pattern):
                raise Unsupported(r"a pattern with \C (C++ RE2 accepts it, Go rejects it)")
            options = re2.Options()
            options.log_errors = False
            try:
                self.compiled[pattern] = re2.compile(pattern, options)
            except re2.error as exc:
                detail = exc.args[0].decode() if exc.args and isinstance(exc.args[0], bytes) \
                    else str(exc)
                self.compiled[pattern] = error(f"error parsing regexp: {detail}: `{pattern}`")
        return self.compiled[pattern]

    def bind(self, meter: Meter) -> dict[str, Function]:
        def matches(s: Value, pattern: Value) -> Value:
            if not _strings(s, pattern):
                return no_overload("matches", s, pattern)
            compiled = self.get(pattern)
            if isinstance(compiled, CELEvalError):
                return compiled
            meter.spend(len(s))
            return ct.BoolType(compiled.search(s) is not None)

        def find_(s: Value, pattern: Value) -> Value:
            found = find_all(s, pattern, ct.IntType(1))
            if not isinstance(found, ct.ListType):
                return found
            return found[0] if found else ct.StringType("")

        def find_all(s: Value, pattern: Value, n: Value = None) -> Value:
            args = (s, pattern) if n is None else (s, pattern, n)
            if not _strings(*args, ints=len(args) - 2):
                return no_overload("findAll", *args)
            compiled = self.get(pattern)
            if isinstance(compiled, CELEvalError):
                return compiled
            limit = len(s) + 1 if n is None or int(n) < 0 else int(n)
            out: list[Value] = []
            pos, previous_end = 0, -1
            while len(out) < limit and pos <= len(s):
                m = compiled.search(s, pos)
                meter.spend(1 + (len(s) if m is None else m.end()) - pos)
                if m is None:
                    break
                start, end = m.span()
                accept = True
                if end == pos:
                    accept = start != previous_end
                    pos += 1
                else:
                    pos = end
                previous_end = end
                if accept:
                    out.append(ct.StringType(s[start:end]))
            return ct.ListType(out)

        return {"matches": matches, "find": find_, "findAll": find_all}


# --------------------------------------------------------------------------- lists


def is_sorted(items: Value) -> Value:
    if not isinstance(items, ct.ListType):
        return no_overload("isSorted", items)
    for a, b in itertools.pairwise(items):
        if not _comparable(a):
            return no_overload("isSorted", a)
        order = compare(a, b, "isSorted")
        if not isinstance(order, ct.IntType):
            return order
        if int(order) == 1:
            return ct.BoolType(False)
    for item in items:
        if not _comparable(item):
            return no_overload("isSorted", item)
    return ct.BoolType(True)


def _comparable(value: Value) -> bool:
    """A ``traits.Comparer``: the lists library's min, max and isSorted take no other."""
    return numeric(value) or isinstance(value, (ct.BoolType, ct.StringType, ct.BytesType))


def list_sum(items: Value) -> Value:
    if not isinstance(items, ct.ListType):
        return no_overload("sum", items)
    if not items:
        raise Unsupported("sum() of an empty list (its type picks the zero)")
    total = items[0]
    if not numeric(total):
        return no_overload("sum", total)
    for item in items[1:]:
        total = add(total, item)
        if isinstance(total, CELEvalError):
            return total
    return total


def _extreme(name: str, prefer: int) -> Function:
    def pick(items: Value) -> Value:
        if not isinstance(items, ct.ListType):
            return no_overload(name, items)
        best: Value = None
        for item in items:
            if not _comparable(item):
                return no_overload(name, item)
            if best is None:
                best = item
                continue
            order = compare(best, item, name)
            if not isinstance(order, ct.IntType):
                return order
            if int(order) == prefer:
                best = item
        return error(f"{name} called on empty list") if best is None else best
    return pick


# --------------------------------------------------------------------------- quantity


_QUANTITY_SUFFIX: dict[str, tuple[int, int]] = {
    "": (10, 0), "n": (10, -9), "u": (10, -6), "m": (10, -3), "k": (10, 3), "M": (10, 6),
    "G": (10, 9), "T": (10, 12), "P": (10, 15), "E": (10, 18),
    "Ki": (2, 10), "Mi": (2, 20), "Gi": (2, 30), "Ti": (2, 40), "Pi": (2, 50), "Ei": (2, 60)}
_QUANTITY = re.compile(r"([+-]?)([0-9]*)(?:\.([0-9]*))?([eEinumkKMGTP]*[+-]?[0-9]*)")
_NANO = Fraction(1, 10**9)


def parse_quantity(text: str) -> Quantity | None:
    """``resource.ParseQuantity``: None where it fails."""
    if text == "":
        return None
    m = _QUANTITY.fullmatch(text)
    if m is None:
        return None
    sign, whole, frac, suffix = m.group(1), m.group(2), m.group(3), m.group(4)
    interpreted = _suffix(suffix)
    if interpreted is None:
        return None
    base, exponent = interpreted
    magnitude = Fraction(int(whole or "0")) + \
        (Fraction(int(frac), 10 ** len(frac)) if frac else 0)
    if base == 2:
        magnitude *= 2**exponent
    else:
        if abs(exponent) > MAX_EXPONENT:
            raise Unsupported("a quantity with a decimal exponent beyond 400")
        magnitude *= Fraction(10) ** exponent
    if magnitude:
        nanos = magnitude / _NANO
        magnitude = -(-nanos.numerator // nanos.denominator) * _NANO
    if base == 2 and suffix in ("Ki", "Mi", "Gi", "Ti", "Pi", "Ei") and magnitude > INT_MAX:
        magnitude = Fraction(INT_MAX)
    return Quantity(-magnitude if sign == "-" else magnitude)


def _suffix(suffix: str) -> tuple[int, int] | None:
    if suffix in _QUANTITY_SUFFIX:
        return _QUANTITY_SUFFIX[suffix]
    if len(suffix) > 1 and suffix[0] in "eE" and re.fullmatch(r"[+-]?[0-9]+", suffix[1:]):
        exponent = int(suffix[1:])
        return (10, exponent) if -(2**31) <= exponent < 2**31 else None
    return None


def quantity(text: Value) -> Value:
    if not isinstance(text, ct.StringType):
        return no_overload("quantity", text)
    parsed = parse_quantity(str(text))
    return parsed if parsed is not None else \
        error("quantities must match the regular expression "
              "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")


def is_quantity(text: Value) -> Value:
    if not isinstance(text, ct.StringType):
        return no_overload("isQuantity", text)
    return ct.BoolType(parse_quantity(str(text)) is not None)


def _quantities(name: str, a: Value, b: Value) -> CELEvalError | None:
    return None if isinstance(a, Quantity) and isinstance(b, Quantity) else no_overload(name, a, b)


def _semvers(name: str, a: Value, b: Value) -> CELEvalError | None:
    return None if isinstance(a, Semver) and isinstance(b, Semver) else no_overload(name, a, b)


def compare_to(a: Value, b: Value) -> Value:
    if isinstance(a, Semver):
        return _semvers("compareTo", a, b) or ct.IntType(semver_compare(a, b))
    return _quantities("compareTo", a, b) or ct.IntType((a.value > b.value) - (a.value < b.value))


def is_greater_than(a: Value, b: Value) -> Value:
    if isinstance(a, Semver):
        return _semvers("isGreaterThan", a, b) or ct.BoolType(semver_compare(a, b) == 1)
    return _quantities("isGreaterThan", a, b) or ct.BoolType(a.value > b.value)


def is_less_than(a: Value, b: Value) -> Value:
    if isinstance(a, Semver):
        return _semvers("isLessThan", a, b) or ct.BoolType(semver_compare(a, b) == -1)
    return _quantities("isLessThan", a, b) or ct.BoolType(a.value < b.value)


def quantity_add(a: Value, b: Value) -> Value:
    if isinstance(a, Quantity) and isinstance(b, ct.IntType):
        return Quantity(a.value + int(b))
    return _quantities("add", a, b) or Quantity(a.value + b.value)


def quantity_sub(a: Value, b: Value) -> Value:
    if isinstance(a, Quantity) and isinstance(b, ct.IntType):
        return Quantity(a.value - int(b))
    return _quantities("sub", a, b) or Quantity(a.value - b.value)


def _integral(q: Quantity) -> bool:
    return q.value.denominator == 1 and INT_MIN <= q.value.numerator <= INT_MAX


def as_integer(q: Value) -> Value:
    if not isinstance(q, Quantity):
        return no_overload("asInteger", q)
    return ct.IntType(q.value.numerator) if _integral(q) else \
        error("cannot convert value to integer")


def is_integer(q: Value) -> Value:
    return ct.BoolType(_integral(q)) if isinstance(q, Quantity) else no_overload("isInteger", q)


def as_approximate_float(q: Value) -> Value:
    if not isinstance(q, Quantity):
        return no_overload("asApproximateFloat", q)
    if q.value.denominator != 1 or abs(q.value.numerator) > 2**53:
        raise Unsupported("asApproximateFloat() of a quantity that is not a whole number "
                          "below 2^53 (Go's float arithmetic is not reproduced)")
    return ct.DoubleType(float(q.value.numerator))


def sign(q: Value) -> Value:
    if not isinstance(q, Quantity):
        return no_overload("sign", q)
    return ct.IntType((q.value > 0) - (q.value < 0))


# --------------------------------------------------------------------------- semver


_DIGITS = re.compile(r"[0-9]*")
_ALNUM = re.compile(r"[0-9A-Za-z-]*")


def parse_semver(text: str) -> Semver | str:
    """blang/semver v4's ``Parse``: the version, or why not."""
    if not text:
        return "Version string empty"
    parts = text.split(".", 2)
    if len(parts) != 3:
        return "No Major.Minor.Patch elements found"
    numbers = []
    patch, build, pre = parts[2], "", None
    if "+" in patch:
        patch, build = patch.split("+", 1)
    if "-" in patch:
        patch, pre = patch.split("-", 1)
    for what, part in (("Major", parts[0]), ("Minor", parts[1]), ("Patch", patch)):
        if not _DIGITS.fullmatch(part):
            return f"Invalid character(s) found in {what.lower()} number {part!r}"
        if len(part) > 1 and part[0] == "0":
            return f"{what} number must not contain leading zeroes {part!r}"
        if not part or int(part) > UINT_MAX:
            return f"invalid {what.lower()} number {part!r}"
        numbers.append(int(part))
    pres: list[int | str] = []
    for p in pre.split(".") if pre is not None else []:
        if not p:
            return "Prerelease is empty"
        if _DIGITS.fullmatch(p):
            if len(p) > 1 and p[0] == "0":
                return f"Numeric PreRelease version must not contain leading zeroes {p!r}"
            if int(p) > UINT_MAX:
                return f"invalid PreRelease version {p!r}"
            pres.append(int(p))
        elif _ALNUM.fullmatch(p):
            pres.append(p)
        else:
            return f"Invalid character(s) found in prerelease {p!r}"
    builds = build.split(".") if "+" in parts[2] else []
    for b in builds:
        if not b:
            return "Build meta data is empty"
        if not _ALNUM.fullmatch(b):
            return f"Invalid character(s) found in build meta data {b!r}"
    return Semver(numbers[0], numbers[1], numbers[2], tuple(pres), tuple(builds))


def normalize_semver(text: str) -> Semver | str:
    """``normalizeAndParse`` (Kubernetes' semver library, ``semver(s, true)``)."""
    parts = text.removeprefix("v").split(".", 2)
    for i, p in enumerate(parts):
        if len(p) > 1:
            p = p.lstrip("0")
            if not p or p[0] not in "0123456789":
                p = "0" + p
            parts[i] = p
    if len(parts) < 3:
        if any(c in parts[-1] for c in "+-"):
            return "short version cannot contain PreRelease/Build meta data"
        parts += ["0"] * (3 - len(parts))
    return parse_semver(".".join(parts))




def semver(text: Value, normalize: Value = None) -> Value:
    if not isinstance(text, ct.StringType) or \
            (normalize is not None and not isinstance(normalize, ct.BoolType)):
        return no_overload("semver", text)
    parsed = normalize_semver(text) if normalize else parse_semver(text)
    return error(parsed) if isinstance(parsed, str) else parsed


def is_semver(text: Value, normalize: Value = None) -> Value:
    if not isinstance(text, ct.StringType) or \
            (normalize is not None and not isinstance(normalize, ct.BoolType)):
        return no_overload("isSemver", text)
    parsed = normalize_semver(text) if normalize else parse_semver(text)
    return ct.BoolType(isinstance(parsed, Semver))


def _semver_part(name: str) -> Function:
    def part(v: Value) -> Value:
        if not isinstance(v, Semver):
            return no_overload(name, v)
        number = int(getattr(v, name))
        if number > INT_MAX:
            raise Unsupported(f"{name}() beyond int64 (Go wraps it)")
        return ct.IntType(number)
    return part


# --------------------------------------------------------------------------- the table



FUNCTIONS: dict[str, Function] = {
    "size": size, "int": to_int, "uint": to_uint, "double": to_double, "string": to_string,
    "bool": to_bool, "contains": contains, "startsWith": starts_with, "endsWith": ends_with,
    "charAt": char_at, "indexOf": index_of, "lastIndexOf": last_index_of,
    "lowerAscii": lower_ascii, "upperAscii": upper_ascii, "trim": trim,
    "isSorted": is_sorted, "sum": list_sum, "min": _extreme("min", 1),
    "max": _extreme("max", -1),
    "quantity": quantity, "isQuantity": is_quantity, "sign": sign, "compareTo": compare_to,
    "isGreaterThan": is_greater_than, "isLessThan": is_less_than, "add": quantity_add,
    "sub": quantity_sub, "asInteger": as_integer, "isInteger": is_integer,
    "asApproximateFloat": as_approximate_float,
    "semver": semver, "isSemver": is_semver, "major": _semver_part("major"),
    "minor": _semver_part("minor"), "patch": _semver_part("patch"),
}

GLOBAL_ARITY: dict[str, tuple[int, ...]] = {
    "size": (1,), "int": (1,), "uint": (1,), "double": (1,), "string": (1,), "bool": (1,),
    "matches": (2,), "quantity": (1,), "isQuantity": (1,), "sign": (1,), "semver": (1, 2),
    "isSemver": (1, 2)}
"""Functions called as ``f(x)``, and how many arguments each takes."""

METHOD_ARITY: dict[str, tuple[int, ...]] = {
    "size": (0,), "contains": (1,), "startsWith": (1,), "endsWith": (1,), "matches": (1,),
    "charAt": (1,), "indexOf": (1, 2), "lastIndexOf": (1, 2), "lowerAscii": (0,),
    "upperAscii": (0,), "replace": (2, 3), "split": (1, 2), "substring": (1, 2), "trim": (0,),
    "join": (0, 1), "find": (1,), "findAll": (1, 2), "isSorted": (0,), "sum": (0,),
    "min": (0,), "max": (0,), "compareTo": (1,), "isGreaterThan": (1,), "isLessThan": (1,),
    "add": (1,), "sub": (1,), "asInteger": (0,), "isInteger": (0,),
    "asApproximateFloat": (0,), "major": (0,), "minor": (0,), "patch": (0,)}
"""Functions called as ``x.f(...)``, and how many arguments each takes besides ``x``."""


def table(meter: Meter, patterns: Patterns) -> dict[str, Function]:
    """Every operator and function of the environment, for one evaluation."""
    return {**OPERATORS, **FUNCTIONS, "_+_": lambda a, b: add(a, b, meter),
            **bind_strings(meter), **patterns.bind(meter)}
