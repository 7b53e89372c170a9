"""Translation accuracy study: header-based (this project) against the real MirrorMaker 2 and timestamps.

    .venv/bin/python -m bench.accuracy [--quick] [--write-docs] [--records N]

On two local Kafka 4.3.1 clusters (kbackup.sandbox) it creates the source
topics, starts the real MirrorMaker 2 of the same Kafka version
(``bench.accuracy.mirror_maker``, flow ``live``) so that it copies the records
while they are produced, fills the source (``bench.accuracy.data``) and
commits the study's consumer groups. It backs the topics up and restores them
with this project's CLI (origin headers, the default exactly-once mode),
restores ``acc-main`` again into 6 partitions, without transactions, and into
a LogAppendTime topic. Then MirrorMaker 2 ``live`` is left to translate the
groups and stopped, and a second MirrorMaker 2 (flow ``backlog``) copies the
finished source from the start and translates the same groups. Every group is
translated by each method (``translators``; MirrorMaker 2's positions are the
groups' offsets it synced on the target). For the repartitioned topic this
project's positions come from the offset mapping its own Spark job builds on
the restored topic (``kafka-backup show-offset-mapping``, ``local[2]``), as a
user would build it, read by the reset stage as a mapping file.

Each position is judged against the truth computed from the copied records
(``measure``). This project's restores are judged as MirrorMaker 2's copies
are, never from the origin headers its translation reads: each restored
record's value gives its source partition and sequence number, and the source
ledger (``data``: the offset of each sequence number, from the producer's
delivery reports) its source offset. The headers are only checked against
that ledger: a record whose origin headers disagree with it fails the run.
(The peer's copies are still placed by its own ``x-original-offset`` header:
it restores transaction markers as records whose values carry no sequence
number.) Header-based translation must be exact (0 skipped, 0 re-read)
everywhere but the repartitioned topic, and meet the lower bound there; the
run fails otherwise. With ``--write-docs`` the tables and a plot go into
docs/benchmarks.md (section ``accuracy``) and docs/img/.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import astuple, dataclass, field
from pathlib import Path

import numpy as np

from bench._perf import refuse_smoke_figures_in_docs, replace_section
from bench.accuracy.data import (
    COMPACT,
    LAG_BUCKETS,
    MAIN,
    MAIN_RATES,
    SKEW,
    TXN,
    SourceData,
    StudyGroup,
    fill_source,
)
from bench.accuracy.measure import RestoredPartition, read_restored_columns
from bench.accuracy.mirror_maker import (
    MIRROR_MAKER_VERSION,
    MirrorMaker2,
    SyncCounts,
    count_syncs,
    mirror_maker_libs,
    read_mirrored,
    read_offset_syncs,
)
from bench.accuracy.peer import peer_backup, peer_restore, peer_translate, peer_version, stored_bytes
from bench.accuracy.translators import Positions, header_based, timestamp_based
from kbackup.core.config import KafkaConnection
from kbackup.core.kafka import open_admin
from kbackup.core.kafka.admin import TopicSpec
from kbackup.core.types import TopicPartitionKey
from kbackup.format.catalog import BackupCatalog
from kbackup.sandbox.jars import KAFKA_VERSION
from kbackup.sandbox.kafka import local_clusters
from kbackup.storage import open_storage

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs" / "benchmarks.md"
PLOT = REPO / "docs" / "img" / "accuracy-rereads.png"
START, END = "<!-- accuracy:start -->", "<!-- accuracy:end -->"
RESULT_PICKLE = REPO / "bench-results" / "accuracy-result.pickle"
BACKUP_ID = "accuracy"
REPARTITIONED = f"{MAIN}-x6"
REPARTITIONED_COUNT = 6
#: acc-main restored again without transactions: no commit markers on the target (see the report's note).
IDEMPOTENT = f"{MAIN}-idempotent"
#: acc-main restored without transactions into a topic whose broker stamps LogAppendTime.
LOG_APPEND_TIME = f"{MAIN}-log-append-time"
#: The topics MirrorMaker 2 copies (every source topic of the study).
MIRRORED = (MAIN, SKEW, TXN, COMPACT)
#: MirrorMaker 2's flows: the records copied while they were produced, and a finished source copied at once.
FLOWS = ("live", "backlog")
MM2_METHODS = tuple(f"MM2 {flow}" for flow in FLOWS)
#: The header-based peer (OSO kafka-backup), when the run is given its binary.
PEER = "peer"
#: The peer's header with each restored record's source offset (8 bytes, little-endian).
PEER_ORIGIN_HEADER = "x-original-offset"
#: Methods that copy the source themselves, and the prefix of their copies' topic names.
COPYING_METHODS = {**{method: method.removeprefix("MM2 ") for method in MM2_METHODS}, PEER: PEER}
METHODS = ("header-based", *MM2_METHODS, PEER, "timestamp")


@dataclass
class Judged:
    """One group's outcome under one method over the target partitions of a scenario."""

    skipped: int = 0
    reread: int = 0
    untranslated_partitions: int = 0


