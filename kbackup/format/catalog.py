"""Reading what backups a storage holds, and committing a new increment's manifest.

A backup is the chain of its increments' manifests, read through its newest
retention generation (kbackup.format.generations) if a prune wrote one. Only
manifests make data visible: segments that no manifest lists (left by a crashed
run, or below the window a prune moved) do not exist for any reader.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from kbackup.core.errors import (
    BackupIntegrityError,
    EncryptionKeyError,
    NotFoundError,
    PreconditionError,
    StorageError,
)
from kbackup.core.faults import crash_point
from kbackup.core.types import TopicPartitionKey
from kbackup.format.encryption import (
    BackupKeys,
    SealedManifest,
    open_manifest,
    read_sealed_manifest,
    seal_manifest,
    unlock,
)
from kbackup.format.generations import (
    RETENTION_FOLDER,
    RetentionGeneration,
    apply_retention,
    effective_starts,
    generation_of_key,
    parse_generation,
    retention_prefix,
)
from kbackup.format.layout import (
    MANIFESTS_FOLDER,
    check_backup_id,
    increment_of_manifest,
    manifest_key,
    manifest_revision_key,
    manifests_prefix,
    object_key,
    revision_of_manifest,
)
from kbackup.format.manifest import (
    ConsumerGroupsSnapshot,
    Manifest,
    PartitionEntry,
    SegmentEntry,
    TopicEntry,
)
from kbackup.storage import Storage


@dataclass
class PartitionCoverage:
    """What the whole backup (all increments) holds of one source partition."""

    topic: str
    partition: int
    #: The first increment started copying here.
    start_offset: int
    #: Everything the source held below this offset (and at or above start_offset) is in the backup.
    end_offset: int
    log_start_offset: int
    record_count: int
    segments: list[SegmentEntry] = field(default_factory=list)


@dataclass
class Backup:
    """A backup as its manifests describe it."""

    backup_id: str
    #: The increments readers see: those at or above the retention's first, windowed by it.
    manifests: list[Manifest]
    #: The newest retention generation (None: never pruned).
    retention: RetentionGeneration | None = None
    #: An encrypted backup's keys, opened (None: the backup is not encrypted).
    keys: BackupKeys | None = None

    @property
    def latest(self) -> Manifest:
        return self.manifests[-1]

    @property
    def offset_headers(self) -> bool:
        """``backup.include_offset_headers`` of the newest increment: whether a restore stamps origin
        headers by default. Manifests written before the setting was recorded say nothing: true."""
        return self.latest.settings.get("include_offset_headers", True) is not False

    @property
    def source_cluster(self) -> str:
        return self.manifests[0].source.cluster_id

    @property
    def topics(self) -> dict[str, TopicEntry]:
        """Each topic's metadata as the latest increment that saw it recorded it."""
        topics: dict[str, TopicEntry] = {}
        for manifest in self.manifests:
            for topic in manifest.topics:
                topics[topic.name] = topic
        return topics

    @property
    def consumer_groups(self) -> ConsumerGroupsSnapshot | None:
        """The latest group snapshot (every increment takes one)."""
        for manifest in reversed(self.manifests):
            if manifest.consumer_groups is not None:
                return manifest.consumer_groups
        return None

    def coverage(self) -> dict[TopicPartitionKey, PartitionCoverage]:
        result: dict[TopicPartitionKey, PartitionCoverage] = {}
        for manifest in self.manifests:
            for entry in manifest.partitions:
                merge_partition(result, entry)
            for segment in manifest.segments:
                result[(segment.topic, segment.partition)].segments.append(segment)
        starts = effective_starts(self.manifests, self.retention) if self.retention is not None else {}
        for key, item in result.items():
            item.segments.sort(key=lambda segment: segment.first_offset)
            if key in starts:
                item.start_offset = max(item.start_offset, min(starts[key], item.end_offset))
        return result

    def total_records(self) -> int:
        return sum(entry.record_count for manifest in self.manifests for entry in manifest.partitions)

    def total_bytes(self) -> int:
        return sum(segment.size_bytes for manifest in self.manifests for segment in manifest.segments)


