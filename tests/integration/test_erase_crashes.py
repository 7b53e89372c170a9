"""``erase --execute`` killed (SIGKILL) at seeded random steps, each kill followed by a rerun of the same
request, on a folder backup taken from real Kafka; then a restore into real Kafka.

Twelve erasure requests, each of two keys, each killed once at a step its plan is sure to reach
(after a rewritten segment, before a manifest revision, before the erasure record, before the
first delete request), then run again to its end. After every kill the backup validates deeply and
holds, record for record, the source's records less those of the keys erased so far, with or
without the keys of the request that was killed (an increment is rewritten whole or not at all);
after every rerun exactly without them. At the end a restore holds no erased key and every other
record at its source offset.

Replay a failure with ``KBACKUP_FAULT_SEED=<seed printed>``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kbackup.backup.inspect import validate_backup
from kbackup.cli.main import run
from kbackup.core.config import StorageSettings
from kbackup.format.catalog import BackupCatalog
from kbackup.sandbox.kafka import LocalKafkaCluster
from kbackup.storage import open_storage
from tests.support.backup_io import read_backup, take_backup
from tests.support.config_files import config_file
from tests.support.erase_backups import erase_command, keyed_source_records, records_without, user_key
from tests.support.kafka_io import consume_all, create_topic, produce
from tests.support.kill_loop import fault_seed, must_kill
from tests.support.restored_topics import restored_records

ROOT = Path(__file__).parents[2]
PARTITIONS = 2
USERS = 30
REQUESTS = 12


@pytest.mark.slow
def test_erase_killed_anywhere_then_rerun_leaves_no_erased_key_and_every_other_record(
    source_cluster: LocalKafkaCluster,
    target_cluster: LocalKafkaCluster,
    unique_name: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    topic, backup_id = unique_name, "erased"
    store = {"url": str(tmp_path / "store")}
    settings = StorageSettings.model_validate(store)
    storage = open_storage(settings)
    create_topic(source_cluster, topic, partitions=PARTITIONS, config={"retention.ms": "-1"})
    for increment in range(3):
        produce(source_cluster, topic, keyed_source_records(PARTITIONS, 40, USERS, start=increment * 80))
        take_backup(source_cluster, settings, backup_id, [topic], segment_max_records=10)
    source = consume_all(source_cluster, topic, list(range(PARTITIONS)))
    config = config_file(tmp_path / "erase.yaml", backup_id=backup_id, storage=store)
    seed, chooser = fault_seed()
    capsys.readouterr()  # the seed's line; every assertion names the seed
    order = list(range(USERS))
    chooser.shuffle(order)
    erased: set[bytes] = set()
    for request in range(REQUESTS):
        keys = [user_key(n) for n in order[2 * request : 2 * request + 2]]
        request_id = f"REQ-{request}"
        plan_args = ["erase", backup_id, "-c", str(config), "--request-id", request_id, "--json"]
        assert run([*plan_args, *(arg for key in keys for arg in ("--key", key.decode()))]) == 0
        (planned,) = json.loads(capsys.readouterr().out)["backups"]
        # Steps sure to come: each rewritten segment, each revision, the record, the first delete.
        steps = planned["segments_to_rewrite"] + planned["increments_to_revise"] + 2
        point = chooser.randint(1, steps)
        command = erase_command(config, backup_id, request_id, keys, "--execute")
        must_kill(command, f"erase:step@{point}", seed=seed, run=request, note=f" of {steps}", cwd=ROOT)
        where = f"seed {seed}, request {request}, step {point} of {steps}"
        report = validate_backup(storage, backup_id, deep=True)
        assert report.errors == [], (where, report.errors)
        held = read_backup(storage, backup_id)
        assert set(map(repr, records_without(source, erased | set(keys)))) <= set(map(repr, held)), where
        assert set(map(repr, held)) <= set(map(repr, records_without(source, erased))), where
        assert run(command[3:]) == 0, (where, capsys.readouterr().err)
        capsys.readouterr()
        erased |= set(keys)
        assert read_backup(storage, backup_id) == records_without(source, erased), where
        report = validate_backup(storage, backup_id, deep=True)
        assert (report.errors, report.warnings) == ([], []), where
    restored = f"{topic}-restored"
    args = ["restore", "-c", str(config), "-b", target_cluster.bootstrap_servers]
    assert run([*args, "--topic-mapping", f"{topic}={restored}"]) == 0, capsys.readouterr().err
    landed = consume_all(target_cluster, restored, list(range(PARTITIONS)))
    assert not {record.key for record in landed} & erased
    cluster_id = BackupCatalog(storage).load(backup_id).source_cluster
    for partition in range(PARTITIONS):
        offsets = [r.source_offset for r in restored_records(target_cluster, restored, partition, cluster_id)]
        assert offsets == [
            r.consumed_offset for r in records_without(source, erased) if r.partition == partition
        ]
    assert [(r.key, r.value) for r in landed] == [(r.key, r.value) for r in records_without(source, erased)]
