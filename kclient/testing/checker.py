"""A checker for consumer histories, with Jepsen's Kafka criteria.

Feed it what producers had acknowledged, what every consumer member delivered (member,
generation, partition, offset, value) and what each member committed, and it reports:

* ``lost``: acknowledged records that no member delivered;
* ``duplicated``: records delivered more than once where that is not allowed: a record may
  be delivered again only after the member that had it crashed before committing past it
  (only commits made by the time of the second delivery count: a member fenced before its
  commit may read the record again and commit past it afterwards);
* ``nonmonotonic``: offsets that go backwards within one partition for one member and
  generation;
* ``skipped``: offsets missing between two consecutive deliveries of a partition by one
  member in one generation, where the log has records (acknowledged) in between;
* ``split_brain``: a record delivered to two members of the same generation.

Every criterion must be empty for a correct run. The checker knows nothing of kclient: it
works on plain tuples, so the same history format serves other clients and unit tests.
"""
from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Iterable, NamedTuple

__all__ = ["Delivery", "Commit", "Report", "check"]


class Delivery(NamedTuple):
    member: str
    generation: int
    topic: str
    partition: int
    offset: int
    t: float = 0.0        # when it was delivered (any clock shared with the commits)


class Commit(NamedTuple):
    member: str
    generation: int
    topic: str
    partition: int
    offset: int           # the next offset to read, as Kafka commits it
    t: float = 0.0        # when the commit succeeded; 0: before every delivery


@dataclass
class Report:
    acknowledged: int = 0
    delivered: int = 0
    lost: list[tuple[str, int, int]] = field(default_factory=list)
    duplicated: list[tuple[str, int, int]] = field(default_factory=list)
    nonmonotonic: list[tuple[str, int, str, int, int, int]] = field(default_factory=list)
    skipped: list[tuple[str, int, str, int, int, int]] = field(default_factory=list)
    split_brain: list[tuple[str, int, int, int]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.nonmonotonic or self.skipped or self.split_brain)

    def summary(self) -> dict[str, int]:
        return {"acknowledged": self.acknowledged, "delivered": self.delivered, "lost": len(self.lost),
                "duplicated": len(self.duplicated), "nonmonotonic": len(self.nonmonotonic),
                "skipped": len(self.skipped), "split_brain": len(self.split_brain)}


def check(acknowledged: Iterable[tuple[str, int, int]], deliveries: Iterable[Delivery],
          commits: Iterable[Commit] = (), crashed: Iterable[str] = ()) -> Report:
    """``acknowledged``: (topic, partition, offset) of records the producers were told were
    written; ``crashed``: members that died without a clean close (their uncommitted records
    may be delivered again)."""
    acked = set(acknowledged)
    deliveries = list(deliveries)
    crashed = set(crashed)
    report = Report(acknowledged=len(acked), delivered=len(deliveries))
    by_record: dict[tuple[str, int, int], list[Delivery]] = defaultdict(list)
    for d in deliveries:
        by_record[(d.topic, d.partition, d.offset)].append(d)
    report.lost = sorted(acked - set(by_record))
    # The highest commit of each member per partition, as of a time: records at or above it
    # that the member delivered were not committed, so after a crash (or a rebalance) another
    # delivery is allowed; below it, a second delivery is a duplicate.
    by_member: dict[tuple[str, str, int], list[tuple[float, int]]] = defaultdict(list)
    for c in commits:
        by_member[(c.member, c.topic, c.partition)].append((c.t, c.offset))
    committed: dict[tuple[str, str, int], tuple[list[float], list[int]]] = {}
    for key, entries in by_member.items():
        entries.sort()
        times, highest, top = [], [], -1
        for t, offset in entries:
            top = max(top, offset)
            times.append(t)
            highest.append(top)
        committed[key] = (times, highest)

    def committed_by(member: str, topic: str, partition: int, t: float) -> int:
        times, highest = committed.get((member, topic, partition), ([], []))
        i = bisect.bisect_right(times, t)
        return highest[i - 1] if i else -1
    for record, ds in sorted(by_record.items()):
        if len(ds) < 2:
            continue
        generations: dict[int, set[str]] = defaultdict(set)
        for d in ds:
            generations[d.generation].add(d.member)
        for gen, members in sorted(generations.items()):
            if len(members) > 1:
                report.split_brain.append((record[0], record[1], record[2], gen))
        topic, partition, offset = record
        for earlier, later in zip(ds, ds[1:]):
            # A second delivery is allowed only after the first reader crashed before its
            # commits covered the record (Jepsen: duplicates beyond the last commit of a
            # crashed member). A member that left cleanly committed what it read.
            covered = committed_by(earlier.member, topic, partition, later.t) > offset
            same_reader = earlier.member == later.member and earlier.generation == later.generation
            if same_reader or covered or earlier.member not in crashed:
                report.duplicated.append(record)
                break
    streams: dict[tuple[str, int, str, int], list[int]] = defaultdict(list)
    for d in deliveries:
        streams[(d.member, d.generation, d.topic, d.partition)].append(d.offset)
    acked_by_partition: dict[tuple[str, int], set[int]] = defaultdict(set)
    for topic, partition, offset in acked:
        acked_by_partition[(topic, partition)].add(offset)
    for (member, gen, topic, partition), offsets in sorted(streams.items()):
        log = acked_by_partition[(topic, partition)]
        for a, b in zip(offsets, offsets[1:]):
            if b <= a:
                report.nonmonotonic.append((member, gen, topic, partition, a, b))
            elif any(o in log for o in range(a + 1, b)):
                report.skipped.append((member, gen, topic, partition, a, b))
    return report
