"""What ``validate`` and ``describe`` say of an erased backup: its erasure records checked against
the manifest revisions that noted them, and what each erasure removed, in counts only.

The checks follow docs/format.md ("Manifest revisions", "Erasure records"): a record parses and
names its own place; the revisions it names exist, or were superseded by a later one that still
notes the request (notes are kept from revision to revision); its counts are the sum of its
request's notes over the newest revisions. A note whose request has no record is an erase killed
before its step 5: a warning, as the backup is whole either way. No key, hash or secret of a
record is ever put in a line or a row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kbackup.core.errors import BackupIntegrityError, EncryptionKeyError
from kbackup.core.types import TopicPartitionKey
from kbackup.format.catalog import Backup
from kbackup.format.erasure import ErasureRecord, erasures_prefix, parse_erasure_record, request_of_key
from kbackup.format.manifest import ErasureNote, Manifest, PartitionErased
from kbackup.storage import Storage


@dataclass
class StoredErasure:
    """One object under ``erasures/``: its request id and the record, or why it could not be read."""

    key: str
    request_id: str | None
    record: ErasureRecord | None = None
    problem: str | None = None


def read_erasure_records(storage: Storage, backup: Backup) -> list[StoredErasure]:
    """Every object under the backup's ``erasures/``, each parsed (sealed ones opened with the
    backup's keys), in request-id order."""
    stored = []
    for info in sorted(storage.list(erasures_prefix(backup.backup_id)), key=lambda item: item.key):
        request_id = request_of_key(info.key)
        item = StoredErasure(info.key, request_id)
        if request_id is not None:
            try:
                item.record = parse_erasure_record(
                    storage.get_bytes(info.key),
                    info.key,
                    backup_id=backup.backup_id,
                    request_id=request_id,
                    keys=backup.keys,
                )
            except (BackupIntegrityError, EncryptionKeyError) as exc:
                # EncryptionKeyError: a sealed record in a backup that is not encrypted (put there).
                item.problem = exc.message
        stored.append(item)
    return stored


def check_erasure_records(storage: Storage, backup: Backup) -> tuple[list[str], list[str], int]:
    """Errors and warnings about the backup's erasure records, and how many were read and checked."""
    errors: list[str] = []
    warnings: list[str] = []
    recorded = set()
    checked = 0
    for item in read_erasure_records(storage, backup):
        if item.request_id is None:
            warnings.append(f"{item.key} is not named <request id>.json: not an erasure record, ignored")
            continue
        recorded.add(item.request_id)
        if item.record is None:
            errors.append(str(item.problem))
            continue
        checked += 1
        errors.extend(record_problems(item.key, item.record, backup))
    noted = {note.request_id for manifest in backup.manifests for note in manifest.erasures}
    for request_id in sorted(noted - recorded):
        increments = [m.increment for m in backup.manifests if _note_of(m, request_id) is not None]
        warnings.append(
            f"erasure {request_id} rewrote increment(s) {', '.join(map(str, increments))} but has no "
            f"erasure record (an erase killed before its record): run the same erase again with "
            f"--request-id {request_id}"
        )
    return errors, warnings, checked


def record_problems(name: str, record: ErasureRecord, backup: Backup) -> list[str]:
    """One erasure record against itself and against the newest revisions' notes of its request."""
    problems = []
    stated = _counts(record.partitions)
    if sum(stated.values()) != record.records:
        problems.append(
            f"erasure record {name} says {record.records} records, its partitions add up to "
            f"{sum(stated.values())}"
        )
    revision_problems, pruned = _revision_problems(name, record, backup)
    problems += revision_problems
    noted = _counts(
        item
        for manifest in backup.manifests
        for note in manifest.erasures
        if note.request_id == record.request_id
        for item in note.partitions
    )
    for topic, partition in sorted(set(stated) | set(noted)):
        says, adds = stated.get((topic, partition), 0), noted.get((topic, partition), 0)
        # A prune drops the notes of the increments it drops, never the record: then the record
        # may say more than the notes left, never less.
        if says != adds and not (pruned and says > adds):
            problems.append(
                f"erasure record {name} says {says} records of {topic}/{partition} erased, the "
                f"increments' erasure notes of {record.request_id} add up to {adds}"
            )
    return problems


def _revision_problems(name: str, record: ErasureRecord, backup: Backup) -> tuple[list[str], bool]:
    """The revisions the record names against those stored; True when one is of a pruned increment."""
    manifests = {manifest.increment: manifest for manifest in backup.manifests}
    first = backup.retention.first_increment if backup.retention is not None else 0
    problems = []
    pruned = False
    for increment_text, revision in sorted(record.revisions.items()):
        increment = int(increment_text) if increment_text.isdigit() else None
        manifest = manifests.get(increment) if increment is not None else None
        if increment is not None and increment < first:
            pruned = True
        elif manifest is None:
            problems.append(
                f"erasure record {name} names increment {increment_text}, which the backup does not hold"
            )
        elif manifest.revision < revision:
            problems.append(
                f"erasure record {name} names revision {revision} of increment {increment}, "
                f"whose newest is revision {manifest.revision}"
            )
        elif _note_of(manifest, record.request_id) is None:
            problems.append(
                f"erasure record {name} names revision {revision} of increment {increment}, whose "
                f"newest revision {manifest.revision} has no erasure note of {record.request_id}"
            )
    for manifest in backup.manifests:
        if (
            _note_of(manifest, record.request_id) is not None
            and str(manifest.increment) not in record.revisions
        ):
            problems.append(
                f"increment {manifest.increment} notes erasure {record.request_id}, whose record "
                f"{name} does not name it"
            )
    return problems, pruned


def _note_of(manifest: Manifest, request_id: str) -> ErasureNote | None:
    return next((note for note in manifest.erasures if note.request_id == request_id), None)


def _counts(items: Any) -> dict[TopicPartitionKey, int]:
    counts: dict[TopicPartitionKey, int] = {}
    for item in items:
        counts[(item.topic, item.partition)] = counts.get((item.topic, item.partition), 0) + item.records
    return counts


def by_topic(partitions: list[PartitionErased]) -> dict[str, int]:
    """Records erased per topic, as ``describe`` shows them."""
    topics: dict[str, int] = {}
    for item in partitions:
        topics[item.topic] = topics.get(item.topic, 0) + item.records
    return dict(sorted(topics.items()))


def note_rows(manifest: Manifest) -> list[dict[str, Any]]:
    """The erasures that rewrote an increment: request id, when, records per topic."""
    return [
        {
            "request_id": note.request_id,
            "erased_at": note.erased_at,
            "records": sum(item.records for item in note.partitions),
            "topics": by_topic(note.partitions),
        }
        for note in manifest.erasures
    ]


def erasure_rows(storage: Storage, backup: Backup) -> list[dict[str, Any]]:
    """The backup's erasure records as ``describe`` shows them: request id, when, records (per
    topic), the increments rewritten; never a hash or the secret. One that cannot be read says why."""
    rows: list[dict[str, Any]] = []
    for item in read_erasure_records(storage, backup):
        if item.request_id is None:
            continue
        record = item.record
        if record is None:
            rows.append({"request_id": item.request_id, "error": item.problem})
            continue
        rows.append(
            {
                "request_id": record.request_id,
                "erased_at": record.erased_at,
                "run_id": record.run_id,
                "records": record.records,
                "topics": by_topic(record.partitions),
                "increments": sorted(int(i) for i in record.revisions if i.isdigit()),
                "matched": record.matched,
            }
        )
    return rows
