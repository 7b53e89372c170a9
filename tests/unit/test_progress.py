"""The progress display shared by the phases of one run."""

from __future__ import annotations

from kbackup.core.progress import Progress, rate_text


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


def test_a_closed_bar_stops_its_clock_where_the_work_stopped() -> None:
    """A phase that ended (done, failed or interrupted) keeps its count and stops its timer, so the
    next phase's bars do not run on the finished one's clock."""
    with Progress(enabled=True) as progress:
        with progress.task("backup", total=100, unit="records") as bar:
            bar.advance(40, data_bytes=40 * 1024)
        task = progress.bars.tasks[0]
        frozen = task.elapsed
        assert task.stop_time is not None
        assert (task.completed, task.fields["data_bytes"], task.fields["unit"]) == (40, 40 * 1024, "records")
        progress.task("next phase").advance()
        assert progress.bars.tasks[0].elapsed == frozen


def test_rates_say_records_and_mebibytes_per_second() -> None:
    assert rate_text(50_000, 2.0, "records", 2 * 2**20 * 10) == "25,000 records/s, 10.0 MiB/s"
    assert rate_text(30, 3.0, "segments", 0) == "10 segments/s"
    assert rate_text(30, 0.5, "records", 0) == ""
