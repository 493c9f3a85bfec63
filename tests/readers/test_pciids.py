"""A ``--pci-ids`` file: read and parsed like the bundled database, refused in one line when it
cannot be read or is far too large to be one."""

from __future__ import annotations

from pathlib import Path

import pytest

from gfd.errors import BackendInitError
from gfd.readers.pciids import MAX_BYTES, load_file


def test_a_given_file_is_read_as_the_nvidia_section(tmp_path: Path) -> None:
    path = tmp_path / "pci.ids"
    path.write_text("#\tVersion: 2099.01.02\n10de  NVIDIA Corporation\n"
                    "\t2330  GH100 [H100 SXM5 80GB]\n10df  Emulex\n\t0001  Not ours\n")
    ids = load_file(str(path))
    assert ids.version == "2099.01.02" and dict(ids.names) == {0x2330: "GH100 [H100 SXM5 80GB]"}


def test_a_missing_file_is_one_line_naming_the_flag(tmp_path: Path) -> None:
    with pytest.raises(BackendInitError, match=r"cannot read the PCI IDs database .*--pci-ids"):
        load_file(str(tmp_path / "absent"))


def test_a_file_far_larger_than_the_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "huge"
    with path.open("wb") as out:
        out.truncate(MAX_BYTES + 1)
    with pytest.raises(BackendInitError, match=r"not a pci\.ids file"):
        load_file(str(path))
