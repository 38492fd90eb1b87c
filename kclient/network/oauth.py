"""OAuth 2 access tokens for OAUTHBEARER (KIP-768, KIP-1139), fetched from a token endpoint.

``OAuthTokenProvider`` keeps one valid token for every connection of a client. A thread it
owns fetches the first token when the client starts and a fresh one at about 80% of each
token's lifetime (``sasl.login.refresh.window.factor`` plus a random part of
``.jitter``), so a client that does not poll (an idle consumer, a producer, the admin client)
still has a valid token for its next connection and for each KIP-368 re-authentication. A
failed fetch is retried after ``sasl.login.retry.backoff.ms``, doubling up to ``.max.ms``.

Grants: ``client_credentials`` (RFC 6749 4.4: the client id and secret in HTTP Basic
authentication, the scope in the form) and ``urn:ietf:params:oauth:grant-type:jwt-bearer``
(RFC 7523: a signed assertion, read from a file). The answer's ``access_token`` must be a JWT
with an ``exp`` in the future and a subject, as Kafka's client-side validator requires;
``expires_in`` is used when it is sooner than ``exp``.

Secrets (client secret, assertion) stay inside the provider: its repr, its log lines and
its errors name the endpoint and the client id only.
"""
from __future__ import annotations

import base64
import binascii
import json
import logging
import random
import ssl
import threading
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from kclient.clock import SYSTEM_CLOCK, Clock
from kclient.errors import AuthenticationFailedError, ConfigurationError

__all__ = ["AccessToken", "OAuthSettings", "OAuthTokenProvider", "TokenEndpointError", "parse_access_token",
           "CLIENT_CREDENTIALS", "JWT_BEARER"]

log = logging.getLogger(__name__)

CLIENT_CREDENTIALS = "client_credentials"
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
# How long token() waits for an overdue refresh while the current token is still valid.
_OVERDUE_WAIT_MS = 1000
# The largest answer read from a token endpoint: a token is a few kilobytes.
_MAX_ANSWER_BYTES = 1 << 20


