"""aiokafka's ``create_ssl_context`` (``aiokafka.helpers``): an SSLContext for ``ssl_context=``."""
from __future__ import annotations

import ssl
from typing import Any

__all__ = ["create_ssl_context"]


def create_ssl_context(*, cafile: Any = None, capath: Any = None, cadata: Any = None, certfile: Any = None,
                       keyfile: Any = None, password: Any = None) -> ssl.SSLContext:
    """A client SSLContext that verifies the broker's certificate and host name: trusting
    cafile/capath/cadata (the system's CAs if none is given), presenting certfile/keyfile
    (decrypted with password) if given."""
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=cafile, capath=capath, cadata=cadata)
    context.check_hostname = True
    context.verify_mode = ssl.CERT_REQUIRED
    if certfile is not None:
        context.load_cert_chain(certfile, keyfile, password)
    return context
