"""SASL (PLAIN, SCRAM-SHA-256/512, OAUTHBEARER) on a GIL-free connection (compiled; libcrypto)."""
from __future__ import annotations

from typing import Any

from kcore.errors import KafkaError

__all__ = ["ScramClient", "SaslAuthenticationError", "MECHANISMS", "MAX_SASL_AUTHENTICATE_VERSION",
           "encode_sasl_handshake_request", "decode_sasl_handshake_response", "encode_sasl_authenticate_request",
           "decode_sasl_authenticate_response"]

MAX_SASL_AUTHENTICATE_VERSION: int
MECHANISMS: dict[str, int]


class SaslAuthenticationError(KafkaError):
    """A SASL exchange failed (never naming a secret)."""


class ScramClient:
    name: str
    complete: bool

    def __init__(self, mechanism: str, username: str | bytes, password: str | bytes,
                 nonce: str | bytes | None = None) -> None: ...
    def first(self) -> bytes: ...
    def step(self, challenge: bytes) -> bytes | None: ...


def encode_sasl_handshake_request(correlation_id: int, client_id: str | None, mechanism: str) -> bytes: ...
def decode_sasl_handshake_response(frame: bytes) -> tuple[int, int]: ...
def encode_sasl_authenticate_request(version: int, correlation_id: int, client_id: str | None,
                                     auth_bytes: bytes) -> bytes: ...
def decode_sasl_authenticate_response(version: int, frame: bytes) -> dict[str, Any]: ...