@dataclass
class ScenarioRow:
    name: str
    groups: int
    restored_records: int
    #: method -> per-group outcomes (None: the method does not apply to this scenario).
    outcomes: dict[str, list[Judged] | None] = field(default_factory=dict)
    #: Re-reads every translator must make here (the reference position's), per group.
    lower_bound: list[int] = field(default_factory=list)


@dataclass
class FlowReport:
    """What one MirrorMaker 2 flow did: per mirrored source topic, records copied and offset syncs."""

    flow: str
    #: Seconds from the driver's start to the last record copied.
    replication_seconds: float
    #: Per topic; None where the copy was compacted on the target (the rule cannot be replayed on it).
    syncs: dict[str, SyncCounts | None]
    emitted: dict[str, int]
    copied: dict[str, int]
    #: Records the source's transactions aborted that the flow copied as ordinary records.
    aborted_copied: int


@dataclass
class StudyResult:
    source: SourceData
    rows: list[ScenarioRow]
    timings: dict[str, float]
    #: Header-based positions that differ from the reference position (must stay empty).
    header_mismatches: list[str]
    flows: list[FlowReport] = field(default_factory=list)
    #: The methods this run measured (the peer only with its binary).
    methods: tuple[str, ...] = METHODS
    footprints: list[Footprint] = field(default_factory=list)
    #: Restored partitions whose records' origin headers disagree with the ledger (must stay empty).
    header_disagreements: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Footprint:
    """One command's run: records it moved, wall seconds, peak RSS, CPU, and the bytes its storage held."""

    tool: str
    step: str
    records: int
    seconds: float
    peak_rss_bytes: int
    cpu_seconds: float
    stored_bytes: int


def _cli(*args: str, config: Mapping[str, object], work: Path) -> tuple[dict[str, object], float, int, float]:
    """Run ``kafka-backup`` with a config file, as a user would: its --json summary, wall, peak RSS, CPU."""
    path = work / f"{args[0]}-{time.monotonic_ns()}.json"
    path.write_text(json.dumps(config))  # JSON is YAML
    out_path, err_path = path.with_suffix(".out"), path.with_suffix(".err")
    started = time.monotonic()
    with out_path.open("wb") as out, err_path.open("wb") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", "kbackup", *args, "-c", str(path), "--json"],
            stdout=out, stderr=err, cwd=REPO, env={**os.environ, "KBACKUP_NO_PROGRESS": "1"},
        )  # fmt: skip
        _, status, usage = os.wait4(process.pid, 0)
    seconds = time.monotonic() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        stderr = err_path.read_text(errors="replace")
        raise RuntimeError(f"kafka-backup {args[0]} failed ({process.returncode}):\n{stderr[-3000:]}")
    summary: dict[str, object] = json.loads(out_path.read_text())
    return summary, seconds, usage.ru_maxrss * 1024, usage.ru_utime + usage.ru_stime


def _judge(
    restored: Mapping[TopicPartitionKey, RestoredPartition],
    group: StudyGroup,
    keys: list[TopicPartitionKey],
    positions: Positions,
) -> Judged:
    judged = Judged()
    for topic, partition in keys:
        position = positions.get((group.group_id, topic, partition))
        if position is None:
            judged.untranslated_partitions += 1
            continue
        committed = {p: c for (_, p), c in group.committed.items()}
        skipped, reread = restored[(topic, partition)].judge(committed, position)
        judged.skipped += skipped
        judged.reread += reread
    return judged


def _flow_report(
    mirror: MirrorMaker2, data: SourceData, mirrored: Mapping[TopicPartitionKey, RestoredPartition],
    replication_seconds: float,
) -> FlowReport:  # fmt: skip
    emitted = read_offset_syncs(mirror.source, mirror.offset_syncs_topic)
    syncs: dict[str, SyncCounts | None] = {}
    copied: dict[str, int] = {}
    for topic in MIRRORED:
        counts = []
        for partition in range(data.partition_counts[topic]):
            records = mirrored[(mirror.mirrored(topic), partition)]
            pairs = zip(records.source_offsets.tolist(), records.target_offsets.tolist(), strict=True)
            counts.append(count_syncs(pairs, emitted.get((topic, partition), [])))
            copied[topic] = copied.get(topic, 0) + len(records)
        # MirrorMaker 2 copies cleanup.policy: the target's cleaner removed copied records, whose
        # (upstream, downstream) pairs the writer rule saw and this replay cannot.
        syncs[topic] = (
            None if topic == COMPACT else SyncCounts(*map(sum, zip(*map(astuple, counts), strict=True)))
        )
    aborted = sum(
        int(np.isin(mirrored[(mirror.mirrored(TXN), p)].source_offsets, data.aborted[(TXN, p)]).sum())
        for p in range(data.partition_counts[TXN])
    )
    counted = {
        topic: sum(len(emitted.get((topic, p), [])) for p in range(data.partition_counts[topic]))
        for topic in MIRRORED
    }
    return FlowReport(mirror.alias, replication_seconds, syncs, counted, copied, aborted)


