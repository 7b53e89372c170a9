"""The drill as of a moment (``drill --as-of``): which moment, and, for the local drill, a group history
made while the drill's groups commit forward, with the drill's own record of every commit.

A drill on real clusters restores the backup its config names as of a moment of that backup's group
history, and proves each drill group against the group's position at that moment (the history's
reading finished by then). The local drill has no history to restore from until it makes one: a
follow backup reads the groups every :data:`HISTORY_INTERVAL` while some of them commit forward and
new records arrive; the drill keeps its own record of each commit (sent, acknowledged, offsets), and
checks that the positions the backup gives for the moment are ones the groups had committed by
then, and not older than the reading they came from. That check does not trust the history it
checks: a reading that came from after the moment, or that lost a commit, fails the drill.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Literal

from kbackup.app.drill_data import DrillData
from kbackup.backup.settings import BackupSettings, SourceSettings
from kbackup.core.config import KafkaConnection, StorageSettings
from kbackup.core.errors import InterruptedByUser, KBackupError, PreconditionError
from kbackup.core.kafka import KafkaClients, open_admin
from kbackup.core.times import parse_iso
from kbackup.core.types import TopicPartitionKey
from kbackup.format.catalog import Backup, BackupCatalog
from kbackup.format.group_history import (
    GroupsReading,
    Positions,
    histories_of,
    positions_of,
    positions_over_time,
)
from kbackup.storage import Storage

if TYPE_CHECKING:
    from kbackup.backup.summary import BackupSummary

#: ``--as-of auto``: the drill picks the moment inside the history.
AUTO: Literal["auto"] = "auto"
AsOf = datetime | Literal["auto"]

#: How often the local drill's follow backup reads the groups: the precision of its history.
HISTORY_INTERVAL = "1s"
#: How often it commits an increment (each stores the readings taken before it).
HISTORY_CHECKPOINT_SECS = 3.0
#: Commit steps of the local drill's groups, and the time between two.
HISTORY_STEPS = 10
STEP_SECS = 0.6
#: New ``clicks`` records per partition before each step: the records after the moment are not
#: restored, so the drill restores less than the source holds.
CLICKS_PER_STEP = 4
#: How long the follow backup may take to commit an increment before the drill gives up.
INCREMENT_TIMEOUT_SECS = 120.0


@dataclass(frozen=True)
class GroupCommit:
    """One commit of a local drill group, as the drill made it."""

    group: str
    #: The group's committed offsets after it (the partitions it did not name kept theirs).
    offsets: dict[TopicPartitionKey, int]
    sent: float
    acknowledged: float


@dataclass(frozen=True)
class GroupAtMoment:
    """One group's position of the moment, checked against the drill's record of its commits."""

    group: str
    offsets: dict[TopicPartitionKey, int]
    #: ``committed by then``; ``committed after the moment``; ``older than its reading`` (a commit
    #: acknowledged before the reading started is missing); ``never committed``.
    verdict: str
    commits: int

    @property
    def ok(self) -> bool:
        return self.verdict == COMMITTED_BY_THEN

    def to_dict(self) -> dict[str, object]:
        return {
            "group": self.group,
            "offsets": {
                f"{topic}/{partition}": offset for (topic, partition), offset in sorted(self.offsets.items())
            },
            "verdict": self.verdict,
            "commits_recorded": self.commits,
        }


COMMITTED_BY_THEN = "committed by then"


def check_positions(
    commits: list[GroupCommit], positions: Positions, *, as_of: float, reading_taken_at: float
) -> list[GroupAtMoment]:
    """Each recorded group's position of the moment against its commits: it must be the offsets of
    a commit sent by ``as_of`` (never a later one), and not older than the last commit acknowledged
    before the reading it came from started (``reading_taken_at``), which that reading must show."""
    checked = []
    for group in sorted({commit.group for commit in commits}):
        history = [commit for commit in commits if commit.group == group]
        then = positions.get(group, {})
        shown = [index for index, commit in enumerate(history) if commit.offsets == then]
        settled = max(
            (i for i, commit in enumerate(history) if commit.acknowledged <= reading_taken_at), default=-1
        )
        if any(history[i].sent <= as_of and i >= settled for i in shown):
            verdict = COMMITTED_BY_THEN
        elif any(history[i].sent > as_of for i in shown):
            verdict = "committed after the moment"
        elif shown:
            verdict = "older than its reading"
        else:
            verdict = "never committed"
        checked.append(GroupAtMoment(group, dict(then), verdict, len(history)))
    return checked


def readings_of(backup: Backup, storage: Storage) -> list[GroupsReading]:
    """Every reading of the groups the backup holds, oldest first."""
    return list(positions_over_time(backup.manifests, histories_of(storage, backup.manifests, backup.keys)))


def latest_reading_by(readings: list[GroupsReading], moment: datetime) -> str | None:
    """When the latest reading finished by ``moment`` started (None: none had): counted here from the
    readings themselves, so a choice of an older or a later reading is caught."""
    finished = [reading for reading in readings if parse_iso(reading.known_by) <= moment]
    # Of readings finished at the same millisecond, the one stored last.
    latest = max(reversed(finished), key=lambda reading: parse_iso(reading.known_by), default=None)
    return None if latest is None else latest.taken_at


def auto_moment(readings: list[GroupsReading], backup_id: str) -> datetime:
    """``--as-of auto`` on a backup: halfway between its first and its last reading of the groups
    (to the millisecond, the restore's resolution), where the history says most."""
    if not readings:
        raise PreconditionError(
            f"backup {backup_id} holds no reading of the consumer groups: no moment to drill",
            hint="back up with backup.consumer_group_snapshot: true (and backup.group_snapshot_interval)",
        )
    first, last = parse_iso(readings[0].known_by).timestamp(), parse_iso(readings[-1].known_by).timestamp()
    return datetime.fromtimestamp(round((first + last) / 2, 3), UTC)


@dataclass
class LocalHistory:
    """The local drill's follow backup and its record of the groups' commits."""

    summary: BackupSummary
    seconds: float
    commits: list[GroupCommit] = field(default_factory=list)
    #: When each commit step started and ended (all its groups committed).
    steps: list[tuple[float, float]] = field(default_factory=list)

    def moment(self) -> datetime:
        """Halfway through the steps: between the middle step's end and the next one's start."""
        middle = len(self.steps) // 2 - 1
        at = (self.steps[middle][1] + self.steps[middle + 1][0]) / 2
        return datetime.fromtimestamp(round(at, 3), UTC)

    def check(self, positions: Positions, *, as_of: datetime, reading_taken_at: str) -> list[GroupAtMoment]:
        return check_positions(
            self.commits,
            positions,
            as_of=as_of.timestamp(),
            reading_taken_at=parse_iso(reading_taken_at).timestamp(),
        )


class _Increments:
    """The follow run's committed increments and the groups' positions in the latest one's snapshot,
    for the drill to wait on."""

    def __init__(self, backup_id: str) -> None:
        self.backup_id = backup_id
        self.count = 0
        self.latest: Positions = {}
        self.changed = threading.Condition()

    def committed(self, storage: Storage) -> None:
        snapshot = BackupCatalog(storage).load(self.backup_id).latest.consumer_groups
        with self.changed:
            self.count += 1
            self.latest = positions_of(snapshot) if snapshot is not None else {}
            self.changed.notify_all()

    def wait_until(
        self, condition: Callable[[], bool], what: str, backup: threading.Thread, failed: list[BaseException]
    ) -> None:
        deadline = time.monotonic() + INCREMENT_TIMEOUT_SECS
        with self.changed:
            while not condition():
                if failed:
                    raise failed[0]
                if not backup.is_alive():
                    raise PreconditionError(f"the drill's follow backup stopped before {what}")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise PreconditionError(
                        f"the drill's follow backup committed no {what} within {INCREMENT_TIMEOUT_SECS:.0f}s"
                    )
                # Woken by each commit; the timeout only looks at the backup's thread again.
                self.changed.wait(min(left, 0.5))


def record_history(
    *,
    backup_id: str,
    source: SourceSettings,
    storage: StorageSettings,
    settings: BackupSettings,
    data: DrillData,
    stop: threading.Event | None = None,
) -> LocalHistory:
    """Back up the drill's topics with ``backup --follow`` reading the groups every
    :data:`HISTORY_INTERVAL`, while the drill's groups commit forward :data:`HISTORY_STEPS` times;
    stopped once an increment holds every group's last commit; ``settings`` are the drill's backup
    settings, run as ``--follow``."""
    from kbackup.backup import BackupJob, run_backup

    settings = settings.model_copy(
        update={
            "continuous": True,
            "checkpoint_interval_secs": HISTORY_CHECKPOINT_SECS,
            "group_snapshot_interval": HISTORY_INTERVAL,
            # The history's readings need the snapshots (backup.group_snapshot_interval's rule).
            "consumer_group_snapshot": True,
        }
    )
    job = BackupJob(backup_id=backup_id, source=source, storage=storage, settings=settings)
    halt = threading.Event()
    increments = _Increments(backup_id)
    summaries: list[BackupSummary] = []
    failed: list[BaseException] = []

    def follow() -> None:
        try:
            summaries.append(run_backup(job, stop=halt, after_commit=increments.committed))
        except BaseException as error:  # handed to the drill's thread, which raises it
            failed.append(error)

    started = time.monotonic()
    # The fill's commits were all acknowledged before the follow run's first reading.
    filled = time.time()
    commits = [GroupCommit(group, dict(offsets), filled, filled) for group, offsets in data.groups.items()]
    steps: list[tuple[float, float]] = []
    pause = stop or threading.Event()
    backup = threading.Thread(target=follow, name="drill-history-backup", daemon=True)
    backup.start()
    try:
        increments.wait_until(lambda: increments.count > 0, "first increment", backup, failed)
        stepper = _Stepper(source, data)
        for step in range(1, HISTORY_STEPS + 1):
            steps.append(stepper.step(step, commits))
            # The pace of the groups' commits, not a wait for something: a stop ends it at once.
            if pause.wait(STEP_SECS):
                raise InterruptedByUser("drill stopped by a signal while it made its group history")
        # Stopped once an increment holds every group's last commit: the readings before it (the
        # moment's among them) are stored with the increments up to it.
        final = stepper.state
        increments.wait_until(
            lambda: all(increments.latest.get(group) == offsets for group, offsets in final.items()),
            "increment with the groups' last commits",
            backup,
            failed,
        )
    finally:
        halt.set()
        backup.join(INCREMENT_TIMEOUT_SECS)
    if failed:
        raise failed[0]
    if not summaries:
        raise PreconditionError("the drill's follow backup did not stop")
    return LocalHistory(
        summary=summaries[0],
        seconds=time.monotonic() - started,
        commits=commits,
        steps=steps,
    )


class _Stepper:
    """The local drill's groups committing forward: ``analytics`` keeps up with ``clicks``, ``audit``
    stays halfway through its partition, ``billing`` works through ``orders`` and stays 37 records
    behind on ``clicks``; the groups that sit on holes and markers keep their positions."""

    def __init__(self, source: KafkaConnection, data: DrillData) -> None:
        self.data = data
        self.state = {group: dict(offsets) for group, offsets in data.groups.items()}
        self.producer = KafkaClients(source, client_id="kafka-backup-drill-history").producer(
            **{"linger.ms": 5}
        )
        self.admin = open_admin(source, client_id="kafka-backup-drill-history")
        orders = self.admin.partition_ranges(("orders", p) for p in range(data.topics["orders"]))
        self.orders_end = {key: span.log_end for key, span in orders.items()}

    def step(self, step: int, commits: list[GroupCommit]) -> tuple[float, float]:
        began = time.time()
        clicks = self.data.topics["clicks"]
        for partition in range(clicks):
            for index in range(CLICKS_PER_STEP):
                self.producer.produce(
                    "clicks", value=f"click live {step}-{index}".encode(), partition=partition
                )
        if self.producer.flush(60) != 0:
            raise KBackupError("the drill could not write its history's clicks records")
        ends = {
            key: span.log_end
            for key, span in self.admin.partition_ranges(("clicks", p) for p in range(clicks)).items()
        }
        planned: dict[str, dict[TopicPartitionKey, int]] = {
            "analytics": dict(ends),
            "audit": {("clicks", 0): ends[("clicks", 0)] // 2},
            "billing": {
                **{key: max(0, end - 37) for key, end in ends.items()},
                **{
                    key: min(end, end // 4 + step * max(1, (end - end // 4) // (HISTORY_STEPS + 1)))
                    for key, end in self.orders_end.items()
                },
            },
        }
        for group, offsets in planned.items():
            sent = time.time()
            self.admin.alter_offsets(group, offsets)
            self.state[group].update(offsets)
            commits.append(GroupCommit(group, dict(self.state[group]), sent, time.time()))
        return began, time.time()
