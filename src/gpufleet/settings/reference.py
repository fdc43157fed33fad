"""docs/configuration.md, written from the settings tables: `python -m gpufleet.settings.reference`
(from the repository's root; `tests/unit/test_settings_reference.py` checks it is current)."""

from __future__ import annotations

import sys
from pathlib import Path

from gpufleet.settings.server import SERVER
from gpufleet.settings.setting import Kind, Setting, Table, duration_text
from gpufleet.settings.worker import WORKER

PATH = Path("docs/configuration.md")
COMMAND = "python -m gpufleet.settings.reference"

INTRO = f"""# Configuration

Every setting of `gpufleet server` and `gpufleet worker`. Each is a flag; when the flag is
not given, the first of its environment variables that is set is read (the `SIMPLETUNER_*`
names are the ones SimpleTuner's specification documents, kept working for drop-in); else the
default holds. `gpufleet server --help` and `gpufleet worker --help` say the same.

Durations take `120`, `120s`, `2m`, `1h` or `500ms`. A number out of its bounds is refused
at start, in one line naming the flag. A flag's environment variable is `true`/`1` or
`false`/`0`.

<!-- Generated from the tables in src/gpufleet/settings/ by
`{COMMAND}`: edit them, not this file. -->
"""

TITLES = {
    "server": "`gpufleet server`: the orchestrator",
    "worker": "`gpufleet worker`: a worker agent",
}

KIND_WORDS = {
    Kind.TEXT: "text",
    Kind.INT: "integer",
    Kind.FLOAT: "number",
    Kind.DURATION: "duration",
    Kind.FLAG: "flag",
    Kind.CHOICE: "",
    Kind.PATH: "path",
    Kind.FILE: "file",
    Kind.EXISTING_FILE: "existing file",
    Kind.FOLDER: "folder",
    Kind.LIST: "comma-separated list",
    Kind.RATE: "bytes per second (`800K`, `50M`, `1G`)",
    Kind.SIZE: "bytes (`800K`, `50M`, `1G`)",
    Kind.GPUS: "GPU indices (`0,1`)",
    Kind.LABELS: "`key=value`, repeatable",
}


def default_text(setting: Setting) -> str:
    if setting.required:
        return "required"
    if setting.show_default is not None:
        return setting.show_default
    default = setting.default
    if default is None or default in ((), {}):
        return "none"
    if setting.kind is Kind.FLAG:
        return "on" if default else "off"
    if setting.kind is Kind.DURATION:
        text = duration_text(default)
        return f"`{text}`" if text.endswith("h") else f"`{text}s`"
    return f"`{default}`"


def values_text(setting: Setting) -> str:
    words = [KIND_WORDS[setting.kind], setting.bounds()]
    if setting.secret:
        words.append("secret")
    return ", ".join(w for w in words if w)


def row(setting: Setting) -> str:
    flag = f"`{setting.short}`, `{setting.option}`" if setting.short else f"`{setting.option}`"
    if setting.metavar:
        flag = flag[:-1] + f" {setting.metavar}`"
    cells = [
        flag,
        ", ".join(f"`{var}`" for var in setting.env_vars),
        default_text(setting),
        values_text(setting),
        setting.help + (f" See [{setting.see}]({setting.see})." if setting.see else ""),
    ]
    return "| " + " | ".join(_cell(cell) for cell in cells) + " |"


def _cell(text: str) -> str:
    """Markdown would take `|` for a column and `<data-dir>` for an HTML tag."""
    return text.replace("|", "\\|").replace("<", "&lt;")


def section(table: Table) -> str:
    lines = [
        f"## {TITLES[table.kind]}",
        "",
        "| option | environment | default | values | meaning |",
        "|---|---|---|---|---|",
        *(row(setting) for setting in table),
    ]
    return "\n".join(lines) + "\n"


def render() -> str:
    return "\n".join([INTRO, section(SERVER), section(WORKER)])


def main(argv: list[str]) -> None:
    target = Path(argv[0]) if argv else PATH
    target.write_text(render())
    print(f"wrote {target}")


if __name__ == "__main__":
    main(sys.argv[1:])
