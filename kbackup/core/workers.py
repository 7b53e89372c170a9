"""Worker processes of this machine for a stage's units (``restore.workers``, ``backup.workers``).

One Python process is one core for a client's per-record work (it holds the GIL), so a stage
cut into units (a restore's source partitions, a backup's slices) runs them on worker processes.
The stage says what a unit is and what a worker does with it; this module starts, feeds, stops and
watches the processes.

Processes are started with ``spawn``: librdkafka's threads must never be forked with live
clients. A small pool of our own rather than ``concurrent.futures.ProcessPoolExecutor``: when one
worker dies the executor cannot say which unit it was running and terminates the others mid-
transaction; here the parent names the unit, and the other workers commit what they did and stop,
as they do on SIGINT/SIGTERM.

The parent holds the one progress display and the one metrics registry: a worker reports each
batch over a queue (:meth:`WorkerSide.report`). SIGINT/SIGTERM in the parent sets one
``multiprocessing`` event every worker checks between batches; a terminal's Ctrl-C, which reaches
the whole process group, is left to the parent. A worker whose parent is gone (killed) commits
what it did and stops by itself.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import queue
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from typing import Any, Generic, TypeVar

from kbackup.core.errors import InterruptedByUser, KBackupError, WorkerDiedError
from kbackup.core.logs import configure_logging, get_logger, logging_configuration
from kbackup.core.secrets import register_secret, registered_secrets

log = get_logger("workers")

#: How long the parent waits for a worker to commit and stop once told to, before killing it
#: (its open transaction is then aborted by the next run's fence).
STOP_GRACE_SECS = 60.0

#: How often the parent looks for a stop and for workers that died.
LOOK_EVERY_SECS = 0.2

T = TypeVar("T")
R = TypeVar("R")


#: ``workers: auto`` gives one worker per this many cores. One process of a stage already keeps
#: more than a core busy: its reader or encoder and uploader threads and librdkafka's beside the
#: main loop (docs/benchmarks.md, 2026-11-27, one worker: the exactly-once restore at 4.0 CPU
#: seconds per million 100-byte records and 305,000 records/s, 1.2 cores; the backup at 1.5 and
#: about 1,000,000 records/s, 1.5 cores). A worker per core made both contend for the cores: two
#: workers on this 2-core machine restored at 0.93-1.02 of one and backed up at about 0.5 of one.
CORES_PER_WORKER = 2


def auto_workers(records: int, units: int, cores: int | None, *, min_records: int) -> int:
    """A ``workers: auto`` setting: one worker per :data:`CORES_PER_WORKER` cores, no more than
    there are units, and one (the calling process) for fewer than ``min_records`` records, where a
    worker's start-up costs about what another process gives."""
    if records < min_records:
        return 1
    return max(1, min((cores or 1) // CORES_PER_WORKER, units))


@dataclass
class WorkerSide:
    """What a worker process holds: the parent's stop event and the queue to the parent."""

    stop_event: Any
    events: Any
    #: Set in the worker by SIGTERM or when the parent is gone: a plain flag, safe in a handler.
    stopped_here: bool = False

    def is_set(self) -> bool:
        return self.stopped_here or bool(self.stop_event.is_set())

    def report(self, *payload: Any) -> None:
        """Sends ``payload`` to the parent's ``on_report`` (a batch done, for its progress and metrics)."""
        self.events.put(("report", *payload))


def _watch_parent(side: WorkerSide, parent: int) -> None:
    """An orphaned worker (its parent killed) commits what it produced and stops."""
    while not side.stopped_here:
        if os.getppid() != parent:
            side.stopped_here = True
        time.sleep(1.0)


@dataclass(frozen=True)
class WorkerStart:
    """What a worker takes from its parent when it starts."""

    parent: int
    number: int
    #: The parent's ``configure_logging`` arguments (None: not configured) and the secrets it
    #: redacts: a worker logs as the parent does, and never a secret.
    logging: tuple[int, bool, str] | None
    secrets: frozenset[str]


def _worker_main(jobs: Any, events: Any, stop_event: Any, running: Any, start: WorkerStart) -> None:
    """A worker: ``(index, function, item)`` from ``jobs`` until told to stop or given None;
    ``running[number]`` says which item it runs (shared memory, written before the item starts: a
    queued message may die with the process)."""
    for secret in start.secrets:
        register_secret(secret)
    if start.logging is not None:
        configure_logging(*start.logging)
    parent, number = start.parent, start.number
    side = WorkerSide(stop_event, events)
    # A terminal's Ctrl-C reaches the whole process group: the parent turns it into the stop event.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # A SIGTERM sent to every process (a service manager stopping the run): stop as the parent does.
    signal.signal(signal.SIGTERM, lambda *_: setattr(side, "stopped_here", True))
    threading.Thread(target=_watch_parent, args=(side, parent), daemon=True).start()
    while True:
        try:
            # Not blocking for good: an orphaned worker whose parent died before it sent every
            # item would wait forever.
            item = jobs.get(timeout=1.0)
        except queue.Empty:
            if side.is_set():
                return
            continue
        if item is None or side.is_set():
            return
        index, function, task = item
        running[number] = index
        try:
            result = function(task, side)
        except Exception as exc:  # a bug in the worker: one line to the parent, as a Spark task's
            events.put(("failed", index, f"{type(exc).__name__}: {exc}"))
            return
        events.put(("done", index, result))
        running[number] = -1


@dataclass
class WorkerPool(Generic[T]):
    """``workers`` processes that run ``function(item, side)`` for each item of a job; the results
    in order. Entered (``with``), the processes serve every job run in it (a restore's checks,
    then its records: one start-up); else each :meth:`run` starts and ends its own."""

    #: The stage, in process names and in the lines about a worker ("restore", "backup").
    stage: str
    workers: int
    #: Names an item, for the line that says which one a dead worker was running.
    name: Callable[[T], str]
    stop: threading.Event | None = None
    #: Told of each :meth:`WorkerSide.report` of a worker (a batch done), and of each item done.
    on_report: Callable[..., None] | None = None
    on_done: Callable[[], None] | None = None
    #: Per worker, the index of the item it runs (-1: none), for the line naming a dead one's.
    _running: Any = None
    _processes: list[BaseProcess] | None = None
    _queues: tuple[Any, Any, Any] | None = None

    def __enter__(self) -> WorkerPool[T]:
        self._start(self.workers)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_exc: object) -> None:
        self._end(told_to_stop=exc_type is not None)

    def _start(self, count: int) -> None:
        context = multiprocessing.get_context("spawn")
        jobs, events, stop_event = context.Queue(), context.Queue(), context.Event()
        self._queues = (jobs, events, stop_event)
        self._running = context.Array("i", [-1] * count, lock=False)
        self._processes = [
            context.Process(
                target=_worker_main,
                args=(
                    jobs,
                    events,
                    stop_event,
                    self._running,
                    WorkerStart(os.getpid(), number, logging_configuration(), registered_secrets()),
                ),
                name=f"kafka-backup-{self.stage}-worker-{number}",
            )
            for number in range(count)
        ]
        for process in self._processes:
            process.start()

    def _end(self, *, told_to_stop: bool) -> None:
        """Every worker ends: a told one commits and stops, an idle one takes its end of work."""
        assert self._processes is not None
        assert self._queues is not None
        jobs, events, stop_event = self._queues
        if told_to_stop:
            stop_event.set()
        for _ in self._processes:
            jobs.put(None)
        self._wind_down(self._processes, events)
        # Items no worker took stay unsent: this process must not wait at its exit to flush them.
        jobs.cancel_join_thread()
        self._processes = self._queues = None

    def run(
        self,
        work: Sequence[T],
        function: Callable[[T, WorkerSide], R],
        *,
        on_report: Callable[..., None] | None = None,
        on_done: Callable[[], None] | None = None,
    ) -> list[R]:
        if not work:
            return []
        self.on_report, self.on_done = on_report or self.on_report, on_done or self.on_done
        own = self._processes is None
        if own:
            self._start(max(1, min(self.workers, len(work))))
        assert self._processes is not None
        assert self._queues is not None
        jobs, events, stop_event = self._queues
        for index, item in enumerate(work):
            jobs.put((index, function, item))
        results: dict[int, R] = {}
        ended = False
        try:
            self._collect(work, self._processes, events, stop_event, results)
            ended = True
        finally:
            if own:
                self._end(told_to_stop=not ended)
            elif not ended:
                stop_event.set()
        return [results[index] for index in range(len(work))]

    def _collect(
        self,
        work: Sequence[T],
        processes: Sequence[BaseProcess],
        events: Any,
        stop_event: Any,
        results: dict[int, R],
    ) -> None:
        # Looked at between events too: busy workers send batches faster than the timeout.
        next_look = time.monotonic() + LOOK_EVERY_SECS
        while len(results) < len(work):
            if self.stop is not None and self.stop.is_set():
                stop_event.set()
            with contextlib.suppress(queue.Empty):
                self._take(events.get(timeout=LOOK_EVERY_SECS), work, results)
            if time.monotonic() >= next_look:
                self._check_alive(work, processes, events, results)
                next_look = time.monotonic() + LOOK_EVERY_SECS

    def _take(self, event: tuple[Any, ...], work: Sequence[T], results: dict[int, R]) -> None:
        kind = event[0]
        if kind == "report":
            if self.on_report is not None:
                self.on_report(*event[1:])
        elif kind == "done":
            results[event[1]] = event[2]
            if self.on_done is not None:
                self.on_done()
        elif kind == "failed":
            raise KBackupError(
                f"a {self.stage} worker failed on {self.name(work[event[1]])}: {event[2]}",
                hint="what was committed stays; run the same command again with --debug for the traceback",
            )

    def _drain(self, work: Sequence[T], events: Any, results: dict[int, R]) -> None:
        while True:
            try:
                event = events.get(timeout=0.1)
            except queue.Empty:
                return
            self._take(event, work, results)

    def _check_alive(
        self, work: Sequence[T], processes: Sequence[BaseProcess], events: Any, results: dict[int, R]
    ) -> None:
        for number, process in enumerate(processes):
            if process.exitcode not in (None, 0):
                index = self._running[number]
                what = "a unit not yet named" if index < 0 else self.name(work[index])
                raise WorkerDiedError(
                    f"the {self.stage} worker running {what} died (exit code {process.exitcode}): the other "
                    "workers committed what they had done and stopped",
                    hint="run the same command again: it continues where each worker got to",
                )
        if all(process.exitcode is not None for process in processes):
            # What they sent before they left, then: every worker left with items not done (they
            # were told to stop).
            self._drain(work, events, results)
            if len(results) == len(work):
                return
            raise InterruptedByUser(
                f"{self.stage} stopped by a signal after committing what it had done",
                hint="run the same command again to continue",
            )

    def _wind_down(self, processes: Sequence[BaseProcess], events: Any) -> None:
        """Every worker ends: a told one commits and stops. The queue is drained meanwhile (a
        worker cannot exit while what it put is unread), its last batches still counted."""
        deadline = time.monotonic() + STOP_GRACE_SECS
        while any(process.is_alive() for process in processes) and time.monotonic() < deadline:
            try:
                event = events.get(timeout=0.1)
            except queue.Empty:
                continue
            if event[0] == "report" and self.on_report is not None:
                self.on_report(*event[1:])
        for process in processes:
            if process.is_alive():
                log.warning(
                    "%s worker %s did not stop in %.0fs: killed", self.stage, process.name, STOP_GRACE_SECS
                )
                process.kill()
            process.join()
