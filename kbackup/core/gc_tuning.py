"""Python's cyclic garbage collector, tuned for loops that handle millions of short-lived objects.

Every confluent-kafka ``Message`` is a container the collector tracks. A
consume loop that keeps a poll's messages alive for a moment promotes
thousands of them per poll into the older generations, which triggers full
collections that walk every object of the process (pyarrow, pydantic and
typer's module state included). Profiling a 2 GB backup showed the
collector taking about 40% of the consume loop's time. Inside
:func:`few_collections` the objects that exist when it starts are frozen
(never walked again) and the youngest generation is collected after far more
allocations: collections still happen, so memory stays bounded even if
something makes reference cycles, but they no longer dominate.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

#: Allocations (net of deallocations) between collections of the youngest generation.
BULK_GEN0_THRESHOLD = 200_000

_lock = threading.Lock()
#: Blocks inside few_collections now (several runs can share a process: the drill, tests), and the
#: thresholds to put back when the last one ends.
_depth = 0
_saved_threshold: tuple[int, int, int] | None = None


@contextmanager
def few_collections() -> Iterator[None]:
    """Freeze the objects alive now and collect rarely, until the (outermost) block ends."""
    global _depth, _saved_threshold
    with _lock:
        if _depth == 0:
            _saved_threshold = gc.get_threshold()
            # No collection first: garbage frozen here is collected after the block, and a full
            # collection of a large process (a test session, a notebook) costs more than it saves.
            gc.freeze()
            gc.set_threshold(BULK_GEN0_THRESHOLD, *_saved_threshold[1:])
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _saved_threshold is not None:
                gc.set_threshold(*_saved_threshold)
                gc.unfreeze()
                _saved_threshold = None
