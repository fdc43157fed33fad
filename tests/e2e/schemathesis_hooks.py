"""Schemathesis draws from the nasty values of `tests.nasty`, as the property test does.

Loaded by `st run` through `SCHEMATHESIS_HOOKS` (tests/e2e/test_schemathesis.py): each
generated JSON body may get one of those values put in place of one of its own, and bodies
are written as a careless client writes them (surrogates escaped, NaN as a literal), which
schemathesis' own serializer, strict UTF-8 without NaN, never sends.
"""

from __future__ import annotations

from typing import Any

import schemathesis
from hypothesis import strategies as st

from tests.nasty import dumps, nasty_in


@schemathesis.hook
def flatmap_body(context: Any, body: Any) -> st.SearchStrategy[Any]:
    return st.one_of(st.just(body), nasty_in(body))


@schemathesis.serializer("application/json")
def careless_json(_context: Any, value: Any) -> bytes:
    if isinstance(value, bytes):  # a raw body, as schemathesis' own serializer sends it
        return value
    return dumps(value, default=_raw)


def _raw(value: Any) -> str:
    """Schemathesis' stand-ins for binary data, as text."""
    return value.decode("latin-1") if isinstance(value, bytes) else str(value)
