"""Encrypted backups (format version 2; docs/format.md "Encryption", docs/security.md).

The keys form an envelope:

- the **key-encryption key** (a key file, an environment variable or an AWS KMS key;
  ``kbackup.storage.keys``) wraps
- the backup's **root key**, 256 random bits made when the backup is created and stored
  wrapped in ``<backup id>/keys/<generation>.json`` (the keyring). ``rekey`` writes a new
  generation wrapped by another key-encryption key; the data is not rewritten.
- From the root key HKDF-SHA256 derives, per purpose, the key that seals each increment's
  manifest (AES-256-GCM from ``cryptography``) and the master key of the segments' Parquet
  Modular Encryption.
- Each segment is encrypted by Parquet itself (pyarrow's ``CryptoFactory``): a fresh random
  256-bit data key per file, AES-GCM over every page and the footer, the data key wrapped by
  the master key and kept in the file's key material. Spark and any Parquet reader with a KMS
  client that serves the master key read a segment as plain Parquet.

Authenticity: the manifest's visible part (backup id, increment, run ids, every segment's key,
size and SHA-256) is the authenticated data of its sealed part, and the sealing key is derived
from the increment the object's *name* says. A manifest moved to another increment or
backup, a manifest of an older backup under the same id, or a changed field does not open;
a segment moved, swapped or replaced fails the authenticated SHA-256 and, once decrypted,
names another object than the one the manifest lists.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow.parquet.encryption as pqe
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from pydantic import BaseModel, ConfigDict, Field

from kbackup import __version__
from kbackup.core.errors import BackupIntegrityError, EncryptionKeyError, StorageError
from kbackup.format.documents import parse_json, validate
from kbackup.format.layout import check_backup_id
from kbackup.format.manifest import Manifest, SegmentEntry, parse_manifest, utc_now_iso
from kbackup.format.schema import FORMAT_NAME, FORMAT_VERSION
from kbackup.storage import KeyEncryptionKey, Storage

#: The manifest format version of an encrypted backup (plaintext backups stay at 1).
ENCRYPTED_FORMAT_VERSION = 2
#: The envelope described above; a manifest names it so that a later scheme can be told apart.
SCHEME = "kafka-backup-envelope-1"
KEYS_FOLDER = "keys"
KEYRING_FORMAT = "kafka-backup-keys"
KEYRING_FORMAT_VERSION = 1
_NONCE_BYTES = 12
_KEY_BYTES = 32
#: Parquet key-value metadata of an encrypted segment: the object it was written as. Inside the
#: encrypted footer, so it is authenticated with the file.
OBJECT_METADATA_KEY = b"kafka-backup.object"
#: The segment fields a manifest shows without the key (validate checks them); the rest is sealed.
VISIBLE_SEGMENT_FIELDS = (
    "key",
    "topic",
    "partition",
    "first_offset",
    "last_offset",
    "record_count",
    "size_bytes",
    "sha256",
)
#: The manifest fields shown without the key.
VISIBLE_MANIFEST_FIELDS = (
    "backup_id",
    "increment",
    "run_id",
    "previous_run_id",
    "tool_version",
    "started_at",
    "finished_at",
)


def keys_prefix(backup_id: str) -> str:
    return f"{check_backup_id(backup_id)}/{KEYS_FOLDER}/"


def keyring_key(backup_id: str, generation: int) -> str:
    return f"{keys_prefix(backup_id)}{generation:08d}.json"


def generation_of_keyring_key(key: str) -> int | None:
    name = key.rsplit("/", 1)[-1]
    if len(name) == 13 and name.endswith(".json") and name[:8].isdigit():
        return int(name[:8])
    return None


class KeyEncryptionKeyRef(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    #: ``file``, ``env`` or ``aws-kms``.
    type: str
    #: ``local:<hex>`` (an HMAC of the key, revealing nothing of it) or the KMS key id.
    key_id: str


class KeyringEntry(BaseModel):
    """``<backup id>/keys/<generation>.json``: the backup's root key, wrapped."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    format: str = KEYRING_FORMAT
    format_version: int = KEYRING_FORMAT_VERSION
    backup_id: str
    generation: int
    created_at: str
    tool_version: str
    scheme: str = SCHEME
    kek: KeyEncryptionKeyRef
    #: base64 of what the key-encryption key made of the root key.
    wrapped_key: str

    def to_json_bytes(self) -> bytes:
        return (json.dumps(self.model_dump(mode="json"), indent=2) + "\n").encode()


