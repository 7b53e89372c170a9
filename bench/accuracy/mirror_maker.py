"""The real MirrorMaker 2 of the brokers' Kafka version, run between the study's two clusters.

Its jars (``org.apache.kafka:connect-mirror`` and its runtime closure) come
from Maven Central through the sandbox's resolver, into the same cache as the
brokers'. The dedicated driver (``org.apache.kafka.connect.mirror.MirrorMaker``)
replicates the study's topics from the source into ``<alias>.<topic>`` on the
target (the default replication policy), with checkpoints and group-offset sync
on. The study reads:

- each group's translated offset: the group's committed offset on the target,
  written there by MirrorMaker 2's group-offset sync (``translated_positions``);
- the mirrored records with their source offsets: every value starts with its
  sequence number in its source partition, and the source ledger of
  ``bench.accuracy.data`` says where each sequence number landed
  (``read_mirrored``);
- the offset syncs it emitted, read back from ``mm2-offset-syncs.<target
  alias>.internal`` on the source (``read_offset_syncs``), and the syncs its
  writer rule queued (``queued_syncs``): a queued sync that never reached the
  topic was superseded in the writer's pending map while
  ``MAX_OUTSTANDING_OFFSET_SYNCS`` (10) were in flight, i.e. dropped.

Settings other than Kafka's defaults only shorten the waits (intervals of 1 s
instead of 60 s to 10 min) and fit one broker per cluster (replication factor
1); ``offset.lag.max`` (100) and ``tasks.max`` (1) keep their defaults. Offset
flushes every 5 s (default 60 s) promote the delayed syncs sooner; a group at
the head needs one of those to translate exactly, and gets it either way once
the flush runs.
"""

from __future__ import annotations

import struct
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.accuracy.measure import ReadBackBuilder, RestoredPartition, ledger_truth
from kbackup.core.config import KafkaConnection
from kbackup.core.kafka import KafkaClients, PartitionReader, open_admin
from kbackup.core.types import TopicPartitionKey
from kbackup.sandbox.jars import LOG4J_VERSION, MavenArtifact, classpath, resolve_jars
from kbackup.sandbox.kafka import LOG4J2_PROPERTIES, log_tails, stop_process

DRIVER = "org.apache.kafka.connect.mirror.MirrorMaker"
#: Maven Central serves no connect-mirror 4.4.0 (the brokers' default version): MirrorMaker 2 runs
#: the newest release it has, a Kafka client like any other to the brokers.
MIRROR_MAKER_VERSION = "4.3.1"
#: MirrorSourceConfig's default: a sync is due once the translation would be this many records stale.
OFFSET_LAG_MAX = 100

#: MirrorMaker 2's internal topics (one broker per cluster here: replication factor 1).
INTERNAL_TOPICS = (
    "offset-syncs.topic",
    "checkpoints.topic",
    "heartbeats.topic",
    "offset.storage",
    "status.storage",
    "config.storage",
)

#: (group id, target topic, target partition) -> position (None: untranslated).
Positions = dict[tuple[str, str, int], int | None]


def mirror_maker_libs(version: str = MIRROR_MAKER_VERSION) -> Path:
    """connect-mirror and its runtime closure, with the brokers' SLF4J binding."""
    return resolve_jars(
        "mirror-maker",
        [
            MavenArtifact("org.apache.kafka", "connect-mirror", version),
            MavenArtifact("org.apache.logging.log4j", "log4j-slf4j-impl", LOG4J_VERSION),
        ],
    )


