"""The rule for the names a person gives things and types back on a command line: stored
configs and workers. One rule, and its words, as every surface says them."""

from __future__ import annotations

import re

from gpufleet.errors import InvalidInput

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")
# The rule in words: the API, the CLI and the pages (which check with the same pattern).
NAME_RULE = (
    "use letters, digits, '_', '-' and '.' (at most 128 characters, starting with a letter "
    "or digit; no '/' or spaces)"
)


# A label's key (a worker's labels, a job's `worker_labels`, a gang's `same_label`).
LABEL_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-/]{0,62}$")
LABEL_KEY_RULE = (
    "use letters, digits, '_', '-', '.', '/' (at most 63 characters, starting with a letter "
    "or digit)"
)


def check_name(kind: str, name: str) -> str:
    """`name` as NAME_RULE says; `kind` names the thing in the error ("config", "worker")."""
    if not NAME.fullmatch(name):
        raise InvalidInput(f"{kind} name {name[:130]!r} is not valid; {NAME_RULE}")
    return name


MAX_LABEL_VALUE = 256


def check_labels(labels: dict[str, str]) -> dict[str, str]:
    """Labels as every surface takes them (a worker's, a job's `worker_labels`, a pool's):
    keys as LABEL_KEY_RULE says, values of at most MAX_LABEL_VALUE characters."""
    for key, value in labels.items():
        if not LABEL_KEY.fullmatch(key):
            raise InvalidInput(f"label key {key!r} is not valid; {LABEL_KEY_RULE}")
        if len(value) > MAX_LABEL_VALUE:
            raise InvalidInput(
                f"label {key!r} is longer than {MAX_LABEL_VALUE} characters; shorten it"
            )
    return dict(labels)
