"""The object stores of the storage benchmark, each on loopback in its own process: moto's S3 server,
fake-gcs-server (Cloud Storage) and Azurite's blob service (Azure), with one bucket (container) made
in each, and the ``storage:`` section of a config that points at a prefix in it.

The emulators are the tests' own (``kbackup.sandbox.emulators``, at the same pinned versions):
``make fake-gcs`` builds fake-gcs-server and ``make azurite`` installs Azurite into the kafka-backup
cache folder (``make bench`` runs both).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from kbackup.sandbox.emulators import Azurite, GcsServer, S3Server

#: The bucket (container) each store holds the benchmark's backups in.
BUCKET = "kbackup-bench"
#: A store's ``storage:`` section for a prefix in its bucket.
Section = Callable[[str], dict[str, Any]]


def _started(stack: ExitStack, emulator: S3Server | GcsServer | Azurite) -> Section:
    stack.enter_context(emulator)
    emulator.create_bucket(BUCKET)
    return lambda prefix: emulator.storage_settings(BUCKET, prefix)


@contextmanager
def emulated_stores(work: Path) -> Iterator[dict[str, Section]]:
    """S3, Cloud Storage and Azure emulators running, a bucket in each: their sections by store name."""
    (work / "fake-gcs").mkdir()
    (work / "azurite").mkdir()
    with ExitStack() as stack:
        yield {
            "S3 (moto server)": _started(stack, S3Server(log_path=work / "moto.log")),
            # Objects on disk, as Azurite keeps them: a benchmark's backups would fill memory.
            "GCS (fake-gcs-server)": _started(
                stack, GcsServer(log_path=work / "fake-gcs.log", data_folder=work / "fake-gcs")
            ),
            "Azure (Azurite)": _started(stack, Azurite(folder=work / "azurite")),
        }
