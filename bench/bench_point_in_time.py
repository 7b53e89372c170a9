"""Point in time: a lagging group put back where it was at a moment, by Kafka's ``--to-datetime``
and by ``offset-reset --as-of --in-place``, both measured in the same run against the group's own
record of its commits.

    .venv/bin/python -m bench.bench_point_in_time [--quick] [--seconds 60] [--write-docs]

Starts one throwaway local Kafka broker and three topics of 2 partitions, each written at
``--rate`` records a second per topic for ``--seconds`` seconds:

- ``pit-create``: CreateTime (the producer stamps each record);
- ``pit-log-append``: ``message.timestamp.type=LogAppendTime`` (the broker stamps it);
- ``pit-transactional``: transactions of 50 records, every fifth aborted, so the log holds commit
  markers and aborted records.

Three consumer groups read all three topics (read_committed) and process a record only once it is
``lag`` seconds old (0, 5 and 20 s: a group at the head and two that lag as a slow deploy does),
committing what they processed every half second. The benchmark keeps its own record of every
commit (sent, acknowledged, offsets): the truth of where each group was at any moment. Meanwhile
``kafka-backup backup --follow`` runs with ``backup.group_snapshot_interval`` (``--interval``).

After the run (groups closed, so both tools may reset them), for several moments spread over the
run, each tool is asked where each group was then:

- Kafka's ``ConsumerGroupCommand --reset-offsets --to-datetime T --dry-run`` (the first record
  stamped at or after T: where the data was);
- ``kafka-backup offset-reset plan --as-of T --in-place`` (the group's committed position of
  then, from the backup's group history).

Each answer is compared with the truth, the group's last commit sent by T, in records a
read_committed consumer delivers (markers and aborted records are not counted): records skipped
(the answer is past the truth: never processed again) and records re-processed (before it).

Prints the machine; ``--write-docs`` replaces the section between ``<!-- point-in-time:start -->``
and ``<!-- point-in-time:end -->`` of docs/benchmarks.md (appending it when absent).
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

from bench._perf import create_topic, java_tool, refuse_smoke_figures_in_docs, replace_section
from bench._restore_perf import REPO
from bench.bench_reset import load_average, machine
from kbackup.core.times import iso_utc
from kbackup.sandbox.jars import KAFKA_VERSION
from kbackup.sandbox.kafka import LocalKafkaCluster, local_clusters

DOCS = REPO / "docs" / "benchmarks.md"
START, END = "<!-- point-in-time:start -->", "<!-- point-in-time:end -->"
PARTITIONS = 2
#: Topic name -> its config and whether it is written in transactions.
TOPICS: dict[str, tuple[dict[str, str], bool]] = {
    "pit-create": ({}, False),
    "pit-log-append": ({"message.timestamp.type": "LogAppendTime"}, False),
    "pit-transactional": ({}, True),
}
#: Group name -> seconds a record must be old before the group processes it.
GROUPS: dict[str, float] = {"pit-head": 0.0, "pit-lag-5s": 5.0, "pit-lag-20s": 20.0}
COMMIT_EVERY_SECS = 0.5
TRANSACTION_RECORDS = 50
ABORT_EVERY = 5
BACKUP_ID = "pit"

Position = dict[tuple[str, int], int]


def where(message: Message) -> tuple[str, int, int]:
    """A delivered record's topic, partition and offset (never None on a record without error)."""
    topic, partition, offset = message.topic(), message.partition(), message.offset()
    if topic is None or partition is None or offset is None:
        raise RuntimeError(f"a record without its place: {message}")
    return topic, partition, offset


@dataclass(frozen=True)
class Commit:
    sent: float
    acknowledged: float
    offsets: Position


@dataclass
class GroupRun:
    """One consumer group processing ``lag`` seconds behind the head, and its commits."""

    name: str
    lag: float
    bootstrap: str
    commits: list[Commit] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": self.name,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
            }
        )
        consumer.subscribe(list(TOPICS))
        processed: Position = {}
        committed: Position = {}
        last_commit = time.time()
        held = None
        try:
            while not self.stop.is_set():
                if held is None:
                    message = consumer.poll(0.1)
                    if message is not None and message.error() is None:
                        held = message
                if held is not None and time.time() >= held.timestamp()[1] / 1000 + self.lag:
                    topic, partition, offset = where(held)
                    processed[(topic, partition)] = offset + 1
                    held = None
                elif held is not None:
                    time.sleep(0.01)
                if time.time() - last_commit >= COMMIT_EVERY_SECS and processed != committed:
                    last_commit = self.commit(consumer, processed)
                    committed = dict(processed)
        finally:
            consumer.close()

    def commit(self, consumer: Consumer, processed: Position) -> float:
        offsets = [TopicPartition(t, p, o) for (t, p), o in processed.items()]
        sent = time.time()
        consumer.commit(offsets=offsets, asynchronous=False)
        acknowledged = time.time()
        self.commits.append(Commit(sent, acknowledged, dict(processed)))
        return acknowledged

    def at(self, moment: float) -> Position:
        """Where the group was at ``moment``: its last commit sent by then."""
        position: Position = {}
        for commit in self.commits:
            if commit.sent > moment:
                break
            position.update(commit.offsets)
        return position


