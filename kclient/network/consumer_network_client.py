"""ConsumerNetworkClient: the consumer's view of the network (mechanisms §10).

It adds to ``NetworkClient``: a queue of requests not yet handed to a connection (``unsent``,
kcore.queues.UnsentQueue), scheduled tasks (kcore.timers.DelayedTaskQueue), futures for
responses, and wakeups. The application thread and the heartbeat thread share it:

* ``_lock`` (reentrant) serialises polls; it is held while a poll waits in select(). The other
  thread's ``send()``/``schedule()``/``try_connect()`` take only small locks and wake the
  selector, so a request queued by the heartbeat thread leaves at once even while the
  application thread is blocked in poll. The heartbeat thread never waits for ``_lock``: it
  polls with ``try_poll_no_wakeup()`` (nothing to do if another thread is polling: that poll
  does the I/O) and reads ``least_loaded_node()``/``is_unavailable()`` without it.
* Response futures are completed (listeners run) *outside* ``_lock``, from a queue of
  pending completions that every poll drains, so a listener may take the coordinator's
  lock without risking a lock-order deadlock with a thread that holds it and wants to poll.
"""
from __future__ import annotations

import collections
import contextlib
import logging
import threading
from typing import AbstractSet, Any, Callable

from kcore.queues import UnsentQueue
from kcore.timers import DelayedTaskQueue

from kclient import errors as Errors
from kclient.clock import SYSTEM_CLOCK, Clock
from kclient.network.future import _FAILED, _SUCCEEDED, RequestFuture
from kclient.network.metadata import Metadata, Node
from kclient.network.network_config import NetworkClientConfig
from kclient.network.network_client import ClientRequest, NetworkClient

__all__ = ["ConsumerNetworkClient", "RequestFutureCompletionHandler"]

log = logging.getLogger(__name__)

FOREVER_MS = 2**62


class RequestFutureCompletionHandler(RequestFuture):
    """The future returned by ``send()``; also the request's completion callback.

    The network thread records the outcome and queues the handler; the future itself is
    completed when the consumer network client drains its pending completions.
    Attributes: ``request`` (the ClientRequest: ``api_version``, ``node_id``, ``send_ms``...).
    """

    __slots__ = ("request", "_outcome", "_queue")

    def __init__(self, queue: collections.deque, lock: Any = None):
        super().__init__(lock)
        self.request: ClientRequest | None = None
        self._outcome: tuple[dict | None, BaseException | None] | None = None
        self._queue = queue

    @property
    def api_version(self) -> int | None:
        return None if self.request is None else self.request.api_version

    @property
    def node_id(self) -> int | None:
        return None if self.request is None else self.request.node_id

    def on_complete(self, response: dict | None, error: BaseException | None) -> None:
        if self._outcome is not None:
            return  # already failed (e.g. expired) before the network answered
        self._outcome = (response, error)
        # The request's callback is this bound method: handler -> request -> handler is a
        # reference cycle, which kept each response (a fetch response frame: megabytes)
        # alive until a cyclic garbage collection, long after its records were consumed.
        # The outcome is recorded, so the request needs its callback no more.
        request = self.request
        if request is not None:
            request.callback = None
        self._queue.append(self)

    def fire_completion(self) -> None:
        assert self._outcome is not None  # queued by on_complete() right after it set the outcome
        response, error = self._outcome
        # _settle() without complete()'s and raise_()'s argument checks: a response is a
        # dict (or None), an error an exception instance.
        if error is not None:
            self._settle(_FAILED, None, error)
        else:
            self._settle(_SUCCEEDED, response, None)


