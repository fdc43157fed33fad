"""The layering docs/architecture.md draws, read from the source: imports point down only."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "gpufleet"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def module_imports(source: str, name: str) -> set[str]:
    """What a module imports when it is imported: its top-level imports, not those under
    `if TYPE_CHECKING:` nor those inside functions (run later, they cannot make a cycle)."""
    found: set[str] = set()
    package = name if name.count(".") == 0 else name.rsplit(".", 1)[0]

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    base = f"{anchor}.{base}" if base else anchor
                # `from package import module` imports that module (the package is already
                # on its way in); `from module import name` imports the module.
                subs = {f"{base}.{alias.name}" for alias in node.names}
                found.update(subs if subs & KNOWN else {base})
            elif isinstance(node, ast.If) and not _is_type_checking(node):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)

    visit(ast.parse(source).body)
    return found


KNOWN = {module_name(path) for path in PACKAGE.rglob("*.py") if "migrations" not in path.parts}


def all_modules() -> dict[str, set[str]]:
    return {
        module_name(path): module_imports(path.read_text(), module_name(path))
        for path in sorted(PACKAGE.rglob("*.py"))
        if "migrations" not in path.parts
    }


MODULES = all_modules()


def imports_of(prefix: str) -> dict[str, set[str]]:
    return {m: found for m, found in MODULES.items() if m == prefix or m.startswith(prefix + ".")}


def test_the_scan_sees_the_imports_it_judges() -> None:
    # The positive control: without it, every check below could pass on an empty scan.
    assert "gpufleet.store" in " ".join(MODULES["gpufleet.server.services.dispatch"])
    assert "fastapi" in MODULES["gpufleet.server.app"]
    assert len(imports_of("gpufleet.domain")) >= 10
    assert "gpufleet.settings.setting" in MODULES["gpufleet.settings.server"]
    assert module_imports("from gpufleet.server import app\n", "x") == {"gpufleet.server.app"}
    assert module_imports("from gpufleet.errors import X\n", "x") == {"gpufleet.errors"}
    typed_only = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import fastapi\n"
    assert "fastapi" not in module_imports(typed_only, "gpufleet.domain.x")


# Pure libraries the rules may use, no I/O in either: orjson parses (jsonpolicy refuses what it
# cannot carry), cryptography seals (secrets).
DOMAIN_LIBRARIES = {"orjson", "cryptography"}


def test_the_domain_imports_only_the_standard_library_and_itself() -> None:
    allowed = set(sys.stdlib_module_names) | DOMAIN_LIBRARIES | {"gpufleet"}
    for module, found in imports_of("gpufleet.domain").items():
        for name in found:
            top = name.split(".")[0]
            ours = name.startswith("gpufleet.domain") or name.startswith("gpufleet.errors")
            assert top in allowed and (top != "gpufleet" or ours or name == "gpufleet"), (
                f"{module} imports {name}"
            )


@pytest.mark.parametrize(
    ("layer", "forbidden"),
    [
        ("gpufleet.server.routes", ("gpufleet.store",)),
        ("gpufleet.server.services", ("fastapi", "starlette", "gpufleet.server.routes")),
        ("gpufleet.store", ("gpufleet.server", "gpufleet.worker", "gpufleet.cli", "fastapi")),
        ("gpufleet.cli", ("gpufleet.store", "gpufleet.server.services")),
        # The Python client: the CLI is built on it, so it knows no command (click, rich)
        # and, as the CLI, neither the server nor the store.
        (
            "gpufleet.client",
            ("gpufleet.server", "gpufleet.store", "gpufleet.cli", "gpufleet.worker", "click"),
        ),
        ("gpufleet.client", ("rich", "fastapi")),
        ("gpufleet.worker", ("gpufleet.server", "gpufleet.store", "fastapi")),
        # The settings tables: read by the CLI, the server and the worker, made into options
        # and fields by them, so they import none of them, nor click or pydantic.
        (
            "gpufleet.settings",
            ("click", "pydantic", "fastapi", "gpufleet.cli", "gpufleet.server", "gpufleet.worker"),
        ),
    ],
)
def test_a_layer_does_not_reach_past_the_one_below(layer: str, forbidden: tuple[str, ...]) -> None:
    for module, found in imports_of(layer).items():
        bad = sorted(n for n in found for f in forbidden if n == f or n.startswith(f + "."))
        assert not bad, f"{module} imports {bad}"


MAX_MODULE_LINES = 400  # a module past this holds more than one concept: split it


def test_no_module_is_over_400_lines() -> None:
    files = sorted(PACKAGE.rglob("*.py"))
    assert len(files) > 50
    long = {
        str(path.relative_to(PACKAGE)): n
        for path in files
        if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}, "split these modules by concept (docs/architecture.md)"


def test_no_module_imports_itself_back_through_others() -> None:
    graph = {m: {n for n in found if n in MODULES and n != m} for m, found in MODULES.items()}
    state: dict[str, int] = {}  # 1: on the current path; 2: done

    def walk(module: str, path: list[str]) -> None:
        state[module] = 1
        for nxt in sorted(graph[module]):
            if state.get(nxt) == 1:
                cycle = [*path[path.index(nxt) :], nxt] if nxt in path else [module, nxt]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if nxt not in state:
                walk(nxt, [*path, nxt])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            walk(module, [module])


# No test reads outside the repository: a fresh clone with nothing beside it runs every tier.
REPO = PACKAGE.parents[1]


def _climb(node: ast.expr) -> int | None:
    """How many folders up from its file an expression rooted in `__file__` points (its
    folder is 1), or None where it is not such a path."""
    levels = 0
    while True:
        if isinstance(node, ast.Attribute):
            levels += node.attr == "parent"
            node = node.value
        elif isinstance(node, ast.Subscript):
            index = node.slice
            if isinstance(node.value, ast.Attribute) and node.value.attr == "parents":
                if not (isinstance(index, ast.Constant) and isinstance(index.value, int)):
                    return None
                levels += index.value + 1
                node = node.value.value
            else:
                node = node.value
        elif isinstance(node, ast.Call):
            rooted = [r for r in map(_climb, node.args) if r is not None]
            if rooted:  # Path(__file__), Path(os.path.abspath(__file__))
                return levels + max(rooted)
            node = node.func
        elif isinstance(node, ast.Name):
            return levels if node.id == "__file__" else None
        else:
            return None


# Spelled in two parts, so that a grep for the folder beside the repository finds no test.
BESIDE = "../sha" + "red"
SPEC_DIR = "sha" + "red/spec"


def paths_outside(source: str, relative: Path) -> list[str]:
    """Where a test file names a path outside the repository: a climb from `__file__` above
    the repository's root, a path joined with `..`, or the `shared/` folder beside it."""
    depth = len(relative.parts)  # tests/unit/x.py: its root is 3 folders up
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if BESIDE in node.value or SPEC_DIR in node.value:
                found.append(f"line {node.lineno}: {node.value!r}")
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            joined = [node.left, node.right]
            for part in joined:
                if isinstance(part, ast.Constant) and ".." in str(part.value).split("/"):
                    found.append(f"line {node.lineno}: joins {part.value!r}")
        if isinstance(node, (ast.Attribute, ast.Subscript)):
            levels = _climb(node)
            if levels is not None and levels > depth:
                found.append(f"line {node.lineno}: {levels} folders up from {relative}")
    return found


