"""Where each object of a backup lives below the storage root (see docs/format.md, "Layout")."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime

from kbackup.core.errors import ConfigError

MANIFESTS_FOLDER = "manifests"
DATA_FOLDER = "data"
_BACKUP_ID = re.compile(r"^[A-Za-z0-9._=+@,-]{1,200}$")
#: ``<increment>.json`` (revision 0, as the backup run wrote it) or ``<increment>.r<revision>.json``
#: (a rewrite of it by ``erase``; readers before revisions ignore the name: docs/format.md,
#: "Manifest revisions").
_MANIFEST_NAME = re.compile(r"^(\d{8})(?:\.r(\d{8}))?\.json$")


def check_backup_id(backup_id: str) -> str:
    if not _BACKUP_ID.match(backup_id) or backup_id in (".", ".."):
        raise ConfigError(
            f"backup id {backup_id!r} is not valid: use 1-200 letters, digits and . _ = + @ , -",
        )
    return backup_id


def new_run_id() -> str:
    """Unique per run: segments of a crashed run never collide with a later run's."""
    return f"{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:8]}"


def manifest_key(backup_id: str, increment: int) -> str:
    return f"{check_backup_id(backup_id)}/{MANIFESTS_FOLDER}/{increment:08d}.json"


def manifest_revision_key(backup_id: str, increment: int, revision: int) -> str:
    """The object of one revision of an increment's manifest (revision 0: :func:`manifest_key`)."""
    if revision == 0:
        return manifest_key(backup_id, increment)
    return f"{check_backup_id(backup_id)}/{MANIFESTS_FOLDER}/{increment:08d}.r{revision:08d}.json"


def manifests_prefix(backup_id: str) -> str:
    return f"{check_backup_id(backup_id)}/{MANIFESTS_FOLDER}/"


def increment_of_manifest(key: str) -> int | None:
    """The increment number of a manifest key (of any revision), or None for anything else in the folder."""
    match = _MANIFEST_NAME.match(key.rsplit("/", 1)[-1])
    return int(match.group(1)) if match else None


def revision_of_manifest(key: str) -> int | None:
    """The revision of a manifest key (0 for the backup run's own), or None for anything else."""
    match = _MANIFEST_NAME.match(key.rsplit("/", 1)[-1])
    if match is None:
        return None
    return int(match.group(2)) if match.group(2) else 0


def segment_key(topic: str, partition: int, first_offset: int, run_id: str) -> str:
    """Relative to the backup's folder; sorts by offset within a partition."""
    return f"{DATA_FOLDER}/{topic}/{partition}/{first_offset:020d}-{run_id}.parquet"


def object_key(backup_id: str, relative_key: str) -> str:
    return f"{check_backup_id(backup_id)}/{relative_key}"
