"""TLS for broker connections: one ``ssl.SSLContext`` built once from the settings.

Settings, in Kafka's names and kafka-python's:

* trust: ``ssl.truststore.type=PEM`` with ``ssl.truststore.location`` (a PEM file of CA
  certificates) or ``ssl.truststore.certificates`` (the PEM text itself); ``ssl_cafile``.
  Nothing given: the system's CA store. Verification is always on unless a caller passes
  its own ``ssl_context``.
* client certificate (mTLS): ``ssl.keystore.type=PEM`` with ``ssl.keystore.location`` (key
  and chain in one PEM file) or ``ssl.keystore.key`` + ``ssl.keystore.certificate.chain``
  (PEM text); ``ssl_certfile`` + ``ssl_keyfile``; the key's password is ``ssl.key.password``
  or ``ssl_password``.
* host names: ``ssl.endpoint.identification.algorithm`` ``https`` (the default) checks the
  broker's certificate against the host name the client connects to; empty disables it, as
  does ``ssl_check_hostname=False``.
* ``ssl_crlfile`` (revocation list, checked for the leaf), ``ssl_ciphers`` (OpenSSL syntax).

JKS stores cannot be read here: the error says how to convert them. PKCS12 stores are read
when the ``cryptography`` package is installed (it is not a dependency), else the error says
to convert them to PEM.

Non-blocking handshakes: ``TlsSocket`` wraps the SSLSocket so that a read or write that must
wait raises ``BlockingIOError`` like a plain socket, which is all the frame receiver and the
send path expect.
"""
from __future__ import annotations

import logging
import os
import socket
import ssl
import tempfile
from typing import Any

from kclient.errors import ConfigurationError

__all__ = ["build_ssl_context", "TlsSocket", "describe_tls_error"]

log = logging.getLogger(__name__)


def _read_file(name: str, path: str) -> None:
    if not os.path.isfile(path):
        raise ConfigurationError(f"setting {name!r}: no such file {path!r}")


def _store_type(name: str, value: Any) -> str:
    kind = (value or "PEM").upper()
    if kind == "JKS":
        raise ConfigurationError(
            f"setting {name!r}: JKS stores cannot be read by kclient; convert it to PEM (e.g. "
            "keytool -importkeystore -deststoretype PKCS12, then openssl pkcs12 -nodes) or PKCS12")
    if kind not in ("PEM", "PKCS12"):
        raise ConfigurationError(f"setting {name!r} must be PEM or PKCS12, got {value!r}")
    return kind


def _pkcs12_to_pem(name: str, path: str, password: str | None) -> tuple[str, str | None]:
    """(certificate chain PEM, private key PEM or None) from a PKCS12 file."""
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.serialization import pkcs12
    except ImportError:
        raise ConfigurationError(
            f"setting {name!r}: reading PKCS12 needs the 'cryptography' package; install it or "
            "convert the store to PEM (openssl pkcs12 -in store.p12 -nodes)") from None
    _read_file(name, path)
    with open(path, "rb") as f:
        data = f.read()
    try:
        key, cert, extra = pkcs12.load_key_and_certificates(data, password.encode() if password else None)
    except ValueError as exc:
        raise ConfigurationError(f"setting {name!r}: cannot read the PKCS12 store (wrong password?)") from exc
    certs = [c for c in [cert, *(extra or [])] if c is not None]
    chain = "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in certs)
    key_pem = None if key is None else key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()).decode()
    return chain, key_pem


def _load_chain_from_text(ctx: ssl.SSLContext, chain: str, key: str | None, password: str | None) -> None:
    """load_cert_chain needs files: write the PEM text to a private temporary file, load it,
    and delete it at once."""
    fd, path = tempfile.mkstemp(prefix="kclient-key-", suffix=".pem")
    try:
        with os.fdopen(fd, "w") as f:
            if key:
                f.write(key if key.endswith("\n") else key + "\n")
            f.write(chain)
        ctx.load_cert_chain(path, password=password)
    finally:
        os.unlink(path)


