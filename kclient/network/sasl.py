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

* OAUTHBEARER (RFC 7628, KIP-255): the bearer token of a user's token provider, of the
  built-in OAuth client (``kclient.network.oauth``, from a token endpoint's settings), or an
  unsecured JWS for development.

Credentials: ``sasl.plain.username`` / ``sasl.plain.password`` (kafka-python's names, used by
both mechanisms), or ``sasl.jaas.config`` with Kafka's PlainLoginModule / ScramLoginModule /
OAuthBearerLoginModule. GSSAPI is refused with a message saying so.

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
from kclient.network.sasl_mechanism import SaslMechanism

__all__ = ["SaslMechanism", "PlainMechanism", "ScramMechanism", "OAuthBearerMechanism", "mechanism_from_config",
           "oauth_provider_from_config", "parse_jaas_config", "unsecured_jws", "is_builtin_token_source"]

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
    provider for each new connection and each KIP-368 re-authentication, so a provider that
    refreshes its token before expiry keeps connections valid."""

    name = "OAUTHBEARER"

    def __init__(self, provider: Any):
        self._provider = provider
        self.username = "(token)"
        self.broker_status = ""

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
            self.broker_status = _challenge_status(challenge)
            return b"\x01"
        self.complete = True
        return None

    def __repr__(self) -> str:
        return "OAuthBearerMechanism()"


def _challenge_status(challenge: bytes) -> str:
    """The status of the broker's JSON error challenge (RFC 7628 3.2.2), e.g. invalid_token."""
    import json
    try:
        data = json.loads(challenge.decode("utf-8", "replace"))
    except ValueError:
        return ""
    return str(data.get("status", ""))[:100] if isinstance(data, dict) else ""


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


def is_builtin_token_source(source: Any) -> bool:
    """Whether ``source`` is one of kclient's own token providers (the OAuth client or the
    unsecured development token), which answer from memory; an application's provider may
    fetch a token each time it is asked."""
    from kclient.network.oauth import OAuthTokenProvider
    return isinstance(source, (OAuthTokenProvider, _UnsecuredTokenProvider))


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


def mechanism_from_config(c: Any, token_provider: Any = None) -> SaslMechanism:
    """A fresh mechanism for one connection, from checked settings (sasl.mechanism and the
    credentials). ``token_provider``: the client's built-in OAuth client
    (``oauth_provider_from_config``), shared by its connections."""
    name = (c["sasl.mechanism"] or "").upper()
    if name == "GSSAPI":
        raise ConfigurationError("sasl.mechanism GSSAPI (Kerberos) is not supported by kclient; "
                                 "use PLAIN or SCRAM-SHA-256/512")
    if name == "AWS_MSK_IAM":
        from kclient.network.aws_msk_iam import AwsMskIamMechanism
        return AwsMskIamMechanism()
    if name != "PLAIN" and name not in _SCRAM_HASHES and name != "OAUTHBEARER":
        raise ConfigurationError(f"sasl.mechanism {c['sasl.mechanism']!r} is not one of PLAIN, "
                                 "SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER, AWS_MSK_IAM")
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
        provider = c["sasl.oauth.token.provider"] or token_provider
        if provider is None and _oidc_wanted(c, options):
            provider = oauth_provider_from_config(c)   # settings check only: no thread, no fetch
        if provider is None and options.get("unsecuredLoginStringClaim_sub"):
            lifetime = float(options.get("unsecuredLoginLifetimeSeconds", 3600))
            provider = _UnsecuredTokenProvider(options["unsecuredLoginStringClaim_sub"], lifetime)
        if provider is None:
            raise ConfigurationError("sasl.mechanism OAUTHBEARER needs sasl.oauthbearer.token.endpoint.url "
                                     "(with a client id and secret), sasl_oauth_token_provider (an object "
                                     "with a token() method) or an unsecured OAuthBearerLoginModule jaas entry")
        return OAuthBearerMechanism(provider)
    if not username or password is None:
        raise ConfigurationError(f"sasl.mechanism {name} needs a username and a password "
                                 "(sasl_plain_username / sasl_plain_password, or sasl.jaas.config)")
    if name == "PLAIN":
        return PlainMechanism(username, password)
    return ScramMechanism(name, username, password)


# ---------------------------------------------------------------------- OIDC settings
_OIDC_MARKERS = ("sasl.login.callback.handler.class", "sasl.oauthbearer.jwt.retriever.class",
                 "sasl.oauthbearer.client.credentials.client.id", "sasl.oauthbearer.client.id")


def _oidc_wanted(c: Any, options: dict[str, str]) -> bool:
    return bool(c["sasl.oauthbearer.token.endpoint.url"] or c["sasl.oauthbearer.method"] == "oidc"
                or any(c[k] for k in _OIDC_MARKERS) or "clientId" in options)


def _one_value(what: str, candidates: list[tuple[str, Any]], secret: bool = False) -> str:
    """The value given under one or more names; two different values fail, naming both names."""
    given = [(name, v) for name, v in candidates if v not in (None, "")]
    if len({v for _, v in given}) > 1:
        shown = ", ".join(name if secret else f"{name}={v!r}" for name, v in given)
        raise ConfigurationError(f"{what} is given twice with different values: {shown}")
    return str(given[0][1]) if given else ""


def oauth_provider_from_config(c: Any) -> Any:
    """The built-in OAuth client for OAUTHBEARER from checked settings, or None when the
    settings ask for none. Checks the settings; starts nothing (``start()`` does)."""
    from pathlib import Path

    from kclient.network.oauth import (JWT_BEARER, OAuthSettings, OAuthTokenProvider, load_assertion_key,
                                       parse_extensions)
    if (c["sasl.mechanism"] or "").upper() != "OAUTHBEARER":
        return None
    options: dict[str, str] = {}
    if c["sasl.jaas.config"]:
        module, options = parse_jaas_config(c["sasl.jaas.config"])
        if module != "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule":
            return None         # mechanism_from_config names this mismatch
    if not _oidc_wanted(c, options):
        return None
    url = c["sasl.oauthbearer.token.endpoint.url"]
    if not url:
        raise ConfigurationError("OAUTHBEARER with the OIDC login needs sasl.oauthbearer.token.endpoint.url")
    if c["sasl.oauth.token.provider"] is not None:
        raise ConfigurationError("sasl_oauth_token_provider and sasl.oauthbearer.token.endpoint.url are both "
                                 "given: choose one token source")
    if not url.startswith(("https://", "http://", "file:")):
        raise ConfigurationError(f"setting 'sasl.oauthbearer.token.endpoint.url': {url!r} is not an "
                                 "https://, http:// or file: URL")
    client_id = _one_value("the OAuth client id", [
        ("sasl.oauthbearer.client.credentials.client.id", c["sasl.oauthbearer.client.credentials.client.id"]),
        ("sasl.jaas.config clientId", options.get("clientId")),
        ("sasl.oauthbearer.client.id", c["sasl.oauthbearer.client.id"])])
    secret = _one_value("the OAuth client secret", [
        ("sasl.oauthbearer.client.credentials.client.secret", c["sasl.oauthbearer.client.credentials.client.secret"]),
        ("sasl.jaas.config clientSecret", options.get("clientSecret")),
        ("sasl.oauthbearer.client.secret", c["sasl.oauthbearer.client.secret"])], secret=True)
    scope = _one_value("the OAuth scope", [("sasl.oauthbearer.scope", c["sasl.oauthbearer.scope"]),
                                           ("sasl.jaas.config scope", options.get("scope"))])
    retriever = (c["sasl.oauthbearer.jwt.retriever.class"] or "").rsplit(".", 1)[-1]
    grant = c["sasl.oauthbearer.grant.type"]
    if retriever == "JwtBearerJwtRetriever":
        grant = JWT_BEARER
    assertion_key = c["sasl.oauthbearer.assertion.private.key.pem"] or ""
    if grant == JWT_BEARER:
        key_file = c["sasl.oauthbearer.assertion.private.key.file"]
        if key_file and not assertion_key:
            try:
                assertion_key = Path(key_file).read_text()
            except OSError as exc:
                raise ConfigurationError(f"setting 'sasl.oauthbearer.assertion.private.key.file': cannot read "
                                         f"{key_file}: {exc.strerror}") from None
        if not c["sasl.oauthbearer.assertion.file"] and not assertion_key:
            raise ConfigurationError("the jwt-bearer grant needs sasl.oauthbearer.assertion.file (a signed JWT "
                                     "assertion) or sasl.oauthbearer.assertion.private.key.file (a key to sign one)")
        if assertion_key and not c["sasl.oauthbearer.assertion.file"]:
            load_assertion_key(assertion_key, c["sasl.oauthbearer.assertion.private.key.passphrase"] or "",
                               c["sasl.oauthbearer.assertion.algorithm"])      # fail now if it cannot sign
    elif not url.startswith("file:") and (not client_id or not secret):
        raise ConfigurationError("the OAuth client credentials grant needs a client id and a client secret "
                                 "(sasl.oauthbearer.client.credentials.client.id / .client.secret, the "
                                 "JAAS options clientId / clientSecret, or sasl.oauthbearer.client.id / "
                                 ".client.secret)")
    extensions = parse_extensions(c["sasl.oauthbearer.extensions"], "sasl.oauthbearer.extensions")
    for key, value in options.items():
        if key.startswith("extension_"):
            extensions[key[len("extension_"):]] = value
    return OAuthTokenProvider(OAuthSettings(
        token_url=url, client_id=client_id, client_secret=secret, scope=scope, grant_type=grant,
        assertion_file=c["sasl.oauthbearer.assertion.file"] or "", extensions=extensions,
        assertion_key=assertion_key,
        assertion_key_passphrase=c["sasl.oauthbearer.assertion.private.key.passphrase"] or "",
        assertion_algorithm=c["sasl.oauthbearer.assertion.algorithm"],
        assertion_claims={k: c[f"sasl.oauthbearer.assertion.claim.{k}"] or "" for k in ("iss", "sub", "aud")},
        assertion_exp_seconds=c["sasl.oauthbearer.assertion.claim.exp.seconds"],
        assertion_nbf_seconds=c["sasl.oauthbearer.assertion.claim.nbf.seconds"],
        assertion_jti=c["sasl.oauthbearer.assertion.claim.jti.include"],
        sub_claim=c["sasl.oauthbearer.sub.claim.name"], urlencode_header=c["sasl.oauthbearer.header.urlencode"],
        connect_timeout_ms=c["sasl.login.connect.timeout.ms"], read_timeout_ms=c["sasl.login.read.timeout.ms"],
        retry_backoff_ms=c["sasl.login.retry.backoff.ms"], retry_backoff_max_ms=c["sasl.login.retry.backoff.max.ms"],
        window_factor=c["sasl.login.refresh.window.factor"], window_jitter=c["sasl.login.refresh.window.jitter"],
        ssl_context=_endpoint_ssl_context(c, url)))


def _endpoint_ssl_context(c: Any, url: str) -> Any:
    """Verification of an https token endpoint: its own CAs if given, else the system's."""
    import ssl
    if not url.startswith("https://"):
        return None
    cafile = c["sasl.oauthbearer.ssl.truststore.location"] or c["https.ca.location"]
    cadata = c["sasl.oauthbearer.ssl.truststore.certificates"] or c["https.ca.pem"]
    try:
        return ssl.create_default_context(cafile=cafile or None, cadata=cadata or None)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigurationError(f"the token endpoint's CA certificates cannot be loaded: {exc}") from None
