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


# --------------------------------------------------- ParseQuantity's edges (quantity_test.go)
#
# kubernetes/apimachinery pkg/api/resource/quantity_test.go, TestQuantityParse: what
# ParseQuantity accepts and the exact value it reads (decQuantity(mantissa, exponent)).

NANO = Fraction(1, 10**9)
KUBERNETES_VALUES = [
    # "Things that saturate/round": finer than a nano is rounded up to the next nano
    ("3.001n", 4 * NANO), ("1.1E-9", 2 * NANO), ("0.0000000001", NANO),
    ("0.0000000005", NANO), ("0.00000000050", NANO), ("0.5e-9", NANO), ("0.9n", NANO),
    ("0.00000012345", 124 * NANO), ("0.00000012354", 124 * NANO),
    # "Try the negative version of everything": the magnitude is rounded up
    ("-3.001n", -4 * NANO), ("-0.0000000001", -NANO),
    # "We'll accept fractional binary stuff, too."
    ("100.035Ki", Fraction(10243584, 100)), ("0.5Mi", 512 * KI),
    ("0.05Gi", Fraction(536870912, 10)), ("0.025Ti", Fraction(274877906944, 10)),
    # "Things written by trolls"
    ("0.000000000001Ki", 2 * NANO), (".001", Fraction(1, 1000)), (".0001k", Fraction(1, 10)),
    # "Nonstandard but still parsable", and the decimal exponents' cases
    ("100.035k", 100035), ("10.035M", 10035000), ("1.2e3", 1200), ("1.3E+6", 1300000),
    ("1.40e9", 14 * 10**8), ("1.53E12", 153 * 10**10), ("1.7E18", 17 * 10**17),
    ("6.987654321G", 6987654321), ("0.5e-2", Fraction(5, 1000)), ("0.00050k", Fraction(1, 2)),
    ("1E-3", Fraction(1, 1000)), ("0Ki", 0), ("0n", 0), ("50k", 50000), ("300T", 3 * 10**14),
    # TestParseQuantity: 18 digits, and the value of the largest int64, exactly
    ("999999999999999999", 999999999999999999), ("-999999999999999999", -999999999999999999),
    ("9223372036854775807", 2**63 - 1), ("9223372036854775807000m", 2**63 - 1),
    ("1.000000000000000001E", 10**18 + 1),
]


@pytest.mark.parametrize("text, value", KUBERNETES_VALUES, ids=[q for q, _ in KUBERNETES_VALUES])
def test_a_quantity_is_read_as_parse_quantity_reads_it(text: str, value: Fraction | int) -> None:
    assert parse_quantity(text) == value


KUBERNETES_INVALID = [  # TestQuantityParse's `invalid` table (its " 1", "1 " are trimmed by
    # UnmarshalJSON first: test_a_quantity_is_read_as_its_exact_value above)
    "1.1.M", "1+1.0M", "0.1mi", "0.1am", "aoeu", ".5i", "1i", "-3.01i", "-3.01e-",
    # suffix.go, interpret: an exponent that is no int64 is ErrSuffix
    "1e9223372036854775808", "1e-9223372036854775809",
]


@pytest.mark.timeout(10)
@pytest.mark.parametrize("text", KUBERNETES_INVALID)
def test_what_parse_quantity_refuses_is_not_a_quantity(text: str) -> None:
    assert parse_quantity(text) is None


# -------------------------------------------------------- what the scheduler can hold
#
# kube-scheduler holds a node's allocatable and a pod's requests as int64s
# (pkg/scheduler/framework/types.go, Resource.Add: `rQuant.MilliValue()` for cpu,
# `rQuant.Value()` for memory, pods, ephemeral-storage and every scalar resource such as
# nvidia.com/gpu). Value() and MilliValue() are ceil(q) and ceil(q * 1000)
# (quantity.go, ScaledValue; scale_int.go, scaledValue "ALWAYS rounds up"), and for a value
# beyond an int64 "the final result might overflow": a value the API server stores
# (TestParseQuantity: "9223372036854775808", "10E", "9999999999999999999") that the
# scheduler cannot hold. A binary-suffixed value is capped at the int64's largest when parsed
# (quantity.go: `if format == BinarySI && amount.Cmp(maxAllowed.Dec) > 0`; TestQuantityParse:
# "9Ei" and "9223372036854775807Ki" are maxAllowed).

