"""The damaged backups of tests/fixtures/damaged_backups, copied for a test, and the restore command
line that reads them.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from kbackup.sandbox.kafka import LocalKafkaCluster

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "damaged_backups"


#: case -> what validate and restore must say about it, and the object it must name.
DAMAGE = {
    "truncated-segment": ("has 3005 bytes", "nightly/data/orders/0/00000000000000000010-"),
    "flipped-byte": ("SHA-256", "nightly/data/orders/0/00000000000000000020-"),
    "missing-segment": ("is missing", "nightly/data/orders/0/00000000000000000020-"),
    "unknown-version": ("format version 99", "nightly/manifests/00000000.json"),
    "bad-json": ("is not valid JSON", "nightly/manifests/00000000.json"),
}


def copy_of(case: str, tmp_path: Path) -> Path:
    store = tmp_path / case
    shutil.copytree(FIXTURES / case, store)
    return store


def restore_args(store: Path, cluster: LocalKafkaCluster, topic: str) -> list[str]:
    return ["restore", "-p", str(store), "--backup-id", "nightly", "-b", cluster.bootstrap_servers,
            "--topic-mapping", f"orders={topic}", "--exactly-once"]  # fmt: skip
