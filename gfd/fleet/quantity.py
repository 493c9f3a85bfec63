"""Kubernetes resource quantities (``8``, ``81920Mi``, ``1k``, ``500m``) read as exact
numbers (``k8s.io/apimachinery/pkg/api/resource``: binary suffixes Ki..Ei, decimal ones
n u m k M G T P E, and decimal exponents ``1e3``)."""

from __future__ import annotations

import re
from fractions import Fraction

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL: dict[str, Fraction | int] = {
    "n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "": 1,
    "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
_QUANTITY = re.compile(
    r"([+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+))(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?")
_NANO = Fraction(1, 10**9)


def parse_quantity(text: str) -> Fraction | None:
    """The quantity's value, or None when ``text`` is not a quantity; a value finer than a
    nano is rounded up to whole nanos, as ``ParseQuantity`` does."""
    value = _value(text)
    if value is None or value.denominator == 1:
        return value
    nanos = value / _NANO
    return -(-nanos.numerator // nanos.denominator) * _NANO


def _value(text: str) -> Fraction | None:
    match = _QUANTITY.fullmatch(text.strip())
    if not match:
        return None
    digits = match.group(1)
    number, suffix = Fraction(digits + "0" if digits.endswith(".") else digits), \
        match.group(2) or ""
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    if suffix in _DECIMAL:
        return number * _DECIMAL[suffix]
    exponent = int(suffix[1:])
    return number * (Fraction(10**exponent) if exponent >= 0 else Fraction(1, 10**-exponent))
