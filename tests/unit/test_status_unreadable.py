"""``kafka-backup status`` over a store where one backup cannot be read (issue 34): the others are
still shown and alerted on, the unreadable one is named with the reason in one line (text, stderr and
``--json``), and the exit code is the alert's 16 when an alert fires, else the unreadable backup's own
(8 damaged, 18 encrypted without the key): a damaged backup never passes as healthy, and never hides
another backup's alert (docs/status.md, docs/exit-codes.md).

The backups are built with the format writer (kbackup/sandbox/synthetic_backup.py); ``nightly`` is
committed four days ago by building it under a clock set back, and ``broken`` is the bad-JSON fixture
of tests/fixtures/damaged_backups. No Kafka.
"""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from kbackup.cli.main import run
from kbackup.core.config import EncryptionSettings
from kbackup.core.errors import BackupIntegrityError, EncryptionKeyError, RecoveryPointAlert
from kbackup.format.catalog import BackupCatalog, commit_manifest
from kbackup.format.encryption import keys_for_new_backup
from kbackup.format.layout import manifest_key
from kbackup.sandbox import synthetic_backup
from kbackup.sandbox.synthetic_backup import BackupBuilder, BackupRecord
from kbackup.storage import LocalStorage, open_key
from kbackup.storage.keys import new_key_text

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "damaged_backups"
BROKEN_REASON = "manifest broken/manifests/00000000.json is not valid JSON"


def status(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = run(["status", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def build(
    storage: LocalStorage, backup_id: str, scratch: Path, increments: int = 1, age: timedelta | None = None
) -> None:
    """``increments`` increments of ten records of orders/0, the last committed ``age`` ago."""
    patch = pytest.MonkeyPatch()
    if age is not None:
        moment = (datetime.now(UTC) - age).isoformat(timespec="milliseconds").replace("+00:00", "Z")
        patch.setattr(synthetic_backup, "utc_now_iso", lambda: moment)
    try:
        for increment in range(increments):
            builder = BackupBuilder(storage, backup_id, scratch_dir=scratch)
            builder.topic("orders", 1)
            builder.partition(
                "orders",
                0,
                [BackupRecord(offset=increment * 10 + o, value=b"v", timestamp=1_000 + o) for o in range(10)],
            )
            builder.commit()
    finally:
        patch.undo()


def add_broken(store: Path, backup_id: str = "broken") -> None:
    shutil.copytree(FIXTURES / "bad-json" / "nightly", store / backup_id)


def stderr_lines(err: str) -> list[str]:
    return err.strip().splitlines()


@pytest.mark.parametrize("as_json", [False, True])
def test_a_damaged_backup_does_not_hide_another_backups_alert(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], as_json: bool
) -> None:
    store = tmp_path / "store"
    storage = LocalStorage(store)
    build(storage, "nightly", tmp_path, age=timedelta(days=4))
    json_flag = ["--json"] if as_json else []
    # The control: nightly alone breaches --max-age 1h.
    code, _out, err = status(capsys, "-p", str(store), "--max-age", "1h", *json_flag)
    assert code == RecoveryPointAlert.exit_code, err
    add_broken(store)

    code, out, err = status(capsys, "-p", str(store), "--max-age", "1h", *json_flag)

    assert code == RecoveryPointAlert.exit_code, (code, out, err)
    lines = stderr_lines(err)
    assert lines[0].startswith("kafka-backup: alert: backup nightly: last increment 0 was committed 4d"), err
    assert "over --max-age 1h" in lines[0]
    assert lines[1].startswith(f"kafka-backup: unreadable: backup broken: {BROKEN_REASON}"), err
    assert lines[2].startswith("kafka-backup: next step: "), err
    assert len(lines) == 3, err
    if as_json:
        payload = json.loads(out)
        assert [b["backup_id"] for b in payload["backups"]] == ["nightly"]
        (unreadable,) = payload["unreadable"]
        assert (unreadable["backup_id"], unreadable["kind"], unreadable["exit_code"]) == (
            "broken",
            "backup-integrity",
            BackupIntegrityError.exit_code,
        )
        assert unreadable["message"].startswith(BROKEN_REASON)
        assert [(b["backup_id"], b["limit"]) for b in payload["breaches"]] == [("nightly", "max-age")]
        assert payload["ok"] is False
    else:
        shown = out.splitlines()
        assert shown[0].startswith(f"backup broken in {store}: cannot be read: {BROKEN_REASON}"), out
        assert shown[1].startswith(f"backup nightly in {store}: increment 0 committed "), out


@pytest.mark.parametrize("limits", [[], ["--max-age", "1h"]])
def test_a_damaged_backup_among_fresh_ones_exits_8_and_shows_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], limits: list[str]
) -> None:
    """No alert fires: the unreadable backup gives the exit code, and the fresh ones are shown."""
    store = tmp_path / "store"
    storage = LocalStorage(store)
    build(storage, "a-first", tmp_path)
    build(storage, "c-third", tmp_path, increments=2)
    code, out, err = status(capsys, "-p", str(store), *limits)
    assert code == 0, err  # the control
    add_broken(store, "b-broken")

    code, out, err = status(capsys, "-p", str(store), *limits)
    assert code == BackupIntegrityError.exit_code, (code, out, err)
    lines = stderr_lines(err)
    assert lines[0].startswith(
        "kafka-backup: unreadable: backup b-broken: "
        "manifest b-broken/manifests/00000000.json is not valid JSON"
    ), err
    assert lines[1].startswith("kafka-backup: next step: "), err
    assert len(lines) == 2, err
    heads = [line.split(":")[0] for line in out.splitlines() if line.startswith("backup ")]
    assert heads == [f"backup {name} in {store}" for name in ("a-first", "b-broken", "c-third")], out

    code, out, err = status(capsys, "-p", str(store), *limits, "--json")
    assert code == BackupIntegrityError.exit_code, err
    payload = json.loads(out)
    assert [b["backup_id"] for b in payload["backups"]] == ["a-first", "c-third"]
    assert [b["backup_id"] for b in payload["unreadable"]] == ["b-broken"]
    assert (payload["breaches"], payload["ok"]) == ([], False)


