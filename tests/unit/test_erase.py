"""``kafka-backup erase`` on folder backups of made-up keyed records: what it rewrites and keeps,
the manifest revisions and the erasure record it writes, and a kill at every step of its
execution (simulated in process: the crash point raises) followed by a rerun. The same with a
real SIGKILL, a real Kafka restore, S3 and encryption: tests/integration/test_erase*.py."""

from __future__ import annotations

import json
import os
import re
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from kbackup.backup.inspect import validate_backup
from kbackup.cli.main import run
from kbackup.core.config import StorageSettings
from kbackup.core.errors import BackupIntegrityError, PreconditionError
from kbackup.core.times import iso_utc
from kbackup.erase import execute as erase_execute
from kbackup.erase import execute_erase, plan_erase, verify_key_erased
from kbackup.format.catalog import BackupCatalog
from kbackup.format.encryption import BackupKeys
from kbackup.format.erasure import encode_erasure_record, erasure_key, parse_erasure_record
from kbackup.format.generations import Lease, lease_key
from kbackup.format.layout import manifest_revision_key
from kbackup.format.record_match import RecordMatcher, RecordMatchSettings
from kbackup.prune import execute_prune, plan_prune
from kbackup.prune.settings import RetentionSettings
from kbackup.storage import Storage, open_storage
from tests.support.erase_backups import held_rows, keyed_backup, user_key, without_keys

BACKUP = "nightly"


@pytest.fixture
def store(tmp_path: Path) -> Storage:
    (tmp_path / "store").mkdir()
    return open_storage(StorageSettings(url=str(tmp_path / "store")))


def matcher_of(*keys: bytes) -> RecordMatcher:
    return RecordMatcher.from_settings(RecordMatchSettings(keys=[key.decode() for key in keys]))


def erase(storage: Storage, scratch: Path, request_id: str, *keys: bytes) -> None:
    matcher = matcher_of(*keys)
    plan = plan_erase(storage, matcher, [BACKUP], request_id=request_id)
    execute_erase(storage, plan, matcher, scratch_dir=scratch)


def all_objects(storage: Storage) -> dict[str, bytes]:
    return {info.key: storage.get_bytes(info.key) for info in storage.list(f"{BACKUP}/")}


def test_erase_keeps_every_other_record_exactly_and_leaves_a_backup_that_validates(
    store: Storage, tmp_path: Path
) -> None:
    rows = keyed_backup(store, BACKUP, tmp_path)
    erase(store, tmp_path, "GDPR-1", user_key(1), user_key(3))
    assert held_rows(store, BACKUP) == without_keys(rows, [user_key(1), user_key(3)])
    report = validate_backup(store, BACKUP, deep=True)
    assert (report.errors, report.warnings) == ([], [])
    backup = BackupCatalog(store).load(BACKUP)
    assert {manifest.revision for manifest in backup.manifests} == {1}
    # Only the newest revisions and their segments are left: no old segment, no revision 0.
    names = sorted(info.key.split("/", 1)[1] for info in store.list(f"{BACKUP}/manifests/"))
    assert names == [f"manifests/{n:08d}.r00000001.json" for n in range(3)]
    listed = {segment.key for manifest in backup.manifests for segment in manifest.segments}
    assert {info.key.split("/", 1)[1] for info in store.list(f"{BACKUP}/data/")} == listed
    # Counts: the manifests' and the record's agree with what the oracle removed.
    erased = len(rows) - len(without_keys(rows, [user_key(1), user_key(3)]))
    assert backup.total_records() == len(rows) - erased
    record = parse_erasure_record(
        store.get_bytes(erasure_key(BACKUP, "GDPR-1")),
        "r",
        backup_id=BACKUP,
        request_id="GDPR-1",
        keys=None,
    )
    assert record.records == erased == sum(item.records for item in record.partitions)
    assert record.lists_key(user_key(1))
    assert record.lists_key(user_key(3))
    assert not record.lists_key(user_key(2))


