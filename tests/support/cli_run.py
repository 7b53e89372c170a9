"""The CLI run in-process from a test, its output captured: what the ``cli`` fixture (tests/conftest.py)
hands a test."""

from __future__ import annotations

from typing import Protocol

import pytest

from kbackup.cli.main import run


class RunCli(Protocol):
    def __call__(self, *args: str) -> tuple[int, str, str]:
        """``kafka-backup ARGS``: its exit code, and what it printed to stdout and stderr."""
        ...


def cli_in_process(capsys: pytest.CaptureFixture[str]) -> RunCli:
    def cli(*args: str) -> tuple[int, str, str]:
        code = run(list(args))
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return cli
