"""Probes the offset search makes on partitions of different shapes (pure Python, no Kafka).

    .venv/bin/python -m bench.search_shapes [--records N] [--searches S] [--seed K]

The reset planner's search (``kbackup.offsets.translate.search_position``)
guesses where the answer is before it halves. How well it guesses depends on
the holes in the restored partition, so this runs it over simulated
partitions (the same in-memory probe as the unit tests: every probe answers
from a sorted list) for committed offsets drawn at random, and prints the
probes per search beside log2 of the partition size, which a plain binary
search needs. Probes near each other fall into one fetch on a real broker;
this counts probes only.
"""

from __future__ import annotations

import argparse
import bisect
import math
import random
from collections.abc import Callable

from kbackup.offsets.translate import MAX_GUESSES, RestoredRecord, search_position

Shape = Callable[[int, random.Random], tuple[int, int]]


def hole_free(index: int, rng: random.Random) -> tuple[int, int]:
    return 0, 0


def regular_holes(index: int, rng: random.Random) -> tuple[int, int]:
    # Every 7th source offset compacted away, a transaction marker after every 1,000 records.
    return int(index % 7 == 3), int(index % 1_000 == 999)


def random_holes(index: int, rng: random.Random) -> tuple[int, int]:
    return rng.choice([0, 0, 0, 1, 5]), rng.randrange(1, 50) if rng.random() < 0.01 else 0


SHAPES: dict[str, Shape] = {
    "hole-free": hole_free,
    "every 7th source offset gone, a marker per 1,000": regular_holes,
    "random small holes on both sides": random_holes,
}


def build(records: int, shape: Shape, rng: random.Random, big_holes: int = 0) -> list[RestoredRecord]:
    """One source partition restored in order; ``big_holes`` source gaps of 1,000-300,000 offsets."""
    big = set(rng.sample(range(records), big_holes)) if big_holes else set()
    out = []
    target, source = 0, 1_000
    for index in range(records):
        source_gap, target_gap = shape(index, rng)
        source += source_gap + (rng.randrange(1_000, 300_000) if index in big else 0)
        target += target_gap
        out.append(RestoredRecord(target, "orders", 0, source))
        target += 1
        source += 1
    return out


def probes_per_search(records: list[RestoredRecord], searches: int, rng: random.Random) -> list[int]:
    keys = [record.target_offset for record in records]

    def probe(offset: int) -> RestoredRecord | None:
        index = bisect.bisect_left(keys, offset)
        return records[index] if index < len(records) else None

    end = records[-1].target_offset + 1
    low, high = records[0].source_offset, records[-1].source_offset + 2
    return sorted(search_position(probe, 0, end, rng.randrange(low, high)).probes for _ in range(searches))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--searches", type=int, default=300)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    cases = [(name, shape, 0) for name, shape in SHAPES.items()]
    cases += [("one big source hole", hole_free, 1), ("five big source holes", hole_free, 5)]
    print(
        f"{args.records:,} records, {args.searches} searches each, seed {args.seed}; "
        f"MAX_GUESSES={MAX_GUESSES}; a plain binary search: ~{math.ceil(math.log2(args.records))} probes"
    )
    print("| partition | probes: median | p90 | max |")
    print("|---|---:|---:|---:|")
    for name, shape, big_holes in cases:
        counts = probes_per_search(build(args.records, shape, rng, big_holes), args.searches, rng)
        print(f"| {name} | {counts[len(counts) // 2]} | {counts[len(counts) * 9 // 10]} | {counts[-1]} |")


if __name__ == "__main__":
    main()