def build_ssl_context(c: Any) -> ssl.SSLContext:
    """The SSLContext for ``security.protocol`` SSL or SASL_SSL from checked settings ``c``."""
    given = c["ssl.context"]
    if given is not None:
        if not isinstance(given, ssl.SSLContext):
            raise ConfigurationError(f"setting 'ssl.context' must be an ssl.SSLContext, got {type(given).__name__}")
        return given
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)      # verification and host names on
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    # Trust
    trust_location = c["ssl.truststore.location"]
    # Kafka's default type is JKS: only a store actually given must be of a readable type.
    trust_type = _store_type("ssl.truststore.type", c["ssl.truststore.type"]) if trust_location else "PEM"
    trust_pem = c["ssl.truststore.certificates"]
    cafile = c["ssl.cafile"]
    if trust_location and trust_type == "PKCS12":
        chain, _ = _pkcs12_to_pem("ssl.truststore.location", trust_location, c["ssl.truststore.password"])
        ctx.load_verify_locations(cadata=chain)
    elif trust_location:
        _read_file("ssl.truststore.location", trust_location)
        ctx.load_verify_locations(cafile=trust_location)
    if trust_pem:
        ctx.load_verify_locations(cadata=trust_pem)
    if cafile:
        _read_file("ssl.cafile", cafile)
        ctx.load_verify_locations(cafile=cafile)
    if not (trust_location or trust_pem or cafile):
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    # Client certificate
    key_password = c["ssl.key.password"] or c["ssl.password"]
    key_location = c["ssl.keystore.location"]
    key_type = _store_type("ssl.keystore.type", c["ssl.keystore.type"]) if key_location else "PEM"
    if key_location and key_type == "PKCS12":
        chain, key = _pkcs12_to_pem("ssl.keystore.location", key_location,
                                    c["ssl.keystore.password"] or key_password)
        _load_chain_from_text(ctx, chain, key, None)
    elif key_location:
        _read_file("ssl.keystore.location", key_location)
        ctx.load_cert_chain(key_location, password=key_password)
    if c["ssl.keystore.certificate.chain"] or c["ssl.keystore.key"]:
        if not (c["ssl.keystore.certificate.chain"] and c["ssl.keystore.key"]):
            raise ConfigurationError("settings 'ssl.keystore.key' and 'ssl.keystore.certificate.chain' go together")
        _load_chain_from_text(ctx, c["ssl.keystore.certificate.chain"], c["ssl.keystore.key"], key_password)
    certfile, keyfile = c["ssl.certfile"], c["ssl.keyfile"]
    if certfile:
        _read_file("ssl.certfile", certfile)
        if keyfile:
            _read_file("ssl.keyfile", keyfile)
        ctx.load_cert_chain(certfile, keyfile, password=key_password)
    elif keyfile:
        raise ConfigurationError("setting 'ssl.keyfile' needs 'ssl.certfile' (the client certificate)")
    # Host names, revocation, ciphers
    algorithm = (c["ssl.endpoint.identification.algorithm"] or "").strip().lower()
    if algorithm not in ("", "https"):
        raise ConfigurationError(
            f"setting 'ssl.endpoint.identification.algorithm' must be 'https' or empty, got {algorithm!r}")
    ctx.check_hostname = algorithm == "https" and bool(c["ssl.check.hostname"])
    if c["ssl.crlfile"]:
        _read_file("ssl.crlfile", c["ssl.crlfile"])
        ctx.load_verify_locations(cafile=c["ssl.crlfile"])
        ctx.verify_flags |= ssl.VERIFY_CRL_CHECK_LEAF
    if c["ssl.ciphers"]:
        try:
            ctx.set_ciphers(c["ssl.ciphers"])
        except ssl.SSLError as exc:
            raise ConfigurationError(f"setting 'ssl.ciphers': no cipher matches {c['ssl.ciphers']!r}") from exc
    return ctx


def describe_tls_error(exc: BaseException) -> str:
    """What went wrong in a handshake, in words that say where to look."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"TLS certificate verification failed: {exc.verify_message or exc.reason} (check the trusted CA " \
               f"and the broker's host name; ssl.endpoint.identification.algorithm='' skips the host name check)"
    reason = getattr(exc, "reason", None) or str(exc)
    if "CERTIFICATE_REQUIRED" in str(reason).upper() or "certificate required" in str(exc).lower():
        return f"TLS handshake refused: the broker requires a client certificate ({reason})"
    if isinstance(exc, (ssl.SSLEOFError, ConnectionResetError, BrokenPipeError)) \
            or any(mark in str(reason).upper() for mark in _NOT_TLS_MARKS):
        # A plaintext Kafka listener reads the ClientHello as a request of absurd size and
        # hangs up, or answers bytes that are no TLS record.
        return (f"TLS handshake failed: {reason}; the listener may not speak TLS (a PLAINTEXT or "
                f"SASL_PLAINTEXT listener?): check security_protocol and the port")
    return f"TLS handshake failed: {reason}"


# OpenSSL's reasons when the peer is not a TLS server.
_NOT_TLS_MARKS = ("UNEXPECTED_EOF", "WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG",
                  "UNKNOWN_PROTOCOL", "HTTP_REQUEST")


class TlsSocket:
    """An SSLSocket that reports 'would block' as BlockingIOError, like a plain socket."""

    __slots__ = ("_sock",)

    def __init__(self, sock: ssl.SSLSocket):
        self._sock = sock

    def recv_into(self, buffer, nbytes: int = 0) -> int:
        """Fill ``buffer`` (up to ``nbytes``) with what can be read now, like a plain socket.

        One SSL read returns at most one TLS record (16 KiB), so a caller that, as
        kcore.frames does, stops reading when a read comes back short would go back to
        select() once per record: 64 trips through the poll loop for a 1 MiB fetch response.
        Reading on until the buffer is full or the socket would block makes it one."""
        view = memoryview(buffer).cast("B")
        want = nbytes or len(view)
        total = 0
        try:
            while total < want:
                got = self._sock.recv_into(view[total:want], want - total)
                if got == 0:          # end of stream (or a zero-length read): report what we have
                    break
                total += got
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            if total == 0:
                raise BlockingIOError from None
        finally:
            view.release()
        return total

    def send(self, data) -> int:
        try:
            return self._sock.send(data)
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            raise BlockingIOError from None

    def fileno(self) -> int:
        return self._sock.fileno()

    def getsockopt(self, *args):
        return self._sock.getsockopt(*args)

    def setblocking(self, flag: bool) -> None:
        self._sock.setblocking(flag)

    def close(self) -> None:
        self._sock.close()

    def version(self) -> str | None:
        return self._sock.version()

    def __repr__(self) -> str:
        return f"<TlsSocket fd={self._sock.fileno()} {self._sock.version()}>"


def wrap(sock: socket.socket, ctx: ssl.SSLContext, host: str) -> ssl.SSLSocket:
    """Start TLS on a connected non-blocking socket (the handshake is driven by the caller)."""
    return ctx.wrap_socket(sock, server_hostname=host, do_handshake_on_connect=False)
