"""The files an increment's manifest names besides its segments: cluster metadata, group history.

Each is one JSON document of a format and version of its own (docs/format.md, "Cluster metadata"
and "Group history"), naming the backup, increment and run it belongs to; the manifest names it
by key, size and SHA-256. In an encrypted backup it shows only which file it is and seals the
whole document under a key HKDF derives per purpose and increment, with the visible fields as
authenticated data. Written and read here, the same way for each kind.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from kbackup.core.errors import BackupIntegrityError, EncryptionKeyError
from kbackup.format.documents import validate, versioned_object
from kbackup.format.encryption import SCHEME, BackupKeys, open_document, seal_document
from kbackup.format.layout import object_key
from kbackup.format.manifest import Manifest, ManifestModel
from kbackup.storage import Storage

#: The fields a sealed file shows: which file it is, never what it holds.
VISIBLE_FIELDS = ("format", "format_version", "backup_id", "increment", "run_id")


class IncrementDocument(ManifestModel):
    """What every such file says of itself: its format and version, and whose it is."""

    format: str
    format_version: int
    backup_id: str
    increment: int
    run_id: str


Document = TypeVar("Document", bound=IncrementDocument)


class StoredFile(Protocol):
    """How a manifest names such a file."""

    @property
    def key(self) -> str: ...
    @property
    def size_bytes(self) -> int: ...
    @property
    def sha256(self) -> str: ...


@dataclass(frozen=True)
class IncrementFileKind:
    """One kind of file: its name in messages, its format and version, its key's HKDF purpose."""

    #: ``cluster metadata``, ``group history``: how errors name a file of this kind.
    what: str
    format: str
    version: int
    #: The HKDF purpose of its key (with the increment number): docs/format.md, "Keys".
    purpose: str
    #: Plain files indented (a person reads them) or compact (a file of thousands of readings).
    indent: int | None = 2

    def _aead(self, keys: BackupKeys, increment: int) -> AESGCM:
        return AESGCM(keys.derive(self.purpose, str(increment)))

    def encode(self, document: IncrementDocument, keys: BackupKeys | None) -> bytes:
        """The file's bytes: the document, or for an encrypted backup its identity and the whole
        document sealed with that identity as authenticated data."""
        dumped = document.model_dump(mode="json")
        if keys is None:
            separators = None if self.indent is not None else (",", ":")
            return (json.dumps(dumped, indent=self.indent, separators=separators) + "\n").encode()
        visible = {name: dumped[name] for name in VISIBLE_FIELDS}
        sealed_with = self._aead(keys, document.increment)
        return seal_document(sealed_with, dumped, {**visible, "encryption": {"scheme": SCHEME}})

    def parse(
        self,
        model: type[Document],
        data: bytes,
        ref: StoredFile,
        *,
        backup_id: str,
        increment: int,
        run_id: str,
        keys: BackupKeys | None,
    ) -> Document:
        """The file a manifest names (``ref``), checked against the manifest (size, SHA-256,
        identity); every problem is one BackupIntegrityError naming it."""
        name = f"{backup_id}/{ref.key}"
        if len(data) != ref.size_bytes or hashlib.sha256(data).hexdigest() != ref.sha256:
            raise BackupIntegrityError(
                f"{self.what} {name} does not match its manifest (size or SHA-256 differs)",
                hint="restore the object from a copy; 'kafka-backup validate' checks the rest of the backup",
            )
        raw = self._document(data, name, increment, keys)
        document = validate(
            model, raw, lambda problem: BackupIntegrityError(f"{self.what} {name} is malformed at {problem}")
        )
        if (document.backup_id, document.increment, document.run_id) != (backup_id, increment, run_id):
            raise BackupIntegrityError(
                f"{self.what} {name} belongs to backup {document.backup_id} increment {document.increment} "
                f"(run {document.run_id}), not to the manifest that names it"
            )
        return document

    def read(
        self,
        model: type[Document],
        storage: Storage,
        manifest: Manifest,
        ref: StoredFile | None,
        keys: BackupKeys | None,
    ) -> Document | None:
        """The file ``manifest`` names as ``ref``, read and checked (None: it names none)."""
        if ref is None:
            return None
        data = storage.get_bytes(object_key(manifest.backup_id, ref.key))
        return self.parse(
            model,
            data,
            ref,
            backup_id=manifest.backup_id,
            increment=manifest.increment,
            run_id=manifest.run_id,
            keys=keys,
        )

    def _document(self, data: bytes, name: str, increment: int, keys: BackupKeys | None) -> dict[str, Any]:
        what = f"{self.what} {name}"
        raw = versioned_object(data, what, expected_format=self.format, max_version=self.version)
        if "sealed" not in raw:
            if keys is not None:
                raise BackupIntegrityError(f"{what} is not encrypted, in a backup that is (replaced?)")
            return raw
        if keys is None:
            raise EncryptionKeyError(f"{what} is encrypted: configure the backup's key to read it")
        return open_document(raw, self._aead(keys, increment), what, "increment or backup")
