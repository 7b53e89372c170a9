"""Retrying a request whose failure says retrying may help (``KBackupError.retryable``).

The one backoff loop of the project: Kafka admin requests and S3 requests both
go through it, so "how long, how fast, and what is said when it gives up" is
decided in one place.
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
    first_delay_secs: float,
    max_delay_secs: float,
    on_retry: Callable[[KBackupError, float], None] | None = None,
    on_give_up: Callable[[KBackupError, float], KBackupError] | None = None,
) -> T:
    """``attempt()``; when it raises a retryable KBackupError, try again with doubling delays
    (``first_delay_secs`` up to ``max_delay_secs``) as long as the next try starts within
    ``within_secs``. A failure retrying cannot fix is raised at once.

    ``on_retry(error, delay)`` runs before each wait; ``on_give_up(error, elapsed)`` may replace
    the last retryable error (to say how long it was retried).
    """
    started = time.monotonic()
    delay = first_delay_secs
    while True:
        try:
            return attempt()
        except KBackupError as error:
            elapsed = time.monotonic() - started
            if not error.retryable:
                raise
            if elapsed + delay > within_secs:
                if on_give_up is None:
                    raise
                raise on_give_up(error, elapsed) from None
            if on_retry is not None:
                on_retry(error, delay)
        time.sleep(delay)
        delay = min(delay * 2, max_delay_secs)
