"""SIGINT and SIGTERM, owned by the CLI: the one place a command's signal handlers are installed.

A command that runs long passes the event of :func:`stop_on_signals` to the stage or application
run, which stops at its next safe point (a backup commits what it copied, a restore commits what
it produced) and says so. A second signal aborts at once (``KeyboardInterrupt``).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType

from kbackup.core.logs import get_logger

log = get_logger("signals")


@contextlib.contextmanager
def stop_on_signals(what: str) -> Iterator[threading.Event]:
    """SIGINT/SIGTERM set the returned event; ``what`` says what stopping does, for the log line."""
    stop = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def handle(signum: int, _frame: FrameType | None) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        log.warning("%s: %s", signal.Signals(signum).name, what)
        stop.set()

    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
