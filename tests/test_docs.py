"""docs/labels.md is generated from the code and current; every emitted label is documented."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from gfd.cli import cli
from gfd.docs import render
from gfd.labelers.catalog import LABELS, describe
from gfd.labelers.options import LabelOptions
from gfd.labelers.pipeline import compute_labels
from gfd.readers.simulate import SIMULATIONS, simulate
from gfd.sharing import SharedResource, Sharing

DOC = Path(__file__).parent.parent / "docs" / "labels.md"


def test_docs_labels_md_is_current() -> None:
    assert DOC.read_text() == render(), "regenerate it: gfd docs > docs/labels.md"


def test_gfd_docs_prints_the_reference() -> None:
    assert CliRunner().invoke(cli, ["docs"]).stdout == render()


SHARED = Sharing(strategy="time-slicing", resources=(
    SharedResource(name="nvidia.com/gpu", replicas=2),
    SharedResource(name="nvidia.com/mig-1g.5gb", replicas=2)))


@pytest.mark.parametrize("machine", sorted(SIMULATIONS))
@pytest.mark.parametrize("strategy", ["none", "single", "mixed"])
@pytest.mark.parametrize("sharing", [Sharing(), SHARED], ids=["unshared", "shared"])
def test_every_label_the_code_emits_is_documented(machine: str, strategy: str,
                                                  sharing: Sharing) -> None:
    options = LabelOptions(mig_strategy=strategy, sharing=sharing, timestamp=1)
    labels = compute_labels(simulate(machine).snapshot, options).labels
    undocumented = [k for k in labels if describe(k) is None]
    assert undocumented == [], "declare them in their module's LABELS and regenerate the docs"


def test_every_documented_label_names_an_existing_labeler_module() -> None:
    root = Path(__file__).parent.parent / "gfd" / "labelers"
    for doc in LABELS:
        for module in doc.module.split("/"):
            assert (root / f"{module.strip()}.py").exists(), doc.key


SETTINGS_DOC = Path(__file__).parent.parent / "docs" / "settings.md"


def test_docs_settings_md_is_current() -> None:
    from gfd.docs import render_settings

    assert SETTINGS_DOC.read_text() == render_settings(), (
        "regenerate it: gfd docs settings > docs/settings.md")
    assert CliRunner().invoke(cli, ["docs", "settings"]).stdout == render_settings()


def test_settings_doc_has_one_row_per_setting_with_its_variables() -> None:
    from gfd.config import TABLE
    from gfd.docs import render_settings

    rows = [line for line in render_settings().splitlines() if line.startswith("| `--")]
    assert len(rows) == len(TABLE)
    mig = next(row for row in rows if row.startswith("| `--mig-strategy`"))
    assert "`GFD_MIG_STRATEGY`, `MIG_STRATEGY`" in mig and "`flags.migStrategy`" in mig
