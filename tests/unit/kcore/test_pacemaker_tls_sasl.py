"""kcore.pacemaker on a secured connection: TLS (Python's ssl as the server) and SASL (PLAIN,
SCRAM-SHA-256/512 computed by the server with hashlib, OAUTHBEARER) before its heartbeats,
KIP-368 session lifetimes, new tokens, and the failures that must say why without a secret:
a wrong password, a refused token, an unknown CA. Also kclient.network.pacemaker_security
(settings -> what the C side takes) and the group layer's choice of driver."""
from __future__ import annotations

import base64
import hashlib
import hmac
import socket
import ssl
import struct
import threading
import time

import pytest

from kcore import pacemaker as pm
from kcore.timers import Heartbeat
from kcore.tls import TlsContext
from kclient import protocol
from kclient.clock import SYSTEM_CLOCK
from kclient.config import ConsumerConfig
from kclient.group.pacemaker import pacemaker_unavailable_reason
from kclient.network.network_config import NetworkClientConfig
from kclient.testing.pki import TestPki

HEARTBEAT, LEAVE_GROUP, SASL_HANDSHAKE, SASL_AUTHENTICATE = 12, 13, 17, 36
USER, PASSWORD = "carol", "carol-secret-9d3e"
DEADLINE_S = 20.0


def wait_for(cond, timeout=DEADLINE_S, what="condition"):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return TestPki.create(tmp_path_factory.mktemp("pki"))


class SecureCoordinator:
    """A coordinator that speaks TLS (optional), SASL, then answers Heartbeat."""

    def __init__(self, pki, *, tls=True, mechanisms=("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"),
                 password=PASSWORD, session_ms=0, valid_tokens=None):
        self.ctx = None
        if tls:
            self.ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            self.ctx.load_cert_chain(str(pki.broker_pem))
        self.mechanisms, self.password, self.session_ms = list(mechanisms), password, session_ms
        self.valid_tokens = valid_tokens          # None: any token
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.lock = threading.Lock()
        self.connections = 0
        self.authenticated = 0
        self.tokens: list[str] = []
        self.heartbeats = 0
        self.unauthenticated_requests = 0
        self.client_certs: list = []
        self.refuse_first = 0            # connections closed at once, before TLS
        self.leaves = 0
        self.timeline: list[tuple[float, str]] = []   # (time.monotonic(), "login" | "heartbeat")
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.closed:
            try:
                raw, _ = self.server.accept()
            except OSError:
                return
            with self.lock:
                self.connections += 1
                refuse = self.connections <= self.refuse_first
            if refuse:
                raw.close()
                continue
            threading.Thread(target=self._serve, args=(raw,), daemon=True).start()

    @staticmethod
    def _read(conn, n):
        buf = b""
        while len(buf) < n:
            chunk = conn.recv(n - len(buf))
            if not chunk:
                raise ConnectionError
            buf += chunk
        return buf

    def _serve(self, raw):
        conn = raw
        try:
            if self.ctx is not None:
                conn = self.ctx.wrap_socket(raw, server_side=True)
            mech = None
            scram: dict = {}
            authenticated = not self.mechanisms      # no SASL on this listener: TLS is enough
            if self.ctx is not None and self.ctx.verify_mode == ssl.CERT_REQUIRED:
                with self.lock:
                    self.client_certs.append(conn.getpeercert())
            while True:
                frame = self._read(conn, struct.unpack(">i", self._read(conn, 4))[0])
                api, version, corr, _cid, body = protocol.decode_request(frame)
                if api == SASL_HANDSHAKE:
                    with self.lock:
                        self.timeline.append((time.monotonic(), "login"))
                    mech = body["mechanism"]
                    code = 0 if mech in self.mechanisms else 33
                    resp = {"error_code": code, "mechanisms": self.mechanisms}
                elif api == SASL_AUTHENTICATE:
                    code, out, done = self._step(mech, bytes(body["auth_bytes"]), scram)
                    resp = {"error_code": code, "error_message": "Authentication failed: invalid credentials"
                            if code else None, "auth_bytes": out, "session_lifetime_ms": self.session_ms}
                    if done:
                        authenticated = True
                        with self.lock:
                            self.authenticated += 1
                elif api == LEAVE_GROUP and authenticated:
                    with self.lock:
                        self.leaves += 1
                    resp = {"throttle_time_ms": 0, "error_code": 0,
                            "members": [{"member_id": "m-1", "group_instance_id": None, "error_code": 0}]}
                elif api == HEARTBEAT:
                    if not authenticated:
                        with self.lock:
                            self.unauthenticated_requests += 1
                        return
                    with self.lock:
                        self.heartbeats += 1
                        self.timeline.append((time.monotonic(), "heartbeat"))
                    resp = {"throttle_time_ms": 0, "error_code": 0}
                else:
                    return
                conn.sendall(protocol.encode_response(api, version, corr, resp))
                if api == SASL_AUTHENTICATE and resp["error_code"]:
                    return
        except (ConnectionError, OSError, ssl.SSLError):
            pass
        finally:
            conn.close()

    def _step(self, mech, msg, scram):
        """(error code, answer bytes, authenticated)."""
        if mech == "PLAIN":
            _, user, password = msg.split(b"\0")
            ok = user.decode() == USER and password.decode() == self.password
            return (0 if ok else 58), b"", ok
        if mech == "OAUTHBEARER":
            if msg == b"\x01":
                return 58, b"", False
            token = msg.decode().split("auth=Bearer ", 1)[1].split("\x01", 1)[0]
            with self.lock:
                self.tokens.append(token)
            if self.valid_tokens is not None and token not in self.valid_tokens:
                return 0, b'{"status":"invalid_token"}', False
            return 0, b"", True
        h = "sha512" if mech.endswith("512") else "sha256"
        if "nonce" not in scram:
            bare = msg[3:]
            attrs = dict(p.split(b"=", 1) for p in bare.split(b","))
            scram["nonce"] = attrs[b"r"] + b"srv-nonce"
            scram["salt"] = b"salt-of-carol"
            scram["first"] = f"r={scram['nonce'].decode()},s={base64.b64encode(scram['salt']).decode()},i=4096"
            scram["bare"] = bare
            return 0, scram["first"].encode(), False
        final_no_proof, proof = msg.rsplit(b",p=", 1)
        salted = hashlib.pbkdf2_hmac(h, self.password.encode(), scram["salt"], 4096)
        auth = scram["bare"] + b"," + scram["first"].encode() + b"," + final_no_proof
        client_key = hmac.new(salted, b"Client Key", h).digest()
        stored = hashlib.new(h, client_key).digest()
        sig = hmac.new(stored, auth, h).digest()
        if bytes(a ^ b for a, b in zip(base64.b64decode(proof), sig)) != client_key:
            return 58, b"", False
        server_key = hmac.new(salted, b"Server Key", h).digest()
        return 0, b"v=" + base64.b64encode(hmac.new(server_key, auth, h).digest()), True

    def close(self):
        self.closed = True
        self.server.close()


