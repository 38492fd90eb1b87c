"""The GIL-free heartbeat pacemaker as a heartbeat driver (mechanisms §2).

``kcore.pacemaker.Pacemaker`` heartbeats without the GIL, so a member survives a C call
that holds the GIL for longer than session.timeout.ms. ``LinkBase`` is what every link
to it shares: the pacemaker and its run() thread, its events, and the Python heartbeat
thread the link carries (for coordinator lookups, and for heartbeats whenever the
pacemaker is not engaged). A link is a ``HeartbeatDriver``; each group protocol has its own
(``PacemakerLink`` here for the classic one; for KIP-848 and share groups, whose pacemaker
advances a member epoch, ``ConsumerPacemakerLink`` and ``SharePacemakerLink`` on ``EpochLink``):

- ``membership_changed()`` (holding the coordinator lock, after any membership change)
  tells the pacemaker whom to heartbeat as and where: the classic member heartbeats while
  STABLE or COMPLETING_REBALANCE with a known coordinator, and stops otherwise.
- ``drain()`` (the application's poll) and ``wait_and_drain()`` (the Python heartbeat
  thread, parked without the GIL) apply the pacemaker's events to the coordinator: a rejoin
  request, a generation reset, a lost coordinator, a poll timeout, a fatal error.

While the pacemaker is engaged the Python heartbeat thread sends no heartbeats; it still
looks the coordinator up when it is lost. On TLS and SASL listeners the pacemaker secures its
connection like the main one (kclient.network.pacemaker_security: the TLS context and the
SASL credentials in the form its C code takes; for OAUTHBEARER each new token is handed
over). Where it cannot (a caller's own ``ssl_context`` object), ``create_link`` returns None
with one log line and the Python thread alone is the driver; where its connection fails
before it ever got through (TLS or SASL refused), the Python thread takes over, also with one
log line saying why.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable, NamedTuple, Protocol

from kcore.timers import Heartbeat

from kclient import errors as Errors
from kclient.group.coordinator_channel import error_for
from kclient.group.heartbeat_driver import HeartbeatDriver
from kclient.group.heartbeat_thread import ClassicHeartbeatHost, HeartbeatThread
from kclient.network.metadata import Node
from kclient.protocol import ApiKey

__all__ = ["LinkBase", "PacemakerLink", "PacemakerTarget", "ClassicPacemakerHost", "create_link", "start_link",
           "pacemaker_unavailable_reason", "pacemaker_security_of"]

log = logging.getLogger(__name__)

# Sentinel: the pushed configuration must be sent again at the next sync (after a fatal
# event the pacemaker halted although the membership did not change).
_REPUSH: Any = object()


#: How often (at most) the token source is asked for a newer OAUTHBEARER token: the built-in
#: OAuth client and the unsecured JAAS login answer from memory; a token provider of the
#: application's own may fetch a token per call, so it is asked less often.
_TOKEN_CHECK_S = 1.0
_APPLICATION_TOKEN_CHECK_S = 30.0


def pacemaker_unavailable_reason(client: Any) -> str | None:
    """Why the pacemaker cannot serve this network client (None: it can)."""
    inner = getattr(client, "client", client)
    settings = getattr(inner, "settings", None)
    protocol = getattr(settings, "security_protocol", None)
    if protocol is None:
        return "the network client does not say which security.protocol it uses"
    if protocol == "PLAINTEXT":
        return None
    security = getattr(settings, "pacemaker_security", None)
    if security is None:
        return f"security.protocol {protocol}: no settings for the compiled connection"
    if security.unavailable is not None:
        return f"security.protocol {protocol}: {security.unavailable}"
    return None


def pacemaker_security_of(client: Any) -> Any:
    """The network client's PacemakerSecurity (None: plaintext)."""
    inner = getattr(client, "client", client)
    return getattr(getattr(inner, "settings", None), "pacemaker_security", None)


def start_link(host: Any, client: Any, link_class: Callable[[Any, str | None], Any], what: str, bound: str) -> Any:
    """A running ``link_class`` for the coordinator ``host`` (which talks to the cluster
    through ``client``), or None with one log line saying why the Python thread sends
    ``what`` instead (and what a GIL-holding call longer than ``bound`` costs then)."""
    reason = pacemaker_unavailable_reason(client)
    if reason is not None:
        log.info("group %s: %s come from the Python heartbeat thread, not the GIL-free pacemaker (%s); a C "
                 "call holding the GIL longer than %s will cost this member its partitions",
                 host.group_id, what, reason, bound)
        return None
    inner = getattr(client, "client", client)
    link = link_class(host, getattr(inner, "client_id", None))
    security = pacemaker_security_of(client)
    if security is not None:
        link.secure(security)
    return link