def produce(bootstrap: str, rate: int, seconds: float, stop: threading.Event) -> dict[str, int]:
    """Write every topic at ``rate`` records a second until ``seconds`` pass; records written."""
    plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    transactional = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": "pit-bench", "linger.ms": 5}
    )
    transactional.init_transactions(30)
    written = dict.fromkeys(TOPICS, 0)
    started = time.time()
    sent = 0
    while not stop.is_set() and time.time() - started < seconds:
        due = int((time.time() - started) * rate)
        while sent < due:
            batch = min(TRANSACTION_RECORDS, due - sent)
            for topic, (_config, in_transactions) in TOPICS.items():
                if in_transactions:
                    transactional.begin_transaction()
                    for i in range(batch):
                        transactional.produce(topic, b"v" * 100, partition=(sent + i) % PARTITIONS)
                    aborted = (sent // TRANSACTION_RECORDS) % ABORT_EVERY == ABORT_EVERY - 1
                    if aborted:
                        transactional.abort_transaction(30)
                    else:
                        transactional.commit_transaction(30)
                        written[topic] += batch
                else:
                    for i in range(batch):
                        plain.produce(topic, b"v" * 100, partition=(sent + i) % PARTITIONS)
                    written[topic] += batch
            plain.poll(0)
            sent += batch
        time.sleep(0.01)
    plain.flush(30)
    return written


@dataclass
class Delivered:
    """The offsets a read_committed consumer is given from one partition, and their timestamps."""

    offsets: list[int] = field(default_factory=list)
    stamps_ms: list[int] = field(default_factory=list)

    def between(self, low: int, high: int) -> int:
        """Records given from offset ``low`` up to (not including) ``high``."""
        return bisect.bisect_left(self.offsets, high) - bisect.bisect_left(self.offsets, low)

    def head_at(self, moment: float) -> int:
        """The offset after the last record stamped by ``moment`` (stamps rise: one writer)."""
        index = bisect.bisect_right(self.stamps_ms, int(moment * 1000))
        return self.offsets[index] if index < len(self.offsets) else self.offsets[-1] + 1


def delivered_records(bootstrap: str) -> dict[tuple[str, int], Delivered]:
    """What a read_committed consumer is given from every partition (for counting records)."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "pit-bench-reader",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
        }
    )
    partitions = [TopicPartition(t, p, 0) for t in TOPICS for p in range(PARTITIONS)]
    consumer.assign(partitions)
    delivered = {(t, p): Delivered() for t in TOPICS for p in range(PARTITIONS)}
    at_end: set[tuple[str, int]] = set()
    try:
        while len(at_end) < len(partitions):
            message = consumer.poll(1.0)
            if message is None:
                continue
            topic, partition, offset = where(message)
            key = (topic, partition)
            error = message.error()
            if error is not None:
                if error.code() == KafkaError._PARTITION_EOF:
                    at_end.add(key)
                continue
            delivered[key].offsets.append(offset)
            delivered[key].stamps_ms.append(message.timestamp()[1])
    finally:
        consumer.close()
    return delivered


def kafka_to_datetime(bootstrap: str, group: str, moment: float) -> Position:
    """Kafka's own answer: ConsumerGroupCommand --reset-offsets --to-datetime --dry-run."""
    args = ["--bootstrap-server", bootstrap, "--group", group, "--reset-offsets", "--dry-run"]
    args += ["--to-datetime", iso_utc(moment).replace("Z", "+00:00")]
    for topic in TOPICS:
        args += ["--topic", topic]
    out = java_tool("org.apache.kafka.tools.consumer.group.ConsumerGroupCommand", *args)
    position: Position = {}
    for line in out.splitlines():
        words = line.split()
        if len(words) == 4 and words[0] == group and words[2].isdigit():
            position[(words[1], int(words[2]))] = int(words[3])
    if len(position) != len(TOPICS) * PARTITIONS:
        raise RuntimeError(f"ConsumerGroupCommand answered {position} for {group}:\n{out}")
    return position


def ours_as_of(bootstrap: str, store: Path, group: str, moment: float, scratch: Path) -> Position:
    """kafka-backup's answer: offset-reset plan --as-of --in-place (the plan's new offsets)."""
    plan_file = scratch / f"{group}-{moment:.3f}.json"
    command = [sys.executable, "-m", "kbackup", "offset-reset", "plan", "-b", bootstrap, "-p", str(store)]
    command += ["--backup-id", BACKUP_ID, "-g", group, "--as-of", iso_utc(moment), "--in-place"]
    command += ["--json", "--output", str(plan_file)]
    result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=300)
    if result.returncode != 0:
        raise RuntimeError(f"offset-reset plan exited {result.returncode}: {result.stderr}")
    plan = json.loads(plan_file.read_text())
    [planned] = plan["groups"]
    return {
        (row["target_topic"], row["target_partition"]): row["new_offset"] for row in planned["partitions"]
    }


