"""kcore.tls and kcore.transport over TLS: the C handshake, reads and writes against Python's
ssl module as the server (a local listener), with the test PKI of kclient.testing: frames of
every size both ways, server verification, host names, mTLS, key passwords, and hostile peers
(negative, oversized and truncated frames over TLS, a server that closes mid-handshake, one
that never answers, one that does not speak TLS)."""
from __future__ import annotations

import socket
import ssl
import struct
import subprocess
import threading

import pytest

from kcore.errors import FrameTooLargeError, InvalidLengthError, KafkaConnectionError
from kcore.tls import TlsConfigurationError, TlsContext, TlsHandshakeError
from kcore.transport import Connection
from kclient.testing.pki import TestPki

KEY_PASSWORD = "key-pass-8c1f"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    p = TestPki.create(d)
    subprocess.run(["openssl", "pkey", "-in", str(p.client_key), "-aes256", "-passout", f"pass:{KEY_PASSWORD}",
                    "-out", str(d / "client-enc.key")], check=True, capture_output=True)
    return p


class Server:
    """A one-connection-at-a-time TLS server on 127.0.0.1 running ``handler(sock)`` per client."""

    def __init__(self, pki, handler, *, require_client_cert=False, tls=True):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(pki.broker_pem))
        ctx.load_verify_locations(str(pki.ca_file))
        ctx.verify_mode = ssl.CERT_REQUIRED if require_client_cert else ssl.CERT_NONE
        self.ctx, self.handler, self.tls = ctx, handler, tls
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.errors: list[BaseException] = []
        self.peer_certs: list = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while True:
            try:
                raw, _ = self.listener.accept()
            except OSError:
                return
            try:
                sock = self.ctx.wrap_socket(raw, server_side=True) if self.tls else raw
                if self.tls:
                    self.peer_certs.append(sock.getpeercert())
                self.handler(sock)
            except (OSError, ssl.SSLError) as exc:
                self.errors.append(exc)
            finally:
                raw.close()

    def close(self):
        try:
            self.listener.shutdown(socket.SHUT_RDWR)      # wakes the accept() in progress
        except OSError:
            pass
        self.listener.close()
        self.thread.join(5)


def read_frame(sock) -> bytes:
    head = recv_exactly(sock, 4)
    return recv_exactly(sock, struct.unpack(">i", head)[0])