def test_a_broken_chain_is_named_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A reason that already starts with the backup does not say it twice."""
    store = tmp_path / "store"
    storage = LocalStorage(store)
    build(storage, "a-sound", tmp_path)
    build(storage, "nightly", tmp_path, increments=3)
    storage.local_path(manifest_key("nightly", 1)).unlink()
    code, _out, err = status(capsys, "-p", str(store))
    assert code == BackupIntegrityError.exit_code, err
    assert stderr_lines(err)[0] == (
        "kafka-backup: unreadable: backup nightly: manifest of increment 1 is missing "
        "(found nightly/manifests/00000002.json next)"
    ), err


def test_every_backup_unreadable_is_one_error_naming_each(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store"
    add_broken(store, "first")
    add_broken(store, "second")
    for json_flag in ([], ["--json"]):
        code, out, err = status(capsys, "-p", str(store), "--max-age", "1h", *json_flag)
        assert code == BackupIntegrityError.exit_code, err
        lines = stderr_lines(err)
        assert lines[0].startswith(f"kafka-backup: error: none of the 2 backups in {store} can be read: "), (
            err
        )
        assert "first: manifest first/manifests/00000000.json is not valid JSON" in lines[0]
        assert "second: manifest second/manifests/00000000.json is not valid JSON" in lines[0]
        assert len(lines) == 2, err
        if json_flag:
            assert set(json.loads(out)) == {"error"}
        else:
            assert out == ""


def test_an_encrypted_backup_without_its_key_does_not_hide_the_plain_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Status needs the key to read an encrypted backup's manifests; without it that backup is named
    (exit 18 when no alert fires) and a plain one beside it is still shown and alerted on."""
    store = tmp_path / "store"
    storage = LocalStorage(store)
    build(storage, "nightly", tmp_path, age=timedelta(days=4))
    # An encrypted backup: a manifest the builder made, committed sealed under a key beside its
    # segments (status reads no segment: that they are plaintext does not matter here).
    scratch_storage = LocalStorage(tmp_path / "scratch-store")
    build(scratch_storage, "secret", tmp_path)
    (manifest,) = BackupCatalog(scratch_storage).load("secret").manifests
    shutil.copytree(tmp_path / "scratch-store" / "secret" / "data", store / "secret" / "data")
    key_file = tmp_path / "k.key"
    key_file.write_text(new_key_text())
    storage.key_encryption_key = open_key(EncryptionSettings(key_file=str(key_file)))
    keys = keys_for_new_backup(storage, "secret")
    assert keys is not None
    commit_manifest(storage, manifest, keys)
    storage.key_encryption_key = None
    code, _out, err = status(
        capsys, "-p", str(store), "--encryption-key", f"file:{key_file}", "--backup-id", "secret"
    )
    assert code == 0, err  # the control: with its key it reads

    code, out, err = status(capsys, "-p", str(store), "--max-age", "1h")
    assert code == RecoveryPointAlert.exit_code, (code, out, err)
    lines = stderr_lines(err)
    assert lines[0].startswith("kafka-backup: alert: backup nightly: "), err
    assert lines[1].startswith("kafka-backup: unreadable: backup secret: backup secret in "), err
    assert "is encrypted" in lines[1], err

    code, out, err = status(capsys, "-p", str(store), "--max-age", "30d", "--json")
    assert code == EncryptionKeyError.exit_code, err
    payload = json.loads(out)
    assert [b["backup_id"] for b in payload["backups"]] == ["nightly"]
    assert [(b["backup_id"], b["kind"]) for b in payload["unreadable"]] == [("secret", "encryption-key")]
