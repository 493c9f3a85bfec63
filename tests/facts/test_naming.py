"""Naming rules: GFD's sanitise, product values and their suffixes, gfd's 63-character rule
(a long value is shortened in the model part, never dropped; NVIDIA/k8s-device-plugin#1876)
and accelerator slugs (docs/gfd-compatibility.md, "Sanitising and product names")."""

from __future__ import annotations

import re

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from gfd.facts.naming import accelerator_slug, product_value, sanitise
from gfd.labelers.validate import value_problem

# --- sanitise -----------------------------------------------------------------------

SANITISE_TABLE = [
    # GFD's own examples, exactly.
    ("NVIDIA-TITAN-X-(Pascal)", "NVIDIA-TITAN-X-Pascal"),
    ("some [ / thing / ]else", "some-thing-else"),
    ("  input  with multiple   spaces   ", "input-with-multiple-spaces"),
    ("NVIDIA A100-SXM4-40GB", "NVIDIA-A100-SXM4-40GB"),
]


@pytest.mark.parametrize(("raw", "expected"), SANITISE_TABLE, ids=[r for r, _ in SANITISE_TABLE])
def test_sanitise_reference_table(raw: str, expected: str) -> None:
    assert sanitise(raw) == expected


def test_sanitise_table_row_with_its_quotes_gives_the_same_result() -> None:
    # GFD's example writes the third row quoted; the quotes are removed characters anyway.
    assert sanitise('"  input  with multiple   spaces   "') == "input-with-multiple-spaces"


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("a+b,c:d/e", "abcde"),  # + , : / disappear (outside the kept set)
        ("x\ty", "xy"),  # only the space is kept as a separator; a tab is removed
        ("NVIDIA GeForce RTX 3060 Laptop GPU", "NVIDIA-GeForce-RTX-3060-Laptop-GPU"),
        ("g4dn.xlarge", "g4dn.xlarge"),
        ("under_score", "under_score"),
        ("", ""),
        ("   ", ""),
        ("(((", ""),
    ],
)
def test_sanitise_removes_and_joins(raw: str, expected: str) -> None:
    assert sanitise(raw) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("a--b", "a--b"),  # does not collapse repeated '-'
        ("a - b", "a---b"),  # '-' is kept, words joined with '-'
        ("-A100.", "-A100."),  # does not strip leading/trailing '-', '.', '_'
        ("_x_", "_x_"),
    ],
)
def test_sanitise_does_not_collapse_or_trim(raw: str, expected: str) -> None:
    assert sanitise(raw) == expected


def test_sanitise_does_not_enforce_63_characters() -> None:
    assert sanitise("A" * 100) == "A" * 100


_SANITISED = re.compile(r"[A-Za-z0-9\-_.]*")


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_sanitise_output_only_has_allowed_characters(text: str) -> None:
    assert _SANITISED.fullmatch(sanitise(text))


# --- product names and suffixes -------------------------------------------------------

A100 = "NVIDIA A100-SXM4-40GB"

PRODUCT_TABLE = [
    ("full-gpu", (), "NVIDIA-A100-SXM4-40GB"),
    ("full-gpu-shared", ("SHARED",), "NVIDIA-A100-SXM4-40GB-SHARED"),
    ("mig-device", ("MIG", "1g.5gb"), "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"),
    ("mig-device-shared", ("MIG", "1g.5gb", "SHARED"), "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb-SHARED"),
    ("invalid-single", ("MIG-INVALID",), "NVIDIA-A100-SXM4-40GB-MIG-INVALID"),
]


@pytest.mark.parametrize(
    ("suffixes", "expected"),
    [(s, e) for _, s, e in PRODUCT_TABLE],
    ids=[i for i, _, _ in PRODUCT_TABLE],
)
def test_product_value_reference_table(suffixes: tuple[str, ...], expected: str) -> None:
    value, _rules = product_value(A100, *suffixes)
    assert value == expected


def test_product_value_skips_empty_parts() -> None:
    # A product value is its sanitised, non-empty parts joined with '-'.
    assert product_value("(((", "MIG", "1g.5gb")[0] == "MIG-1g.5gb"
    assert product_value("", "SHARED")[0] == "SHARED"


def test_product_value_sanitises_the_model() -> None:
    assert product_value("NVIDIA TITAN X (Pascal)")[0] == "NVIDIA-TITAN-X-Pascal"


# --- the 63-character rule (gfd differs from GFD; NVIDIA/k8s-device-plugin#1876) --------

RTX_PRO = "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition"
RTX_PRO_SANITISED = "NVIDIA-RTX-PRO-6000-Blackwell-Max-Q-Workstation-Edition"  # 55 characters

# Reading of the rule: the model part is cut to the longest prefix that leaves room for
# '-' + the suffixes within 63 characters, then trailing '-', '.', '_' are trimmed.
LONG_CASES = [
    (
        "mig-1g.24gb",
        ("MIG", "1g.24gb"),
        "-MIG-1g.24gb",
        "NVIDIA-RTX-PRO-6000-Blackwell-Max-Q-Workstation-Edi-MIG-1g.24gb",
    ),
    (
        "mig-1g.24gb-shared",
        ("MIG", "1g.24gb", "SHARED"),
        "-MIG-1g.24gb-SHARED",
        "NVIDIA-RTX-PRO-6000-Blackwell-Max-Q-Workstat-MIG-1g.24gb-SHARED",
    ),
    (
        # The cut lands just after a '-', which is then trimmed (value is 62 long).
        "mig-1g.24gb.me-trims-trailing-dash",
        ("MIG", "1g.24gb.me"),
        "-MIG-1g.24gb.me",
        "NVIDIA-RTX-PRO-6000-Blackwell-Max-Q-Workstation-MIG-1g.24gb.me",
    ),
    (
        "mig-invalid",
        ("MIG-INVALID",),
        "-MIG-INVALID",
        "NVIDIA-RTX-PRO-6000-Blackwell-Max-Q-Workstation-Edi-MIG-INVALID",
    ),
]