class TokenEndpointError(AuthenticationFailedError):
    """The token endpoint refused the client, could not be reached, or answered with a token
    that cannot be used. ``status`` is the HTTP status (None: no answer)."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class AccessToken:
    value: str = field(repr=False)
    subject: str
    expires_ms: int          # wall clock, milliseconds since the epoch
    lifetime_ms: int         # from the fetch to the expiry


@dataclass(frozen=True)
class OAuthSettings:
    """Where and how to ask for tokens (built from the client's settings by ``sasl``)."""

    token_url: str
    client_id: str = ""
    client_secret: str = field(default="", repr=False)
    scope: str = ""
    grant_type: str = CLIENT_CREDENTIALS
    assertion_file: str = ""
    # jwt-bearer without a ready assertion: one is made and signed for each request.
    assertion_key: str = field(default="", repr=False)          # PEM private key
    assertion_key_passphrase: str = field(default="", repr=False)
    assertion_algorithm: str = "RS256"
    assertion_claims: dict[str, str] = field(default_factory=dict)   # iss, sub, aud
    assertion_exp_seconds: int = 300
    assertion_nbf_seconds: int = 60
    assertion_jti: bool = False
    extensions: dict[str, str] = field(default_factory=dict)
    sub_claim: str = "sub"
    urlencode_header: bool = False
    connect_timeout_ms: int = 10000
    read_timeout_ms: int = 10000
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 10000
    window_factor: float = 0.8
    window_jitter: float = 0.05
    ssl_context: ssl.SSLContext | None = field(default=None, repr=False)


def _b64url_json(part: str, what: str) -> dict:
    try:
        raw = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
        value = json.loads(raw)
    except (binascii.Error, ValueError) as exc:
        raise TokenEndpointError(f"the access token is malformed: its {what} is not base64url JSON "
                                 f"({type(exc).__name__})") from None
    if not isinstance(value, dict):
        raise TokenEndpointError(f"the access token is malformed: its {what} is not a JSON object")
    return value


def parse_access_token(value: object, expires_in: object, now_wall_ms: int, sub_claim: str = "sub") -> AccessToken:
    """Check a token as Kafka's client-side JWT validator does: three base64url parts, a
    header naming an algorithm, a numeric ``exp`` in the future and a non-empty subject."""
    if not isinstance(value, str) or not value:
        raise TokenEndpointError("the token endpoint's answer has no access_token")
    parts = value.split(".")
    if len(parts) != 3:
        raise TokenEndpointError(f"the access token is malformed: a JWT has 3 dot-separated parts, "
                                 f"this one has {len(parts)}")
    header = _b64url_json(parts[0], "header")
    claims = _b64url_json(parts[1], "payload")
    if not isinstance(header.get("alg"), str):
        raise TokenEndpointError("the access token is malformed: its header names no algorithm (alg)")
    exp = claims.get("exp")
    if isinstance(exp, bool) or not isinstance(exp, (int, float)):
        raise TokenEndpointError("the access token is malformed: it has no numeric expiry (exp)")
    subject = claims.get(sub_claim)
    if not isinstance(subject, str) or not subject.strip():
        raise TokenEndpointError(f"the access token is malformed: it has no subject claim ({sub_claim!r})")
    expires_ms = int(exp * 1000)
    if isinstance(expires_in, (int, float)) and not isinstance(expires_in, bool) and expires_in > 0:
        expires_ms = min(expires_ms, now_wall_ms + int(expires_in * 1000))
    if expires_ms <= now_wall_ms:
        raise TokenEndpointError(f"the access token has expired: exp {int(exp)} is "
                                 f"{(now_wall_ms - expires_ms) / 1000:.0f} s in the past")
    return AccessToken(value, subject, expires_ms, expires_ms - now_wall_ms)


def _basic(client_id: str, secret: str, urlencode: bool) -> str:
    if urlencode:   # KIP-1025: RFC 6749 2.3.1 form-encodes both before Basic encoding
        client_id, secret = urllib.parse.quote(client_id, safe=""), urllib.parse.quote(secret, safe="")
    return "Basic " + base64.b64encode(f"{client_id}:{secret}".encode()).decode("ascii")


def _redact(text: str, secrets: tuple[str, ...]) -> str:
    for s in secrets:
        if s:
            text = text.replace(s, "[hidden]")
    return text


def fetch_token(settings: OAuthSettings, now_wall_ms: Callable[[], int]) -> AccessToken:
    """One request to the token endpoint (blocking, bounded by the connect and read timeouts)."""
    url = settings.token_url
    hidden: tuple[str, ...] = (settings.client_secret,)
    if url.startswith("file:"):
        # Java's and librdkafka's file source: a token kept fresh by something else.
        path = urllib.request.url2pathname(urllib.parse.urlparse(url).path)
        try:
            text = Path(path).read_text().strip()
        except OSError as exc:
            raise TokenEndpointError(f"cannot read the access token from {url}: {exc.strerror}") from None
        return parse_access_token(text, None, now_wall_ms(), settings.sub_claim)
    form = {"grant_type": settings.grant_type}
    headers = {"Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json"}
    if settings.grant_type == JWT_BEARER:
        if settings.assertion_file:
            try:
                assertion = Path(settings.assertion_file).read_text().strip()
            except OSError as exc:
                raise TokenEndpointError(f"cannot read the JWT assertion file {settings.assertion_file}: "
                                         f"{exc.strerror}") from None
        else:
            assertion = sign_assertion(settings, now_wall_ms())
        form["assertion"] = assertion
        hidden += (assertion,)
        if settings.client_id:
            headers["Authorization"] = _basic(settings.client_id, settings.client_secret, settings.urlencode_header)
    else:
        headers["Authorization"] = _basic(settings.client_id, settings.client_secret, settings.urlencode_header)
    if settings.scope:
        form["scope"] = settings.scope
    request = urllib.request.Request(url, data=urllib.parse.urlencode(form).encode(), headers=headers,
                                     method="POST")
    timeout = (settings.connect_timeout_ms + settings.read_timeout_ms) / 1000
    who = f"client {settings.client_id!r}" if settings.client_id else "the client"
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=settings.ssl_context) as answer:
            status, body = answer.status, answer.read(_MAX_ANSWER_BYTES)
    except urllib.error.HTTPError as exc:
        body = exc.read(4096) if exc.fp is not None else b""
        detail = _endpoint_error(body)
        raise TokenEndpointError(
            f"OAUTHBEARER authentication failed: the token endpoint {url} refused {who} with HTTP "
            f"{exc.code}{detail}", exc.code) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise TokenEndpointError(f"OAUTHBEARER: cannot reach the token endpoint {url}: "
                                 f"{_redact(str(reason), hidden)}") from None
    try:
        answer_json = json.loads(body)
    except ValueError:
        raise TokenEndpointError(f"OAUTHBEARER: the token endpoint {url} answered HTTP {status} with "
                                 "something that is not JSON", status) from None
    if not isinstance(answer_json, dict):
        raise TokenEndpointError(f"OAUTHBEARER: the token endpoint {url} answered with JSON that is not "
                                 "an object", status)
    try:
        return parse_access_token(answer_json.get("access_token"), answer_json.get("expires_in"), now_wall_ms(),
                                  settings.sub_claim)
    except TokenEndpointError as exc:
        raise TokenEndpointError(f"OAUTHBEARER: the token endpoint {url} gave a token kclient cannot use: {exc}",
                                 status) from None