def _run_mirror(
    mirror: MirrorMaker2, data: SourceData, records: int, groups: list[StudyGroup],
    log: Callable[[str], None],
) -> tuple[Positions, float]:  # fmt: skip
    """Wait for a running MirrorMaker 2 to copy everything and translate the groups; its positions."""
    minimum = {(MAIN, p): records for p in range(len(MAIN_RATES))}
    replication = mirror.wait_replicated(minimum)
    log(f"MirrorMaker 2 {mirror.alias}: copied in {replication:.0f}s after its start")
    positions = mirror.translated_positions({group.group_id: sorted(group.committed) for group in groups})
    translated = sum(value is not None for value in positions.values())
    log(f"MirrorMaker 2 {mirror.alias}: {translated} of {len(positions)} group partitions translated")
    return positions, replication


def run_study(
    source: KafkaConnection,
    target: KafkaConnection,
    work: Path,
    *,
    records: int,
    groups_per_bucket: int,
    seed: int,
    peer_binary: Path | None = None,
    log: Callable[[str], None] = print,
) -> StudyResult:
    timings: dict[str, float] = {}
    footprints: list[Footprint] = []
    started = time.monotonic()
    mirror_maker_libs()
    timings["resolve MirrorMaker 2"] = time.monotonic() - started
    mirrors = {
        flow: MirrorMaker2(flow, source, target, MIRRORED, work / f"mm2-{flow}", groups="acc-.*")
        for flow in FLOWS
    }
    started = time.monotonic()
    data = fill_source(
        source, records, groups_per_bucket=groups_per_bucket, seed=seed, before_fill=mirrors["live"].start
    )
    timings["fill source (MirrorMaker 2 live copying)"] = time.monotonic() - started
    log(f"source filled in {time.monotonic() - started:.0f}s: holes {data.holes}, {len(data.groups)} groups")

    storage_url = str(work / "store")
    topics = sorted(data.partition_counts)
    source_section = {"bootstrap_servers": source.bootstrap_servers, "topics": {"include": topics}}
    target_section = {"bootstrap_servers": target.bootstrap_servers}
    backup_summary, seconds, rss, cpu = _cli(
        "backup",
        config={"backup_id": BACKUP_ID, "source": source_section, "storage": {"url": storage_url},
                "backup": {"consumer_group_snapshot": True}},
        work=work,
    )  # fmt: skip
    timings["backup"] = seconds
    footprints.append(
        Footprint("kafka-backup", "backup", int(str(backup_summary["records"])), seconds, rss, cpu,
                  stored_bytes(work / "store"))
    )  # fmt: skip
    log(f"backup: {backup_summary.get('records')} records in {timings['backup']:.0f}s")
    peer_store, peer_work = work / "peer-store", work / "peer"
    if peer_binary is not None:
        run = peer_backup(
            peer_binary, ",".join(source.bootstrap_servers), list(MIRRORED), peer_store, peer_work
        )
        peer_name = f"{PEER}: OSO {peer_version(peer_binary)}"
        footprints.append(
            Footprint(peer_name, "backup", run.records, run.seconds, run.peak_rss_bytes, run.cpu_seconds,
                      run.stored_bytes)
        )  # fmt: skip
        timings["peer backup"] = run.seconds
        log(f"peer backup: {run.records:,} records in {run.seconds:.0f}s")
    # The LogAppendTime variant: the broker stamps every restored record with its own clock.
    open_admin(target).create_topics(
        [TopicSpec(LOG_APPEND_TIME, len(MAIN_RATES), 1, {"message.timestamp.type": "LogAppendTime"})]
    )
    restores = {
        "restore": {},
        f"repartitioned restore ({MAIN} 3 -> {REPARTITIONED_COUNT})": {
            "topics": [MAIN], "topic_mapping": {MAIN: REPARTITIONED},
            "target_partitions": {MAIN: REPARTITIONED_COUNT}, "repartition": True,
        },
        f"idempotent restore ({MAIN})": {"topics": [MAIN], "topic_mapping": {MAIN: IDEMPOTENT},
                                         "exactly_once": False},
        f"LogAppendTime restore ({MAIN})": {"topics": [MAIN], "topic_mapping": {MAIN: LOG_APPEND_TIME},
                                            "exactly_once": False, "log_append_time": "rewrite"},
    }  # fmt: skip
    for name, settings in restores.items():
        summary, seconds, rss, cpu = _cli(
            "restore",
            config={"backup_id": BACKUP_ID, "storage": {"url": storage_url}, "target": target_section,
                    "restore": settings},
            work=work,
        )  # fmt: skip
        timings[name] = seconds
        restored_count = int(str(summary["records"]))
        footprints.append(Footprint("kafka-backup", name, restored_count, seconds, rss, cpu, 0))
        log(f"{name}: {restored_count:,} records in {seconds:.0f}s")

    groups = data.groups
    lag_groups = [group for group in groups if group.lags]
    positions: dict[str, Positions] = {}
    if peer_binary is not None:
        # The peer restores every topic under "peer.<topic>" and commits the snapshotted groups there.
        run = peer_restore(
            peer_binary, ",".join(target.bootstrap_servers), peer_store, peer_work,
            {topic: f"{PEER}.{topic}" for topic in MIRRORED},
        )  # fmt: skip
        footprints.append(
            Footprint(peer_name, "restore (groups reset inside)", run.records,
                      run.seconds, run.peak_rss_bytes, run.cpu_seconds, 0)
        )  # fmt: skip
        timings["peer restore"] = run.seconds
        log(f"peer restore: {run.records:,} records in {run.seconds:.0f}s")
        positions[PEER] = peer_translate(
            peer_binary, ",".join(target.bootstrap_servers), [group.group_id for group in groups], peer_work,
            expected=[(group.group_id, f"{PEER}.{t}", p) for group in groups for t, p in group.committed],
        )  # fmt: skip
    replication: dict[str, float] = {}
    for flow, mirror in mirrors.items():
        started = time.monotonic()
        if flow != "live":
            mirror.start()
        try:
            positions[f"MM2 {flow}"], replication[flow] = _run_mirror(mirror, data, records, groups, log)
        finally:
            mirror.stop()
        timings[f"MirrorMaker 2 {flow}: copy and translate"] = time.monotonic() - started

    storage = open_storage(storage_url)
    backup = BackupCatalog(storage).load(BACKUP_ID)
    target_partitions = {topic: list(range(count)) for topic, count in data.partition_counts.items()}
    target_partitions[REPARTITIONED] = list(range(REPARTITIONED_COUNT))
    target_partitions[IDEMPOTENT] = list(range(len(MAIN_RATES)))
    target_partitions[LOG_APPEND_TIME] = list(range(len(MAIN_RATES)))
    # The source topic each restored topic was asked to hold: what the truth reads a value against.
    source_topic_of = {topic: topic for topic in data.partition_counts}
    source_topic_of.update({copy: MAIN for copy in (REPARTITIONED, IDEMPOTENT, LOG_APPEND_TIME)})
    started = time.monotonic()
    restored, disagreements = read_restored_columns(
        target,
        {
            (topic, p): source_topic_of[topic]
            for topic, partitions in target_partitions.items()
            for p in partitions
        },
        data.ledger,
        backup.source_cluster,
    )
    timings["read restored records (truth)"] = time.monotonic() - started
    for line in disagreements:
        log(f"ORIGIN HEADERS DISAGREE WITH THE LEDGER: {line}")
    # acc-main and its copies must come back whole (the compacted topic may be compacted again on
    # the target, where the cleaner drops duplicate keys the backup still held).
    for topic in (MAIN, REPARTITIONED, IDEMPOTENT, LOG_APPEND_TIME):
        count = sum(len(item) for (name, _), item in restored.items() if name == topic)
        if count != records * len(MAIN_RATES):
            raise RuntimeError(
                f"read {count:,} restored records of {topic}, expected {records * len(MAIN_RATES):,}"
            )
    log(f"read {sum(len(item) for item in restored.values()):,} restored records")
    started = time.monotonic()
    flows = []
    for flow, mirror in mirrors.items():
        mirrored = read_mirrored(
            target,
            {(mirror.mirrored(t), p): (t, p) for t in MIRRORED for p in range(data.partition_counts[t])},
            data.ledger,
        )
        for (topic, _), item in mirrored.items():
            if topic == mirror.mirrored(MAIN) and len(item) < records:
                raise RuntimeError(f"MirrorMaker 2 {flow} copied {len(item):,} records of a {MAIN} partition")
        flows.append(_flow_report(mirror, data, mirrored, replication[flow]))
        restored.update(mirrored)
    if peer_binary is not None:
        # The peer keeps each record's source offset in its x-original-offset header (and restores
        # transaction markers as records, whose values carry no sequence number).
        restored.update(
            read_mirrored(
                target,
                {(f"{PEER}.{t}", p): (t, p) for t in MIRRORED for p in range(data.partition_counts[t])},
                data.ledger,
                origin_header=PEER_ORIGIN_HEADER,
            )
        )
    timings["read MirrorMaker 2 and peer copies (truth)"] = time.monotonic() - started

    header, timings["header-based plan"] = header_based(target, backup, storage.url, groups)
    # The repartitioned topic's mapping, built as a user builds it: this project's Spark job.
    mapping_file = work / f"mapping-{REPARTITIONED}.parquet"
    mapping_summary, timings[f"offset mapping of {REPARTITIONED} (Spark local[2])"], _, _ = _cli(
        "show-offset-mapping", "--topic", REPARTITIONED, "--source-cluster", backup.source_cluster,
        "--output", str(mapping_file),
        config={"target": target_section, "mapping": {"spark_master": "local[2]"}}, work=work,
    )  # fmt: skip
    log(
        f"offset mapping of {REPARTITIONED}: {mapping_summary.get('records_mapped')} records in "
        f"{mapping_summary.get('ranges')} ranges, {mapping_summary.get('seconds')}s"
    )
    header_x6, timings["header-based plan (repartitioned, from the mapping)"] = header_based(
        target,
        backup,
        storage.url,
        lag_groups,
        topic_mapping={MAIN: REPARTITIONED},
        mapping_file=mapping_file,
    )
    header_idem, _ = header_based(target, backup, storage.url, lag_groups, topic_mapping={MAIN: IDEMPOTENT})
    header_lat, _ = header_based(
        target, backup, storage.url, lag_groups, topic_mapping={MAIN: LOG_APPEND_TIME}
    )
    positions["header-based"] = {**header, **header_x6, **header_idem, **header_lat}
    started = time.monotonic()
    positions["timestamp"] = {
        **timestamp_based(source, target, groups, target_partitions),
        **timestamp_based(
            source,
            target,
            lag_groups,
            target_partitions,
            topic_mapping={MAIN: REPARTITIONED},
            repartitioned=True,
        ),
        **timestamp_based(source, target, lag_groups, target_partitions, topic_mapping={MAIN: IDEMPOTENT}),
        **timestamp_based(
            source, target, lag_groups, target_partitions, topic_mapping={MAIN: LOG_APPEND_TIME}
        ),
    }
    timings["timestamp lookups"] = time.monotonic() - started
    log("translated: " + ", ".join(f"{name} {seconds:.0f}s" for name, seconds in timings.items()))

    mismatches = _header_mismatches(groups, lag_groups, restored, positions["header-based"])
    methods = tuple(method for method in METHODS if method in positions)
    rows = _scenarios(groups, lag_groups, restored, positions, methods)
    return StudyResult(
        source=data, rows=rows, timings=timings, header_mismatches=mismatches, flows=flows, methods=methods,
        footprints=footprints, header_disagreements=disagreements,
    )  # fmt: skip