class Loop:
    def __init__(self, session=3000, interval=100, max_poll=60000, backoff=50):
        self.hb = Heartbeat(session, interval, max_poll, backoff, SYSTEM_CLOCK.now_ms())
        self.pm = pm.Pacemaker(self.hb, "test-client")
        self.thread = threading.Thread(target=self.pm.run, daemon=True)
        self.thread.start()
        wait_for(lambda: self.pm.is_running, what="the loop to start")
        self.events: list = []

    def configure(self, port):
        self.hb.reset_timeouts(SYSTEM_CLOCK.now_ms())
        return self.pm.configure(host="127.0.0.1", port=port, group_id="g", member_id="m-1", generation_id=3,
                                 heartbeat_version=4, leave_group_version=5, request_timeout_ms=5000)

    def wait_event(self, kind):
        def seen():
            self.events.extend(self.pm.wait_events(50))
            return any(e[0] == kind for e in self.events)
        wait_for(seen, what=f"event {kind}")
        return next(e for e in self.events if e[0] == kind)

    def close(self):
        self.pm.close()
        self.thread.join(10)
        assert not self.thread.is_alive()


@pytest.fixture
def make(pki):
    made: list = []

    def build(**kw):
        loop_kw = {k: kw.pop(k) for k in ("session", "interval", "max_poll", "backoff") if k in kw}
        peer = SecureCoordinator(pki, **kw)
        lp = Loop(**loop_kw)
        made.append((peer, lp))
        return peer, lp
    yield build
    for peer, lp in made:
        lp.close()
        peer.close()


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize("tls", [True, False])
@pytest.mark.parametrize("version", [0, 1, 2])
def test_heartbeats_after_tls_and_sasl(pki, make, mechanism, tls, version):
    peer, lp = make(tls=tls)
    lp.pm.set_security(tls=TlsContext(cafile=str(pki.ca_file)) if tls else None, sasl_mechanism=mechanism,
                       username=USER, password=PASSWORD, sasl_authenticate_version=version)
    lp.configure(peer.port)
    wait_for(lambda: lp.pm.stats()["received"] >= 3, what="3 heartbeats answered")
    assert peer.authenticated == 1 and peer.unauthenticated_requests == 0
    stats = lp.pm.stats()
    assert stats["connects"] == 1 and stats["authentications"] == 1


