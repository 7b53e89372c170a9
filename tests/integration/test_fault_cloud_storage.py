"""Cloud Storage (fake-gcs-server) and Azure Blob Storage (Azurite) going down in the middle of a
backup, a restore and a prune, and throttling a backup: the faults of test_fault_storage.py (S3),
on the other two clouds.

Each test has an emulator of its own that keeps its objects across a stop and a start on the same
port (fake-gcs-server in a folder, Azurite in its --location folder), so an outage ends with the
store as it was, as a cloud's does. The run's own progress picks the moment: when it starts a
given upload, download or delete request (the third upload; a third of the way into restoring; the
prune's second delete), the emulator is stopped before that request is sent, and requests in
flight on the run's other threads meet the outage mid-way. Stopped for good, the run gives up after
``storage.retry_timeout_secs`` (short here) with one line and exit 7, and the emulator is started
again for the checks; started again within that time, the run rides the outage out. Either way no
manifest names a missing or partial object (validate --deep), and the same command run again
completes with every record once.

Throttling is a proxy (tests.support.faulty_proxy) answering each request in the store's own
throttling shape (Cloud Storage 429 and 503, Azure 503 ServerBusy) for a few seconds mid-backup.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer

from kbackup.backup.inspect import validate_backup
from kbackup.cli.main import run
from kbackup.core.config import StorageSettings
from kbackup.core.errors import StorageError
from kbackup.format.catalog import BackupCatalog
from kbackup.format.segments import SegmentLimits
from kbackup.sandbox.emulators import AZURITE_ACCOUNT, Azurite, GcsServer
from kbackup.sandbox.kafka import LocalKafkaCluster
from kbackup.sandbox.synthetic_backup import BackupBuilder, BackupRecord
from kbackup.storage import Storage, open_storage
from kbackup.storage.azure import AzureBlobStorage
from kbackup.storage.gcs import GcsStorage
from kbackup.storage.remote import RemoteStorage
from tests.conftest import TEST_BUCKET
from tests.support.backup_io import read_backup, take_backup
from tests.support.config_files import config_file
from tests.support.crash_restores import check_exactly_once, landed
from tests.support.faulty_proxy import AZURE_SERVER_BUSY, GCS_THROTTLED, FaultyProxy
from tests.support.kafka_io import Record, consume_all, create_topic, produce

pytestmark = pytest.mark.slow

#: storage.retry_timeout_secs and max_attempts of a run whose store stays down (the defaults try
#: for 120 s, and quick tries alone take 6 s), so it gives up in seconds.
GIVE_UP_SECS = 1.0
GIVE_UP_ATTEMPTS = 2
#: How long a store that comes back stays down (the run keeps its default retry_timeout_secs).
DOWN_SECS = 1.0
#: Throttling lasts this long.
BUSY_SECS = 3.0
#: The request (upload, download, delete) at whose start the store goes down.
AFTER_CALLS = 3
PARTITIONS = 3
RECORDS_PER_PARTITION = 150
SEGMENT_RECORDS = 15
BACKUP_ID = "outage"
SEGMENTS = PARTITIONS * RECORDS_PER_PARTITION // SEGMENT_RECORDS
#: The restore's transactions, and the segment download at whose start the store goes down: a
#: restore reads every segment once to check it before the first record, then again to restore.
TRANSACTION_RECORDS = 20
RESTORE_OUTAGE_AT = SEGMENTS + SEGMENTS // 3
DAY_MS = 86_400_000
BASE_TIME = 1_700_000_000_000
#: Daily increments of the pruned backup.
DAYS = 4

Emulator = GcsServer | Azurite


@pytest.fixture(params=["gcs", "azure"])
def emulator(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Emulator]:
    """An emulator of this test's own, keeping its objects across a stop and a start."""
    server: Emulator
    if request.param == "gcs":
        server = GcsServer(log_path=tmp_path / "fake-gcs.log", data_folder=tmp_path / "fake-gcs")
        server.start()
        server.create_bucket(TEST_BUCKET)
    else:
        (tmp_path / "azurite").mkdir()
        server = Azurite(folder=tmp_path / "azurite")
        server.start()
        server.service().create_container(TEST_BUCKET)
    yield server
    server.stop()