def mirror_properties(
    alias: str, target_alias: str, source: str, target: str, topics: Sequence[str], groups: str
) -> dict[str, str]:
    """The driver's configuration for one flow ``alias -> target_alias``."""
    flow = f"{alias}->{target_alias}"
    return {
        "clusters": f"{alias}, {target_alias}",
        f"{alias}.bootstrap.servers": source,
        f"{target_alias}.bootstrap.servers": target,
        f"{flow}.enabled": "true",
        f"{target_alias}->{alias}.enabled": "false",
        f"{flow}.topics": ", ".join(topics),
        f"{flow}.groups": groups,
        "sync.group.offsets.enabled": "true",
        "emit.checkpoints.enabled": "true",
        "emit.checkpoints.interval.seconds": "1",
        "sync.group.offsets.interval.seconds": "1",
        "refresh.topics.interval.seconds": "1",
        "refresh.groups.interval.seconds": "1",
        "offset.flush.interval.ms": "5000",
        "emit.heartbeats.enabled": "false",
        "sync.topic.acls.enabled": "false",
        "dedicated.mode.enable.internal.rest": "false",
        **{f"{name}.replication.factor": "1" for name in INTERNAL_TOPICS},
        "replication.factor": "1",
    }


@dataclass
class MirrorMaker2:
    """One dedicated MirrorMaker 2 process replicating ``topics`` from ``source`` to ``target``."""

    alias: str
    source: KafkaConnection
    target: KafkaConnection
    topics: Sequence[str]
    work_dir: Path
    groups: str = ".*"
    heap: str = "1g"
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0

    @property
    def target_alias(self) -> str:
        return f"{self.alias}-target"

    @property
    def offset_syncs_topic(self) -> str:
        return f"mm2-offset-syncs.{self.target_alias}.internal"

    def mirrored(self, topic: str) -> str:
        return f"{self.alias}.{topic}"

    @property
    def log_file(self) -> Path:
        return self.work_dir / "mirror-maker.log"

    def start(self, timeout: float = 180.0) -> None:
        """Start the driver and wait until it has created every mirrored topic on the target."""
        self.work_dir.mkdir(parents=True, exist_ok=True)
        config = self.work_dir / "mm2.properties"
        properties = mirror_properties(
            self.alias, self.target_alias, ",".join(self.source.bootstrap_servers),
            ",".join(self.target.bootstrap_servers), self.topics, self.groups,
        )  # fmt: skip
        config.write_text("".join(f"{key} = {value}\n" for key, value in properties.items()))
        log4j = self.work_dir / "log4j2.properties"
        log4j.write_text(LOG4J2_PROPERTIES.format(log_file=self.log_file, level="INFO"))
        stdout = (self.work_dir / "stdout.log").open("ab")
        command = [
            "java", f"-Xmx{self.heap}", "-XX:+UseG1GC", f"-Dlog4j2.configurationFile={log4j}",
            "-cp", classpath(mirror_maker_libs()), DRIVER, str(config),
        ]  # fmt: skip
        self.process = subprocess.Popen(
            command, stdout=stdout, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.work_dir
        )
        stdout.close()
        self.started_at = time.monotonic()
        wanted = {self.mirrored(topic) for topic in self.topics}
        admin = open_admin(self.target)
        deadline = time.monotonic() + timeout
        while not wanted <= set(admin.metadata().topics):
            self._check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"MirrorMaker 2 ({self.alias}) did not create {sorted(wanted)}:\n{self.tail()}"
                )
            time.sleep(1.0)

    def _check_alive(self) -> None:
        if self.process is None or self.process.poll() is not None:
            raise RuntimeError(f"MirrorMaker 2 ({self.alias}) exited:\n{self.tail()}")

    def stop(self, timeout: float = 60.0) -> None:
        process, self.process = self.process, None
        stop_process(process, timeout)

    def tail(self, lines: int = 30) -> str:
        return log_tails([self.work_dir / "stdout.log", self.log_file], lines)

    def wait_replicated(
        self, minimum: Mapping[TopicPartitionKey, int], *, quiet_secs: float = 15.0, timeout: float = 1800.0
    ) -> float:
        """Wait until every mirrored partition holds at least ``minimum`` records and stopped growing.

        ``minimum`` is keyed by source partition. Returns the seconds since the
        driver started.
        """
        admin = open_admin(self.target)
        keys = [(self.mirrored(topic), partition) for topic, partition in minimum]
        last: dict[TopicPartitionKey, int] = {}
        changed = time.monotonic()
        deadline = time.monotonic() + timeout
        while True:
            self._check_alive()
            ranges = admin.partition_ranges(keys)
            ends = {key: ranges[key].log_end for key in keys}
            if ends != last:
                last, changed = ends, time.monotonic()
            enough = all(ends[(self.mirrored(t), p)] >= count for (t, p), count in minimum.items())
            if enough and time.monotonic() - changed >= quiet_secs:
                return changed - self.started_at
            if time.monotonic() > deadline:
                raise RuntimeError(f"MirrorMaker 2 ({self.alias}) did not replicate in time: {ends}")
            time.sleep(1.0)

    def translated_positions(
        self, groups: Mapping[str, Iterable[TopicPartitionKey]], *, quiet_secs: float = 30.0,
        timeout: float = 900.0,
    ) -> Positions:  # fmt: skip
        """Each group's committed offsets on the target's mirrored partitions, once they stop moving.

        Waits until every (group, partition) has an offset, or until none moved
        for ``quiet_secs`` (MirrorMaker 2 writes no offset where it cannot
        translate: those stay None).
        """
        admin = open_admin(self.target)
        wanted = {
            group: [(self.mirrored(topic), partition) for topic, partition in keys]
            for group, keys in groups.items()
        }
        last: Positions = {}
        changed = time.monotonic()
        deadline = time.monotonic() + timeout
        while True:
            self._check_alive()
            committed = admin.committed_offsets_of(list(wanted))
            positions: Positions = {
                (group, topic, partition): committed.get(group, {}).get((topic, partition))
                for group, keys in wanted.items()
                for topic, partition in keys
            }
            if positions != last:
                last, changed = positions, time.monotonic()
            complete = all(value is not None for value in positions.values())
            if (complete and time.monotonic() - changed >= 5.0) or time.monotonic() - changed >= quiet_secs:
                return positions
            if time.monotonic() > deadline:
                return positions
            time.sleep(1.0)


