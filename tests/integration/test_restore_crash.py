"""A restore killed with SIGKILL at random points and run again ends with every record once, in order.

The restore runs as a subprocess (``python -m kbackup restore``), as a user
runs it. It kills itself (``KBACKUP_CRASH_AT=restore:records-produced@N``) at
the batch that takes it to its N-th record, once early (within its first
records) and three times at random counts that each run is sure to reach; then
the same command runs to completion. The target is then read with
read_committed and must hold every selected record exactly once, in source
order, with no gap. The seed is printed; ``KBACKUP_FAULT_SEED`` repeats a run.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition

from kbackup.format.origin import parse_origin
from kbackup.format.segments import SegmentLimits
from kbackup.restore.partitioner import partition_for_key, partition_for_null_key
from kbackup.restore.segment_reader import READ_BATCH_RECORDS
from kbackup.sandbox.kafka import LocalKafkaCluster
from kbackup.sandbox.synthetic_backup import BackupBuilder, BackupRecord
from kbackup.storage import LocalStorage
from tests.support.kafka_io import consume_all
from tests.support.kill_loop import counted_kill, fault_seed, must_kill
from tests.support.restore_checks import REPO, own_headers, restore_command

pytestmark = pytest.mark.slow

NOW = int(time.time() * 1000)
SOURCE_PARTITIONS = 3
RECORDS_PER_PARTITION = 25_000
TRANSACTION_RECORDS = 3_000


def source_records(partition: int) -> Iterator[BackupRecord]:
    """Deterministic records with holes in the offsets, null keys, and some headers."""
    offset = 0
    for i in range(RECORDS_PER_PARTITION):
        offset += 1 if i % 10 else 3  # holes, as compaction or transaction markers leave
        yield BackupRecord(
            offset=offset,
            key=None if i % 6 == 0 else b"key-%d-%d" % (partition, i % 1000),
            value=b"p%d-r%d-" % (partition, i) + b"x" * 120,
            headers=(("i", b"%d" % i),) if i % 4 == 0 else (),
            timestamp=NOW - 600_000 + i,
        )


def build_backup(root: Path, scratch: Path, topic: str) -> dict[int, list[BackupRecord]]:
    storage = LocalStorage(root)
    builder = BackupBuilder(
        storage,
        "crash",
        source_cluster="crash-src",
        scratch_dir=scratch,
        limits=SegmentLimits(max_records=10_000),
    )
    builder.topic(topic, SOURCE_PARTITIONS)
    for partition in range(SOURCE_PARTITIONS):
        builder.partition(topic, partition, source_records(partition))
    builder.commit()
    return {p: list(source_records(p)) for p in range(SOURCE_PARTITIONS)}


def landed(consumer: Consumer, topic: str, partitions: int) -> int:
    """Records on the target, committed or not (read_uncommitted end offsets); 0 before the topic exists."""
    try:
        return sum(
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=5)[1] for p in range(partitions)
        )
    except KafkaException:
        return 0


def check_exactly_once(
    cluster: LocalKafkaCluster,
    topic: str,
    target_partitions: int,
    expected: dict[int, list[BackupRecord]],
    seed: int,
) -> None:
    restored = consume_all(cluster, topic, list(range(target_partitions)), timeout=120)
    by_source: dict[int, list[int]] = {p: [] for p in expected}
    where: dict[tuple[int, int], int] = {}
    payload: dict[
        tuple[int, int], tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int | None]
    ] = {}
    for record in restored:  # sorted by (target partition, target offset)
        origin = parse_origin(record.headers)
        assert origin is not None, f"seed {seed}: record without origin {record}"
        by_source[origin.partition].append(origin.offset)
        where[(origin.partition, origin.offset)] = record.partition or 0
        payload[(origin.partition, origin.offset)] = (
            record.key,
            record.value,
            own_headers(record.headers),
            record.timestamp,
        )
    total = sum(len(records) for records in expected.values())
    assert len(restored) == total, f"seed {seed}: {len(restored)} records on the target, {total} expected"
    for partition, records in expected.items():
        offsets = [r.offset for r in records]
        found = by_source[partition]
        if target_partitions == SOURCE_PARTITIONS:
            # One target partition per source partition: exactly the source sequence, in order.
            assert found == offsets, (
                f"seed {seed}: source partition {partition} is not restored once, in order"
            )
        else:
            assert sorted(found) == offsets, f"seed {seed}: source partition {partition}: duplicates or gaps"
        for backed_up in records:
            key = (partition, backed_up.offset)
            assert payload[key] == (
                backed_up.key,
                backed_up.value,
                list(backed_up.headers),
                backed_up.timestamp,
            ), f"seed {seed}: {key}"
            if target_partitions != SOURCE_PARTITIONS:
                want = (
                    partition_for_key(backed_up.key, target_partitions)
                    if backed_up.key is not None
                    else partition_for_null_key(partition, backed_up.offset, target_partitions)
                )
                assert where[key] == want, f"seed {seed}: {key} in partition {where[key]}, not {want}"
    # Within each target partition, each source partition's records keep their order.
    last: dict[tuple[int | None, int], int] = {}
    for record in restored:
        origin = parse_origin(record.headers)
        assert origin is not None
        slot = (record.partition, origin.partition)
        assert origin.offset > last.get(slot, -1), f"seed {seed}: order broken at {origin}"
        last[slot] = origin.offset


@pytest.mark.parametrize(
    ("mode", "target_partitions"),
    [
        ("--exactly-once", SOURCE_PARTITIONS),
        ("--exactly-once", 4),
        ("--idempotent", SOURCE_PARTITIONS),
        ("--idempotent", 5),
    ],
    ids=["exactly-once", "exactly-once-repartitioned", "idempotent", "idempotent-repartitioned"],
)
def test_killed_restore_rerun_has_no_duplicate_and_no_gap(
    target_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path, mode: str, target_partitions: int
) -> None:
    seed, chooser = fault_seed()
    topic = unique_name
    expected = build_backup(tmp_path / "store", tmp_path, topic)
    total = sum(len(r) for r in expected.values())
    config = tmp_path / "restore.yaml"
    config.write_text(
        f"restore:\n  transaction_max_records: {TRANSACTION_RECORDS}\n  transaction_max_ms: 300\n"
        f"  repartition: {'true' if target_partitions != SOURCE_PARTITIONS else 'false'}\n"
        f"  target_partitions: {{{topic}: {target_partitions}}}\n"
    )
    command = restore_command(
        "restore",
        "-c",
        str(config),
        "-p",
        str(tmp_path / "store"),
        "--backup-id",
        "crash",
        "-b",
        target_cluster.bootstrap_servers,
        mode,
    )
    # How far one kill can move "records left" beyond its own count: the rest of the read batch
    # holding its N-th record (transaction_max_records of them, or READ_BATCH_RECORDS without
    # transactions), and the open transaction it leaves aborted (up to two batches), and markers.
    batch = TRANSACTION_RECORDS if mode == "--exactly-once" else READ_BATCH_RECORDS
    cost = batch + (2 * TRANSACTION_RECORDS if mode == "--exactly-once" else 0) + 50
    probe = Consumer(
        {
            "bootstrap.servers": target_cluster.bootstrap_servers,
            "group.id": "crash-probe",
            "isolation.level": "read_uncommitted",
        }
    )
    try:
        for run, most in enumerate([100, total, total, total], start=1):  # the first one early
            left = total - landed(probe, topic, target_partitions)
            point = counted_kill(
                chooser, "restore:records-produced", left=left, kills_to_come=4 - run, per_kill_cost=cost,
                most=most,
            )  # fmt: skip
            must_kill(command, point, seed=seed, run=run, note=f" ({left} records left at most)", cwd=REPO)
    finally:
        probe.close()
    final = subprocess.run(
        [*command, "--json"], cwd=REPO, capture_output=True, text=True, timeout=600, check=False
    )
    assert final.returncode == 0, final.stderr
    assert '"resumed": true' in final.stdout
    check_exactly_once(target_cluster, topic, target_partitions, expected, seed)
    # A further run of the same command finds nothing left to do.
    again = subprocess.run(
        [*command, "--json"], cwd=REPO, capture_output=True, text=True, timeout=600, check=False
    )
    assert again.returncode == 0, again.stderr
    assert '"records": 0,' in again.stdout
    check_exactly_once(target_cluster, topic, target_partitions, expected, seed)


def test_sigterm_commits_what_was_produced_and_exits_130(
    target_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    topic = unique_name
    expected = build_backup(tmp_path / "store", tmp_path, topic)
    config = tmp_path / "restore.yaml"
    config.write_text("restore:\n  transaction_max_records: 2000\n")
    command = restore_command(
        "restore", "-c", str(config), "-p", str(tmp_path / "store"), "--backup-id", "crash",
        "-b", target_cluster.bootstrap_servers,
    )  # fmt: skip
    process = subprocess.Popen(command, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    probe = Consumer({"bootstrap.servers": target_cluster.bootstrap_servers, "group.id": "crash-probe"})
    try:
        deadline = time.monotonic() + 120
        while landed(probe, topic, SOURCE_PARTITIONS) < 10_000:
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.02)
        process.send_signal(signal.SIGTERM)
        _out, err = process.communicate(timeout=120)
    finally:
        probe.close()
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, err
    assert "restore stopped by a signal after committing what it had produced" in err
    # What the stopped run committed is there, in order, without a gap (read_committed).
    committed = consume_all(target_cluster, topic, list(range(SOURCE_PARTITIONS)))
    for partition, records in expected.items():
        offsets = [parse_origin(r.headers).offset for r in committed if r.partition == partition]  # type: ignore[union-attr]
        assert offsets == [r.offset for r in records[: len(offsets)]]
    final = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    assert final.returncode == 0, final.stderr
    check_exactly_once(target_cluster, topic, SOURCE_PARTITIONS, expected, seed=0)
