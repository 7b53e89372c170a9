"""``validate`` and ``describe`` of erased backups (folder storage, made-up keyed records): the
erasure records checked against the manifest revisions that noted them, each kind of damage named
in one line, and what each erasure removed shown in counts, never a key or a hash."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kbackup.backup.inspect import describe_backup, validate_backup
from kbackup.cli.main import run
from kbackup.core.config import EncryptionSettings, StorageSettings
from kbackup.core.times import iso_utc
from kbackup.format.catalog import BackupCatalog
from kbackup.format.erasure import erasure_key
from kbackup.prune import execute_prune, plan_prune
from kbackup.prune.settings import RetentionSettings
from kbackup.storage import Storage, open_storage
from tests.support.damaged_backups import ERASURE_DAMAGE, REQUEST, erased_backup, sealed_erased_backup
from tests.support.erase_backups import erase_keys, user_key

BACKUP = "nightly"


@pytest.fixture
def store(tmp_path: Path) -> Storage:
    (tmp_path / "store").mkdir()
    return open_storage(StorageSettings(url=str(tmp_path / "store")))


def test_an_erased_backup_validates_with_its_record_checked(store: Storage, tmp_path: Path) -> None:
    erased_backup(store, tmp_path)
    report = validate_backup(store, BACKUP)
    assert (report.errors, report.warnings, report.erasure_records_checked) == ([], [], 1)
    # A second erasure supersedes every revision the first record names; its notes keep the first.
    erase_keys(store, BACKUP, tmp_path, "GDPR-2", user_key(2))
    report = validate_backup(store, BACKUP, deep=True)
    assert (report.errors, report.warnings, report.erasure_records_checked) == ([], [], 2)
    assert report.to_dict()["erasure_records_checked"] == 2


@pytest.mark.parametrize("case", sorted(ERASURE_DAMAGE))
def test_each_damaged_erasure_record_is_named_in_one_line(store: Storage, tmp_path: Path, case: str) -> None:
    erased_backup(store, tmp_path)
    damage, says = ERASURE_DAMAGE[case]
    damage(store, tmp_path)
    report = validate_backup(store, BACKUP)
    assert len(report.errors) >= 1, case
    assert any(says in error for error in report.errors), (case, report.errors)
    assert all("\n" not in error for error in report.errors)


def test_a_revision_whose_request_has_no_record_is_a_warning_naming_the_rerun(
    store: Storage, tmp_path: Path
) -> None:
    erased_backup(store, tmp_path)
    store.delete(erasure_key(BACKUP, REQUEST))  # as an erase killed after its revisions
    report = validate_backup(store, BACKUP)
    assert report.errors == []
    assert report.warnings == [
        f"erasure {REQUEST} rewrote increment(s) 0, 1, 2 but has no erasure record (an erase killed "
        f"before its record): run the same erase again with --request-id {REQUEST}"
    ]


def test_a_pruned_erased_backup_validates(store: Storage, tmp_path: Path) -> None:
    """A prune drops the notes of the increments it drops, not the record: the record then says
    more than the notes left, and names increments no longer held; neither is damage."""
    erased_backup(store, tmp_path)
    newest = BackupCatalog(store).load(BACKUP).manifests[2]
    cut = min(segment.min_timestamp for segment in newest.segments) / 1000
    policy = RetentionSettings.model_validate({"before": iso_utc(cut)})
    execute_prune(store, plan_prune(store, policy, [BACKUP]))
    assert [m.increment for m in BackupCatalog(store).load(BACKUP).manifests] == [2]
    report = validate_backup(store, BACKUP)
    assert (report.errors, report.erasure_records_checked) == ([], 1)


def test_describe_shows_revisions_and_erasures_in_counts_only(store: Storage, tmp_path: Path) -> None:
    erased_backup(store, tmp_path)
    erase_keys(store, BACKUP, tmp_path, "GDPR-2", user_key(2))
    info = describe_backup(store, BACKUP)
    assert [row["revision"] for row in info["increments"]] == [2, 2, 2]
    first = info["increments"][0]["erasures"]
    assert [note["request_id"] for note in first] == [REQUEST, "GDPR-2"]
    assert all(note["records"] == sum(note["topics"].values()) > 0 for note in first)
    records = {row["request_id"]: row for row in info["erasures"]}
    assert sorted(records) == [REQUEST, "GDPR-2"]
    for request_id, row in records.items():
        notes = [n for inc in info["increments"] for n in inc["erasures"] if n["request_id"] == request_id]
        assert row["records"] == sum(note["records"] for note in notes)
        assert row["increments"] == [0, 1, 2]
        assert set(row) == {"request_id", "erased_at", "run_id", "records", "topics", "increments", "matched"}
    text = json.dumps(info)
    for hidden in ("user-", "hmac", "secret"):
        assert hidden not in text


def test_cli_describe_and_validate_print_the_erasures(
    store: Storage, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    erased_backup(store, tmp_path)
    record = json.loads(store.get_bytes(erasure_key(BACKUP, REQUEST)))
    assert run(["describe", "-p", store.url, "--backup-id", BACKUP]) == 0
    out = capsys.readouterr().out
    assert (
        f"erasure records:\n  {REQUEST} at {record['erased_at']}: {record['records']} records erased" in out
    )
    assert out.count(f"        erased by {REQUEST} at ") == 3
    assert ", revision 1" in out
    assert "user-" not in out
    assert record["secret"] not in out
    assert run(["validate", "-p", store.url, "--backup-id", BACKUP]) == 0
    assert "1 erasure record(s) checked" in capsys.readouterr().out
    _edit, says = ERASURE_DAMAGE["counts-disagree"]
    _edit(store, tmp_path)
    assert run(["validate", "-p", store.url, "--backup-id", BACKUP, "--json"]) != 0
    report = json.loads(capsys.readouterr().out)
    assert any(says in error for error in report["errors"])


def test_sealed_erasure_records_open_with_the_key_and_are_named_unchecked_without_it(tmp_path: Path) -> None:
    key_file = sealed_erased_backup(tmp_path / "store", tmp_path)
    sealed = open_storage(
        StorageSettings(url=str(tmp_path / "store"), encryption=EncryptionSettings(key_file=str(key_file)))
    )
    report = validate_backup(sealed, BACKUP)
    assert (report.errors, report.warnings, report.erasure_records_checked) == ([], [], 1)
    assert describe_backup(sealed, BACKUP)["erasures"][0]["request_id"] == REQUEST
    plain = open_storage(StorageSettings(url=str(tmp_path / "store")))
    report = validate_backup(plain, BACKUP)
    assert (report.errors, report.erasure_records_checked) == ([], 0)
    assert report.warnings[-1].endswith("; 1 erasure record(s) not checked (sealed: they open with the key)")
    # A sealed record edited (its sealed bytes changed) no longer opens: damage, named.
    key = erasure_key(BACKUP, REQUEST)
    record = json.loads(sealed.get_bytes(key))
    record["sealed"] = record["sealed"][:-8] + ("A" * 8 if record["sealed"][-8:] != "A" * 8 else "B" * 8)
    sealed.put_bytes(key, json.dumps(record).encode())
    errors = validate_backup(sealed, BACKUP).errors
    assert len(errors) == 1
    assert errors[0].startswith(f"erasure record {key}")


def test_describe_names_an_unreadable_erasure_record_and_goes_on(
    store: Storage, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    erased_backup(store, tmp_path)
    damage, says = ERASURE_DAMAGE["truncated-record"]
    damage(store, tmp_path)
    (row,) = describe_backup(store, BACKUP)["erasures"]
    assert row["request_id"] == REQUEST
    assert says in row["error"]
    assert run(["describe", "-p", store.url, "--backup-id", BACKUP]) == 0
    assert f"  {REQUEST}: unreadable ({says}" in capsys.readouterr().out
