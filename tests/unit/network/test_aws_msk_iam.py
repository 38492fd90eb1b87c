"""SASL AWS_MSK_IAM: the signed document against botocore's own Signature V4 signer, the
region and credential rules, and the exchange through the Authenticator."""
from __future__ import annotations

import datetime
import hashlib
import json
import sys
from unittest import mock
from urllib.parse import parse_qs, urlsplit

import pytest

from kclient import errors as Errors
from kclient.network.aws_msk_iam import AwsMskIamMechanism, msk_iam_payload, region_from_host
from kclient.network.network_config import NetworkClientConfig
from test_authenticator import NOW, all_versions, make

botocore = pytest.importorskip("botocore")
from botocore.auth import SigV4QueryAuth  # noqa: E402
from botocore.awsrequest import AWSRequest  # noqa: E402
from botocore.credentials import Credentials  # noqa: E402

HOST = "b-1.demo.abc123.c2.kafka.eu-west-1.amazonaws.com"
WHEN = datetime.datetime(2026, 11, 28, 5, 6, 7, tzinfo=datetime.timezone.utc)
KEY, SECRET = "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"


class _SignedEmptyBody(SigV4QueryAuth):
    """botocore's presigner with the payload hash AWS_MSK_IAM signs: that of an empty body."""

    def payload(self, request):
        return hashlib.sha256(b"").hexdigest()


def botocore_reference(token):
    request = AWSRequest(method="GET", url=f"https://{HOST}/", params={"Action": "kafka-cluster:Connect"})
    with mock.patch("botocore.auth.get_current_datetime", return_value=WHEN.replace(tzinfo=None)):
        _SignedEmptyBody(Credentials(KEY, SECRET, token), "kafka-cluster", "eu-west-1", expires=900).add_auth(request)
    return {k: v[0] for k, v in parse_qs(urlsplit(request.url).query).items()}


@pytest.mark.parametrize("token", [None, "FQoGZXIvYXdzE+session/token=="])
def test_the_document_is_signed_as_botocore_signs(token):
    ref = botocore_reference(token)
    doc = msk_iam_payload(HOST, "eu-west-1", KEY, SECRET, token, WHEN, "kclient/test")
    assert doc["x-amz-signature"] == ref["X-Amz-Signature"]
    assert doc["x-amz-credential"] == ref["X-Amz-Credential"] == f"{KEY}/20261128/eu-west-1/kafka-cluster/aws4_request"
    assert doc["x-amz-date"] == ref["X-Amz-Date"] == "20261128T050607Z"
    assert doc.get("x-amz-security-token") == ref.get("X-Amz-Security-Token") == token
    assert {k: doc[k] for k in ("version", "host", "action", "x-amz-algorithm", "x-amz-signedheaders",
                                "x-amz-expires")} == {
        "version": "2020_10_22", "host": HOST, "action": "kafka-cluster:Connect",
        "x-amz-algorithm": "AWS4-HMAC-SHA256", "x-amz-signedheaders": "host", "x-amz-expires": "900"}


def test_a_different_secret_or_time_changes_the_signature():
    base = msk_iam_payload(HOST, "eu-west-1", KEY, SECRET, None, WHEN, "ua")["x-amz-signature"]
    assert msk_iam_payload(HOST, "eu-west-1", KEY, SECRET + "x", None, WHEN, "ua")["x-amz-signature"] != base
    later = WHEN + datetime.timedelta(seconds=1)
    assert msk_iam_payload(HOST, "eu-west-1", KEY, SECRET, None, later, "ua")["x-amz-signature"] != base


@pytest.mark.parametrize("host, region", [
    (HOST, "eu-west-1"),
    ("boot-abc.c1.kafka-serverless.us-east-2.amazonaws.com", "us-east-2"),
    ("b-2.x.y.c3.kafka.cn-north-1.amazonaws.com.cn", "cn-north-1"),
    ("b-1.x.kafka.us-gov-west-1.amazonaws.com", "us-gov-west-1"),
    ("localhost", None), ("kafka.example.com", None),
])
def test_the_region_is_read_from_an_msk_host_name(host, region):
    assert region_from_host(host) == region


