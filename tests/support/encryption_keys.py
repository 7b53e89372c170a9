"""Encryption keys made with ``kafka-backup keygen`` for the tests, and the key spec the CLI takes for
them.
"""

from __future__ import annotations

from pathlib import Path

from kbackup.cli.main import run
from kbackup.core.config import EncryptionSettings


def new_key(folder: Path, name: str = "backup.key") -> EncryptionSettings:
    path = folder / name
    assert run(["keygen", "--output", str(path)]) == 0
    return EncryptionSettings(key_file=str(path))


def spec(settings: EncryptionSettings) -> str:
    if settings.key_file:
        return f"file:{settings.key_file}"
    if settings.key_env:
        return f"env:{settings.key_env}"
    return f"kms:{settings.kms_key_id}"