def load_assertion_key(pem: str, passphrase: str, algorithm: str) -> object:
    """The private key that signs jwt-bearer assertions (RS256: RSA, ES256: P-256)."""
    try:
        from cryptography.hazmat.primitives.asymmetric import ec, rsa
        from cryptography.hazmat.primitives.serialization import load_pem_private_key
    except ImportError:
        raise ConfigurationError("signing a jwt-bearer assertion needs the cryptography package "
                                 '(pip install "kclient-cy[tls]")') from None
    try:
        key = load_pem_private_key(pem.encode(), passphrase.encode() if passphrase else None)
    except (ValueError, TypeError) as exc:
        reason = "wrong passphrase or not a PEM private key" if "password" in str(exc).lower() or \
            "decrypt" in str(exc).lower() else "not a PEM private key"
        raise ConfigurationError(f"the jwt-bearer assertion's private key cannot be loaded: {reason}") from None
    want = rsa.RSAPrivateKey if algorithm == "RS256" else ec.EllipticCurvePrivateKey
    if not isinstance(key, want):
        raise ConfigurationError(f"the jwt-bearer assertion algorithm {algorithm} needs "
                                 f"{'an RSA' if algorithm == 'RS256' else 'an EC P-256'} private key")
    return key


def sign_assertion(settings: OAuthSettings, now_wall_ms: int) -> str:
    """A fresh RFC 7523 assertion: the configured claims, iat, exp and nbf, signed."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec, padding
    from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
    import uuid
    key: object = load_assertion_key(settings.assertion_key, settings.assertion_key_passphrase,
                                     settings.assertion_algorithm)
    now = now_wall_ms // 1000
    claims: dict[str, object] = {k: v for k, v in settings.assertion_claims.items() if v}
    claims.update(iat=now, exp=now + settings.assertion_exp_seconds, nbf=now - settings.assertion_nbf_seconds)
    if settings.assertion_jti:
        claims["jti"] = uuid.uuid4().hex

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).decode().rstrip("=")
    header = {"alg": settings.assertion_algorithm, "typ": "JWT"}
    signing_input = (b64(json.dumps(header, separators=(",", ":")).encode()) + "."
                     + b64(json.dumps(claims, separators=(",", ":")).encode())).encode()
    if settings.assertion_algorithm == "RS256":
        signature = key.sign(signing_input, padding.PKCS1v15(), hashes.SHA256())  # type: ignore[attr-defined]
    else:   # JWS ES256: r and s as two 32-byte big-endian numbers, not DER
        der = key.sign(signing_input, ec.ECDSA(hashes.SHA256()))  # type: ignore[attr-defined]
        r, s_ = decode_dss_signature(der)
        signature = r.to_bytes(32, "big") + s_.to_bytes(32, "big")
    return f"{signing_input.decode()}.{b64(signature)}"


def _endpoint_error(body: bytes) -> str:
    """RFC 6749 5.2's error and description from a refusal, if it has them."""
    try:
        data = json.loads(body)
    except ValueError:
        return ""
    if not isinstance(data, dict) or not isinstance(data.get("error"), str):
        return ""
    text = f": {data['error'][:100]}"
    if isinstance(data.get("error_description"), str):
        text += f" ({data['error_description'][:200]})"
    return text


