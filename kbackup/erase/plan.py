"""What an erasure would do: per backup, increment, topic and partition, which segments hold matching
records and how many, before anything is rewritten.

The plan is read from the store as it is now (each increment's newest manifest revision) by
scanning the key and header columns of every segment of the selected topics. It holds counts and
object names only, never a key: it is printed, and may be written to a file.
"""

from __future__ import annotations

import os
import re
import socket
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kbackup.core.errors import BackupIntegrityError, NotFoundError, StorageError
from kbackup.core.times import iso_utc
from kbackup.format.catalog import Backup, BackupCatalog
from kbackup.format.erasure import erasure_key
from kbackup.format.generations import Lease, leases_prefix, parse_lease
from kbackup.format.manifest import SegmentEntry
from kbackup.format.record_match import RecordMatcher
from kbackup.format.segments import open_segment
from kbackup.storage import Storage

#: The columns matching reads; the others are read only for the segments that are rewritten.
MATCH_COLUMNS = ["key", "headers"]
#: The prefix of an erase run's id: its lease and its new segments carry it.
ERASE_RUN_PREFIX = "erase-"


@dataclass(frozen=True)
class SegmentMatch:
    """One segment that holds records to erase."""

    increment: int
    #: The manifest revision the plan read (execute refuses if a newer one appeared since).
    revision: int
    segment: SegmentEntry
    matches: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "increment": self.increment,
            "topic": self.segment.topic,
            "partition": self.segment.partition,
            "segment": self.segment.key,
            "records": self.segment.record_count,
            "matches": self.matches,
            "bytes": self.segment.size_bytes,
        }


@dataclass
class BackupErasePlan:
    backup_id: str
    segments_scanned: int = 0
    records_scanned: int = 0
    matches: list[SegmentMatch] = field(default_factory=list)
    #: Live leases of other runs (a backup under --follow, another erase): execute refuses.
    leased_by: list[str] = field(default_factory=list)
    #: An erasure record of this request id exists already (a finished or resumed request).
    recorded: bool = False

    @property
    def records_matched(self) -> int:
        return sum(item.matches for item in self.matches)

    @property
    def bytes_to_rewrite(self) -> int:
        return sum(item.segment.size_bytes for item in self.matches)

    @property
    def increments(self) -> list[int]:
        return sorted({item.increment for item in self.matches})

    def partitions(self) -> list[dict[str, Any]]:
        """Per increment, topic and partition: segments to rewrite, records matched, bytes."""
        rows: dict[tuple[int, str, int], dict[str, Any]] = {}
        for item in self.matches:
            where = (item.increment, item.segment.topic, item.segment.partition)
            row = rows.setdefault(
                where,
                {
                    "increment": where[0],
                    "topic": where[1],
                    "partition": where[2],
                    "segments": 0,
                    "records": 0,
                    "bytes": 0,
                },
            )
            row["segments"] += 1
            row["records"] += item.matches
            row["bytes"] += item.segment.size_bytes
        return [rows[where] for where in sorted(rows)]

    def to_dict(self) -> dict[str, Any]:
        return {
            "backup_id": self.backup_id,
            "segments_scanned": self.segments_scanned,
            "records_scanned": self.records_scanned,
            "segments_to_rewrite": len(self.matches),
            "increments_to_revise": len(self.increments),
            "records_matched": self.records_matched,
            "bytes_to_rewrite": self.bytes_to_rewrite,
            "leased_by": self.leased_by,
            "already_recorded": self.recorded,
            "partitions": self.partitions(),
        }


@dataclass
class ErasePlan:
    storage_url: str
    request_id: str
    created_at: str
    #: What is matched, in counts (RecordMatcher.describe): never the keys.
    matching: str
    topics: str | None
    backups: list[BackupErasePlan]

    @property
    def records_matched(self) -> int:
        return sum(item.records_matched for item in self.backups)

    @property
    def bytes_to_rewrite(self) -> int:
        return sum(item.bytes_to_rewrite for item in self.backups)

    def to_dict(self) -> dict[str, Any]:
        return {
            "storage": self.storage_url,
            "request_id": self.request_id,
            "created_at": self.created_at,
            "matching": self.matching,
            "topics": self.topics,
            "records_matched": self.records_matched,
            "bytes_to_rewrite": self.bytes_to_rewrite,
            "backups": [item.to_dict() for item in self.backups],
        }


