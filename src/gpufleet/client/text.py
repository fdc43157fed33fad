"""Text for people, shared by the client's messages and the CLI's output: control characters
written out visibly (a job's output or a listed name cannot drive a terminal), sizes in
powers of 1024."""

from __future__ import annotations

import re

# C0 controls but tab and newline (ESC among them; CR rewrites the line), DEL, and C1 (0x9b
# is a one-byte CSI to many terminals).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def safe(value: str) -> str:
    """The text with its control characters written out visibly (ESC as `\\x1b`)."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", value)


def size(count: int | None) -> str:
    """Bytes for people, in powers of 1024: `512 B`, `1.5 KiB`, `3.2 GiB`."""
    if count is None:
        return "-"
    if count < 1024:
        return f"{count} B"
    value = float(count)
    units = ("KiB", "MiB", "GiB", "TiB")
    for index, unit in enumerate(units):
        value /= 1024
        if value < 1024 or index == len(units) - 1:
            return f"{value:.1f} {unit}"
    return f"{count} B"  # not reached: the loop returns at its last unit
