"""The DRA CEL environment's functions against the Go they mirror: ``resource.ParseQuantity``
(``k8s.io/apimachinery/pkg/api/resource/quantity.go``), blang/semver v4's ``Parse`` and
``Compare`` with semver.org's precedence, Kubernetes' ``normalizeAndParse``
(``semverlib.go``), Go's ``strings.SplitN``, ``strings.Replace`` and ``strings.TrimSpace``
(the strings extension's ``split``, ``replace``, ``trim``)."""

from __future__ import annotations

from fractions import Fraction

import pytest
from celpy import celtypes as ct

from gfd.fleet import cellib
from gfd.fleet.celops import Quantity, Semver, Unsupported, semver_compare


@pytest.mark.parametrize("text, value", [
    ("0", 0), ("1", 1), ("-1", -1), ("+5", 5), ("12Mi", 12 * 2**20), ("1.5Gi", 3 * 2**29),
    ("1k", 1000), ("100m", Fraction(1, 10)), ("1n", Fraction(1, 10**9)),
    ("0.1n", Fraction(1, 10**9)), ("-0.1n", -Fraction(1, 10**9)), ("1e3", 1000),
    ("1E3", 1000), ("1E", 10**18), ("1e-3", Fraction(1, 1000)), (".5", Fraction(1, 2)),
    ("5.", 5), ("1.G", 10**9), ("0.2G", 2 * 10**8), ("50.703k", 50703),
    ("16Ei", 2**63 - 1), ("-16Ei", -(2**63 - 1)), ("000", 0), ("-", 0),
    ("9999999999999999999999999999999999999G", 9999999999999999999999999999999999999 * 10**9),
], ids=str)
def test_a_quantity_parses_as_parse_quantity_does(text: str, value: Fraction | int) -> None:
    assert cellib.parse_quantity(text) == Quantity(Fraction(value))


@pytest.mark.parametrize("text", ["", "200K", "10Mo", "10Mm", "Three", "1 Gi", " 1", "1Gi ",
                                  "1e", "1ki", "1.5.5", "0x10", "1e3e3"])
def test_what_parse_quantity_refuses_is_no_quantity(text: str) -> None:
    assert cellib.parse_quantity(text) is None


def test_a_huge_exponent_is_not_evaluated() -> None:
    with pytest.raises(Unsupported):
        cellib.parse_quantity("1e999999999")


@pytest.mark.parametrize("text, version", [
    ("1.2.3", Semver(1, 2, 3)), ("0.0.0", Semver(0, 0, 0)),
    ("1.0.0-alpha.1", Semver(1, 0, 0, ("alpha", 1))), ("1.0.0-0a", Semver(1, 0, 0, ("0a",))),
    ("1.0.0-x-y.7+build.5", Semver(1, 0, 0, ("x-y", 7), ("build", "5"))),
    ("550.54.15", Semver(550, 54, 15)),
], ids=str)
def test_a_semver_parses_as_blang_semver_does(text: str, version: Semver) -> None:
    got = cellib.parse_semver(text)
    assert isinstance(got, Semver) and (got.major, got.minor, got.patch, got.pre, got.build) \
        == (version.major, version.minor, version.patch, version.pre, version.build)


@pytest.mark.parametrize("text", ["", "1.2", "1", "v1.2.3", "01.2.3", "1.02.3", "1.2.03",
                                  "1.2.3-01", "1.2.3-", "1.2.3+", "1.2.3-a..b", "1.2.3-a$",
                                  "1.2.3.4", "a.b.c", "1.2.18446744073709551616",
                                  "535.183.01"])
def test_what_blang_semver_refuses_is_no_semver(text: str) -> None:
    assert isinstance(cellib.parse_semver(text), str)


@pytest.mark.parametrize("text, normal", [
    ("v1.0", "1.0.0"), ("1.0", "1.0.0"), ("01.01.01", "1.1.1"), ("1", "1.0.0"),
    ("535.183.01", "535.183.1"), ("v1.2.3-rc.1", "1.2.3-rc.1")])
def test_normalize_is_kubernetes_normalize_and_parse(text: str, normal: str) -> None:
    got, want = cellib.normalize_semver(text), cellib.parse_semver(normal)
    assert isinstance(got, Semver) and isinstance(want, Semver)
    assert semver_compare(got, want) == 0 and got.build == want.build


def test_a_short_version_with_a_prerelease_does_not_normalize() -> None:
    assert cellib.normalize_semver("1.0-rc") == \
        "short version cannot contain PreRelease/Build meta data"


def test_semvers_order_by_semver_org_precedence() -> None:
    """semver.org 11: 1.0.0-alpha < 1.0.0-alpha.1 < 1.0.0-alpha.beta < 1.0.0-beta <
    1.0.0-beta.2 < 1.0.0-beta.11 < 1.0.0-rc.1 < 1.0.0 < 2.0.0 < 2.1.0 < 2.1.1."""
    ordered = ["1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta",
               "1.0.0-beta.2", "1.0.0-beta.11", "1.0.0-rc.1", "1.0.0", "2.0.0", "2.1.0",
               "2.1.1"]
    versions = [cellib.parse_semver(v) for v in ordered]
    for i, a in enumerate(versions):
        for j, b in enumerate(versions):
            assert isinstance(a, Semver) and isinstance(b, Semver)
            assert semver_compare(a, b) == (i > j) - (i < j), (ordered[i], ordered[j])


@pytest.mark.parametrize("s, sep, n, parts", [
    ("a,b,c,d", ",", -1, ["a", "b", "c", "d"]), ("a,b,c,d", ",", 2, ["a", "b,c,d"]),
    ("a,b,c,d", ",", 0, []), ("abc", "", -1, ["a", "b", "c"]), ("abc", "", 2, ["a", "bc"]),
    ("", ",", -1, [""]), ("", "", -1, []), ("a,b", ",", 5, ["a", "b"]),
])
def test_split_is_gos_split_n(s: str, sep: str, n: int, parts: list[str]) -> None:
    assert cellib.go_split(s, sep, n) == parts


@pytest.mark.parametrize("s, old, new, n, out", [
    ("oink oink oink", "k", "ky", 2, "oinky oinky oink"),
    ("oink oink oink", "oink", "moo", -1, "moo moo moo"),
    ("abc", "", "-", -1, "-a-b-c-"), ("abc", "", "-", 2, "-a-bc"), ("abc", "b", "x", 0, "abc"),
])
def test_replace_is_gos_replace(s: str, old: str, new: str, n: int, out: str) -> None:
    assert cellib.go_replace(s, old, new, n) == out


def test_trim_removes_what_go_calls_space_only() -> None:
    assert cellib.trim(ct.StringType("\u3000\x85 a\t\n\v\f\r ")) == "a"
    assert cellib.trim(ct.StringType("\x1ca\x1c")) == "\x1ca\x1c"  # Python's strip takes it