def test_mutual_tls_without_sasl(pki, make):
    peer, lp = make(mechanisms=())
    peer.ctx.verify_mode = ssl.CERT_REQUIRED
    peer.ctx.load_verify_locations(str(pki.ca_file))
    lp.pm.set_security(tls=TlsContext(cafile=str(pki.ca_file), certchain=pki.client_cert.read_text(),
                                      key=pki.client_key.read_text()))
    lp.configure(peer.port)
    wait_for(lambda: lp.pm.stats()["received"] >= 3, what="3 heartbeats answered")
    assert peer.client_certs and peer.client_certs[0]["subject"] == ((("commonName", "client"),),)
    assert lp.pm.last_error == "" and lp.pm.stats()["authentications"] == 0


def test_sessions_the_broker_bounds_are_renewed_before_they_end(pki, make):
    peer, lp = make(session_ms=600)
    lp.pm.set_security(tls=TlsContext(cafile=str(pki.ca_file)), sasl_mechanism="SCRAM-SHA-512", username=USER,
                       password=PASSWORD, sasl_authenticate_version=1)
    lp.configure(peer.port)
    wait_for(lambda: peer.authenticated >= 4, what="4 sessions")
    assert peer.unauthenticated_requests == 0
    # Each new session came before the old one ended: heartbeats never failed.
    assert lp.pm.stats()["failed"] == 0


def test_a_session_renewal_due_before_the_next_heartbeat_comes_right_after_the_last_answer(pki, make):
    # Sessions of 2 s are renewed 1.7 s in; heartbeats every second. Renewing at 1.7 s would
    # land 700, 400 and 100 ms after a heartbeat: the last would delay the next heartbeat by
    # the TLS handshake and the SASL exchange. Renewed right after the heartbeat before it,
    # a renewal starts a few milliseconds after a heartbeat's answer.
    peer, lp = make(session_ms=2000, interval=1000)
    lp.pm.set_security(tls=TlsContext(cafile=str(pki.ca_file)), sasl_mechanism="SCRAM-SHA-512", username=USER,
                       password=PASSWORD, sasl_authenticate_version=1)
    lp.configure(peer.port)
    wait_for(lambda: peer.authenticated >= 4, timeout=30, what="3 renewed sessions")
    with peer.lock:
        timeline = list(peer.timeline)
    logins = [i for i, (_, kind) in enumerate(timeline) if kind == "login"][1:4]
    after_heartbeat = [timeline[i][0] - timeline[i - 1][0] for i in logins if timeline[i - 1][1] == "heartbeat"]
    assert len(after_heartbeat) == 3, timeline
    assert max(after_heartbeat) < 0.5, after_heartbeat
    assert lp.pm.stats()["failed"] == 0


def test_a_new_oauthbearer_token_is_used_from_the_next_session(pki, make):
    peer, lp = make(session_ms=500)
    lp.pm.set_security(tls=TlsContext(cafile=str(pki.ca_file)), sasl_mechanism="OAUTHBEARER",
                       sasl_authenticate_version=2)
    lp.pm.set_sasl_token("token-1", {"traceId": "x"})
    lp.configure(peer.port)
    wait_for(lambda: peer.heartbeats >= 1 and "token-1" in peer.tokens, what="a session with token-1")
    lp.pm.set_sasl_token("token-2")
    wait_for(lambda: "token-2" in peer.tokens, what="a session with token-2")
    assert peer.tokens[-1] == "token-2" and lp.pm.stats()["failed"] == 0


def test_without_a_token_oauthbearer_cannot_connect(pki, make):
    peer, lp = make()
    lp.pm.set_security(tls=TlsContext(cafile=str(pki.ca_file)), sasl_mechanism="OAUTHBEARER")
    lp.configure(peer.port)
    ev = lp.wait_event(pm.EV_DISCONNECTED)
    assert ev[1] == pm.CODE_CONNECT_FAILED and "no token" in lp.pm.last_error


