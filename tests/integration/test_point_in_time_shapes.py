"""Issue 41 on logs with holes: a compacted topic the cleaner has cleaned, and a transactional topic
with committed and aborted transactions, put back as they were at a chosen moment.

Real Kafka: the compacted topic is cleaned before the backup starts (its odd offsets, a key
repeated, are gone); then ``backup --follow`` reads the groups every half second while records keep
coming and four groups commit forward at two speeds. On the compacted topic the slow group only
ever commits offsets the cleaner removed; on the transactional topic the groups commit offsets that
sit on a commit or an abort marker, inside or after aborted records, or at the log end. The test
keeps its own record of every commit (sent, acknowledged, offsets) and of every record it wrote: the
oracles. A position of a moment T is one the group had committed by T (never a later one) and at
least the one it had committed a reading interval and a reading's time before T; a restore as of T
holds exactly the backed-up records stamped at or before T, and each group lands at the reference
translation (shared/reference/offset-translation.md) of its position of then.
"""

from __future__ import annotations

import json
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from kbackup.cli.main import run
from kbackup.core.times import iso_of_ms, iso_utc, parse_iso
from kbackup.format.catalog import BackupCatalog
from kbackup.format.origin import parse_origin
from kbackup.offsets.translate import RestoredRecord
from kbackup.sandbox.kafka import LocalKafkaCluster
from kbackup.storage import open_storage
from tests.support.backup_io import read_backup
from tests.support.cli_process import start_cli, wait_for
from tests.support.config_files import config_file
from tests.support.kafka_io import Record, commit_group, consume_all, create_topic, group_positions
from tests.support.log_shapes import (
    COMPACT_FAST,
    FAST_CLEANING_CONFIGS,
    Transaction,
    TransactionWriter,
    compact_until,
)
from tests.support.oracles import reference_position

INTERVAL_SECS = 0.5
#: A reading's own time (a listing and an offsets request) and the copy loop's poll, on a loaded machine.
READING_SECS = 4.0
PARTITIONS = [0, 1]
STEPS = 24
#: A step's length at least (records, commits, then a pause): the moments the tests check (steps 11
#: to 17) are then more than a reading interval and a reading's time after the first commits.
STEP_SECS = 0.6
#: Before the backup: 30 records a partition, the odd ones of one key ("dup"), then a tombstone
#: (offset 30) of the first one's key: the cleaner removes every "dup" but the last (29), and 0.
PREFILL = 30
HOLES = {0, *range(1, PREFILL - 1, 2)}
SHAPES = ["compacted", "transactional"]
#: The restore's moment: a millisecond before this step's records.
RESTORE_STEP = 18


@dataclass(frozen=True)
class Commit:
    sent: float
    acknowledged: float
    offsets: dict[int, int]  # partition -> committed offset


@dataclass
class Shape:
    topic: str
    #: group -> its commits, oldest first
    commits: dict[str, list[Commit]] = field(default_factory=dict)


@dataclass(frozen=True)
class History:
    store: Path
    source_cluster: str
    shapes: dict[str, Shape]
    #: The records of each step are stamped ``stamps[step]`` (ms), but the first of each partition
    #: of the compacted topic, a millisecond earlier (a producer's clock behind).
    stamps: list[int]
    #: What the backup holds of each topic (every increment), by partition.
    backed_up: dict[str, dict[int, list[Record]]]
    #: Values of the records of aborted transactions.
    aborted: set[bytes]


def now_ms() -> int:
    return int(time.time() * 1000)


def by_partition(records: list[Record]) -> dict[int, list[Record]]:
    return {p: [r for r in records if r.partition == p] for p in PARTITIONS}


class Committer:
    """Commits a group's offsets and keeps the test's record of it."""

    def __init__(self, cluster: LocalKafkaCluster, shape: Shape) -> None:
        self.cluster = cluster
        self.shape = shape

    def commit(self, speed: str, offsets: dict[int, int]) -> None:
        """Group ``<topic>-<speed>`` at ``offsets``."""
        group = f"{self.shape.topic}-{speed}"
        sent = time.time()
        commit_group(self.cluster, group, {(self.shape.topic, p): o for p, o in offsets.items()})
        self.shape.commits.setdefault(group, []).append(Commit(sent, time.time(), offsets))


