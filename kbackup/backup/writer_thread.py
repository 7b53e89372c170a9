"""A background thread that encodes row groups and uploads segments while the consumer keeps reading.

Parquet encoding, zstd, SHA-256 and uploads release the GIL, so running them
beside the consume loop uses a second core. Jobs run one at a time in
submission order (so a partition's row groups and its segment close stay in
order), and the queue is bounded: when the thread falls behind, the consume
loop waits, and memory stays bounded.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable
from concurrent.futures import CancelledError, Future
from typing import Any, TypeVar

T = TypeVar("T")

_STOP = object()


class WriterThread:
    def __init__(self, max_queued_jobs: int = 4, name: str = "kafka-backup-writer") -> None:
        self._jobs: queue.Queue[Any] = queue.Queue(maxsize=max_queued_jobs)
        self._error: BaseException | None = None
        self._cancelled = False
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is _STOP:
                return
            future, function, args = job
            if self._error is not None or self._cancelled:
                # After a failure nothing more is written: the run is going to fail.
                future.cancel()
                continue
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(function(*args))
            except BaseException as exc:
                self._error = exc
                future.set_exception(exc)

    def check(self) -> None:
        """Raise the first error a job raised (a failed upload fails the run at its next step)."""
        if self._error is not None:
            raise self._error

    def submit(self, function: Callable[..., T], *args: Any) -> Future[T]:
        self.check()
        future: Future[T] = Future()
        self._jobs.put((future, function, args))
        return future

    def result(self, future: Future[T]) -> T:
        """The job's result; if it was skipped because an earlier job failed, that failure."""
        try:
            return future.result()
        except CancelledError:
            self.check()
            raise

    def drain(self) -> None:
        """Wait until every job submitted so far has run; raise the first error."""
        future = self.submit(lambda: None)
        with contextlib.suppress(CancelledError):
            future.result()
        self.check()

    def close(self, *, cancel: bool = False) -> None:
        """Stop after the queued jobs, or with ``cancel`` skip those not started (errors not raised)."""
        self._cancelled = self._cancelled or cancel
        if self._thread.is_alive():
            self._jobs.put(_STOP)
            self._thread.join()
