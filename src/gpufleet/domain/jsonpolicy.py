"""What JSON the fleet will store: every value it takes must be one it can give back.

A value that one database refuses (NUL in PostgreSQL text, NaN in JSONB, an integer past the
column), that no encoder writes (a lone surrogate is not UTF-8) or that a worker's event
stream cannot carry (orjson stops at 254 levels and at 64-bit integers) is refused when it
arrives, with the place it was found, instead of being stored to break every later read.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import orjson

MAX_DEPTH = 32  # objects and arrays inside one another
MAX_VALUES = 100_000  # values in one body: arrays, objects, strings, numbers (keys not counted)
INT_MIN, INT_MAX = -(2**63), 2**63 - 1  # a 64-bit signed integer: SQLite's and orjson's range


@dataclass(frozen=True)
class Problem:
    """One value the policy refuses: where it is (keys and indexes) and what to change."""

    loc: tuple[str | int, ...]
    msg: str


def text_problem(text: str) -> str | None:
    """Why a string cannot be stored, or None: NUL characters and lone surrogates."""
    if "\x00" in text:
        return "contains a NUL character (\\u0000), which cannot be stored; remove it"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "contains a lone surrogate (such as \\ud800), which is not valid UTF-8; fix it"
    return None


def problems(value: Any, loc: tuple[str | int, ...] = ()) -> Iterator[Problem]:
    """Every place in a parsed JSON value that breaks the policy (depth-first, lazily)."""
    yield from _walk(value, loc, 0)


def first_problem(value: Any) -> Problem | None:
    return next(problems(value), None)


def _walk(value: Any, loc: tuple[str | int, ...], depth: int) -> Iterator[Problem]:
    if isinstance(value, dict | list):
        if depth >= MAX_DEPTH:
            yield Problem(loc, f"is nested more than {MAX_DEPTH} levels deep; flatten it")
            return
        if isinstance(value, dict):
            for key, item in value.items():
                why = text_problem(str(key))
                if why:
                    yield Problem(loc, f"has a key that {why}")
                    continue
                yield from _walk(item, (*loc, key), depth + 1)
        else:
            for index, item in enumerate(value):
                yield from _walk(item, (*loc, index), depth + 1)
    elif isinstance(value, str):
        why = text_problem(value)
        if why:
            yield Problem(loc, why)
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, int):
        if not INT_MIN <= value <= INT_MAX:
            yield Problem(loc, "is an integer outside -2^63 … 2^63-1; send a smaller number")
    elif isinstance(value, float):
        if not math.isfinite(value):
            yield Problem(loc, "is not a finite number (NaN or Infinity); send a number")
    else:  # not something JSON parses to
        yield Problem(loc, f"is a {type(value).__name__}, which JSON does not have")


# ---- counting values before parsing them ----------------------------------------------------

_OUTSIDE = re.compile(rb'[",\[{]')  # what starts a string, or adds a value
_CLOSES = re.compile(rb"\s*[\]}]")  # what makes the array or object before it empty
WINDOW = 256 * 1024  # bytes counted in one step of C-speed scans
PAUSE_EVERY = 2048  # steps of the slow scan between two calls of `pause`


def more_values_than(body: bytes, limit: int, pause: Callable[[], None] = lambda: None) -> bool:
    """Whether the JSON text holds more than `limit` values, told without parsing it.

    A document holds 1 + its commas + its non-empty arrays and objects, counting only the
    commas and brackets outside strings. Fewer commas and brackets than the limit, in or out
    of strings, settle it at once. Without a backslash, strings lie between alternate quotes
    and a window at a time is counted by C-speed scans; with one, a scan steps from one comma,
    bracket or quote to the next. Between steps it calls `pause` (the server lets the event
    loop's thread run there). Invalid JSON is counted as if valid: the parser refuses it."""
    if body.count(b",") + body.count(b"[") + body.count(b"{") < limit:
        return False
    if b"\\" in body:
        return _scan(body, limit, pause)
    commas = opens = empties = 0
    inside, carried = False, b""
    for start in range(0, len(body), WINDOW):
        parts = body[start : start + WINDOW].split(b'"')
        # each string, or its end, leaves one byte behind: `["a"]` is not empty
        outside = b"s".join(parts[1 if inside else 0 :: 2])
        outside = (carried + (b"s" if inside else b"") + outside).translate(None, b" \t\r\n")
        inside = inside != (len(parts) % 2 == 0)
        carried = outside[-1:] if outside[-1:] in (b"[", b"{") else b""  # `]` may come next
        outside = outside[: len(outside) - len(carried)]
        commas += outside.count(b",")
        opens += outside.count(b"[") + outside.count(b"{")
        empties += outside.count(b"[]") + outside.count(b"{}")
        if commas >= limit:  # 1 + commas values at least
            return True
        pause()
    opens += carried.count(b"[") + carried.count(b"{")
    return 1 + commas + opens - empties > limit


def _scan(body: bytes, limit: int, pause: Callable[[], None]) -> bool:
    values, pos, steps = 1, 0, 0
    while values <= limit:
        found = _OUTSIDE.search(body, pos)
        if found is None:
            return False
        pos = found.end()
        byte = body[found.start()]
        if byte == 0x22:  # '"': skip the string, to the first quote no backslash escapes
            if (pos := _string_end(body, pos)) < 0:
                return False
        elif byte == 0x2C or not _CLOSES.match(body, pos):  # a comma; a container's first
            values += 1
        steps += 1
        if steps % PAUSE_EVERY == 0:
            pause()
    return True


def _string_end(body: bytes, start: int) -> int:
    """Where the string opened just before `start` ends (past its quote); -1: it does not."""
    while (quote := body.find(b'"', start)) >= 0:
        before = quote - 1
        while body[before] == 0x5C:  # the opening quote stops this at worst
            before -= 1
        if (quote - 1 - before) % 2 == 0:  # an even run of backslashes escapes each other
            return quote + 1
        start = quote + 1
    return -1


# ---- reading back what an older version stored ---------------------------------------------

REPLACEMENT = "\ufffd"
_SURROGATE = re.compile("[\ud800-\udfff]")


def readable(value: Any, depth: int = 0) -> Any:
    """A value made one the policy takes: NUL and lone surrogates become U+FFFD,
    NaN and the infinities null, integers past 64 bits text, anything nested past the limit
    null. Rows written before the policy existed may hold these; nothing new can."""
    if isinstance(value, dict | list):
        if depth >= MAX_DEPTH:
            return None
        if isinstance(value, dict):
            return {readable(str(k), depth): readable(v, depth + 1) for k, v in value.items()}
        return [readable(item, depth + 1) for item in value]
    if isinstance(value, str):
        return _SURROGATE.sub(REPLACEMENT, value).replace("\x00", REPLACEMENT)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return value if INT_MIN <= value <= INT_MAX else str(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    return value  # not JSON: left for the encoder to refuse


def loads_stored(text: str | bytes) -> Any:
    """A JSON column as stored, readable whatever an older version let in (see `readable`)."""
    try:
        value = orjson.loads(text)  # refuses lone surrogates, NaN and Infinity: the rare case
    except orjson.JSONDecodeError:
        return readable(json.loads(text))
    # Counting brackets is C-fast; fewer than the limit cannot nest past it.
    raw = text if isinstance(text, str) else text.decode()
    if raw.count("[") + raw.count("{") >= MAX_DEPTH and first_problem(value) is not None:
        return readable(value)
    return value
