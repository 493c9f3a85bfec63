"""The suite's layout rule holds: every module of ``gfd/`` with code has its test module at
``tests/<package path>/test_<module>.py``; every test module outside the suites by kind
mirrors a module that exists; every directory under ``tests/`` is a package mirror, a suite
by kind, or a home for helpers and data; helpers hold no tests; and tests/README.md maps
every module to its test module (tests/README.md, "The rule")."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from helpers.paths import ROOT, TESTS

GFD = ROOT / "gfd"

NO_TEST_MODULE = {"__init__.py", "__main__.py"}
"""Modules that need no test module of their own: package markers and ``python -m gfd``."""

SUITES = {"cluster", "deploy", "e2e", "fakes", "faults", "fuzz", "image", "realapi", "suite"}
"""The suites by kind (tests/README.md): they test behaviour across modules."""

SUPPORT = {"helpers", "data"}
"""Helpers shared by test modules, and recorded data."""

IGNORED = {"__pycache__", ".build", ".hypothesis"}


def has_code(path: Path) -> bool:
    """True unless the module is empty or only a docstring."""
    body = ast.parse(path.read_text()).body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return bool(body)


def mirror_of(module: Path) -> Path:
    """``gfd/readers/host.py`` -> ``tests/readers/test_host.py``."""
    relative = module.relative_to(GFD)
    return TESTS / relative.parent / f"test_{relative.name}"


MODULES = sorted(p for p in GFD.rglob("*.py")
                 if p.name not in NO_TEST_MODULE and "__pycache__" not in p.parts)
PACKAGES = sorted(p.parent.relative_to(GFD) for p in GFD.rglob("__init__.py")
                  if p.parent != GFD)


def relative(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("module", MODULES, ids=relative)
def test_every_module_has_its_test_module(module: Path) -> None:
    assert has_code(module), f"{relative(module)} has no code: remove it or add code"
    expected = mirror_of(module)
    assert expected.is_file(), f"{relative(module)} has no test module: add {relative(expected)}"


def test_the_package_markers_are_the_only_modules_without_one() -> None:
    skipped = {p.name for p in GFD.rglob("*.py") if p not in MODULES}
    assert skipped <= NO_TEST_MODULE


def mirror_test_modules() -> list[Path]:
    """Test modules in tests/ itself and in the directories that mirror a gfd package."""
    found = list(TESTS.glob("test_*.py"))
    for package in PACKAGES:
        found += (TESTS / package).glob("test_*.py")
    return sorted(found)


@pytest.mark.parametrize("test_module", mirror_test_modules(), ids=relative)
def test_every_mirror_test_module_names_a_module_that_exists(test_module: Path) -> None:
    module = GFD / test_module.relative_to(TESTS).parent / test_module.name.removeprefix("test_")
    assert module.is_file(), (
        f"{relative(test_module)} mirrors no module ({relative(module)} does not exist): "
        f"rename it after the module it tests, or move it into a suite by kind "
        f"({', '.join(sorted(SUITES))})")


def test_every_test_directory_is_a_mirror_a_suite_or_support() -> None:
    mirrors = {str(p) for p in PACKAGES}
    directories = {str(p.relative_to(TESTS)) for p in TESTS.rglob("*") if p.is_dir()
                   and not IGNORED & set(p.relative_to(TESTS).parts)}
    top = {d for d in directories if "/" not in d}
    unknown = top - mirrors - SUITES - SUPPORT
    assert not unknown, f"directories that are neither a mirror nor a declared suite: {unknown}"
    for package in mirrors:
        assert package in directories, f"gfd/{package} has no tests/{package}"


@pytest.mark.parametrize("directory", sorted({str(p) for p in PACKAGES} | SUITES | {"helpers"}))
def test_every_python_test_directory_is_a_package(directory: str) -> None:
    # test modules share basenames across directories (test_base.py): each must be a package
    assert (TESTS / directory / "__init__.py").is_file()


def test_helpers_hold_no_tests() -> None:
    for path in (TESTS / "helpers").glob("*.py"):
        assert not path.name.startswith("test_"), relative(path)
        names = [n.name for n in ast.walk(ast.parse(path.read_text()))
                 if isinstance(n, ast.FunctionDef)]
        assert not [n for n in names if n.startswith("test_")], relative(path)


def test_the_readme_maps_every_module_to_its_test_module() -> None:
    readme = (TESTS / "README.md").read_text()
    missing = [f"| `{relative(m)}` | `{relative(mirror_of(m))}` |" for m in MODULES
               if f"| `{relative(m)}` | `{relative(mirror_of(m))}` |" not in readme]
    assert not missing, "add these rows to the table in tests/README.md:\n" + "\n".join(missing)


OUTSIDE_DOCUMENTS = re.compile(r"\bSPEC(\.md)?\s*§|\b(SPEC|DESIGN|TESTING)\.md\b|\.\./shared/")
"""How a module would cite the project's planning documents, which the repository does not
hold (a reader of the code cannot follow the reference)."""


def test_no_module_cites_a_document_outside_the_repository() -> None:
    cited = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
             for path in sorted((ROOT / "gfd").rglob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), 1)
             if OUTSIDE_DOCUMENTS.search(line)]
    assert not cited, "\n".join(cited)


def test_every_test_path_ci_names_exists() -> None:
    """.ci/run names test files and directories for its tiers (the dependency floors): a
    module moved or split must take its place there too, or that tier fails at once."""
    named = set(re.findall(r"(?<![\w/.-])(tests/[\w./-]+)", (ROOT / ".ci" / "run").read_text()))
    assert named, "no test path found in .ci/run"
    missing = sorted(p for p in named if not (ROOT / p.rstrip("/.")).exists())
    assert missing == []