@pytest.fixture(scope="module")
def history(source_cluster: LocalKafkaCluster, tmp_path_factory: pytest.TempPathFactory) -> History:
    work = tmp_path_factory.mktemp("point-in-time-shapes")
    prefix = f"pit-shapes-{now_ms()}"
    compacted = Shape(f"{prefix}-compacted")
    transactional = Shape(f"{prefix}-tx")
    create_topic(source_cluster, compacted.topic, partitions=len(PARTITIONS), config=COMPACT_FAST)
    create_topic(source_cluster, transactional.topic, partitions=len(PARTITIONS))

    # The compacted topic, cleaned before the backup: even offsets unique keys, odd ones key "dup".
    plain = Producer({"bootstrap.servers": source_cluster.bootstrap_servers, "enable.idempotence": True})
    for p in PARTITIONS:
        for i in range(PREFILL):
            key = b"dup" if i % 2 else b"u%d-%d" % (p, i)
            plain.produce(compacted.topic, key=key, value=b"pre-%d-%d" % (p, i), partition=p)
        plain.produce(compacted.topic, key=b"u%d-0" % p, value=None, partition=p)
    assert plain.flush(30) == 0
    compact_until(source_cluster, compacted.topic, {p: HOLES for p in PARTITIONS})

    # The transactional topic starts with one transaction committed and one aborted.
    writer = TransactionWriter(source_cluster, f"{prefix}-writer")
    aborted: set[bytes] = set()

    def transaction(step: int, commit: bool, stamp: int) -> Transaction:
        label = b"%s-%d" % (b"committed" if commit else b"aborted", step)
        records = [(p, b"t%d" % i, b"%s-%d-%d" % (label, p, i)) for p in PARTITIONS for i in range(2)]
        if not commit:
            aborted.update(value for _, _, value in records)
        return writer.send(transactional.topic, records, commit=commit, timestamp=stamp)

    transaction(0, True, now_ms())
    transaction(0, False, now_ms())

    store = work / "store"
    config = config_file(
        work / "follow.yaml",
        mode="backup",
        backup_id="follow",
        source={
            "bootstrap_servers": [source_cluster.bootstrap_servers],
            "topics": {"include": [compacted.topic, transactional.topic]},
        },
        storage={"url": str(store)},
        backup={"checkpoint_interval_secs": 3, "group_snapshot_interval": f"{INTERVAL_SECS}s"},
    )
    process = start_cli("backup", "-c", str(config), "--follow", "--json")
    on_compacted = Committer(source_cluster, compacted)
    on_transactional = Committer(source_cluster, transactional)
    stamps: list[int] = []
    try:
        wait_for(lambda: (store / "follow" / "manifests").is_dir(), "the first increment", process=process)
        ends: dict[int, int] = {}

        def delivered(err: Any, message: Any) -> None:
            assert err is None, err
            ends[message.partition()] = message.offset() + 1

        started = time.monotonic()
        for step in range(STEPS):
            # Compacted: two new keys a partition; the fast group at the log end or on the last record.
            stamp = now_ms()
            stamps.append(stamp)
            for p in PARTITIONS:
                for i in range(2):
                    plain.produce(
                        compacted.topic,
                        key=b"s%d-%d-%d" % (step, p, i),
                        value=b"step-%d-%d-%d" % (step, p, i),
                        partition=p,
                        # The first a millisecond earlier: a restore as of that millisecond
                        # holds it, and none of the others stamped a millisecond later.
                        timestamp=stamp - (i == 0),
                        on_delivery=delivered,
                    )
            assert plain.flush(30) == 0
            on_compacted.commit("fast", {p: ends[p] - step % 2 for p in PARTITIONS})
            if step % 2 == 0:  # the slow group: only ever offsets the cleaner removed
                on_compacted.commit("slow", {p: 2 * (step // 2) + 1 for p in PARTITIONS})

            # Transactional: one transaction committed, one aborted; positions on their markers,
            # inside or after the aborted records, at the log end.
            done = transaction(step + 1, True, stamp)
            dropped = transaction(step + 1, False, stamp)
            in_holes = [
                {p: done.marker(p) for p in PARTITIONS},  # on the commit marker
                {p: dropped.records[p][0] for p in PARTITIONS},  # on the first aborted record
                {p: dropped.records[p][1] for p in PARTITIONS},  # inside the aborted records
                {p: dropped.marker(p) for p in PARTITIONS},  # on the abort marker
            ]
            log_end = {p: dropped.marker(p) + 1 for p in PARTITIONS}
            on_transactional.commit("fast", log_end if step % 3 == 2 else in_holes[step % 4])
            if step % 2 == 0:  # the slow group: only ever markers and aborted records
                on_transactional.commit("slow", in_holes[(step // 2 + 1) % 4])
            time.sleep(max(0.05, started + (step + 1) * STEP_SECS - time.monotonic()))
        last = max(
            c.acknowledged
            for shape in (compacted, transactional)
            for cs in shape.commits.values()
            for c in cs
        )

        def snapshot_after_the_last_commit() -> bool:
            snapshot = BackupCatalog(open_storage(str(store))).load("follow").latest.consumer_groups
            return snapshot is not None and parse_iso(snapshot.taken_at).timestamp() > last

        wait_for(snapshot_after_the_last_commit, "a checkpoint after the last commit", process=process)
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, stderr
    catalog = BackupCatalog(open_storage(str(store))).load("follow")
    shapes = {"compacted": compacted, "transactional": transactional}
    backed_up = {
        shape.topic: by_partition(read_backup(store, "follow", [shape.topic])) for shape in shapes.values()
    }

    # The shapes are what the test says they are: holes where the cleaner removed records, ...
    for p in PARTITIONS:
        held = {r.consumed_offset for r in backed_up[compacted.topic][p]}
        assert not held & HOLES, sorted(held)[:40]
        assert {2, PREFILL - 1, PREFILL} <= held, sorted(held)[:40]
        [tombstone] = [r for r in backed_up[compacted.topic][p] if r.consumed_offset == PREFILL]
        assert tombstone.value is None
    # ... and only committed records of the transactions, with markers and aborted records between.
    for p, records in backed_up[transactional.topic].items():
        assert records == consume_all(source_cluster, transactional.topic, [p])
        assert not aborted & {r.value for r in records}
        offsets = [r.consumed_offset for r in records]
        assert offsets[-1] - offsets[0] + 1 > len(offsets)
    return History(
        store=store,
        source_cluster=catalog.source_cluster,
        shapes=shapes,
        stamps=stamps,
        backed_up=backed_up,
        aborted=aborted,
    )


def candidates(commits: list[Commit], at: float) -> list[int]:
    """The indexes of the commits a position of ``at`` may be: committed (sent) by ``at``, and none
    older than the last one acknowledged a reading interval and a reading's time before it."""
    sent = [i for i, c in enumerate(commits) if c.sent <= at]
    settled = [i for i, c in enumerate(commits) if c.acknowledged <= at - INTERVAL_SECS - READING_SECS]
    assert settled, "the moment is too early: the group had no settled commit"
    return [i for i in sent if i >= settled[-1]]


def plan(args: list[str], capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    code = run(["offset-reset", "plan", *args, "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    planned = json.loads(captured.out)
    assert isinstance(planned, dict)
    return planned


def moments(shape: Shape) -> list[float]:
    """A millisecond before each of the fast group's last six commits up to step 17 (before the
    restore's moment): where the position of then and a later one differ most narrowly. Each one
    late enough that every group had a settled commit (a reading interval and a reading's time
    before it), however slowly the steps went."""
    [fast] = [commits for group, commits in shape.commits.items() if group.endswith("-fast")]
    first_settled = max(commits[0].acknowledged for commits in shape.commits.values())
    chosen = [
        c.sent - 0.001
        for c in fast[:RESTORE_STEP]
        if c.sent - 0.001 - INTERVAL_SECS - READING_SECS >= first_settled
    ][-6:]
    assert len(chosen) == 6, "the follow run's steps went too fast for six moments"
    return chosen


def positions_in(planned: dict[str, Any], topic: str) -> dict[str, dict[int, int]]:
    """Each group's planned offsets on ``topic``'s partitions."""
    positions: dict[str, dict[int, int]] = {}
    for group in planned["groups"]:
        rows = {row["target_partition"]: row for row in group["partitions"]}
        assert sorted(rows) == PARTITIONS, group
        assert {row["target_topic"] for row in rows.values()} == {topic}, group
        positions[group["group_id"]] = {p: row["new_offset"] for p, row in rows.items()}
    return positions


def assert_a_position_of(commits: list[Commit], at: float, offsets: dict[int, int], group: str) -> None:
    """Both partitions at one commit the group could have had at ``at``."""
    allowed = [commits[i].offsets for i in candidates(commits, at)]
    assert offsets in allowed, (group, iso_utc(at), offsets, allowed)


@pytest.mark.parametrize("kind", SHAPES)
def test_a_group_rewound_in_place_on_a_log_with_holes_is_where_it_was_then(
    history: History,
    source_cluster: LocalKafkaCluster,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    kind: str,
) -> None:
    shape = history.shapes[kind]
    held = {p: {r.consumed_offset for r in records} for p, records in history.backed_up[shape.topic].items()}
    source = ["-b", source_cluster.bootstrap_servers, "-p", str(history.store), "--backup-id", "follow"]
    plan_file = tmp_path / "rewind.json"
    for at in moments(shape):
        as_of = ["-g", ",".join(shape.commits), "--as-of", iso_utc(at), "--in-place"]
        planned = plan([*source, *as_of, "--output", str(plan_file)], capsys)
        assert planned["strategy"] == "rewind"
        assert planned["source"]["as_of"] == iso_utc(at)
        assert planned["source"]["precision_secs"] == INTERVAL_SECS
        positions = positions_in(planned, shape.topic)
        assert sorted(positions) == sorted(shape.commits)
        for group in planned["groups"]:
            last = shape.commits[group["group_id"]][-1].offsets
            for row in group["partitions"]:
                p, new_offset = row["target_partition"], row["new_offset"]
                assert row["method"] == "rewind"
                # Where it is now, and the offsets (not records: holes count) it goes back over.
                assert (row["target_committed"], row["rereads"]) == (last[p], last[p] - new_offset)
                assert row["retention_gap"] == 0
        for group, commits in shape.commits.items():
            assert_a_position_of(commits, at, positions[group], group)
        # The slow group's positions are in holes (removed records, markers, aborted records):
        # kept as they were, not moved to a record.
        [slow] = [group for group in positions if group.endswith("-slow")]
        assert all(offset not in held[p] for p, offset in positions[slow].items()), positions

    # Execute commits the last plan's positions exactly.
    execute = ["offset-reset", "execute", "--plan", str(plan_file), "-b", source_cluster.bootstrap_servers]
    execute += ["--snapshot-dir", str(tmp_path / "snapshots"), "--allow-rewind"]
    assert run(execute) == 0, capsys.readouterr().err
    capsys.readouterr()
    for group, wanted in positions.items():
        assert group_positions(source_cluster, group, shape.topic, PARTITIONS) == wanted


@dataclass(frozen=True)
class Restored:
    at_ms: int
    config: Path
    #: shape -> the target topic
    topics: dict[str, str]


@pytest.fixture(scope="module")
def restored(
    history: History,
    target_cluster: LocalKafkaCluster,
    tmp_path_factory: pytest.TempPathFactory,
) -> Restored:
    """``three-phase-restore --as-of T`` of both topics, T a millisecond before the stamp of step
    RESTORE_STEP (written after the commits of the step before): its records stamped T + 1 are
    left out, and the first record of each compacted partition, stamped T, is restored."""
    work = tmp_path_factory.mktemp("point-in-time-shapes-restore")
    at_ms = history.stamps[RESTORE_STEP] - 1
    topics = {kind: f"{shape.topic}-as-of" for kind, shape in history.shapes.items()}
    config = config_file(
        work / "restore.yaml",
        backup_id="follow",
        target={"bootstrap_servers": target_cluster.bootstrap_servers},
        storage={"url": str(history.store)},
        restore={
            "topic_mapping": {shape.topic: topics[kind] for kind, shape in history.shapes.items()},
            "transaction_max_records": 25,
            # Compacted on the target too, but not cleaned while the test reads it.
            "exclude_topic_configs": FAST_CLEANING_CONFIGS,
        },
        offset_reset={
            "snapshot_dir": str(work / "snapshots"),
            "groups": [group for shape in history.shapes.values() for group in shape.commits],
        },
        three_phase={
            "state_dir": str(work / "state"),
            "build_mapping": "when-needed",
            "group_prefix": "moved-",
        },
    )
    code = run(["three-phase-restore", "-c", str(config), "--as-of", iso_of_ms(at_ms)])
    assert code == 0
    return Restored(at_ms, config, topics)


@pytest.mark.parametrize("kind", SHAPES)
def test_a_three_phase_restore_as_of_a_moment_holds_its_records_and_its_groups_on_logs_with_holes(
    history: History,
    restored: Restored,
    source_cluster: LocalKafkaCluster,
    target_cluster: LocalKafkaCluster,
    capsys: pytest.CaptureFixture[str],
    kind: str,
) -> None:
    shape = history.shapes[kind]
    target_topic = restored.topics[kind]
    at = restored.at_ms / 1000
    records: dict[int, list[RestoredRecord]] = {}
    for p in PARTITIONS:
        then = [
            r
            for r in history.backed_up[shape.topic][p]
            if r.timestamp is not None and r.timestamp <= restored.at_ms
        ]
        stamps = {r.timestamp for r in history.backed_up[shape.topic][p]}
        # The moment cuts the partition between two milliseconds: records stamped T + 1 are left out
        # (and on the compacted topic a record stamped T itself is in).
        assert restored.at_ms + 1 in stamps
        assert (restored.at_ms in stamps) == (kind == "compacted")
        got = consume_all(target_cluster, target_topic, [p])
        # Exactly the records the backup held stamped at or before T, in their order ...
        assert [(r.key, r.value, r.timestamp) for r in got] == [(r.key, r.value, r.timestamp) for r in then]
        # ... each naming its origin, with the source's offsets and their holes.
        origins = [parse_origin(r.headers) for r in got]
        assert [(o.cluster, o.topic, o.partition, o.offset) for o in origins if o is not None] == [
            (history.source_cluster, shape.topic, p, r.consumed_offset) for r in then
        ]
        # What the source holds now of then: nothing the restore lacks (the cleaner only removes).
        now = {(r.consumed_offset, r.value) for r in consume_all(source_cluster, shape.topic, [p])}
        assert {(r.consumed_offset, r.value) for r in then} >= {
            (offset, value) for offset, value in now if offset <= then[-1].consumed_offset
        }
        assert not history.aborted & {r.value for r in got}
        records[p] = [
            RestoredRecord(r.consumed_offset, shape.topic, p, o.offset)
            for r, o in zip(got, origins, strict=True)
            if o is not None
        ]

    for group, commits in shape.commits.items():
        moved = group_positions(target_cluster, f"moved-{group}", target_topic, PARTITIONS)
        for p, position in moved.items():
            # Never beyond the records restored.
            assert position is not None, (group, p)
            assert position <= records[p][-1].target_offset + 1, (group, p, moved)
        assert moved in translations(records, shape.topic, commits, at), (group, moved)

    # Earlier moments, translated onto the same restored records by offset-reset plan --as-of.
    for moment in moments(shape):
        assert moment < at
        code = run(["offset-reset", "plan", "-c", str(restored.config), "--as-of", iso_utc(moment), "--json"])
        captured = capsys.readouterr()
        assert code == 0, captured.err
        planned = json.loads(captured.out)
        positions = positions_in(
            {"groups": [g for g in planned["groups"] if g["group_id"] in shape.commits]}, target_topic
        )
        assert sorted(positions) == sorted(shape.commits)
        for group, commits in shape.commits.items():
            assert positions[group] in translations(records, shape.topic, commits, moment), (group, moment)


def translations(
    records: dict[int, list[RestoredRecord]], topic: str, commits: list[Commit], at: float
) -> list[dict[int, int | None]]:
    """The reference translation of each position the group could have had at ``at``."""
    return [
        {p: reference_position(records[p], {(topic, p): commits[i].offsets[p]}) for p in PARTITIONS}
        for i in candidates(commits, at)
    ]