def test_a_refused_token_fails_naming_the_broker_error(pki, make):
    peer, lp = make(valid_tokens={"good"})
    lp.pm.set_security(tls=TlsContext(cafile=str(pki.ca_file)), sasl_mechanism="OAUTHBEARER")
    lp.pm.set_sasl_token("expired-token")
    lp.configure(peer.port)
    ev = lp.wait_event(pm.EV_DISCONNECTED)
    assert ev[1] == pm.CODE_CONNECT_FAILED
    assert "OAUTHBEARER authentication failed" in lp.pm.last_error and "expired-token" not in lp.pm.last_error
    assert lp.pm.stats()["connects"] == 0 and peer.heartbeats == 0


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_a_wrong_password_fails_without_naming_it(pki, make, mechanism):
    peer, lp = make(password="the-real-one")
    lp.pm.set_security(tls=TlsContext(cafile=str(pki.ca_file)), sasl_mechanism=mechanism, username=USER,
                       password="wrong-pw-41c7")
    lp.configure(peer.port)
    ev = lp.wait_event(pm.EV_DISCONNECTED)
    assert ev[1] == pm.CODE_CONNECT_FAILED
    assert "authentication failed" in lp.pm.last_error and "wrong-pw-41c7" not in lp.pm.last_error
    assert lp.pm.stats()["connects"] == 0 and peer.heartbeats == 0


def test_a_refused_mechanism_and_an_unknown_ca_say_why(pki, make):
    peer, lp = make(mechanisms=("PLAIN",))
    lp.pm.set_security(tls=TlsContext(cafile=str(pki.ca_file)), sasl_mechanism="SCRAM-SHA-256", username=USER,
                       password=PASSWORD)
    lp.configure(peer.port)
    lp.wait_event(pm.EV_DISCONNECTED)
    assert "refused SASL mechanism SCRAM-SHA-256" in lp.pm.last_error
    peer2, lp2 = make()
    lp2.pm.set_security(tls=TlsContext(cafile=str(pki.other_ca_file)), sasl_mechanism="PLAIN", username=USER,
                        password=PASSWORD)
    lp2.configure(peer2.port)
    lp2.wait_event(pm.EV_DISCONNECTED)
    assert "certificate verify failed" in lp2.pm.last_error and peer2.authenticated == 0


def test_a_leave_group_sent_on_a_new_authenticated_connection_is_answered(pki, make):
    """max.poll.interval.ms expires while there is no connection: the LeaveGroup (encoded
    first) goes out after the TLS handshake and the SASL exchange, and its answer is matched."""
    peer, lp = make(max_poll=600, backoff=2000)
    peer.refuse_first = 1        # the first connection fails: none is open when the poll times out
    lp.pm.set_security(tls=TlsContext(cafile=str(pki.ca_file)), sasl_mechanism="SCRAM-SHA-256", username=USER,
                       password=PASSWORD, sasl_authenticate_version=1)
    lp.configure(peer.port)
    ev = lp.wait_event(pm.EV_POLL_TIMEOUT)
    assert ev[1] == 0, "the LeaveGroup's answer was not matched (code %d)" % ev[1]
    assert peer.leaves == 1 and peer.authenticated == 1


def test_set_security_rejects_bad_input():
    p = pm.Pacemaker(Heartbeat(3000, 100, 60000, 50, 0), "c")
    with pytest.raises(ValueError, match="GSSAPI"):
        p.set_security(sasl_mechanism="GSSAPI")
    with pytest.raises(ValueError, match="username and a password"):
        p.set_security(sasl_mechanism="PLAIN", username="u")
    with pytest.raises(TypeError):
        p.set_security(tls="not a context")
    with pytest.raises(ValueError, match="SaslAuthenticate version"):
        p.set_security(sasl_mechanism="PLAIN", username="u", password="p", sasl_authenticate_version=3)
    with pytest.raises(ValueError):
        p.set_sasl_token("")


# ---------------------------------------------------------------- settings -> the C side
def _security(settings):
    return NetworkClientConfig.of(ConsumerConfig({"bootstrap.servers": "127.0.0.1:1", **settings})).pacemaker_security