class ConsumerNetworkClient:
    def __init__(self, client: NetworkClient | None = None, *, metadata: Metadata | None = None,
                 clock: Clock | None = None, request_timeout_ms: int | None = None,
                 config: NetworkClientConfig | None = None, **kwargs: Any):
        """Wrap ``client``, or build one from ``config`` (``socket_factory=...`` and other
        NetworkClient keywords are passed through)."""
        if client is None:
            if config is None:
                raise TypeError("ConsumerNetworkClient needs a NetworkClient or a NetworkClientConfig")
            client = NetworkClient(config, metadata=metadata, clock=clock, **kwargs)
        self.client = client
        self.metadata = client.metadata
        self._clock = clock or client.clock or SYSTEM_CLOCK
        self.request_timeout_ms = (client.request_timeout_ms if request_timeout_ms is None
                                   else request_timeout_ms)
        self.unsent_expiry_ms = self.request_timeout_ms

        self._unsent = UnsentQueue()
        self._tasks = DelayedTaskQueue()
        self._lock = threading.RLock()          # serialises polls (held during select)
        self._unsent_lock = threading.RLock()   # guards _unsent: short sections only
        self._tasks_lock = threading.Lock()     # guards _tasks: short sections only
        self._counter_lock = threading.Lock()   # guards the wakeup-disabled count
        self._pending_completion: collections.deque = collections.deque()
        # Shared by the response futures (a lock each cost more than its use: each is held
        # only to change or read its own future's state).
        self._future_lock = threading.Lock()
        self._pending_disconnects: collections.deque = collections.deque()
        self._pending_connects: collections.deque = collections.deque()
        self._wakeup_requested = False
        self._wakeup_disabled_count = 0
        self._polling = 0                        # > 0 while a poll may be blocked in select
        self._closed = False

    def scan_fetches(self, check_crcs: bool, batches: bool) -> None:
        """See NetworkClient.scan_fetches."""
        self.client.scan_fetches(check_crcs, batches)

    # ------------------------------------------------------------------ sending
    def send(self, node: Node | int, api_key: int, body: Any, *, version: int | None = None,
             timeout_ms: int | None = None, max_version: int | None = None) -> RequestFutureCompletionHandler:
        """Queue a request for ``node``; it leaves in the next poll (or at once if a poll is
        blocked in another thread). Returns a future of the decoded response body (dict).

        It never writes the request itself, even to a ready connection: the caller holds the
        future before any of the request is written, so an exception raised meanwhile (a
        KeyboardInterrupt) comes out of the poll that writes it, never out of ``send()`` with
        the request in flight and its future lost. (A group member that lost one anyway
        still finds its held JoinGroup with ``pending_api_keys``.)

        ``body`` is a dict or a callable ``body(version) -> dict``; ``version`` pins the
        version (default: the highest both sides support, capped at ``max_version``);
        ``timeout_ms`` defaults to ``request.timeout.ms``.
        """
        if self._closed:
            raise Errors.IllegalStateError("the consumer network client is closed")
        client = self.client
        node_id = node if type(node) is int else client.node_id_of(node)
        handler = RequestFutureCompletionHandler(self._pending_completion, self._future_lock)
        now = self._clock.now_ms()
        request = ClientRequest(node_id, api_key, body, handler.on_complete, version,
                                self.request_timeout_ms if timeout_ms is None else timeout_ms,
                                created_ms=now, max_version=max_version)
        handler.request = request
        with self._unsent_lock:
            self._unsent.put(node_id, request, now)
        if self._polling:
            self.client.wakeup()
        return handler

    def _try_send(self, now: int) -> None:
        """Steps 1 and 7: hand queued requests to ready nodes; ``ready()`` also starts a
        connection to a node that has none and whose reconnect backoff has passed."""
        if not self._unsent:
            # Nothing queued (most polls). An unlocked length read: a request another thread
            # queues right now is sent by the next step 7 or poll, as if queued just after.
            return
        client = self.client
        with self._unsent_lock:
            for node_id in self._unsent.nodes():
                if not client.ready(node_id, now):
                    continue
                checked = True  # ready() just said so: the first request goes without asking again
                for request in self._unsent.drain(node_id, client.send_capacity(node_id)):
                    if checked or client.send_capacity(node_id) > 0:
                        checked = False
                        client.send_to_ready(request, now)
                    else:  # the connection died while sending: fail like a disconnect
                        self._fail(request, Errors.KafkaConnectionError(
                            f"connection to node {node_id} lost before the request was sent: "
                            f"{client.last_error(node_id)}"))

    # ------------------------------------------------------------------ polling
    def poll(self, timeout_ms: int | RequestFuture | None = None, now: int | None = None,
             execute_delayed_tasks: bool = True, *, disable_wakeup: bool = False,
             future: RequestFuture | None = None) -> Any:
        """One round of network I/O, at most ``timeout_ms`` long (None: until something
        happens). ``poll(future[, timeout_ms])`` instead blocks until the future is done or
        the timeout passes and returns whether it is done.

        Steps (mechanisms §10): send what can be sent; cap the wait by the next delayed task; poll
        the network; raise a pending wakeup (unless disabled); fail unsent requests of
        disconnected nodes; run due delayed tasks; send again; expire old unsent requests.
        """
        if isinstance(timeout_ms, RequestFuture):
            return self.poll_future(timeout_ms, now if now is not None else None,
                                    disable_wakeup=disable_wakeup)
        if self._pending_completion:
            self._fire_pending_completed_requests()
        with self._lock:
            now = self._poll_network(timeout_ms, now, execute_delayed_tasks, disable_wakeup, future)
        task_error = self._run_delayed_tasks(now) if execute_delayed_tasks and self._tasks else None   # 6
        if self._unsent or self._pending_disconnects or self._pending_connects:
            # Otherwise steps 7 and 8 have nothing to do (each checks the same, unlocked).
            with self._lock:
                self._send_and_expire(self._clock.now_ms())                # 7, 8
        if self._pending_completion:
            self._fire_pending_completed_requests()
        if task_error is not None:
            raise task_error
        if not disable_wakeup:
            self.metadata.maybe_raise_exception()
            self.client.maybe_raise_authentication_error()
        return None

    def _poll_network(self, timeout_ms: int | None, now: int | None, execute_delayed_tasks: bool,
                      disable_wakeup: bool, future: RequestFuture | None) -> int:
        """Steps 1-5, holding ``_lock``; returns the time after the network poll."""
        if self._closed:
            raise Errors.IllegalStateError("the consumer network client is closed")
        clock = self._clock
        now = clock.now_ms() if now is None else now
        timeout = FOREVER_MS if timeout_ms is None else max(int(timeout_ms), 0)
        self._polling += 1
        try:
            if self._pending_disconnects or self._pending_connects:
                self._handle_pending_connection_changes(now)
            if self._unsent:
                with self._unsent_lock:
                    queued: set[int] | None = set(self._unsent.nodes())
            else:
                queued = None
            if self._unsent:
                self._try_send(now)                                        # 1
            # An unlocked length read: a task scheduled right after it wakes this poll
            # (_polling is set) and runs in the next one, as if scheduled just after.
            if execute_delayed_tasks and self._tasks:                      # 2
                with self._tasks_lock:
                    nxt = self._tasks.next_deadline_ms()
                if nxt is not None:
                    timeout = min(timeout, max(nxt - now, 0))
            if self._pending_completion or (future is not None and future.is_done):
                timeout = 0
            if (not disable_wakeup and self._wakeup_requested
                    and self._wakeup_disabled_count == 0):
                timeout = 0
            live = self.client.nodes_with_connections()
            attempted = live if queued is None else queued | live
            self.client.poll(timeout, now)                                 # 3
        finally:
            self._polling -= 1
        # The network client's last reading of the same clock, taken as its poll ended.
        now = self.client.polled_ms if self._clock is self.client.clock else clock.now_ms()
        if not disable_wakeup and self._wakeup_requested:                  # 4
            self.maybe_trigger_wakeup()
        if self._unsent:                                                   # 5 (nothing queued: nothing to fail)
            self._check_disconnects(now, attempted)
        return now

    def _send_and_expire(self, now: int) -> None:
        if self._pending_disconnects or self._pending_connects:
            self._handle_pending_connection_changes(now)
        self._try_send(now)                                                # 7
        self._fail_expired_requests(now)                                   # 8

    def poll_future(self, future: RequestFuture, timeout_ms: int | None = None, *,
                    disable_wakeup: bool = False) -> bool:
        """Poll until ``future`` is done (True) or ``timeout_ms`` passes (False)."""
        clock = self._clock
        deadline = None if timeout_ms is None else clock.now_ms() + max(timeout_ms, 0)
        while True:
            remaining = None if deadline is None else max(deadline - clock.now_ms(), 0)
            self.poll(remaining, disable_wakeup=disable_wakeup, future=future)
            if future.is_done:
                return True
            if deadline is not None and clock.now_ms() >= deadline:
                return False

    def poll_no_wakeup(self, timeout_ms: int = 0) -> None:
        """Poll without honouring wakeups and without running delayed tasks."""
        self.poll(timeout_ms, execute_delayed_tasks=False, disable_wakeup=True)

    def try_poll_no_wakeup(self, timeout_ms: int = 0) -> bool:
        """``poll_no_wakeup(timeout_ms)`` unless another thread is polling: then return False
        at once (that poll sends what is queued and reads the responses). For the heartbeat
        thread, which must never wait behind a long application poll. Response listeners
        run after the poll lock is released, as in ``poll()``."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            now = self._poll_network(timeout_ms, None, False, True, None)
            self._send_and_expire(now)
        finally:
            self._lock.release()
        self._fire_pending_completed_requests()
        return True

    def transmit_sends(self) -> None:
        """Send whatever can be sent now, without waiting for responses."""
        self.poll(0, execute_delayed_tasks=False, disable_wakeup=True)

    def frames_waiting(self) -> bool:
        """Whether responses were received that no poll handled yet (see NetworkClient).
        False while another thread polls: that poll takes them (and the connections may
        change under it)."""
        if not self._lock.acquire(blocking=False):
            return False
        try:
            return self.client.frames_waiting()
        finally:
            self._lock.release()

    def send_queued(self) -> None:
        """Hand queued requests to their ready connections, which write them at once (the
        first step of ``transmit_sends()``), without the zero-timeout network poll: for the
        consumer's pipelining step, where the caller's next poll reads the answers anyway.
        A request for a node that is not ready stays queued for the next poll."""
        if not self._unsent:
            return
        with self._lock:
            now = self._clock.now_ms()
            if self._pending_disconnects or self._pending_connects:
                self._handle_pending_connection_changes(now)
            self._try_send(now)
        if self._pending_completion:
            self._fire_pending_completed_requests()

    # ------------------------------------------------------------------ wakeups
    def wakeup(self) -> None:
        """Interrupt a blocking poll; the next poll (this or a later one) raises WakeupError
        unless wakeups are disabled. Safe from any thread."""
        log.debug("wakeup requested")
        self._wakeup_requested = True
        self.client.wakeup()

    def wake_poll(self) -> None:
        """Make a poll blocked in select() (in any thread) return early, without raising
        WakeupError: for a thread that changed state the poller should look at."""
        self.client.wakeup()

    def maybe_trigger_wakeup(self) -> None:
        """Raise WakeupError (once) if ``wakeup()`` was called and wakeups are enabled; for
        callers that check for a wakeup between polls (KafkaConsumer.poll's loop)."""
        if self._wakeup_disabled_count == 0 and self._wakeup_requested:
            self._wakeup_requested = False
            raise Errors.WakeupError("the poll was interrupted by wakeup()")

    def disable_wakeups(self) -> None:
        with self._counter_lock:
            self._wakeup_disabled_count += 1

    def enable_wakeups(self) -> None:
        with self._counter_lock:
            if self._wakeup_disabled_count <= 0:
                raise Errors.IllegalStateError("enable_wakeups() without a matching disable_wakeups()")
            self._wakeup_disabled_count -= 1
            # A wakeup that arrived while disabled is kept for the next enabled poll, as in
            # the Java client; the caller decides whether to clear it.

    @contextlib.contextmanager
    def wakeups_disabled(self):
        self.disable_wakeups()
        try:
            yield
        finally:
            self.enable_wakeups()

    @property
    def wakeup_disabled_count(self) -> int:
        return self._wakeup_disabled_count

    # ------------------------------------------------------------------ completion
    def _fire_pending_completed_requests(self) -> None:
        q = self._pending_completion
        if not q:
            return      # most calls (several per poll): no IndexError raised and caught
        fired = False
        while True:
            try:
                handler = q.popleft()
            except IndexError:
                break
            try:
                handler.fire_completion()
            except Errors.IllegalStateError:
                log.debug("%r was already complete", handler)
            fired = True
        # A thread blocked in poll(future) may be waiting for one of these futures.
        if fired and self._polling:
            self.client.wakeup()

    def _fail(self, request: ClientRequest, exc: BaseException) -> None:
        callback = request.callback
        if callback is not None:  # None once its handler has an outcome (on_complete)
            callback(None, exc)

    def _check_disconnects(self, now: int, attempted: AbstractSet[int]) -> None:
        """Step 5: fail the unsent requests of nodes that cannot take them: nodes missing
        from the metadata, and nodes whose connection failed, if the reconnect backoff still
        runs or this poll was the one trying to connect (``attempted``: nodes with requests
        queued at step 1 or a connection alive before the network poll). A request another
        thread queued while this poll waited, for a node whose last connection failed before
        and whose backoff has passed, is kept: step 7 starts a new connection for it."""
        if not self._unsent:
            return  # nothing queued (see _try_send)
        with self._unsent_lock:
            for node_id in self._unsent.nodes():
                unknown = self.client.node(node_id) is None
                if not unknown:
                    if not self.client.connection_failed(node_id):
                        continue
                    if node_id not in attempted and self.client.connection_delay(node_id, now) == 0:
                        continue
                requests = self._unsent.remove_node(node_id)
                reason = ("the node is not in the cluster metadata" if unknown
                          else self.client.last_error(node_id) or "connection failed")
                for request in requests:
                    self._fail(request, Errors.KafkaConnectionError(
                        f"request {request.api_key} to node {node_id} not sent: {reason}"))

    def _fail_expired_requests(self, now: int) -> None:
        if not self._unsent:
            return  # nothing queued (see _try_send)
        with self._unsent_lock:
            expired = self._unsent.remove_expired(now, self.unsent_expiry_ms)
        for request in expired:
            log.debug("%r expired before it could be sent", request)
            self._fail(request, Errors.KafkaTimeoutError(
                f"request {request.api_key} to node {request.node_id} could not be sent within "
                f"{self.unsent_expiry_ms} ms (node not ready)"))

    def disconnect_async(self, node: Node | int) -> None:
        """Close a node's connection at the next poll (from any thread)."""
        self._pending_disconnects.append(self.client.node_id_of(node))
        if self._polling:
            self.client.wakeup()

    def disconnect(self, node: Node | int) -> None:
        """Close a node's connection now; its queued and in-flight requests fail."""
        with self._lock:
            node_id = self.client.node_id_of(node)
            self._fail_unsent(node_id, Errors.KafkaConnectionError(
                f"connection to node {node_id} was closed by the client"))
            self.client.disconnect(node_id)
        self._fire_pending_completed_requests()

    def _fail_unsent(self, node_id: int, exc: BaseException) -> None:
        with self._unsent_lock:
            requests = self._unsent.remove_node(node_id)
        for request in requests:
            self._fail(request, Errors.KafkaConnectionError(str(exc)))

    def _handle_pending_connection_changes(self, now: int) -> None:
        """Connects and disconnects other threads asked for while this one polled."""
        while self._pending_disconnects:
            node_id = self._pending_disconnects.popleft()
            self._fail_unsent(node_id, Errors.KafkaConnectionError(
                f"connection to node {node_id} was closed by the client"))
            self.client.disconnect(node_id, now)
        while self._pending_connects:
            self.client.ready(self._pending_connects.popleft(), now)

    # ------------------------------------------------------------------ delayed tasks
    def schedule(self, task: Callable[[int], Any], at_ms: int) -> None:
        """Run ``task(now_ms)`` (or ``task.run(now_ms)``) in the first poll at or after ``at_ms``
        that executes delayed tasks. Rescheduling a scheduled task moves it."""
        with self._tasks_lock:
            if task in self._tasks:
                self._tasks.remove(task)
            self._tasks.add(task, at_ms)
        if self._polling:
            self.client.wakeup()

    def unschedule(self, task: Callable[[int], Any]) -> bool:
        with self._tasks_lock:
            return self._tasks.remove(task)

    def _run_delayed_tasks(self, now: int) -> BaseException | None:
        with self._tasks_lock:
            due = self._tasks.pop_due(now)
        first_error = None
        for task in due:
            try:
                run = getattr(task, "run", None)
                (run if callable(run) else task)(now)
            except Exception as exc:  # the other due tasks still run; the first error surfaces
                log.debug("delayed task %r raised %r", task, exc)
                if first_error is None:
                    first_error = exc
        return first_error

    # ------------------------------------------------------------------ waiting helpers
    def await_metadata_update(self, timeout_ms: int | None = None, *, immediate: bool = False) -> bool:
        """Request a metadata refresh and poll until it arrives (True) or time runs out.
        ``immediate``: send it without waiting out retry.backoff.ms after the last successful
        one (Metadata.request_immediate_update)."""
        version = self.metadata.request_immediate_update() if immediate else self.metadata.request_update()
        return self._poll_until(lambda: self.metadata.update_version > version, timeout_ms)

    def topic_partitions(self, topic: str, timeout_ms: int) -> set[int] | None:
        """The topic's partition ids from the metadata this client has, asking the cluster
        (up to ``timeout_ms``) for a topic it has not looked up yet; None if the topic does not
        exist or no answer named it in time."""
        metadata = self.metadata
        parts = metadata.cluster.partitions_for_topic(topic)
        if parts is None:
            metadata.add_topics(topic)
            clock = self._clock
            deadline = clock.now_ms() + timeout_ms
            while True:
                self.await_metadata_update(max(deadline - clock.now_ms(), 0))
                cluster = metadata.cluster
                parts = cluster.partitions_for_topic(topic)
                if parts is not None or topic in cluster.topic_errors or clock.now_ms() >= deadline:
                    break
        return None if parts is None else {p.partition for p in parts}

    def _poll_until(self, done: Callable[[], bool], timeout_ms: int | None) -> bool:
        """Poll (delayed tasks left for the caller's own poll) until ``done()`` or the
        timeout; returns ``done()``."""
        clock = self._clock
        deadline = None if timeout_ms is None else clock.now_ms() + max(timeout_ms, 0)
        while not done():
            remaining = None if deadline is None else deadline - clock.now_ms()
            if remaining is not None and remaining <= 0:
                break
            self.poll(remaining, execute_delayed_tasks=False)
        return done()

    def ensure_bootstrapped(self, timeout_ms: int) -> None:
        """Wait for the first metadata; raise NoBrokersAvailable naming the bootstrap
        addresses (and why each failed) if none answered, KafkaTimeoutError if some
        answered but no metadata arrived in time."""
        if self.metadata.update_version > 0:
            return
        if self.await_metadata_update(timeout_ms):
            return
        addresses = ", ".join(f"{h}:{p}" for h, p in self.metadata.bootstrap_addresses) or "(none)"
        errors = self.client.connection_errors()
        detail = "; ".join(f"{a}: {e}" for a, e in sorted(errors.items()))
        if not self.client.ever_connected():
            raise Errors.NoBrokersAvailable(
                f"none of the bootstrap servers answered within {timeout_ms} ms: {addresses}"
                + (f" ({detail})" if detail else ""))
        raise Errors.KafkaTimeoutError(
            f"connected to the cluster ({addresses}) but got no metadata within {timeout_ms} ms"
            + (f" ({detail})" if detail else ""))

    def await_pending_requests(self, node: Node | int, timeout_ms: int | None = None) -> bool:
        """Poll until ``node`` has no queued or in-flight requests (True) or time runs out."""
        node_id = self.client.node_id_of(node)
        return self._poll_until(lambda: not self.has_pending_requests(node_id), timeout_ms)

    def pending_request_count(self, node: Node | int | None = None) -> int:
        with self._unsent_lock:
            if node is None:
                unsent = len(self._unsent)
            else:
                unsent = self._unsent.pending_count(self.client.node_id_of(node))
        return unsent + self.client.in_flight_request_count(node)

    def pending_api_keys(self, node: Node | int) -> list[int]:
        """The API keys of the node's requests not yet answered, queued or in flight: what
        the caller sent even if an exception (an interrupt) took the future from it."""
        node_id = self.client.node_id_of(node)
        with self._unsent_lock:
            queued = [request.api_key for request in self._unsent.requests(node_id)]
        return queued + self.client.in_flight_api_keys(node_id)

    def has_pending_requests(self, node: Node | int | None = None) -> bool:
        if node is None:
            # Asked on every consumer poll: no lock for the unsent length (one atomic read;
            # the answer is as fresh as pending_request_count's, taken a moment earlier).
            return bool(self._unsent) or self.client.in_flight_request_count() > 0
        return self.pending_request_count(node) > 0

    def least_loaded_node(self) -> int | None:
        """The node to send a request that any broker can answer (see NetworkClient). Safe
        from any thread without the poll lock: it only reads connection states and in-flight
        counts, each read atomic under the GIL, so a poll in another thread can at worst make
        the answer one event stale, which the request's own failure handling covers."""
        return self.client.least_loaded_node(self._clock.now_ms())

    def try_connect(self, node: Node | int) -> bool:
        """Start connecting to ``node`` if it has no connection and its reconnect backoff
        has passed; True if it is ready now. Never waits for another thread's poll: then the
        connection is started by that poll (which is woken) and this returns False."""
        node_id = node if type(node) is int else self.client.node_id_of(node)
        if self._lock.acquire(blocking=False):
            try:
                return self.client.ready(node_id, self._clock.now_ms())
            finally:
                self._lock.release()
        self._pending_connects.append(node_id)
        self.client.wakeup()
        return False

    def is_unavailable(self, node: Node | int) -> bool:
        """True while the node's last connection failed and its reconnect backoff runs.
        Plain reads of the connection state: safe from any thread without the poll lock."""
        return (self.client.connection_failed(node)
                and self.client.connection_delay(node, self._clock.now_ms()) > 0)

    def connection_failed(self, node: Node | int) -> bool:
        return self.client.connection_failed(node)

    def api_version(self, node: Node | int, api_key: int) -> int | None:
        return self.client.api_version(node, api_key)

    def ever_connected(self) -> bool:
        """True once any connection completed its handshake."""
        return self.client.ever_connected()

    # ------------------------------------------------------------------ close
    def close(self) -> None:
        """Fail queued requests, close every connection and release the selector."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            with self._unsent_lock:
                leftovers = []
                for node_id in self._unsent.nodes():
                    leftovers.extend(self._unsent.remove_node(node_id))
            for request in leftovers:
                self._fail(request, Errors.RequestCancelledError("the client was closed"))
            self.client.close()
        self._fire_pending_completed_requests()

    def __enter__(self) -> "ConsumerNetworkClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
