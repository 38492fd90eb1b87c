"""How the GIL-free pacemaker secures its own coordinator connection, from the client's settings.

The pacemaker (kcore.pacemaker) opens its connection in C, without the GIL, so it cannot use
the Python ``ssl.SSLContext`` nor the SASL mechanism objects of the main connections. This
module reads the same settings once, at configure time, into what the C side takes:

* TLS: a ``kcore.tls.TlsContext`` with the same trust (PEM files and text, PKCS12 trust
  stores converted to PEM here, or the system's store), the same client certificate for mTLS
  (PEM files or text; a PKCS12 key store converted to PEM here), the key's password, the
  host-name check, the revocation list and the cipher list.
* SASL: the mechanism and the user's credentials (PLAIN, SCRAM-SHA-256/512), or, for
  OAUTHBEARER, the token source the main client uses; the pacemaker is handed each new
  token (``LinkBase`` asks the source).

What the C side cannot do is said in ``unavailable`` (one reason, logged once by the group
layer, which then heartbeats from Python): a caller's own ``ssl_context`` object.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any

from kclient.errors import ConfigurationError
from kclient.network.sasl import OAuthBearerMechanism, PlainMechanism, ScramMechanism, mechanism_from_config
from kclient.network.tls import _pkcs12_to_pem

__all__ = ["PacemakerSecurity", "pacemaker_security"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PacemakerSecurity:
    """The pacemaker connection's security (secrets kept out of the repr)."""

    protocol: str
    tls: Any = None                      # kcore.tls.TlsContext, or None on plain TCP
    sasl_mechanism: str | None = None
    username: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)
    token_source: Any = field(default=None, repr=False)    # OAUTHBEARER: an object with token()
    unavailable: str | None = None       # why the compiled connection cannot be secured like the main one


def _text(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def _tls_context(c: Any) -> tuple[Any, str | None]:
    """(TlsContext, None), or (None, why not)."""
    from kcore.tls import TlsConfigurationError, TlsContext

    if c["ssl.context"] is not None:
        return None, ("the TLS settings are a Python ssl.SSLContext (ssl_context), which the compiled "
                      "connection cannot use; give the CA and certificate files instead")
    trust: list[str] = []
    location, kind = c["ssl.truststore.location"], (c["ssl.truststore.type"] or "PEM").upper()
    if location and kind == "PKCS12":
        trust.append(_pkcs12_to_pem("ssl.truststore.location", location, c["ssl.truststore.password"])[0])
    elif location:
        trust.append(_text(location))
    if c["ssl.truststore.certificates"]:
        trust.append(c["ssl.truststore.certificates"])
    if c["ssl.cafile"]:
        trust.append(_text(c["ssl.cafile"]))
    key_password = c["ssl.key.password"] or c["ssl.password"]
    chain = key = None
    password = None
    location, kind = c["ssl.keystore.location"], (c["ssl.keystore.type"] or "PEM").upper()
    if location and kind == "PKCS12":
        chain, key = _pkcs12_to_pem("ssl.keystore.location", location, c["ssl.keystore.password"] or key_password)
    elif location:
        chain = key = _text(location)
        password = key_password
    if c["ssl.keystore.certificate.chain"] and c["ssl.keystore.key"]:
        chain, key, password = c["ssl.keystore.certificate.chain"], c["ssl.keystore.key"], key_password
    if c["ssl.certfile"]:
        chain = _text(c["ssl.certfile"])
        key = _text(c["ssl.keyfile"]) if c["ssl.keyfile"] else chain
        password = key_password
    algorithm = (c["ssl.endpoint.identification.algorithm"] or "").strip().lower()
    crlfile = c["ssl.crlfile"]
    try:
        ctx = TlsContext(cadata="".join(t if t.endswith("\n") else t + "\n" for t in trust) if trust else None,
                         certchain=chain, key=key, password=password,
                         check_hostname=algorithm == "https" and bool(c["ssl.check.hostname"]),
                         ciphers=c["ssl.ciphers"] or None,
                         crlfile=os.fspath(crlfile) if crlfile else None)
    except TlsConfigurationError as exc:
        return None, f"the compiled connection cannot use the TLS settings: {exc}"
    return ctx, None


def pacemaker_security(c: Any, token_provider: Any = None) -> PacemakerSecurity:
    """From checked settings ``c`` of a client whose security.protocol is not PLAINTEXT;
    ``token_provider``: the client's built-in OAuth client, if any."""
    protocol = c["security.protocol"]
    tls = None
    if protocol in ("SSL", "SASL_SSL"):
        try:
            tls, why = _tls_context(c)
        except (OSError, ConfigurationError) as exc:
            tls, why = None, f"the compiled connection cannot read the TLS settings: {exc}"
        if why is not None:
            return PacemakerSecurity(protocol, unavailable=why)
    if protocol not in ("SASL_PLAINTEXT", "SASL_SSL"):
        return PacemakerSecurity(protocol, tls=tls)
    mechanism = mechanism_from_config(c, token_provider)
    if isinstance(mechanism, OAuthBearerMechanism):
        return PacemakerSecurity(protocol, tls=tls, sasl_mechanism=mechanism.name,
                                 token_source=mechanism._provider)
    if isinstance(mechanism, (PlainMechanism, ScramMechanism)):
        return PacemakerSecurity(protocol, tls=tls, sasl_mechanism=mechanism.name, username=mechanism.username,
                                 password=mechanism._password)
    return PacemakerSecurity(protocol, unavailable=f"SASL mechanism {mechanism.name} is not built into the "
                                                   "compiled connection")
