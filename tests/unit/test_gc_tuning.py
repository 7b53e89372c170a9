"""few_collections: rare collections inside, the process's own settings back afterwards, also when nested."""

from __future__ import annotations

import gc
import threading

import pytest

from kbackup.core.gc_tuning import BULK_GEN0_THRESHOLD, few_collections


def test_inside_the_young_generation_is_collected_rarely_and_old_objects_are_frozen() -> None:
    before = gc.get_threshold()
    survivor = [object()]  # alive when the block starts: frozen, never walked inside
    with few_collections():
        assert gc.get_threshold()[0] == BULK_GEN0_THRESHOLD
        assert gc.get_threshold()[1:] == before[1:]
        assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0
    assert survivor


def test_cycles_made_inside_are_still_collected() -> None:
    collected = threading.Event()

    class Node:
        def __init__(self) -> None:
            self.me = self

        def __del__(self) -> None:
            collected.set()

    with few_collections():
        Node()
        gc.collect()
        assert collected.is_set()


def test_nested_and_failing_blocks_restore_the_settings_once_the_outermost_ends() -> None:
    before = gc.get_threshold()
    with few_collections():
        with pytest.raises(RuntimeError), few_collections():
            raise RuntimeError("a run failed")
        # The inner block ended, the outer one still runs: still tuned.
        assert gc.get_threshold()[0] == BULK_GEN0_THRESHOLD
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0
