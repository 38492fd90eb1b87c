"""librdkafka's mock Kafka cluster, hosted in a child process, with fault injection.

The mock cluster lives inside the librdkafka shipped in the ``confluent-kafka`` wheel
(``pip install 'kclient-cy[broker]'``). The child process (``_mock_child.py``) loads it
with ctypes; this class talks to the child over a pipe, so a crash or hang in C cannot take
the caller down, and a stuck child can always be killed.

Things to know about the mock brokers (librdkafka 2.16):
- ApiVersions: they implement v0-v2. A v3/v4 request is answered with error_code 35
  (UNSUPPORTED_VERSION) in a hand-made layout that is neither v0 nor flexible: error_code
  int16, a one-byte count holding N itself (not N+1), N entries (api_key, min, max: int16)
  without tagged fields, throttle_time_ms int32, no tagged fields; only ApiVersions' own
  range (0-2) is listed. A correct client takes the error code and retries with v0-v2.
- Pushed request errors: ApiVersions, FindCoordinator etc. put the code in the response;
  Metadata consumes the pushed entry but does not report it (use set_topic_error).
- No CreateTopics/DeleteTopics/DeleteRecords handlers: use ``create_topic``,
  ``delete_topic`` and ``delete_records`` here (they call the mock's C API).
- About 5 MB are kept per partition; older data is dropped.
- Request tracking: ``get_requests`` timestamps are microseconds of CLOCK_MONOTONIC, the
  clock behind ``time.monotonic()`` on Linux. Both starting and stopping tracking discard
  what was recorded (librdkafka 2.16, although its header says stop keeps them): read
  ``get_requests()`` before ``stop_request_tracking()``.
"""
from __future__ import annotations

import atexit
import glob
import importlib.util
import json
import logging
import os
import select
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from kclient.testing import reaper
from kclient.testing._base import BrokerNotFoundError, BrokerStartError, ClusterBase, HarnessError, log_tail

log = logging.getLogger(__name__)

__all__ = ["MockCluster", "MockClusterError", "MockRequest", "find_librdkafka", "TRANSPORT"]

#: librdkafka's RD_KAFKA_RESP_ERR__TRANSPORT: push it as an error to make the broker disconnect.
TRANSPORT = -195

#: api key -> highest version the mock (librdkafka 2.16) parses correctly (see start()).
_MOCK_VERSION_CAPS = {14: 3,    # SyncGroup
                      11: 5,    # JoinGroup
                      13: 2}    # LeaveGroup

_CHILD = Path(__file__).with_name("_mock_child.py")
_INSTALL_HINT = ("install it with `pip install 'kclient-cy[broker]'` (the mock cluster ships in the "
                 "librdkafka of the confluent-kafka wheel), or set KCLIENT_LIBRDKAFKA to a librdkafka .so")


class MockClusterError(HarnessError):
    """A mock-cluster call failed; ``code`` is the librdkafka error code (or None)."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class MockRequest:
    broker_id: int
    api_key: int
    timestamp_us: int  # CLOCK_MONOTONIC microseconds


def find_librdkafka() -> str:
    """Path of a librdkafka with the mock API: $KCLIENT_LIBRDKAFKA, else confluent-kafka's."""
    override = os.environ.get("KCLIENT_LIBRDKAFKA")
    if override:
        if not os.path.isfile(override):
            raise BrokerNotFoundError(f"KCLIENT_LIBRDKAFKA={override!r} is not a file")
        return override
    spec = importlib.util.find_spec("confluent_kafka")
    if spec is None or not spec.origin:
        raise BrokerNotFoundError(f"the librdkafka mock cluster is not installed: {_INSTALL_HINT}")
    site = Path(spec.origin).parent.parent
    found = sorted(glob.glob(str(site / "confluent_kafka.libs" / "librdkafka*.so*")))
    found += sorted(glob.glob(str(site / "confluent_kafka" / ".dylibs" / "librdkafka*.dylib")))
    if not found:
        raise BrokerNotFoundError(f"confluent-kafka is installed but bundles no librdkafka "
                                  f"(looked in {site / 'confluent_kafka.libs'}); {_INSTALL_HINT}")
    return found[0]


