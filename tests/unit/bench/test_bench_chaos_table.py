"""The chaos benchmark's summary table names what the share checker settled from the broker."""
from __future__ import annotations

from bench.chaos import table
from kclient.testing.share_chaos import ShareChaosResult


def test_share_table_shows_unknown_outcomes_and_the_start_offsets_that_settled_them():
    result = ShareChaosResult(seed=7, outcome_unknown=538, start_offsets={1: 9120, 0: 8311})
    text = table(result, "python -m bench chaos --share")
    rows = dict(line.split("  ", 1) for line in text.splitlines())
    rows = {k.strip(): v.strip() for k, v in rows.items()}
    assert rows["acknowledgements of unknown outcome (settled by the start offsets)"] == "538"
    assert rows["start offsets after the quiet period, by partition"] == "0: 8311, 1: 9120"
    assert rows["verdict"] == "PASS"


def test_share_table_without_start_offsets_leaves_the_row_out():
    text = table(ShareChaosResult(seed=1), "python -m bench chaos --share")
    assert "acknowledgements of unknown outcome (settled by the start offsets)  0" in text
    assert "start offsets after the quiet period" not in text