@pytest.mark.parametrize(
    ("suffixes", "tail", "expected"),
    [(s, t, e) for _, s, t, e in LONG_CASES],
    ids=[i for i, *_ in LONG_CASES],
)
def test_long_product_is_shortened_in_the_model_part(
    suffixes: tuple[str, ...], tail: str, expected: str
) -> None:
    assert len(RTX_PRO_SANITISED + tail) > 63  # the case issue #1876 reports
    value, _rules = product_value(RTX_PRO, *suffixes)
    assert len(value) <= 63
    assert value.endswith(tail)  # suffixes kept whole
    head = value[: -len(tail)]
    assert RTX_PRO_SANITISED.startswith(head)
    assert head[-1] not in "-._"
    assert value_problem(value) is None
    assert value == expected


def test_long_product_that_fits_with_shared_is_unchanged() -> None:
    value, _rules = product_value(RTX_PRO, "SHARED")
    assert value == RTX_PRO_SANITISED + "-SHARED"  # 62 characters: nothing to shorten
    assert len(value) == 62
    assert value_problem(value) is None


def test_long_full_gpu_product_without_suffix_is_cut_to_63() -> None:
    model = "NVIDIA " + "Very Long Model Name " * 5
    value, _rules = product_value(model)
    assert len(value) <= 63
    assert sanitise(model).startswith(value)
    assert value_problem(value) is None


def test_product_value_of_exactly_63_characters_is_kept() -> None:
    model = "A" * 56
    value, _rules = product_value(model, "SHARED")
    assert value == "A" * 56 + "-SHARED"
    assert len(value) == 63


# --- accelerator slugs (gpu.accelerator)---------------------------------------------------

SLUGS = [
    ("Tesla T4", "nvidia-tesla-t4"),
    ("Tesla P4", "nvidia-tesla-p4"),
    ("NVIDIA H100 80GB HBM3", "nvidia-h100-80gb-hbm3"),
    ("NVIDIA A100-SXM4-40GB", "nvidia-a100-sxm4-40gb"),
    ("NVIDIA GeForce RTX 3060 Laptop GPU", "nvidia-geforce-rtx-3060-laptop-gpu"),
    ("H100 PCIe", "nvidia-h100-pcie"),
]


@pytest.mark.parametrize(("model", "slug"), SLUGS, ids=[m for m, _ in SLUGS])
def test_accelerator_slug(model: str, slug: str) -> None:
    assert accelerator_slug(model) == slug


def test_accelerator_slug_does_not_double_the_nvidia_prefix() -> None:
    assert not accelerator_slug("NVIDIA A10").startswith("nvidia-nvidia")


# --- properties ---------------------------------------------------------------------

SUFFIX_SETS = st.sampled_from([
    (),
    ("SHARED",),
    ("MIG", "1g.5gb"),
    ("MIG", "1g.10gb.me"),
    ("MIG", "1c.3g.20gb"),
    ("MIG", "1g.24gb", "SHARED"),
    ("MIG", "7g.80gb"),
    ("MIG-INVALID",),
])

MODEL_TEXT = st.one_of(
    st.text(max_size=120),
    st.text(alphabet="ABCDEFGHabcdefgh0123456789 -_.()/+", max_size=120),
    st.builds(lambda n: "NVIDIA " + n, st.text(alphabet="ABCXYZ0123456789 -", max_size=100)),
)


def _starts_alnum(text: str) -> bool:
    return bool(text) and text[0].isascii() and text[0].isalnum()


@settings(max_examples=300, deadline=None)
@given(model=MODEL_TEXT, suffixes=SUFFIX_SETS)
def test_product_value_is_a_valid_label_value_or_the_model_sanitised_to_nothing(
    model: str, suffixes: tuple[str, ...]
) -> None:
    value, rules = product_value(model, *suffixes)  # never raises
    assert isinstance(value, str)
    assert isinstance(rules, tuple)
    sanitised = sanitise(model)
    if sanitised == "":
        # Only the suffixes are left (or nothing): still a legal value.
        assert value == "-".join(suffixes)
        assert value_problem(value) is None
        return
    # GFD's sanitise keeps a leading '-', '.' or '_', and gfd's only deliberate fix is the
    # 63-character cut; such a value is left to validation.
    if not _starts_alnum(sanitised):
        return
    if not suffixes and not sanitised[-1].isalnum() and len(sanitised) <= 63:
        return  # a model ending in '-._' with no suffix: GFD's value, left to validation
    assert value_problem(value) is None, value
    assert len(value) <= 63
    suffix_text = "-".join(suffixes)
    if suffix_text:
        assert value.endswith("-" + suffix_text)


@settings(max_examples=100, deadline=None)
@given(model=st.text(max_size=200))
def test_accelerator_slug_is_a_valid_lowercase_value(model: str) -> None:
    # Only models with something left after sanitising reach the slug (a GPU has a name).
    assume(any(c.isascii() and c.isalnum() for c in sanitise(model)))
    slug = accelerator_slug(model)
    assert slug.startswith("nvidia")
    assert slug == slug.lower()
    assert value_problem(slug) is None, slug
