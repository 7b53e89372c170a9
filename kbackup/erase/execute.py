"""Executing an erase plan in the crash-safe order of docs/format.md, "Erasure".

Per backup, holding a lease so that a backup run or another erase is told apart:

1. each segment with a match is rewritten into a new object (the erase run's id in its name;
   every other record, with its offset, timestamp, headers and the segment's other columns, kept
   as it was; an encrypted backup's under a fresh data key);
2. each increment it touched gets a new manifest revision naming the new segments, written
   create-if-absent after them;
3. the erasure record, after every revision;
4. last, the objects no newest revision names: the old segments, older revisions, and what
   earlier killed erase runs left.

A kill at any point leaves a backup every reader accepts: before a revision is committed its new
segments are unlisted objects; after it, readers see the revision. Running the same request again
finishes it (the revisions it wrote hold no match any more, and its erasure record adds up the
counts their erasure notes keep).
"""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.compute as pc

from kbackup import __version__
from kbackup.core.errors import PreconditionError
from kbackup.core.faults import crash_point
from kbackup.core.logs import get_logger
from kbackup.core.times import iso_utc
from kbackup.core.types import TopicPartitionKey
from kbackup.erase.plan import (
    ERASE_RUN_PREFIX,
    BackupErasePlan,
    ErasePlan,
    SegmentMatch,
    describe_lease,
    live_leases,
)
from kbackup.format.catalog import Backup, BackupCatalog, commit_revision
from kbackup.format.erasure import (
    ErasureRecord,
    encode_erasure_record,
    erasure_key,
    matcher_hashes,
    new_secret,
)
from kbackup.format.generations import leases_prefix, parse_lease
from kbackup.format.layout import DATA_FOLDER, new_run_id, object_key
from kbackup.format.manifest import ErasureNote, Manifest, PartitionEntry, PartitionErased, SegmentEntry
from kbackup.format.record_match import RecordMatcher
from kbackup.format.segments import PartitionSegmentWriter, SegmentLimits, iter_segment_batches
from kbackup.storage import Storage

log = get_logger("erase")

#: The one crash point of an erase, reached before each step that changes the store: after each
#: rewritten segment, before each manifest revision, before the erasure record, before each delete
#: request (the kill-loop test picks one occurrence at random).
STEP = "erase:step"
#: A rewritten segment is never split: one new object per old one, whatever its size.
_UNBOUNDED = 1 << 62

LeaseHolder = Callable[[str, str], AbstractContextManager[object]]


def new_erase_run_id() -> str:
    return ERASE_RUN_PREFIX + new_run_id()


@dataclass
class EraseResult:
    storage_url: str
    request_id: str
    run_id: str
    backups: list[dict[str, Any]] = field(default_factory=list)

    @property
    def records_erased(self) -> int:
        return sum(int(item["records_erased"]) for item in self.backups)

    def to_dict(self) -> dict[str, Any]:
        return {
            "storage": self.storage_url,
            "request_id": self.request_id,
            "run_id": self.run_id,
            "records_erased": self.records_erased,
            "backups": self.backups,
        }


@dataclass
class _Context:
    storage: Storage
    matcher: RecordMatcher
    request_id: str
    run_id: str
    scratch_dir: Path
    erased_at: str


def execute_erase(
    storage: Storage,
    plan: ErasePlan,
    matcher: RecordMatcher,
    *,
    scratch_dir: Path,
    hold_lease: LeaseHolder | None = None,
    run_id: str | None = None,
    advanced: Callable[[int], None] | None = None,
) -> EraseResult:
    """Carry ``plan`` out with the ``matcher`` it was made with. ``hold_lease(backup_id, run_id)``
    holds the run's lease on a backup while it is rewritten (the CLI gives the backup stage's
    renewing lease); ``advanced(n)`` after each rewritten segment of n records."""
    context = _Context(
        storage,
        matcher,
        plan.request_id,
        run_id or new_erase_run_id(),
        scratch_dir,
        iso_utc(datetime.now(UTC).timestamp()),
    )
    result = EraseResult(storage.url, plan.request_id, context.run_id)
    # Every backup is checked before the first is touched, so that a refusal leaves all as they were.
    for item in plan.backups:
        _check_free(storage, item, plan.request_id)
    for number, item in enumerate(plan.backups):
        if number:
            _check_free(storage, item, plan.request_id)  # a run may have started meanwhile
        holder = hold_lease(item.backup_id, context.run_id) if hold_lease else contextlib.nullcontext()
        with holder:
            result.backups.append(_erase_backup(context, item, advanced or (lambda _count: None)))
    return result


