"""kcore.cursor.ListCursor against a plain-Python reference, and hostile use."""
from __future__ import annotations

import pytest

from kcore.cursor import ListCursor


class Reference:
    """What ListCursor does, in Python: hand out the loaded list, then ask refill."""

    def __init__(self, refill):
        self.items, self.index, self.limit, self.refill = [], 0, 0, refill

    def __iter__(self):
        return self

    def __next__(self):
        if self.index < self.limit and self.index < len(self.items):
            self.index += 1
            return self.items[self.index - 1]
        return self.refill()

    def load(self, items, start=0):
        self.items, self.index, self.limit = items, start, len(items)

    def hold(self):
        self.limit = self.index

    def resume(self):
        self.limit = len(self.items)


def _chunks(make, chunks):
    """A cursor that refills from ``chunks`` (lists), then stops."""
    pending = list(chunks)
    log = []

    def refill():
        log.append("refill")
        while pending:
            cursor.load(pending.pop(0))
            if cursor.remaining if hasattr(cursor, "remaining") else cursor.items:
                return next(cursor)
        raise StopIteration

    cursor = make(refill)
    return cursor, log


@pytest.mark.parametrize("chunks", [[], [[]], [[1, 2, 3]], [[1], [], [2, 3], [4, 5, 6, 7]], [list(range(1000))]])
def test_hands_out_what_the_reference_does(chunks):
    ours, our_log = _chunks(ListCursor, [list(c) for c in chunks])
    ref, ref_log = _chunks(Reference, [list(c) for c in chunks])
    assert list(ours) == list(ref) == [x for c in chunks for x in c]
    assert our_log == ref_log  # refill only when a list runs out (and once at the end)


def test_hold_sends_the_next_call_to_refill_and_resume_continues():
    calls = []

    def refill():
        calls.append(cursor.index)
        cursor.resume()
        return next(cursor)

    cursor = ListCursor(refill)
    cursor.load(["a", "b", "c"])
    assert next(cursor) == "a"
    cursor.hold()
    assert cursor.held and cursor.remaining == 2
    assert next(cursor) == "b"
    assert calls == [1]
    assert next(cursor) == "c" and calls == [1]
    assert not cursor.held


def test_index_items_and_clear_report_what_was_handed_out():
    def refill():
        raise StopIteration

    cursor = ListCursor(refill)
    items = [10, 20, 30]
    cursor.load(items, start=1)
    assert next(cursor) == 20
    assert cursor.items is items and cursor.index == 2 and cursor.remaining == 1
    assert cursor.clear() == (items, 2)
    assert (cursor.items, cursor.index, cursor.remaining) == ([], 0, 0)
    with pytest.raises(StopIteration):
        next(cursor)


def test_a_list_shortened_behind_its_back_is_never_read_past_its_end():
    def refill():
        raise StopIteration

    cursor = ListCursor(refill)
    items = [1, 2, 3, 4]
    cursor.load(items)
    assert next(cursor) == 1
    del items[1:]
    assert list(cursor) == []


@pytest.mark.parametrize("start", [-1, 4, 2**40])
def test_a_start_outside_the_list_is_refused(start):
    cursor = ListCursor(lambda: None)
    with pytest.raises(ValueError, match="outside 0..3"):
        cursor.load([1, 2, 3], start=start)
    assert cursor.remaining == 0


def test_bad_arguments_are_refused():
    with pytest.raises(TypeError, match="callable"):
        ListCursor(42)
    with pytest.raises(TypeError):
        ListCursor(None)
    cursor = ListCursor(lambda: None)
    with pytest.raises(TypeError):
        cursor.load((1, 2, 3))  # a list, not any sequence
    with pytest.raises(TypeError):
        cursor.load(None)


def test_refill_errors_propagate_and_leave_the_cursor_usable():
    state = {"fail": True}

    def refill():
        if state["fail"]:
            raise RuntimeError("boom")
        raise StopIteration

    cursor = ListCursor(refill)
    with pytest.raises(RuntimeError, match="boom"):
        next(cursor)
    state["fail"] = False
    cursor.load([7])
    assert list(cursor) == [7]