def recv_exactly(sock, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return out


def framed(b: bytes) -> bytes:
    return struct.pack(">i", len(b)) + b


def echo_twice(sock):
    while True:
        try:
            body = read_frame(sock)
        except ConnectionError:
            return
        sock.sendall(framed(body + body))


@pytest.fixture
def server(pki):
    servers = []

    def make(handler=echo_twice, **kw):
        s = Server(pki, handler, **kw)
        servers.append(s)
        return s
    yield make
    for s in servers:
        s.close()


def connect(port: int, ctx: TlsContext, host: str = "127.0.0.1", timeout_ms: int = 5000) -> Connection:
    conn = Connection.open("127.0.0.1", port, 5000)
    conn.start_tls(ctx, host, timeout_ms)
    return conn


@pytest.mark.parametrize("size", [0, 1, 4095, 16384, 16385, 70000, 1 << 20])
def test_frames_of_every_size_cross_tls_both_ways(pki, server, size):
    s = server()
    conn = connect(s.port, TlsContext(cafile=str(pki.ca_file)))
    assert conn.tls
    body = bytes(i % 251 for i in range(size))
    conn.send_all(framed(body), 5000)
    assert conn.recv_frame(2 * size + 1, 5000) == body + body
    conn.send_all(framed(b"again"), 5000)     # the session goes on
    assert conn.recv_frame(100, 5000) == b"againagain"
    conn.close()


def test_trust_from_pem_text_and_the_system_store(pki, server):
    s = server()
    conn = connect(s.port, TlsContext(cadata=pki.ca_file.read_text()))
    conn.send_all(framed(b"x"), 5000)
    assert conn.recv_frame(10, 5000) == b"xx"
    conn.close()
    # The system's store does not know the test CA.
    with pytest.raises(TlsHandshakeError, match="certificate verify failed"):
        connect(s.port, TlsContext())


def test_a_wrong_ca_fails_with_a_clear_error(pki, server):
    s = server()
    with pytest.raises(TlsHandshakeError, match="certificate verify failed"):
        connect(s.port, TlsContext(cafile=str(pki.other_ca_file)))


def test_the_host_name_is_checked_unless_turned_off(pki, server):
    s = server()
    with pytest.raises(TlsHandshakeError, match="certificate verify failed"):
        connect(s.port, TlsContext(cafile=str(pki.ca_file)), host="localhost")
    conn = connect(s.port, TlsContext(cafile=str(pki.ca_file), check_hostname=False), host="localhost")
    conn.send_all(framed(b"ok"), 5000)
    assert conn.recv_frame(10, 5000) == b"okok"


@pytest.mark.parametrize("key_file, password", [("client.key", None), ("client-enc.key", KEY_PASSWORD)])
def test_mtls_presents_the_client_certificate(pki, server, key_file, password):
    s = server(require_client_cert=True)
    key = (pki.dir / key_file).read_text()
    ctx = TlsContext(cafile=str(pki.ca_file), certchain=pki.client_cert.read_text(), key=key, password=password)
    conn = connect(s.port, ctx)
    conn.send_all(framed(b"m"), 5000)
    assert conn.recv_frame(10, 5000) == b"mm"
    assert s.peer_certs and s.peer_certs[-1]


def test_mtls_without_a_client_certificate_is_refused(pki, server):
    s = server(require_client_cert=True)
    with pytest.raises((TlsHandshakeError, KafkaConnectionError, OSError)):
        conn = connect(s.port, TlsContext(cafile=str(pki.ca_file)))
        # TLS 1.3: the refusal arrives after the client's side of the handshake completed.
        conn.send_all(framed(b"m"), 5000)
        conn.recv_frame(10, 5000)


def test_key_material_that_cannot_be_used_fails_naming_it_without_the_password(pki):
    with pytest.raises(TlsConfigurationError, match="wrong password") as info:
        TlsContext(certchain=pki.client_cert.read_text(), key=(pki.dir / "client-enc.key").read_text(),
                   password="not-it-4f2a")
    assert "not-it-4f2a" not in str(info.value)
    with pytest.raises(TlsConfigurationError, match="no PEM certificate"):
        TlsContext(cadata="not a certificate")
    with pytest.raises(TlsConfigurationError, match="both"):
        TlsContext(certchain=pki.client_cert.read_text())
    with pytest.raises(TlsConfigurationError, match="does not match"):
        TlsContext(certchain=pki.client_cert.read_text(), key=pki.broker_pem.read_text())
    with pytest.raises(TlsConfigurationError, match="cannot load"):
        TlsContext(cafile=str(pki.dir / "missing.pem"))
    with pytest.raises(TlsConfigurationError, match="no cipher"):
        TlsContext(ciphers="NOT-A-CIPHER")


@pytest.mark.parametrize("reply, error, match", [
    (struct.pack(">i", -1), InvalidLengthError, "negative"),
    (struct.pack(">i", 1 << 30), FrameTooLargeError, "exceeds"),
    (struct.pack(">i", 100) + b"x" * 10, KafkaConnectionError, "after 10 of the 100 bytes"),
    (b"\0\0", KafkaConnectionError, "part of a frame size prefix"),
])
def test_hostile_frames_over_tls_are_refused(pki, server, reply, error, match):
    def answer(sock):
        read_frame(sock)
        sock.sendall(reply)
        sock.unwrap() if reply == b"\0\0" or len(reply) > 4 else None
    s = server(answer)
    conn = connect(s.port, TlsContext(cafile=str(pki.ca_file)))
    conn.send_all(framed(b"q"), 5000)
    with pytest.raises(error, match=match):
        conn.recv_frame(1 << 20, 5000)


@pytest.mark.parametrize("read_all", [False, True])
def test_a_server_that_closes_mid_handshake(pki, server, read_all):
    def close_at_once(sock):
        # all of the ClientHello (a clean end of stream) or part of it (a reset), then hang up
        sock.recv(100000 if read_all else 10)
        sock.close()
    s = server(close_at_once, tls=False)
    with pytest.raises(TlsHandshakeError, match="closed the connection during the TLS handshake"):
        connect(s.port, TlsContext(cafile=str(pki.ca_file)))


def test_a_listener_that_does_not_speak_tls(pki, server):
    def plaintext(sock):
        sock.recv(1000)
        sock.sendall(b"\0\0\0\x10" + b"not a tls record")
    s = server(plaintext, tls=False)
    with pytest.raises(TlsHandshakeError):
        connect(s.port, TlsContext(cafile=str(pki.ca_file)))


def test_a_silent_server_times_the_handshake_out(pki, server):
    gate = threading.Event()

    def silent(sock):
        gate.wait(10)
    s = server(silent, tls=False)
    try:
        with pytest.raises(TimeoutError):
            connect(s.port, TlsContext(cafile=str(pki.ca_file)), timeout_ms=300)
    finally:
        gate.set()
