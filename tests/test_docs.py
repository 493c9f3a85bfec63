"""docs/labels.md is generated from the code and current; every emitted label is documented."""

from __future__ import annotations

from dataclasses import replace
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
from gfd.snapshot import ResourceManager

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


def test_the_label_table_has_one_row_per_catalogue_entry_in_order() -> None:
    rows = [line for line in render().splitlines() if line.startswith("| `")]
    assert [row.split("`")[1] for row in rows] == [doc.key for doc in LABELS]


def test_a_row_names_the_modules_and_escapes_pipes_in_cells() -> None:
    row = next(line for line in render().splitlines() if line.startswith("| `<R>.product`"))
    assert "`labelers/gpu.py` / `labelers/mig.py`" in row
    cells = row.strip("|").split(" | ")
    assert len(cells) == 8, "no unescaped '|' inside a cell"


def test_each_row_says_under_which_resource_managers_the_label_is_published() -> None:
    rows = {line.split("`")[1]: line for line in render().splitlines()
            if line.startswith("| `")}
    assert "| dra only |" in rows["gpu.present"]
    assert "| device-plugin only |" in rows["<R>.replicas"]
    assert "| device-plugin only |" in rows["mig.strategy"]
    assert "| both; under dra: the primary model's name" in rows["<R>.product"]
    assert "| both |" in rows["gpu.family"]


@pytest.mark.parametrize("machine", sorted(SIMULATIONS))
def test_every_simulated_machine_has_its_example_labels_under_dra(machine: str) -> None:
    heading = f"### `{machine}` (`--resource-manager dra`)\n"
    block = render().split(heading, 1)[1].split("```")[1]
    sim = simulate(machine)
    snapshot = replace(sim.snapshot, resource_manager=ResourceManager(name="dra"))
    labels = compute_labels(snapshot, LabelOptions(sharing=sim.sharing or Sharing())).labels
    assert block.strip().splitlines() == [f"{k}={v}" for k, v in labels.items()]
    assert ("nvidia.com/gpu.present=true" in block) == (machine != "no-gpu")


@pytest.mark.parametrize("machine", sorted(SIMULATIONS))
def test_every_simulated_machine_has_its_example_labels(machine: str) -> None:
    text = render()
    strategy = "mixed" if "mig" in machine else "none"
    heading = f"### `{machine}`" + (f" (`--mig-strategy {strategy}`)" if strategy != "none"
                                    else "")
    assert heading + "\n" in text
    block = text.split(heading + "\n", 1)[1].split("```")[1]
    sim = simulate(machine)
    options = LabelOptions(mig_strategy=strategy, sharing=sim.sharing or Sharing())
    labels = compute_labels(sim.snapshot, options).labels
    assert block.strip().splitlines() == [f"{k}={v}" for k, v in labels.items()]


def test_the_settings_rows_show_defaults_as_written_and_a_dash_for_none() -> None:
    from gfd.docs import render_settings

    rows = {line.split("`")[1]: line for line in render_settings().splitlines()
            if line.startswith("| `--")}
    assert "| `1m` | schedule |" in rows["--sleep-interval"]
    assert "| - | `" in rows["--sysfs-root"] and "| `/sys` | discovery |" in rows["--sysfs-root"]
    assert rows["--node-name"].split(" | ")[3] == '``', "an empty default is shown empty"
