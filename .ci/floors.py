"""Print a pip constraints file pinning every runtime dependency of pyproject.toml to its
declared floor (``name>=X`` -> ``name==X``), for the CI run at the lower bounds.

    python .ci/floors.py > floors.txt && pip install -c floors.txt -e '.[test]'

Fails (exit 1, one line) when a dependency declares no floor: a range gfd is proven to
work with starts somewhere.
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement


def floors(pyproject: Path) -> list[str]:
    out = []
    for line in tomllib.loads(pyproject.read_text())["project"]["dependencies"]:
        req = Requirement(line)
        lows = [s.version for s in req.specifier if s.operator == ">="]
        if len(lows) != 1:
            raise SystemExit(f"floors: {line!r} has no single '>=' floor: declare one in "
                             f"pyproject.toml")
        out.append(f"{req.name}=={lows[0]}")
    return out


if __name__ == "__main__":
    root = Path(__file__).resolve().parent.parent
    print("\n".join(floors(root / "pyproject.toml")))
    sys.exit(0)
