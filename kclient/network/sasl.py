"""SASL authentication of broker connections: the mechanisms and their credentials.

The exchange (KIP-43, KIP-152) runs on every new connection after ApiVersions:
SaslHandshake names the mechanism, then SaslAuthenticate requests carry the mechanism's
messages until it completes. This module holds only the mechanisms (pure functions of the
bytes they see); ``NetworkClient`` sends the requests.

* PLAIN (RFC 4616): one message, ``\\0user\\0password``.
* SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677): client-first with a random nonce,
  server-first checked (our nonce must prefix the server's; at least 4096 iterations, Kafka's
  minimum), client-final with the proof, and the server's signature verified before the
  connection is trusted.

Credentials: ``sasl.plain.username`` / ``sasl.plain.password`` (kafka-python's names, used by
both mechanisms), or ``sasl.jaas.config`` with Kafka's PlainLoginModule / ScramLoginModule.
GSSAPI and OAUTHBEARER are refused with a message saying so.

Secrets stay inside the mechanism objects: their reprs and every error name the user and the
mechanism only.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from typing import Any

from kclient.errors import AuthenticationFailedError, ConfigurationError

__all__ = ["SaslMechanism", "PlainMechanism", "ScramMechanism", "OAuthBearerMechanism", "mechanism_from_config",
           "parse_jaas_config", "unsecured_jws"]

SCRAM_MIN_ITERATIONS = 4096
# The most Kafka accepts when it stores a SCRAM credential: a broker asking for more is not
# one (each iteration is a hash the client computes before it can tell).
SCRAM_MAX_ITERATIONS = 16384
_SCRAM_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
_LOGIN_MODULES = {
    "org.apache.kafka.common.security.plain.PlainLoginModule": {"PLAIN"},
    "org.apache.kafka.common.security.scram.ScramLoginModule": {"SCRAM-SHA-256", "SCRAM-SHA-512"},
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule": {"OAUTHBEARER"},
}
_JAAS = re.compile(r'^\s*(?P<module>[\w.$]+)\s+(?P<flag>required|requisite|sufficient|optional)'
                   r'(?P<options>(?:\s+[\w.$-]+\s*=\s*(?:"(?:[^"\\]|\\.)*"|[^\s;"]+))*)\s*;\s*$', re.S)
_JAAS_OPTION = re.compile(r'([\w.$-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s;"]+))')


class SaslMechanism:
    """One authentication exchange: ``first()``, then ``step(challenge)`` for each answer
    until ``complete``."""

    name = ""
    complete = False

    def first(self) -> bytes:
        raise NotImplementedError

    def step(self, challenge: bytes) -> bytes | None:
        """The next message for the server's ``challenge`` (None: nothing more to send)."""
        raise NotImplementedError


class PlainMechanism(SaslMechanism):
    name = "PLAIN"

    def __init__(self, username: str, password: str):
        self.username = username
        self._password = password

    def first(self) -> bytes:
        return b"\0" + self.username.encode() + b"\0" + self._password.encode()

    def step(self, challenge: bytes) -> bytes | None:
        self.complete = True     # the server's answer to PLAIN is empty; success is its error code
        return None

    def __repr__(self) -> str:
        return f"PlainMechanism(username={self.username!r})"


def _saslname(name: str) -> str:
    return name.replace("=", "=3D").replace(",", "=2C")


