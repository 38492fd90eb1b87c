"""The check, for consumer and share records alike, that a freed record's empty headers list
goes to a later record only if it is exactly as made and nothing else refers to it."""
from __future__ import annotations

import gc
from typing import Any, Callable


def assert_headers_lists_reused_only_when_untouched(poll: Callable[..., list],
                                                    check: Callable[[list], Any] | None = None) -> None:
    """``poll(untrack=True)`` makes 200 records with no headers (``gc_untrack=untrack``);
    ``check(records)``, if given, checks each poll's records further."""
    recs = poll()
    kept = recs[0].headers                     # referred to by the application
    grown = recs[1].headers
    grown.append(("h", b"1"))                  # changed by the application
    emptied = recs[2].headers
    emptied.append(("h", b"2"))
    emptied.clear()                            # grown, then emptied again
    del recs
    for _ in range(3):
        again = poll()
        lists = [r.headers for r in again]
        assert len({id(h) for h in lists}) == 200 and all(h == [] for h in lists)
        assert not any(h is kept or h is grown or h is emptied for h in lists)
        assert not any(gc.is_tracked(h) for h in lists)
        if check is not None:
            check(again)
        lists[5].append(("x", None))           # the next poll must not see this one again
        del again, lists
    assert kept == [] and grown == [("h", b"1")] and emptied == []
    tracked = poll(untrack=False)
    assert all(gc.is_tracked(r.headers) and r.headers == [] for r in tracked)