def merge_partition(result: dict[TopicPartitionKey, PartitionCoverage], entry: PartitionEntry) -> None:
    key = (entry.topic, entry.partition)
    known = result.get(key)
    if known is None:
        result[key] = PartitionCoverage(
            topic=entry.topic,
            partition=entry.partition,
            start_offset=entry.start_offset,
            end_offset=entry.end_offset,
            log_start_offset=entry.log_start_offset,
            record_count=entry.record_count,
        )
        return
    known.end_offset = max(known.end_offset, entry.end_offset)
    known.record_count += entry.record_count


class BackupCatalog:
    """The backups below one storage root."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    def backup_ids(self) -> list[str]:
        """Every backup id with at least one manifest and not removed by a prune."""
        return [name for name in self.stored_ids() if self._manifest_keys(name) and not self._deleted(name)]

    def stored_ids(self) -> list[str]:
        """Every backup id with a manifests or retention folder, whatever state it is in (prune
        finishes the removal of a backup from here)."""
        found = []
        for name in self.storage.list_prefixes(""):
            try:
                check_backup_id(name)
            except Exception:  # noqa: S112 - folders that are not backups are simply not listed
                continue
            if {MANIFESTS_FOLDER, RETENTION_FOLDER} & set(self.storage.list_prefixes(f"{name}/")):
                found.append(name)
        return found

    def _deleted(self, backup_id: str) -> bool:
        generation = self.retention(backup_id)
        return generation is not None and generation.deleted

    def _manifest_keys(self, backup_id: str) -> list[tuple[int, str]]:
        """Each increment's newest manifest revision (docs/format.md, "Manifest revisions"): a
        revision is written whole, create-if-absent, after every segment it names, so the newest
        one stored is complete."""
        return sorted(
            (increment, revisions[-1][1])
            for increment, revisions in self.manifest_revisions(backup_id).items()
        )

    def manifest_revisions(self, backup_id: str) -> dict[int, list[tuple[int, str]]]:
        """Per increment, every stored revision of its manifest as ``(revision, key)``, oldest first."""
        found: dict[int, list[tuple[int, str]]] = {}
        for info in self.storage.list(manifests_prefix(backup_id)):
            increment = increment_of_manifest(info.key)
            revision = revision_of_manifest(info.key)
            if increment is not None and revision is not None:
                found.setdefault(increment, []).append((revision, info.key))
        return {increment: sorted(revisions) for increment, revisions in found.items()}

    def retention_keys(self, backup_id: str) -> list[tuple[int, str]]:
        keys = []
        for info in self.storage.list(retention_prefix(backup_id)):
            generation = generation_of_key(info.key)
            if generation is not None:
                keys.append((generation, info.key))
        return sorted(keys)

    def retention(self, backup_id: str) -> RetentionGeneration | None:
        """The newest retention generation of a backup, None if it was never pruned."""
        keys = self.retention_keys(backup_id)
        for attempt, (generation, key) in enumerate(reversed(keys)):
            try:
                found = parse_generation(self.storage.get_bytes(key), key)
            except StorageError:
                if attempt == 0 and not self.storage.exists(key):
                    continue  # removed by a prune that committed a newer one meanwhile
                raise
            if found.generation != generation or found.backup_id != backup_id:
                raise BackupIntegrityError(
                    f"{key} says generation {found.generation} of backup {found.backup_id}"
                )
            return found
        return None

    def exists(self, backup_id: str) -> bool:
        return bool(self._manifest_keys(backup_id)) and not self._deleted(backup_id)

    def load(self, backup_id: str) -> Backup:
        """The increments of a backup, checked to form one unbroken chain from increment 0, or from
        the first increment its newest retention generation keeps.

        A prune running at the same time may delete a manifest or an older generation between
        the listing and the read: the load then starts over once, from the newer state.
        """
        try:
            return self._load(backup_id)
        except _Vanished:
            try:
                return self._load(backup_id)
            except _Vanished as exc:
                raise StorageError(
                    f"backup {backup_id}: {exc.key} disappeared while it was read, twice",
                    hint="a prune is removing this backup's objects; run again when it is done",
                ) from None

    def _read_all(self, keys: list[str]) -> Iterator[bytes]:
        """The objects' bytes in order, read ``storage.parallel_reads`` at a time (a remote store
        answers each read after a round trip: ten thousand manifests one after the other take
        minutes). A key gone between the listing and the read raises ``_Vanished``."""

        def read(key: str) -> bytes:
            try:
                return self.storage.get_bytes(key)
            except StorageError:
                if not self.storage.exists(key):
                    raise _Vanished(key) from None
                raise

        workers = max(1, self.storage.parallel_reads)
        if workers == 1 or len(keys) < 2:
            yield from (read(key) for key in keys)
            return
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kafka-backup-read") as pool:
            yield from pool.map(read, keys)

    def _load(self, backup_id: str) -> Backup:
        generation = self.retention(backup_id)
        if generation is not None and generation.deleted:
            raise NotFoundError(
                f"backup {backup_id!r} in {self.storage.url} was removed by a prune "
                f"(retention generation {generation.generation})",
                hint="run 'kafka-backup prune --execute' again to finish removing its objects",
            )
        first = generation.first_increment if generation is not None else 0
        keys = [(increment, key) for increment, key in self._manifest_keys(backup_id) if increment >= first]
        if not keys:
            raise NotFoundError(
                f"no backup {backup_id!r} in {self.storage.url} "
                f"(no manifest under {manifests_prefix(backup_id)})",
                hint="'kafka-backup list --path URL' shows the backups there",
            )
        for expected, (increment, _key) in enumerate(keys, start=first):
            if increment != expected:
                raise BackupIntegrityError(
                    f"backup {backup_id}: manifest of increment {expected} is missing "
                    f"(found {object_key(backup_id, f'{MANIFESTS_FOLDER}/{increment:08d}.json')} next)"
                )
        backup_keys = unlock(self.storage, backup_id)
        if backup_keys is None and self.storage.key_encryption_key is not None:
            raise EncryptionKeyError(
                f"backup {backup_id} in {self.storage.url} is not encrypted, but a key is configured "
                f"({self.storage.key_encryption_key.source}): refusing to read it as plaintext",
                hint="to read an unencrypted backup, leave storage.encryption (and --encryption-key) unset",
            )
        manifests: list[Manifest] = []
        names = [key for _, key in keys]
        increments = [increment for increment, _ in keys]
        for increment, key, data in zip(increments, names, self._read_all(names), strict=True):
            manifest = open_manifest(data, key, increment, backup_keys)
            if manifest.revision != revision_of_manifest(key):
                raise BackupIntegrityError(
                    f"manifest {key} says revision {manifest.revision} (moved or replaced)",
                    hint="restore the backup's own manifest; 'kafka-backup validate' checks the rest",
                )
            check_chain(manifest, manifests, key, first=first)
            if (
                not manifests
                and generation is not None
                and first > 0
                and manifest.previous_run_id != generation.first_previous_run_id
            ):
                raise BackupIntegrityError(
                    f"manifest {key} follows run {manifest.previous_run_id}, but retention "
                    f"generation {generation.generation} says increment {first - 1} was run "
                    f"{generation.first_previous_run_id}"
                )
            manifests.append(manifest)
        if generation is not None:
            manifests = apply_retention(manifests, generation)
        return Backup(backup_id=backup_id, manifests=manifests, retention=generation, keys=backup_keys)

    def load_sealed(self, backup_id: str) -> list[SealedManifest]:
        """An encrypted backup's manifests as they show without the key (``validate`` without it):
        the chain of increments and every segment's key, size and SHA-256, unauthenticated; the
        segments a retention window removed are left out."""
        generation = self.retention(backup_id)
        first = generation.first_increment if generation is not None else 0
        keys = [(increment, key) for increment, key in self._manifest_keys(backup_id) if increment >= first]
        if not keys:
            raise NotFoundError(f"no backup {backup_id!r} in {self.storage.url}")
        starts = (
            {(window.topic, window.partition): window.start_offset for window in generation.windows}
            if generation is not None
            else {}
        )
        found: list[SealedManifest] = []
        names = [key for _, key in keys]
        for (increment, key), data in zip(keys, self._read_all(names), strict=True):
            sealed = read_sealed_manifest(data, key)
            if sealed.increment != increment or sealed.backup_id != backup_id:
                raise BackupIntegrityError(
                    f"manifest {key} says increment {sealed.increment} of backup {sealed.backup_id}"
                )
            if found and sealed.previous_run_id != found[-1].run_id:
                raise BackupIntegrityError(
                    f"manifest {key} follows run {sealed.previous_run_id}, but increment "
                    f"{found[-1].increment} was run {found[-1].run_id}"
                )
            kept = [
                segment
                for segment in sealed.segments
                if segment.last_offset >= starts.get((segment.topic, segment.partition), 0)
            ]
            found.append(replace(sealed, segments=kept))
        return found


class _Vanished(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def check_chain(manifest: Manifest, previous: list[Manifest], key: str, *, first: int = 0) -> None:
    if manifest.increment != first + len(previous):
        raise BackupIntegrityError(
            f"manifest {key} says increment {manifest.increment}, expected {first + len(previous)}"
        )
    if previous:
        before = previous[-1]
        if manifest.previous_run_id != before.run_id:
            raise BackupIntegrityError(
                f"manifest {key} follows run {manifest.previous_run_id}, but increment {before.increment} "
                f"was run {before.run_id}"
            )
        if manifest.source.cluster_id != before.source.cluster_id:
            raise BackupIntegrityError(
                f"manifest {key} is from source cluster {manifest.source.cluster_id!r}, "
                f"earlier increments from {before.source.cluster_id!r}"
            )


def commit_manifest(storage: Storage, manifest: Manifest, keys: BackupKeys | None = None) -> str:
    """Write an increment's manifest, last: only after every segment it lists is stored whole.
    With ``keys`` (an encrypted backup) it is sealed (format version 2).

    Refuses (PreconditionError) if another run already committed this increment.
    """
    check_segments_stored(storage, manifest.backup_id, manifest.segments)
    crash_point("backup:before-manifest")
    key = manifest_key(manifest.backup_id, manifest.increment)
    if not _put_if_absent(storage, key, manifest, keys):
        raise PreconditionError(
            f"increment {manifest.increment} of backup {manifest.backup_id} was committed by another run "
            f"while this one ran ({key})",
            hint="run the backup again: it continues from the newest increment",
        )
    return key


def _put_if_absent(storage: Storage, key: str, manifest: Manifest, keys: BackupKeys | None) -> bool:
    data = manifest.to_json_bytes() if keys is None else seal_manifest(manifest, keys)
    return storage.put_bytes_if_absent(key, data)


def commit_revision(storage: Storage, manifest: Manifest, keys: BackupKeys | None = None) -> str:
    """Write a new revision of an increment's manifest (``manifest.revision``, above every stored
    one), after every segment it names is stored; create-if-absent like :func:`commit_manifest`.

    Refuses (PreconditionError) if another erase committed this revision first.
    """
    check_segments_stored(storage, manifest.backup_id, manifest.segments)
    key = manifest_revision_key(manifest.backup_id, manifest.increment, manifest.revision)
    if not _put_if_absent(storage, key, manifest, keys):
        raise PreconditionError(
            f"revision {manifest.revision} of increment {manifest.increment} of backup "
            f"{manifest.backup_id} was committed by another erase while this one ran ({key})",
            hint="run the erase again: it plans from the newer revision",
        )
    return key


def check_segments_stored(storage: Storage, backup_id: str, segments: Iterable[SegmentEntry]) -> None:
    for segment in segments:
        key = object_key(backup_id, segment.key)
        size = storage.size(key)
        if size != segment.size_bytes:
            raise BackupIntegrityError(
                f"segment {key} is {'missing' if size is None else f'{size} bytes'} in {storage.url}, "
                f"expected {segment.size_bytes} bytes; the manifest was not written",
                retryable=True,
            )
