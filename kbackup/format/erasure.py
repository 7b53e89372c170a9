"""The erasure record: what one ``kafka-backup erase`` request removed from a backup, never the keys.

``<backup id>/erasures/<request id>.json`` (docs/format.md, "Erasure records") is written once,
create-if-absent, after every manifest revision of the request and before the old segments are
deleted. It holds the request's id, when, the records removed per topic and partition (added up
from the manifests' erasure notes, so a rerun after a crash writes the same counts), and a keyed
hash of every key and header value the request listed: HMAC-SHA256 under a random secret of the
record's own, stored beside it. ``erase --verify --key K`` recomputes the hash of K under each
record's secret; without K the hashes say nothing of the keys (a dictionary of likely keys would
need the secret, which an encrypted backup seals with the rest of the record).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import re
from typing import Any

from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from pydantic import Field

from kbackup.core.errors import BackupIntegrityError, ConfigError, EncryptionKeyError
from kbackup.format.documents import validate, versioned_object
from kbackup.format.encryption import SCHEME, BackupKeys, open_document, seal_document
from kbackup.format.layout import check_backup_id
from kbackup.format.manifest import ManifestModel, PartitionErased
from kbackup.format.record_match import RecordMatcher, keyed_hash

ERASURES_FOLDER = "erasures"
ERASURE_FORMAT = "kafka-backup-erasure"
#: Readers refuse an erasure record of a higher version.
ERASURE_FORMAT_VERSION = 1
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._=+@,-]{1,200}$")
_SECRET_BYTES = 32
#: The prefix of a ``sha256:`` entry's hash input: a key given only as its digest is hashed as
#: this and the digest, so ``--verify`` of the key itself finds it too.
_DIGEST_PREFIX = b"sha256:"


class ErasureRecord(ManifestModel):
    format: str = ERASURE_FORMAT
    format_version: int = ERASURE_FORMAT_VERSION
    backup_id: str
    request_id: str
    #: The erase run that finished the request (the one that wrote this record).
    run_id: str
    erased_at: str
    tool_version: str
    #: How the request matched, in counts: ``keys`` and ``header_values`` listed.
    matched: dict[str, int] = Field(default_factory=dict)
    #: Records removed, per topic and partition, over every increment.
    partitions: list[PartitionErased] = Field(default_factory=list)
    records: int = 0
    #: The increments whose manifests the request rewrote, with the revision it wrote.
    revisions: dict[str, int] = Field(default_factory=dict)
    #: base64 of 32 random bytes: the HMAC key of the hashes below (this record's own).
    secret: str
    #: ``hmac-sha256:<hex>`` of each listed key (a ``sha256:`` entry: of ``sha256:`` + its digest).
    key_hashes: list[str] = Field(default_factory=list)
    #: ``hmac-sha256:<hex>`` of ``<header name> NUL <value>`` for each listed header value.
    header_hashes: list[str] = Field(default_factory=list)

    def secret_bytes(self) -> bytes:
        return base64.b64decode(self.secret)

    def lists_key(self, key: bytes) -> bool:
        """Whether the request listed ``key`` (as its bytes or as its SHA-256)."""
        secret = self.secret_bytes()
        candidates = {
            keyed_hash(secret, key),
            keyed_hash(secret, _DIGEST_PREFIX + hashlib.sha256(key).digest()),
        }
        return bool(candidates & set(self.key_hashes))


def check_request_id(request_id: str) -> str:
    if not _REQUEST_ID.match(request_id) or request_id in (".", ".."):
        raise ConfigError(
            f"request id {request_id!r} is not valid: use 1-200 letters, digits and . _ = + @ , -",
            hint="give --request-id the erasure request's own reference, e.g. GDPR-2026-0042",
        )
    return request_id


def erasures_prefix(backup_id: str) -> str:
    return f"{check_backup_id(backup_id)}/{ERASURES_FOLDER}/"


def erasure_key(backup_id: str, request_id: str) -> str:
    return f"{erasures_prefix(backup_id)}{check_request_id(request_id)}.json"


def request_of_key(key: str) -> str | None:
    name = key.rsplit("/", 1)[-1]
    if not name.endswith(".json"):
        return None
    request_id = name[: -len(".json")]
    return request_id if _REQUEST_ID.match(request_id) else None


def new_secret() -> bytes:
    """A record's own HMAC key: 32 random bytes (stored base64 in its ``secret``)."""
    return os.urandom(_SECRET_BYTES)


def matcher_hashes(matcher: RecordMatcher, secret: bytes) -> tuple[list[str], list[str]]:
    """The keyed hashes of a request's keys and header values, sorted (their order says nothing)."""
    keys = [keyed_hash(secret, key) for key in matcher.keys.exact]
    keys += [keyed_hash(secret, _DIGEST_PREFIX + digest) for digest in matcher.keys.digests]
    headers = []
    for name, values in matcher.headers.items():
        prefix = name.encode() + b"\0"
        headers += [keyed_hash(secret, prefix + value) for value in values.exact]
        headers += [keyed_hash(secret, prefix + _DIGEST_PREFIX + digest) for digest in values.digests]
    return sorted(keys), sorted(headers)


def _aead(keys: BackupKeys, request_id: str) -> AESGCM:
    return AESGCM(keys.derive("erasure", request_id))


def _visible(record: ErasureRecord) -> dict[str, Any]:
    """What a sealed record shows: which request it is, never what it holds."""
    dumped = record.model_dump(mode="json")
    visible = {name: dumped[name] for name in ("format", "format_version", "backup_id", "request_id")}
    return {**visible, "encryption": {"scheme": SCHEME}}


def encode_erasure_record(record: ErasureRecord, keys: BackupKeys | None) -> bytes:
    """The record's bytes: the document, or in an encrypted backup its identity and the whole
    document sealed under a key of its own request (HKDF ``erasure`` + request id)."""
    if keys is None:
        return (json.dumps(record.model_dump(mode="json"), indent=2) + "\n").encode()
    return seal_document(_aead(keys, record.request_id), record.model_dump(mode="json"), _visible(record))


def parse_erasure_record(
    data: bytes, name: str, *, backup_id: str, request_id: str, keys: BackupKeys | None
) -> ErasureRecord:
    """A stored record, checked: its format, its identity against its name, and (encrypted) its seal."""
    raw = versioned_object(
        data, f"erasure record {name}", expected_format=ERASURE_FORMAT, max_version=ERASURE_FORMAT_VERSION
    )
    if "sealed" in raw:
        raw = _opened(raw, name, request_id, keys)
    elif keys is not None:
        raise BackupIntegrityError(f"erasure record {name} is not encrypted, in a backup that is (replaced?)")
    record = validate(
        ErasureRecord,
        raw,
        lambda problem: BackupIntegrityError(f"erasure record {name} is malformed at {problem}"),
    )
    if (record.backup_id, record.request_id) != (backup_id, request_id):
        raise BackupIntegrityError(
            f"erasure record {name} says request {record.request_id} of backup {record.backup_id} (moved?)"
        )
    try:
        if len(base64.b64decode(record.secret, validate=True)) != _SECRET_BYTES:
            raise ValueError
    except (binascii.Error, ValueError):
        raise BackupIntegrityError(f"erasure record {name} has a malformed secret") from None
    return record


def _opened(raw: dict[str, Any], name: str, request_id: str, keys: BackupKeys | None) -> dict[str, Any]:
    if keys is None:
        raise EncryptionKeyError(f"erasure record {name} is encrypted: configure the backup's key to read it")
    return open_document(raw, _aead(keys, request_id), f"erasure record {name}", "request or backup")
