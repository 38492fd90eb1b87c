"""Acknowledgement types and their wire form (AcknowledgementBatches of ShareFetch and
ShareAcknowledge).

Each acquired record ends in one acknowledgement: ACCEPT (processed), RELEASE (deliver again,
to this member or another, with its delivery count one higher), REJECT (never deliver again),
or RENEW (keep the lock: the record stays with this member for another lock duration; KIP-1222,
ShareFetch / ShareAcknowledge v2). GAP marks an acquired offset that holds no record (a
compacted one, a transaction marker): the client acknowledges it so the broker can move on.
"""
from __future__ import annotations

import enum
from typing import Iterable, Mapping

__all__ = ["AcknowledgeType", "GAP", "acknowledgement_batches"]

#: An acquired offset without a record.
GAP = 0


class AcknowledgeType(enum.IntEnum):
    ACCEPT = 1
    RELEASE = 2
    REJECT = 3
    RENEW = 4


def acknowledgement_batches(acks: Mapping[int, int]) -> list[dict]:
    """``{offset: type}`` -> AcknowledgementBatch dicts: runs of consecutive offsets with one
    type each (one type for a whole range is what the broker reads fastest)."""
    out: list[dict] = []
    first = last = kind = None
    for offset in sorted(acks):
        t = int(acks[offset])
        if first is not None and last is not None and offset == last + 1 and t == kind:
            last = offset
            continue
        if first is not None:
            out.append({"first_offset": first, "last_offset": last, "acknowledge_types": [kind]})
        first = last = offset
        kind = t
    if first is not None:
        out.append({"first_offset": first, "last_offset": last, "acknowledge_types": [kind]})
    return out


def offsets_of(batches: Iterable[Mapping]) -> list[int]:
    """The offsets an AcknowledgementBatch list covers (for reporting results per offset)."""
    return [o for b in batches for o in range(b["first_offset"], b["last_offset"] + 1)]