class ScramMechanism(SaslMechanism):
    def __init__(self, mechanism: str, username: str, password: str, *, nonce: str | None = None):
        if mechanism not in _SCRAM_HASHES:
            raise ConfigurationError(f"unknown SCRAM mechanism {mechanism!r}")
        self.name = mechanism
        self.username = username
        self._password = password
        self._hash = _SCRAM_HASHES[mechanism]
        self._nonce = nonce or base64.b64encode(secrets.token_bytes(24)).decode()
        self._first_bare = f"n={_saslname(username)},r={self._nonce}"
        self._server_signature: bytes | None = None
        self._state = "first"

    def first(self) -> bytes:
        self._state = "server-first"
        return ("n,," + self._first_bare).encode()

    def _hmac(self, key: bytes, msg: bytes) -> bytes:
        return hmac.new(key, msg, self._hash).digest()

    def _b64(self, value: str, what: str) -> bytes:
        try:
            return base64.b64decode(value.encode("ascii"), validate=True)
        except ValueError:   # binascii.Error and UnicodeEncodeError are ValueErrors
            raise AuthenticationFailedError(f"{self.name}: the broker's {what} is not base64") from None

    def step(self, challenge: bytes) -> bytes | None:
        text = challenge.decode("utf-8", "replace")
        attrs = dict(part.split("=", 1) for part in text.split(",") if "=" in part)
        if "e" in attrs:
            raise AuthenticationFailedError(f"{self.name} authentication of user {self.username!r} failed: "
                                            f"the broker said {attrs['e']!r}")
        if self._state == "server-first":
            nonce, salt, iterations = attrs.get("r", ""), attrs.get("s"), attrs.get("i", "")
            if not nonce.startswith(self._nonce) or len(nonce) == len(self._nonce):
                raise AuthenticationFailedError(f"{self.name}: the broker's nonce does not extend ours")
            # ASCII digits only: str.isdigit() also accepts digits int() refuses ("\u00b2").
            if salt is None or not iterations.isascii() or not iterations.isdigit():
                raise AuthenticationFailedError(f"{self.name}: malformed server-first message")
            digits = iterations.lstrip("0") or "0"
            # int() refuses thousands of digits; any count this long is over the maximum anyway
            count = int(digits) if len(digits) <= 9 else SCRAM_MAX_ITERATIONS + 1
            if count < SCRAM_MIN_ITERATIONS:
                raise AuthenticationFailedError(
                    f"{self.name}: the broker asked for {count} iterations, fewer than {SCRAM_MIN_ITERATIONS}")
            if count > SCRAM_MAX_ITERATIONS:
                raise AuthenticationFailedError(
                    f"{self.name}: the broker asked for {digits[:20]} iterations, more than {SCRAM_MAX_ITERATIONS}")
            salted = hashlib.pbkdf2_hmac(self._hash, self._password.encode(), self._b64(salt, "salt"), count)
            client_key = self._hmac(salted, b"Client Key")
            stored_key = hashlib.new(self._hash, client_key).digest()
            final_without_proof = f"c=biws,r={nonce}"
            auth_message = f"{self._first_bare},{text},{final_without_proof}".encode()
            signature = self._hmac(stored_key, auth_message)
            proof = bytes(a ^ b for a, b in zip(client_key, signature))
            self._server_signature = self._hmac(self._hmac(salted, b"Server Key"), auth_message)
            self._state = "server-final"
            return f"{final_without_proof},p={base64.b64encode(proof).decode()}".encode()
        if self._state == "server-final":
            verifier = attrs.get("v")
            assert self._server_signature is not None  # set by the server-first step
            if verifier is None or not hmac.compare_digest(self._b64(verifier, "signature"), self._server_signature):
                raise AuthenticationFailedError(
                    f"{self.name}: the broker's signature is wrong: it does not know the password "
                    "(a server impersonating the broker?)")
            self._state = "done"
            self.complete = True
            return None
        raise AuthenticationFailedError(f"{self.name}: unexpected message after the exchange completed")

    def __repr__(self) -> str:
        return f"ScramMechanism({self.name!r}, username={self.username!r})"


class OAuthBearerMechanism(SaslMechanism):
    """OAUTHBEARER (RFC 7628, KIP-255): the client's first message carries the bearer token
    (and any SASL extensions); a failure comes back as a JSON challenge, answered with the
    single byte 0x01, after which the broker reports the error. The token comes from the
    provider for each new connection, so a provider that refreshes its token before expiry
    keeps new connections valid (a connection already open is not re-authenticated: KIP-368
    is not implemented)."""

    name = "OAUTHBEARER"

    def __init__(self, provider: Any):
        self._provider = provider
        self.username = "(token)"

    def first(self) -> bytes:
        token = self._provider.token()
        if callable(token):
            token = token()
        if not isinstance(token, str) or not token:
            raise AuthenticationFailedError("sasl_oauth_token_provider.token() returned no token")
        extensions = getattr(self._provider, "extensions", None)
        ext = extensions() if callable(extensions) else {}
        extra = "".join(f"\x01{k}={v}" for k, v in (ext or {}).items())
        return f"n,,\x01auth=Bearer {token}{extra}\x01\x01".encode()

    def step(self, challenge: bytes) -> bytes | None:
        if challenge:
            # The broker's error details: answer 0x01 and it fails the exchange with its error code.
            return b"\x01"
        self.complete = True
        return None

    def __repr__(self) -> str:
        return "OAuthBearerMechanism()"


