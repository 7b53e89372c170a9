"""docs/cli.md, generated from the CLI itself: ``python -m kbackup.cli.reference > docs/cli.md``.

A test compares the file with this output, so the reference cannot go stale.
"""

from __future__ import annotations

import inspect
from typing import Any

import typer


def _commands(group: Any, prefix: str) -> list[tuple[str, Any]]:
    found = []
    for name in sorted(getattr(group, "commands", {})):
        command = group.commands[name]
        path = f"{prefix} {name}"
        if getattr(command, "commands", None):
            found.extend(_commands(command, path))
        else:
            found.append((path, command))
    return found


def _option_row(param: Any) -> str | None:
    if getattr(param, "hidden", False) or param.param_type_name != "option":
        return None
    names = ", ".join(f"`{opt}`" for opt in [*param.opts, *param.secondary_opts])
    help_text = (getattr(param, "help", None) or "").replace("|", "\\|").replace("\n", " ")
    default = param.default
    described = getattr(param, "show_default", None)
    if isinstance(described, str):  # a default the config decides, as --help shows it
        shown = described
    elif described is False or getattr(param, "is_flag", False) or default in (None, (), [], False):
        shown = ""
    else:
        shown = f"`{default}`"
    required = "yes" if param.required else ""
    return f"| {names} | {help_text} | {shown} | {required} |"


def render_cli_reference() -> str:
    from kbackup.cli.app import app

    root = typer.main.get_command(app)
    lines = [
        "# CLI reference",
        "",
        "Generated from the CLI by `python -m kbackup.cli.reference`; do not edit by hand",
        "(`tests/unit/test_cli_reference.py` fails when this file is stale).",
        "",
        "Global options (before or after the command): "
        + ", ".join(f"`{opt}`" for param in root.params for opt in getattr(param, "opts", []))
        + ".",
        "",
    ]
    for path, command in _commands(root, "kafka-backup"):
        help_text = _markdown(inspect.cleandoc(command.help or ""))
        lines += [f"## `{path}`", "", help_text, ""]
        rows = [row for row in (_option_row(param) for param in command.params) if row]
        if rows:
            lines += ["| option | meaning | default | required |", "|---|---|---|---|", *rows, ""]
    return "\n".join(lines).rstrip() + "\n"


def _markdown(help_text: str) -> str:
    """A command's help as markdown: its ``Example:`` block (kept unwrapped by click's ``\\b``
    marker in --help) becomes a console code block."""
    description, marker, example = help_text.partition("\b\nExample:\n")
    if not marker:
        return help_text
    commands = [f"$ {line.strip()}" for line in example.splitlines() if line.strip()]
    return "\n".join([description.rstrip(), "", "Example:", "", "```console", *commands, "```"])


if __name__ == "__main__":
    print(render_cli_reference(), end="")