def _keys_of(group: StudyGroup) -> list[TopicPartitionKey]:
    return sorted(group.committed)


def _header_mismatches(
    groups: list[StudyGroup],
    lag_groups: list[StudyGroup],
    restored: Mapping[TopicPartitionKey, RestoredPartition],
    header: Positions,
) -> list[str]:
    found = []
    checks = [(group, key) for group in groups for key in _keys_of(group)]
    checks += [(group, (REPARTITIONED, q)) for group in lag_groups for q in range(REPARTITIONED_COUNT)]
    checks += [
        (group, (copy, p))
        for copy in (IDEMPOTENT, LOG_APPEND_TIME)
        for group in lag_groups
        for p in range(len(MAIN_RATES))
    ]
    for group, (topic, partition) in checks:
        committed = {p: c for (_, p), c in group.committed.items()}
        expected = restored[(topic, partition)].reference_position(committed)
        got = header.get((group.group_id, topic, partition))
        if got != expected:
            found.append(f"{group.group_id} {topic}/{partition}: planned {got}, reference {expected}")
    return found


def _scenarios(
    groups: list[StudyGroup],
    lag_groups: list[StudyGroup],
    restored: Mapping[TopicPartitionKey, RestoredPartition],
    positions: Mapping[str, Positions],
    measured: tuple[str, ...] = METHODS,
) -> list[ScenarioRow]:
    def row(name: str, members: list[StudyGroup], keys_of: Callable[[StudyGroup], list[TopicPartitionKey]],
            methods: tuple[str, ...] = measured) -> ScenarioRow:  # fmt: skip
        keys = sorted({key for group in members for key in keys_of(group)})
        result = ScenarioRow(name, len(members), sum(len(restored[key]) for key in keys))
        for method in measured:
            # MirrorMaker 2 and the peer copy each source topic into their own "<prefix>.<topic>".
            prefix = COPYING_METHODS.get(method)

            def method_keys(group: StudyGroup, prefix: str | None = prefix) -> list[TopicPartitionKey]:
                return [(f"{prefix}.{t}", p) if prefix else (t, p) for t, p in keys_of(group)]

            result.outcomes[method] = (
                [_judge(restored, group, method_keys(group), positions[method]) for group in members]
                if method in methods
                else None
            )
        for group in members:
            committed = {p: c for (_, p), c in group.committed.items()}
            result.lower_bound.append(
                sum(
                    restored[key].judge(committed, restored[key].reference_position(committed) or 0)[1]
                    for key in keys_of(group)
                )
            )
        return result

    rows = []
    for bucket, _, _ in LAG_BUCKETS:
        members = [group for group in lag_groups if group.scenario == f"lag {bucket}"]
        rows.append(row(f"lag {bucket} (3 partitions)", members, _keys_of))
    for partition, rate in enumerate(MAIN_RATES):

        def keys_of_partition(group: StudyGroup, p: int = partition) -> list[TopicPartitionKey]:
            return [(MAIN, p)]

        rows.append(
            row(f"{rate} records/ms (partition {partition}, all lags)", lag_groups, keys_of_partition)
        )
    for scenario in ("transaction markers and aborted records", "compaction holes", "skewed producer clocks"):
        rows.append(row(scenario, [group for group in groups if group.scenario == scenario], _keys_of))
    without_mirror = ("header-based", "timestamp")
    for label, copy in (
        ("idempotent restore (no markers)", IDEMPOTENT),
        ("LogAppendTime target", LOG_APPEND_TIME),
    ):

        def keys_of_copy(group: StudyGroup, copy: str = copy) -> list[TopicPartitionKey]:
            return [(copy, p) for _, p in _keys_of(group)]

        for bucket, _, _ in LAG_BUCKETS:
            members = [group for group in lag_groups if group.scenario == f"lag {bucket}"]
            rows.append(row(f"{label}, lag {bucket}", members, keys_of_copy, methods=without_mirror))
    for bucket, _, _ in LAG_BUCKETS:
        members = [group for group in lag_groups if group.scenario == f"lag {bucket}"]
        rows.append(
            row(f"repartitioned 3 -> 6, lag {bucket}", members,
                lambda _group: [(REPARTITIONED, q) for q in range(REPARTITIONED_COUNT)],
                methods=without_mirror)
        )  # fmt: skip
    return rows


