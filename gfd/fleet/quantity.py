"""Kubernetes resource quantities (``8``, ``81920Mi``, ``1k``, ``500m``) read as exact
numbers (``k8s.io/apimachinery/pkg/api/resource``, ``ParseQuantity``: binary suffixes Ki..Ei,
decimal ones n u m k M G T P E, and decimal exponents ``1e3``; a magnitude finer than a nano
rounded up to whole nanos before the sign; a binary-suffixed value capped at the int64's
largest), and as the scheduler holds them: an int64 of whole units (``Value()``, rounded up),
of thousandths for CPU (``MilliValue()``; ``framework.NewResource`` in kube-scheduler).

A quantity's size is judged from its text before any number is built: ``1e99999`` is refused
by its exponent, never expanded (the API server stores such a value; the scheduler cannot hold
it in an int64)."""

from __future__ import annotations

import re
from fractions import Fraction

_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
"""Binary suffix -> power of two."""
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15,
            "E": 18}
"""Decimal suffix -> power of ten."""
_QUANTITY = re.compile(
    r"([+-]?)([0-9]*)(?:\.([0-9]*))?(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?")
_NANO = Fraction(1, 10**9)
INT64_MAX = 2**63 - 1
"""The largest value the scheduler holds (``resource.Quantity.Value()`` is an int64)."""
MAX_DIGITS = 21
"""A value of more decimal digits than this is beyond an int64 whatever follows."""
MAX_TEXT = 256
"""Longer texts are refused unread (ParseQuantity has no limit; no real quantity is near)."""
CPU = "cpu"


class QuantityError(ValueError):
    """A text that is not a quantity, or a quantity beyond what the scheduler can hold."""


def read_quantity(text: str) -> Fraction:
    """The quantity's exact value (finer than a nano rounded up to whole nanos, as
    ``ParseQuantity`` does); QuantityError when ``text`` is not a quantity or its magnitude is
    beyond an int64 (judged from the text, before the number is built)."""
    text = text.strip()  # UnmarshalJSON trims
    if len(text) > MAX_TEXT:
        raise QuantityError(f"{len(text)} characters long: no quantity is")
    match = _QUANTITY.fullmatch(text)
    if not match or not (match.group(2) or match.group(3)):
        raise QuantityError("not a quantity (such as 8, 500m, 16Gi or 1e3)")
    sign, whole, part, suffix = match.group(1), match.group(2), match.group(3), \
        match.group(4) or ""
    negative = sign == "-"
    whole = whole.lstrip("0")
    part = part or ""
    nonzero = bool(whole or part.strip("0"))
    if suffix in _BINARY:
        power2, power10 = _BINARY[suffix], 0
    elif suffix in _DECIMAL:
        power2, power10 = 0, _DECIMAL[suffix]
    else:
        exponent = suffix[1:]
        digits = exponent.lstrip("+-").lstrip("0")
        if len(digits) > 19 or int(digits or "0") > INT64_MAX + exponent.startswith("-"):
            raise QuantityError(f"exponent {exponent[:20]}: not an int64 (not a quantity)")
        if len(digits) > 6:  # |exponent| >= 10**6: judged without building the number
            if not nonzero:
                return Fraction(0)
            if exponent.startswith("-"):
                return -_NANO if negative else _NANO
            raise QuantityError(f"exponent {exponent}: beyond what the scheduler holds "
                                "(an int64)")
        power2, power10 = 0, int(exponent)
    if not nonzero:
        return Fraction(0)
    # the value's decimal magnitude, from the text: digits before the point, or the zeros
    # after it, shifted by the suffix
    leading = len(whole) if whole else -(len(part) - len(part.lstrip("0")))
    magnitude = leading + power10 + (power2 * 3 + 9) // 10
    if magnitude > MAX_DIGITS:
        if power2:  # ParseQuantity caps a binary-suffixed value at the int64's largest
            return Fraction(-INT64_MAX if negative else INT64_MAX)
        raise QuantityError("beyond what the scheduler holds (an int64)")
    if power10 + leading < -40:  # far finer than a nano: rounds up to one
        return -_NANO if negative else _NANO
    # the magnitude is digits * 2**power2 * 10**point, built as one Fraction (a pod's
    # requests are read by the hundred thousand); finer than a nano it rounds up to whole
    # nanos, then the sign
    digits = (int(whole or "0") * 10**len(part) + int(part or "0")) << power2
    point = power10 - len(part)
    if point >= 0:
        value = Fraction(digits * 10**point)
    elif point >= -9:
        value = Fraction(digits, 10**-point)
    else:
        scale = 10 ** (-point - 9)
        value = Fraction(-(-digits // scale), 10**9)
    if power2 and value > INT64_MAX:
        value = Fraction(INT64_MAX)
    return -value if negative else value


def parse_quantity(text: str) -> Fraction | None:
    """The quantity's value, or None when ``text`` is not a quantity or is beyond an int64."""
    try:
        return read_quantity(text)
    except QuantityError:
        return None


def scheduler_value(name: str, text: str) -> int:
    """``text`` as the scheduler holds resource ``name``: thousandths for ``cpu``
    (``MilliValue()``), whole units for any other (``Value()``), rounded up; QuantityError
    when it is not a quantity or does not fit an int64."""
    value = read_quantity(text)
    if name == CPU:
        value *= 1000
    units = -(-value.numerator // value.denominator)
    if units > INT64_MAX or units < -INT64_MAX - 1:
        raise QuantityError("beyond what the scheduler holds (an int64)")
    return units
