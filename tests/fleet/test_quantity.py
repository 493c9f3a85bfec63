"""Kubernetes resource quantities read as exact numbers, by the grammar of
``k8s.io/apimachinery/pkg/api/resource/quantity.go`` (``ParseQuantity``, and
``UnmarshalJSON``, which trims surrounding whitespace): a signed number (``<digits>``,
``<digits>.<digits>``, ``<digits>.`` or ``.<digits>``) and a suffix: binary ``Ki``..``Ei``,
decimal ``n u m "" k M G T P E``, or a decimal exponent ``e``/``E`` and a signed integer;
anything else is not a quantity (None)."""

from __future__ import annotations

from fractions import Fraction

import pytest

from gfd.fleet.quantity import parse_quantity

KI, MI, GI, TI, PI, EI = (2**10, 2**20, 2**30, 2**40, 2**50, 2**60)

QUANTITIES = [
    # plain integers, signed or not
    ("8", 8), ("0", 0), ("+3", 3), ("-2", -2), ("007", 7),
    # binary suffixes are powers of 1024
    ("1Ki", KI), ("81920Mi", 81920 * MI), ("1.5Gi", Fraction(3, 2) * GI), ("2Ti", 2 * TI),
    ("1Pi", PI), ("1Ei", EI), ("0.5Ki", 512),
    # decimal suffixes are powers of 1000, down to nano
    ("1k", 1000), ("2M", 2 * 10**6), ("3G", 3 * 10**9), ("4T", 4 * 10**12),
    ("5P", 5 * 10**15), ("6E", 6 * 10**18),
    ("500m", Fraction(1, 2)), ("100m", Fraction(1, 10)), ("1500m", Fraction(3, 2)),
    ("250u", Fraction(250, 10**6)), ("7n", Fraction(7, 10**9)),
    # decimal exponents, upper or lower case, signed
    ("1e3", 1000), ("1E3", 1000), ("1e+3", 1000), ("15e-1", Fraction(3, 2)),
    ("2.5e2", 250), ("1e0", 1),
    # fractions written with a point
    ("0.5", Fraction(1, 2)), (".5", Fraction(1, 2)), ("1.25k", 1250),
    # a quantity read from JSON is trimmed first (UnmarshalJSON: strings.TrimSpace)
    (" 8 ", 8), ("\t16Gi\n", 16 * GI),
]


@pytest.mark.parametrize("text, value", QUANTITIES, ids=[q for q, _ in QUANTITIES])
def test_a_quantity_is_read_as_its_exact_value(text: str, value: Fraction | int) -> None:
    assert parse_quantity(text) == value


NOT_QUANTITIES = [
    "", "abc", "one", "1K", "1ki", "1mi", "1gi", "1 Gi", "1e", "1e3.5", "1EE", "1.5.5",
    "0x10", "--1", "+-1", "1Gi1", "8 GPUs", "1,000", "∞", "1_000",
]


@pytest.mark.parametrize("text", NOT_QUANTITIES)
def test_what_the_grammar_does_not_allow_is_not_a_quantity(text: str) -> None:
    assert parse_quantity(text) is None


@pytest.mark.parametrize("text, value", [("1.", 1), ("1.G", 10**9), ("2.Mi", 2 * MI)])
def test_a_number_ending_in_a_point_is_a_quantity(text: str, value: int) -> None:
    assert parse_quantity(text) == value


def test_a_value_finer_than_a_nano_is_rounded_up_to_one_nano() -> None:
    assert parse_quantity("0.1n") == Fraction(1, 10**9)