def _cell(outcomes: list[Judged] | None) -> str:
    if outcomes is None:
        return "n/a | n/a | n/a"
    translated = [item for item in outcomes if not item.untranslated_partitions]
    rereads = [item.reread for item in outcomes]
    skipped = sum(item.skipped for item in outcomes)
    return (
        f"{skipped:,} | {statistics.fmean(rereads) if rereads else 0:,.0f} / {max(rereads, default=0):,} "
        f"| {len(outcomes) - len(translated)}"
    )


def report(result: StudyResult, seconds: float, plot: Path | None) -> str:
    load = os.getloadavg()
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    data = result.source
    lines = [
        f"Measured {time.strftime('%Y-%m-%d')} with `python -m bench.accuracy` on {os.cpu_count()} CPU(s) "
        f"({platform.machine()}), {memory:.0f} GiB, load average {load[0]:.1f}/{load[1]:.1f}/{load[2]:.1f}; "
        f"two local Kafka {KAFKA_VERSION} clusters and the real MirrorMaker 2 of Kafka "
        f"{MIRROR_MAKER_VERSION} (`org.apache.kafka:connect-mirror:{MIRROR_MAKER_VERSION}` from Maven "
        "Central, its dedicated driver); "
        f"{seconds / 60:.0f} min in all.",
        "",
        f"Source: `{MAIN}` 3 partitions x {data.records_per_partition:,} records (2, 4 and 100 records per "
        "millisecond), plus smaller topics for transactions, compaction and skewed clocks "
        f"({', '.join(f'{t}/{p}: {n:,} holes' for (t, p), n in sorted(data.holes.items()))}). "
        "Backed up and restored with `kafka-backup backup` / `restore` (origin headers, exactly-once); "
        f"`{MAIN}` restored again into {REPARTITIONED_COUNT} partitions, without transactions "
        f"(`{IDEMPOTENT}`) and into a LogAppendTime topic (`{LOG_APPEND_TIME}`). The same source copied by "
        "MirrorMaker 2 twice: *live*, running while the records were produced, and *backlog*, started on "
        f"the finished source. {len(data.groups)} groups, committed on the source after the records.",
        "",
        "Per scenario and method: records skipped (sum over groups; data loss), records re-read per group "
        "(mean / max), and groups with at least one untranslated partition (not counted in the skipped and "
        "re-read columns). Truth: the reference formula of `shared/reference/offset-translation.md` "
        "evaluated on every copied record read back from the target. For this project's restores and "
        "MirrorMaker 2's copies, each record's source partition and sequence number come from its value, "
        "and its source offset from the producer's delivery reports (the source ledger), never from the "
        "origin headers the header-based translation reads; those headers are checked against the ledger "
        "instead, record by record, and "
        + (
            f"**disagreed in {len(result.header_disagreements)} restored partition(s)**"
            if result.header_disagreements
            else "agreed on every restored record"
        )
        + ". For the peer's copies the source offset comes from its own `x-original-offset` header (it "
        "restores transaction markers as records, whose values carry no sequence number). Header-based "
        "on the repartitioned topic: the groups planned from the offset mapping that this project's Spark "
        f"job built on `{REPARTITIONED}` (`kafka-backup show-offset-mapping`, `local[2]`), read by the reset "
        "stage as a mapping file.",
        "",
        "| scenario | groups | "
        + " | ".join(f"{method} skipped | re-read mean / max | untranslated" for method in result.methods)
        + " | lower bound (mean re-read) |",
        "|---|---:|" + "---:|---:|---:|" * len(result.methods) + "---:|",
    ]
    for row in result.rows:
        lines.append(
            f"| {row.name} | {row.groups} | "
            + " | ".join(_cell(row.outcomes[method]) for method in result.methods)
            + f" | {statistics.fmean(row.lower_bound) if row.lower_bound else 0:,.0f} |"
        )
    lines += [
        "",
        "MirrorMaker 2's offset syncs, per flow and source topic: syncs its writer rule queued for "
        "immediate sending (Kafka's `OffsetSyncWriter`, `offset.lag.max=100`, applied to the copied "
        "records), syncs found in its offset-syncs topic, queued syncs that never reached the topic "
        "(superseded while 10 were in flight: dropped), and written syncs the rule did not queue "
        "(delayed syncs sent at an offset flush). MirrorMaker 2 copies the compacted topic's cleanup policy, "
        "and the target's cleaner then removes copied records: its syncs are counted, not replayed (n/a).",
        "",
        "| flow | topic | records copied | syncs queued | emitted | dropped | delayed, sent at a flush |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for flow in result.flows:
        for topic, counts in flow.syncs.items():
            replayed = (
                f"{counts.queued:,} | {counts.emitted:,} | {counts.dropped:,} | {counts.delayed:,}"
                if counts is not None
                else f"n/a | {flow.emitted[topic]:,} | n/a | n/a"
            )
            lines.append(f"| {flow.flow} | {topic} | {flow.copied[topic]:,} | {replayed} |")
    fill = result.timings.get("fill source (MirrorMaker 2 live copying)")
    lines += [""] + [
        f"- MirrorMaker 2 {flow.flow}: its last record was copied {flow.replication_seconds:.0f} s after it "
        "started"
        + (
            f" (the source's fill, which it copied as it ran, took {fill:.0f} s)"
            if flow.flow == "live" and fill
            else ""
        )
        + f"; it copied {flow.aborted_copied:,} records that the source's transactions aborted, "
        "as ordinary records (its consumer reads uncommitted)."
        for flow in result.flows
    ]
    lines += [
        "",
        "MM2: the groups' offsets that MirrorMaker 2's group-offset sync wrote on the target "
        "(`sync.group.offsets.enabled`, checkpoints every second; `offset.lag.max` and `tasks.max` at "
        "their defaults); "
        f"n/a on the restores MirrorMaker 2 has no counterpart of. Timestamp: the committed record's "
        "timestamp read from the source, then offsets-for-times on the real target (a group at the head "
        "has no record to read: untranslated, as the seed describes). The exactly-once restore leaves "
        "transaction commit markers on the target, stamped with the broker's wall-clock time; "
        "offsets-for-times returns the first record or marker at or after a timestamp, so a lookup can "
        f"stop at a marker well before the record: the `{IDEMPOTENT}` rows are the same groups on an "
        f"idempotent restore without markers. The `{LOG_APPEND_TIME}` rows: the same on a target topic "
        "whose broker stamps each record with its append time (`restore.log_append_time: rewrite`). "
        "Lower bound: the re-reads of the reference position itself (non-zero only where one target "
        "partition interleaves several source partitions).",
        "",
        *_footprint_lines(result.footprints),
        "Time per step: " + ", ".join(f"{name} {value:.0f}s" for name, value in result.timings.items()) + ".",
    ]
    if result.header_mismatches:
        lines += [
            "",
            f"**Header-based positions differing from the reference: {len(result.header_mismatches)}**",
        ]
    if result.header_disagreements:
        lines += ["", "**Restored records whose origin headers disagree with the source ledger:**", ""]
        lines += [f"- {line}" for line in result.header_disagreements]
    if plot is not None:
        lines += ["", f"![re-reads per lag bucket]({plot.relative_to(DOCS.parent).as_posix()})"]
    return "\n".join(lines)


def _footprint_lines(footprints: list[Footprint]) -> list[str]:
    """Backup and restore of the same topics, this project's and the peer's, side by side."""
    if not any(item.tool.startswith(PEER) for item in footprints):
        return []
    lines = [
        "Backup and restore of the same topics, this project's and the header-based peer's, each as one "
        "process (wall from start to exit; peak RSS and CPU from `wait4`; stored: every file of its "
        "storage folder). The peer's restore includes its group reset; this project's restore is "
        "exactly-once unless its name says otherwise, and resets no group (the reset stage does).",
        "",
        "| tool | step | records | seconds | records/s | peak RSS | CPU s | stored |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for item in footprints:
        stored = f"{item.stored_bytes / 2**20:,.1f} MiB" if item.stored_bytes else "-"
        lines.append(
            f"| {item.tool} | {item.step} | {item.records:,} | {item.seconds:.1f} | "
            f"{item.records / item.seconds:,.0f} | {item.peak_rss_bytes / 2**20:,.0f} MiB | "
            f"{item.cpu_seconds:.1f} | {stored} |"
        )
    return [*lines, ""]


def draw_plot(result: StudyResult, path: Path) -> None:
    """Mean re-reads per lag bucket per method (symlog: header-based is 0)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [row for row in result.rows if row.name.startswith("lag ")]
    figure, axis = plt.subplots(figsize=(8, 4.2))
    width = 0.8 / len(result.methods)
    for index, method in enumerate(result.methods):
        values = [
            statistics.fmean(item.reread for item in row.outcomes[method] or [])
            if row.outcomes[method]
            else 0
            for row in rows
        ]
        offset = (index - (len(result.methods) - 1) / 2) * width
        axis.bar([i + offset for i in range(len(rows))], values, width, label=method)
    axis.set_xticks(range(len(rows)), [row.name.split(" (")[0].removeprefix("lag ") for row in rows])
    axis.set_yscale("symlog", linthresh=1)
    axis.set_xlabel("group lag behind the head (records)")
    axis.set_ylabel("records re-read per group (mean)")
    axis.set_title("Re-reads after translation, 3 partitions x 1 group, by lag")
    axis.legend()
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def failures(result: StudyResult) -> list[str]:
    """What makes the run fail: origin headers that disagree with the ledger, header-based not exact
    where it must be, or any skipped record."""
    found = [f"origin headers disagree with the ledger: {line}" for line in result.header_disagreements]
    found += result.header_mismatches
    for row in result.rows:
        header = row.outcomes["header-based"] or []
        skipped = sum(item.skipped for item in header)
        reread = sum(item.reread for item in header)
        if skipped:
            found.append(f"{row.name}: header-based skipped {skipped} records")
        if row.name.startswith("repartitioned"):
            if reread != sum(row.lower_bound):
                found.append(f"{row.name}: header-based re-read {reread}, lower bound {sum(row.lower_bound)}")
        elif reread:
            found.append(f"{row.name}: header-based re-read {reread} records")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick", action="store_true", help="20,000 records per partition, 2 groups per bucket"
    )
    parser.add_argument("--records", type=int, default=1_000_000, help="records per partition of acc-main")
    parser.add_argument("--groups-per-bucket", type=int, default=5)
    parser.add_argument("--seed", type=int, default=8)
    parser.add_argument("--write-docs", action="store_true", help="write the section and plot into docs/")
    parser.add_argument(
        "--peer-binary",
        type=Path,
        help="the header-based peer's kafka-backup binary (OSO, Rust): run its backup, restore and group "
        "reset beside ours (left out when not given)",
    )
    args = parser.parse_args()
    refuse_smoke_figures_in_docs(args)
    records = 20_000 if args.quick else args.records
    per_bucket = 2 if args.quick else args.groups_per_bucket
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kbackup-accuracy-") as scratch:
        work = Path(scratch)
        with local_clusters(["source", "target"], work / "kafka") as (source, target):
            print(f"source {source.bootstrap_servers}, target {target.bootstrap_servers}", flush=True)
            result = run_study(
                source.connection(), target.connection(), work,
                records=records, groups_per_bucket=per_bucket, seed=args.seed, peer_binary=args.peer_binary,
                log=lambda line: print(line, flush=True),
            )  # fmt: skip
    # Kept so the section can be redrawn without measuring again (bench-results/ is not committed).
    RESULT_PICKLE.parent.mkdir(parents=True, exist_ok=True)
    RESULT_PICKLE.write_bytes(pickle.dumps(result))
    plot = PLOT if args.write_docs else None
    if plot is not None:
        draw_plot(result, plot)
    text = report(result, time.monotonic() - started, plot)
    print("\n" + text)
    if args.write_docs:
        replace_section(DOCS, START, END, f"## Accuracy\n\n{text}")
        print(f"\nwritten to {DOCS} and {plot}")
    problems = failures(result)
    if problems:
        print(
            "\nTHE RESTORE'S ORIGIN HEADERS OR ITS HEADER-BASED TRANSLATION ARE NOT EXACT:\n  "
            + "\n  ".join(problems[:50]),
            file=sys.stderr,
        )
        raise SystemExit(1)


if __name__ == "__main__":
    main()
