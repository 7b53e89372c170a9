"""A stand-in for the ``time`` module of kbackup.core.retry: sleeping moves the clock, nothing waits,
so a test asserts the waits and tries of the retry layer, never the wall clock of a shared machine."""

from __future__ import annotations

import types

import pytest

from kbackup.core import retry


class VirtualClock:
    def __init__(self, now: float = 1000.0) -> None:
        self.now = now
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> VirtualClock:
    """The retry layer's clock, virtual for the test."""
    clock = VirtualClock()
    monkeypatch.setattr(retry, "time", types.SimpleNamespace(monotonic=clock.monotonic, sleep=clock.sleep))
    return clock
