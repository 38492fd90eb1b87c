"""``python -m bench share``: its arguments and what it skips, without a broker."""
from __future__ import annotations

import pytest

from bench import share
from bench.share_members import _bad
from bench.drivers._common import SEQ
from kclient.share.consumer import KafkaShareConsumer


@pytest.mark.parametrize("argv", [["--drivers", "nope"], ["--records", "0"], ["--members", "x"],
                                  ["--members", "0"]])
def test_bad_arguments_exit_2(argv):
    with pytest.raises(SystemExit) as exc:
        share.main(argv)
    assert exc.value.code == 2


def test_the_columnar_driver_runs_only_where_the_share_consumer_has_poll_columnar():
    why = share.unavailable("kclient-columnar")
    assert (why is None) == hasattr(KafkaShareConsumer, "poll_columnar")


def test_members_spot_check_the_sequence_number():
    assert _bad(3, 5, SEQ.pack(5 * 8 + 3) + b"x", 8) is None
    assert "expected 43" in _bad(3, 5, SEQ.pack(1) + b"x", 8)
    assert "no sequence number" in _bad(3, 5, None, 8)