def storage_section(emulator: Emulator, *, endpoint: str | None = None, **settings: Any) -> dict[str, Any]:
    """The ``storage:`` section for this emulator, or for a proxy in front of it at ``endpoint``."""
    section = emulator.storage_settings(TEST_BUCKET, "faults")
    if endpoint is not None and isinstance(emulator, GcsServer):
        section["gcs"]["endpoint_url"] = endpoint
    elif endpoint is not None:
        section["azure"]["endpoint"] = f"{endpoint}/{AZURITE_ACCOUNT}"
    return {**section, **settings}


def direct_storage(emulator: Emulator) -> Storage:
    return open_storage(StorageSettings.model_validate(storage_section(emulator)))


def storage_class(emulator: Emulator) -> type[RemoteStorage]:
    return GcsStorage if isinstance(emulator, GcsServer) else AzureBlobStorage


def at_call(
    monkeypatch: pytest.MonkeyPatch,
    emulator: Emulator,
    method: str,
    call: int,
    begin: Callable[[], None],
    end: Callable[[], None] | None,
    after_secs: float,
) -> threading.Thread:
    """When the run starts its ``call``-th call of the storage's ``method``: ``begin()`` before that
    call's request is sent (requests in flight on the run's other threads meet it mid-way), and
    ``end()``, if any, ``after_secs`` later on a thread of its own; that thread, started once the
    run got that far."""
    cls = storage_class(emulator)
    request: Callable[..., Any] = getattr(cls, method)

    def finish() -> None:
        time.sleep(after_secs)
        if end is not None:
            end()

    thread = threading.Thread(target=finish, daemon=True)
    calls = 0
    lock = threading.Lock()

    def counted(storage: RemoteStorage, *args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        with lock:
            calls += 1
            if calls == call:
                begin()
                thread.start()
        return request(storage, *args, **kwargs)

    monkeypatch.setattr(cls, method, counted)
    return thread


@dataclass
class Outage:
    """The emulator stopped mid-run, for ``down_secs`` (None: until the run has given up)."""

    emulator: Emulator
    down_secs: float | None
    monkeypatch: pytest.MonkeyPatch
    capsys: pytest.CaptureFixture[str]

    @property
    def storage_settings(self) -> dict[str, Any]:
        """The ``storage:`` section: a store that stays down is given up on after GIVE_UP_SECS,
        one that comes back is waited for as long as a user's run waits (the default)."""
        patience: dict[str, Any] = {"retry_timeout_secs": GIVE_UP_SECS, "max_attempts": GIVE_UP_ATTEMPTS}
        return storage_section(self.emulator, **(patience if self.down_secs is None else {}))

    def run(self, method: str, args: list[str], call: int = AFTER_CALLS) -> None:
        """Run the CLI with ``args`` in this process, the emulator stopped when the run starts its
        ``call``-th call of the storage's ``method``; the run gives up in one line (exit 7) or, if
        the store comes back in time, rides the outage out. Returns once the emulator is back."""

        comes_back = None if self.down_secs is None else self.emulator.start
        with self.monkeypatch.context() as hooked:
            thread = at_call(
                hooked, self.emulator, method, call, self.emulator.stop, comes_back, self.down_secs or 0
            )
            code = run(args)
        assert thread.ident is not None, f"the run made fewer than {call} {method} calls: no outage"
        thread.join(60)
        err = self.capsys.readouterr().err
        if self.down_secs is None:
            self.emulator.start()
            assert code == StorageError.exit_code, err
            assert "Traceback" not in err
            (line,) = [line for line in err.splitlines() if ": error: " in line]
            assert "still failing after" in line, line
            assert f"127.0.0.1:{self.emulator.port}" in line, line
        else:
            assert code == 0, err
            assert "trying again" in err, "the run met no outage"


@pytest.fixture(params=[None, DOWN_SECS], ids=["stays-down", "comes-back"])
def outage(
    request: pytest.FixtureRequest,
    emulator: Emulator,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Outage:
    return Outage(emulator, request.param, monkeypatch, capsys)


def assert_every_manifest_names_whole_objects(storage: Storage, backup_id: str) -> None:
    if BackupCatalog(storage).exists(backup_id):
        assert validate_backup(storage, backup_id, deep=True).errors == []


def backup_config(path: Path, cluster: LocalKafkaCluster, topic: str, storage: dict[str, Any]) -> Path:
    return config_file(
        path,
        backup_id=BACKUP_ID,
        source={"bootstrap_servers": [cluster.bootstrap_servers], "topics": {"include": [topic]}},
        storage=storage,
        backup={"segment_max_records": SEGMENT_RECORDS, "scratch_dir": str(path.parent / "scratch")},
    )


def source_topic(cluster: LocalKafkaCluster, topic: str) -> list[Record]:
    create_topic(cluster, topic, partitions=PARTITIONS)
    produce(
        cluster,
        topic,
        [
            Record(key=b"k%d" % i, value=b"value-%d-" % i + b"v" * 100, partition=i % PARTITIONS)
            for i in range(PARTITIONS * RECORDS_PER_PARTITION)
        ],
    )
    return consume_all(cluster, topic, list(range(PARTITIONS)))


def test_store_down_mid_backup(
    source_cluster: LocalKafkaCluster, outage: Outage, unique_name: str, tmp_path: Path
) -> None:
    source = source_topic(source_cluster, unique_name)
    config = backup_config(tmp_path / "backup.yaml", source_cluster, unique_name, outage.storage_settings)
    outage.run("put_file", ["backup", "-c", str(config)])
    storage = direct_storage(outage.emulator)
    assert_every_manifest_names_whole_objects(storage, BACKUP_ID)

    assert run(["backup", "-c", str(config)]) == 0, outage.capsys.readouterr().err
    assert read_backup(storage, BACKUP_ID) == source
    assert validate_backup(storage, BACKUP_ID, deep=True).errors == []


def landed_records(cluster: LocalKafkaCluster, topic: str) -> int:
    """Records on the target, in committed transactions or not."""
    probe = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": "probe",
            "isolation.level": "read_uncommitted",
        }
    )
    try:
        return landed(probe, topic, PARTITIONS)
    finally:
        probe.close()


