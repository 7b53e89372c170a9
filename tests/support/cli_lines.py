"""``kafka-backup ...`` command lines found in docs and examples, parsed against the real CLI.

Parsing goes through click's ``make_context`` for the root and each sub-command, exactly
as the CLI parses its arguments, but without invoking anything: an unknown option, a
missing required option, a bad value or an unknown command raises ``CliParseError``.
(typer vendors its own copy of click, so its classes are reached through the app.)
"""

from __future__ import annotations

import itertools
import re
import shlex
from dataclasses import dataclass
from typing import Any

import typer

from kbackup.cli.app import app

#: ``kafka-backup`` as a command word in shell text: at the start of a line or after a space, an
#: environment assignment, ``;``, ``&&``, ``|`` or ``(`` (not inside a path like ``~/.cache/kafka-backup``).
_COMMAND_START = re.compile(r"(?:^|[\s;&|(])kafka-backup(?=\s|$)")


@dataclass(frozen=True)
class CliLine:
    """One command line: where it was found and its arguments after ``kafka-backup``."""

    where: str
    args: list[str]


def join_continuations(text: str) -> list[str]:
    """Shell lines with ``\\`` continuations joined."""
    return text.replace("\\\n", " ").splitlines()


def command_lines(text: str, where: str) -> list[CliLine]:
    """Every ``kafka-backup`` invocation in shell text (comments after ``#`` dropped)."""
    found: list[CliLine] = []
    for number, line in enumerate(join_continuations(text), start=1):
        match = _COMMAND_START.search(line)
        if match is None:
            continue
        rest = line[match.end() :]
        words = shlex.split(rest, comments=True)
        # A command ends at the next shell operator (e.g. `kafka-backup list ... | jq`).
        for index, word in enumerate(words):
            if word in ("|", "||", "&&", ";", ">", "2>", "2>&1", "&"):
                words = words[:index]
                break
        found.append(CliLine(f"{where}:{number}", words))
    return found


def config_paths(args: list[str]) -> list[str]:
    """The config files a command line reads (``-c`` / ``--config``)."""
    return [value for flag, value in itertools.pairwise(args) if flag in ("-c", "--config")]


class CliParseError(ValueError):
    """The CLI would refuse these arguments (the message is click's)."""


def parse_cli(args: list[str]) -> list[str]:
    """Parse ``kafka-backup ARGS`` as the CLI would; return the command path, e.g. offset-reset plan."""
    root: Any = typer.main.get_command(app)
    path: list[str] = []
    try:
        context = root.make_context("kafka-backup", list(args))
        command = root
        while hasattr(command, "resolve_command"):  # a group: the next word names a sub-command
            # Groups keep the sub-command's name apart from its arguments, as click's invoke does.
            remaining = [*getattr(context, "_protected_args", []), *context.args]
            if not remaining:
                raise CliParseError(f"no command after {' '.join(['kafka-backup', *path])}")
            name, command, rest = command.resolve_command(context, remaining)
            path.append(name)
            context = command.make_context(name, rest, parent=context)
    except CliParseError:
        raise
    except Exception as exc:  # click's UsageError, BadParameter, NoSuchOption; Exit for --help/--version
        if getattr(exc, "exit_code", None) == 0:  # --version, --help: valid lines that exit early
            return path
        message = exc.format_message() if hasattr(exc, "format_message") else repr(exc)
        raise CliParseError(f"kafka-backup {' '.join(args)}: {message}") from None
    return path
