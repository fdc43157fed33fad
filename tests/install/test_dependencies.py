"""Every module the package imports at run time comes from `[project].dependencies`.

The dev extras are installed wherever tests run, so an import only they satisfy (once:
`cryptography`, through trustme) passes every other tier and breaks a plain `pip install`.
An import inside `try: ... except ImportError` is optional by construction (PyTorch for the
example job) and is not required; neither is one under `if TYPE_CHECKING:`.
"""

from __future__ import annotations

import ast
import functools
import re
import sys
import tomllib
from collections.abc import Iterable
from importlib.metadata import packages_distributions
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "src" / "gpufleet"
IMPORT_ERRORS = {"ImportError", "ModuleNotFoundError"}


def declared_dependencies() -> list[str]:
    with (REPO / "pyproject.toml").open("rb") as fh:
        return list(tomllib.load(fh)["project"]["dependencies"])


def normalize(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()


def distribution_name(requirement: str) -> str:
    """`uvicorn[standard]>=0.29` -> `uvicorn` (PEP 508: the name leads)."""
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    if match is None:
        raise ValueError(f"not a requirement: {requirement!r}")
    return normalize(match[1])


def _catches_import_error(handler: ast.ExceptHandler) -> bool:
    caught = handler.type
    names = caught.elts if isinstance(caught, ast.Tuple) else [caught]
    return any(isinstance(n, ast.Name) and n.id in IMPORT_ERRORS for n in names)


class _RequiredImports(ast.NodeVisitor):
    """Top-level module names imported outside optional blocks, with their line numbers."""

    def __init__(self) -> None:
        self.found: list[tuple[str, int]] = []

    def visit_Try(self, node: ast.Try) -> None:
        if any(_catches_import_error(h) for h in node.handlers):
            for child in node.handlers + node.orelse + node.finalbody:
                self.visit(child)  # only the guarded body is optional
        else:
            self.generic_visit(node)

    def visit_If(self, node: ast.If) -> None:
        test = node.test
        if (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
            isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
        ):
            for child in node.orelse:
                self.visit(child)
        else:
            self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        self.found += [(alias.name.split(".")[0], node.lineno) for alias in node.names]

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level == 0 and node.module:
            self.found.append((node.module.split(".")[0], node.lineno))


@functools.cache
def imports_of(package: Path) -> tuple[tuple[tuple[str, str], ...], frozenset[str]]:
    """What `package` imports, read once a test process (parsing and walking it is a second
    of CPU, and three tests read it; #32): its required imports, each a top-level module and
    where, and the top-level module of every import, optional or not."""
    required: list[tuple[str, str]] = []
    named: set[str] = set()
    for path in sorted(package.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        visitor = _RequiredImports()
        visitor.visit(tree)
        where = path.relative_to(package.parent)
        required += [(module, f"{where}:{line}") for module, line in visitor.found]
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                named.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                named.add(node.module.split(".")[0])
    return tuple(required), frozenset(named)


@functools.cache
def providers() -> dict[str, list[str]]:
    """Import name -> the distributions installed here that provide it."""
    return packages_distributions()


def undeclared_imports(package: Path, requirements: Iterable[str]) -> dict[str, list[str]]:
    """Third-party modules `package` needs that no requirement provides: module -> where."""
    declared = {distribution_name(r) for r in requirements}
    missing: dict[str, list[str]] = {}
    for module, where in imports_of(package)[0]:
        if module in sys.stdlib_module_names or module == package.name:
            continue
        if declared.isdisjoint(normalize(d) for d in providers().get(module, [])):
            missing.setdefault(module, []).append(where)
    return missing


# Declared, yet never imported by name: what loads them, and why the package needs them.
LOADED_FOR_US = {
    "aiosqlite": "SQLAlchemy loads it for sqlite+aiosqlite:// URLs (the default database)",
    "jinja2": "Starlette's Jinja2Templates renders the web UI's pages with it",
}


def unimported_dependencies(package: Path, requirements: Iterable[str]) -> list[str]:
    """Declared distributions no module of `package` imports (in any block)."""
    imported = {normalize(d) for m in imports_of(package)[1] for d in providers().get(m, [])}
    return sorted({distribution_name(r) for r in requirements} - imported)


def test_every_declared_dependency_is_imported_or_said_why_not() -> None:
    """pydantic-settings was declared, installed with every `pip install`, and never used."""
    unused = unimported_dependencies(PACKAGE, declared_dependencies())
    assert unused == sorted(LOADED_FOR_US), (
        "in [project].dependencies of pyproject.toml but imported nowhere in the package "
        f"(drop it, or say in LOADED_FOR_US what loads it): {unused}"
    )


def test_every_runtime_import_of_the_package_is_a_declared_dependency() -> None:
    missing = undeclared_imports(PACKAGE, declared_dependencies())
    assert missing == {}, (
        "imported by the package but not in [project].dependencies of pyproject.toml "
        f"(a plain `pip install` would lack them): {missing}"
    )


def test_an_import_provided_only_by_an_undeclared_distribution_is_reported(
    tmp_path: Path,
) -> None:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "sub" / "certs.py").write_text(
        "import json\nfrom pkg import other\nfrom . import sibling\n"
        "import httpx\nfrom trustme import CA\n"
    )
    assert undeclared_imports(package, ["httpx>=0.27"]) == {"trustme": ["pkg/sub/certs.py:5"]}


def test_the_tls_module_needs_cryptography_declared() -> None:
    without = [r for r in declared_dependencies() if distribution_name(r) != "cryptography"]
    assert "cryptography" in undeclared_imports(PACKAGE, without)


def test_optional_and_type_checking_imports_are_not_required(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "optional.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import trustme\n"
        "try:\n    import torch\nexcept (ModuleNotFoundError, OSError):\n    torch = None\n"
        "try:\n    import pytest\nexcept ValueError:\n    pass\n"
    )
    # pytest is caught only for ValueError: still required.
    assert undeclared_imports(package, []) == {"pytest": ["pkg/optional.py:9"]}


def test_extras_and_spellings_of_a_requirement_name_the_distribution() -> None:
    assert distribution_name("uvicorn[standard]>=0.29") == "uvicorn"
    assert distribution_name("Prometheus_Client >= 0.20") == "prometheus-client"
    assert distribution_name("nvidia-ml-py>=12; sys_platform == 'linux'") == "nvidia-ml-py"