@dataclass
class Tally:
    """Records skipped and re-processed by one tool for one group and topic, over every moment."""

    skipped: list[int] = field(default_factory=list)
    reprocessed: list[int] = field(default_factory=list)

    def add(
        self, answer: Position, truth: Position, topic: str, delivered: dict[tuple[str, int], Delivered]
    ) -> None:
        skipped = reprocessed = 0
        for partition in range(PARTITIONS):
            key = (topic, partition)
            given, was = answer[key], truth.get(key, 0)
            skipped += delivered[key].between(was, given) if given > was else 0
            reprocessed += delivered[key].between(given, was) if given < was else 0
        self.skipped.append(skipped)
        self.reprocessed.append(reprocessed)

    def cell(self) -> str:
        return f"{sum(self.skipped) / len(self.skipped):,.0f} / {max(self.skipped):,}"

    def reprocessed_cell(self) -> str:
        return f"{sum(self.reprocessed) / len(self.reprocessed):,.0f} / {max(self.reprocessed):,}"


@dataclass
class Outcome:
    moments: list[float]
    written: dict[str, int]
    kafka: dict[tuple[str, str], Tally]
    ours: dict[tuple[str, str], Tally]
    lag_records: dict[tuple[str, str], list[int]]
    kafka_seconds: float
    ours_seconds: float
    interval: float
    rate: int
    seconds: float


def run_benchmark(cluster: LocalKafkaCluster, work: Path, args: argparse.Namespace) -> Outcome:
    bootstrap = cluster.bootstrap_servers
    for topic, (config, _in_transactions) in TOPICS.items():
        create_topic(bootstrap, topic, PARTITIONS, config)
    store = work / "store"
    config_path = work / "backup.json"
    config_path.write_text(
        json.dumps(
            {
                "backup_id": BACKUP_ID,
                "source": {"bootstrap_servers": [bootstrap], "topics": {"include": list(TOPICS)}},
                "storage": {"url": str(store)},
                "backup": {
                    "consumer_group_snapshot": True,
                    "group_snapshot_interval": f"{args.interval:g}s",
                    "checkpoint_interval_secs": 5,
                },
            }
        )
    )
    backup = subprocess.Popen(
        [sys.executable, "-m", "kbackup", "backup", "-c", str(config_path), "--follow", "--json"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "KBACKUP_NO_PROGRESS": "1"},
    )
    groups = [GroupRun(name, lag, bootstrap) for name, lag in GROUPS.items()]
    threads = [threading.Thread(target=group.run, daemon=True) for group in groups]
    stop = threading.Event()
    try:
        for thread in threads:
            thread.start()
        started = time.time()
        written = produce(bootstrap, args.rate, args.seconds, stop)
        finished = time.time()
        time.sleep(args.interval * 2 + 6)  # a reading and a checkpoint after the last commits
        for group in groups:
            group.stop.set()
        for thread in threads:
            thread.join(60)
        backup.send_signal(signal.SIGTERM)
        _, stderr = backup.communicate(timeout=120)
    finally:
        stop.set()
        if backup.poll() is None:
            backup.kill()
    if backup.returncode != 0:
        raise RuntimeError(f"backup --follow exited {backup.returncode}: {stderr[-2000:]}")
    # Moments spread over the run, past the slowest group's first commits and a snapshot's settling.
    first = started + max(GROUPS.values()) + 5
    count = args.moments
    moments = [first + (finished - first) * (i + 0.5) / count for i in range(count)]
    delivered = delivered_records(bootstrap)
    kafka: dict[tuple[str, str], Tally] = {}
    ours: dict[tuple[str, str], Tally] = {}
    lag_records: dict[tuple[str, str], list[int]] = {}
    kafka_seconds = ours_seconds = 0.0
    for moment in moments:
        for group in groups:
            truth = group.at(moment)
            clock = time.monotonic()
            by_kafka = kafka_to_datetime(bootstrap, group.name, moment)
            kafka_seconds += time.monotonic() - clock
            clock = time.monotonic()
            by_us = ours_as_of(bootstrap, store, group.name, moment, work)
            ours_seconds += time.monotonic() - clock
            for topic in TOPICS:
                kafka.setdefault((group.name, topic), Tally()).add(by_kafka, truth, topic, delivered)
                ours.setdefault((group.name, topic), Tally()).add(by_us, truth, topic, delivered)
                lag = sum(
                    delivered[(topic, p)].between(
                        truth.get((topic, p), 0), delivered[(topic, p)].head_at(moment)
                    )
                    for p in range(PARTITIONS)
                )
                lag_records.setdefault((group.name, topic), []).append(lag)
            print(f"{iso_utc(moment)} {group.name}: kafka {by_kafka} ours {by_us} truth {truth}", flush=True)
    return Outcome(
        moments, written, kafka, ours, lag_records, kafka_seconds, ours_seconds,
        args.interval, args.rate, args.seconds,
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="a short run (a smoke run)")
    parser.add_argument("--seconds", type=float, default=None, help="seconds of writing (default 60)")
    parser.add_argument("--rate", type=int, default=500, help="records a second per topic")
    parser.add_argument("--interval", type=float, default=2.0, help="backup.group_snapshot_interval, seconds")
    parser.add_argument("--moments", type=int, default=5, help="moments asked about")
    parser.add_argument("--write-docs", action="store_true", help="write the results into docs/benchmarks.md")
    args = parser.parse_args()
    refuse_smoke_figures_in_docs(args)
    args.seconds = args.seconds or (35.0 if args.quick else 60.0)
    before = machine()
    print(f"machine: {before}", flush=True)
    started = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="kbackup-bench-pit-") as scratch,
        local_clusters(["pit"], Path(scratch) / "kafka") as (cluster,),
    ):
        outcome = run_benchmark(cluster, Path(scratch), args)
    argv = "".join(f" {arg}" for arg in sys.argv[1:] if arg != "--write-docs")
    text = report(outcome, before, load_average(), time.monotonic() - started, argv)
    print("\n" + text)
    if args.write_docs:
        replace_section(DOCS, START, END, text)
        print(f"\nwritten to {DOCS}")


