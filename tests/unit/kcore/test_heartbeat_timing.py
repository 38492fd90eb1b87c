"""kcore.timers.Heartbeat (mechanisms §3) against a straightforward Python model, with a fake clock
made of plain ints (nothing sleeps), plus the cimport-able nogil C interface."""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from kclient.errors import ConfigurationError, IllegalArgumentError
from kcore.timers import Heartbeat
import repo_paths

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1
REPO = str(repo_paths.REPO)


def clamp(x):
    return max(INT64_MIN, min(INT64_MAX, x))


class ModelHeartbeat:
    """mechanisms §3 written the obvious way, with unbounded Python ints."""

    def __init__(self, session_timeout_ms, heartbeat_interval_ms, max_poll_interval_ms,
                 retry_backoff_ms, now_ms):
        for name, value in (("session.timeout.ms", session_timeout_ms),
                            ("heartbeat.interval.ms", heartbeat_interval_ms),
                            ("max.poll.interval.ms", max_poll_interval_ms)):
            if not 1 <= value <= INT32_MAX:
                raise ConfigurationError(name)
        if retry_backoff_ms < 0:
            raise ConfigurationError("retry.backoff.ms")
        if heartbeat_interval_ms >= session_timeout_ms:
            raise ConfigurationError("heartbeat.interval.ms")
        self.session = session_timeout_ms
        self.interval = heartbeat_interval_ms
        self.max_poll = max_poll_interval_ms
        self.backoff = retry_backoff_ms
        self.last_send = None
        self.last_receive = None
        self.last_reset = now_ms
        self.last_poll = now_ms
        self.failed = False
        self.timer_start = now_ms      # the heartbeat schedule restarts here

    # events
    def poll(self, now):
        self.last_poll = now

    def sent_heartbeat(self, now):
        self.last_send = now
        self.failed = False
        self.timer_start = now

    def received_heartbeat(self, now):
        self.last_receive = now

    def fail_heartbeat(self, now):
        self.failed = True
        self.timer_start = now

    def reset_session_timeout(self, now):
        self.last_reset = now

    def reset_timeouts(self, now):
        self.last_reset = now
        self.last_poll = now
        self.failed = False
        self.timer_start = now

    # queries
    def _delay(self):
        return self.backoff if self.failed else self.interval

    def _session_base(self):
        if self.last_receive is None:
            return self.last_reset
        return max(self.last_reset, self.last_receive)

    def next_heartbeat_ms(self):
        return clamp(self.timer_start + self._delay())

    def time_to_next_heartbeat(self, now):
        return clamp(max(0, self.timer_start + self._delay() - now))

    def should_heartbeat(self, now):
        return now - self.timer_start >= self._delay()

    def session_timeout_expired(self, now):
        return now - self._session_base() > self.session

    def poll_timeout_expired(self, now):
        return now - self.last_poll > self.max_poll

    def time_to_next_poll(self, now):
        return clamp(max(0, self.last_poll + self.max_poll - now))

    def session_expiry_ms(self):
        return clamp(self._session_base() + self.session + 1)

    def poll_expiry_ms(self):
        return clamp(self.last_poll + self.max_poll + 1)

    def next_wakeup_ms(self, now):
        return min(self.next_heartbeat_ms(), self.session_expiry_ms(), self.poll_expiry_ms())


EVENTS = ["poll", "sent_heartbeat", "received_heartbeat", "fail_heartbeat",
          "reset_session_timeout", "reset_timeouts"]
QUERIES = ["time_to_next_heartbeat", "should_heartbeat", "session_timeout_expired",
           "poll_timeout_expired", "time_to_next_poll", "next_wakeup_ms"]


def assert_same(real, model, probes):
    assert real.last_heartbeat_send_ms == model.last_send
    assert real.last_heartbeat_receive_ms == model.last_receive
    assert real.last_session_reset_ms == model.last_reset
    assert real.last_poll_time_ms == model.last_poll
    assert real.heartbeat_failed == model.failed
    assert real.next_heartbeat_ms == model.next_heartbeat_ms()
    assert real.session_expiry_ms == model.session_expiry_ms()
    assert real.poll_expiry_ms == model.poll_expiry_ms()
    for now in probes:
        for q in QUERIES:
            assert getattr(real, q)(now) == getattr(model, q)(now), (q, now)
        # the documented relations between the queries
        assert real.should_heartbeat(now) == (real.time_to_next_heartbeat(now) == 0)
        assert real.time_to_next_heartbeat(now) >= 0 and real.time_to_next_poll(now) >= 0