def _check_free(storage: Storage, item: BackupErasePlan, request_id: str) -> None:
    """No backup run and no other erase may hold the backup now (one may have started since the plan)."""
    leases = live_leases(storage, item.backup_id)
    if leases:
        raise PreconditionError(
            f"backup {item.backup_id} is in use by {describe_lease(leases[0])}; it was not erased",
            hint="stop that run (a backup --follow) or wait until it ends, then run the erase again",
        )
    if item.recorded and item.matches:
        raise PreconditionError(
            f"backup {item.backup_id}: request {request_id} is recorded as done, yet "
            f"{item.records_matched} record(s) match now; it was not erased",
            hint="give this erasure its own --request-id (a request id names one erasure)",
        )


def _erase_backup(
    context: _Context, item: BackupErasePlan, advanced: Callable[[int], None]
) -> dict[str, Any]:
    storage = context.storage
    catalog = BackupCatalog(storage)
    backup = catalog.load(item.backup_id)
    by_increment: dict[int, list[SegmentMatch]] = {}
    for match in item.matches:
        by_increment.setdefault(match.increment, []).append(match)
    manifests = {manifest.increment: manifest for manifest in backup.manifests}
    for increment, matches in sorted(by_increment.items()):
        manifest = manifests.get(increment)
        if manifest is None or manifest.revision != matches[0].revision:
            raise PreconditionError(
                f"backup {item.backup_id}: increment {increment} changed since the plan was made "
                "(pruned, or rewritten by another erase); nothing more was erased",
                hint="run the erase again: it plans from the newer state",
            )
        revised = _revise(context, backup, manifest, matches, advanced)
        crash_point(STEP)
        commit_revision(storage, revised, backup.keys)
        log.info(
            "committed revision %d of increment %d of %s",
            revised.revision,
            increment,
            item.backup_id,
            extra={"backup_id": item.backup_id, "increment": increment, "revision": revised.revision},
        )
    backup = catalog.load(item.backup_id)
    record = _record(context, backup)
    key = erasure_key(item.backup_id, context.request_id)
    if not storage.exists(key):
        crash_point(STEP)
        storage.put_bytes_if_absent(key, encode_erasure_record(record, backup.keys))
    deleted = _clean_up(context, catalog, backup)
    return {
        "backup_id": item.backup_id,
        "segments_rewritten": len(item.matches),
        "increments_revised": len(by_increment),
        "records_erased": item.records_matched,
        "bytes_rewritten": item.bytes_to_rewrite,
        "request_records_erased": record.records,
        "objects_removed": deleted,
        "erasure_record": key,
    }


def _revise(
    context: _Context,
    backup: Backup,
    manifest: Manifest,
    matches: list[SegmentMatch],
    advanced: Callable[[int], None],
) -> Manifest:
    """The next revision of ``manifest``: its matching segments rewritten, its counts, offsets and
    times recomputed where they changed, and a note of what was erased."""
    replaced: dict[str, SegmentEntry | None] = {}
    erased: dict[TopicPartitionKey, int] = {}
    for match in matches:
        new_entry, removed = _rewrite_segment(context, backup, manifest, match.segment)
        replaced[match.segment.key] = new_entry
        where = (match.segment.topic, match.segment.partition)
        erased[where] = erased.get(where, 0) + removed
        advanced(match.segment.record_count)
        crash_point(STEP)
    kept = [segment for segment in (replaced.get(s.key, s) for s in manifest.segments) if segment is not None]
    partitions = [_recount(entry, kept, erased) for entry in manifest.partitions]
    note = ErasureNote(
        request_id=context.request_id,
        run_id=context.run_id,
        erased_at=context.erased_at,
        partitions=[PartitionErased(topic=t, partition=p, records=n) for (t, p), n in sorted(erased.items())],
    )
    return manifest.model_copy(
        update={
            "segments": kept,
            "partitions": partitions,
            "revision": manifest.revision + 1,
            "erasures": [*manifest.erasures, note],
        }
    )


def _rewrite_segment(
    context: _Context, backup: Backup, manifest: Manifest, segment: SegmentEntry
) -> tuple[SegmentEntry | None, int]:
    """The segment without its matching records, as a new object (None: nothing of it is left)."""
    compression = str(manifest.settings.get("compression") or "zstd")
    level = manifest.settings.get("compression_level")
    writer = PartitionSegmentWriter(
        context.storage,
        backup_id=backup.backup_id,
        run_id=context.run_id,
        source_cluster=backup.source_cluster,
        topic=segment.topic,
        partition=segment.partition,
        limits=SegmentLimits(
            max_bytes=_UNBOUNDED,
            max_records=_UNBOUNDED,
            compression=compression,
            compression_level=level if isinstance(level, int) and not isinstance(level, bool) else None,
        ),
        scratch_dir=context.scratch_dir,
        keys=backup.keys,
    )
    removed = 0
    try:
        for batch in iter_segment_batches(
            context.storage, backup.backup_id, segment, scratch_dir=context.scratch_dir, keys=backup.keys
        ):
            mask = context.matcher.mask(batch)
            removed += pc.sum(mask).as_py() or 0
            writer.write_batch(batch.filter(pc.invert(mask)))
        written = writer.finish()
    except BaseException:
        writer.abort()
        raise
    return (written[0] if written else None), removed


