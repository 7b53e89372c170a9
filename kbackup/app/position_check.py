"""The three-phase restore's verify phase: each moved group's position, judged from the target itself.

For every row of the reset plan, the group's committed offset P is read back from the target, and
the restored records around it are read by their origin headers: the record at P (the first
restored record of the row's source topic at or after P) must be one the group had not processed
on the source (origin offset >= the group's committed source offset C of its source partition),
and the restored record just before P must be one it had (origin offset < C). Nothing of the plan's
own answer (its new offsets, its expected origins) is used: only its inputs (which group, which
partitions, the committed source offsets C) and what the target holds.

Rows are sorted into:

- *wrong*: the committed position skips or re-reads a record (exit 11, VerificationError);
- *unverified*: an exact strategy's row that cannot be judged (no committed position although the
  partition holds restored records, records without origin headers around it) (exit 13);
- *gap*: the group had processed source records the backup does not hold, so it resumes after a
  recovery gap (exit 12, unless the operator accepts it);
- positions chosen by a non-exact strategy (timestamp, earliest, latest, offset) are read back and
  reported, not judged: their re-reads are what the operator asked for.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kbackup.core.config import KafkaConnection
from kbackup.core.errors import RecoveryGapError, UnverifiedError, VerificationError
from kbackup.core.kafka import KafkaClients, PartitionReader, open_admin
from kbackup.core.types import TopicPartitionKey
from kbackup.format.origin import Origin, parse_origin
from kbackup.format.reset_plan import PartitionReset, ResetPlan

#: Strategies whose positions are exact, and so judged record by record.
EXACT_STRATEGIES = frozenset({"header-based", "from-mapping"})
#: Records read back from a position at first; doubled until a restored record of the row is found.
FIRST_WINDOW = 64


@dataclass
class PositionCheck:
    """What the verify phase found, row by row."""

    checked: int = 0
    wrong: list[str] = field(default_factory=list)
    unverified: list[str] = field(default_factory=list)
    gaps: list[str] = field(default_factory=list)
    #: Rows of a non-exact strategy: read back, not judged.
    not_judged: int = 0

    def details(self) -> dict[str, Any]:
        return {
            "positions_checked": self.checked,
            "problems": len(self.wrong),
            "unverified": self.unverified,
            "recovery_gaps": self.gaps,
            "not_judged": self.not_judged,
        }

    def raise_for(self, *, accept_gap: bool) -> None:
        """The first failure that applies: wrong positions, then unverified rows, then gaps."""
        if self.wrong:
            raise VerificationError(
                "three-phase restore verification failed: committed positions that skip or re-read "
                "records:\n  " + "\n  ".join(self.wrong),
                hint="roll the groups back with 'kafka-backup offset-rollback', and report this",
            )
        if self.unverified:
            raise UnverifiedError(
                f"{len(self.unverified)} group position(s) could not be verified:\n  "
                + "\n  ".join(self.unverified),
                hint="check the rows named; the data is restored and the groups are committed",
            )
        if self.gaps and not accept_gap:
            raise RecoveryGapError(
                f"{len(self.gaps)} group position(s) resume after a recovery gap (records the backup "
                "does not hold, or no longer holds after a prune):\n  " + "\n  ".join(self.gaps),
                hint="restore a newer backup (or one pruned less), or accept the gap: run again "
                "with --accept-gap",
            )


def _restored(message: Any, source_cluster: str, topic: str) -> Origin | None:
    headers = message.headers()
    origin = parse_origin(headers if isinstance(headers, list) else None)
    if origin is None or origin.cluster != source_cluster or origin.topic != topic:
        return None
    return origin


class _Neighbours:
    """Reads the restored records of one source topic just before and at a target position."""

    def __init__(self, reader: PartitionReader, source_cluster: str, timeout_secs: float) -> None:
        self.reader = reader
        self.source_cluster = source_cluster
        self.timeout_secs = timeout_secs

    def at_or_after(self, key: TopicPartitionKey, position: int, end: int, topic: str) -> Origin | None:
        for batch in self.reader.batches(key[0], key[1], position, end, timeout_secs=self.timeout_secs):
            for message in batch:
                origin = _restored(message, self.source_cluster, topic)
                if origin is not None:
                    return origin
        return None

    def before(self, key: TopicPartitionKey, position: int, start: int, topic: str) -> Origin | None:
        window_end, size = position, FIRST_WINDOW
        while window_end > start:
            window_start = max(start, window_end - size)
            last: Origin | None = None
            for batch in self.reader.batches(
                key[0], key[1], window_start, window_end, timeout_secs=self.timeout_secs
            ):
                for message in batch:
                    last = _restored(message, self.source_cluster, topic) or last
            if last is not None:
                return last
            window_end, size = window_start, size * 2
        return None


def check_positions(
    connection: KafkaConnection,
    plan: ResetPlan,
    *,
    strategy: str,
    backup_end: dict[TopicPartitionKey, int] | None,
    timeout_secs: float = 120.0,
) -> PositionCheck:
    """Judge every row of ``plan`` against the target (see the module's description)."""
    admin = open_admin(connection)
    keys = {(row.target_topic, row.target_partition) for group in plan.groups for row in group.partitions}
    ranges = admin.partition_ranges(keys)
    committed_by_group = admin.committed_offsets_of(group.group_id for group in plan.groups)
    result = PositionCheck()
    with PartitionReader(KafkaClients(connection, client_id="kafka-backup-verify")) as reader:
        neighbours = _Neighbours(reader, plan.source.source_cluster, timeout_secs)
        for group in plan.groups:
            for row in group.partitions:
                key = (row.target_topic, row.target_partition)
                where = f"{group.group_id} {key[0]}/{key[1]}"
                result.checked += 1
                result.gaps += _gaps(where, row, backup_end)
                if strategy not in EXACT_STRATEGIES:
                    result.not_judged += 1
                    continue
                span = ranges[key]
                position = committed_by_group[group.group_id].get(key)
                _judge(result, where, row, position, neighbours, span.log_start, span.log_end)
    return result


def _judge(
    result: PositionCheck,
    where: str,
    row: PartitionReset,
    position: int | None,
    neighbours: _Neighbours,
    log_start: int,
    log_end: int,
) -> None:
    """One row: the restored record at the committed position must be unprocessed, the one before it
    processed, by the group's committed source offsets."""
    key = (row.target_topic, row.target_partition)
    topic = row.source_topic
    if position is None:
        if neighbours.before(key, log_end, log_start, topic) is not None:
            result.unverified.append(
                f"{where}: no committed offset, and the partition holds restored records"
            )
        return
    thresholds = {(topic, partition): offset or 0 for partition, offset in row.source_committed.items()}
    at = neighbours.at_or_after(key, position, log_end, topic)
    if at is not None and at.offset < thresholds.get((at.topic, at.partition), 0):
        result.wrong.append(
            f"{where}: the record at {position} is {at.topic}/{at.partition}@{at.offset}, which the group "
            "had processed: it would be read again"
        )
    before = neighbours.before(key, position, log_start, topic)
    if before is not None and before.offset >= thresholds.get((before.topic, before.partition), 0):
        result.wrong.append(
            f"{where}: the record before {position} is {before.topic}/{before.partition}@{before.offset}, "
            "which the group had not processed: it would be skipped"
        )


def _gaps(where: str, row: PartitionReset, backup_end: dict[TopicPartitionKey, int] | None) -> list[str]:
    """The row's gaps: source offsets the group had processed that the backup does not hold, and
    offsets it had not processed that a prune removed from the backup."""
    found = []
    if row.retention_gap:
        found.append(
            f"{where}: {row.retention_gap} source offset(s) the group had not processed were removed "
            "from the backup by a prune (its window starts above the committed offset); the group "
            "resumes at the window's first record"
        )
    for partition, offset in row.source_committed.items():
        end = backup_end.get((row.source_topic, partition)) if backup_end is not None else None
        if offset is not None and end is not None and offset > end:
            found.append(
                f"{where}: committed {row.source_topic}/{partition}@{offset} on the source, the backup "
                f"holds up to {end} ({offset - end} record(s) processed and not restored)"
            )
    return found
