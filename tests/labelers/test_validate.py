"""Label validation with the API server's exact rules for keys (an optional DNS-subdomain
prefix and a name part of at most 63 characters) and values (at most 63 characters,
alphanumeric at both ends): an invalid label is dropped alone, never blocking the others."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gfd.labelers.validate import key_problem, validate, value_problem

# --- values --------------------------------------------------------------------------

VALUE_QUICK_CHECKS = [
    # Product-shaped values, a MIG profile, the empty value; a bracket, a trailing or leading
    # '-', one character too many.
    ("NVIDIA-A100-SXM4-40GB", True),
    ("1g.5gb", True),
    ("", True),
    ("NVIDIA-TITAN-X-(Pascal)", False),
    ("A100-", False),
    ("-A100", False),
    ("A" * 64, False),
]


@pytest.mark.parametrize(
    ("value", "valid"), VALUE_QUICK_CHECKS, ids=[repr(v[:24]) for v, _ in VALUE_QUICK_CHECKS]
)
def test_value_quick_checks(value: str, valid: bool) -> None:
    assert (value_problem(value) is None) is valid


@pytest.mark.parametrize(
    ("value", "valid"),
    [
        ("a" * 63, True),  # 0-63 characters
        ("a", True),
        ("A_b.c-D", True),
        ("a.", False),  # must end alphanumeric
        ("_a", False),  # must start alphanumeric
        ("a b", False),
        ("a/b", False),
        ("é", False),  # ASCII only
        ("abc\n", False),  # Python note: '$' would accept a trailing newline
        ("\n", False),
    ],
)
def test_value_rules(value: str, valid: bool) -> None:
    assert (value_problem(value) is None) is valid


# --- keys -----------------------------------------------------------------------------

# 253 characters, a valid subdomain with parts longer than 63 (the API does not check those).
PREFIX_253 = "a" * 126 + "." + "b" * 126
PREFIX_254 = "a" * 127 + "." + "b" * 126

KEY_CASES = [
    ("nvidia.com/gpu.product", True, "nvidia-prefix"),
    ("gpu.product", True, "no-prefix"),
    ("nvidia.com/gpu.product.NVIDIA-A100_80GB", True, "capitals-and-underscore-in-name"),
    ("feature.node.kubernetes.io/pci-10de.present", True, "long-prefix"),
    ("a-b.c-d/x", True, "hyphens-in-prefix"),
    ("Nvidia.com/gpu", False, "capital-in-prefix"),
    ("nvidia_com/gpu", False, "underscore-in-prefix"),
    ("-nvidia.com/gpu", False, "prefix-starts-with-dash"),
    ("nvidia.com-/gpu", False, "prefix-ends-with-dash"),
    ("nvidia..com/gpu", False, "empty-prefix-part"),
    ("/gpu", False, "empty-prefix"),
    ("nvidia.com/", False, "empty-name"),
    ("", False, "empty-key"),
    ("a/b/c", False, "two-slashes"),
    ("nvidia.com/" + "n" * 63, True, "name-63"),
    ("nvidia.com/" + "n" * 64, False, "name-64"),
    ("n" * 63, True, "bare-name-63"),
    ("n" * 64, False, "bare-name-64"),
    (PREFIX_253 + "/x", True, "prefix-253"),
    (PREFIX_254 + "/x", False, "prefix-254"),
    ("nvidia.com/-gpu", False, "name-starts-with-dash"),
    ("nvidia.com/gpu.", False, "name-ends-with-dot"),
    ("nvidia.com/_gpu", False, "name-starts-with-underscore"),
    ("nvidia.com/gpu count", False, "space-in-name"),
    ("nvidia.com/gpu\n", False, "trailing-newline-in-name"),
    ("nvidia.com\n/gpu", False, "newline-in-prefix"),
    ("nvidia.com/gpü", False, "non-ascii-name"),
]


@pytest.mark.parametrize(("key", "valid"), [(k, v) for k, v, _ in KEY_CASES],
                         ids=[i for *_, i in KEY_CASES])
def test_key_rules(key: str, valid: bool) -> None:
    assert (key_problem(key) is None) is valid


def test_prefix_length_cases_are_what_they_claim() -> None:
    assert len(PREFIX_253) == 253
    assert len(PREFIX_254) == 254


# --- validate() ------------------------------------------------------------------------


def test_validate_drops_one_bad_label_and_keeps_the_others() -> None:
    labels = {
        "nvidia.com/gpu.product": "NVIDIA-TITAN-X-(Pascal)",  # bad value
        "nvidia.com/gpu.count": "2",
        "Bad.Prefix/x": "1",  # bad key
        "nvidia.com/cuda.driver.rev": "",  # empty value is valid
    }
    good, rejected = validate(labels)
    assert good == {"nvidia.com/gpu.count": "2", "nvidia.com/cuda.driver.rev": ""}
    assert {r.key for r in rejected} == {"nvidia.com/gpu.product", "Bad.Prefix/x"}
    by_key = {r.key: r for r in rejected}
    assert by_key["nvidia.com/gpu.product"].value == "NVIDIA-TITAN-X-(Pascal)"
    assert by_key["Bad.Prefix/x"].reason != by_key["nvidia.com/gpu.product"].reason


def test_validate_of_nothing() -> None:
    assert validate({}) == ({}, ())


# Independent oracle written from the API server's rules (re.fullmatch: '$' would accept a
# trailing newline).
_PREFIX_RE = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_NAME_RE = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_VALUE_RE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


def _oracle_key_ok(key: str) -> bool:
    if key.count("/") > 1:
        return False
    if "/" in key:
        prefix, name = key.split("/")
        if not prefix or len(prefix) > 253 or not _PREFIX_RE.fullmatch(prefix):
            return False
    else:
        name = key
    return 1 <= len(name) <= 63 and bool(_NAME_RE.fullmatch(name))


def _oracle_value_ok(value: str) -> bool:
    return len(value) <= 63 and bool(_VALUE_RE.fullmatch(value))


_KEY_CHARS = "abcXYZ019-_./ \n"
KEYS = st.one_of(
    st.text(alphabet=_KEY_CHARS, max_size=80),
    st.builds(lambda n: "nvidia.com/" + n, st.text(alphabet=_KEY_CHARS, max_size=70)),
    st.text(max_size=20),
)
VALUES = st.one_of(
    st.text(alphabet="abcXYZ019-_. ()\n", max_size=70),
    st.text(max_size=10),
)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(KEYS, VALUES, max_size=12))
def test_validate_never_returns_an_invalid_label_and_never_raises(labels: dict[str, str]) -> None:
    good, rejected = validate(labels)
    for k, v in good.items():
        assert _oracle_key_ok(k), k
        assert _oracle_value_ok(v), v
        assert labels[k] == v
    # Nothing is lost and nothing valid is dropped: every label is kept or rejected.
    assert set(good) | {r.key for r in rejected} == set(labels)
    assert not set(good) & {r.key for r in rejected}
    for r in rejected:
        assert not (_oracle_key_ok(r.key) and _oracle_value_ok(r.value)), r


@settings(max_examples=100, deadline=None)
@given(
    st.dictionaries(
        st.builds(lambda n: "nvidia.com/" + n, st.from_regex(r"[a-z][a-z0-9.]{0,20}[a-z0-9]",
                                                              fullmatch=True)),
        st.from_regex(r"[A-Za-z0-9]{0,20}", fullmatch=True),
        min_size=1, max_size=8,
    ),
    st.sampled_from([("nvidia.com/bad key", "x"), ("nvidia.com/ok", "bad value!"),
                     ("A/b", "1"), ("nvidia.com/long", "x" * 64)]),
)
def test_one_bad_label_does_not_drop_the_others(
    valid: dict[str, str], bad: tuple[str, str]
) -> None:
    labels = {**valid, bad[0]: bad[1]}
    good, rejected = validate(labels)
    assert good == {k: v for k, v in valid.items() if k != bad[0]}
    assert [r.key for r in rejected] == [bad[0]]