def probe_times(model, now):
    """The current time and every boundary where an answer flips, each +-1."""
    points = {now, INT64_MIN, INT64_MAX, INT64_MIN + 1, INT64_MAX - 1}
    for p in (model.next_heartbeat_ms(), model.session_expiry_ms(), model.poll_expiry_ms(),
              model.last_poll + model.max_poll):
        points.update((p - 1, p, p + 1))
    return sorted(clamp(p) for p in points)


# ----------------------------------------------------------------- stateful comparison
configs = st.integers(2, INT32_MAX).flatmap(lambda session: st.tuples(
    st.just(session),
    st.integers(1, session - 1),
    st.one_of(st.integers(1, 50), st.integers(1, INT32_MAX)),
    st.one_of(st.integers(0, 50), st.integers(0, INT64_MAX), st.just(INT64_MAX)),
))
small_configs = st.integers(2, 60).flatmap(lambda session: st.tuples(
    st.just(session), st.integers(1, session - 1), st.integers(1, 80), st.integers(0, 30)))
start_times = st.one_of(st.integers(-100, 100), st.just(2**62), st.just(-(2**62)),
                        st.integers(INT64_MIN + 1, INT64_MAX))


class HeartbeatMachine(RuleBasedStateMachine):
    @initialize(cfg=st.one_of(small_configs, configs), start=start_times)
    def create(self, cfg, start):
        self.now = start
        self.real = Heartbeat(*cfg, start)
        self.model = ModelHeartbeat(*cfg, start)

    @rule(dt=st.one_of(st.integers(0, 40), st.integers(-5, 5), st.integers(0, 2**40)))
    def advance(self, dt):
        self.now = clamp(self.now + dt)
        if self.now == INT64_MIN:
            self.now += 1

    @rule(now=st.one_of(st.integers(INT64_MIN + 1, INT64_MAX),
                        st.sampled_from([INT64_MIN + 1, INT64_MAX, 2**62, -(2**62)])))
    def jump(self, now):           # a hostile or broken clock
        self.now = now

    @rule(event=st.sampled_from(EVENTS))
    def event(self, event):
        getattr(self.real, event)(self.now)
        getattr(self.model, event)(self.now)

    @invariant()
    def same_answers(self):
        if hasattr(self, "model"):
            assert_same(self.real, self.model, probe_times(self.model, self.now))


