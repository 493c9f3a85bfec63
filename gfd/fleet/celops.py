"""CEL's values and operators over cel-python's values with cel-go's semantics (equality,
ordering, arithmetic, logic, map and list access, conversions), and the quantity and semver
values Kubernetes adds; a case not mirrored exactly raises ``Unsupported``."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from celpy import celtypes as ct
from celpy.evaluation import CELEvalError

INT_MIN, INT_MAX, UINT_MAX = -(2**63), 2**63 - 1, 2**64 - 1

Value = Any
Function = Callable[..., Value]


class Unsupported(Exception):
    """A case evaluated here differently from cel-go or not at all: the answer is "cannot
    tell"."""


class Exhausted(Exception):
    """The evaluation spent its budget."""


def error(message: str) -> CELEvalError:
    return CELEvalError(message)


def no_overload(name: str, *args: Value) -> CELEvalError:
    return error(f"no such overload: {name}({', '.join(kind(a) for a in args)})")


@dataclass(frozen=True, slots=True)
class Quantity:
    """``resource.Quantity`` as its exact value (``ParseQuantity`` rounds to nanos)."""

    value: Fraction


@dataclass(frozen=True, slots=True, eq=False)
class Semver:
    """``semver.Version`` (blang/semver v4): build metadata takes no part in comparisons."""

    major: int
    minor: int
    patch: int
    pre: tuple[int | str, ...] = ()
    build: tuple[str, ...] = ()


@dataclass(slots=True)
class Meter:
    """What an evaluation may still spend: one unit a node visited, one per element or
    character a function makes."""

    left: int

    def spend(self, units: int) -> None:
        self.left -= units
        if self.left < 0:
            raise Exhausted


def kind(value: Value) -> str:
    for cls, name in ((ct.BoolType, "bool"), (ct.IntType, "int"), (ct.UintType, "uint"),
                      (ct.DoubleType, "double"), (ct.StringType, "string"),
                      (ct.BytesType, "bytes"), (ct.ListType, "list"), (ct.MapType, "map"),
                      (Quantity, "Quantity"), (Semver, "Semver")):
        if isinstance(value, cls):
            return name
    return "null_type" if value is None else type(value).__name__


def numeric(value: Value) -> bool:
    """An int, uint or double (not a bool)."""
    return isinstance(value, (ct.IntType, ct.UintType, ct.DoubleType))


def _int(value: int) -> Value:
    if not INT_MIN <= value <= INT_MAX:
        return error("integer overflow")
    return ct.IntType(value)


def _uint(value: int) -> Value:
    if not 0 <= value <= UINT_MAX:
        return error("unsigned integer overflow")
    return ct.UintType(value)


class DomainMap(ct.MapType):
    """``device.attributes`` / ``device.capacity``: a lookup of a domain the device lacks
    answers an empty map (``compile.go``, ``newStringInterfaceMapWithDefault``); ``in``,
    ``size()`` and iteration see only the domains it has."""


# --------------------------------------------------------------------------- maps, lists


def find(container: Value, key: Value, *, real: bool = False) -> tuple[bool, Value]:
    """A map's ``Find``: (found, value)."""
    if isinstance(key, ct.StringType):
        if dict.__contains__(container, key):
            return True, dict.__getitem__(container, key)
        if isinstance(container, DomainMap) and not real:
            return True, ct.MapType()
        return False, None
    if isinstance(key, ct.BoolType):
        for k, v in dict.items(container):
            if isinstance(k, ct.BoolType) and bool(k) == bool(key):
                return True, v
        return False, None
    if isinstance(key, (ct.IntType, ct.UintType)):
        other = ct.UintType if isinstance(key, ct.IntType) else ct.IntType
        if any(isinstance(k, (other, ct.DoubleType)) for k in dict.keys(container)):
            raise Unsupported("a map lookup across numeric key types")
        for k, v in dict.items(container):
            if isinstance(k, type(key)) and int(k) == int(key):
                return True, v
        return False, None
    raise Unsupported(f"a map lookup by a {kind(key)} key")


