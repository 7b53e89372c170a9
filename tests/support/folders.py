"""What a folder holds, to check that a command changed nothing, or to look for plaintext in it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path


def folder_bytes(root: Path) -> Iterator[tuple[str, bytes]]:
    for path in sorted(root.rglob("*")):
        if path.is_file():
            yield str(path.relative_to(root)), path.read_bytes()


def files_under(root: Path, *, leave_out: str = "") -> list[str]:
    """Every path below ``root`` (relative): what a failing command must not have changed."""
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.name != leave_out)
