"""SASL AWS_MSK_IAM: Amazon MSK's IAM login, as kafka-python 3 spells it.

The client sends one JSON document: the parameters of an AWS Signature Version 4 presigned
request for the action ``kafka-cluster:Connect`` of the service ``kafka-cluster`` on the
broker's host name (GET /, only ``host`` signed, the payload hash that of an empty body, valid
900 s). The broker checks the signature with IAM and answers with a small JSON document of its
own; one round trip.

Credentials and the region come from botocore's usual chain (environment, shared config and
credentials files, container and instance roles; AWS_REGION as the other AWS SDKs read it): ``pip install 'kclient-cy[aws]'``. The region
may also be read from the broker's host name (``b-1.cluster.abc.c2.kafka.eu-west-1.amazonaws.com``).
Fresh credentials are asked of botocore at each login, so refreshed role credentials are used
when the broker ends a session (KIP-368) and the connection logs in again.

The signing is written out here rather than delegated to botocore so that the payload is the
documented one whatever botocore's presigning defaults are; a unit test checks it against
botocore's own Signature V4 signer.
"""
from __future__ import annotations

import datetime
import hashlib
import hmac
import json
import os
import re
from typing import Any
from urllib.parse import quote

from kclient import __version__
from kclient.errors import AuthenticationFailedError, ConfigurationError
from kclient.network.sasl_mechanism import SaslMechanism

__all__ = ["AwsMskIamMechanism", "msk_iam_payload", "region_from_host"]

SERVICE = "kafka-cluster"
ACTION = "kafka-cluster:Connect"
ALGORITHM = "AWS4-HMAC-SHA256"
VERSION = "2020_10_22"
EXPIRES_S = 900
_EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
_MSK_HOST = re.compile(r"\.kafka(?:-serverless)?\.([a-z]{2}(?:-gov)?-[a-z]+-\d)\.amazonaws\.com(?:\.cn)?$")


def _uri_encode(value: str) -> str:
    """RFC 3986 encoding as Signature V4 wants it: unreserved characters kept, '/' encoded."""
    return quote(value, safe="-_.~")


def _hmac(key: bytes, msg: str) -> bytes:
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


def msk_iam_payload(host: str, region: str, access_key: str, secret_key: str, session_token: str | None,
                    now: datetime.datetime, user_agent: str) -> dict[str, str]:
    """The AWS_MSK_IAM authentication document for ``host``, signed at ``now`` (UTC)."""
    amz_date = now.strftime("%Y%m%dT%H%M%SZ")
    scope = f"{now.strftime('%Y%m%d')}/{region}/{SERVICE}/aws4_request"
    params = {
        "Action": ACTION,
        "X-Amz-Algorithm": ALGORITHM,
        "X-Amz-Credential": f"{access_key}/{scope}",
        "X-Amz-Date": amz_date,
        "X-Amz-Expires": str(EXPIRES_S),
        "X-Amz-SignedHeaders": "host",
    }
    if session_token:
        params["X-Amz-Security-Token"] = session_token
    query = "&".join(f"{_uri_encode(k)}={_uri_encode(v)}" for k, v in
                     sorted((k, v) for k, v in params.items()))
    canonical = f"GET\n/\n{query}\nhost:{host.lower()}\n\nhost\n{_EMPTY_SHA256}"
    to_sign = f"{ALGORITHM}\n{amz_date}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
    key = _hmac(("AWS4" + secret_key).encode(), now.strftime("%Y%m%d"))
    for part in (region, SERVICE, "aws4_request"):
        key = _hmac(key, part)
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    doc = {
        "version": VERSION,
        "host": host,
        "user-agent": user_agent,
        "action": ACTION,
        "x-amz-algorithm": ALGORITHM,
        "x-amz-credential": params["X-Amz-Credential"],
        "x-amz-date": amz_date,
        "x-amz-signedheaders": "host",
        "x-amz-expires": str(EXPIRES_S),
        "x-amz-signature": signature,
    }
    if session_token:
        doc["x-amz-security-token"] = session_token
    return doc


def region_from_host(host: str) -> str | None:
    """The AWS region in an MSK broker's host name, or None."""
    m = _MSK_HOST.search(host.lower())
    return m.group(1) if m else None


def _botocore_session() -> Any:
    try:
        import botocore.session
    except ImportError:
        raise ConfigurationError("sasl.mechanism AWS_MSK_IAM needs botocore for AWS credentials: "
                                 "pip install 'kclient-cy[aws]' (or botocore)") from None
    return botocore.session.get_session()


class AwsMskIamMechanism(SaslMechanism):
    """One AWS_MSK_IAM login. ``server_host`` is set by the connection before ``first()``."""

    name = "AWS_MSK_IAM"

    def __init__(self, session: Any | None = None, region: str | None = None, *,
                 clock: Any = None):
        self._session = session if session is not None else _botocore_session()
        self._region = region
        self._now = clock or (lambda: datetime.datetime.now(datetime.timezone.utc))
        self.server_host: str | None = None

    def first(self) -> bytes:
        host = self.server_host
        if not host:
            raise ConfigurationError("AWS_MSK_IAM signs for the broker's host name, and none was given")
        # botocore reads AWS_DEFAULT_REGION and the profile; the other AWS SDKs read AWS_REGION.
        region = (self._region or self._session.get_config_variable("region") or os.environ.get("AWS_REGION")
                  or region_from_host(host))
        if not region:
            raise ConfigurationError(
                f"AWS_MSK_IAM: no AWS region for broker {host}: set AWS_REGION or AWS_DEFAULT_REGION "
                "(or a profile's region), or use the broker's MSK host name")
        credentials = self._session.get_credentials()
        if credentials is None:
            raise AuthenticationFailedError(
                "AWS_MSK_IAM: botocore found no AWS credentials (environment, shared files, or role)")
        frozen = credentials.get_frozen_credentials()
        doc = msk_iam_payload(host, region, frozen.access_key, frozen.secret_key, frozen.token,
                              self._now(), f"kclient/{__version__}")
        return json.dumps(doc, separators=(",", ":")).encode()

    def step(self, challenge: bytes) -> bytes | None:
        # The broker's answer is a JSON document (version, request id); a refused login is the
        # SaslAuthenticate error, handled by the connection.
        self.complete = True
        return None

    def __repr__(self) -> str:
        return f"AwsMskIamMechanism(region={self._region!r}, host={self.server_host!r})"
