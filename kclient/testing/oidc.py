"""An OAuth 2 token endpoint on loopback for OIDC tests: client credentials in, RS256 JWTs out.

``TokenEndpoint(clients={"id": "secret"}, lifetime_s=10).start()`` serves

* ``POST /token``: ``grant_type=client_credentials`` with the client's id and secret in HTTP
  Basic authentication or in the form (``client_id``, ``client_secret``), or
  ``grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer`` with an ``assertion`` whose
  subject is a known client id. The answer is ``{"access_token", "token_type", "expires_in"}``
  with a JWT signed by the endpoint's RSA key (``sub`` the client id, ``aud`` the endpoint's
  audience, ``exp`` ``lifetime_s`` ahead). A wrong secret gets 401 ``invalid_client``.
* ``GET /jwks``: the public key as a JSON Web Key Set, what a broker validates tokens with.

Over https when given ``certfile`` (a PEM key and certificate, e.g. ``TestPki.broker_pem``).

``issue`` switches what the next tokens look like ("valid", "expired", "malformed"), and
``requests`` counts the token requests, for tests of refusals and retries.
"""
from __future__ import annotations

import base64
import json
import logging
import ssl
import threading
import time
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["TokenEndpoint", "AUDIENCE"]

log = logging.getLogger(__name__)

AUDIENCE = "kafka-test"
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _b64_json(obj: dict) -> str:
    return _b64(json.dumps(obj, separators=(",", ":")).encode())