def report(outcome: Outcome, before: str, after: str, seconds: float, argv: str) -> str:
    lines = [
        "## Point in time: `--to-datetime` against `--as-of`",
        "",
        f"Measured {time.strftime('%Y-%m-%d')} with `python -m bench.bench_point_in_time{argv}` on {before}; "
        f"load average after: {after}; one local Kafka {KAFKA_VERSION} broker; {seconds:.0f} s in all.",
        "",
        f"Three topics of {PARTITIONS} partitions written at {outcome.rate:,} records/s each for "
        f"{outcome.seconds:g} s ("
        + ", ".join(f"{topic}: {count:,} committed records" for topic, count in outcome.written.items())
        + f"; `pit-transactional` in transactions of {TRANSACTION_RECORDS}, every {ABORT_EVERY}th aborted; "
        "`pit-log-append` stamped by the broker). Three groups read all three (read_committed), each "
        "processing a record once it is 0, 5 or 20 s old and committing every "
        f"{COMMIT_EVERY_SECS:g} s, while `backup --follow` ran with `group_snapshot_interval: "
        f"{outcome.interval:g}s`. Then, for {len(outcome.moments)} moments spread over the run, both "
        "tools were asked where each group was: Kafka's `ConsumerGroupCommand --reset-offsets "
        "--to-datetime T --dry-run` and `kafka-backup offset-reset plan --as-of T --in-place`. "
        "Truth: the group's last commit sent by T, from the benchmark's own record of every commit. "
        "Records are counted as a read_committed consumer is given them (markers and aborted records "
        "not counted), summed over both partitions; mean / max over the moments.",
        "",
        "| group | topic | its lag at T (records) | `--to-datetime` skipped | re-processed | "
        "`--as-of` skipped | re-processed |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for (group, topic), tally in outcome.kafka.items():
        ours = outcome.ours[(group, topic)]
        lags = outcome.lag_records[(group, topic)]
        lines.append(
            f"| {group} | {topic} | {sum(lags) / len(lags):,.0f} / {max(lags):,} | {tally.cell()} | "
            f"{tally.reprocessed_cell()} | {ours.cell()} | {ours.reprocessed_cell()} |"
        )
    runs = len(outcome.moments) * len(GROUPS)
    lines += [
        "",
        f"Time per answer (mean of {runs}): `ConsumerGroupCommand` {outcome.kafka_seconds / runs:.1f} s "
        f"(a JVM start each), `offset-reset plan` {outcome.ours_seconds / runs:.1f} s (a Python start "
        "each, reading the backup's group history).",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
