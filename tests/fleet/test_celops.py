"""CEL's operators over cel-python's values as cel-go has them: heterogeneous equality
(``types.Equal`` and each type's ``Equal``: another type is unequal for CEL's own types, an
error for Kubernetes' Quantity and Semver), ordering across numbers
(``CrossTypeNumericComparisons``), int64 arithmetic that errs on overflow, Go's truncating
division and remainder, the commutative ``&&`` and ``||``, and map lookups."""

from __future__ import annotations

from fractions import Fraction

from celpy import celtypes as ct
from celpy.evaluation import CELEvalError

from gfd.fleet import celops
from gfd.fleet.celops import Quantity

TRUE, FALSE = ct.BoolType(True), ct.BoolType(False)


def test_equality_is_heterogeneous_and_strict_where_cel_go_is() -> None:
    q = Quantity(Fraction(1))
    assert celops.equal(ct.StringType("a"), q) == FALSE  # String.Equal: another type
    assert isinstance(celops.equal(q, ct.StringType("a")), CELEvalError)  # Quantity.Equal
    assert celops.equal(ct.IntType(1), ct.DoubleType(1.0)) == TRUE
    assert celops.equal(ct.IntType(1), ct.UintType(1)) == TRUE
    assert celops.equal(ct.DoubleType(float("nan")), ct.DoubleType(float("nan"))) == FALSE
    assert celops.equal(ct.BoolType(True), ct.IntType(1)) == FALSE
    assert celops.equal(None, None) == TRUE
    assert celops.equal(ct.ListType([q]), ct.ListType([ct.StringType("a")])) != FALSE


def test_numbers_order_across_types_and_nan_is_unordered() -> None:
    assert celops.compare(ct.IntType(2), ct.DoubleType(2.5)) == ct.IntType(-1)
    assert celops.compare(ct.UintType(3), ct.IntType(-1)) == ct.IntType(1)
    assert isinstance(celops.compare(ct.DoubleType(float("nan")), ct.IntType(1)),
                      CELEvalError)
    assert isinstance(celops.compare(ct.StringType("a"), ct.IntType(1)), CELEvalError)


def test_int_arithmetic_is_go_int64_with_errors() -> None:
    assert isinstance(celops.add(ct.IntType(celops.INT_MAX), ct.IntType(1)), CELEvalError)
    assert isinstance(celops.sub(ct.UintType(0), ct.UintType(1)), CELEvalError)
    assert isinstance(celops.div(ct.IntType(celops.INT_MIN), ct.IntType(-1)), CELEvalError)
    assert isinstance(celops.mod(ct.IntType(celops.INT_MIN), ct.IntType(-1)), CELEvalError)
    assert celops.div(ct.IntType(-7), ct.IntType(2)) == ct.IntType(-3)
    assert celops.mod(ct.IntType(-7), ct.IntType(2)) == ct.IntType(-1)
    assert celops.div(ct.DoubleType(1.0), ct.DoubleType(0.0)) == ct.DoubleType(float("inf"))
    assert isinstance(celops.add(ct.IntType(1), ct.DoubleType(1.0)), CELEvalError)


def test_and_or_are_commutative_over_errors() -> None:
    err = celops.error("boom")
    assert celops.logical_and(err, FALSE) == FALSE
    assert celops.logical_and(FALSE, err) == FALSE
    assert celops.logical_and(TRUE, err) is err
    assert celops.logical_or(err, TRUE) == TRUE
    assert celops.logical_or(FALSE, err) is err
    assert isinstance(celops.logical_and(TRUE, ct.IntType(1)), CELEvalError)


def test_a_domain_map_answers_an_empty_map_for_a_domain_it_lacks() -> None:
    domains = celops.DomainMap({ct.StringType("a"): ct.MapType()})
    assert celops.find(domains, ct.StringType("b")) == (True, ct.MapType())
    assert celops.find(domains, ct.StringType("b"), real=True) == (False, None)
    assert celops.contained(ct.StringType("b"), domains) == FALSE
    assert celops.size(domains) == ct.IntType(1)
    assert isinstance(celops.select(ct.MapType(), "x"), CELEvalError)