class FakeSession:
    def __init__(self, region=None, credentials=True, token=None):
        self._region = region
        self._credentials = Credentials(KEY, SECRET, token) if credentials else None

    def get_config_variable(self, name):
        assert name == "region"
        return self._region

    def get_credentials(self):
        return self._credentials


def test_the_mechanism_signs_for_the_brokers_host_with_the_sessions_credentials():
    mech = AwsMskIamMechanism(FakeSession(region="us-east-1", token="tok"), clock=lambda: WHEN)
    mech.server_host = "broker1.internal"
    doc = json.loads(mech.first())
    assert doc["host"] == "broker1.internal" and "/us-east-1/" in doc["x-amz-credential"]
    assert doc == msk_iam_payload("broker1.internal", "us-east-1", KEY, SECRET, "tok", WHEN, doc["user-agent"])
    assert doc["user-agent"].startswith("kclient/")
    assert mech.step(b'{"version":"2020_10_22","request-id":"x"}') is None and mech.complete
    assert SECRET not in repr(mech) and "tok" not in repr(mech)


def test_without_a_region_the_host_name_gives_it_and_otherwise_the_error_says_what_to_set(monkeypatch):
    monkeypatch.delenv("AWS_REGION", raising=False)
    mech = AwsMskIamMechanism(FakeSession(), clock=lambda: WHEN)
    mech.server_host = HOST
    assert "/eu-west-1/" in json.loads(mech.first())["x-amz-credential"]
    mech.server_host = "localhost"
    with pytest.raises(Errors.ConfigurationError, match="AWS_REGION"):
        mech.first()


def test_no_credentials_is_an_authentication_error_naming_the_chain():
    mech = AwsMskIamMechanism(FakeSession(region="eu-west-1", credentials=False))
    mech.server_host = HOST
    with pytest.raises(Errors.AuthenticationFailedError, match="no AWS credentials"):
        mech.first()


def test_without_botocore_the_setting_fails_at_construction_naming_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "botocore.session", None)
    with pytest.raises(Errors.ConfigurationError, match=r"kclient-cy\[aws\]"):
        NetworkClientConfig.of({"bootstrap.servers": "b:1", "security_protocol": "SASL_PLAINTEXT",
                                "sasl_mechanism": "AWS_MSK_IAM"})


def test_the_connection_sends_the_document_for_its_broker(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_REGION", "ap-south-1")
    for name in ("AWS_DEFAULT_REGION", "AWS_SESSION_TOKEN", "AWS_PROFILE", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"):
        monkeypatch.delenv(name, raising=False)
    net = NetworkClientConfig.of({"bootstrap.servers": "b:1", "security_protocol": "SASL_PLAINTEXT",
                                  "sasl_mechanism": "AWS_MSK_IAM"})
    host, auth, conn = make(net.sasl_mechanism)
    auth.start_api_versions(conn, NOW)
    auth.on_response(conn, "api_versions", host.sent[-1][1], all_versions(), NOW)
    assert host.sent[-1][2] == {"mechanism": "AWS_MSK_IAM"}
    auth.on_response(conn, "sasl_handshake", 1, {"error_code": 0, "mechanisms": ["AWS_MSK_IAM"]}, NOW)
    doc = json.loads(host.sent[-1][2]["auth_bytes"])
    assert doc["host"] == "broker1" and f"{KEY}/" in doc["x-amz-credential"] and "/ap-south-1/" in doc["x-amz-credential"]
    auth.on_response(conn, "sasl_authenticate", host.sent[-1][1],
                     {"error_code": 0, "auth_bytes": b'{"version":"2020_10_22","request-id":"r"}',
                      "session_lifetime_ms": 0}, NOW)
    assert host.ready == 1