def build_backup_on(storage: Storage, scratch: Path, topic: str) -> dict[int, list[BackupRecord]]:
    """A backup of PARTITIONS x RECORDS_PER_PARTITION small records in segments of SEGMENT_RECORDS."""
    limits = SegmentLimits(max_records=SEGMENT_RECORDS)
    builder = BackupBuilder(storage, "crash", source_cluster="crash-src", scratch_dir=scratch, limits=limits)
    builder.topic(topic, PARTITIONS)
    expected = {
        partition: [
            BackupRecord(
                offset=i, key=b"key-%d" % (i % 50), value=b"p%d-r%d" % (partition, i), timestamp=BASE_TIME + i
            )
            for i in range(RECORDS_PER_PARTITION)
        ]
        for partition in range(PARTITIONS)
    }
    for partition, records in expected.items():
        builder.partition(topic, partition, iter(records))
    builder.commit()
    return expected


def test_store_down_mid_restore(
    target_cluster: LocalKafkaCluster, outage: Outage, unique_name: str, tmp_path: Path
) -> None:
    expected = build_backup_on(direct_storage(outage.emulator), tmp_path, unique_name)
    config = config_file(
        tmp_path / "restore.yaml",
        backup_id="crash",
        target={"bootstrap_servers": [target_cluster.bootstrap_servers]},
        storage=outage.storage_settings,
        restore={"transaction_max_records": TRANSACTION_RECORDS},
    )
    command = ["restore", "-c", str(config), "--exactly-once"]
    # Segments are restored one after another: the store goes down after a third of them.
    outage.run("download", command, call=RESTORE_OUTAGE_AT)
    if outage.down_secs is None:
        stopped_at = landed_records(target_cluster, unique_name)
        assert 0 < stopped_at < PARTITIONS * RECORDS_PER_PARTITION, f"{stopped_at} records landed"
        assert run(command) == 0, outage.capsys.readouterr().err
    check_exactly_once(target_cluster, unique_name, PARTITIONS, expected, seed=0)


def iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@pytest.fixture
def lasting_outage(
    emulator: Emulator, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Outage:
    """The emulator stopped mid-run until the run has given up."""
    return Outage(emulator, None, monkeypatch, capsys)


def test_store_down_mid_prune(
    source_cluster: LocalKafkaCluster, lasting_outage: Outage, unique_name: str, tmp_path: Path
) -> None:
    """Four daily increments, the first two pruned (12 segments, 2 manifests): the store goes down
    at the start of the prune's second delete request (of 14 on Cloud Storage, one per object; of 2
    on Azure, up to 256 objects each) and stays down."""
    topic, outage = unique_name, lasting_outage
    settings = StorageSettings.model_validate(storage_section(outage.emulator))
    create_topic(source_cluster, topic, partitions=2, config={"retention.ms": "-1"})
    for day in range(DAYS):
        stamp = BASE_TIME + day * DAY_MS
        produce(
            source_cluster,
            topic,
            [Record(key=b"k", value=b"v%d" % i, partition=i % 2, timestamp=stamp + i) for i in range(10)],
        )
        take_backup(source_cluster, settings, "daily", [topic], segment_max_records=2)
    source = consume_all(source_cluster, topic, [0, 1])
    config = config_file(tmp_path / "prune.yaml", backup_id="daily", storage=outage.storage_settings)
    command = ["prune", "-c", str(config), "--before", iso(BASE_TIME + 2 * DAY_MS), "--execute"]
    outage.run("_delete_batch", command, call=2)
    storage = direct_storage(outage.emulator)
    assert validate_backup(storage, "daily", deep=True).errors == []

    assert run(command) == 0, outage.capsys.readouterr().err
    assert validate_backup(storage, "daily", deep=True).errors == []
    kept = [r for r in source if r.timestamp is not None and r.timestamp >= BASE_TIME + 2 * DAY_MS]
    assert read_backup(storage, "daily") == kept


def test_backup_rides_out_throttling(
    source_cluster: LocalKafkaCluster,
    emulator: Emulator,
    unique_name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """From the backup's AFTER_CALLS-th upload on, every request is answered as the store answers
    when it throttles, for BUSY_SECS; the backup (default retry settings) completes."""
    source = source_topic(source_cluster, unique_name)
    answers = GCS_THROTTLED if isinstance(emulator, GcsServer) else AZURE_SERVER_BUSY
    proxy = FaultyProxy(upstream_port=emulator.port, busy_answers=answers)
    storage_settings = storage_section(emulator, endpoint=proxy.endpoint_url)
    config = backup_config(tmp_path / "backup.yaml", source_cluster, unique_name, storage_settings)
    busy, forward = (lambda: proxy.set_mode("busy")), (lambda: proxy.set_mode("forward"))
    try:
        with monkeypatch.context() as hooked:
            thread = at_call(hooked, emulator, "put_file", AFTER_CALLS, busy, forward, BUSY_SECS)
            assert run(["backup", "-c", str(config)]) == 0, capsys.readouterr().err
        thread.join(60)
    finally:
        proxy.close()
    assert proxy.faults_served > 0, "the backup met no throttling"
    storage = direct_storage(emulator)
    assert read_backup(storage, BACKUP_ID) == source
    assert validate_backup(storage, BACKUP_ID, deep=True).errors == []
