"""docs/cli.md is what the CLI says about itself."""

from __future__ import annotations

from pathlib import Path

from kbackup.cli.reference import render_cli_reference

DOC = Path(__file__).parents[2] / "docs" / "cli.md"


def test_cli_reference_is_current() -> None:
    assert DOC.read_text() == render_cli_reference(), (
        "docs/cli.md is stale: run `make docs` (python -m kbackup.cli.reference > docs/cli.md)"
    )


def test_every_command_is_documented() -> None:
    text = render_cli_reference()
    for command in ("backup", "restore", "show-offset-mapping", "offset-reset plan", "offset-reset execute",
                    "offset-rollback", "three-phase-restore", "drill"):  # fmt: skip
        assert f"## `kafka-backup {command}`" in text