def select(container: Value, name: str) -> Value:
    """``container.name``."""
    if not isinstance(container, ct.MapType):
        return error(f"type '{kind(container)}' does not support field selection")
    found, value = find(container, ct.StringType(name))
    return value if found else error(f"no such key: {name}")


def has(container: Value, name: str) -> Value:
    """``has(container.name)``."""
    if isinstance(container, DomainMap):
        return ct.BoolType(True)
    if isinstance(container, ct.MapType):
        return ct.BoolType(find(container, ct.StringType(name))[0])
    return error(f"invalid type for field selection: {kind(container)}")


def index(container: Value, key: Value) -> Value:
    """``container[key]``."""
    if isinstance(container, CELEvalError):
        return container
    if isinstance(key, CELEvalError):
        return key
    if isinstance(container, ct.ListType):
        if isinstance(key, ct.DoubleType):
            raise Unsupported("a list index of type double")
        if not isinstance(key, (ct.IntType, ct.UintType)):
            return no_overload("_[_]", container, key)
        if not 0 <= int(key) < len(container):
            return error(f"index out of range: {int(key)}")
        return list.__getitem__(container, int(key))
    if isinstance(container, ct.MapType):
        found, value = find(container, key)
        return value if found else error(f"no such key: {key}")
    return no_overload("_[_]", container, key)


# --------------------------------------------------------------------------- operators


def equal(a: Value, b: Value) -> Value:
    """``_==_``: cel-go's heterogeneous equality (``types.Equal`` and each type's ``Equal``)."""
    if isinstance(a, CELEvalError):
        return a
    if isinstance(b, CELEvalError):
        return b
    if a is None or b is None:
        return ct.BoolType(a is None and b is None)
    if isinstance(a, Quantity):
        return ct.BoolType(a.value == b.value) if isinstance(b, Quantity) \
            else no_overload("_==_", a, b)
    if isinstance(a, Semver):
        return ct.BoolType(semver_compare(a, b) == 0) if isinstance(b, Semver) \
            else no_overload("_==_", a, b)
    if isinstance(a, ct.BoolType):
        return ct.BoolType(isinstance(b, ct.BoolType) and bool(a) == bool(b))
    if numeric(a):
        if not numeric(b):
            return ct.BoolType(False)
        return ct.BoolType(_mixed_eq(a, b))
    if isinstance(a, ct.StringType):
        return ct.BoolType(isinstance(b, ct.StringType) and str.__eq__(a, b))
    if isinstance(a, ct.BytesType):
        return ct.BoolType(isinstance(b, ct.BytesType) and bytes.__eq__(a, b))
    if isinstance(a, ct.ListType):
        if not isinstance(b, ct.ListType) or len(a) != len(b):
            return ct.BoolType(False)
        for x, y in zip(a, b, strict=True):
            same = equal(x, y)
            if not (isinstance(same, ct.BoolType) and same):
                return same
        return ct.BoolType(True)
    if isinstance(a, ct.MapType):
        if not isinstance(b, ct.MapType) or dict.__len__(a) != dict.__len__(b):
            return ct.BoolType(False)
        for k, v in dict.items(a):
            found, w = find(b, k)
            if not found:
                return ct.BoolType(False)
            same = equal(v, w)
            if not (isinstance(same, ct.BoolType) and same):
                return same
        return ct.BoolType(True)
    raise Unsupported(f"equality of {kind(a)}")


def _mixed_eq(a: Value, b: Value) -> bool:
    x, y = float(a) if isinstance(a, ct.DoubleType) else int(a), \
        float(b) if isinstance(b, ct.DoubleType) else int(b)
    return not (isinstance(x, float) and math.isnan(x)) \
        and not (isinstance(y, float) and math.isnan(y)) and x == y


def not_equal(a: Value, b: Value) -> Value:
    same = equal(a, b)
    return ct.BoolType(not same) if isinstance(same, ct.BoolType) else same


