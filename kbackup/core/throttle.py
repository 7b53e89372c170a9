"""Rate limits of the copy loops (``backup.max_bytes_per_second``, ``restore.max_bytes_per_second``,
``restore.max_records_per_second``): a token bucket each loop asks after every batch.

Written here rather than taken from PyPI: pyrate-limiter, the well-kept Python rate limiter, keeps
a sliding-window log in which a request of weight w is w items (a byte rate of 50 MiB/s would log
50 million items a second) and refuses a request heavier than the window's limit, while a batch of
records is often larger than a second's worth at a low setting. The bucket below lets a batch take
its tokens at once and run into debt, then waits the debt off: the rate holds over seconds with a
burst of ``burst_secs`` of tokens, whatever the batch size, in a few lines with an injected clock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

#: Seconds of tokens a full bucket holds: small, so a run that idled cannot then go far above its
#: rate, large enough that waits come in pieces of at least a few milliseconds.
BURST_SECS = 0.25


class TokenBucket:
    """``rate`` tokens a second, at most ``rate * burst_secs`` saved up. :meth:`acquire` takes what
    a batch used at once (the balance may go below zero) and sleeps until the balance is back at
    zero, so over any stretch of time the tokens taken stay within ``rate * seconds + burst``."""

    def __init__(
        self,
        rate: float,
        *,
        burst_secs: float = BURST_SECS,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if rate <= 0:
            raise ValueError(f"a rate limit must be above zero, not {rate}")
        self.rate = float(rate)
        self.capacity = self.rate * burst_secs
        self._clock = clock
        self._sleep = sleep
        # Starts full: the first burst goes at once, as after any pause.
        self._tokens = self.capacity
        self._updated = clock()
        self._lock = threading.Lock()

    def reserve(self, amount: float) -> float:
        """Take ``amount`` tokens now; the seconds to wait before going on (0: none)."""
        with self._lock:
            now = self._clock()
            self._tokens = min(self.capacity, self._tokens + (now - self._updated) * self.rate)
            self._updated = now
            self._tokens -= amount
            return -self._tokens / self.rate if self._tokens < 0 else 0.0

    def acquire(self, amount: float) -> float:
        """Take ``amount`` tokens and wait until they are paid for; the seconds waited."""
        wait = self.reserve(amount)
        if wait > 0:
            # Outside the lock: other threads reserve behind this debt and wait their own turn.
            self._sleep(wait)
        return wait


@dataclass
class Throttle:
    """A copy loop's limits: bytes and records a second (either or both). ``waited_secs``: the
    time the loop spent waiting on them, for the metrics and the summary."""

    bytes_per_second: float | None = None
    records_per_second: float | None = None
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    #: Called with the seconds of each wait (a metric's counter).
    on_wait: Callable[[float], None] | None = None
    waited_secs: float = 0.0
    _buckets: list[tuple[TokenBucket, bool]] = field(default_factory=list, init=False, repr=False)

    def __post_init__(self) -> None:
        for rate, counts_bytes in ((self.bytes_per_second, True), (self.records_per_second, False)):
            if rate is not None:
                bucket = TokenBucket(rate, clock=self.clock, sleep=self.sleep)
                self._buckets.append((bucket, counts_bytes))

    @property
    def limited(self) -> bool:
        return bool(self._buckets)

    def reserve(self, *, records: int, data_bytes: int) -> float:
        """Take the tokens of a batch of ``records`` holding ``data_bytes``; the seconds the caller
        must wait before going on (the longer of the two limits' waits; 0: none)."""
        if not self._buckets:
            return 0.0
        return max(
            bucket.reserve(data_bytes if counts_bytes else records) for bucket, counts_bytes in self._buckets
        )

    def wait(self, seconds: float) -> float:
        """Wait what :meth:`reserve` said, counted in ``waited_secs``; the seconds waited."""
        if seconds <= 0:
            return 0.0
        self.sleep(seconds)
        self.waited_secs += seconds
        if self.on_wait is not None:
            self.on_wait(seconds)
        return seconds

    def acquire(self, *, records: int, data_bytes: int) -> float:
        """After a batch of ``records`` holding ``data_bytes``: wait as long as the limits ask."""
        return self.wait(self.reserve(records=records, data_bytes=data_bytes))

    def share(self, parts: int) -> Throttle:
        """The limits split evenly over ``parts`` copy loops that run at once (Spark tasks), each
        given its share as its own bucket; ``parts`` below 1 counts as 1."""
        parts = max(1, parts)
        return Throttle(
            bytes_per_second=None if self.bytes_per_second is None else self.bytes_per_second / parts,
            records_per_second=None if self.records_per_second is None else self.records_per_second / parts,
            clock=self.clock,
            sleep=self.sleep,
        )


def throttled_text(waited_secs: float, setting: str) -> str | None:
    """The summary's line for a run that waited on its rate limit (None: it never waited)."""
    if waited_secs <= 0:
        return None
    return f"throttled by {setting}: waited {waited_secs:,.1f}s in all"
