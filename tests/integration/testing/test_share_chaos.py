"""Share-group members under chaos on the 3-node Apache Kafka (kclient.testing.share_chaos): a
partition leader SIGKILLed and members SIGKILLed while a producer writes numbered records with
acks=all; every record must be accepted once or rejected, none lost, none delivered again after
its final acknowledgement. The longer run is ``python -m bench chaos --share --minutes 10``."""
from __future__ import annotations

import os

import pytest

from kclient.testing.chaos import ChaosConfig
from kclient.testing.share_chaos import SHARE_FAULT_KINDS, ShareChaos


@pytest.mark.slow
def test_share_members_under_leader_and_member_kills_lose_nothing(kafka3, tmp_path):
    if not kafka3.proxies:
        pytest.skip("the kafka3 cluster has no client proxies")
    seed = int(os.environ.get("KCLIENT_CHAOS_SEED", "7"))
    # one fault of each kind, however long a broker's restart takes (it is most of the run)
    config = ChaosConfig(duration_s=5, min_faults=len(SHARE_FAULT_KINDS), members=2, partitions=2, rate=100,
                         seed=seed, workdir=tmp_path, kinds=SHARE_FAULT_KINDS, gap_s=(1.0, 3.0), quiet_timeout_s=45)
    result = ShareChaos(kafka3, config).run()
    details = {"seed": seed, "faults": dict(result.faults), "skipped": dict(result.skipped_faults),
               "acknowledged": result.acknowledged, "deliveries": result.deliveries,
               "accepted": result.accepted, "rejected": result.rejected, "released": result.released,
               "undelivered": result.undelivered_at_deadline, "outcome_unknown": result.outcome_unknown,
               "start_offsets": result.start_offsets, "broker_held": result.broker_held, "logs": result.workdir,
               "explain": result.explain}
    assert result.acknowledged > 500, details
    assert sum(result.faults.values()) >= 2, details
    assert result.criteria() == {"lost": 0, "accepted_twice": 0, "redelivered_after_final": 0, "mismatched": 0,
                                 "member_exits": 0, "stuck_on_close": 0, "unclean_close": 0}, details
    assert result.rejected > 0 and result.released > 0, details
