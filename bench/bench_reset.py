"""Offset-reset benchmark: bulk plan and execute, and the header-based binary search against a full scan.

    .venv/bin/python -m bench.bench_reset [--quick] [--shapes hole-free compacted transactional]
                                          [--write-docs]

Starts one throwaway local Kafka 4.3.1 broker (the target) and measures two things.

**A. Plan and execute for many groups.** A topic of ``--partitions``
partitions is filled with restored records (100-byte values carrying the five
origin headers, in source order, as a restore writes them). A backup manifest
whose consumer-group snapshot holds ``--groups`` groups, each committed on
every source partition (spread over the partition, with some at 0 and at the
log end), is written to a local folder. Then, as subprocesses (wall time and
peak RSS of each):

- ``kafka-backup offset-reset plan`` (binary search per partition, probes
  shared between groups);
- ``kafka-backup offset-reset execute --parallelism N`` of that plan
  (re-checks, rollback snapshot, admin commits, read-back);
- the reference: Kafka's own ``ConsumerGroupCommand --reset-offsets
  --from-file plan.csv --execute`` committing the same offsets for the same
  number of fresh groups in ONE invocation (``--group`` repeated once per
  group, the CSV in the tool's multi-group form ``group,topic,partition,offset``),
  so the JVM starts once, as our process starts once. Kafka's tool does not
  translate offsets: it only applies them, so it is the reference for execute.

**B. Binary search against a full scan** on one partition of
``--search-records`` restored records in each of three shapes
(``bench/_restored_shapes.py``; ``--shapes`` picks some): hole-free (the
search's best case), compacted (origin offsets with the source cleaner's gaps,
target offsets with the target cleaner's holes) and transactional (commit
markers and aborted records between the records). Each shape is its own
partition and its own rows; one whose holes could not be made says so in the
text written. For several committed source offsets (first record, a quarter,
the middle, three quarters, the last record, past the end):

- the binary search, as the planner runs it (same consumer settings), with a
  fresh probe cache each time: probes, fetches, bytes received from the broker
  (librdkafka statistics), wall time;
- a full read_committed scan from the start of the partition reading every
  record's headers until it reaches the same position (one pass; the time and
  record bytes at which each position is crossed), as a tool without the
  search would do; the position it stops at is also the truth each search is
  checked against (a difference stops the run);
- Kafka's ``ConsumerPerformance`` (read_committed) reading the whole
  partition: the rate of a plain JVM consumer, the scan's reference.

Prints the machine (cores, memory, load average). ``--write-docs`` replaces
the section between ``<!-- reset:start -->`` and ``<!-- reset:end -->`` of
docs/benchmarks.md (appending it when absent).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition
from confluent_kafka.admin import AdminClient

from bench._perf import ConsumerPerfResult, consumer_perf, refuse_smoke_figures_in_docs, replace_section
from bench._restore_perf import REPO, _run_measured
from bench._restored_shapes import FIRST_ORIGIN_OFFSET, fill_compacted, fill_hole_free, fill_transactional
from bench.bench_mapping import SOURCE_CLUSTER, fill
from kbackup.core.kafka import KafkaClients, PartitionReader
from kbackup.format.catalog import commit_manifest
from kbackup.format.manifest import (
    ConsumerGroupsSnapshot,
    GroupOffset,
    GroupSnapshot,
    Manifest,
    PartitionEntry,
    SourceInfo,
    TopicEntry,
    utc_now_iso,
)
from kbackup.format.origin import parse_origin
from kbackup.offsets.translate import search_position
from kbackup.reset.probe import PartitionProbe, probe_consumer_properties
from kbackup.sandbox.jars import classpath, kafka_libs
from kbackup.sandbox.kafka import LocalKafkaCluster, local_clusters
from kbackup.storage import LocalStorage

DOCS = REPO / "docs" / "benchmarks.md"
START, END = "<!-- reset:start -->", "<!-- reset:end -->"
SOURCE_TOPIC = "orders"
#: The restored partitions the search is measured on (bench/_restored_shapes.py).
SHAPES = ("hole-free", "compacted", "transactional")


def machine() -> str:
    memory_kib = 0
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemTotal:"):
                memory_kib = int(line.split()[1])
    load = os.getloadavg()
    return (
        f"{os.cpu_count()} CPU(s) ({platform.machine()}, Python {platform.python_version()}), "
        f"{memory_kib / 2**20:.0f} GiB memory, load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f}"
    )


def load_average() -> str:
    return " / ".join(f"{value:.1f}" for value in os.getloadavg())


# --- A. plan and execute for many groups -------------------------------------------------------------


@dataclass
class ProcessRun:
    seconds: float
    peak_rss_bytes: int


@dataclass
class BulkResult:
    groups: int
    partitions: int
    records_per_partition: int
    parallelism: int
    fill_seconds: float
    plan: ProcessRun
    execute: ProcessRun
    kafka_tool: ProcessRun
    #: ConsumerGroupCommand --list: the JVM start-up and one admin round trip, in the tool's time.
    kafka_tool_startup: ProcessRun
    #: ``python -m kbackup --version``: Python start-up and imports, in ours.
    python_startup: ProcessRun
    probes: int
    changed: int


def write_group_snapshot(
    store: Path, groups: list[str], partitions: int, records_per_partition: int, seed: int = 11
) -> None:
    """A backup manifest whose group snapshot commits every group on every source partition."""
    chooser = random.Random(seed)
    end = FIRST_ORIGIN_OFFSET + records_per_partition

    def committed(index: int) -> int:
        # A few groups at the edges (nothing / everything processed), the rest anywhere in the partition.
        if index % 100 == 0:
            return 0
        if index % 100 == 1:
            return end
        return chooser.randrange(FIRST_ORIGIN_OFFSET, end + 1)

    now = utc_now_iso()
    commit_manifest(
        LocalStorage(store),
        Manifest(
            backup_id="bench", increment=0, run_id="bench", tool_version="bench",
            started_at=now, finished_at=now, source=SourceInfo(cluster_id=SOURCE_CLUSTER),
            topics=[TopicEntry(name=SOURCE_TOPIC, partitions=partitions)],
            partitions=[
                PartitionEntry(topic=SOURCE_TOPIC, partition=p, start_offset=FIRST_ORIGIN_OFFSET,
                               end_offset=end, log_start_offset=FIRST_ORIGIN_OFFSET,
                               record_count=records_per_partition)
                for p in range(partitions)
            ],
            consumer_groups=ConsumerGroupsSnapshot(
                taken_at=now,
                groups=[
                    GroupSnapshot(
                        group_id=group,
                        offsets=[GroupOffset(topic=SOURCE_TOPIC, partition=p, offset=committed(index))
                                 for p in range(partitions)],
                    )
                    for index, group in enumerate(groups)
                ],
            ),
        ),
    )  # fmt: skip


def kafka_tool_command(*args: str) -> list[str]:
    return ["java", "-Xmx1g", "-cp", classpath(kafka_libs()), *args]


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        found = consumer.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)
    finally:
        consumer.close()
    return [item.offset for item in found]


def bench_bulk(
    cluster: LocalKafkaCluster,
    work: Path,
    *,
    groups: int,
    partitions: int,
    records_per_partition: int,
    parallelism: int,
) -> BulkResult:
    topic = "orders-restored"
    fill_seconds = fill(cluster, topic, records_per_partition * partitions, partitions)
    print(
        f"A: filled {partitions} x {records_per_partition:,} restored records in {fill_seconds:.0f}s",
        flush=True,
    )
    group_ids = [f"app-{index:04d}" for index in range(groups)]
    store = work / "store"
    write_group_snapshot(store, group_ids, partitions, records_per_partition)
    config = work / "offset-reset.yaml"
    config.write_text(
        json.dumps(
            {
                "backup_id": "bench",
                "storage": {"url": str(store)},
                "target": {"bootstrap_servers": [cluster.bootstrap_servers]},
                "restore": {"topic_mapping": {SOURCE_TOPIC: topic}},
                "offset_reset": {"snapshot_dir": str(work / "snapshots")},
            }
        )
    )  # JSON is YAML
    kbackup = [sys.executable, "-m", "kbackup"]
    python_startup = ProcessRun(*_run_measured([*kbackup, "--version"], cwd=REPO)[2:])

    plan_file = work / "reset-plan.json"
    out, _, seconds, rss = _run_measured(
        [*kbackup, "offset-reset", "plan", "-c", str(config), "--output", str(plan_file), "--json"], cwd=REPO
    )
    plan_run = ProcessRun(seconds, rss)
    plan = json.loads(out)
    rows = [(g["group_id"], r) for g in plan["groups"] for r in g["partitions"]]
    if len(rows) != groups * partitions or any(r["method"] != "binary-search" for _, r in rows):
        raise RuntimeError(f"unexpected plan: {len(rows)} rows")
    # Hole-free, in-order fill: the record of origin offset o sits at target offset o - FIRST_ORIGIN_OFFSET.
    for _, row in rows:
        committed = row["source_committed"][str(row["target_partition"])]
        expected = min(max(committed - FIRST_ORIGIN_OFFSET, 0), records_per_partition)
        if row["new_offset"] != expected:
            raise RuntimeError(f"plan row {row} is not at target offset {expected}")
    probes = sum(r["probes"] for _, r in rows)
    print(f"A: plan {plan_run.seconds:.1f}s, peak RSS {rss / 2**20:.0f} MiB", flush=True)

    out, _, seconds, rss = _run_measured(
        [*kbackup, "offset-reset", "execute", "--plan", str(plan_file), "-c", str(config),
         "--parallelism", str(parallelism), "--json"],
        cwd=REPO,
    )  # fmt: skip
    execute_run = ProcessRun(seconds, rss)
    changed = len(json.loads(out)["changes"])
    print(
        f"A: execute {execute_run.seconds:.1f}s, peak RSS {rss / 2**20:.0f} MiB, {changed} changed",
        flush=True,
    )

    # The reference: the same offsets for as many fresh groups, by Kafka's own tool in one invocation.
    csv_file = work / "reset-plan.csv"
    csv_file.write_text(
        "".join(f"ref-{g},{r['target_topic']},{r['target_partition']},{r['new_offset']}\n" for g, r in rows)
    )
    tool_args = [
        "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
        "--bootstrap-server", cluster.bootstrap_servers,
    ]  # fmt: skip
    startup = ProcessRun(*_run_measured(kafka_tool_command(*tool_args, "--list"))[2:])
    group_args = [arg for g in group_ids for arg in ("--group", f"ref-{g}")]
    _, _, seconds, rss = _run_measured(
        kafka_tool_command(
            *tool_args, "--reset-offsets", "--from-file", str(csv_file), *group_args, "--execute"
        )
    )
    tool_run = ProcessRun(seconds, rss)
    print(
        f"A: ConsumerGroupCommand {tool_run.seconds:.1f}s (its --list alone {startup.seconds:.1f}s)",
        flush=True,
    )
    # Both must really have committed the offsets: compare a sample of groups with the plan.
    planned = {(g, r["target_partition"]): r["new_offset"] for g, r in rows}
    for group in group_ids[:: max(1, groups // 20)]:
        for name in (group, f"ref-{group}"):
            found = committed_offsets(cluster.bootstrap_servers, name, topic, partitions)
            if found != [planned[(group, p)] for p in range(partitions)]:
                raise RuntimeError(f"group {name} is at {found}, not at the planned offsets")
    return BulkResult(
        groups=groups, partitions=partitions, records_per_partition=records_per_partition,
        parallelism=parallelism, fill_seconds=fill_seconds, plan=plan_run, execute=execute_run,
        kafka_tool=tool_run, kafka_tool_startup=startup, python_startup=python_startup,
        probes=probes, changed=changed,
    )  # fmt: skip


# --- B. binary search against a full scan ------------------------------------------------------------


class ReceivedBytes:
    """Bytes a librdkafka client received from the brokers, from its statistics callback."""

    def __init__(self) -> None:
        self.total = 0

    def __call__(self, stats_json: str) -> None:
        stats = json.loads(stats_json)
        self.total = sum(int(broker.get("rxbytes", 0)) for broker in stats.get("brokers", {}).values())

    def settle(self, consumer: Consumer) -> int:
        """Stop fetching and wait for a statistics report that covers everything received."""
        consumer.unassign()
        last = -1
        for _ in range(20):
            consumer.poll(0.15)
            if self.total == last:
                break
            last = self.total
        return self.total


@dataclass
class SearchRun:
    label: str
    committed: int
    position: int
    probes: int
    fetches: int
    received_bytes: int
    seconds: float


@dataclass
class ScanCrossing:
    records_read: int
    seconds: float
    #: Where a scan that stops at the first record with origin >= the threshold stops: that record's
    #: target offset, or one past the last restored record (the reference position).
    position: int


@dataclass
class SearchResultSet:
    """The search against the scan on one restored partition of one shape."""

    shape: str
    #: Restored records written (committed ones; the compacted shape's before its cleaner ran).
    records: int
    fill_seconds: float
    #: The partition's log end offset, and the records a read_committed reader sees below it.
    log_end: int = 0
    visible: int = 0
    first_origin: int = 0
    last_origin: int = 0
    #: Why the shape is not quite as described (empty when it is).
    note: str = ""
    searches: list[SearchRun] = field(default_factory=list)
    scan: dict[int, ScanCrossing] = field(default_factory=dict)
    scan_received_bytes: int = 0
    consumer_perf: ConsumerPerfResult | None = None

    @property
    def target_holes(self) -> int:
        """Offsets a read_committed reader does not see: markers, aborted and compacted-away records."""
        return self.log_end - self.visible

    @property
    def source_gaps(self) -> int:
        """Origin offsets between the first and the last that no visible record carries."""
        return self.last_origin - self.first_origin + 1 - self.visible if self.visible else 0


def binary_search_once(
    cluster: LocalKafkaCluster, topic: str, end: int, committed: int, label: str
) -> SearchRun:
    """One search as the planner makes it, with a new consumer and an empty probe cache."""
    received = ReceivedBytes()
    clients = KafkaClients(cluster.connection(), client_id="bench-reset-probe")
    reader = PartitionReader(
        clients,
        properties={**probe_consumer_properties(), "statistics.interval.ms": 100, "stats_cb": received},
    )
    try:
        probe = PartitionProbe(
            reader, topic=topic, partition=0, source_cluster=SOURCE_CLUSTER, end_offset=end
        )
        started = time.monotonic()
        result = search_position(lambda t: probe.first_at_or_after(t, SOURCE_TOPIC, 0), 0, end, committed)
        seconds = time.monotonic() - started
        received_bytes = received.settle(reader.consumer)
    finally:
        reader.close()
    return SearchRun(label, committed, result.position, result.probes, probe.fetches, received_bytes, seconds)


@dataclass
class ScanResult:
    crossings: dict[int, ScanCrossing]
    received_bytes: int
    #: Records read (every record a read_committed reader sees).
    visible: int


def full_scan(cluster: LocalKafkaCluster, topic: str, end: int, thresholds: list[int]) -> ScanResult:
    """Read the partition from its start, parsing every record's origin; where each threshold is crossed.

    A scan that stops at the first record whose origin offset is >= C finds the same position as the
    binary search; one pass over the partition gives that time for every C at once. It is also the
    truth the searches are checked against, whatever the partition's holes. The end is judged by the
    consumer's position: read_committed fetches that hold only aborted records or markers can report
    the partition's end early.
    """
    received = ReceivedBytes()
    consumer = KafkaClients(cluster.connection(), client_id="bench-reset-scan").consumer(
        properties={"isolation.level": "read_committed", "enable.partition.eof": True,
                    "statistics.interval.ms": 100, "stats_cb": received}
    )  # fmt: skip
    pending = sorted(thresholds)
    crossings: dict[int, ScanCrossing] = {}
    records_read = 0
    last_offset = -1
    partition = TopicPartition(topic, 0)
    deadline_secs = 300 + end / 5_000  # a scan slower than 5,000 records/s is taken as stuck
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        started = time.monotonic()
        done = False
        while not done:
            if time.monotonic() - started > deadline_secs:
                raise RuntimeError(f"the scan of {topic} did not reach offset {end} in {deadline_secs:.0f} s")
            # A batch returns when it is full or at its timeout, and crossings are timed when it
            # returns: a short timeout keeps a partial last batch (a partition whose visible records
            # are not a multiple of 10,000, or that ends in markers) from adding up to a second.
            # Any: the stubs type headers() as str values or a dict; it is a list of (str, bytes | None)
            messages: list[Any] = consumer.consume(num_messages=10_000, timeout=0.1)
            for message in messages:
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        # Where the end was seen (or the position, past trailing markers) must be the end.
                        reached = max(message.offset() or 0, consumer.position([partition])[0].offset)
                        done = reached >= end
                        if done:
                            break
                        continue
                    raise RuntimeError(error.str())
                origin = parse_origin(message.headers())
                records_read += 1
                last_offset = message.offset() or 0
                while pending and origin is not None and origin.offset >= pending[0]:
                    crossings[pending.pop(0)] = ScanCrossing(
                        records_read, time.monotonic() - started, last_offset
                    )
                if last_offset + 1 >= end:
                    done = True
                    break
            if not messages and consumer.position([partition])[0].offset >= end:
                done = True
        # Thresholds past the last record are reached only at the end of the partition.
        for threshold in pending:
            crossings[threshold] = ScanCrossing(records_read, time.monotonic() - started, last_offset + 1)
        received_bytes = received.settle(consumer)
    finally:
        consumer.close()
    return ScanResult(crossings, received_bytes, records_read)


def log_end_offset(cluster: LocalKafkaCluster, topic: str) -> int:
    consumer = KafkaClients(cluster.connection(), client_id="bench-reset-end").consumer()
    try:
        return int(consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)[1])
    finally:
        consumer.close()


def search_cases(first: int, last: int) -> list[tuple[str, int]]:
    """The committed source offsets searched for on a partition whose records' origins run from
    ``first`` to ``last``: its first record, quarters, its last record, and past its end."""
    span = last - first + 1
    return [
        ("first record", first),
        ("a quarter in", first + span // 4),
        ("middle", first + span // 2),
        ("three quarters in", first + 3 * span // 4),
        ("last record", last),
        ("past the end (all processed)", last + 1),
    ]


def bench_search(
    cluster: LocalKafkaCluster, shape: str, records: int, *, cleaner_wait: float
) -> SearchResultSet:
    """Fill one partition of ``shape``, then search, scan and run ConsumerPerformance on it."""
    topic = f"search-{shape}"
    if shape == "hole-free":
        made = fill_hole_free(cluster, topic, records)
    elif shape == "compacted":
        made = fill_compacted(cluster, topic, records, wait_secs=cleaner_wait)
    else:
        made = fill_transactional(cluster, topic, records)
    end = log_end_offset(cluster, topic)
    print(
        f"B [{shape}]: filled one partition with {records:,} restored records in {made.seconds:.0f}s "
        f"(log end {end:,}){'; ' + made.note if made.note else ''}",
        flush=True,
    )
    result = SearchResultSet(
        shape=shape, records=records, fill_seconds=made.seconds, log_end=end,
        first_origin=made.first_origin, last_origin=made.last_origin, note=made.note,
    )  # fmt: skip
    cases = search_cases(made.first_origin, made.last_origin)
    for label, committed in cases:
        run = binary_search_once(cluster, topic, end, committed, label)
        result.searches.append(run)
        print(
            f"B [{shape}]: search {label:30} {run.probes:3d} probes {run.fetches:3d} fetches "
            f"{run.received_bytes / 1024:8.0f} KiB {run.seconds * 1000:8.1f} ms",
            flush=True,
        )
    scan = full_scan(cluster, topic, end, [c for _, c in cases])
    result.scan, result.scan_received_bytes, result.visible = (
        scan.crossings,
        scan.received_bytes,
        scan.visible,
    )
    for run in result.searches:
        crossing = result.scan[run.committed]
        if run.position != crossing.position:
            raise RuntimeError(
                f"[{shape}] search for {run.committed} found {run.position}, the scan {crossing.position}"
            )
        if shape == "hole-free" and crossing.records_read != min(
            run.committed - FIRST_ORIGIN_OFFSET + 1, records
        ):
            raise RuntimeError(f"scan crossed {run.committed} after {crossing.records_read} records")
        print(
            f"B [{shape}]: scan to {run.label:30} {crossing.records_read:>12,} records "
            f"{crossing.seconds:8.2f} s",
            flush=True,
        )
    if shape != "compacted" and result.visible != records:
        raise RuntimeError(f"[{shape}] the scan read {result.visible:,} records, {records:,} were committed")
    result.consumer_perf = consumer_perf(
        cluster.bootstrap_servers, topic, result.visible, {"isolation.level": "read_committed"}
    )
    print(
        f"B [{shape}]: ConsumerPerformance {result.consumer_perf.records_per_sec:,.0f} records/s", flush=True
    )
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})  # must outlive its futures
    for future in admin.delete_topics([topic]).values():
        future.result(60)
    return result


def shape_made(search: SearchResultSet) -> str:
    """What the shape's partition turned out to hold; says so when its holes could not be made."""
    holes = f"{search.target_holes:,} target offsets without a visible record"
    gaps = f"{search.source_gaps:,} origin offsets without one"
    if search.shape == "hole-free":
        return "no holes" if not search.target_holes and not search.source_gaps else f"{holes}, {gaps}"
    missing = {
        "compacted": not search.target_holes or not search.source_gaps,
        "transactional": not search.target_holes,
    }[search.shape]
    made = f"{holes}, {gaps}" + (f" ({search.note})" if search.note else "")
    if missing:
        return f"**the shape could not be made as described**: {made}"
    return made


