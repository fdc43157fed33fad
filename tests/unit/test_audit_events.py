"""Every event type the code writes is one the Audit page's type filter offers and accepts."""

from __future__ import annotations

import ast
from pathlib import Path

from gpufleet.domain.audit_events import EVENT_TYPES

SRC = Path(__file__).resolve().parents[2] / "src" / "gpufleet"


def _written_types() -> dict[str, str]:
    """The literal event types passed to any `.audit(...)` call in the package (both arms of
    a conditional expression count)."""
    found: dict[str, str] = {}
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "audit"
                and node.args
            ):
                continue
            first = node.args[0]
            arms = [first.body, first.orelse] if isinstance(first, ast.IfExp) else [first]
            for arm in arms:
                if isinstance(arm, ast.Constant) and isinstance(arm.value, str):
                    found[arm.value] = str(path.relative_to(SRC))
    return found


def test_every_audited_event_type_is_in_the_catalogue() -> None:
    written = _written_types()
    assert len(written) > 20, "the scan found too few audit calls to be looking at the code"
    missing = {t: where for t, where in written.items() if t not in EVENT_TYPES}
    assert missing == {}, f"add these to domain/audit_events.EVENT_TYPES: {missing}"
