"""JSON values an attacker or a typo sends: the strategies every input test draws from.

Lone surrogates, NUL, C0 controls, nesting past any sane depth, integers past 32 and 64 bits,
NaN and the infinities, beside ordinary values so that what is accepted gets stored. A body
holding them cannot be sent by `httpx`'s `json=` (it writes UTF-8 and refuses NaN): `dumps`
writes them as Python's `json` does, with `\\ud800` escapes and `NaN` literals.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

NASTY_TEXT = [
    "\x00",
    "a\x00b",
    "\ud800",
    "x\udfffy",
    "\udc80",
    "\x1b[31mred\x1b[0m",
    "\u202e",
    "\ufeff",
    "",
    " ",
    "%00",
    "../../etc/passwd",
]
NASTY_NUMBERS: list[Any] = [
    2**31,
    3_000_000_000,
    2**63 - 1,
    2**63,
    2**64,
    -(2**63) - 1,
    10**20,
    10**400,
    float("nan"),
    float("inf"),
    float("-inf"),
    -0.0,
    1e308,
    5e-324,
]

texts = st.one_of(
    st.text(max_size=12),
    st.sampled_from(NASTY_TEXT),
    st.tuples(st.text(max_size=4), st.sampled_from(NASTY_TEXT)).map("".join),
    # every code point, surrogates included
    st.text(st.characters(codec=None, exclude_categories=()), max_size=6),
)
numbers = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from(NASTY_NUMBERS),
    st.floats(allow_nan=True, allow_infinity=True),
)
scalars = st.one_of(st.none(), st.booleans(), numbers, texts)


def nested(depth: int, leaf: Any = 1) -> Any:
    value = leaf
    for level in range(depth):
        value = [value] if level % 2 else {"a": value}
    return value


deep = st.integers(min_value=28, max_value=300).map(nested)
values = st.one_of(
    st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
        max_leaves=8,
    ),
    deep,
)
objects = st.dictionaries(texts, values, min_size=1, max_size=3)


def dumps(value: Any, default: Callable[[Any], Any] | None = None) -> bytes:
    """A body as a careless client writes it: surrogates escaped, NaN as a bare literal."""
    return json.dumps(value, default=default).encode()


def nasty_in(body: Any) -> st.SearchStrategy[Any]:
    """`body` with one nasty value put in place of one of its values, or beside them."""
    if isinstance(body, dict) and body:
        keys = sorted(body)
        return st.tuples(st.sampled_from(keys), values).map(
            lambda kv: {**body, kv[0]: kv[1]}
        ) | st.tuples(texts, values).map(lambda kv: {**body, kv[0]: kv[1]})
    if isinstance(body, list) and body:
        return st.tuples(st.integers(0, len(body) - 1), values).map(
            lambda iv: [*body[: iv[0]], iv[1], *body[iv[0] + 1 :]]
        )
    return values