class LinkBase:
    """What every link shares: the pacemaker, its run() thread, the event plumbing and the
    Python heartbeat driver it carries (``_python``, set by the subclass). Subclasses decide
    what to push (``sync``) and how events change the coordinator (``_apply``)."""

    _python: HeartbeatDriver

    def __init__(self, heartbeat: Heartbeat, lock: Any, group_id: str | None, client_id: str | None):
        from kcore.pacemaker import Pacemaker

        self._lock = lock
        self._pm = Pacemaker(heartbeat, client_id)
        self._pushed: Any = None          # the configuration last pushed (None: not engaged)
        self._fallen_back = False         # the pacemaker could not connect: the Python thread heartbeats
        self._epoch = 0                   # the pacemaker's configuration epoch (events carry it)
        self._security: Any = None        # PacemakerSecurity of a TLS / SASL connection
        self._sasl_version: int | None = None
        self._token: str | None = None    # OAUTHBEARER: the token last handed to the pacemaker
        self._token_checked = 0.0
        self._token_check_s = _TOKEN_CHECK_S
        self._closed = False
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"kclient-pacemaker-{group_id}")
        self._thread.start()

    def _run(self) -> None:
        """The pacemaker's loop, on its thread. A link closed before that thread got to run
        (its client failed to build, and closed what it had made) has nothing to run: its
        pacemaker refuses run() after close(), which is no error here."""
        try:
            self._pm.run()
        except RuntimeError:
            if not self._closed:
                raise

    @property
    def pacemaker(self) -> Any:
        """The kcore.pacemaker.Pacemaker (statistics, send times)."""
        return self._pm

    @property
    def python_driver(self) -> HeartbeatDriver:
        """The Python heartbeat thread this link carries."""
        return self._python

    @property
    def engaged(self) -> bool:
        """The pacemaker, not the Python thread, is responsible for heartbeats now."""
        return self._pushed is not None

    # ------------------------------------------------------------------ security
    def secure(self, security: Any) -> None:
        """Secure the pacemaker's connection like the main client's (before it is engaged)."""
        from kclient.network.sasl import is_builtin_token_source

        self._security = security
        self._token_check_s = (_TOKEN_CHECK_S if is_builtin_token_source(security.token_source)
                               else _APPLICATION_TOKEN_CHECK_S)
        self._pm.set_security(tls=security.tls, sasl_mechanism=security.sasl_mechanism,
                              username=security.username, password=security.password)
        self._sasl_version = None
        self.refresh_token(force=True)

    def prepare_connection(self, node: Any, api_version: Callable[[Any, int], int | None]) -> None:
        """Before engaging towards ``node``: the SaslAuthenticate version the main client
        negotiated with it, and the newest OAUTHBEARER token."""
        from kcore.sasl import MAX_SASL_AUTHENTICATE_VERSION

        if self._security is None or self._security.sasl_mechanism is None:
            return
        version = api_version(node, ApiKey.SASL_AUTHENTICATE)
        if version is not None:
            version = min(version, MAX_SASL_AUTHENTICATE_VERSION)
            if version != self._sasl_version:
                self._pm.set_sasl_authenticate_version(version)
                self._sasl_version = version
        self.refresh_token()

    def refresh_token(self, force: bool = False) -> None:
        """OAUTHBEARER: hand the pacemaker the token source's current token if it changed
        (asked at most once a second); its next (re)connect uses it."""
        security = self._security
        if security is None or security.token_source is None:
            return
        now = time.monotonic()
        if not force and now - self._token_checked < self._token_check_s:
            return
        self._token_checked = now
        try:
            token = security.token_source.token()
            if callable(token):
                token = token()
            extensions = getattr(security.token_source, "extensions", None)
            ext = extensions() if callable(extensions) else None
        except Exception as exc:    # the source's own failure: the main connections report it
            log.debug("OAUTHBEARER token for the pacemaker not refreshed: %s", type(exc).__name__)
            return
        if isinstance(token, str) and token and token != self._token:
            self._pm.set_sasl_token(token, ext or None)
            self._token = token

    # ------------------------------------------------------------------ HeartbeatDriver
    def start(self) -> None:
        self._python.start()

    def enable(self) -> None:
        self._python.enable()

    def disable(self) -> None:
        self._python.disable()

    def membership_changed(self) -> None:
        self.sync()

    @property
    def failure(self) -> BaseException | None:
        return self._python.failure

    def restarted(self) -> "LinkBase":
        """The same pacemaker, with a new Python thread (the failed one has ended)."""
        self._python = self._python.restarted()
        return self

    def drain(self) -> None:
        """Apply events already posted (the application's poll)."""
        self.refresh_token()
        events = self._pm.take_events()
        if events:
            with self._lock:
                self._apply(events)

    def wait_and_drain(self, timeout_ms: int) -> None:
        """Wait without the GIL for events (at most timeout_ms), then apply them."""
        events = self._pm.wait_events(max(0, int(timeout_ms)))
        self.refresh_token()
        if events:
            with self._lock:
                self._apply(events)

    def wake(self) -> None:
        self._pm.wake()

    def close(self, timeout_s: float | None = 5.0) -> None:
        """Stop the pacemaker (no heartbeat may follow: a LeaveGroup may come next), then the
        Python thread; each waited for up to ``timeout_s``."""
        self._pushed = None
        self._closed = True
        self._pm.close()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)
        self._python.close(timeout_s)

    def connect_failure(self, errno_: int) -> str:
        """Why the pacemaker's connection failed, for a log line (never a secret)."""
        return self._pm.last_error or f"errno {errno_}"

    def sync(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def disengage(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _apply(self, events: list) -> None:  # pragma: no cover - abstract
        raise NotImplementedError


class PacemakerTarget(NamedTuple):
    """Whom the classic pacemaker heartbeats as, and where."""

    node: Node
    generation_id: int
    member_id: str


class ClassicPacemakerHost(ClassicHeartbeatHost, Protocol):
    """What the classic link needs of its coordinator, beyond what its heartbeat thread needs."""

    group_instance_id: str | None
    session_timeout_ms: int
    request_timeout_ms: int

    @property
    def member_id(self) -> str: ...

    def pacemaker_target(self) -> PacemakerTarget | None:
        """The member to heartbeat for (STABLE or COMPLETING_REBALANCE, with a member id and a
        known coordinator), else None; holding the lock."""

    def generation_id(self) -> int: ...

    def is_stable(self) -> bool: ...

    def api_version(self, node: Node, api: int) -> int | None: ...

    def request_rejoin(self, reason: str) -> None: ...

    def reset_state_and_generation(self, reason: str, reset_member_id: bool) -> None: ...

    def reset_generation_on_response_error(self, api: str, error: BaseException) -> None: ...


def create_link(coordinator: ClassicPacemakerHost, client: Any) -> "PacemakerLink | None":
    """A running pacemaker for this coordinator, or None (the Python thread heartbeats)."""
    return start_link(coordinator, client, PacemakerLink, "heartbeats", "session.timeout.ms")


class PacemakerLink(LinkBase):
    """The classic member's link: Heartbeat and LeaveGroup from the pacemaker."""

    def __init__(self, coordinator: ClassicPacemakerHost, client_id: str | None):
        super().__init__(coordinator.heartbeat, coordinator.lock, coordinator.group_id, client_id)
        self._c = coordinator
        self._python = HeartbeatThread(coordinator, self)

    def disengage(self) -> None:
        """Nothing to hand over: the classic Python thread heartbeats only while the
        pacemaker is not engaged (``membership_changed`` decides)."""

    def sync(self) -> None:
        """Push the coordinator's membership; call holding the coordinator lock."""
        from kcore.pacemaker import MAX_HEARTBEAT_VERSION, MAX_LEAVE_GROUP_VERSION

        c = self._c
        want = None
        target = c.pacemaker_target()
        if target is not None:
            node = target.node
            hv = c.api_version(node, ApiKey.HEARTBEAT)
            lv = c.api_version(node, ApiKey.LEAVE_GROUP)
            if hv is not None and hv <= MAX_HEARTBEAT_VERSION:
                if lv is not None and lv > MAX_LEAVE_GROUP_VERSION:
                    lv = None
                want = (node.host, node.port, target.generation_id, target.member_id, c.group_instance_id, hv,
                        None if c.group_instance_id is not None else lv, c.request_timeout_ms)
            else:
                log.debug("group %s: Heartbeat version %r with %s not known yet: the Python thread "
                          "heartbeats", c.group_id, hv, node)
        if self._fallen_back:
            want = None
        if want == self._pushed:
            return
        self._pushed = want
        if want is None:
            self._epoch = self._pm.deactivate()
            return
        assert target is not None   # want is only set with a target
        self.prepare_connection(target.node, c.api_version)
        host, port, generation_id, member_id, instance_id, hv, lv, timeout = want
        self._epoch = self._pm.configure(host=host, port=port, group_id=c.group_id or "", member_id=member_id,
                                         generation_id=generation_id, group_instance_id=instance_id,
                                         heartbeat_version=hv, leave_group_version=lv,
                                         request_timeout_ms=timeout)
        log.debug("group %s: pacemaker heartbeats member %s generation %d to %s:%d (Heartbeat v%d)",
                  c.group_id, member_id, generation_id, host, port, hv)

    # ------------------------------------------------------------------ events -> coordinator
    def _apply(self, events: list) -> None:
        from kcore.pacemaker import (CODE_CONNECT_FAILED, CODE_SESSION_EXPIRED, EV_COORDINATOR_LOST, EV_DISCONNECTED,
                                     EV_HEARTBEAT_ERROR, EV_POLL_TIMEOUT)

        c = self._c
        for kind, code, epoch, generation, _at_ms, detail in events:
            if epoch != self._epoch:
                log.debug("group %s: ignoring pacemaker event %r of an older configuration", c.group_id,
                          (kind, code))
                continue
            if kind == EV_DISCONNECTED and code == CODE_CONNECT_FAILED and not self._pm.stats()["connects"]:
                # It never reached the coordinator although the main client does (a proxy, a
                # custom resolver or socket factory, TLS or SASL refused): heartbeats must not
                # depend on it.
                log.info("group %s: the GIL-free pacemaker could not connect to the coordinator (%s); the "
                         "Python heartbeat thread heartbeats instead", c.group_id, self.connect_failure(detail))
                self._fallen_back = True
            elif kind == EV_DISCONNECTED:
                log.debug("group %s: pacemaker connection to the coordinator failed (%d, errno %d); "
                          "reconnecting", c.group_id, code, detail)
            elif kind == EV_COORDINATOR_LOST:
                if code == CODE_SESSION_EXPIRED:
                    reason = f"no heartbeat response within session.timeout.ms ({c.session_timeout_ms} ms)"
                else:
                    reason = f"{error_for(code)!r} from Heartbeat"
                c.mark_coordinator_unknown(reason)
            elif kind == EV_POLL_TIMEOUT:
                log.warning(
                    "member %s of group %s: poll() was not called for %d ms, more than max.poll.interval.ms "
                    "(%d ms): the pacemaker left the group (LeaveGroup %s) so its partitions are reassigned; "
                    "the next poll() rejoins. Process records faster, lower max.poll.records, or raise "
                    "max.poll.interval.ms.", c.member_id, c.group_id, detail,
                    c.heartbeat.max_poll_interval_ms, "not sent" if code < 0 else f"answered {code}")
                c.reset_state_and_generation("left the group: poll() not called within max.poll.interval.ms",
                                             reset_member_id=True)
            elif kind == EV_HEARTBEAT_ERROR:
                self._on_heartbeat_error(code, generation)
        # Membership changes made above have synced already; make sure a halt is not permanent.
        self.sync()

    def _on_heartbeat_error(self, code: int, generation: int) -> None:
        c = self._c
        err = error_for(code)
        if isinstance(err, Errors.RebalanceInProgressError):
            if c.is_stable():
                c.request_rejoin("the group is rebalancing (heartbeat answered REBALANCE_IN_PROGRESS)")
            return
        if isinstance(err, (Errors.IllegalGenerationError, Errors.UnknownMemberIdError,
                            Errors.FencedInstanceIdError)):
            if c.generation_id() != generation:
                log.debug("group %s: ignoring %r to a heartbeat of an older generation", c.group_id, err)
                self._pushed = _REPUSH
                return
            c.reset_generation_on_response_error("Heartbeat", err)
            if not isinstance(err, Errors.FencedInstanceIdError):
                return
        elif isinstance(err, Errors.GroupAuthorizationFailedError):
            err = Errors.GroupAuthorizationFailedError(f"not authorized to use group {c.group_id!r}")
        elif not isinstance(err, Errors.UnsupportedVersionError):
            log.debug("heartbeat of group %s failed: %r", c.group_id, err)
            return
        # Fatal (mechanisms §2 step 8): the application's next poll() raises it.
        self._pushed = _REPUSH
        self._fail(err)

    def _fail(self, err: BaseException) -> None:
        python = self._python
        if isinstance(python, HeartbeatThread):
            python.fail(err)
