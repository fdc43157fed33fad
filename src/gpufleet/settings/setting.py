"""One setting, declared once: what the command line, the settings objects and the docs read.

Nothing here imports click or pydantic: `cli/options.py` makes a setting a click option,
`server/settings.py` and `worker/settings.py` make it a field, `settings/reference.py` a row of
docs/configuration.md.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class Kind(StrEnum):
    """How a value is written on the command line, and what it becomes."""

    TEXT = "text"
    INT = "int"
    FLOAT = "float"
    DURATION = "duration"  # seconds, or a number with ms, s, m or h: a float of seconds
    FLAG = "flag"  # on when given: a bool
    CHOICE = "choice"  # one of `choices`
    PATH = "path"
    FILE = "file"  # a path that is not a folder
    EXISTING_FILE = "existing file"
    FOLDER = "folder"  # a path that is not a file
    LIST = "list"  # comma-separated: a tuple of the entries, spaces around them dropped
    RATE = "rate"  # bytes per second: 800K, 50M, 1G (1024-based); an int
    SIZE = "size"  # bytes, written as a RATE is: 800K, 50M, 1G (1024-based); an int
    GPUS = "gpus"  # GPU indices, comma-separated: a tuple of ints, or None for all
    LABELS = "labels"  # key=value, repeatable: a dict


@dataclass(frozen=True)
class Setting:
    """A flag of a command, its environment variables and what it becomes.

    `name` is the field of the settings object and the command's parameter. Bounds: `above`
    (greater than), `least` (at least), `most` (at most). A number's bounds are checked by
    the command line (a usage error naming the flag and its variable) unless `cli_range` is
    False, and always by the settings object (an error naming the flag).
    """

    name: str
    kind: Kind
    help: str
    default: Any = None
    var: str = ""  # GPUFLEET_<var>; default: the name in capitals
    simpletuner: bool = False  # SIMPLETUNER_<var> is read too (the spec's alias)
    flag: str = ""  # default: --name-with-dashes
    short: str = ""  # e.g. -v
    metavar: str | None = None
    choices: tuple[str, ...] = ()
    above: float | None = None
    least: float | None = None
    most: float | None = None
    cli_range: bool = True
    show_default: str | None = None  # what --help says of a default that is computed
    secret: bool = False  # a credential: never shown, logged nor put in a process's arguments
    field: bool = True  # a field of the settings object (False: read by the command only)
    required: bool = False  # the settings object needs it (the command says how to give it)
    see: str = ""  # the page of docs/ that tells more, e.g. artifacts.md#retention

    @property
    def option(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")

    @property
    def env_vars(self) -> list[str]:
        """The GPUFLEET_ variable first, then the documented SIMPLETUNER_ alias."""
        var = self.var or self.name.upper()
        return [f"GPUFLEET_{var}", *([f"SIMPLETUNER_{var}"] if self.simpletuner else [])]

    def default_value(self) -> Any:
        """The default itself; a computed one (the host name) computed now."""
        return self.default() if callable(self.default) else self.default

    def bounds(self) -> str:
        """The bounds in words, for the docs: `> 0`, `0 to 65535`, `one of text, json`."""
        if self.choices:
            return "one of " + ", ".join(self.choices)
        low = f"> {self.above:g}" if self.above is not None else None
        if self.least is not None and self.most is not None:
            return f"{self.least:g} to {self.most:g}"
        if self.least is not None:
            low = f"≥ {self.least:g}"
        high = f"≤ {self.most:g}" if self.most is not None else None
        return ", ".join(b for b in (low, high) if b)

    def out_of_bounds(self, value: float) -> str | None:
        """What `value` breaks, as the end of a sentence naming the flag; None if nothing."""
        if self.above is not None and not value > self.above:
            return "must be positive" if self.above == 0 else f"must be more than {self.above:g}"
        if self.least is not None and not value >= self.least:
            return "must not be negative" if self.least == 0 else f"must be at least {self.least:g}"
        if self.most is not None and not value <= self.most:
            return f"must be at most {self.most:g}"
        return None


def duration_text(seconds: float) -> str:
    """How a duration is written: whole hours as `1h`, anything else in seconds."""
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g}h"
    return f"{seconds:g}"


NUMBERS = (Kind.INT, Kind.FLOAT, Kind.DURATION, Kind.RATE, Kind.SIZE)


class Table(Sequence[Setting]):
    """The settings of one process kind, in the order `--help` lists them."""

    def __init__(self, kind: str, *settings: Setting) -> None:
        self.kind = kind
        self._settings = settings
        self._by_name = {s.name: s for s in settings}
        if len(self._by_name) != len(settings):
            raise ValueError(f"{kind}: a setting is declared twice")

    def __getitem__(self, index: Any) -> Any:
        return self._settings[index]

    def __len__(self) -> int:
        return len(self._settings)

    def __iter__(self) -> Iterator[Setting]:
        return iter(self._settings)

    def named(self, name: str) -> Setting:
        return self._by_name[name]

    def fields(self) -> list[Setting]:
        return [s for s in self._settings if s.field]

    def flag_of(self, name: str) -> str:
        """The flag to name in an error about field `name` (`--name` if it has none)."""
        found = self._by_name.get(name)
        return found.option if found else "--" + name.replace("_", "-")


# The type a settings object annotates each kind's field with (a choice: any, e.g. a Literal).
ANNOTATIONS = {
    Kind.TEXT: "str",
    Kind.INT: "int",
    Kind.FLOAT: "float",
    Kind.DURATION: "float",
    Kind.FLAG: "bool",
    Kind.PATH: "Path",
    Kind.FILE: "Path",
    Kind.EXISTING_FILE: "Path",
    Kind.FOLDER: "Path",
    Kind.LIST: "tuple[str, ...]",
    Kind.RATE: "int",
    Kind.SIZE: "int",
    Kind.GPUS: "tuple[int, ...]",
    Kind.LABELS: "Mapping[str, str]",
}


def check_annotations(table: Table, annotations: Mapping[str, Any], owner: str) -> None:
    """A `TypeError` unless `owner` has a field for each setting of `table` that is one,
    annotated with its kind's type (`| None` where it defaults to None). Run where `owner`
    is defined, so that a field the table does not match fails the import."""
    wrong = []
    for declared in table.fields():
        want = ANNOTATIONS.get(declared.kind)
        if want is not None and declared.default is None and not declared.required:
            want += " | None"
        found = annotations.get(declared.name)
        if found is None or (want is not None and str(found) != want):
            wrong.append(f"{declared.name}: {want or 'a choice'}, not {found}")
    if wrong:
        raise TypeError(f"{owner} does not match the {table.kind} settings: " + "; ".join(wrong))