def _int_b64(n: int) -> str:
    return _b64(n.to_bytes((n.bit_length() + 7) // 8, "big"))


class TokenEndpoint:
    def __init__(self, clients: dict[str, str] | None = None, *, lifetime_s: float = 60.0,
                 audience: str = AUDIENCE, host: str = "127.0.0.1", certfile: str | None = None) -> None:
        from cryptography.hazmat.primitives.asymmetric import rsa
        self.clients = dict(clients or {})
        self.lifetime_s = lifetime_s
        self.audience = audience
        self.host = host
        # certfile: the server's key and certificate (PEM): serve https instead of http.
        self.certfile = certfile
        self.issue = "valid"
        # jwt-bearer: if set, assertions must be signed by this public key (RSA: RS256, EC: ES256).
        self.assertion_public_key: Any = None
        self.requests = 0
        self.refusals = 0
        self.kid = uuid.uuid4().hex[:12]
        self._key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ addresses
    @property
    def base_url(self) -> str:
        if self._server is None:
            raise RuntimeError("the token endpoint is not started")
        scheme = "https" if self.certfile else "http"
        return f"{scheme}://{self.host}:{self._server.server_address[1]}"

    @property
    def token_url(self) -> str:
        return self.base_url + "/token"

    @property
    def jwks_url(self) -> str:
        return self.base_url + "/jwks"

    @property
    def issuer(self) -> str:
        return self.base_url

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> "TokenEndpoint":
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                if self.path.split("?")[0] == "/jwks":
                    self._answer(200, endpoint.jwks())
                else:
                    self._answer(404, {"error": "not_found"})

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                form = urllib.parse.parse_qs(self.rfile.read(length).decode(), keep_blank_values=True)
                fields = {k: v[0] for k, v in form.items()}
                if self.path.split("?")[0] != "/token":
                    self._answer(404, {"error": "not_found"})
                    return
                status, body = endpoint.answer(fields, self.headers.get("Authorization"))
                self._answer(status, body)

            def _answer(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if status == 401:
                    self.send_header("WWW-Authenticate", 'Basic realm="token"')
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("token endpoint: " + format, *args)

        self._server = ThreadingHTTPServer((self.host, 0), Handler)
        self._server.daemon_threads = True
        if self.certfile:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(self.certfile)
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(target=self._server.serve_forever, name="oidc-token-endpoint",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None

    def __enter__(self) -> "TokenEndpoint":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # ------------------------------------------------------------------ tokens
    def jwks(self) -> dict:
        numbers = self._key.public_key().public_numbers()
        return {"keys": [{"kty": "RSA", "use": "sig", "alg": "RS256", "kid": self.kid,
                          "n": _int_b64(numbers.n), "e": _int_b64(numbers.e)}]}

    def sign(self, claims: dict) -> str:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding
        signing_input = f"{_b64_json({'alg': 'RS256', 'typ': 'JWT', 'kid': self.kid})}.{_b64_json(claims)}"
        signature = self._key.sign(signing_input.encode(), padding.PKCS1v15(), hashes.SHA256())
        return f"{signing_input}.{_b64(signature)}"

    def make_token(self, subject: str, scope: str = "", lifetime_s: float | None = None) -> str:
        now = int(time.time())
        lifetime = self.lifetime_s if lifetime_s is None else lifetime_s
        claims: dict[str, Any] = {"iss": self.issuer, "sub": subject, "aud": self.audience, "iat": now,
                                  "nbf": now, "exp": int(now + lifetime), "jti": uuid.uuid4().hex}
        if scope:
            claims["scope"] = scope
        return self.sign(claims)

    def answer(self, form: dict[str, str], authorization: str | None) -> tuple[int, dict]:
        """The (status, JSON body) for one token request."""
        with self._lock:
            self.requests += 1
        grant = form.get("grant_type", "")
        if grant == "client_credentials":
            client_id, secret = form.get("client_id"), form.get("client_secret")
            if authorization and authorization.startswith("Basic "):
                try:
                    decoded = base64.b64decode(authorization[6:]).decode()
                except ValueError:
                    decoded = ""
                user, _, password = decoded.partition(":")
                client_id, secret = urllib.parse.unquote(user), urllib.parse.unquote(password)
            if client_id is None or self.clients.get(client_id) != secret:
                return self._refuse(401, "invalid_client", "client authentication failed")
        elif grant == JWT_BEARER:
            client_id = self._assertion_subject(form.get("assertion", ""))
            if client_id not in self.clients or not self._assertion_signed(form.get("assertion", "")):
                return self._refuse(400, "invalid_grant", "the assertion names no known client")
        else:
            return self._refuse(400, "unsupported_grant_type", f"grant_type {grant!r} is not supported")
        assert client_id is not None
        scope = form.get("scope", "")
        if self.issue == "expired":
            token = self.make_token(client_id, scope, lifetime_s=-60)
        elif self.issue == "malformed":
            token = "not-a-jwt"
        else:
            token = self.make_token(client_id, scope)
        return 200, {"access_token": token, "token_type": "Bearer", "expires_in": int(self.lifetime_s),
                     **({"scope": scope} if scope else {})}

    def _refuse(self, status: int, error: str, description: str) -> tuple[int, dict]:
        with self._lock:
            self.refusals += 1
        return status, {"error": error, "error_description": description}

    def _assertion_signed(self, assertion: str) -> bool:
        if self.assertion_public_key is None:
            return True
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec, padding
        from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature
        head, body, sig = assertion.split(".")
        signature = base64.urlsafe_b64decode(sig + "=" * (-len(sig) % 4))
        data = f"{head}.{body}".encode()
        try:
            if isinstance(self.assertion_public_key, ec.EllipticCurvePublicKey):
                der = encode_dss_signature(int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big"))
                self.assertion_public_key.verify(der, data, ec.ECDSA(hashes.SHA256()))
            else:
                self.assertion_public_key.verify(signature, data, padding.PKCS1v15(), hashes.SHA256())
        except InvalidSignature:
            return False
        return True

    @staticmethod
    def _assertion_subject(assertion: str) -> str | None:
        parts = assertion.split(".")
        if len(parts) != 3:
            return None
        try:
            claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
        except ValueError:
            return None
        return claims.get("sub") if isinstance(claims, dict) else None

    def __repr__(self) -> str:
        state = self.base_url if self._server is not None else "stopped"
        return f"<TokenEndpoint {state} clients={sorted(self.clients)}>"
