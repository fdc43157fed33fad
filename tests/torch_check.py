"""Where PyTorch is needed, found without importing it: an import at collection costs every
test process about two CPU-seconds, whether or not it runs the module's tests (#32)."""

from __future__ import annotations

import importlib.util

import pytest


def needs_torch() -> None:
    """Skip the calling module (or test) where PyTorch is not installed (`make torch`)."""
    if importlib.util.find_spec("torch") is None:
        pytest.skip("PyTorch is not installed: `make torch`", allow_module_level=True)