def wrap_context(backup_id: str, generation: int) -> dict[str, str]:
    """Bound into each wrap: a wrapped root key opens only for its backup and generation."""
    return {"kafka-backup:backup-id": backup_id, "kafka-backup:keyring-generation": str(generation)}


class _MasterKeyClient(pqe.KmsClient):  # type: ignore[misc]
    """Parquet's KMS client for our segments: wraps each file's data key with the master key,
    AES-GCM with the master key id as authenticated data, base64 of nonce, ciphertext and tag:
    the format of parquet-java's local wrapping (``InMemoryKMS``), so Spark opens the files with
    a KMS client that serves the master key."""

    def __init__(self, master_keys: Mapping[str, bytes]) -> None:
        super().__init__()
        self._master_keys = dict(master_keys)

    def _master_key(self, master_key_identifier: str) -> bytes:
        try:
            return self._master_keys[master_key_identifier]
        except KeyError:
            raise ValueError(
                f"segment encrypted with master key {master_key_identifier}, not this backup's"
            ) from None

    def wrap_key(self, key_bytes: bytes, master_key_identifier: str) -> str:
        nonce = os.urandom(_NONCE_BYTES)
        sealed = AESGCM(self._master_key(master_key_identifier)).encrypt(
            nonce, key_bytes, master_key_identifier.encode()
        )
        return base64.b64encode(nonce + sealed).decode()

    def unwrap_key(self, wrapped_key: str, master_key_identifier: str) -> bytes:
        raw = base64.b64decode(wrapped_key)
        return AESGCM(self._master_key(master_key_identifier)).decrypt(
            raw[:_NONCE_BYTES], raw[_NONCE_BYTES:], master_key_identifier.encode()
        )