def compare(a: Value, b: Value, name: str = "compare") -> Value:
    """A ``traits.Comparer``'s ``Compare``: -1, 0, 1 as an int, or an error."""
    if isinstance(a, CELEvalError):
        return a
    if isinstance(b, CELEvalError):
        return b
    if numeric(a) and numeric(b):
        x = float(a) if isinstance(a, ct.DoubleType) else int(a)
        y = float(b) if isinstance(b, ct.DoubleType) else int(b)
        if (isinstance(x, float) and math.isnan(x)) or (isinstance(y, float) and math.isnan(y)):
            return error("NaN values cannot be ordered")
        return ct.IntType((x > y) - (x < y))
    for cls in (ct.BoolType, ct.StringType, ct.BytesType):
        if isinstance(a, cls) and isinstance(b, cls):
            p, q = _plain(a), _plain(b)
            return ct.IntType((p > q) - (p < q))
    return no_overload(name, a, b)


def _plain(value: Any) -> Any:
    """The Python value under a CEL bool, string or bytes (their comparisons unwrapped)."""
    if isinstance(value, ct.BoolType):
        return bool(value)
    if isinstance(value, ct.StringType):
        return str(value)
    if isinstance(value, ct.BytesType):
        return bytes(value)
    return value


def _ordering(name: str, test: Callable[[int], bool]) -> Function:
    def op(a: Value, b: Value) -> Value:
        order = compare(a, b, name)
        return ct.BoolType(test(int(order))) if isinstance(order, ct.IntType) else order
    return op


def add(a: Value, b: Value, meter: Meter | None = None) -> Value:
    if isinstance(a, CELEvalError):
        return a
    if isinstance(b, CELEvalError):
        return b
    if isinstance(a, ct.IntType) and isinstance(b, ct.IntType):
        return _int(int(a) + int(b))
    if isinstance(a, ct.UintType) and isinstance(b, ct.UintType):
        return _uint(int(a) + int(b))
    if isinstance(a, ct.DoubleType) and isinstance(b, ct.DoubleType):
        return ct.DoubleType(float(a) + float(b))
    for cls in (ct.StringType, ct.BytesType, ct.ListType):
        if isinstance(a, cls) and isinstance(b, cls):
            if meter is not None:
                meter.spend(len(a) + len(b))
            if isinstance(a, ct.StringType):
                return ct.StringType(str(a) + str(b))
            if isinstance(a, ct.BytesType):
                return ct.BytesType(_plain(a) + _plain(b))
            return ct.ListType([*a, *b])
    return no_overload("_+_", a, b)


def sub(a: Value, b: Value) -> Value:
    if isinstance(a, CELEvalError):
        return a
    if isinstance(b, CELEvalError):
        return b
    if isinstance(a, ct.IntType) and isinstance(b, ct.IntType):
        return _int(int(a) - int(b))
    if isinstance(a, ct.UintType) and isinstance(b, ct.UintType):
        return _uint(int(a) - int(b))
    if isinstance(a, ct.DoubleType) and isinstance(b, ct.DoubleType):
        return ct.DoubleType(float(a) - float(b))
    return no_overload("_-_", a, b)


def mul(a: Value, b: Value) -> Value:
    if isinstance(a, CELEvalError):
        return a
    if isinstance(b, CELEvalError):
        return b
    if isinstance(a, ct.IntType) and isinstance(b, ct.IntType):
        return _int(int(a) * int(b))
    if isinstance(a, ct.UintType) and isinstance(b, ct.UintType):
        return _uint(int(a) * int(b))
    if isinstance(a, ct.DoubleType) and isinstance(b, ct.DoubleType):
        return ct.DoubleType(float(a) * float(b))
    return no_overload("_*_", a, b)