def test_the_outside_check_finds_what_it_is_for() -> None:
    here = Path("tests/e2e/test_x.py")
    assert paths_outside('P = Path(__file__).resolve().parents[2] / "src"\n', here) == []
    assert paths_outside("P = Path(__file__).resolve().parent.parent.parent\n", here) == []
    assert paths_outside('x = {"job_id": "../../etc"}\n', here) == []  # hostile data, not a path
    for outside in [
        'SPEC = Path(__file__).resolve().parents[2] / ".." / "' + "sha" + 'red" / "x.md"\n',
        "P = Path(__file__).resolve().parents[3]\n",
        "P = Path(__file__).parent.parent.parent.parent / 'x'\n",
        "P = Path(os.path.abspath(__file__)).parents[5]\n",
        f'open("{BESIDE}/spec/x.md")\n',
        'P = ROOT / "../x"\n',
    ]:
        assert paths_outside(outside, here), outside


def test_no_test_reads_outside_the_repository() -> None:
    files = sorted((REPO / "tests").rglob("*.py"))
    assert len(files) > 50
    found = {
        str(path.relative_to(REPO)): where
        for path in files
        if path != Path(__file__).resolve()  # its own examples above
        and (where := paths_outside(path.read_text(), path.relative_to(REPO)))
    }
    assert found == {}, "a test reads outside the repository (copy what it needs into tests/)"
