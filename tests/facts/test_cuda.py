"""The CUDA version decoded by the back end's rule: NVML's ``minor = (v % 1000) / 10``,
GFD's Tegra rule ``(v % 100) / 10`` (docs/gfd-compatibility.md, "Back ends")."""

from __future__ import annotations

import pytest

from gfd.facts.cuda import NVML_RULE, TEGRA_RULE, cuda_text, cuda_version, rule

CASES = [
    # version, NVML, Tegra
    (12040, (12, 4), (12, 4)),
    (12045, (12, 4), (12, 4)),  # integer division
    (13000, (13, 0), (13, 0)),
    (11080, (11, 8), (11, 8)),
    (12100, (12, 10), (12, 0)),  # a minor of 10: the rules part
    (12120, (12, 12), (12, 2)),
]


@pytest.mark.parametrize(("version", "nvml", "tegra"), CASES, ids=[str(c[0]) for c in CASES])
def test_each_back_end_decodes_by_its_rule(version: int, nvml: tuple[int, int],
                                           tegra: tuple[int, int]) -> None:
    assert cuda_version(version, backend="nvml") == nvml
    assert cuda_version(version, backend="vfio") == nvml
    assert cuda_version(version, backend="tegra") == tegra
    assert cuda_text(version, backend="nvml") == f"{nvml[0]}.{nvml[1]}"
    assert cuda_text(version, backend="tegra") == f"{tegra[0]}.{tegra[1]}"


def test_the_rule_named_is_the_rule_applied() -> None:
    assert rule("tegra") == TEGRA_RULE and "% 100" in TEGRA_RULE
    assert rule("nvml") == NVML_RULE and "% 1000" in NVML_RULE