INT64_MAX = 2**63 - 1
HELD = [
    ("nvidia.com/gpu", "9223372036854775807", INT64_MAX),
    ("nvidia.com/gpu", "9223372036854775807.0", INT64_MAX),
    ("nvidia.com/gpu", "9223372036854775807000m", INT64_MAX),
    ("nvidia.com/gpu", "9223372036854775806.1", INT64_MAX),  # rounded up
    ("nvidia.com/gpu", "9.223372036854775807E18", INT64_MAX),
    ("nvidia.com/gpu", "8191Pi", 8191 * PI),
    ("nvidia.com/gpu", "9Ei", INT64_MAX),  # capped
    ("nvidia.com/gpu", "99999999999999999999999Ki", INT64_MAX),  # capped, however far beyond
    ("nvidia.com/gpu", "9223372036854775807Ki", INT64_MAX),  # capped
    ("nvidia.com/gpu", "500m", 1),  # Value() rounds up
    ("memory", "81920Mi", 81920 * MI),
    ("pods", "110", 110),
    ("cpu", "9223372036854775807m", INT64_MAX),
    ("cpu", "9223372036854775", 9223372036854775000),
    ("cpu", "191500m", 191500),
    ("cpu", "0.1m", 1),  # MilliValue() rounds up
]
BEYOND = [
    ("nvidia.com/gpu", "9223372036854775808"), ("nvidia.com/gpu", "9223372036854775808.0"),
    ("nvidia.com/gpu", "9223372036854775808000m"), ("nvidia.com/gpu", "9223372036854775807.1"),
    ("nvidia.com/gpu", "9999999999999999999"), ("nvidia.com/gpu", "10E"),
    ("nvidia.com/gpu", "12E"), ("nvidia.com/gpu", "1e19"), ("nvidia.com/gpu", "1e99999"),
    ("memory", "9223372036854775808"), ("cpu", "9223372036854776"),
    ("cpu", "9223372036854775808m"),
]


def _scheduler_value(name: str, text: str) -> int:
    """``gfd.fleet.quantity.scheduler_value``: the int64 the scheduler holds resource
    ``name`` as (a ValueError when it cannot)."""
    from gfd.fleet import quantity

    return int(quantity.scheduler_value(name, text))


@pytest.mark.parametrize("name, text, value", HELD, ids=[f"{n}={t}" for n, t, _ in HELD])
def test_what_the_scheduler_holds_is_its_int64(name: str, text: str, value: int) -> None:
    assert _scheduler_value(name, text) == value


@pytest.mark.parametrize("name, text", BEYOND, ids=[f"{n}={t}" for n, t in BEYOND])
def test_a_value_beyond_an_int64_is_refused(name: str, text: str) -> None:
    with pytest.raises(ValueError):
        _scheduler_value(name, text)


# ------------------------------------------------------------------- refused by size
#
# A quantity's size shows in its text: its digits and its exponent. One far beyond an int64
# is refused from that alone, before any number is built: 10**99999999999 would take hours
# and gigabytes (issue 38: "larger exponents take minutes of CPU first"). The per-test timeout
# is the only clock (CPython's power of big integers checks for signals, so it fires).

HUGE = [
    "1e99999999999", "1E99999999999", "1e+99999999999", "9e2147483647", "1e99999999",
    "1e99999", "1e400", "1.5e400", "1e3030", "99999999999999999999999k",
    "1" + "0" * 30, "9" * 5000, "9" * 1_000_000, "9" * 5000 + "Ei", "0." + "9" * 5000 + "e5000",
]


@pytest.mark.timeout(10)
@pytest.mark.parametrize("text", HUGE, ids=lambda t: t if len(t) < 30 else f"{t[:12]}...({len(t)})")
def test_a_quantity_far_beyond_an_int64_is_refused_by_its_size(text: str) -> None:
    assert parse_quantity(text) is None
    assert parse_quantity("-" + text) is None


@pytest.mark.timeout(10)
@pytest.mark.parametrize("text", ["1e-99999999999", "1e-99999", "5e-2147483648",
                                  "0.000000000000000000000000000001"])
def test_a_quantity_far_finer_than_a_nano_is_one_nano_at_once(text: str) -> None:
    assert parse_quantity(text) == NANO
    assert parse_quantity("-" + text) == -NANO


@pytest.mark.timeout(10)
@pytest.mark.parametrize("text", ["0e99999999999", "0.000e99999", "00000e400", "0Ei"])
def test_zero_is_zero_whatever_its_exponent(text: str) -> None:
    assert parse_quantity(text) == 0


@pytest.mark.timeout(10)
def test_a_quantity_with_ten_thousand_digits_is_refused_by_the_scheduler_at_once() -> None:
    with pytest.raises(ValueError):
        _scheduler_value("nvidia.com/gpu", "1" * 10_000)
    with pytest.raises(ValueError):
        _scheduler_value("cpu", "1e99999999999")
