"""Which commands keep a run's patience with a failing store (issue 34, item 4's leftover).

A command a person waits on (``list``, a plan of ``prune`` or ``rekey``, ``validate``) gives up on
a store that refuses connections in seconds; one that works unattended for minutes and changes
the store (``prune --execute``, from cron; ``rekey --execute``) or re-reads every segment
(``validate --deep``) rides out a restart as ``backup`` does, unless the file says otherwise.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kbackup.cli import backup_cmds, key_cmds, prune_cmds
from kbackup.cli.main import run
from kbackup.core.config import (
    INTERACTIVE_MAX_ATTEMPTS,
    INTERACTIVE_RETRY_TIMEOUT_SECS,
    StorageSettings,
)
from kbackup.core.errors import PreconditionError

RUN_PATIENCE = (StorageSettings().max_attempts, StorageSettings().retry_timeout_secs)
SHORT_PATIENCE = (INTERACTIVE_MAX_ATTEMPTS, INTERACTIVE_RETRY_TIMEOUT_SECS)
STORE = "s3://backups/kafka"


def patience_used(
    command: list[str], module: object, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[int, float]:
    """The storage settings ``command`` opens its store with; it stops there, before any request."""
    seen: list[StorageSettings] = []

    def open_storage(settings: StorageSettings, **_kwargs: object) -> object:
        seen.append(settings)
        raise PreconditionError("stopped before the store was opened")

    monkeypatch.setattr(module, "open_storage", open_storage)
    code = run(command)
    assert code == PreconditionError.exit_code, capsys.readouterr().err
    assert len(seen) == 1
    return seen[0].max_attempts, seen[0].retry_timeout_secs


@pytest.mark.parametrize(
    ("command", "module", "patience"),
    [
        (["prune", "-p", STORE, "--all", "--keep-last", "1", "--execute"], prune_cmds, RUN_PATIENCE),
        (["prune", "-p", STORE, "--all", "--keep-last", "1"], prune_cmds, SHORT_PATIENCE),
        (["validate", "-p", STORE, "--backup-id", "nightly", "--deep"], backup_cmds, RUN_PATIENCE),
        (["validate", "-p", STORE, "--backup-id", "nightly"], backup_cmds, SHORT_PATIENCE),
        (["rekey", "-p", STORE, "--new-encryption-key", "env:K", "--execute"], key_cmds, RUN_PATIENCE),
        (["rekey", "-p", STORE, "--new-encryption-key", "env:K"], key_cmds, SHORT_PATIENCE),
    ],
    ids=["prune-execute", "prune-plan", "validate-deep", "validate", "rekey-execute", "rekey-plan"],
)
def test_unattended_work_keeps_a_runs_patience_and_a_glance_gives_up_soon(
    command: list[str],
    module: object,
    patience: tuple[int, float],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert patience_used(command, module, monkeypatch, capsys) == patience


def test_the_files_retries_are_kept_either_way(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(f"storage:\n  url: {STORE}\n  max_attempts: 5\n  retry_timeout_secs: 30\n")
    for execute in ([], ["--execute"]):
        command = ["prune", "-c", str(config), "--all", "--keep-last", "1", *execute]
        assert patience_used(command, prune_cmds, monkeypatch, capsys) == (5, 30)