class MockCluster(ClusterBase):
    """``n_brokers`` mock brokers (ids 1..n) on loopback ports, driven from this process.

    Start it from a thread that outlives it (e.g. the main thread): the child is killed when
    the thread that started it exits (Linux parent-death signal).
    """

    kind = "mock"
    supports_fault_injection = True

    def __init__(self, n_brokers: int = 3, *, startup_timeout: float = 30.0, call_timeout: float = 10.0,
                 log_path: str | os.PathLike | None = None, die_with_parent: bool = True,
                 library: str | None = None) -> None:
        if n_brokers < 1:
            raise ValueError("n_brokers must be >= 1")
        self.n_brokers = n_brokers
        self.startup_timeout = startup_timeout
        self.call_timeout = call_timeout
        self.die_with_parent = die_with_parent
        self._library = library
        self._log_path = Path(log_path) if log_path else None
        self._keep_log = bool(log_path) or bool(os.environ.get("KCLIENT_BROKER_LOG_DIR"))
        self._proc: subprocess.Popen[bytes] | None = None
        self._record: Path | None = None
        self._buf = b""
        self._lock = threading.Lock()
        self._next_id = 0
        self.bootstrap_servers: str | None = None
        self.ops: frozenset[str] = frozenset()
        self.librdkafka_version: str | None = None
        self.startup_seconds: float | None = None

    # ------------------------------------------------------------------ lifecycle
    @property
    def bootstrap(self) -> str:
        if self.bootstrap_servers is None:
            raise RuntimeError("mock cluster not started")
        return self.bootstrap_servers

    def _child(self) -> tuple[subprocess.Popen[bytes], IO[bytes], IO[bytes]]:
        """The child process and its stdin and stdout pipes."""
        proc = self._proc
        if proc is None:
            raise MockClusterError("mock cluster is not running")
        assert proc.stdin is not None and proc.stdout is not None  # started with stdin=stdout=PIPE
        return proc, proc.stdin, proc.stdout

    @property
    def pid(self) -> int | None:
        """Pid of the child process hosting the brokers."""
        return self._proc.pid if self._proc else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def broker_ids(self) -> list[int]:
        return list(range(1, self.n_brokers + 1))

    def start(self) -> "MockCluster":
        if self.running:
            return self
        reaper.reap()
        library = self._library or find_librdkafka()
        if self._log_path is None or not self._keep_log:
            self._log_path = reaper.log_dir() / f"mock-{os.getpid()}-{id(self):x}.log"
        started = time.monotonic()
        with open(self._log_path, "ab") as logf:
            self._proc = subprocess.Popen(
                [sys.executable, "-u", str(_CHILD), library, str(self.n_brokers), str(os.getpid())],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=logf,
                start_new_session=True,
                preexec_fn=reaper.die_with_parent() if self.die_with_parent else None)
        self._buf = b""
        self._record = reaper.register(self._proc.pid, self.kind, None, str(self._log_path))
        try:
            hello = self._read_message(time.monotonic() + self.startup_timeout, "the mock cluster to start")
            if not hello.get("ready"):
                raise BrokerStartError(f"mock cluster failed to start: {hello.get('error')}")
        except BaseException:
            self._terminate(timeout=2.0)
            raise
        self.bootstrap_servers = hello["bootstrap"]
        self.ops = frozenset(hello["ops"])
        self.librdkafka_version = hello["version"]
        self.startup_seconds = time.monotonic() - started
        atexit.register(self.stop)
        # librdkafka 2.16's mock advertises versions of some group APIs that its handlers
        # mis-parse (they read the request in an older layout and drop the connection):
        # SyncGroup v4+ (the assignments count as an int32), JoinGroup v6+ and LeaveGroup v3+.
        # Cap each at the last version it parses, so clients negotiate one it implements. A
        # broker bug (its JoinGroup handler reads the flexible v6 protocols array as an int32
        # count, e.g. 0x02067261, rejects it and closes the connection); kclient also copes
        # without the caps by stepping down a version (kclient.group.version_fallback,
        # tests/test_group_version_fallback.py), but the caps keep the tests' joins fast.
        if "set_apiversion" in self.ops:
            for api_key, max_version in _MOCK_VERSION_CAPS.items():
                self.set_apiversion(api_key, 0, max_version)
        log.info("mock cluster (%d brokers, librdkafka %s) pid %s ready at %s in %.3f s", self.n_brokers,
                 self.librdkafka_version, self.pid, self.bootstrap_servers, self.startup_seconds)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Ask the child to destroy the cluster; SIGKILL it if it has not exited in time."""
        atexit.unregister(self.stop)
        if self._proc is None:
            return
        proc, stdin, _ = self._child()
        if proc.poll() is None:
            try:
                stdin.write(b'{"op": "shutdown"}\n')
                stdin.flush()
            except (BrokenPipeError, OSError):
                pass
        self._terminate(timeout)
        self.bootstrap_servers = None
        if not self._keep_log and self._log_path is not None:
            try:
                self._log_path.unlink()
            except FileNotFoundError:
                pass

    def _terminate(self, timeout: float) -> None:
        proc, stdin, stdout = self._child()
        self._proc = None
        try:
            stdin.close()  # end of input also makes the child exit
        except OSError:
            pass
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            log.warning("mock cluster pid %s did not exit within %.1f s; killing it", proc.pid, timeout)
            proc.kill()
            proc.wait()
        stdout.close()
        reaper.unregister(self._record)
        self._record = None


    def __repr__(self) -> str:
        state = f"pid={self.pid} bootstrap={self.bootstrap_servers}" if self.running else "stopped"
        return f"<MockCluster brokers={self.n_brokers} {state}>"

    # ------------------------------------------------------------------ pipe protocol
    def _read_message(self, deadline: float, what: str, error: type = BrokerStartError) -> dict:
        proc, _, stdout = self._child()
        fd = stdout.fileno()
        while b"\n" not in self._buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise error(f"timed out waiting for {what}; log {self._log_path}:\n"
                                       f"{log_tail(self._log_path)}")
            readable, _, _ = select.select([fd], [], [], remaining)
            if not readable:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                code = proc.wait(timeout=5)
                raise error(f"mock cluster child exited (code {code}) while waiting for {what}; "
                                       f"log {self._log_path}:\n{log_tail(self._log_path)}")
            self._buf += chunk
        line, _, self._buf = self._buf.partition(b"\n")
        return json.loads(line)

    def call(self, op: str, *args, timeout: float | None = None):
        """Run one mock-cluster operation in the child; raises MockClusterError on failure."""
        if not self.running:
            raise MockClusterError("mock cluster is not running")
        if self.ops and op not in self.ops:
            raise MockClusterError(f"librdkafka {self.librdkafka_version} does not export rd_kafka_mock_{op}")
        with self._lock:
            self._next_id += 1
            rid = self._next_id
            try:
                _, stdin, _ = self._child()
                stdin.write(json.dumps({"id": rid, "op": op, "args": list(args)}).encode() + b"\n")
                stdin.flush()
            except OSError as exc:  # the child died
                raise MockClusterError(f"mock cluster child is gone ({exc}); log {self._log_path}:\n"
                                       f"{log_tail(self._log_path)}") from exc
            deadline = time.monotonic() + (timeout or self.call_timeout)
            while True:
                reply = self._read_message(deadline, f"mock cluster op {op}", MockClusterError)
                if reply.get("id") == rid:
                    break
        if not reply["ok"]:
            raise MockClusterError(f"{op}{tuple(args)} failed: {reply['error']}", reply.get("code"))
        return reply["result"]

    # ------------------------------------------------------------------ topics
    def create_topic(self, name: str, partitions: int = 1, replication_factor: int = 1, *,
                     configs: dict[str, str] | None = None, timeout: float = 30.0) -> str:
        """Create a topic (the mock has no CreateTopics handler: this uses its C API)."""
        if configs:
            raise MockClusterError("the mock cluster does not support topic configs")
        self.call("topic_create", name, partitions, replication_factor)
        return name

    def delete_topic(self, name: str, timeout: float = 30.0) -> None:
        self.call("topic_delete", name)

    def delete_records(self, topic: str, partition: int, before_offset: int) -> None:
        """Advance the log start offset to ``before_offset`` (like DeleteRecords)."""
        self.call("partition_delete_records", topic, partition, before_offset)

    def set_topic_error(self, topic: str, error_code: int) -> None:
        """Error returned for ``topic`` in Metadata responses (0 clears it)."""
        self.call("topic_set_error", topic, error_code)

    # ------------------------------------------------------------------ fault injection
    def push_request_errors(self, api_key: int, errors: list[int]) -> None:
        """The next len(errors) requests of ``api_key`` to any broker fail with these codes, in order.

        Use TRANSPORT to make the broker drop the connection instead of answering.
        """
        self.call("push_request_errors", int(api_key), [int(e) for e in errors])

    def clear_request_errors(self, api_key: int) -> None:
        self.call("clear_request_errors", int(api_key))

    def broker_push_request_error_rtts(self, broker_id: int, api_key: int,
                                       errors_rtts: list[tuple[int, int]]) -> None:
        """Per-broker error stack: each (error_code, rtt_ms) answers one request (0 = no error)."""
        self.call("broker_push_request_error_rtts", broker_id, int(api_key),
                  [[int(e), int(rtt)] for e, rtt in errors_rtts])

    def broker_error_stack_count(self, broker_id: int, api_key: int) -> int:
        return self.call("broker_error_stack_count", broker_id, int(api_key))

    def partition_push_request_errors(self, topic: str, partition: int, api_key: int, errors: list[int]) -> None:
        """Partition-level error codes for the next requests of ``api_key`` naming this partition."""
        self.call("partition_push_request_errors", topic, partition, int(api_key), [int(e) for e in errors])

    def broker_set_down(self, broker_id: int) -> None:
        """Disconnect the broker and refuse new connections (no leader change); -1 = all."""
        self.call("broker_set_down", broker_id)

    def broker_set_up(self, broker_id: int) -> None:
        self.call("broker_set_up", broker_id)

    def broker_set_rtt(self, broker_id: int, rtt_ms: int) -> None:
        """Delay every response of the broker by ``rtt_ms``; -1 = all brokers."""
        self.call("broker_set_rtt", broker_id, rtt_ms)

    def broker_set_rack(self, broker_id: int, rack: str) -> None:
        self.call("broker_set_rack", broker_id, rack)

    def broker_decommission(self, broker_id: int) -> None:
        self.call("broker_decommission", broker_id)

    def broker_add(self, broker_id: int) -> None:
        self.call("broker_add", broker_id)

    def broker_remove_from_metadata(self, broker_id: int) -> None:
        self.call("broker_remove_from_metadata", broker_id)

    def partition_set_leader(self, topic: str, partition: int, broker_id: int) -> None:
        """Move the partition's leader (-1 = leaderless); creates the topic if missing."""
        self.call("partition_set_leader", topic, partition, broker_id)

    def partition_set_follower(self, topic: str, partition: int, broker_id: int) -> None:
        """Preferred replica a Fetch is redirected to (KIP-392)."""
        self.call("partition_set_follower", topic, partition, broker_id)

    def partition_set_follower_wmarks(self, topic: str, partition: int, lo: int, hi: int) -> None:
        self.call("partition_set_follower_wmarks", topic, partition, lo, hi)

    def partition_push_leader_response(self, topic: str, partition: int, leader_id: int,
                                       leader_epoch: int) -> None:
        self.call("partition_push_leader_response", topic, partition, leader_id, leader_epoch)

    def coordinator_set(self, key_type: str, key: str, broker_id: int) -> None:
        """Pin the coordinator for a "group" (group id) or "transaction" (transactional id)."""
        self.call("coordinator_set", key_type, key, broker_id)

    def set_apiversion(self, api_key: int, min_version: int, max_version: int) -> None:
        """Narrow the advertised version range of ``api_key`` (-1, -1 disables it)."""
        self.call("set_apiversion", int(api_key), min_version, max_version)

    def group_initial_rebalance_delay_ms(self, delay_ms: int) -> None:
        self.call("group_initial_rebalance_delay_ms", delay_ms)

    def set_group_consumer_session_timeout_ms(self, ms: int) -> None:
        self.call("set_group_consumer_session_timeout_ms", ms)

    def set_group_consumer_heartbeat_interval_ms(self, ms: int) -> None:
        self.call("set_group_consumer_heartbeat_interval_ms", ms)

    # ------------------------------------------------------------------ request tracking
    def start_request_tracking(self) -> None:
        """Record every request from now on (discards any earlier record)."""
        self.call("start_request_tracking")

    def stop_request_tracking(self) -> None:
        """Stop recording. librdkafka 2.16 also discards what was recorded: read it first."""
        self.call("stop_request_tracking")

    def clear_requests(self) -> None:
        self.call("clear_requests")

    def get_requests(self) -> list[MockRequest]:
        """Requests received since tracking started, in arrival order."""
        return [MockRequest(b, k, ts) for b, k, ts in self.call("get_requests")]