TestHeartbeatStateful = HeartbeatMachine.TestCase
TestHeartbeatStateful.settings = settings(
    max_examples=120, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("seed", range(3))
def test_random_sequences_match_model(seed):
    rng = random.Random(seed)
    session = rng.randrange(10, 200)
    cfg = (session, rng.randrange(1, session), rng.randrange(1, 400), rng.randrange(0, 50))
    now = rng.randrange(-1000, 1000)
    real, model = Heartbeat(*cfg, now), ModelHeartbeat(*cfg, now)
    for _ in range(4000):
        now += rng.randrange(0, 30)
        event = rng.choice(EVENTS)
        getattr(real, event)(now)
        getattr(model, event)(now)
        assert_same(real, model, (now, now + rng.randrange(0, 400)))


# ----------------------------------------------------------------- scenarios with known values
def test_java_like_timeline():
    hb = Heartbeat(10_000, 3_000, 300_000, 100, 0)
    assert hb.last_heartbeat_send_ms is None and hb.last_heartbeat_receive_ms is None
    assert hb.time_to_next_heartbeat(0) == 3_000
    assert not hb.should_heartbeat(2_999)
    assert hb.should_heartbeat(3_000)
    hb.sent_heartbeat(3_000)
    assert hb.time_to_next_heartbeat(3_000) == 3_000
    hb.received_heartbeat(3_020)
    assert hb.session_expiry_ms == 13_021
    assert not hb.session_timeout_expired(13_020)
    assert hb.session_timeout_expired(13_021)
    # a failed heartbeat is retried retry.backoff.ms after the failure
    hb.sent_heartbeat(6_000)
    hb.fail_heartbeat(6_500)
    assert hb.heartbeat_failed
    assert hb.time_to_next_heartbeat(6_500) == 100
    assert hb.should_heartbeat(6_600)
    hb.sent_heartbeat(6_600)
    assert not hb.heartbeat_failed
    assert hb.next_heartbeat_ms == 9_600
    # poll timeout: strictly more than max.poll.interval.ms since the last poll
    assert hb.time_to_next_poll(100_000) == 200_000
    assert not hb.poll_timeout_expired(300_000)
    assert hb.poll_timeout_expired(300_001)
    hb.poll(250_000)
    assert hb.last_poll_time_ms == 250_000
    assert hb.time_to_next_poll(300_001) == 249_999


def test_next_wakeup_is_earliest_event():
    hb = Heartbeat(10_000, 3_000, 5_000, 100, 1_000)
    assert hb.next_wakeup_ms(1_000) == 4_000               # heartbeat due
    hb.sent_heartbeat(4_000)
    assert hb.next_wakeup_ms(4_000) == 6_001               # poll expiry beats heartbeat 7_000
    hb.poll(5_000)
    assert hb.next_wakeup_ms(5_000) == 7_000
    hb = Heartbeat(10_000, 3_000, 300_000, 100, 0)
    hb.sent_heartbeat(8_000)
    assert hb.next_wakeup_ms(8_000) == 10_001              # session expiry (never received)
    # something already due: the instant is in the past, the caller waits 0
    assert hb.next_wakeup_ms(20_000) <= 20_000


def test_reset_session_timeout_only_moves_session():
    hb = Heartbeat(1_000, 300, 5_000, 50, 0)
    hb.fail_heartbeat(100)
    hb.reset_session_timeout(900)
    assert hb.last_session_reset_ms == 900
    assert hb.heartbeat_failed and hb.next_heartbeat_ms == 150
    assert hb.last_poll_time_ms == 0
    assert not hb.session_timeout_expired(1_900)
    assert hb.session_timeout_expired(1_901)


def test_reset_timeouts_restarts_everything():
    hb = Heartbeat(1_000, 300, 5_000, 50, 0)
    hb.fail_heartbeat(100)
    hb.reset_timeouts(2_000)
    assert not hb.heartbeat_failed
    assert hb.last_session_reset_ms == 2_000 and hb.last_poll_time_ms == 2_000
    assert hb.next_heartbeat_ms == 2_300
    assert not hb.session_timeout_expired(3_000) and not hb.poll_timeout_expired(7_000)


def test_received_keeps_session_alive_during_rebalance():
    # REBALANCE_IN_PROGRESS counts as received (mechanisms §2 step 7)
    hb = Heartbeat(1_000, 300, 60_000, 50, 0)
    for t in range(300, 20_000, 300):
        assert not hb.session_timeout_expired(t)
        assert hb.should_heartbeat(t)
        hb.sent_heartbeat(t)
        hb.received_heartbeat(t + 10)
    assert hb.session_timeout_expired(19_810 + 1_001)


def test_near_int64_limits():
    big = 2**62
    hb = Heartbeat(INT32_MAX, INT32_MAX - 1, INT32_MAX, INT64_MAX, big)
    assert hb.time_to_next_heartbeat(big) == INT32_MAX - 1
    hb.fail_heartbeat(big)
    assert hb.time_to_next_heartbeat(big) == INT64_MAX           # exact, not wrapped
    assert hb.next_heartbeat_ms == INT64_MAX                     # saturated instant
    assert not hb.should_heartbeat(INT64_MAX)
    hb = Heartbeat(10, 5, 10, 0, INT64_MAX - 3)
    assert hb.next_heartbeat_ms == INT64_MAX
    assert hb.time_to_next_heartbeat(INT64_MAX - 3) == 5         # start + 5 > INT64_MAX: still 5
    assert not hb.should_heartbeat(INT64_MAX)
    assert not hb.session_timeout_expired(INT64_MAX)
    assert hb.session_expiry_ms == INT64_MAX
    # a clock far behind the last event: durations clamp, nothing wraps
    hb = Heartbeat(10, 5, 10, 0, INT64_MAX)
    assert hb.time_to_next_heartbeat(INT64_MIN + 1) == INT64_MAX
    assert hb.time_to_next_poll(INT64_MIN + 1) == INT64_MAX
    assert not hb.session_timeout_expired(INT64_MIN + 1)
    hb = Heartbeat(10, 5, 10, 0, INT64_MIN + 1)
    assert hb.session_timeout_expired(INT64_MAX)
    assert hb.poll_timeout_expired(INT64_MAX)
    assert hb.should_heartbeat(INT64_MAX)


def test_negative_times_are_ordinary():
    hb = Heartbeat(100, 30, 200, 10, -1_000)
    assert hb.time_to_next_heartbeat(-1_000) == 30
    assert hb.should_heartbeat(-970)
    assert hb.session_timeout_expired(-899)
    assert not hb.session_timeout_expired(-900)


# ----------------------------------------------------------------- hostile arguments
@pytest.mark.parametrize("args, setting", [
    ((0, 1, 1, 0, 0), "session.timeout.ms"),
    ((-5, 1, 1, 0, 0), "session.timeout.ms"),
    ((INT32_MAX + 1, 1, 1, 0, 0), "session.timeout.ms"),
    ((10, 0, 1, 0, 0), "heartbeat.interval.ms"),
    ((10, -1, 1, 0, 0), "heartbeat.interval.ms"),
    ((10, 10, 1, 0, 0), "heartbeat.interval.ms"),
    ((10, 11, 1, 0, 0), "heartbeat.interval.ms"),
    ((10, 3, 0, 0, 0), "max.poll.interval.ms"),
    ((10, 3, -1, 0, 0), "max.poll.interval.ms"),
    ((10, 3, INT32_MAX + 1, 0, 0), "max.poll.interval.ms"),
    ((10, 3, 1, -1, 0), "retry.backoff.ms"),
])
def test_invalid_configuration_names_the_setting(args, setting):
    with pytest.raises(ConfigurationError, match=setting.replace(".", r"\.")):
        Heartbeat(*args)
    with pytest.raises(ConfigurationError):
        ModelHeartbeat(*args)        # the model agrees on what is invalid


def test_boundary_configurations_are_accepted():
    Heartbeat(2, 1, 1, 0, 0)
    Heartbeat(INT32_MAX, INT32_MAX - 1, INT32_MAX, INT64_MAX, 0)


@pytest.mark.parametrize("bad", [1.5, "10", None, 3.0])
def test_non_integer_times_are_refused(bad):
    hb = Heartbeat(100, 30, 200, 10, 0)
    for name in EVENTS + QUERIES:
        with pytest.raises(TypeError):
            getattr(hb, name)(bad)
    with pytest.raises(TypeError):
        Heartbeat(100, 30, 200, 10, bad)
    assert hb.last_poll_time_ms == 0 and hb.last_heartbeat_send_ms is None


@pytest.mark.parametrize("bad", [2**63, INT64_MIN - 1, 10**40])
def test_out_of_range_times_are_refused(bad):
    hb = Heartbeat(100, 30, 200, 10, 0)
    for name in EVENTS + QUERIES:
        with pytest.raises(OverflowError):
            getattr(hb, name)(bad)
    with pytest.raises(OverflowError):
        Heartbeat(bad, 30, 200, 10, 0)


def test_int64_min_is_reserved_for_never():
    hb = Heartbeat(100, 30, 200, 10, 0)
    with pytest.raises(IllegalArgumentError):
        hb.sent_heartbeat(INT64_MIN)
    with pytest.raises(IllegalArgumentError):
        hb.received_heartbeat(INT64_MIN)
    assert hb.last_heartbeat_send_ms is None and hb.last_heartbeat_receive_ms is None


def test_index_types_are_accepted():
    np = pytest.importorskip("numpy")
    hb = Heartbeat(np.int64(100), 30, 200, 10, np.int32(0))
    hb.sent_heartbeat(np.int64(40))
    assert hb.next_heartbeat_ms == 70


# ----------------------------------------------------------------- the C interface
CAPI_TEST = textwrap.dedent('''
    # cython: language_level=3
    from libc.stdint cimport int64_t
    from kcore.timers cimport (
        Heartbeat, heartbeat_state, hb_init, hb_poll, hb_sent_heartbeat, hb_received_heartbeat,
        hb_fail_heartbeat, hb_reset_session_timeout, hb_reset_timeouts,
        hb_time_to_next_heartbeat, hb_should_heartbeat, hb_session_timeout_expired,
        hb_poll_timeout_expired, hb_time_to_next_poll, hb_next_wakeup_ms,
        hb_next_heartbeat_ms, HB_NEVER, HB_OK, HB_INTERVAL_NOT_BELOW_SESSION)

    def on_struct():
        cdef heartbeat_state s
        cdef int rc_bad, rc
        cdef int64_t ttn0, ttn1, wake, ttp
        cdef bint should, expired, poll_expired, never
        with nogil:
            rc_bad = hb_init(&s, 1000, 1000, 5000, 100, 0)
            rc = hb_init(&s, 1000, 300, 5000, 100, 0)
            never = s.last_heartbeat_receive_ms == HB_NEVER
            ttn0 = hb_time_to_next_heartbeat(&s, 0)
            hb_sent_heartbeat(&s, 300)
            hb_fail_heartbeat(&s, 350)
            ttn1 = hb_time_to_next_heartbeat(&s, 400)
            should = hb_should_heartbeat(&s, 450)
            expired = hb_session_timeout_expired(&s, 1001)
            wake = hb_next_wakeup_ms(&s, 400)
            hb_reset_session_timeout(&s, 500)
            hb_poll(&s, 600)
            ttp = hb_time_to_next_poll(&s, 1600)
            poll_expired = hb_poll_timeout_expired(&s, 5601)
        return dict(rc_bad=rc_bad == HB_INTERVAL_NOT_BELOW_SESSION, rc=rc == HB_OK,
                    never=never, ttn0=ttn0, ttn1=ttn1, should=should, expired=expired,
                    wake=wake, ttp=ttp, poll_expired=poll_expired)

    def drive(Heartbeat hb, int64_t now):
        cdef heartbeat_state* s = hb.state_ptr()
        cdef int64_t nxt
        with nogil:
            hb_sent_heartbeat(s, now)
            hb_received_heartbeat(s, now + 5)
            hb_reset_timeouts(s, now + 6)
            nxt = hb_next_heartbeat_ms(s)
        return nxt
''')

CAPI_DRIVER = textwrap.dedent('''
    import json, sys
    import pyximport
    pyximport.install(build_dir=sys.argv[1], language_level=3)
    import hb_capi_user
    from kcore.timers import Heartbeat
    out = hb_capi_user.on_struct()
    hb = Heartbeat(1000, 300, 5000, 100, 0)
    out["drive_next"] = hb_capi_user.drive(hb, 10_000)
    out["seen_by_python"] = [hb.last_heartbeat_send_ms, hb.last_heartbeat_receive_ms,
                             hb.last_poll_time_ms, hb.next_heartbeat_ms]
    print(json.dumps(out))
''')


def test_c_interface_cimported_and_called_without_gil(tmp_path):
    # A separate Cython module cimports timers.pxd and drives the state inside `with nogil`
    # (Cython refuses to compile it if any of those functions needed the GIL).
    (tmp_path / "hb_capi_user.pyx").write_text(CAPI_TEST)
    (tmp_path / "driver.py").write_text(CAPI_DRIVER)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, str(tmp_path)]))
    proc = subprocess.run([sys.executable, str(tmp_path / "driver.py"), str(tmp_path / "build")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {
        "rc_bad": True, "rc": True, "never": True, "ttn0": 300, "ttn1": 50, "should": True,
        "expired": True, "wake": 450, "ttp": 4000, "poll_expired": True,
        "drive_next": 10_306, "seen_by_python": [10_000, 10_005, 10_006, 10_306],
    }


def test_constructor_keywords_match_contract():
    hb = Heartbeat(session_timeout_ms=100, heartbeat_interval_ms=30, max_poll_interval_ms=200,
                   retry_backoff_ms=10, now_ms=5)
    assert (hb.session_timeout_ms, hb.heartbeat_interval_ms, hb.max_poll_interval_ms,
            hb.retry_backoff_ms, hb.last_poll_time_ms) == (100, 30, 200, 10, 5)


def test_set_heartbeat_interval_follows_the_broker_below_the_session():
    """KIP-848: the broker sets the interval; the struct keeps it below session.timeout.ms."""
    hb = Heartbeat(10000, 3000, 300000, 100, 0)
    assert hb.set_heartbeat_interval_ms(500) == 500 and hb.heartbeat_interval_ms == 500
    hb.sent_heartbeat(1000)
    assert hb.time_to_next_heartbeat(1000) == 500 and hb.should_heartbeat(1500)
    assert hb.set_heartbeat_interval_ms(10000) == 9999          # clamped below the session
    assert hb.set_heartbeat_interval_ms(2**40) == 9999
    for bad in (0, -1, -2**63):
        with pytest.raises(IllegalArgumentError):
            hb.set_heartbeat_interval_ms(bad)
    assert hb.heartbeat_interval_ms == 9999                     # unchanged by the refused values
    with pytest.raises((OverflowError, TypeError, IllegalArgumentError)):
        hb.set_heartbeat_interval_ms(2**64)
    with pytest.raises(TypeError):
        hb.set_heartbeat_interval_ms("500")