def parse_offset_sync(key: bytes, value: bytes) -> tuple[str, int, int, int]:
    """(topic, partition, upstream offset, downstream offset) of one record of the offset-syncs topic.

    Kafka's OffsetSync: the key is a STRING (int16 length, UTF-8) then an INT32,
    the value two INT64, all big-endian.
    """
    (length,) = struct.unpack_from(">h", key, 0)
    topic = key[2 : 2 + length].decode()
    (partition,) = struct.unpack_from(">i", key, 2 + length)
    upstream, downstream = struct.unpack_from(">qq", value, 0)
    return topic, partition, upstream, downstream


def read_offset_syncs(source: KafkaConnection, topic: str) -> dict[TopicPartitionKey, list[tuple[int, int]]]:
    """Every offset sync in the offset-syncs topic (one partition), by mirrored source partition."""
    span = open_admin(source).partition_ranges([(topic, 0)])[(topic, 0)]
    syncs: dict[TopicPartitionKey, list[tuple[int, int]]] = {}
    with PartitionReader(KafkaClients(source, client_id="kafka-backup-accuracy-syncs")) as reader:
        for batch in reader.batches(topic, 0, span.log_start, span.log_end, timeout_secs=300):
            for message in batch:
                key, value = message.key(), message.value()
                if key is None or value is None:
                    continue
                name, partition, upstream, downstream = parse_offset_sync(key, value)
                syncs.setdefault((name, partition), []).append((upstream, downstream))
    return syncs


