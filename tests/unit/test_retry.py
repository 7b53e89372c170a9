"""core/retry.call_with_retries on a virtual clock: what is tried again, how often, and when not."""

from __future__ import annotations

import pytest

from kbackup.core.errors import KafkaOperationError
from kbackup.core.retry import call_with_retries
from tests.support.virtual_clock import VirtualClock
from tests.support.virtual_clock import clock as clock  # the fixture


def unreachable() -> int:
    raise KafkaOperationError("no broker answered", retryable=True)


def test_a_retryable_error_is_tried_again_while_the_time_lasts(clock: VirtualClock) -> None:
    with pytest.raises(KafkaOperationError):
        call_with_retries(unreachable, within_secs=3, delay_secs=0.5, max_delay_secs=10)
    assert clock.sleeps == [0.5, 1.0]


def test_a_poll_of_answers_only_raises_its_first_error_at_once(clock: VirtualClock) -> None:
    # The backup's metadata poll: a cluster that does not answer fails within its own connect
    # timeout, not after the 30 s given to topics whose leaders are being elected.
    with pytest.raises(KafkaOperationError):
        call_with_retries(unreachable, within_secs=30, delay_secs=0.5, retry_errors=False, until=bool)
    assert clock.sleeps == []


def test_a_poll_asks_again_until_the_answer_will_do(clock: VirtualClock) -> None:
    answers = iter([0, 0, 3])
    assert (
        call_with_retries(
            lambda: next(answers), within_secs=30, delay_secs=0.5, max_delay_secs=None, until=bool
        )
        == 3
    )
    assert clock.sleeps == [0.5, 0.5]


def test_a_poll_whose_time_is_up_returns_its_last_answer(clock: VirtualClock) -> None:
    assert call_with_retries(lambda: 0, within_secs=0.8, delay_secs=0.5, until=bool) == 0
    assert clock.sleeps == [0.5]
