"""Every command's --help speaks the operator's language (issue 18, item 13): metavars that say
what a value is (FILE, URL, HOST:PORT), never a Python type (``<list[str]>``), and each main command
carries one example that the real CLI parses as that very command."""

from __future__ import annotations

import re
from typing import Any

import pytest
import typer

from kbackup.cli.app import app
from tests.support.cli_lines import command_lines, parse_cli

#: A Python type where a metavar should be: <str>, <path>, <list[str]>, <int range>, ...
TYPE_MARKER = re.compile(r"<(?:str|path|int|float|bool|list|dict|uuid|text|integer)[^>]*>", re.IGNORECASE)

MAIN_COMMANDS = [
    "backup",
    "list",
    "describe",
    "validate",
    "status",
    "restore",
    "show-offset-mapping",
    "offset-reset plan",
    "offset-reset execute",
    "offset-reset-bulk",
    "offset-rollback",
    "three-phase-restore",
    "drill",
    "check",
    "sandbox",
]


def commands() -> dict[str, Any]:
    """Every leaf command by its path (``offset-reset plan``)."""
    found: dict[str, Any] = {}

    def walk(command: Any, path: list[str]) -> None:
        if hasattr(command, "commands"):
            for name, sub in command.commands.items():
                walk(sub, [*path, name])
        else:
            found[" ".join(path)] = command

    walk(typer.main.get_command(app), [])
    return found


def help_text(path: str) -> str:
    root: Any = typer.main.get_command(app)
    context = root.make_context("kafka-backup", [], resilient_parsing=True)
    command: Any = root
    for name in path.split():
        command = command.commands[name]
        context = command.make_context(name, [], parent=context, resilient_parsing=True)
    return str(command.get_help(context))


def test_the_main_commands_are_all_there() -> None:
    assert set(MAIN_COMMANDS) <= set(commands())


@pytest.mark.parametrize("path", sorted(commands()))
def test_help_shows_no_python_types(path: str) -> None:
    text = help_text(path)
    assert TYPE_MARKER.findall(text) == [], text


@pytest.mark.parametrize("path", MAIN_COMMANDS)
def test_each_main_command_has_one_example_that_parses_as_itself(path: str) -> None:
    lines = help_text(path).splitlines()
    examples = [index for index, line in enumerate(lines) if line.strip() == "Example:"]
    assert len(examples) == 1, lines
    [example] = command_lines(lines[examples[0] + 1], f"{path} --help")
    assert parse_cli(example.args) == path.split()


def test_the_type_marker_check_can_fail() -> None:
    assert TYPE_MARKER.findall(
        "  --include <list[str]>   Topic regex  -p, --path <str>  --n <int range>"
    ) == [
        "<list[str]>",
        "<str>",
        "<int range>",
    ]
