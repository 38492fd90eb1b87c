"""What kcore.sharerecords makes, in plain Python: the reference its tests compare against."""


def share_reference(records, ranges, cls):
    """Each consumer record inside a range as a ``cls`` with the range's delivery count; the
    records' offsets and the acquired offsets without a record as runs."""
    counts = {o: c for first, last, c in ranges for o in range(first, last + 1)}
    out = [cls(*r, counts[r.offset]) for r in records if r.offset in counts]
    present = {r.offset for r in out}
    return out, runs(sorted(present)), runs(sorted(set(counts) - present))


def runs(offsets):
    """Ascending offsets as (first, last) runs of consecutive ones."""
    out = []
    for o in offsets:
        if out and out[-1][1] + 1 == o:
            out[-1] = (out[-1][0], o)
        else:
            out.append((o, o))
    return out
