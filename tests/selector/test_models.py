"""Model names for --product: drawn from the bundled PCI IDs database and NVML's names; words
match in any order; exact values stay exact; unknown values are said to be unknown."""

from __future__ import annotations

import pytest

from gfd.pcidb import load_bundled
from gfd.selector.models import NVML_NAMES, families, models, resolve, words


def test_the_list_comes_from_the_pci_ids_database() -> None:
    names = models()
    assert len(names) > 500  # the database names far more GPUs than any hand list
    # a device line's bracketed name, with NVIDIA's prefix, is a model
    assert "NVIDIA L40S" in names and names["NVIDIA L40S"] == "ada-lovelace"
    assert "Tesla T4" in names and names["Tesla T4"] == "turing"  # old brands keep no prefix
    # both names of 'A2 / A16' are models; switches and unnamed chips are not
    assert {"NVIDIA A2", "NVIDIA A16"} <= set(names)
    assert not [n for n in names if "NVSwitch" in n]


def test_nvml_names_replace_the_database_name_only_where_they_differ() -> None:
    database = load_bundled().names
    for device, nvml in NVML_NAMES.items():
        assert device in database, f"{device:#06x} is not in the bundled database"
        assert nvml in models()
    assert "NVIDIA H100 SXM5 80GB" not in models()  # NVML calls 0x2330 'H100 80GB HBM3'
    assert "NVIDIA H100 80GB HBM3" in models()


@pytest.mark.parametrize("query, expected", [
    ("A100-80GB", {"NVIDIA-A100-80GB-PCIe", "NVIDIA-A100-SXM4-80GB"}),
    ("80GB-A100", {"NVIDIA-A100-80GB-PCIe", "NVIDIA-A100-SXM4-80GB"}),
    ("a10", {"NVIDIA-A10"}),
    ("RTX-PRO-6000", {"NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition",
                      "NVIDIA-RTX-PRO-6000-Blackwell-Workstation-Edition",
                      "NVIDIA-RTX-PRO-6000-Blackwell-Max-Q-Workstation-Edition"}),
])
def test_every_word_present_in_any_order(query: str, expected: set[str]) -> None:
    found = resolve(query)
    assert set(found.values) == expected and not found.exact and found.known


def test_every_model_with_the_words_has_them_all() -> None:
    for query in ("A100", "H100", "RTX-6000", "L4"):
        for value in resolve(query).values:
            assert set(words(query)) <= set(words(value)), (query, value)


def test_exact_values_with_or_without_shared_are_exact() -> None:
    plain = resolve("NVIDIA-A100-SXM4-40GB")
    assert plain.values == ("NVIDIA-A100-SXM4-40GB",) and plain.exact and plain.shared is None
    shared = resolve("Tesla-T4-SHARED")
    assert shared.values == ("Tesla-T4",) and shared.exact and shared.shared is True


def test_an_unknown_value_is_kept_and_marked_unknown() -> None:
    found = resolve("H999")
    assert found.values == ("H999",) and not found.known
    assert families(found) == set()


def test_families_come_from_the_chip() -> None:
    assert families(resolve("A100")) == {"ampere"}
    assert families(resolve("H100")) == {"hopper"}
    assert families(resolve("GB200")) == {"blackwell"}
