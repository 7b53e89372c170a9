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
    """One bar: a unit of work with an optional known total, counted in ``unit`` (records, segments,
    ...), optionally with the bytes it moved. Used as a context manager, the bar stops (its timer
    and rate freeze) when the phase it measures ends."""

    def __init__(self, owner: Progress, task_id: Any) -> None:
        self._owner = owner
        self._task_id = task_id

    def advance(self, amount: float = 1, *, data_bytes: int = 0) -> None:
        bars = self._owner.bars
        if bars is not None:
            if data_bytes:
                moved = bars.tasks[self._task_index()].fields.get("data_bytes", 0) + data_bytes
                bars.update(self._task_id, advance=amount, data_bytes=moved)
            else:
                bars.advance(self._task_id, amount)

    def update(self, *, total: float | None = None, completed: float | None = None) -> None:
        if self._owner.bars is not None:
            self._owner.bars.update(self._task_id, total=total, completed=completed)

    def close(self) -> None:
        """The work ended (done, failed or interrupted): the bar stays where it got to, its clock stops."""
        if self._owner.bars is not None:
            self._owner.bars.stop_task(self._task_id)

    def _task_index(self) -> int:
        bars = self._owner.bars
        return next(index for index, task in enumerate(bars.tasks) if task.id == self._task_id)

    def __enter__(self) -> ProgressTask:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def rate_text(count: float, seconds: float | None, unit: str, data_bytes: int) -> str:
    """``12,345 records/s, 11.8 MiB/s``: the average since the bar started ('' before one second)."""
    if not seconds or seconds < 1:
        return ""
    text = f"{count / seconds:,.0f} {unit}/s"
    if data_bytes:
        text += f", {data_bytes / seconds / 2**20:,.1f} MiB/s"
    return text


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
                ProgressColumn,
                Task,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )
            from rich.progress import Progress as RichProgress
            from rich.text import Text

            class RateColumn(ProgressColumn):
                """Records (or other units) per second, and MiB/s where the bar counts bytes too."""

                def render(self, task: Task) -> Text:
                    return Text(
                        rate_text(
                            task.completed,
                            task.elapsed,
                            task.fields.get("unit", "items"),
                            task.fields.get("data_bytes", 0),
                        ),
                        style="progress.data.speed",
                    )

            self.bars = RichProgress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                RateColumn(),
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

    def task(self, description: str, total: float | None = None, *, unit: str = "items") -> ProgressTask:
        """A new bar counting ``unit`` (shown in its rate: ``records/s``)."""
        task_id = self.bars.add_task(description, total=total, unit=unit) if self.bars is not None else None
        return ProgressTask(self, task_id)