def _truncated(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def div(a: Value, b: Value) -> Value:
    if isinstance(a, CELEvalError):
        return a
    if isinstance(b, CELEvalError):
        return b
    if (isinstance(a, ct.IntType) and isinstance(b, ct.IntType)) or \
            (isinstance(a, ct.UintType) and isinstance(b, ct.UintType)):
        if int(b) == 0:
            return error("division by zero")
        value = _truncated(int(a), int(b))
        return _int(value) if isinstance(a, ct.IntType) else _uint(value)
    if isinstance(a, ct.DoubleType) and isinstance(b, ct.DoubleType):
        x, y = float(a), float(b)
        if y != 0:
            return ct.DoubleType(x / y)
        if x == 0 or math.isnan(x):
            return ct.DoubleType(math.nan)
        return ct.DoubleType(math.copysign(math.inf, x) * math.copysign(1.0, y))
    return no_overload("_/_", a, b)


def mod(a: Value, b: Value) -> Value:
    if isinstance(a, CELEvalError):
        return a
    if isinstance(b, CELEvalError):
        return b
    if (isinstance(a, ct.IntType) and isinstance(b, ct.IntType)) or \
            (isinstance(a, ct.UintType) and isinstance(b, ct.UintType)):
        if int(b) == 0:
            return error("modulus by zero")
        if int(a) == INT_MIN and int(b) == -1:
            return error("integer overflow")
        x, y = int(a), int(b)
        rest = abs(x) % abs(y)
        return ct.IntType(rest if x >= 0 else -rest) if isinstance(a, ct.IntType) \
            else ct.UintType(rest)
    return no_overload("_%_", a, b)


def neg(a: Value) -> Value:
    if isinstance(a, CELEvalError):
        return a
    if isinstance(a, ct.IntType):
        return _int(-int(a))
    if isinstance(a, ct.DoubleType):
        return ct.DoubleType(-float(a))
    return no_overload("-_", a)


def logical_not(a: Value) -> Value:
    if isinstance(a, CELEvalError):
        return a
    return ct.BoolType(not a) if isinstance(a, ct.BoolType) else no_overload("!_", a)


def logical_and(a: Value, b: Value) -> Value:
    """``_&&_``: false if either side is false, whatever the other (an error included)."""
    if any(isinstance(v, ct.BoolType) and not v for v in (a, b)):
        return ct.BoolType(False)
    if isinstance(a, ct.BoolType) and isinstance(b, ct.BoolType):
        return ct.BoolType(True)
    for v in (a, b):
        if isinstance(v, CELEvalError):
            return v
    return no_overload("_&&_", a, b)


def logical_or(a: Value, b: Value) -> Value:
    """``_||_``: true if either side is true, whatever the other (an error included)."""
    if any(isinstance(v, ct.BoolType) and v for v in (a, b)):
        return ct.BoolType(True)
    if isinstance(a, ct.BoolType) and isinstance(b, ct.BoolType):
        return ct.BoolType(False)
    for v in (a, b):
        if isinstance(v, CELEvalError):
            return v
    return no_overload("_||_", a, b)


def conditional(cond: Value, yes: Value, no: Value) -> Value:
    if isinstance(cond, CELEvalError):
        return cond
    if not isinstance(cond, ct.BoolType):
        return no_overload("_?_:_", cond)
    return yes if cond else no


def contained(item: Value, container: Value) -> Value:
    """``item in container``: a list's ``Contains`` (``item.Equal(element)``, errors count
    as not equal) or a map's key presence."""
    if isinstance(item, CELEvalError):
        return item
    if isinstance(container, CELEvalError):
        return container
    if isinstance(container, ct.ListType):
        for element in container:
            same = equal(item, element)
            if isinstance(same, ct.BoolType) and same:
                return ct.BoolType(True)
        return ct.BoolType(False)
    if isinstance(container, ct.MapType):
        return ct.BoolType(find(container, item, real=True)[0])
    return no_overload("@in", item, container)


def size(value: Value) -> Value:
    if isinstance(value, (ct.StringType, ct.BytesType, ct.ListType)):
        return ct.IntType(len(value))
    if isinstance(value, ct.MapType):
        return ct.IntType(dict.__len__(value))
    return no_overload("size", value)


# --------------------------------------------------------------------------- conversions


_GO_INT = re.compile(r"[+-]?[0-9]+")
_GO_FLOAT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def to_int(value: Value) -> Value:
    if isinstance(value, ct.IntType):
        return value
    if isinstance(value, ct.UintType):
        return _int(int(value)) if int(value) <= INT_MAX else error("integer overflow")
    if isinstance(value, ct.DoubleType):
        d = float(value)
        if math.isnan(d) or math.isinf(d) or not -(2.0**63) < d < 2.0**63:
            return error(f"range error converting {d} to int")
        return ct.IntType(int(d))
    if isinstance(value, ct.StringType):
        if not _GO_INT.fullmatch(value):
            return error(f"cannot convert string '{value}' to int")
        return _int(int(value)) if INT_MIN <= int(value) <= INT_MAX \
            else error(f"cannot convert string '{value}' to int")
    return no_overload("int", value)


def to_uint(value: Value) -> Value:
    if isinstance(value, ct.UintType):
        return value
    if isinstance(value, ct.IntType):
        return _uint(int(value))
    if isinstance(value, ct.StringType):
        if not re.fullmatch(r"[0-9]+", value) or int(value) > UINT_MAX:
            return error(f"cannot convert string '{value}' to uint")
        return ct.UintType(int(value))
    if isinstance(value, ct.DoubleType):
        raise Unsupported("uint() of a double")
    return no_overload("uint", value)


def to_double(value: Value) -> Value:
    if isinstance(value, ct.DoubleType):
        return value
    if isinstance(value, (ct.IntType, ct.UintType)):
        return ct.DoubleType(float(int(value)))
    if isinstance(value, ct.StringType):
        if not _GO_FLOAT.fullmatch(value):
            raise Unsupported("double() of a string in a form other than digits")
        parsed = float(value)
        return error(f"cannot convert string '{value}' to double") if math.isinf(parsed) \
            else ct.DoubleType(parsed)
    return no_overload("double", value)


def to_string(value: Value) -> Value:
    if isinstance(value, ct.StringType):
        return value
    if isinstance(value, ct.BoolType):
        return ct.StringType("true" if value else "false")
    if isinstance(value, (ct.IntType, ct.UintType)):
        return ct.StringType(str(int(value)))
    if isinstance(value, ct.BytesType):
        try:
            return ct.StringType(bytes(value).decode("utf-8"))
        except UnicodeDecodeError:
            return error("invalid UTF-8 in bytes, cannot convert to string")
    if isinstance(value, ct.DoubleType):
        raise Unsupported("string() of a double (Go's float formatting)")
    return no_overload("string", value)


def to_bool(value: Value) -> Value:
    if isinstance(value, ct.BoolType):
        return value
    if isinstance(value, ct.StringType):
        if value in ("1", "t", "T", "TRUE", "true", "True"):
            return ct.BoolType(True)
        if value in ("0", "f", "F", "FALSE", "false", "False"):
            return ct.BoolType(False)
        return error(f"type conversion error from 'string' to 'bool': {value}")
    return no_overload("bool", value)

def semver_compare(a: Semver, b: Semver) -> int:
    for m, n in ((a.major, b.major), (a.minor, b.minor), (a.patch, b.patch)):
        if m != n:
            return 1 if m > n else -1
    if not a.pre or not b.pre:
        return (not a.pre) - (not b.pre)
    for x, y in zip(a.pre, b.pre, strict=False):
        if x == y:
            continue
        if isinstance(x, int) != isinstance(y, int):
            return -1 if isinstance(x, int) else 1
        return 1 if x > y else -1  # type: ignore[operator,unused-ignore]
    return (len(a.pre) > len(b.pre)) - (len(a.pre) < len(b.pre))


OPERATORS: dict[str, Function] = {
    "_==_": equal, "_!=_": not_equal, "_<_": _ordering("_<_", lambda c: c < 0),
    "_<=_": _ordering("_<=_", lambda c: c <= 0), "_>_": _ordering("_>_", lambda c: c > 0),
    "_>=_": _ordering("_>=_", lambda c: c >= 0), "_-_": sub, "_*_": mul, "_/_": div,
    "_%_": mod, "-_": neg, "!_": logical_not, "_&&_": logical_and, "_||_": logical_or,
    "_?_:_": conditional, "_in_": contained, "_[_]": index,
}