def test_nothing_stored_or_planned_holds_an_erased_key(
    store: Storage, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    keyed_backup(store, BACKUP, tmp_path)
    plan_file = tmp_path / "plan.json"
    url = str(tmp_path / "store")
    base = ["erase", BACKUP, "-p", url, "--key", "user-2", "--request-id", "R-7"]
    assert run([*base, "--plan-file", str(plan_file)]) == 0
    planned = capsys.readouterr().out
    assert run([*base, "--execute", "--json"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out)["executed"]["records_erased"] > 0
    for name, data in {
        **all_objects(store),
        "plan": plan_file.read_bytes(),
        "out": (planned + out).encode(),
    }.items():
        assert b"user-2" not in data, name


def test_a_kill_at_any_step_then_a_rerun_erases_exactly_the_keys(
    store: Storage, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every step of the execution in turn: the backup validates after the kill, each increment
    reads either as before or as erased, and the rerun of the same request finishes it."""
    rows = keyed_backup(store, BACKUP, tmp_path, increments=2, segment_records=6)
    pristine = all_objects(store)
    gone = [user_key(0), user_key(4)]
    expected = without_keys(rows, gone)

    class Killed(BaseException):
        pass

    step = 0
    while True:
        step += 1
        for key in list(all_objects(store)):
            store.delete(key)
        for key, data in pristine.items():
            store.put_bytes(key, data)
        reached = iter(range(1, step + 1))

        def crash(name: str, count: int = 1, _reached: Iterator[int] = reached) -> None:
            if next(_reached, None) is None:
                raise Killed(name)

        monkeypatch.setattr(erase_execute, "crash_point", crash)
        try:
            erase(store, tmp_path, "REQ", *gone)
        except Killed:
            pass
        else:
            break  # the whole execution passed fewer steps than this one
        monkeypatch.undo()
        report = validate_backup(store, BACKUP, deep=True)
        assert report.errors == [], (step, report.errors)
        held = held_rows(store, BACKUP)
        assert set(expected) <= set(held) <= set(rows), step
        erase(store, tmp_path, "REQ", *gone)
        assert held_rows(store, BACKUP) == expected, step
        report = validate_backup(store, BACKUP, deep=True)
        assert (report.errors, report.warnings) == ([], []), step
        record = json.loads(store.get_bytes(erasure_key(BACKUP, "REQ")))
        assert record["records"] == len(rows) - len(expected), step
    assert step > 10, step


def test_a_second_erasure_writes_the_next_revision_and_its_own_record(store: Storage, tmp_path: Path) -> None:
    rows = keyed_backup(store, BACKUP, tmp_path, increments=2)
    erase(store, tmp_path, "first", user_key(1))
    erase(store, tmp_path, "second", user_key(2))
    assert held_rows(store, BACKUP) == without_keys(rows, [user_key(1), user_key(2)])
    backup = BackupCatalog(store).load(BACKUP)
    assert [manifest.revision for manifest in backup.manifests] == [2, 2]
    assert [note.request_id for note in backup.manifests[0].erasures] == ["first", "second"]
    proofs = verify_key_erased(store, [BACKUP], user_key(2))
    assert proofs[0].gone
    assert proofs[0].listed_by == ["second"]
    assert verify_key_erased(store, [BACKUP], user_key(1))[0].listed_by == ["first"]
    assert not verify_key_erased(store, [BACKUP], user_key(3))[0].gone


def test_verify_reads_a_keys_file_and_proves_each_key_in_one_pass(
    store: Storage, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    keyed_backup(store, BACKUP, tmp_path, increments=2)
    erase(store, tmp_path, "first", user_key(1))
    erase(store, tmp_path, "second", user_key(2))
    keys_file = tmp_path / "request.txt"
    keys_file.write_bytes(
        b"# the request's keys\n" + b"\n".join([user_key(1), user_key(2), user_key(3)]) + b"\n"
    )
    url = str(tmp_path / "store")
    assert run(["erase", BACKUP, "-p", url, "--verify", "--keys-file", str(keys_file), "--json"]) == 11
    verified = json.loads(capsys.readouterr().out)["verified"]
    assert [(row["key"], row["gone"], row["listed_by"]) for row in verified] == [
        (1, True, ["first"]),
        (2, True, ["second"]),
        (3, False, []),
    ]
    assert verified[2]["records_found"] > 0
    keys_file.write_bytes(user_key(1) + b"\n" + user_key(2) + b"\n")
    assert run(["erase", BACKUP, "-p", url, "--verify", "--keys-file", str(keys_file)]) == 0
    out = capsys.readouterr().out
    assert user_key(1).decode() not in out
    assert out.count(": gone") == 2


def test_a_request_id_already_recorded_is_refused_when_records_match_again(
    store: Storage, tmp_path: Path
) -> None:
    keyed_backup(store, BACKUP, tmp_path)
    erase(store, tmp_path, "R", user_key(1))
    erase(store, tmp_path, "R", user_key(1))  # a rerun of a finished request: nothing to do
    with pytest.raises(PreconditionError, match="request R is recorded as done"):
        erase(store, tmp_path, "R", user_key(2))


def test_a_revision_under_another_number_is_refused(store: Storage, tmp_path: Path) -> None:
    keyed_backup(store, BACKUP, tmp_path, increments=1)
    erase(store, tmp_path, "R", user_key(1))
    data = store.get_bytes(manifest_revision_key(BACKUP, 0, 1))
    store.put_bytes(manifest_revision_key(BACKUP, 0, 2), data)
    with pytest.raises(BackupIntegrityError, match="says revision 1"):
        BackupCatalog(store).load(BACKUP)


def _lease(store: Storage, run_id: str, holder: str) -> None:
    lease = Lease(backup_id=BACKUP, run_id=run_id, holder=holder, acquired_at="x", expires_at=4e9)
    store.put_bytes(lease_key(BACKUP, run_id), lease.to_json_bytes())


def test_a_running_backup_is_refused_and_a_dead_erase_of_this_host_is_not(
    store: Storage, tmp_path: Path
) -> None:
    keyed_backup(store, BACKUP, tmp_path, increments=1)
    _lease(store, "20261126T000000Z-0badf00d", "other-host:1234")
    with pytest.raises(
        PreconditionError, match=r"in use by backup run 20261126T000000Z-0badf00d on other-host"
    ):
        erase(store, tmp_path, "R", user_key(1))
    store.delete(lease_key(BACKUP, "20261126T000000Z-0badf00d"))
    # A killed erase's lease on this host: its process is gone, so it holds nothing.
    dead = os.fork()
    if dead == 0:
        os._exit(0)
    os.waitpid(dead, 0)
    _lease(store, "erase-20261126T000000Z-deadbeef", f"{socket.gethostname()}:{dead}")
    erase(store, tmp_path, "R", user_key(1))
    assert not store.exists(lease_key(BACKUP, "erase-20261126T000000Z-deadbeef"))


def test_prune_after_an_erase_trims_the_revised_increments_and_their_revisions(
    store: Storage, tmp_path: Path
) -> None:
    rows = keyed_backup(store, BACKUP, tmp_path, increments=3)
    erase(store, tmp_path, "R", user_key(1))
    backup = BackupCatalog(store).load(BACKUP)
    first_kept = backup.manifests[2].segments[0]
    cut = min(s.min_timestamp for s in backup.manifests[2].segments)
    policy = RetentionSettings.model_validate({"before": f"{_iso(cut)}"})
    plan = plan_prune(store, policy, [BACKUP])
    execute_prune(store, plan)
    backup = BackupCatalog(store).load(BACKUP)
    assert [m.increment for m in backup.manifests] == [2]
    assert first_kept in backup.manifests[0].segments
    assert validate_backup(store, BACKUP, deep=True).errors == []
    names = [info.key.rsplit("/", 1)[1] for info in store.list(f"{BACKUP}/manifests/")]
    assert names == ["00000002.r00000001.json"]
    window = [row for row in without_keys(rows, [user_key(1)]) if row[2] >= 24]
    assert held_rows(store, BACKUP) == window


def _iso(ms: int) -> str:
    return iso_utc(ms / 1000)


def test_erase_options_refused_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url = str(tmp_path)
    assert run(["erase", BACKUP, "-p", url]) == 2
    assert "nothing to erase" in capsys.readouterr().err
    assert run(["erase", BACKUP, "-p", url, "--key", "x", "--request-id", "a/b"]) == 3
    assert "request id 'a/b' is not valid" in capsys.readouterr().err
    assert run(["erase", BACKUP, "-p", url, "--header", "region"]) == 3
    assert re.search(r"--header 'region'=\.\.\.: expected NAME=VALUE", capsys.readouterr().err)
    assert run(["erase", BACKUP, "-p", url, "--verify", "--key", "x", "--execute"]) == 2
    assert run(["erase", BACKUP, "-p", url, "--key", "x", "--execute"]) == 2
    assert "needs --request-id" in capsys.readouterr().err


def test_prune_spares_the_unlisted_segments_of_a_running_erase(store: Storage, tmp_path: Path) -> None:
    """An erase's new segment, stored before the revision that will list it, lies below the committed
    end like a dead run's garbage: a prune leaves it while the erase's lease lives."""
    keyed_backup(store, BACKUP, tmp_path, increments=1)
    run_id = "erase-20261126T000000Z-0123abcd"
    pending = f"{BACKUP}/data/orders/0/{0:020d}-{run_id}.parquet"
    store.put_bytes(pending, b"an erase's segment, not yet listed")
    policy = RetentionSettings.model_validate({"orphan_grace": "1h"})
    _lease(store, run_id, "other-host:1")
    assert pending not in plan_prune(store, policy, [BACKUP]).backups[0].orphans
    store.delete(lease_key(BACKUP, run_id))
    assert pending in plan_prune(store, policy, [BACKUP]).backups[0].orphans


def test_erase_by_header_value_in_the_topics_a_pattern_names(store: Storage, tmp_path: Path) -> None:
    orders = keyed_backup(store, BACKUP, tmp_path, increments=1, topic="orders")
    payments = keyed_backup(store, BACKUP, tmp_path, increments=1, topic="payments")
    url = str(tmp_path / "store")
    args = ["erase", BACKUP, "-p", url, "--header", "region=eu", "--topics", "ord.*", "--request-id", "H"]
    assert run([*args, "--execute"]) == 0
    kept = [row for row in orders if ("region", b"eu") not in row[6]]
    assert held_rows(store, BACKUP) == sorted(kept + payments, key=lambda row: (row[0], row[1], row[2]))
    record = json.loads(store.get_bytes(erasure_key(BACKUP, "H")))
    assert (record["matched"], len(record["header_hashes"]), record["key_hashes"]) == (
        {"keys": 0, "header_values": 1},
        1,
        [],
    )


def test_a_sealed_erasure_record_opens_only_as_itself(store: Storage, tmp_path: Path) -> None:
    keyed_backup(store, BACKUP, tmp_path, increments=1)
    erase(store, tmp_path, "R", user_key(1))
    record = parse_erasure_record(
        store.get_bytes(erasure_key(BACKUP, "R")), "r", backup_id=BACKUP, request_id="R", keys=None
    )
    keys = BackupKeys(BACKUP, 1, "local:test", os.urandom(32))
    sealed = encode_erasure_record(record, keys)
    assert b"hmac-sha256" not in sealed
    assert record.secret.encode() not in sealed
    opened = parse_erasure_record(sealed, "r", backup_id=BACKUP, request_id="R", keys=keys)
    assert opened == record
    with pytest.raises(BackupIntegrityError, match="fails authentication"):  # another request's name
        parse_erasure_record(sealed.replace(b'"R"', b'"S"'), "r", backup_id=BACKUP, request_id="S", keys=keys)
    other = BackupKeys(BACKUP, 1, "local:test", os.urandom(32))
    with pytest.raises(BackupIntegrityError, match="fails authentication"):  # another backup's key
        parse_erasure_record(sealed, "r", backup_id=BACKUP, request_id="R", keys=other)
    with pytest.raises(BackupIntegrityError, match="not encrypted, in a backup that is"):
        parse_erasure_record(
            encode_erasure_record(record, None), "r", backup_id=BACKUP, request_id="R", keys=keys
        )
