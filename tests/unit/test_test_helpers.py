"""The tests' own habits, enforced: a test waits with tests/waiting.py, the one polling helper.
A second copy of it (a `wait_for` here, an `until` there, a loop that sleeps and reads the clock
against a deadline) is how the same helper came to be written five times, each with its own
pauses and its own failure message."""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
HOME = TESTS / "waiting.py"

# Names a generic polling helper goes by; domain waits (`wait_job`, a receiver's `wait_for`
# method) are fine, as long as they wait through `wait_until`.
GENERIC = re.compile(r"_*(wait_for|wait_until\w*|until|eventually|poll(_until)?)")
# Loops that sleep against a clock on purpose, and why; nothing here awaits a condition.
CLOCKS = {"monotonic", "time", "perf_counter"}
PACED = {
    ("e2e/test_door.py", "healthz_times"): "spreads its samples over the hostile traffic",
}


@functools.cache
def modules_of_tests() -> list[tuple[str, ast.Module]]:
    return [
        (path.relative_to(TESTS).as_posix(), ast.parse(path.read_text(), str(path)))
        for path in sorted(TESTS.rglob("*.py"))
        if path != HOME
    ]


def _called(node: ast.AST) -> set[str]:
    """The names of what is called anywhere inside `node` (`time.sleep` → `sleep`)."""
    names = set()
    for call in ast.walk(node):
        if isinstance(call, ast.Call):
            func = call.func
            names.add(func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", ""))
    return names


def _functions(tree: ast.Module) -> Iterator[ast.FunctionDef | ast.AsyncFunctionDef]:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node


def hand_written_polls(name: str, tree: ast.Module) -> list[str]:
    """Loops that sleep and read a clock (a deadline), or count their fixed pauses (`for _ in
    range(50)` with a `break`): polls that `wait_until` should make."""
    found = []
    for function in _functions(tree):
        if (name, function.name) in PACED:
            continue
        for loop in ast.walk(function):
            if not isinstance(loop, ast.While | ast.For | ast.AsyncFor):
                continue
            called = _called(loop)
            if "sleep" not in called:
                continue
            clock = any(  # a deadline: the clock compared (a time noted is no deadline)
                _called(compare) & CLOCKS
                for compare in ast.walk(loop)
                if isinstance(compare, ast.Compare)
            )
            # a counted poll's counter is anonymous; a scenario's rounds have a number
            counted = (
                isinstance(loop, ast.For)
                and "range" in _called(loop.iter)
                and getattr(loop.target, "id", None) == "_"
            )
            breaks = any(isinstance(n, ast.Break | ast.Return) for n in ast.walk(loop))
            if clock or (counted and breaks):
                found.append(f"{name}:{loop.lineno} in {function.name}()")
    return found


def test_no_test_module_defines_a_polling_helper_of_its_own() -> None:
    copies = [
        f"{name}:{node.lineno} {node.name}()"
        for name, tree in modules_of_tests()
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and GENERIC.fullmatch(node.name)
    ]
    assert copies == [], f"use tests/waiting.py's wait_until instead of: {copies}"


def test_no_test_polls_by_hand_against_a_deadline() -> None:
    polls = [poll for name, tree in modules_of_tests() for poll in hand_written_polls(name, tree)]
    assert polls == [], f"wait with tests/waiting.py's wait_until instead: {polls}"


def test_the_rules_see_the_copies_they_forbid() -> None:
    """Each rule, shown the shapes the old copies had, finds them."""
    deadline = ast.parse(
        "def wait_for(predicate, timeout):\n"
        "    deadline = time.monotonic() + timeout\n"
        "    while not predicate():\n"
        "        assert time.monotonic() < deadline\n"
        "        time.sleep(0.05)\n"
    )
    counted = ast.parse(
        "async def test_it():\n"
        "    for _ in range(50):\n"
        "        if seen():\n"
        "            break\n"
        "        await asyncio.sleep(0.05)\n"
    )
    assert hand_written_polls("a.py", deadline) == ["a.py:3 in wait_for()"]
    assert hand_written_polls("b.py", counted) == ["b.py:2 in test_it()"]
    assert GENERIC.fullmatch("until") and GENERIC.fullmatch("_wait_until_async")
    assert not GENERIC.fullmatch("wait_job")


def test_make_test_hands_out_the_browser_tier_as_one_unit_and_every_other_file_as_its_own() -> None:
    """`make test`'s units of work (tests/conftest.py): the browser files run in one process, on
    one Chromium and one server; any other file's tests stay together in theirs."""
    from tests.conftest import LONGEST_FIRST, work_unit

    browser = {
        work_unit(f"tests/browser/{name}.py::test_x")
        for name in ("test_ui", "test_queue_page", "test_sharing")
    }
    assert browser == {"tests/browser/"}
    assert work_unit("tests/api/test_dispatch.py::test_x[sqlite]") == "tests/api/test_dispatch.py"
    assert work_unit("tests/e2e/test_cli.py::test_y") != work_unit("tests/e2e/test_tls.py::test_y")
    # every unit named first is one that exists, and no browser file is named on its own
    root = Path(__file__).resolve().parents[2]
    for unit in LONGEST_FIRST:
        assert (root / unit).exists(), unit
        assert unit == "tests/browser/" or not unit.startswith("tests/browser/"), unit