def _recount(
    entry: PartitionEntry, segments: list[SegmentEntry], erased: dict[TopicPartitionKey, int]
) -> PartitionEntry:
    """A partition entry with the records an erasure removed taken out; its range stays (the erased
    offsets are holes, as compacted ones are)."""
    where = (entry.topic, entry.partition)
    if where not in erased:
        return entry
    held = sorted(
        (s for s in segments if (s.topic, s.partition) == where), key=lambda segment: segment.first_offset
    )
    return entry.model_copy(
        update={
            "record_count": entry.record_count - erased[where],
            "first_offset": held[0].first_offset if held else None,
            "last_offset": held[-1].last_offset if held else None,
            "min_timestamp": min(s.min_timestamp for s in held) if held else None,
            "max_timestamp": max(s.max_timestamp for s in held) if held else None,
        }
    )


def _record(context: _Context, backup: Backup) -> ErasureRecord:
    """The request's erasure record: its counts added up from every revision's note of it."""
    counts: dict[TopicPartitionKey, int] = {}
    revisions: dict[str, int] = {}
    for manifest in backup.manifests:
        for note in manifest.erasures:
            if note.request_id != context.request_id:
                continue
            revisions[str(manifest.increment)] = manifest.revision
            for item in note.partitions:
                counts[(item.topic, item.partition)] = (
                    counts.get((item.topic, item.partition), 0) + item.records
                )
    secret = new_secret()
    key_hashes, header_hashes = matcher_hashes(context.matcher, secret)
    return ErasureRecord(
        backup_id=backup.backup_id,
        request_id=context.request_id,
        run_id=context.run_id,
        erased_at=context.erased_at,
        tool_version=__version__,
        matched={"keys": context.matcher.key_count, "header_values": context.matcher.header_count},
        partitions=[PartitionErased(topic=t, partition=p, records=n) for (t, p), n in sorted(counts.items())],
        records=sum(counts.values()),
        revisions=revisions,
        secret=base64.b64encode(secret).decode(),
        key_hashes=key_hashes,
        header_hashes=header_hashes,
    )


def _clean_up(context: _Context, catalog: BackupCatalog, backup: Backup) -> int:
    """Delete what no newest revision names: segments below their partition's committed end (the
    old ones, and those of killed erase runs; a backup run writes only above it), then the older
    revisions, then the leases of erase runs that ended without releasing them."""
    storage = context.storage
    backup_id = backup.backup_id
    listed = {object_key(backup_id, s.key) for manifest in backup.manifests for s in manifest.segments}
    ends = {key: item.end_offset for key, item in backup.coverage().items()}
    busy = {lease.run_id for lease in live_leases(storage, backup_id, ignore=context.run_id)}
    segments = [
        info.key
        for info in storage.list(f"{backup_id}/{DATA_FOLDER}/")
        if info.key not in listed and _collectable(info.key[len(backup_id) + 1 :], ends, busy)
    ]
    revisions = [
        key for found in catalog.manifest_revisions(backup_id).values() for _revision, key in found[:-1]
    ]
    leases = _dead_erase_leases(storage, backup_id, context.run_id, busy)
    for keys in (segments, revisions, leases):
        _delete(storage, keys)
    return len(segments) + len(revisions) + len(leases)


def _collectable(relative: str, ends: dict[TopicPartitionKey, int], busy: set[str]) -> bool:
    """``data/<topic>/<partition>/<first offset, 20 digits>-<run id>.parquet`` below its partition's
    committed end, and not written by a run that holds the backup now."""
    parts = relative.split("/")
    if len(parts) != 4 or not parts[2].isdigit() or not parts[3].endswith(".parquet"):
        return False
    first, _, run_id = parts[3][: -len(".parquet")].partition("-")
    if len(first) != 20 or not first.isdigit() or run_id in busy:
        return False
    end = ends.get((parts[1], int(parts[2])))
    return end is not None and int(first) < end


def _dead_erase_leases(storage: Storage, backup_id: str, own: str, busy: set[str]) -> list[str]:
    found = []
    for info in storage.list(leases_prefix(backup_id)):
        with contextlib.suppress(Exception):
            lease = parse_lease(storage.get_bytes(info.key), info.key)
            if lease.run_id.startswith(ERASE_RUN_PREFIX) and lease.run_id not in busy | {own}:
                found.append(info.key)
    return found


def _delete(storage: Storage, keys: Iterable[str]) -> None:
    chunk = list(keys)
    if chunk:
        storage.delete_many(chunk, before_each_request=lambda: crash_point(STEP))
