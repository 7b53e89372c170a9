"""``--debug`` shows a KBackupError's traceback, and redacts it as everything else printed (issue 34,
item 1's leftover): the traceback's last line is the error's message, which may hold a secret a
lower layer put there, and its frames may hold one too."""

from __future__ import annotations

import pytest

from kbackup.cli import prune_cmds
from kbackup.cli.main import run
from kbackup.core.errors import StorageError
from kbackup.core.secrets import register_secret

MARKER = "debug-trace-MARKER-5e3f"


@pytest.mark.parametrize(
    ("error", "code"),
    [(StorageError(f"the store said: token={MARKER}"), StorageError.exit_code), (RuntimeError(MARKER), 1)],
    ids=["kbackup-error", "internal-error"],
)
def test_a_registered_secret_in_an_errors_traceback_is_not_printed_under_debug(
    error: Exception, code: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    register_secret(MARKER)

    def open_storage(*_args: object, **_kwargs: object) -> object:
        raise error

    monkeypatch.setattr(prune_cmds, "open_storage", open_storage)
    assert run(["--debug", "prune", "-p", "s3://backups/kafka", "--all", "--keep-last", "1"]) == code
    out, err = capsys.readouterr()
    assert "Traceback (most recent call last)" in err
    assert "open_storage" in err  # the frames are shown, only the secret is not
    assert MARKER not in out + err
    assert "***" in err
