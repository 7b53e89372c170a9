"""The progress display shared by the phases of one run."""

from __future__ import annotations

from kbackup.core.progress import Progress


def test_a_stage_entering_the_callers_display_does_not_close_it() -> None:
    # The three-phase restore hands its display to the restore stage, which enters it too;
    # the mapping and reset bars that follow must still be drawn.
    with Progress(enabled=True) as progress:
        with progress:
            progress.task("restore", total=1).advance()
        assert progress.bars is not None
        progress.task("reset", total=2).advance(2)
        bars = {task.description: (task.completed, task.total) for task in progress.bars.tasks}
    assert bars == {"restore": (1, 1), "reset": (2, 2)}
    assert progress.bars is None


def test_bars_off_cost_nothing() -> None:
    with Progress(enabled=False) as progress:
        progress.task("anything", total=3).advance()
        assert progress.bars is None
