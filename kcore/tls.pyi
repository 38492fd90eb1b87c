"""The TLS client context of the GIL-free connections (compiled; OpenSSL's libssl)."""
from __future__ import annotations

from kcore.errors import KafkaConnectionError

__all__ = ["TlsContext", "TlsHandshakeError", "TlsConfigurationError"]


class TlsHandshakeError(KafkaConnectionError):
    """The TLS handshake with a broker failed (the message says why)."""


class TlsConfigurationError(ValueError):
    """TLS material that cannot be used (the message names which)."""


class TlsContext:
    check_hostname: bool

    def __init__(self, *, cafile: str | None = None, capath: str | None = None, cadata: str | bytes | None = None,
                 certchain: str | bytes | None = None, key: str | bytes | None = None,
                 password: str | bytes | None = None, check_hostname: bool = True, ciphers: str | None = None,
                 crlfile: str | None = None) -> None:
        """PEM text for cadata, certchain (the client certificate first) and key; no
        cafile, capath nor cadata: the system's store."""
