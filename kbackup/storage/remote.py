"""What every store reached over the network shares: one request tried through the one retry
layer (``kbackup.core.retry``), told to the run's observer, and given up on with a line that says
how long it was retried and how to wait longer; the causes of a failed connection in words.

Each backend (S3, Google Cloud Storage, Azure Blob Storage) says only what its client's failures
mean (:meth:`RemoteStorage._failure`); the SDKs' own retries are off, so tries never multiply.
"""

from __future__ import annotations

import logging
import socket
from abc import abstractmethod
from collections.abc import Callable, Iterator
from typing import TypeVar

from kbackup.core.config import StorageSettings
from kbackup.core.errors import KBackupError, StorageError
from kbackup.core.retry import call_with_retries
from kbackup.storage.base import Storage

T = TypeVar("T")

#: Backoff after ``storage.max_attempts``' quick tries, while ``storage.retry_timeout_secs`` lasts:
#: doubles from the first to the cap.
RETRY_FIRST_DELAY_SECS = 0.5
RETRY_MAX_DELAY_SECS = 10.0

#: getaddrinfo's "no such host" (not a resolver that is down for a moment).
_NO_SUCH_HOST = {getattr(socket, name) for name in ("EAI_NONAME", "EAI_NODATA") if hasattr(socket, name)}


class RemoteStorage(Storage):
    """A store whose every request may fail for a moment: tried again, then named."""

    #: Where the backend's retries are logged (``kbackup.storage.s3``, ...).
    retry_log: logging.Logger

    def _take_patience(self, settings: StorageSettings, check_timeout_secs: float | None) -> None:
        self.retry_timeout_secs = settings.retry_timeout_secs
        self.max_attempts = settings.max_attempts
        #: The retries were shortened for a command a person waits on (the give-up says how to wait).
        self.patience_shortened = settings.patience_shortened
        #: ``check``: each request tried once with this timeout, so a preflight answers in seconds.
        self.check_timeout_secs = check_timeout_secs

    @abstractmethod
    def _failure(self, exc: Exception, action: str, key: str | None) -> tuple[StorageError, bool] | None:
        """What the client's exception means: the StorageError to raise (``retryable`` when waiting
        may help), and whether the store answered (no such object is an answer, not a failed
        request). None: not a failure of a request, raised as it is."""

    def _call(self, action: str, key: str | None, request: Callable[[], T]) -> T:
        """Run one request; retry a transient failure (``storage.max_attempts`` quick tries, then
        with backoff while ``retry_timeout_secs`` lasts). A failure that retrying cannot fix
        (access denied, no such bucket or key) is raised at once; ``check`` tries once."""
        checking = self.check_timeout_secs is not None

        def say_retry(error: KBackupError, delay: float) -> None:
            self.retry_log.warning("%s; trying again in %.1fs", error.message, delay)
            if self.observer is not None:
                self.observer.storage_request_retried(action)

        return call_with_retries(
            lambda: self._try(action, key, request),
            within_secs=0 if checking else self.retry_timeout_secs,
            delay_secs=RETRY_FIRST_DELAY_SECS,
            max_delay_secs=RETRY_MAX_DELAY_SECS,
            min_attempts=1 if checking else self.max_attempts,
            on_retry=say_retry,
            on_give_up=self._give_up,
        )

    def _try(self, action: str, key: str | None, request: Callable[[], T]) -> T:
        """One try of a request: its answer, or its failure as a StorageError (told to the observer)."""
        observer = self.observer
        try:
            answer = request()
        except StorageError:
            raise
        except Exception as exc:
            failure = self._failure(exc, action, key)
            if failure is None:
                raise
            error, answered = failure
            if observer is not None:
                if answered:
                    observer.storage_request_succeeded(action)
                else:
                    observer.storage_request_failed(action, transient=error.retryable)
            raise error from None
        if observer is not None:
            observer.storage_request_succeeded(action)
        return answer

    def _give_up(self, error: KBackupError, elapsed: float) -> KBackupError:
        """The last transient failure of a request, saying how long it was retried and how to wait longer."""
        if self.check_timeout_secs is not None:
            # A preflight reports what it found; a run would retry for retry_timeout_secs.
            return StorageError(
                f"{error.message}; check tries once, with a {self.check_timeout_secs:g}s timeout",
                hint=error.hint,
            )
        if self.patience_shortened:
            wait = "to wait longer, set storage.retry_timeout_secs"
            return StorageError(
                f"{error.message} (still failing after {elapsed:.0f}s of retries; a command run by "
                f"hand tries for {self.retry_timeout_secs:g}s)",
                hint=f"{error.hint}; {wait}" if error.hint else wait,
                retryable=True,
            )
        return StorageError(
            f"{error.message} (still failing after {elapsed:.0f}s of retries; "
            f"storage.retry_timeout_secs is {self.retry_timeout_secs:g})",
            hint=error.hint,
            retryable=True,
        )


def causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and the exceptions it was raised from or while handling, each once."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        # The Azure SDK keeps the transport's exception as ``inner_exception``.
        inner = getattr(current, "inner_exception", None)
        current = (
            current.__cause__ or current.__context__ or (inner if isinstance(inner, BaseException) else None)
        )


def unresolvable(exc: BaseException) -> bool:
    """The endpoint's host name does not exist (not a resolver that is down for a moment)."""
    return any(isinstance(cause, socket.gaierror) and cause.errno in _NO_SUCH_HOST for cause in causes(exc))


def os_reason(exc: BaseException) -> str | None:
    """The operating system's words for why a connection failed ('Connection refused'), if any."""
    for cause in reversed(list(causes(exc))):
        if isinstance(cause, OSError) and cause.strerror:
            return cause.strerror
    return None