def test_settings_become_what_the_compiled_connection_takes(pki):
    sec = _security({"security.protocol": "SASL_SSL", "ssl.cafile": str(pki.ca_file), "sasl.mechanism": "SCRAM-SHA-512",
                     "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
                                         f'username="{USER}" password="{PASSWORD}";'})
    assert isinstance(sec.tls, TlsContext) and sec.tls.check_hostname
    assert (sec.sasl_mechanism, sec.username, sec.password, sec.unavailable) == ("SCRAM-SHA-512", USER, PASSWORD, None)
    assert PASSWORD not in repr(sec)
    sec = _security({"security.protocol": "SSL", "ssl.cafile": str(pki.ca_file), "ssl.check.hostname": False,
                     "ssl.certfile": str(pki.client_cert), "ssl.keyfile": str(pki.client_key)})
    assert not sec.tls.check_hostname and sec.sasl_mechanism is None and sec.unavailable is None
    sec = _security({"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
                     "sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule "
                                         'required unsecuredLoginStringClaim_sub="u";'})
    assert sec.tls is None and sec.sasl_mechanism == "OAUTHBEARER" and sec.token_source.token()
    assert _security({}) is None


def test_a_callers_own_ssl_context_keeps_the_python_thread(pki):
    sec = _security({"security.protocol": "SSL", "ssl.context": ssl.create_default_context()})
    assert sec.unavailable is not None and "ssl_context" in sec.unavailable

    class Client:
        class settings:
            security_protocol = "SSL"
            pacemaker_security = sec
    assert "ssl_context" in pacemaker_unavailable_reason(Client())
    Client.settings.pacemaker_security = _security({"security.protocol": "SSL", "ssl.cafile": str(pki.ca_file)})
    assert pacemaker_unavailable_reason(Client()) is None


def test_pkcs12_stores_are_converted_for_the_compiled_connection(pki, make):
    pytest.importorskip("cryptography")
    from kclient.testing.pki import P12_PASSWORD

    sec = _security({"security.protocol": "SSL", "ssl.truststore.type": "PKCS12",
                     "ssl.truststore.location": str(pki.ca_p12), "ssl.truststore.password": P12_PASSWORD,
                     "ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(pki.client_p12),
                     "ssl.keystore.password": P12_PASSWORD})
    assert sec.unavailable is None
    peer, lp = make(mechanisms=())
    peer.ctx.verify_mode = ssl.CERT_REQUIRED
    peer.ctx.load_verify_locations(str(pki.ca_file))
    lp.pm.set_security(tls=sec.tls)
    lp.configure(peer.port)
    wait_for(lambda: lp.pm.stats()["received"] >= 2, what="2 heartbeats answered over mTLS")
    assert peer.client_certs and peer.client_certs[0]["subject"] == ((("commonName", "client"),),)


def test_the_link_hands_the_pacemaker_each_new_token_of_the_source(pki):
    from kclient.group.pacemaker import LinkBase
    from kclient.network.pacemaker_security import PacemakerSecurity

    class Source:
        value = "first-token"
        calls = 0

        def token(self):
            self.calls += 1
            return self.value

        def extensions(self):
            return {"logicalCluster": "lkc-1"}

    source = Source()
    peer = SecureCoordinator(pki, tls=False, session_ms=500)
    hb = Heartbeat(3000, 100, 60000, 50, SYSTEM_CLOCK.now_ms())
    link = LinkBase(hb, threading.Lock(), "g", "c")
    try:
        link.secure(PacemakerSecurity("SASL_PLAINTEXT", sasl_mechanism="OAUTHBEARER", token_source=source))
        # The SaslAuthenticate version the main client negotiated (v1+ carries the session lifetime).
        link.prepare_connection("node", lambda node, api: 2 if api == SASL_AUTHENTICATE else None)
        hb.reset_timeouts(SYSTEM_CLOCK.now_ms())
        link.pacemaker.configure(host="127.0.0.1", port=peer.port, group_id="g", member_id="m-1", generation_id=1,
                                 heartbeat_version=4)
        wait_for(lambda: "first-token" in peer.tokens and peer.heartbeats >= 1, what="a session with the first token")
        # An application's provider may fetch per call: it is asked every 30 s, not at each poll.
        calls = source.calls
        link.refresh_token()
        assert source.calls == calls
        source.value = "second-token"
        link.refresh_token(force=True)
        wait_for(lambda: "second-token" in peer.tokens, what="a session with the second token")
        assert link.pacemaker.stats()["failed"] == 0
    finally:
        link.pacemaker.close()
        link._thread.join(10)
        peer.close()