def plan_erase(
    storage: Storage,
    matcher: RecordMatcher,
    backup_ids: list[str] | None,
    *,
    request_id: str,
    topics: re.Pattern[str] | None = None,
    scratch_dir: Path | None = None,
    scanned: Callable[[int], None] | None = None,
) -> ErasePlan:
    """The plan of erasing what ``matcher`` matches from ``backup_ids`` (None: every backup in the
    store), in the topics ``topics`` matches in full (None: all). ``scanned(n)`` after each segment
    of n records is read."""
    catalog = BackupCatalog(storage)
    known = catalog.backup_ids()
    if backup_ids is None:
        chosen = known
    else:
        for backup_id in backup_ids:
            if backup_id not in known:
                raise NotFoundError(
                    f"no backup {backup_id!r} in {storage.url}",
                    hint="'kafka-backup list --path URL' shows the backups there",
                )
        chosen = backup_ids
    plans = []
    for backup_id in chosen:
        backup = catalog.load(backup_id)
        plan = BackupErasePlan(backup_id)
        plan.leased_by = [describe_lease(lease) for lease in live_leases(storage, backup_id)]
        plan.recorded = storage.exists(erasure_key(backup_id, request_id))
        _scan(storage, backup, matcher, topics, plan, scratch_dir, scanned or (lambda _count: None))
        plans.append(plan)
    return ErasePlan(
        storage_url=storage.url,
        request_id=request_id,
        created_at=iso_utc(datetime.now(UTC).timestamp()),
        matching=matcher.describe(),
        topics=None if topics is None else topics.pattern,
        backups=plans,
    )


def _scan(
    storage: Storage,
    backup: Backup,
    matcher: RecordMatcher,
    topics: re.Pattern[str] | None,
    plan: BackupErasePlan,
    scratch_dir: Path | None,
    scanned: Callable[[int], None],
) -> None:
    for manifest in backup.manifests:
        for segment in manifest.segments:
            if topics is not None and not topics.fullmatch(segment.topic):
                continue
            matches = count_matches(storage, backup, segment, matcher, scratch_dir)
            plan.segments_scanned += 1
            plan.records_scanned += segment.record_count
            scanned(segment.record_count)
            if matches:
                plan.matches.append(SegmentMatch(manifest.increment, manifest.revision, segment, matches))


def count_matches(
    storage: Storage,
    backup: Backup,
    segment: SegmentEntry,
    matcher: RecordMatcher,
    scratch_dir: Path | None = None,
) -> int:
    """How many records of ``segment`` the matcher matches (its size and SHA-256 checked first)."""
    return sum(matched_keys(storage, backup, segment, matcher, scratch_dir).values())


def matched_keys(
    storage: Storage,
    backup: Backup,
    segment: SegmentEntry,
    matcher: RecordMatcher,
    scratch_dir: Path | None = None,
) -> Counter[bytes | None]:
    """The keys of the records of ``segment`` the matcher matches, each with its count (its size
    and SHA-256 checked first): one read tells ``erase --verify`` which of its keys a segment holds."""
    found: Counter[bytes | None] = Counter()
    with open_segment(
        storage, backup.backup_id, segment, scratch_dir=scratch_dir, keys=backup.keys
    ) as parquet:
        try:
            for batch in parquet.iter_batches(columns=MATCH_COLUMNS, batch_size=65_536):
                found.update(batch.column("key").filter(matcher.mask(batch)).to_pylist())
        except OSError as exc:
            raise BackupIntegrityError(
                f"segment {backup.backup_id}/{segment.key} cannot be decoded: {exc}"
            ) from None
    return found


# -- leases -----------------------------------------------------------------------------------------


def describe_lease(lease: Lease) -> str:
    kind = "erase" if lease.run_id.startswith(ERASE_RUN_PREFIX) else "backup"
    return f"{kind} run {lease.run_id} on {lease.holder} (until {iso_utc(lease.expires_at)})"


def live_leases(storage: Storage, backup_id: str, *, ignore: str | None = None) -> list[Lease]:
    """The leases of runs that still hold ``backup_id`` (a backup, another erase), but ``ignore``'s.

    A lease counts until it expires; one whose holder is a process of this host that no longer
    runs (a run killed without releasing it) does not: a rerun after a crash goes on at once.
    """
    now = datetime.now(UTC).timestamp()
    live = []
    for info in storage.list(leases_prefix(backup_id)):
        try:
            lease = parse_lease(storage.get_bytes(info.key), info.key)
        except (BackupIntegrityError, StorageError):
            continue  # unreadable, or released since the listing: no run renews it
        if lease.run_id != ignore and lease.live(now) and not holder_is_gone(lease.holder):
            live.append(lease)
    return live


def holder_is_gone(holder: str) -> bool:
    """Whether a lease's holder (``host:pid``) is a process of this host that has ended."""
    host, _, pid = holder.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return True
    except OSError:
        return False  # it exists (another user's) or cannot be asked: keep the lease
    return False
