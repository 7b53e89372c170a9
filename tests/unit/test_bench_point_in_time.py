"""The point-in-time benchmark's counting: records between offsets as a read_committed consumer is
given them, a group's position at a moment from its commits, and the skipped / re-processed split."""

from __future__ import annotations

from bench.bench_point_in_time import Commit, Delivered, GroupRun, Tally

TOPIC = "pit-transactional"


def transactional_partition() -> Delivered:
    """Offsets 0-4 committed (marker at 5), 6-10 aborted (marker at 11), 12-16 committed."""
    offsets = [0, 1, 2, 3, 4, 12, 13, 14, 15, 16]
    return Delivered(offsets=offsets, stamps_ms=[1000 + 10 * i for i in range(len(offsets))])


def test_markers_and_aborted_records_are_not_counted() -> None:
    delivered = transactional_partition()
    assert delivered.between(0, 17) == 10
    assert delivered.between(3, 13) == 3  # 3, 4 and 12
    assert delivered.between(5, 12) == 0  # a marker and an aborted transaction


def test_the_head_at_a_moment_is_after_the_last_record_stamped_by_then() -> None:
    delivered = transactional_partition()
    assert delivered.head_at(1.040) == 12  # the fifth record (offset 4) stamped at 1.040 s
    assert delivered.head_at(0.5) == 0
    assert delivered.head_at(99.0) == 17


def test_a_group_was_at_its_last_commit_sent_by_the_moment() -> None:
    group = GroupRun("g", 0.0, "127.0.0.1:9")
    group.commits = [
        Commit(10.0, 10.1, {(TOPIC, 0): 3}),
        Commit(11.0, 11.1, {(TOPIC, 0): 12, (TOPIC, 1): 4}),
        Commit(12.0, 12.1, {(TOPIC, 1): 9}),
    ]
    assert group.at(9.9) == {}
    assert group.at(11.5) == {(TOPIC, 0): 12, (TOPIC, 1): 4}
    assert group.at(12.0) == {(TOPIC, 0): 12, (TOPIC, 1): 9}


def test_an_answer_past_the_truth_skips_and_one_before_it_re_processes() -> None:
    delivered = {(TOPIC, 0): transactional_partition(), (TOPIC, 1): transactional_partition()}
    tally = Tally()
    tally.add({(TOPIC, 0): 14, (TOPIC, 1): 2}, {(TOPIC, 0): 3, (TOPIC, 1): 13}, TOPIC, delivered)
    assert tally.skipped == [4]  # 3, 4, 12, 13 on partition 0
    assert tally.reprocessed == [4]  # 2, 3, 4 and 12 on partition 1 (never the marker, the aborted)
