"""The three-phase restore's state file: each finished phase and its result, so a re-run continues.

A JSON document ``{"run_key": ..., "phases": {name: {"finished_at", "seconds", ...details}}}``
written atomically (a scratch file renamed over it) after each phase. A file of another
``run_key`` (another backup, target or settings) is ignored: that run starts from phase 1.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kbackup.core.errors import ConfigError
from kbackup.format.manifest import utc_now_iso


class StateFile:
    """The recorded phases of one three-phase restore, written atomically after each phase."""

    def __init__(self, path: Path, run_key: str) -> None:
        self.path = path
        self.run_key = run_key
        self.data: dict[str, Any] = {"run_key": run_key, "phases": {}}
        if path.exists():
            try:
                loaded = json.loads(path.read_text())
            except (OSError, json.JSONDecodeError) as exc:
                raise ConfigError(
                    f"three-phase state file {path} is damaged: {exc}",
                    hint="remove it to start the three-phase restore from phase 1 (the restore itself still "
                    "continues from its progress on the target)",
                ) from None
            if loaded.get("run_key") == run_key:
                self.data = loaded

    def done(self, phase: str) -> dict[str, Any] | None:
        result: dict[str, Any] | None = self.data["phases"].get(phase)
        return result

    def record(self, phase: str, seconds: float, details: dict[str, Any]) -> None:
        self.data["phases"][phase] = {"finished_at": utc_now_iso(), "seconds": seconds, **details}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        scratch = self.path.with_suffix(".tmp")
        scratch.write_text(json.dumps(self.data, indent=2) + "\n")
        scratch.replace(self.path)
