"""Every ``--help`` the CLI prints, and the documents those texts send a reader to."""

from __future__ import annotations

import re

import typer
from typer.testing import CliRunner

from kbackup.cli.app import app
from kbackup.cli.reference import _commands


def all_help(width: int = 80) -> dict[str, str]:
    """Every --help the CLI prints, by command path."""
    root = typer.main.get_command(app)
    paths = [
        "kafka-backup",
        "kafka-backup offset-reset",
        *(path for path, _ in _commands(root, "kafka-backup")),
    ]
    runner = CliRunner()
    return {
        path: runner.invoke(app, [*path.split()[1:], "--help"], terminal_width=width).output for path in paths
    }


def cited_topics() -> set[str]:
    """The documents the help texts send a reader to (``kafka-backup docs TOPIC``)."""
    helps = {path: text for path, text in all_help(200).items() if path != "kafka-backup docs"}
    text = " ".join(" ".join(helps.values()).split())
    return set(re.findall(r"kafka-backup docs ([a-z][a-z-]*)", text))
