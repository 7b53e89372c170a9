"""Named crash points, for the tests that kill a run at a chosen moment.

``KBACKUP_CRASH_AT=<name>[,<name>...]`` makes the process SIGKILL itself when it
reaches a point of that name: no cleanup, no flush, exactly like a power
loss. ``<name>@<n>`` waits for the n-th time the point is reached, so a test
can pick a random moment among many (the 7th uploaded segment, the 3rd
transaction). A point that counts records (``backup:records-read``,
``restore:records-produced``) advances by the records of each batch, so
``<name>@<n>`` fires at the batch that takes the run to its n-th record: a test that knows
how many records a run has left to copy picks a kill that is sure to happen, which a delay
in seconds never is. Unset (always, outside tests) it costs one dictionary lookup.

``KBACKUP_CRASH_ONCE_DIR=<folder>`` makes each point fire once across processes: the first
process to reach it creates a marker file there and dies, later ones (a Spark task's next
attempt, in a new Python worker) go on. The marker says the crash happened.

Crash points in the code:

- ``backup:batch-read`` after each consumed batch is buffered, and ``backup:records-read``
  there too, counting its records;
- ``backup:segment-uploaded`` after each segment object is stored (on the upload thread);
- ``backup:before-manifest`` when every segment of an increment is stored, before its manifest;
- ``backup:after-manifest`` after the manifest is written, before the run records that it was;
- ``restore:after-transaction`` after each committed restore transaction;
- ``restore:batch-produced`` after each batch of records is handed to the producer, and
  ``restore:records-produced`` there too, counting its records;
- ``reset:after-first-group`` and the ``three-phase:*`` points of the drill.
"""

from __future__ import annotations

import os
import signal
import threading
from collections import Counter

ENVIRONMENT_VARIABLE = "KBACKUP_CRASH_AT"
ONCE_VARIABLE = "KBACKUP_CRASH_ONCE_DIR"

_reached: Counter[str] = Counter()
_lock = threading.Lock()  # segment uploads reach their point on a background thread


def _wanted_occurrence(wanted: str, name: str) -> int | None:
    for item in wanted.split(","):
        point, _, occurrence = item.strip().partition("@")
        if point == name:
            return int(occurrence) if occurrence else 1
    return None


def crash_point(name: str, count: int = 1) -> None:
    """Reach the point ``count`` times at once (a batch of ``count`` records, for the counting points)."""
    wanted = os.environ.get(ENVIRONMENT_VARIABLE)
    if not wanted:
        return
    occurrence = _wanted_occurrence(wanted, name)
    if occurrence is None:
        return
    with _lock:
        _reached[name] += count
        if _reached[name] >= occurrence and _first_crash(name):
            os.kill(os.getpid(), signal.SIGKILL)


def _first_crash(name: str) -> bool:
    """Whether to crash: always, unless KBACKUP_CRASH_ONCE_DIR says another process crashed here."""
    folder = os.environ.get(ONCE_VARIABLE)
    if not folder:
        return True
    try:
        os.close(os.open(os.path.join(folder, name.replace(":", "_")), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True
