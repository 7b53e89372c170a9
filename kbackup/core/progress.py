"""Progress bars on a terminal, silence in CI and pipes.

Stage code reports progress through :class:`Progress` whatever the output is;
bars are drawn only when stderr is a terminal, ``CI`` is not set and the
command was not asked for ``--json`` / ``--no-progress``.
"""

from __future__ import annotations

import os
import sys
from types import TracebackType
from typing import Any

_forced_off = False


def disable_progress() -> None:
    """Turn bars off for this process (``--json``, ``--no-progress``)."""
    global _forced_off
    _forced_off = True


def progress_enabled() -> bool:
    if _forced_off or os.environ.get("CI") or os.environ.get("KBACKUP_NO_PROGRESS"):
        return False
    return sys.stderr.isatty()


class ProgressTask:
    """One bar: a unit of work with an optional known total."""

    def __init__(self, owner: Progress, task_id: Any) -> None:
        self._owner = owner
        self._task_id = task_id

    def advance(self, amount: float = 1) -> None:
        if self._owner.bars is not None:
            self._owner.bars.advance(self._task_id, amount)

    def update(self, *, total: float | None = None, completed: float | None = None) -> None:
        if self._owner.bars is not None:
            self._owner.bars.update(self._task_id, total=total, completed=completed)


class Progress:
    """Context manager holding zero or more bars."""

    def __init__(self, enabled: bool | None = None) -> None:
        self.enabled = progress_enabled() if enabled is None else enabled
        self.bars: Any = None
        #: Re-entrant: a stage may enter the display its caller already holds (the restore
        #: phase of a three-phase run); only the outermost exit takes the bars down.
        self._depth = 0

    def __enter__(self) -> Progress:
        self._depth += 1
        if self.enabled and self.bars is None:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )
            from rich.progress import Progress as RichProgress

            self.bars = RichProgress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                transient=False,
            )
            self.bars.__enter__()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._depth -= 1
        if self._depth == 0 and self.bars is not None:
            self.bars.__exit__(exc_type, exc, tb)
            self.bars = None

    def task(self, description: str, total: float | None = None) -> ProgressTask:
        task_id = self.bars.add_task(description, total=total) if self.bars is not None else None
        return ProgressTask(self, task_id)