def queued_syncs(
    pairs: Iterable[tuple[int, int]], offset_lag_max: int = OFFSET_LAG_MAX
) -> list[tuple[int, int]]:
    """The syncs MirrorMaker 2's writer queues for immediate sending, replicated record by record.

    Kafka 4.3.1's ``OffsetSyncWriter.PartitionState.update``: a sync is due for
    the first record of the task's life, when the translation would be
    ``offset.lag.max`` stale, when the upstream offsets skip (markers, aborted
    or compacted records), or when the downstream offset goes back. Records in
    between are only kept as the partition's delayed sync, sent at the next
    offset flush.
    """
    queued = []
    previous_upstream = previous_downstream = last_sync_downstream = -1
    for upstream, downstream in pairs:
        if (
            last_sync_downstream == -1
            or downstream - (last_sync_downstream + 1) >= offset_lag_max
            or upstream - previous_upstream != 1
            or downstream < previous_downstream
        ):
            last_sync_downstream = downstream
            queued.append((upstream, downstream))
        previous_upstream, previous_downstream = upstream, downstream
    return queued


@dataclass(frozen=True)
class SyncCounts:
    """Offset syncs of one mirrored partition: queued by the writer's rule, emitted, dropped, delayed."""

    queued: int
    emitted: int
    #: Queued but never written: superseded while the writer had its maximum in flight.
    dropped: int
    #: Written but not queued by the rule: delayed syncs promoted at an offset flush.
    delayed: int


def count_syncs(pairs: Iterable[tuple[int, int]], emitted: Sequence[tuple[int, int]]) -> SyncCounts:
    """Compare the writer rule's queue with what reached the topic, by upstream offset."""
    queued = {upstream for upstream, _ in queued_syncs(pairs)}
    written = {upstream for upstream, _ in emitted}
    return SyncCounts(
        queued=len(queued), emitted=len(emitted), dropped=len(queued - written), delayed=len(written - queued)
    )


def _header_offset(headers: object, name: str) -> int:
    for key, value in headers if isinstance(headers, list) else []:
        if key == name and value is not None and len(value) == 8:
            return int(struct.unpack("<q", value)[0])
    raise RuntimeError(f"a copied record without its {name} header")


def read_mirrored(
    target: KafkaConnection,
    mirrored: Mapping[TopicPartitionKey, TopicPartitionKey],
    ledger: Mapping[TopicPartitionKey, np.ndarray],
    timeout: float = 1800.0,
    *,
    origin_header: str | None = None,
) -> dict[TopicPartitionKey, RestoredPartition]:
    """Every record of the copied partitions, with the source record its value says it is.

    ``mirrored`` maps each target partition to its source partition (the copies
    keep the partition number); ``ledger`` gives, per source partition, the
    source offset of each sequence number: each record is placed as this
    project's restores are (``bench.accuracy.measure.ledger_truth``). With
    ``origin_header`` the source offset is that header's (an 8-byte
    little-endian integer) instead, and the partition the copy's.
    """
    keys = sorted(mirrored)
    ranges = open_admin(target).partition_ranges(keys)
    result = {}
    deadline = time.monotonic() + timeout
    with PartitionReader(KafkaClients(target, client_id="kafka-backup-accuracy-mirrored")) as reader:
        for key in keys:
            source_key = mirrored[key]
            where = f"{key[0]}/{key[1]}"
            builder = ReadBackBuilder(where)
            offsets: list[int] = []
            header_offsets: list[int] = []
            span = ranges[key]
            if span.log_end > span.log_start:
                for batch in reader.batches(
                    key[0],
                    key[1],
                    span.log_start,
                    span.log_end,
                    timeout_secs=max(0.0, deadline - time.monotonic()),
                ):
                    for message in batch:
                        offset = message.offset()
                        assert offset is not None
                        if origin_header is not None:
                            offsets.append(offset)
                            header_offsets.append(_header_offset(message.headers(), origin_header))
                            continue
                        builder.add(offset, message.value(), None)
            if origin_header is None:
                result[key] = ledger_truth(builder.build(), source_key[0], ledger, where)
                continue
            source_offsets = np.asarray(header_offsets, dtype=np.int64)
            if (source_offsets < 0).any():
                raise RuntimeError(f"{key}: copied records with a negative {origin_header} header")
            result[key] = RestoredPartition(
                np.asarray(offsets, dtype=np.int64),
                np.full(len(offsets), source_key[1], dtype=np.int64),
                source_offsets,
            )
    return result
