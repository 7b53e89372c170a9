"""The three-phase restore's state file: each finished phase and its result, so a re-run continues.

A JSON document ``{"run_key": ..., "phases": {name: {"finished_at", "seconds", ...details}}}``
written atomically (a scratch file renamed over it) after each phase. A file of another
``run_key`` (another backup, target or settings) is ignored: that run starts from phase 1.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from kbackup.core.errors import ConfigError
from kbackup.format.documents import parse_json, validate
from kbackup.format.manifest import utc_now_iso


class _Phase(BaseModel):
    """A finished phase: when, how long, and the phase's own details (kept as they are)."""

    model_config = ConfigDict(extra="allow")

    finished_at: str = ""
    seconds: float = 0.0


class _State(BaseModel):
    model_config = ConfigDict(extra="allow")

    run_key: str
    phases: dict[str, _Phase]


class StateFile:
    """The recorded phases of one three-phase restore, written atomically after each phase."""

    def __init__(self, path: Path, run_key: str) -> None:
        self.path = path
        self.run_key = run_key
        self.data: dict[str, Any] = {"run_key": run_key, "phases": {}}
        if path.exists():
            try:
                raw = path.read_bytes()
            except (OSError, ValueError) as exc:  # a folder, no permission, a NUL in the name
                raise _damaged(str(path), str(exc)) from None
            self.data = parse_state(raw, str(path), run_key)

    def done(self, phase: str) -> dict[str, Any] | None:
        result: dict[str, Any] | None = self.data["phases"].get(phase)
        return result

    def record(self, phase: str, seconds: float, details: dict[str, Any]) -> None:
        self.data["phases"][phase] = {"finished_at": utc_now_iso(), "seconds": seconds, **details}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        scratch = self.path.with_suffix(".tmp")
        scratch.write_text(json.dumps(self.data, indent=2) + "\n")
        scratch.replace(self.path)


def _damaged(name: str, problem: str) -> ConfigError:
    return ConfigError(
        f"three-phase state file {name} is damaged: {problem}",
        hint="remove it to start the three-phase restore from phase 1 (the restore itself still "
        "continues from its progress on the target)",
    )


def parse_state(raw: bytes, name: str, run_key: str) -> dict[str, Any]:
    """The recorded phases of a state file's bytes (``name`` names it in errors); none when the
    file is of another ``run_key``."""
    loaded = parse_json(raw, lambda problem: _damaged(name, f"not JSON: {problem}"))
    if not isinstance(loaded, dict):
        raise _damaged(name, "not a JSON object")
    if loaded.get("run_key") != run_key:
        return {"run_key": run_key, "phases": {}}
    state = validate(_State, loaded, lambda problem: _damaged(name, f"malformed at {problem}"))
    return state.model_dump()
