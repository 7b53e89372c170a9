"""The CLI's one signal helper: the first SIGINT/SIGTERM asks the run to stop at a safe point, a
second aborts, and the previous handlers come back afterwards."""

from __future__ import annotations

import os
import signal
import time

import pytest

from kbackup.cli.signals import stop_on_signals


def _deliver(signum: int) -> None:
    os.kill(os.getpid(), signum)
    time.sleep(0.05)  # Python runs the handler at the next bytecode boundary of the main thread


def test_first_signal_sets_the_event_and_a_second_aborts() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with stop_on_signals("finishing") as stop:
        assert not stop.is_set()
        _deliver(signal.SIGTERM)
        assert stop.is_set()
        with pytest.raises(KeyboardInterrupt):
            _deliver(signal.SIGINT)
    assert signal.getsignal(signal.SIGTERM) is before
