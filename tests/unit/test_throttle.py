"""The token bucket of the rate limits (kbackup.core.throttle) on a virtual clock: no test sleeps."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kbackup.backup.settings import BackupSettings
from kbackup.core.throttle import BURST_SECS, Throttle, TokenBucket, throttled_text
from kbackup.restore.settings import RestoreSettings
from tests.support.virtual_clock import VirtualClock


def bucket(rate: float, clock: VirtualClock) -> TokenBucket:
    return TokenBucket(rate, clock=clock.monotonic, sleep=clock.sleep)


def test_a_full_bucket_lets_its_burst_through_then_waits_the_rest_off() -> None:
    clock = VirtualClock()
    tokens = bucket(1000, clock)
    assert tokens.acquire(1000 * BURST_SECS) == 0
    assert tokens.acquire(500) == pytest.approx(0.5)
    assert clock.sleeps == [pytest.approx(0.5)]


def test_a_batch_larger_than_the_burst_goes_at_once_and_is_paid_for_after() -> None:
    clock = VirtualClock()
    tokens = bucket(100, clock)
    # 10 s worth in one batch: no refusal, a wait of 10 s less the burst saved up.
    assert tokens.acquire(1000) == pytest.approx(10 - BURST_SECS)


def test_an_idle_bucket_saves_no_more_than_its_burst() -> None:
    clock = VirtualClock()
    tokens = bucket(100, clock)
    tokens.acquire(100 * BURST_SECS)
    clock.now += 3600  # an hour without traffic
    assert tokens.acquire(100 * BURST_SECS) == 0
    assert tokens.acquire(100) == pytest.approx(1.0)


@given(
    rate=st.floats(min_value=1, max_value=1e9),
    batches=st.lists(st.floats(min_value=0, max_value=1e7), min_size=1, max_size=50),
    gaps=st.lists(st.floats(min_value=0, max_value=5), min_size=50, max_size=50),
)
def test_tokens_taken_stay_within_the_rate_over_the_run_plus_one_burst(
    rate: float, batches: list[float], gaps: list[float]
) -> None:
    clock = VirtualClock()
    tokens = bucket(rate, clock)
    started = clock.now
    for amount, gap in zip(batches, gaps, strict=False):
        clock.now += gap
        tokens.acquire(amount)
    elapsed = clock.now - started
    assert sum(batches) <= rate * elapsed + rate * BURST_SECS + 1e-6 * max(1.0, sum(batches))


def test_the_throttle_waits_for_the_slower_of_its_two_limits_and_counts_the_waits() -> None:
    clock = VirtualClock()
    waits: list[float] = []
    throttle = Throttle(
        bytes_per_second=1000,
        records_per_second=10,
        clock=clock.monotonic,
        sleep=clock.sleep,
        on_wait=waits.append,
    )
    throttle.acquire(records=10 * BURST_SECS, data_bytes=0)  # type: ignore[arg-type]
    # 20 records at 10/s (2 s) against 100 bytes at 1000/s (0.1 s): the records decide.
    assert throttle.acquire(records=20, data_bytes=100) == pytest.approx(2.0)
    assert throttle.waited_secs == pytest.approx(2.0)
    assert waits == [pytest.approx(2.0)]


def test_no_limit_never_waits() -> None:
    clock = VirtualClock()
    throttle = Throttle(clock=clock.monotonic, sleep=clock.sleep)
    assert not throttle.limited
    assert throttle.acquire(records=10**9, data_bytes=10**12) == 0
    assert clock.sleeps == []


def test_a_share_splits_each_limit_evenly_over_the_tasks_that_run_at_once() -> None:
    throttle = Throttle(bytes_per_second=1200, records_per_second=30)
    share = throttle.share(3)
    assert (share.bytes_per_second, share.records_per_second) == (400, 10)
    assert throttle.share(0).bytes_per_second == 1200
    assert Throttle(records_per_second=8).share(2).bytes_per_second is None


def test_a_rate_of_zero_is_refused() -> None:
    with pytest.raises(ValueError, match="above zero"):
        TokenBucket(0)


def test_the_summary_line_names_the_setting_only_when_the_run_waited() -> None:
    assert throttled_text(0.0, "backup.max_bytes_per_second") is None
    assert throttled_text(12.34, "backup.max_bytes_per_second") == (
        "throttled by backup.max_bytes_per_second: waited 12.3s in all"
    )


def test_rates_in_the_config_take_sizes_as_well_as_numbers() -> None:
    assert BackupSettings(max_bytes_per_second="50MiB").max_bytes_per_second == 50 * 2**20  # type: ignore[arg-type]
    settings = RestoreSettings(max_bytes_per_second=1000, max_records_per_second=5)
    assert (settings.max_bytes_per_second, settings.max_records_per_second) == (1000, 5)
    assert BackupSettings().max_bytes_per_second is None
    for bad in ("fast", 0, -5, "0MB", True):
        with pytest.raises(ValueError, match="size"):
            RestoreSettings(max_bytes_per_second=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="greater than or equal to 1"):
        RestoreSettings(max_records_per_second=0)
