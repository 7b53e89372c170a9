"""One storage backend of four (a folder, moto's S3, fake-gcs-server, Azurite) for a test that runs
on each: the ``storage:`` section of a fresh location, and its objects read (or replaced) through the
cloud's own client, past kafka-backup's storage layer, to see what is really at rest.

A test parametrized over :data:`BACKENDS` calls :func:`storage_backend` with its ``request``: only
the emulator that backend needs is started (``request.getfixturevalue``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kbackup.core.config import StorageSettings
from kbackup.sandbox.emulators import AZURITE_ACCOUNT_KEY, S3_SECRET_KEY, Azurite, GcsServer, S3Server
from kbackup.storage import Storage, open_storage
from tests.conftest import TEST_BUCKET as BUCKET
from tests.support.folders import folder_bytes

#: The four backends, as test ids.
BACKENDS = ("folder", "s3", "gcs", "azure")
#: The three object stores (each on its emulator).
CLOUD_BACKENDS = BACKENDS[1:]
#: The session fixture that starts each cloud backend's emulator (tests/conftest.py).
EMULATOR_FIXTURES = {"s3": "s3_server", "gcs": "gcs_server", "azure": "azurite"}


@dataclass
class StorageBackend:
    """A fresh location on one backend: ``section`` is its ``storage:`` config section (plain values,
    secrets included, as a config file holds them)."""

    name: str
    section: dict[str, Any]
    #: The folder (folder backend) or the emulator (s3_server, gcs_server, azurite fixture).
    place: Path | S3Server | GcsServer | Azurite
    #: The object name prefix of the location in its bucket ("" for a folder).
    prefix: str

    def settings(self, **changes: Any) -> StorageSettings:
        """The section validated, with ``changes`` (``encryption=...``) on top."""
        return StorageSettings.model_validate({**self.section, **changes})

    def storage(self) -> Storage:
        """The location opened through kafka-backup's storage layer."""
        return open_storage(self.settings())

    @property
    def secrets(self) -> list[str]:
        """The credential of the section that must never be printed (none for a folder or GCS's
        anonymous emulator access)."""
        return {"s3": [S3_SECRET_KEY], "azure": [AZURITE_ACCOUNT_KEY]}.get(self.name, [])

    def objects(self) -> dict[str, bytes]:
        """Every object of the location, name (relative to it) to bytes, as the store itself holds
        them: read with the cloud's own client, never through kafka-backup."""
        return dict(self._stored())

    def _stored(self) -> Iterator[tuple[str, bytes]]:
        place, prefix = self.place, f"{self.prefix}/"
        if isinstance(place, Path):
            yield from folder_bytes(place)
        elif isinstance(place, S3Server):
            client = place.client()
            for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix):
                for item in page.get("Contents", []):
                    body = client.get_object(Bucket=BUCKET, Key=item["Key"])["Body"].read()
                    yield item["Key"][len(prefix) :], body
        elif isinstance(place, GcsServer):
            for blob in place.client().list_blobs(BUCKET, prefix=prefix, retry=None):
                yield blob.name[len(prefix) :], blob.download_as_bytes(retry=None)
        else:
            container = place.service().get_container_client(BUCKET)
            for blob in container.list_blobs(name_starts_with=prefix):
                yield blob.name[len(prefix) :], container.download_blob(blob.name).readall()

    def replace_object(self, name: str, data: bytes) -> None:
        """Overwrite one object (``name`` relative to the location) with the cloud's own client: what
        an attacker with write access to the bucket does."""
        place, key = self.place, f"{self.prefix}/{name}"
        if isinstance(place, Path):
            (place / name).write_bytes(data)
        elif isinstance(place, S3Server):
            place.client().put_object(Bucket=BUCKET, Key=key, Body=data)
        elif isinstance(place, GcsServer):
            place.client().bucket(BUCKET).blob(key).upload_from_string(data, retry=None)
        else:
            place.service().get_blob_client(BUCKET, key).upload_blob(data, overwrite=True)


def storage_backend(name: str, request: pytest.FixtureRequest, tmp_path: Path, prefix: str) -> StorageBackend:
    """A fresh location called ``prefix`` on backend ``name`` (one of :data:`BACKENDS`): a folder
    below ``tmp_path``, or a prefix in the test bucket of the emulator, started on first use."""
    if name == "folder":
        folder = tmp_path / prefix
        return StorageBackend(name, {"url": str(folder)}, folder, "")
    if name not in EMULATOR_FIXTURES:
        raise ValueError(f"no storage backend {name!r}: one of {', '.join(BACKENDS)}")
    emulator: S3Server | GcsServer | Azurite = request.getfixturevalue(EMULATOR_FIXTURES[name])
    return StorageBackend(name, emulator.storage_settings(BUCKET, prefix), emulator, prefix)