class OAuthTokenProvider:
    """A token source for ``OAuthBearerMechanism``, shared by every connection of one client.

    ``start()`` (each client that uses it) starts the refresh thread and ``close()`` (each of
    them) stops it once the last one closes. ``token()`` returns the current token; before the
    first one arrives it waits for the fetch in progress (up to the request's timeouts), and
    after a failure with no valid token left it raises that failure at once.
    """

    def __init__(self, settings: OAuthSettings, *, clock: Clock = SYSTEM_CLOCK, rng: random.Random | None = None,
                 fetch: Callable[[], AccessToken] | None = None):
        self.settings = settings
        self._clock = clock
        self._rng = rng or random.Random()
        self._fetch = fetch or (lambda: fetch_token(settings, clock.wall_ms))
        self._cond = threading.Condition()
        self._token: AccessToken | None = None
        self._error: TokenEndpointError | None = None
        self._failures = 0
        self._due_ms = 0                # monotonic: when the next fetch is due
        self._users = 0
        self._thread: threading.Thread | None = None
        self._closed = False
        self.fetches = 0                # requests made (statistics, tests)

    # ------------------------------------------------------------------ the schedule
    def refresh_at_ms(self, fetched_ms: int, token: AccessToken) -> int:
        """When a token fetched at ``fetched_ms`` (monotonic) is to be replaced."""
        factor = self.settings.window_factor + self._rng.uniform(0, self.settings.window_jitter)
        return fetched_ms + int(token.lifetime_ms * min(factor, 0.95))

    def retry_at_ms(self, failed_ms: int) -> int:
        """When to try again after ``self._failures`` failures in a row (the first: base backoff)."""
        s = self.settings
        backoff = min(s.retry_backoff_max_ms, s.retry_backoff_ms * 2 ** min(self._failures - 1, 30))
        return failed_ms + int(backoff)

    def due_ms(self) -> int:
        with self._cond:
            return self._due_ms

    def step(self, now_ms: int) -> int:
        """Fetch if due at ``now_ms``; the next due time. (The thread's body; tests call it
        with a fake clock.)"""
        with self._cond:
            if now_ms < self._due_ms:
                return self._due_ms
        try:
            token = self._fetch()
        except TokenEndpointError as exc:
            error: TokenEndpointError | None = exc
            token = None
        except Exception as exc:    # a bug or an unexpected answer must not end the refresh thread
            error, token = TokenEndpointError(f"OAUTHBEARER: fetching a token failed: {type(exc).__name__}"), None
        done_ms = self._clock.now_ms()
        with self._cond:
            self.fetches += 1
            if token is not None:
                self._token, self._error, self._failures = token, None, 0
                self._due_ms = self.refresh_at_ms(done_ms, token)
                log.debug("OAUTHBEARER token for %r from %s: valid %.1f s, next fetch in %.1f s", token.subject,
                          self.settings.token_url, token.lifetime_ms / 1000, (self._due_ms - done_ms) / 1000)
            else:
                assert error is not None
                self._error = error
                self._failures += 1
                self._due_ms = self.retry_at_ms(done_ms)
                if self._token is not None and self._token.expires_ms <= self._clock.wall_ms():
                    self._token = None
                log.warning("%s; retrying in %d ms", error, self._due_ms - done_ms)
            self._cond.notify_all()
            return self._due_ms

    # ------------------------------------------------------------------ the thread
    def start(self) -> None:
        with self._cond:
            self._users += 1
            if self._thread is not None:
                return
            self._closed = False
            self._thread = threading.Thread(target=self._run, name="kclient-oauth-token", daemon=True)
            self._thread.start()

    def close(self) -> None:
        with self._cond:
            self._users = max(0, self._users - 1)
            if self._users or self._thread is None:
                return
            self._closed = True
            thread, self._thread = self._thread, None
            self._cond.notify_all()
        if thread is not threading.current_thread():
            thread.join(timeout=(self.settings.connect_timeout_ms + self.settings.read_timeout_ms) / 1000 + 1)

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._closed:
                    return
            due = self.step(self._clock.now_ms())
            with self._cond:
                while not self._closed:
                    wait_ms = due - self._clock.now_ms()
                    if wait_ms <= 0:
                        break
                    self._cond.wait(wait_ms / 1000)
                    due = self._due_ms      # token() may have asked for an early fetch

    # ------------------------------------------------------------------ what the mechanism asks
    def _usable(self) -> AccessToken | None:
        token = self._token
        return token if token is not None and token.expires_ms > self._clock.wall_ms() else None

    def token(self) -> str:
        """The current token. Waits (bounded) for the first one or for a refresh that is overdue."""
        s = self.settings
        started = self._clock.now_ms()
        deadline = started + s.connect_timeout_ms + s.read_timeout_ms
        with self._cond:
            if self._thread is None and not self._closed:
                # Used without start() (a client built by hand): fetch on this thread.
                self._cond.release()
                try:
                    self.step(self._clock.now_ms())
                finally:
                    self._cond.acquire()
            while True:
                token = self._usable()
                # A valid token is used at once unless its refresh is overdue and no fetch has
                # failed yet (then the thread is about to replace it: wait a moment for that).
                if token is not None and (self._due_ms > self._clock.now_ms() or self._failures):
                    return token.value
                if self._error is not None and self._failures and token is None:
                    raise self._error
                # The caller polls the network (heartbeats may wait on it): with a valid token
                # in hand, an overdue refresh is waited for a moment only.
                until = deadline if token is None else min(deadline, started + _OVERDUE_WAIT_MS)
                remaining = until - self._clock.now_ms()
                if remaining <= 0 or self._thread is None:
                    if token is not None:
                        return token.value      # overdue refresh, but still valid
                    raise TokenEndpointError(f"OAUTHBEARER: no token from {s.token_url} within "
                                             f"{s.connect_timeout_ms + s.read_timeout_ms} ms")
                self._cond.wait(min(remaining, 100) / 1000)

    def extensions(self) -> dict[str, str]:
        return dict(self.settings.extensions)

    def __repr__(self) -> str:
        return f"OAuthTokenProvider(url={self.settings.token_url!r}, client_id={self.settings.client_id!r})"


def parse_extensions(text: str | None, setting: str) -> dict[str, str]:
    """librdkafka's ``sasl.oauthbearer.extensions``: ``key=value`` pairs separated by commas."""
    result: dict[str, str] = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key.isalnum() or key == "auth":
            raise ConfigurationError(f"setting {setting!r}: {item.strip()!r} is not key=value with an "
                                     "alphanumeric key other than 'auth'")
        result[key] = value.strip()
    return result
