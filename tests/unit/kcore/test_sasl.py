"""kcore.sasl: the C SCRAM client against RFC 7677's test vector and against
kclient.network.sasl's Python SCRAM (same nonce, same messages), its refusals of hostile
server messages, and the SaslHandshake / SaslAuthenticate codecs against the schema-driven
codec of kclient.protocol."""
from __future__ import annotations

import base64
import hashlib
import hmac

import pytest

from kclient import protocol
from kclient.errors import AuthenticationFailedError
from kclient.network.sasl import ScramMechanism
from kclient.protocol import ApiKey
from kcore.sasl import (SaslAuthenticationError, ScramClient, decode_sasl_authenticate_response,
                        decode_sasl_handshake_response, encode_sasl_authenticate_request,
                        encode_sasl_handshake_request)

RFC7677_SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"


def test_scram_sha_256_matches_rfc_7677():
    c = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    assert c.first() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    assert c.step(RFC7677_SERVER_FIRST) == (
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=")
    assert not c.complete
    assert c.step(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=") is None
    assert c.complete


def server_final(mechanism: str, password: str, first_bare: bytes, server_first: bytes, final_no_proof: bytes,
                 iterations: int, salt: bytes) -> bytes:
    """What a broker that knows the password signs (RFC 5802 ServerSignature)."""
    h = "sha512" if mechanism.endswith("512") else "sha256"
    salted = hashlib.pbkdf2_hmac(h, password.encode(), salt, iterations)
    auth = first_bare + b"," + server_first + b"," + final_no_proof
    server_key = hmac.new(salted, b"Server Key", h).digest()
    return b"v=" + base64.b64encode(hmac.new(server_key, auth, h).digest())


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize("user, password", [("carol", "carol-secret-password"), ("a,b=c", "p\u00e4ss,=word"),
                                            ("x" * 300, "y" * 500)])
def test_scram_matches_the_python_client(mechanism, user, password):
    nonce = "fyko+d2lbbFgONRv9qkxdawL"
    ours, ref = ScramClient(mechanism, user, password, nonce=nonce), ScramMechanism(mechanism, user, password,
                                                                                       nonce=nonce)
    assert ours.first() == ref.first()
    salt = b"\x01salt\xff" * 3
    server_first = f"r={nonce}3rfcNHYJY1ZVvWVs7j,s={base64.b64encode(salt).decode()},i=4096".encode()
    final = ours.step(server_first)
    assert final == ref.step(server_first)
    first_bare = ours_first_bare(user, nonce)
    verifier = server_final(mechanism, password, first_bare, server_first, final.rsplit(b",p=", 1)[0], 4096, salt)
    assert ours.step(verifier) is None and ours.complete
    assert ref.step(verifier) is None and ref.complete


def ours_first_bare(user: str, nonce: str) -> bytes:
    return f"n={user.replace('=', '=3D').replace(',', '=2C')},r={nonce}".encode()


def test_a_random_nonce_is_fresh_each_time():
    a, b = ScramClient("SCRAM-SHA-512", "u", "p"), ScramClient("SCRAM-SHA-512", "u", "p")
    fa, fb = a.first(), b.first()
    assert fa != fb and len(fa) == len(b"n,,n=u,r=") + 32


@pytest.mark.parametrize("server_first, match", [
    (b"r=someoneelse,s=c2FsdA==,i=4096", "nonce does not extend ours"),
    (b"r=abc,s=c2FsdA==,i=4096", "nonce does not extend ours"),           # not longer than ours
    (b"r=abcX,s=c2FsdA==,i=4095", "iteration count"),
    (b"r=abcX,s=c2FsdA==,i=16385", "iteration count"),
    (b"r=abcX,s=c2FsdA==,i=" + b"9" * 5000, "iteration count"),
    (b"r=abcX,s=c2FsdA==,i=-4096", "malformed"),
    (b"r=abcX,s=c2FsdA==,i=", "malformed"),
    (b"r=abcX,s=c2FsdA==", "malformed"),
    (b"r=abcX,s=not base64!,i=4096", "salt is not base64"),
    (b"r=abcX,s=c2FsdA=,i=4096", "salt is not base64"),
    (b"e=invalid-proof", "the broker said invalid-proof"),
    (b"", "malformed"),
])
def test_scram_refuses_hostile_server_first_messages(server_first, match):
    c = ScramClient("SCRAM-SHA-256", "u", "secret-pw", nonce="abc")
    c.first()
    with pytest.raises(SaslAuthenticationError, match=match) as info:
        c.step(server_first)
    assert "secret-pw" not in str(info.value)
    # The Python client refuses the same messages.
    ref = ScramMechanism("SCRAM-SHA-256", "u", "secret-pw", nonce="abc")
    ref.first()
    with pytest.raises(AuthenticationFailedError):
        ref.step(server_first)


@pytest.mark.parametrize("verifier", [b"v=" + base64.b64encode(b"\0" * 32), b"v=AAAA", b"v=!!!!", b"x=1",
                                      b"e=other-error"])
def test_scram_refuses_a_wrong_server_signature(verifier):
    c = ScramClient("SCRAM-SHA-256", "user", "pencil", nonce="rOprNGfwEbeRWgbNEkqO")
    c.first()
    c.step(RFC7677_SERVER_FIRST)
    with pytest.raises(SaslAuthenticationError):
        c.step(verifier)
    assert not c.complete


def test_scram_steps_out_of_order_are_refused():
    c = ScramClient("SCRAM-SHA-256", "u", "p", nonce="abc")
    with pytest.raises(SaslAuthenticationError):
        c.step(b"r=abcX,s=c2FsdA==,i=4096")
    with pytest.raises(ValueError):
        ScramClient("SCRAM-SHA-1", "u", "p")


# ---------------------------------------------------------------- codecs
def test_sasl_handshake_request_matches_the_schema_codec():
    ours = encode_sasl_handshake_request(7, "client-1", "SCRAM-SHA-512")
    ref = protocol.encode_request(ApiKey.SASL_HANDSHAKE, 1, 7, "client-1", {"mechanism": "SCRAM-SHA-512"})
    assert ours == bytes(ref)
    frame = protocol.encode_response(ApiKey.SASL_HANDSHAKE, 1, 7, {"error_code": 33, "mechanisms": ["PLAIN"]})
    assert decode_sasl_handshake_response(bytes(frame)[4:]) == (7, 33)
    with pytest.raises(ValueError):
        decode_sasl_handshake_response(b"\0\0\0\7\0")


@pytest.mark.parametrize("version", [0, 1, 2])
@pytest.mark.parametrize("auth", [b"", b"\0user\0pw", bytes(range(256)) * 40])
def test_sasl_authenticate_matches_the_schema_codec(version, auth):
    ours = encode_sasl_authenticate_request(version, 9, "cid", auth)
    ref = protocol.encode_request(ApiKey.SASL_AUTHENTICATE, version, 9, "cid", {"auth_bytes": auth})
    assert ours == bytes(ref)
    body = {"error_code": 58, "error_message": "bad", "auth_bytes": auth, "session_lifetime_ms": 123456}
    frame = bytes(protocol.encode_response(ApiKey.SASL_AUTHENTICATE, version, 9, body))[4:]
    got = decode_sasl_authenticate_response(version, frame)
    assert got == {"correlation_id": 9, "error_code": 58, "error_message": "bad", "auth_bytes": auth,
                   "session_lifetime_ms": 123456 if version >= 1 else 0}
    body["error_message"] = None
    frame = bytes(protocol.encode_response(ApiKey.SASL_AUTHENTICATE, version, 9, body))[4:]
    assert decode_sasl_authenticate_response(version, frame)["error_message"] is None
    # Every truncation is refused, never read past.
    for cut in range(len(frame)):
        with pytest.raises(ValueError):
            decode_sasl_authenticate_response(version, frame[:cut])


@pytest.mark.parametrize("frame", [
    b"\0\0\0\1\0\0" + b"\xff\xff" + b"\x80\0\0\0",               # v0: negative auth bytes length
    b"\0\0\0\1\0\0" + b"\xff\xff" + b"\x7f\xff\xff\xff",         # v0: longer than the frame
    b"\0\0\0\1\0\0" + b"\xff\xfe" + b"\0\0\0\0",                 # v0: a string length of -2
])
def test_sasl_authenticate_refuses_hostile_lengths(frame):
    with pytest.raises(ValueError):
        decode_sasl_authenticate_response(0, frame)
