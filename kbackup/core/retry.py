"""The one retry layer of the project: every request tried again and every poll goes through it.

``call_with_retries`` runs an attempt until it gives an answer that will do; the storage
backends (S3 today; GCS and Azure next), the Kafka admin requests, the backup's metadata wait
and the drill's waits all use it, so "how long, how fast, and what is said when it gives up"
is decided in one place. Two kinds of "not yet" are retried:

- a request that raises a ``KBackupError`` whose ``retryable`` says waiting may help (a
  connection refused, a 5xx, throttling, a coordinator loading). Any other error is raised at
  once: the backends classify their failures into retryable and terminal ``KBackupError``\\ s,
  and this layer never looks at a client library's exceptions;
- a poll's answer that ``until`` does not accept yet (a topic's leader still being elected).
  A poll whose request has its own patience (an admin request waits out its connect timeout)
  passes ``retry_errors=False``: its errors are raised at once, only its answers are polled.

A client library's own retries must be turned off under this layer (botocore's
``total_max_attempts`` is 1), or the attempts multiply and ``within_secs`` no longer bounds
the wait.

How long: the first ``min_attempts`` tries are made whatever ``within_secs`` says, the waits
between them doubling from ``min_attempts_delay_secs`` (a quick burst, as a client library's
own retries would make: 0.05 s over 8 tries waits 6.35 s in all); the next try starts only while
it starts within ``within_secs`` of the first, the waits doubling from ``delay_secs`` up to
``max_delay_secs`` (None: every wait is ``delay_secs``, a poll's steady pace). Time is read
through this module's ``time`` (``time.monotonic`` and ``time.sleep``), which tests replace with
a virtual clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from kbackup.core.errors import KBackupError

T = TypeVar("T")


def call_with_retries(
    attempt: Callable[[], T],
    *,
    within_secs: float,
    delay_secs: float,
    max_delay_secs: float | None = None,
    min_attempts: int = 1,
    min_attempts_delay_secs: float = 0.05,
    retry_errors: bool = True,
    until: Callable[[T], bool] | None = None,
    on_retry: Callable[[KBackupError, float], None] | None = None,
    on_give_up: Callable[[KBackupError, float], KBackupError] | None = None,
) -> T:
    """``attempt()``, tried again while it raises a retryable KBackupError or returns an answer
    ``until`` does not accept, for as long as the module docstring says.

    Returns the first accepted answer; a poll whose time is up returns its last answer (the
    caller says what that means). A request whose time is up raises its last error, or
    ``on_give_up(error, elapsed)`` (to say how long it was retried). ``on_retry(error, delay)``
    runs before each wait that follows an error.
    """
    started = time.monotonic()
    burst_delay = min_attempts_delay_secs
    delay = delay_secs
    tries = 0

    def next_wait() -> float | None:
        """The wait before the next try, None when no other try fits."""
        if tries < min_attempts:
            return burst_delay
        return delay if time.monotonic() - started + delay <= within_secs else None

    while True:
        tries += 1
        try:
            answer = attempt()
        except KBackupError as error:
            if not (retry_errors and error.retryable):
                raise
            wait = next_wait()
            if wait is None:
                if on_give_up is None:
                    raise
                raise on_give_up(error, time.monotonic() - started) from None
            if on_retry is not None:
                on_retry(error, wait)
        else:
            wait = next_wait()
            if until is None or until(answer) or wait is None:
                return answer
        time.sleep(wait)
        if tries < min_attempts:
            burst_delay *= 2
        else:
            delay = min(delay * 2, max_delay_secs if max_delay_secs is not None else delay_secs)
