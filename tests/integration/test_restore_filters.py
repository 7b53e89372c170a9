"""restore.filters on real Kafka: records dropped or restored as tombstones by key list (inline, a
``sha256:`` entry, a keys file beside the config), by header value and by time window, on a keyed,
a compacted and a transactional topic (with an aborted transaction), and every consumer group
moved to the reference position over the records kept.

The oracle is the test's own: what it produced (read back from the source for the offsets Kafka
gave), the rules applied by its own predicate, and the reference position of
``tests/support/oracles.py`` over the kept records; the product's summary is only checked
against it.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from kbackup.core.config import StorageSettings
from kbackup.format.mapping_file import read_mapping
from kbackup.format.origin import parse_origin
from kbackup.offsets.translate import RestoredRecord
from kbackup.restore import service
from kbackup.restore.settings import RestoreSettings
from kbackup.sandbox.kafka import LocalKafkaCluster
from tests.support.backup_io import take_backup
from tests.support.config_files import config_file
from tests.support.crash_restores import build_backup, landed, source_records
from tests.support.encryption_keys import new_key
from tests.support.kafka_io import Record, commit_group, consume_all, create_topic, end_offsets, produce
from tests.support.oracles import ranges_from_records, reference_position
from tests.support.restore_checks import restore_command
from tests.support.three_phase_runs import run_cli

T0 = (int(time.time() * 1000) // 1000 - 3600) * 1000
TAIL = T0 + 50_000
WINDOW = (T0 + 10_000, T0 + 20_000)

#: The rules as the config file says them; ``decision`` is the test's own reading of them.
RULES: list[dict[str, object]] = [
    {
        "action": "drop",
        "topics": [".*-keyed"],
        "keys": ["user-1", "sha256:" + hashlib.sha256(b"user-2").hexdigest()],
    },
    {"action": "drop", "keys_file": "erase.txt"},
    {"action": "drop", "topics": [".*-keyed"], "headers": {"tenant": ["acme"]}},
    {"action": "drop", "keys": ["user-4"], "time_window_start": WINDOW[0], "time_window_end": WINDOW[1]},
    {"action": "tombstone", "keys": ["user-5"]},
    {"action": "drop", "topics": [".*-keyed"], "time_window_start": TAIL},
]


def decision(topic: str, record: Record) -> str | None:
    """What the rules do to a source record: "drop", "tombstone" or None (drop wins)."""
    keyed = topic.endswith("-keyed")
    ts = record.timestamp or 0
    dropped = (
        (keyed and record.key in (b"user-1", b"user-2"))
        or record.key == b"user-3"
        or (keyed and ("tenant", b"acme") in record.headers)
        or (record.key == b"user-4" and WINDOW[0] <= ts < WINDOW[1])
        or (keyed and ts >= TAIL)
    )
    if dropped:
        return "drop"
    return "tombstone" if record.key == b"user-5" else None


def fill_source(source: LocalKafkaCluster, name: str) -> dict[str, int]:
    """The three topics; their partition counts."""
    keyed, compacted, transactional = f"{name}-keyed", f"{name}-compacted", f"{name}-txn"
    create_topic(source, keyed, 2)
    produce(
        source,
        keyed,
        [
            Record(
                key=b"user-%d" % (i % 8),
                value=b"k%d" % i,
                headers=(("tenant", b"acme" if i % 7 == 0 else b"other"), ("n", b"%d" % i)),
                partition=i % 2,
                timestamp=T0 + i * 1000,
            )
            for i in range(60)
        ],
    )
    create_topic(source, compacted, 1, {"cleanup.policy": "compact"})
    produce(
        source,
        compacted,
        [
            Record(
                key=b"user-%d" % (i % 8), value=None if i % 11 == 10 else b"c%d" % i, timestamp=T0 + i * 1000
            )
            for i in range(30)
        ],
    )
    create_topic(source, transactional, 1)
    producer = Producer({"bootstrap.servers": source.bootstrap_servers, "transactional.id": f"{name}-tx"})
    producer.init_transactions(30)
    for first, last, commit in ((0, 10, True), (10, 15, False), (15, 25, True)):
        producer.begin_transaction()
        for i in range(first, last):
            producer.produce(
                transactional,
                key=b"user-%d" % (i % 8),
                value=b"t%d" % i,
                partition=0,
                timestamp=T0 + i * 1000,
            )
        producer.flush(30)
        if commit:
            producer.commit_transaction(30)
        else:
            # Delivered first: the aborted records are in the log (holes and markers), and an
            # abort sent while they are in flight was refused (INVALID_TXN_STATE, seen in a suite run).
            producer.flush(30)
            producer.abort_transaction(30)
    return {keyed: 2, compacted: 1, transactional: 1}


def commit_groups(
    source: LocalKafkaCluster, name: str, produced: dict[tuple[str, int], list[Record]]
) -> dict[str, dict[tuple[str, int], int]]:
    """Groups committed on a dropped record, inside a tail of dropped records (or on the last
    record), at the log end, and on a kept record in the middle."""
    groups: dict[str, dict[tuple[str, int], int]] = {"on-dropped": {}, "in-tail": {}, "at-end": {}, "mid": {}}
    ends = {key: end_offsets(source, key[0], [key[1]])[key[1]] for key in produced}
    for (topic, partition), records in produced.items():
        third = len(records) // 3
        on_dropped = next(r for r in records[third:] if decision(topic, r) == "drop")
        tail = [r for r in records if decision(topic, r) == "drop" and (r.timestamp or 0) >= TAIL]
        kept = [r for r in records if decision(topic, r) != "drop"]
        groups["on-dropped"][(topic, partition)] = on_dropped.consumed_offset
        groups["in-tail"][(topic, partition)] = (tail[1] if tail else records[-1]).consumed_offset
        groups["at-end"][(topic, partition)] = ends[(topic, partition)]
        groups["mid"][(topic, partition)] = kept[len(kept) // 2].consumed_offset
    for group, offsets in groups.items():
        commit_group(source, f"{name}-{group}", offsets)
    return groups


def check_target(
    target: LocalKafkaCluster,
    produced: dict[tuple[str, int], list[Record]],
    restored_name: Callable[[str], str],
) -> dict[tuple[str, int], list[RestoredRecord]]:
    """The target holds exactly the kept records in order, tombstones with a null value, their key
    and their headers; the restored records of each partition, paired with their source offsets
    by the oracle (not by the origin headers)."""
    pairs: dict[tuple[str, int], list[RestoredRecord]] = {}
    for (topic, partition), records in produced.items():
        kept = [r for r in records if decision(topic, r) != "drop"]
        landed = consume_all(target, restored_name(topic), [partition])
        want = [(r.key, None if decision(topic, r) == "tombstone" else r.value, r.timestamp) for r in kept]
        assert [(r.key, r.value, r.timestamp) for r in landed] == want, (topic, partition)
        for source, copy in zip(kept, landed, strict=True):
            own = [h for h in copy.headers if not h[0].startswith("x-kafka-backup-")]
            assert own == list(source.headers), (topic, partition, source.offset)
        pairs[(topic, partition)] = [
            RestoredRecord(copy.consumed_offset, topic, partition, source.consumed_offset)
            for source, copy in zip(kept, landed, strict=True)
        ]
    return pairs


def test_a_filtered_three_phase_restore_keeps_the_right_records_and_puts_groups_at_the_reference(
    source_cluster: LocalKafkaCluster, target_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    name = unique_name
    partitions = fill_source(source_cluster, name)
    produced = {
        (topic, p): consume_all(source_cluster, topic, [p])
        for topic, count in partitions.items()
        for p in range(count)
    }
    assert len(produced[(f"{name}-txn", 0)]) == 20  # the aborted transaction is not read
    groups = commit_groups(source_cluster, name, produced)
    store = tmp_path / "store"
    take_backup(source_cluster, store, "nightly", list(partitions))
    folder = tmp_path / "dr"
    folder.mkdir()
    (folder / "erase.txt").write_text("# erasure request 7\nuser-3\n")
    config = config_file(
        folder / "restore.yaml",
        backup_id="nightly",
        target={"bootstrap_servers": target_cluster.bootstrap_servers},
        storage={"url": str(store)},
        restore={
            "topic_mapping": {t: f"{t}-restored" for t in partitions},
            "filters": RULES,
            "transaction_max_records": 7,
        },
        offset_reset={"snapshot_dir": str(tmp_path / "snapshots")},
        three_phase={
            "state_dir": str(tmp_path / "state"),
            "build_mapping": "audit",
            "group_prefix": "moved-",
        },
    )
    done = run_cli(config)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads(done.stdout)
    assert list(summary["phases"]) == ["restore", "reset", "verify", "mapping", "audit"]
    assert "user-3" not in done.stdout + done.stderr

    pairs = check_target(target_cluster, produced, lambda topic: f"{topic}-restored")
    restore_phase = summary["phases"]["restore"]
    for topic in partitions:
        records = [r for (t, _), rs in produced.items() if t == topic for r in rs]
        counts = {
            "dropped": sum(decision(topic, r) == "drop" for r in records),
            "tombstoned": sum(decision(topic, r) == "tombstone" for r in records),
        }
        assert restore_phase["filtered_per_topic"][f"{topic}-restored"] == counts, topic
        assert restore_phase["records_per_topic"][f"{topic}-restored"] == len(records) - counts["dropped"]

    for group, offsets in groups.items():
        consumer = Consumer(
            {"bootstrap.servers": target_cluster.bootstrap_servers, "group.id": f"moved-{name}-{group}"}
        )
        try:
            for (topic, partition), committed in offsets.items():
                expected = reference_position(pairs[(topic, partition)], {(topic, partition): committed})
                [position] = consumer.committed([TopicPartition(f"{topic}-restored", partition)], timeout=10)
                assert position.offset == expected, (group, topic, partition, committed)
        finally:
            consumer.close()
    # The mapping the audit judged with holds exactly the kept records' ranges: a dropped record
    # splits a range as a compacted one does.
    [mapping_file] = (tmp_path / "state").glob("*-mapping.json")
    mapping = read_mapping(mapping_file)
    for (topic, partition), kept_pairs in pairs.items():
        restored = f"{topic}-restored"
        found = [r for r in mapping.ranges if (r.target_topic, r.target_partition) == (restored, partition)]
        assert sorted(found, key=lambda r: r.target_start) == ranges_from_records(
            kept_pairs, restored, partition
        )
    # The in-tail group of the keyed topic resumes after the last kept record: at the partition's end.
    keyed0 = pairs[(f"{name}-keyed", 0)]
    assert (
        reference_position(keyed0, {(f"{name}-keyed", 0): groups["in-tail"][(f"{name}-keyed", 0)]})
        == keyed0[-1].target_offset + 1
    )


@pytest.mark.parametrize("mode", ["--exactly-once", "--idempotent"])
def test_a_killed_filtered_restore_rerun_neither_repeats_nor_loses_a_record(
    target_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path, mode: str
) -> None:
    """Exactly once: the progress committed with the records moved past the dropped ones. Idempotent:
    the rerun finds the last restored record by its origin headers (tombstones keep them)."""
    topic = unique_name
    per_partition = 3_000
    backup_id = f"filters-{hashlib.sha256(topic.encode()).hexdigest()[:12]}"
    build_backup(tmp_path / "store", tmp_path, topic, backup_id=backup_id, per_partition=per_partition)
    keys = tmp_path / "keys.txt"
    keys.write_text("".join(f"key-{p}-{i}\n" for p in range(3) for i in range(0, 1000, 3)))
    config = tmp_path / "restore.yaml"
    config.write_text("restore:\n  transaction_max_records: 500\n  transaction_max_ms: 300\n")
    command = restore_command(
        "restore", "-c", str(config), "-p", str(tmp_path / "store"), "--backup-id", backup_id,
        "-b", target_cluster.bootstrap_servers, mode,
        "--drop-keys-file", str(keys), "--tombstone-keys-file", str(tmp_path / "tomb.txt"),
    )  # fmt: skip
    (tmp_path / "tomb.txt").write_text("key-0-1\nkey-1-1\nkey-2-1\n")
    killed = subprocess.run(
        command, capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "KBACKUP_CRASH_AT": "restore:records-produced@3600"},
    )  # fmt: skip
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    probe = Consumer({"bootstrap.servers": target_cluster.bootstrap_servers, "group.id": f"{topic}-probe"})
    try:
        # The kill left part of the restore on the target (committed or not): the rerun continues.
        assert 0 < landed(probe, topic, 3) < 3 * per_partition
    finally:
        probe.close()
    finished = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    assert finished.returncode == 0, finished.stderr[-2000:]
    dropped = {b"key-%d-%d" % (p, i) for p in range(3) for i in range(0, 1000, 3)}
    tombstoned = {b"key-0-1", b"key-1-1", b"key-2-1"}
    for partition in range(3):
        want = [
            (r.offset, r.key, None if r.key in tombstoned else r.value)
            for r in source_records(partition, per_partition)
            if r.key not in dropped
        ]
        on_target = consume_all(target_cluster, topic, [partition], timeout=60)
        got = []
        for record in on_target:
            origin = parse_origin(list(record.headers))
            assert origin is not None
            got.append((origin.offset, record.key, record.value))
        assert got == want, partition


def test_an_encrypted_backup_is_filtered_and_counted_before_the_run(
    source_cluster: LocalKafkaCluster, target_cluster: LocalKafkaCluster, unique_name: str, tmp_path: Path
) -> None:
    """The count before the run reads the key and headers columns of encrypted segments too."""
    topic = f"{unique_name}-sealed"
    create_topic(source_cluster, topic, 1)
    produce(
        source_cluster,
        topic,
        [
            Record(key=b"user-%d" % (i % 4), value=b"s%d" % i, headers=(("tenant", b"t%d" % (i % 3)),))
            for i in range(40)
        ],
    )
    produced = consume_all(source_cluster, topic, [0])
    store = StorageSettings(url=str(tmp_path / "store"), encryption=new_key(tmp_path))
    take_backup(source_cluster, store, "sealed", [topic])
    rules = [
        {"action": "drop", "keys": ["user-1"]},
        {"action": "drop", "headers": {"tenant": ["t2"]}},
        {"action": "tombstone", "keys": ["base64:" + base64.b64encode(b"user-3").decode()]},
    ]
    job = service.prepare(
        backup_id="sealed",
        storage=store,
        target=target_cluster.connection(),
        settings=RestoreSettings.model_validate({"topic_mapping": {topic: f"{topic}-r"}, "filters": rules}),
    )
    preview = service.dry_run(job)
    text = "\n".join(preview.lines()) + json.dumps(preview.to_dict())
    assert "filter rule 1: drop 1 key; on " in text
    assert "filter rule 3: tombstone 1 key; on " in text
    assert "user-" not in text
    assert base64.b64encode(b"user-3").decode() not in text
    summary = service.run(job)
    assert summary.verified  # the run's count equals the one made before it, from the sealed segments

    def dropped(r: Record) -> bool:
        return r.key == b"user-1" or ("tenant", b"t2") in r.headers

    kept = [r for r in produced if not dropped(r)]
    assert preview.records_to_write == len(kept)
    landed = consume_all(target_cluster, f"{topic}-r", [0])
    assert [(r.key, r.value) for r in landed] == [
        (r.key, None if r.key == b"user-3" else r.value) for r in kept
    ]
    [totals] = summary.topics
    assert (totals.records, totals.dropped, totals.tombstoned) == (
        len(kept),
        len(produced) - len(kept),
        sum(r.key == b"user-3" for r in kept),
    )