SHAPE_TEXT = {
    "hole-free": "origin and target offsets without gaps (the search's best case)",
    "compacted": (
        "a compacted source restored into a compacted target: origin offsets skip 0, 1 or 5 offsets "
        "(what the source's cleaner removed), and one record in five is superseded by a later one of "
        "its key, which the target's cleaner removes (the run waits for it)"
    ),
    "transactional": (
        "written in transactions of 20-2,000 records, one in five aborted and written again in the "
        "next (a killed run and its re-run): commit markers and aborted records between the records"
    ),
}


# --- report ------------------------------------------------------------------------------------------


def mib(value: int) -> str:
    return f"{value / 2**20:,.0f} MiB"


def search_report(searches: list[SearchResultSet]) -> list[str]:
    """The search-against-scan part: which shapes, then one table with a row per shape and offset."""
    records = sorted({search.records for search in searches})
    lines = [
        "### Binary search against a full scan: one partition of "
        + " / ".join(f"{count:,}" for count in records)
        + " records per shape",
        "",
        "100-byte values with the five origin headers, one source partition in origin order, in "
        f"{len(searches)} shape(s), each in its own partition, each row of the table its own:",
        "",
        *(
            f"- **{search.shape}**: {SHAPE_TEXT[search.shape]}. Made: {shape_made(search)}; log end "
            f"{search.log_end:,}, {search.visible:,} records visible to read_committed, filled in "
            f"{search.fill_seconds:.0f} s."
            for search in searches
        ),
        "",
        "Search: the planner's probe with an empty cache per row; bytes are what librdkafka received from "
        "the broker (its statistics, prefetch included). Scan: one read_committed read from the start, "
        "parsing every record's headers, timed where it reaches each position (nothing else per record, "
        "so it is as fast as a Python consumer gets); its bytes are its received total pro rata. Every "
        "search found the position the scan found (the run stops otherwise).",
        "",
        "| shape | committed source offset | target position | probes | fetches | received | search time "
        "| scan: records read | scan: received (pro rata) | scan time | scan / search |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for search in searches:
        for run in search.searches:
            crossing = search.scan[run.committed]
            lines.append(
                f"| {search.shape} | {run.label} ({run.committed:,}) | {run.position:,} | {run.probes} "
                f"| {run.fetches} | {run.received_bytes / 1024:,.0f} KiB | {run.seconds * 1000:,.0f} ms "
                f"| {crossing.records_read:,} "
                f"| {mib(search.scan_received_bytes * crossing.records_read // max(search.visible, 1))} "
                f"| {crossing.seconds:,.2f} s "
                f"| {crossing.seconds / run.seconds:,.0f}x |"
            )
    lines.append("")
    for search in searches:
        perf = search.consumer_perf
        scan_rate = search.visible / search.scan[max(search.scan)].seconds
        lines.append(
            f"{search.shape}: the full scan read the partition at {scan_rate:,.0f} records/s "
            f"({mib(search.scan_received_bytes)} received from the broker)"
            + (
                f"; Kafka's ConsumerPerformance (read_committed) read it at {perf.records_per_sec:,.0f} "
                f"records/s ({perf.fetch_records_per_sec:,.0f} without its group join), so the scan runs "
                f"at {scan_rate / perf.records_per_sec:.2f} of a plain JVM consumer, and even that consumer "
                f"would need {search.visible / perf.records_per_sec:.1f} s to reach the end."
                if perf is not None
                else "."
            )
        )
        lines.append("")
    return lines


def report(
    bulk: BulkResult,
    searches: list[SearchResultSet],
    machine_before: str,
    load_after: str,
    seconds: float,
    argv: str,
) -> str:
    tool = bulk.kafka_tool.seconds
    lines = [
        f"Measured {time.strftime('%Y-%m-%d')} with `python -m bench.bench_reset{argv}` on {machine_before} "
        f"at the start, {load_after} at the end; one local Kafka 4.3.1 broker (KRaft, loopback) on the "
        f"same machine; {seconds / 60:.0f} min in all.",
        "",
        f"### Plan and execute: {bulk.groups:,} groups x {bulk.partitions} partitions",
        "",
        f"Target topic: {bulk.partitions} partitions x {bulk.records_per_partition:,} restored records "
        f"(hole-free; filled in {bulk.fill_seconds:.0f} s); source offsets from a backup's group snapshot; "
        f"{bulk.groups * bulk.partitions:,} offsets planned, {bulk.changed:,} changed.",
        "",
        "| step | wall time | peak RSS | per group |",
        "|---|---:|---:|---:|",
        f"| `offset-reset plan` (binary search, {bulk.probes:,} probes in all) | {bulk.plan.seconds:.1f} s "
        f"| {mib(bulk.plan.peak_rss_bytes)} | {bulk.plan.seconds / bulk.groups * 1000:.1f} ms |",
        f"| `offset-reset execute --parallelism {bulk.parallelism}` | {bulk.execute.seconds:.1f} s "
        f"| {mib(bulk.execute.peak_rss_bytes)} | {bulk.execute.seconds / bulk.groups * 1000:.1f} ms |",
        f"| Kafka's `ConsumerGroupCommand --reset-offsets --from-file --execute` (one run, {bulk.groups:,} "
        f"`--group`) | {tool:.1f} s | {mib(bulk.kafka_tool.peak_rss_bytes)} "
        f"| {tool / bulk.groups * 1000:.1f} ms |",
        "",
        f"Ratios: execute / Kafka's tool **{bulk.execute.seconds / tool:.2f}**; "
        f"plan + execute / Kafka's tool {(bulk.plan.seconds + bulk.execute.seconds) / tool:.2f}. "
        "Wall times are whole processes: Python "
        f"start-up and imports (`python -m kbackup --version`) took {bulk.python_startup.seconds:.1f} s, "
        f"the JVM's start-up and one admin call (`ConsumerGroupCommand --list`) "
        f"{bulk.kafka_tool_startup.seconds:.1f} s. Peak RSS is the process's VmHWM.",
        "",
        *search_report(searches),
    ]
    return "\n".join(lines).rstrip()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    parser.add_argument("--groups", type=int, default=None, help="consumer groups (default 1,000)")
    parser.add_argument("--partitions", type=int, default=10)
    parser.add_argument("--records-per-partition", type=int, default=None, help="default 100,000")
    parser.add_argument(
        "--search-records", type=int, default=None, help="records per shape's partition (default 10,000,000)"
    )
    parser.add_argument(
        "--shapes", nargs="+", choices=SHAPES, default=list(SHAPES), help="search shapes (default: all)"
    )
    parser.add_argument(
        "--cleaner-wait",
        type=float,
        default=None,
        help="seconds to wait for the target's cleaner on the compacted shape (default 900; --quick 120)",
    )
    parser.add_argument("--parallelism", type=int, default=16, help="execute's --parallelism")
    parser.add_argument("--write-docs", action="store_true", help="write the results into docs/benchmarks.md")
    args = parser.parse_args()
    refuse_smoke_figures_in_docs(args)
    groups = args.groups or (50 if args.quick else 1_000)
    per_partition = args.records_per_partition or (2_000 if args.quick else 100_000)
    search_records = args.search_records or (200_000 if args.quick else 10_000_000)
    cleaner_wait = args.cleaner_wait or (120.0 if args.quick else 900.0)
    argv = "".join(f" {arg}" for arg in sys.argv[1:] if arg != "--write-docs")
    before = machine()
    print(f"machine: {before}", flush=True)
    started = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="kbackup-bench-reset-") as scratch,
        local_clusters(
            ["bench"],
            Path(scratch) / "kafka",
            extra_properties={"num.io.threads": "4", "num.network.threads": "2"},
        ) as (cluster,),
    ):
        work = Path(scratch)
        bulk = bench_bulk(
            cluster, work, groups=groups, partitions=args.partitions,
            records_per_partition=per_partition, parallelism=args.parallelism,
        )  # fmt: skip
        searches = [
            bench_search(cluster, shape, search_records, cleaner_wait=cleaner_wait) for shape in args.shapes
        ]
    text = report(bulk, searches, before, load_average(), time.monotonic() - started, argv)
    print("\n" + text)
    if args.write_docs:
        replace_section(DOCS, START, END, f"## Offset reset\n\n{text}")
        print(f"\nwritten to {DOCS}")


if __name__ == "__main__":
    main()
