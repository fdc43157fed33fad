"""Every malformed `job_submit` we can think of, for the tests that hand them to a worker
directly (bypassing the orchestrator's checks at submit): none of them may stop a worker."""

from __future__ import annotations

import json
import sys
from typing import Any

GOOD_COMMAND = [sys.executable, "-c", "print('fine')"]


def _deep(levels: int) -> Any:
    value: Any = "bottom"
    for _ in range(levels):
        value = {"x": value}
    return value


# What each offer holds besides its type and ids; the worker must report each one `failed`.
UNRUNNABLE: dict[str, dict[str, Any]] = {
    "config not an object": {"config": "not an object", "command": GOOD_COMMAND},
    "config a list": {"config": [1, 2], "command": None},
    "command a number": {"command": 42},
    "command an object": {"command": {"argv": "python"}},
    "command with an object in it": {"command": [sys.executable, {"x": 1}]},
    "command with a boolean": {"command": [sys.executable, True]},
    "command empty": {"command": []},
    "command an empty string": {"command": ""},
    "command of an empty name": {"command": ["", "x"]},
    "command with unbalanced quotes": {"command": "python -c 'print(1)"},
    "command with a NUL": {"command": [sys.executable, "-c", "print(1)\x00"]},
    "executable missing": {"command": ["no-such-trainer-gpufleet-test"]},
    "env a string": {"command": GOOD_COMMAND, "env": "A=1"},
    "env a list": {"command": GOOD_COMMAND, "env": [["A", "1"]]},
    "env name with =": {"command": GOOD_COMMAND, "env": {"BAD=KEY": "x"}},
    "env name empty": {"command": GOOD_COMMAND, "env": {"": "x"}},
    "env name with a NUL": {"command": GOOD_COMMAND, "env": {"A\x00B": "x"}},
    "env value with a NUL": {"command": GOOD_COMMAND, "env": {"A": "x\x00y"}},
    "env value null": {"command": GOOD_COMMAND, "env": {"A": None}},
    "env value an object": {"command": GOOD_COMMAND, "env": {"A": {"deep": 1}}},
    "gpu_count a word": {"command": GOOD_COMMAND, "gpu_count": "two"},
    "gpu_count negative": {"command": GOOD_COMMAND, "gpu_count": -1},
    "gpu_count a boolean": {"command": GOOD_COMMAND, "gpu_count": True},
    "timeout_s a word": {"command": GOOD_COMMAND, "timeout_s": "soon"},
    "timeout_s negative": {"command": GOOD_COMMAND, "timeout_s": -5},
    "timeout_s a list": {"command": GOOD_COMMAND, "timeout_s": [1]},
    "timeout_s NaN": {"command": GOOD_COMMAND, "timeout_s": float("nan")},
    "deep config, missing executable": {
        "config": _deep(200),
        "command": ["no-such-trainer-gpufleet-test"],
    },
    "huge config, missing executable": {
        "config": {"blob": "x" * 2_000_000},
        "command": ["no-such-trainer-gpufleet-test"],
    },
}

# Offers that name no job or attempt a report could name: logged and ignored.
NAMELESS: dict[str, dict[str, Any]] = {
    "no job_id": {"attempt_id": "a_nameless"},
    "job_id a number": {"job_id": 5, "attempt_id": "a_nameless"},
    "job_id empty": {"job_id": "", "attempt_id": "a_nameless"},
    "job_id a path": {"job_id": "../../etc", "attempt_id": "a_nameless"},
    "job_id with a NUL": {"job_id": "j_\x00", "attempt_id": "a_nameless"},
    "job_id huge": {"job_id": "j" * 100_000, "attempt_id": "a_nameless"},
    "attempt_id a number": {"job_id": "j_nameless", "attempt_id": 7},
    "attempt_id an object": {"job_id": "j_nameless", "attempt_id": {"a": 1}},
}

# Stream `data:` payloads that are no event at all, or events of no known type.
NOT_EVENTS: list[str] = [
    "not json",
    "5",
    '"a string"',
    "[" * 100_000 + "]" * 100_000,  # deeper than any JSON parser goes
    json.dumps({"type": ["a", "list"]}),
    json.dumps({"type": "no_such_event"}),
    json.dumps({"type": "job_cancel", "job_id": {"a": 1}, "attempt_id": [1]}),
]


def unrunnable_offers() -> list[tuple[str, dict[str, Any]]]:
    """(case, event) for each `UNRUNNABLE` case, with ids of its own (`j_bad_<n>`)."""
    return [
        (
            case,
            {
                "type": "job_submit",
                "job_id": f"j_bad_{n}",
                "attempt_id": f"a_bad_{n}",
                "config": {},
                "env": {},
                "gpu_count": 0,
                "timeout_s": None,
                **fields,
            },
        )
        for n, (case, fields) in enumerate(UNRUNNABLE.items())
    ]


def nameless_offers() -> list[dict[str, Any]]:
    return [
        {"type": "job_submit", "config": {}, "command": GOOD_COMMAND, **fields}
        for fields in NAMELESS.values()
    ]