@dataclass(frozen=True, eq=False, repr=False)
class BackupKeys:
    """An encrypted backup's root key, opened; derives every key the backup uses.

    Never printed: ``repr`` names the backup and the key-encryption key only. Picklable (Spark
    tasks get it), without the pyarrow factory, which each process makes again.
    """

    backup_id: str
    #: The keyring generation it was opened from.
    generation: int
    #: The key-encryption key that opened it (``KeyEncryptionKeyRef.key_id``).
    kek_id: str
    root_key: bytes = field(repr=False)

    def __repr__(self) -> str:
        return f"BackupKeys({self.backup_id}, generation {self.generation}, key {self.kek_id})"

    def __getstate__(self) -> dict[str, Any]:
        return {name: self.__dict__[name] for name in ("backup_id", "generation", "kek_id", "root_key")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def derive(self, purpose: str, *parts: str) -> bytes:
        """A key of its own per purpose and object (HKDF-SHA256 over the root key)."""
        info = "\0".join(("kafka-backup", purpose, self.backup_id, *parts)).encode()
        return HKDF(algorithm=hashes.SHA256(), length=_KEY_BYTES, salt=None, info=info).derive(self.root_key)

    @property
    def master_key_id(self) -> str:
        """The Parquet master key's id in each segment's key material (no ':' or ',', which
        parquet-java's key lists use as separators)."""
        return "kafka-backup-" + hashlib.sha256(self.backup_id.encode()).hexdigest()[:24]

    @property
    def master_key(self) -> bytes:
        return self.derive("parquet-master-key")

    def _factory(self) -> pqe.CryptoFactory:
        factory = self.__dict__.get("_crypto_factory")
        if factory is None:
            master_keys = {self.master_key_id: self.master_key}
            factory = pqe.CryptoFactory(lambda _config: _MasterKeyClient(master_keys))
            self.__dict__["_crypto_factory"] = factory
        return factory

    def file_encryption_properties(self) -> Any:
        """For one new segment file: a fresh data key each call."""
        return self._factory().file_encryption_properties(
            pqe.KmsConnectionConfig(),
            pqe.EncryptionConfiguration(
                footer_key=self.master_key_id,
                uniform_encryption=True,
                plaintext_footer=False,
                double_wrapping=False,
                encryption_algorithm="AES_GCM_V1",
                data_key_length_bits=256,
            ),
        )

    def file_decryption_properties(self) -> Any:
        return self._factory().file_decryption_properties(
            pqe.KmsConnectionConfig(), pqe.DecryptionConfiguration()
        )

    def manifest_aead(self, increment: int) -> AESGCM:
        return AESGCM(self.derive("manifest", str(increment)))


#: Spark settings that read an encrypted backup's segments with parquet-java's crypto factory. The
#: redaction keeps the key list out of Spark's UI and event logs.
SPARK_CRYPTO_FACTORY = "org.apache.parquet.crypto.keytools.PropertiesDrivenCryptoFactory"
SPARK_REDACTION_REGEX = r"(?i)secret|password|token|access[.]?key|encryption[.]key[.]list"


def spark_properties(keys: BackupKeys, kms_client_class: str) -> dict[str, str]:
    """What ``spark-submit --properties-file`` needs to read the backup's segments as Parquet.
    Holds the Parquet master key: a secret (it opens every segment, not the manifests)."""
    return {
        "spark.hadoop.parquet.crypto.factory.class": SPARK_CRYPTO_FACTORY,
        "spark.hadoop.parquet.encryption.kms.client.class": kms_client_class,
        "spark.hadoop.parquet.encryption.key.list": (
            f"{keys.master_key_id}:{base64.b64encode(keys.master_key).decode()}"
        ),
        "spark.redaction.regex": SPARK_REDACTION_REGEX,
    }


# --- the keyring -------------------------------------------------------------------------------


def keyring_generations(storage: Storage, backup_id: str) -> list[tuple[int, str]]:
    found = []
    for info in storage.list(keys_prefix(backup_id)):
        generation = generation_of_keyring_key(info.key)
        if generation is not None:
            found.append((generation, info.key))
    return sorted(found)


def is_encrypted(storage: Storage, backup_id: str) -> bool:
    return bool(keyring_generations(storage, backup_id))


def read_keyring_entry(storage: Storage, backup_id: str, generation: int, key: str) -> KeyringEntry:
    return parse_keyring_entry(storage.get_bytes(key), key, backup_id, generation)


def parse_keyring_entry(data: bytes, key: str, backup_id: str, generation: int) -> KeyringEntry:
    """The keyring object ``key`` of ``generation`` of ``backup_id``, from its bytes, checked."""

    def invalid(problem: str) -> BackupIntegrityError:
        return BackupIntegrityError(f"keyring {key} is not a valid keyring entry: {problem}")

    entry = validate(KeyringEntry, parse_json(data, invalid), invalid)
    if entry.format != KEYRING_FORMAT or entry.format_version > KEYRING_FORMAT_VERSION:
        raise BackupIntegrityError(
            f"keyring {key} has format {entry.format!r} version {entry.format_version}, "
            f"this kafka-backup reads {KEYRING_FORMAT!r} up to {KEYRING_FORMAT_VERSION}",
            hint="upgrade kafka-backup to read this backup",
        )
    if entry.backup_id != backup_id or entry.generation != generation:
        raise BackupIntegrityError(
            f"keyring {key} says generation {entry.generation} of backup {entry.backup_id} "
            "(moved or replaced)"
        )
    return entry


def _open_entry(entry: KeyringEntry, kek: KeyEncryptionKey, key: str) -> BackupKeys:
    try:
        wrapped = base64.b64decode(entry.wrapped_key, validate=True)
    except (binascii.Error, ValueError):
        raise BackupIntegrityError(f"keyring {key}: wrapped_key is not base64") from None
    root = kek.unwrap(
        wrapped, wrap_context(entry.backup_id, entry.generation), what=f"the backup key in {key}"
    )
    if len(root) != _KEY_BYTES:
        raise BackupIntegrityError(f"keyring {key} holds a key of {len(root)} bytes, not {_KEY_BYTES}")
    return BackupKeys(entry.backup_id, entry.generation, entry.kek.key_id, root)


def _could_open(entry: KeyringEntry, kek: KeyEncryptionKey) -> bool:
    """Whether to try: a local key only opens what its own id wrapped; KMS decides for KMS keys
    (an alias and an ARN can name the same key)."""
    if kek.kind == "aws-kms":
        return entry.kek.type == "aws-kms"
    return entry.kek.type != "aws-kms" and entry.kek.key_id == kek.key_id


def unlock(storage: Storage, backup_id: str, kek: KeyEncryptionKey | None = None) -> BackupKeys | None:
    """The backup's keys, opened with the storage's key-encryption key; None if the backup is not
    encrypted. The newest keyring generation the key opens wins: after a re-key that was stopped
    before it removed the older generation, both the old and the new key open the backup."""
    generations = keyring_generations(storage, backup_id)
    if not generations:
        return None
    kek = kek or storage.key_encryption_key
    entries: list[tuple[str, KeyringEntry]] = []
    for generation, key in reversed(generations):
        try:
            entries.append((key, read_keyring_entry(storage, backup_id, generation, key)))
        except StorageError:
            if storage.exists(key):
                raise
            # removed by a re-key that committed a newer generation meanwhile
    if not entries:
        raise StorageError(
            f"backup {backup_id}: every keyring generation disappeared while it was read",
            hint="a re-key or prune is running on this backup; run again when it is done",
            retryable=True,
        )
    named = ", ".join(sorted({f"{entry.kek.type} {entry.kek.key_id}" for _, entry in entries}))
    if kek is None:
        raise EncryptionKeyError(
            f"backup {backup_id} in {storage.url} is encrypted (its key: {named}), and no key is configured",
            hint="set storage.encryption in the config, or pass --encryption-key file:PATH, env:NAME "
            "or kms:KEY_ID",
        )
    refused: EncryptionKeyError | None = None
    for key, entry in entries:
        if not _could_open(entry, kek):
            continue
        try:
            return _open_entry(entry, kek, key)
        except EncryptionKeyError as exc:
            if exc.retryable:
                raise
            refused = exc
    if refused is not None:
        raise refused
    raise EncryptionKeyError(
        f"backup {backup_id} in {storage.url} is encrypted with {named}, not with the configured "
        f"{kek.source} ({kek.key_id})",
        hint="configure the key the backup names (after a re-key, the new one)",
    )


def write_keyring_entry(
    storage: Storage, backup_id: str, generation: int, root_key: bytes, kek: KeyEncryptionKey
) -> bool:
    """Wrap the root key for ``generation`` and store it create-if-absent; False if it exists."""
    wrapped = kek.wrap(root_key, wrap_context(backup_id, generation))
    entry = KeyringEntry(
        backup_id=backup_id,
        generation=generation,
        created_at=utc_now_iso(),
        tool_version=__version__,
        kek=KeyEncryptionKeyRef(type=kek.kind, key_id=kek.key_id),
        wrapped_key=base64.b64encode(wrapped).decode(),
    )
    return storage.put_bytes_if_absent(keyring_key(backup_id, generation), entry.to_json_bytes())


def keys_for_new_backup(storage: Storage, backup_id: str) -> BackupKeys | None:
    """The keys a backup run writes with: the keyring's if the backup has one (a run that died
    before its first manifest left it), else a new root key under generation 1; None when no
    key is configured (the backup is not encrypted)."""
    kek = storage.key_encryption_key
    if kek is None:
        return None
    existing = unlock(storage, backup_id)
    if existing is not None:
        return existing
    root = os.urandom(_KEY_BYTES)
    if not write_keyring_entry(storage, backup_id, 1, root, kek):
        found = unlock(storage, backup_id)  # another run created it first
        assert found is not None
        return found
    return BackupKeys(backup_id, 1, kek.key_id, root)


# --- manifests ---------------------------------------------------------------------------------


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def _visible_segment(segment: SegmentEntry) -> dict[str, Any]:
    dumped = segment.model_dump(mode="json")
    return {name: dumped[name] for name in VISIBLE_SEGMENT_FIELDS}


def seal_manifest(manifest: Manifest, keys: BackupKeys) -> bytes:
    """A version 2 manifest: the visible part, and the whole manifest sealed with it as
    authenticated data."""
    # The sealed part is a version 1 manifest, also when it is a manifest read back from this
    # backup (which readers mark version 2) and sealed again as an erase's revision.
    dumped = {**manifest.document(), "format_version": FORMAT_VERSION}
    visible: dict[str, Any] = {"format": FORMAT_NAME, "format_version": ENCRYPTED_FORMAT_VERSION}
    visible.update({name: dumped[name] for name in VISIBLE_MANIFEST_FIELDS})
    visible["encryption"] = {"scheme": SCHEME, "keyring": f"{KEYS_FOLDER}/"}
    visible["segments"] = [_visible_segment(segment) for segment in manifest.segments]
    # One fresh random nonce under a key used for this increment only.
    nonce = os.urandom(_NONCE_BYTES)
    sealed = keys.manifest_aead(manifest.increment).encrypt(nonce, _canonical(dumped), _canonical(visible))
    document = {**visible, "sealed": base64.b64encode(nonce + sealed).decode()}
    return (json.dumps(document, indent=2) + "\n").encode()


@dataclass(frozen=True)
class SealedManifest:
    """What an encrypted manifest shows without the key."""

    object_name: str
    backup_id: str
    increment: int
    run_id: str
    previous_run_id: str | None
    finished_at: str
    segments: list[SegmentEntry]


def _load_json(data: bytes, object_name: str) -> dict[str, Any]:
    raw = parse_json(
        data, lambda problem: BackupIntegrityError(f"manifest {object_name} is not valid JSON: {problem}")
    )
    if not isinstance(raw, dict):
        raise BackupIntegrityError(f"manifest {object_name} is not a JSON object")
    return raw


class _VisibleSegment(SegmentEntry):
    """A segment as a sealed manifest shows it: its timestamps are sealed."""

    min_timestamp: int = -1
    max_timestamp: int = -1


class _VisibleManifest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    backup_id: str
    increment: int
    run_id: str
    previous_run_id: str | None = None
    finished_at: str = ""
    segments: list[_VisibleSegment] = Field(default_factory=list)


def read_sealed_manifest(data: bytes, object_name: str) -> SealedManifest:
    """The visible part of an encrypted manifest (unauthenticated: without the key nothing is)."""
    raw = _load_json(data, object_name)
    if raw.get("format") != FORMAT_NAME or raw.get("format_version") != ENCRYPTED_FORMAT_VERSION:
        raise BackupIntegrityError(f"manifest {object_name} is not an encrypted kafka-backup manifest")
    visible = validate(
        _VisibleManifest,
        raw,
        lambda problem: BackupIntegrityError(f"manifest {object_name} is malformed at {problem}"),
    )
    segments = [SegmentEntry.model_validate(segment.model_dump()) for segment in visible.segments]
    return SealedManifest(
        object_name=object_name, segments=segments, **visible.model_dump(exclude={"segments"})
    )


def open_manifest(data: bytes, object_name: str, increment: int, keys: BackupKeys | None) -> Manifest:
    """A manifest of either version, checked. ``increment`` is the one its object name says: an
    encrypted manifest opens only under its own name."""
    raw = _load_json(data, object_name)
    version = raw.get("format_version")
    if isinstance(version, int) and version > ENCRYPTED_FORMAT_VERSION and raw.get("format") == FORMAT_NAME:
        raise BackupIntegrityError(
            f"manifest {object_name} has format version {version}, this kafka-backup reads versions up "
            f"to {ENCRYPTED_FORMAT_VERSION}",
            hint="upgrade kafka-backup to read this backup",
        )
    if version != ENCRYPTED_FORMAT_VERSION:
        if keys is not None and raw.get("format") == FORMAT_NAME and version == 1:
            raise BackupIntegrityError(
                f"manifest {object_name} is not encrypted, in a backup that is (replaced?)",
                hint="restore the backup's own manifest; 'kafka-backup validate' checks the rest",
            )
        return parse_manifest(data, object_name)
    if keys is None:
        raise EncryptionKeyError(
            f"manifest {object_name} is encrypted, but its backup has no keyring "
            f"({keys_prefix(str(raw.get('backup_id', '?')))} is missing or was removed)",
            hint="restore the backup's keys/ objects; without them the backup cannot be read",
        )
    scheme = (raw.get("encryption") or {}).get("scheme") if isinstance(raw.get("encryption"), dict) else None
    if scheme != SCHEME:
        raise BackupIntegrityError(
            f"manifest {object_name} uses encryption scheme {scheme!r}; this kafka-backup reads {SCHEME!r}",
            hint="upgrade kafka-backup to read this backup",
        )
    visible = {name: value for name, value in raw.items() if name != "sealed"}
    try:
        sealed = base64.b64decode(str(raw.get("sealed", "")), validate=True)
        plaintext = keys.manifest_aead(increment).decrypt(
            sealed[:_NONCE_BYTES], sealed[_NONCE_BYTES:], _canonical(visible)
        )
    except (InvalidTag, ValueError, binascii.Error):
        raise BackupIntegrityError(
            f"manifest {object_name} fails authentication: it was changed, or it belongs to another "
            "increment or backup",
            hint="restore the backup's own manifest from a copy; nothing was read from this one",
        ) from None
    manifest = parse_manifest(plaintext, object_name).model_copy(
        update={"format_version": ENCRYPTED_FORMAT_VERSION}
    )
    shown = [_visible_segment(segment) for segment in manifest.segments]
    dumped = manifest.model_dump(mode="json")
    if shown != visible.get("segments") or any(
        visible.get(name) != dumped[name] for name in VISIBLE_MANIFEST_FIELDS
    ):
        raise BackupIntegrityError(f"manifest {object_name}: its visible part disagrees with its sealed part")
    return manifest


# --- other sealed documents (cluster-metadata files, erasure records) -------------------------


def seal_document(aead: AESGCM, document: Mapping[str, Any], visible: Mapping[str, Any]) -> bytes:
    """A document's bytes as stored sealed: its ``visible`` fields, and the whole ``document``
    encrypted under ``aead`` (a fresh random nonce) with the visible fields as authenticated data."""
    nonce = os.urandom(_NONCE_BYTES)
    sealed = aead.encrypt(nonce, _canonical(dict(document)), _canonical(dict(visible)))
    return (
        json.dumps({**visible, "sealed": base64.b64encode(nonce + sealed).decode()}, indent=2) + "\n"
    ).encode()


def open_document(raw: Mapping[str, Any], aead: AESGCM, what: str, belongs_to: str) -> dict[str, Any]:
    """The document a stored sealed object (``raw``, parsed) holds, authenticated; ``what`` names
    the object in errors, ``belongs_to`` what a moved copy would belong to (``increment or backup``)."""
    try:
        sealed = base64.b64decode(str(raw["sealed"]), validate=True)
        visible = {key: value for key, value in raw.items() if key != "sealed"}
        plaintext = aead.decrypt(sealed[:_NONCE_BYTES], sealed[_NONCE_BYTES:], _canonical(visible))
    except (InvalidTag, ValueError, binascii.Error):
        raise BackupIntegrityError(
            f"{what} fails authentication: it was changed, or it belongs to another {belongs_to}"
        ) from None
    opened = parse_json(plaintext, lambda problem: BackupIntegrityError(f"{what}: {problem}"))
    if not isinstance(opened, dict):
        raise BackupIntegrityError(f"{what} does not seal a JSON object")
    return opened


# --- segments ----------------------------------------------------------------------------------


def check_segment_identity(
    metadata: Mapping[bytes, bytes] | None, expected_key: str, object_name: str
) -> None:
    """An encrypted segment names the object it was written as (authenticated with its footer)."""
    written_as = (metadata or {}).get(OBJECT_METADATA_KEY, b"").decode(errors="replace")
    if written_as != expected_key:
        raise BackupIntegrityError(
            f"segment {object_name} was written as {written_as or 'an unnamed object'} (moved or swapped)",
            hint="restore the backup's own objects from a copy",
        )