def unsecured_jws(subject: str, lifetime_s: float = 3600, now: float | None = None) -> str:
    """An unsecured (alg "none") JWS as Kafka's unsecured OAUTHBEARER login makes for tests
    and development; brokers accept it only with the unsecured validator."""
    import json
    import time as _time
    issued = _time.time() if now is None else now

    def b64(obj: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(obj, separators=(",", ":")).encode()).decode().rstrip("=")
    # Whole seconds (RFC 7519 NumericDate), iat rounded down so it is never in the broker's future.
    claims = {"sub": subject, "iat": int(issued), "exp": int(issued + lifetime_s)}
    return f'{b64({"alg": "none"})}.{b64(claims)}.'


class _UnsecuredTokenProvider:
    """sasl.jaas.config's OAuthBearerLoginModule with unsecuredLoginStringClaim_sub."""

    def __init__(self, subject: str, lifetime_s: float):
        self._subject, self._lifetime = subject, lifetime_s

    def token(self) -> str:
        return unsecured_jws(self._subject, self._lifetime)


def parse_jaas_config(text: str) -> tuple[str, dict[str, str]]:
    """(login module class, options) of one ``sasl.jaas.config`` entry."""
    m = _JAAS.match(text or "")
    if m is None:
        raise ConfigurationError(
            "setting 'sasl.jaas.config' is not '<LoginModule> required key=\"value\" ...;' "
            "(one login module, ending with a semicolon)")
    options = {}
    for key, quoted, bare in _JAAS_OPTION.findall(m.group("options")):
        options[key] = re.sub(r"\\(.)", r"\1", quoted) if quoted or not bare else bare
    return m.group("module"), options


def mechanism_from_config(c: Any) -> SaslMechanism:
    """A fresh mechanism for one connection, from checked settings (sasl.mechanism and the
    credentials)."""
    name = (c["sasl.mechanism"] or "").upper()
    if name == "GSSAPI":
        raise ConfigurationError("sasl.mechanism GSSAPI (Kerberos) is not supported by kclient; "
                                 "use PLAIN or SCRAM-SHA-256/512")
    if name != "PLAIN" and name not in _SCRAM_HASHES and name != "OAUTHBEARER":
        raise ConfigurationError(f"sasl.mechanism {c['sasl.mechanism']!r} is not one of PLAIN, "
                                 "SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER")
    username, password = c["sasl.plain.username"], c["sasl.plain.password"]
    jaas = c["sasl.jaas.config"]
    options: dict[str, str] = {}
    if jaas:
        module, options = parse_jaas_config(jaas)
        allowed = _LOGIN_MODULES.get(module)
        if allowed is None or name not in allowed:
            raise ConfigurationError(f"setting 'sasl.jaas.config': login module {module} does not "
                                     f"provide sasl.mechanism {name}")
        username, password = options.get("username"), options.get("password")
    if name == "OAUTHBEARER":
        provider = c["sasl.oauth.token.provider"]
        if provider is None and options.get("unsecuredLoginStringClaim_sub"):
            lifetime = float(options.get("unsecuredLoginLifetimeSeconds", 3600))
            provider = _UnsecuredTokenProvider(options["unsecuredLoginStringClaim_sub"], lifetime)
        if provider is None:
            raise ConfigurationError("sasl.mechanism OAUTHBEARER needs sasl_oauth_token_provider (an object "
                                     "with a token() method) or an unsecured OAuthBearerLoginModule jaas entry")
        return OAuthBearerMechanism(provider)
    if not username or password is None:
        raise ConfigurationError(f"sasl.mechanism {name} needs a username and a password "
                                 "(sasl_plain_username / sasl_plain_password, or sasl.jaas.config)")
    if name == "PLAIN":
        return PlainMechanism(username, password)
    return ScramMechanism(name, username, password)
