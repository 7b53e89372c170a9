"""Where kafka-backup keeps what it downloads or leaves for the operator (Kafka jars, Spark's Ivy cache
and logs): outside the repository and the working directory."""

from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """``$KBACKUP_CACHE_DIR``, else ``$XDG_CACHE_HOME/kafka-backup``, else ``~/.cache/kafka-backup``."""
    explicit = os.environ.get("KBACKUP_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "kafka-backup"
