"""Test certificates and credentials for brokers with TLS and SASL listeners.

``TestPki.create(dir)`` makes, with the ``openssl`` command line: a CA, a broker certificate
for IP 127.0.0.1 only (so that connecting as "localhost" is a host-name mismatch), a client
certificate for mTLS, and an unrelated CA that trusts nothing here (the "unknown CA" case).
Keys are EC P-256, unencrypted PKCS#8, valid two days: for tests only.
"""
from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from kclient.testing._base import BrokerStartError

__all__ = ["TestPki", "PLAIN_USER", "CONNECTION_STRING_USER", "SCRAM_USER", "SCRAM_MECHANISMS", "P12_PASSWORD"]

PLAIN_USER = ("alice", "alice-secret-password")
# Azure Event Hubs' login shape: the literal user name $ConnectionString, a connection string as password.
CONNECTION_STRING_USER = ("$ConnectionString", "Endpoint=sb://kclient-test.servicebus.windows.net/;"
                          "SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=a2NsaWVudC10ZXN0")
SCRAM_USER = ("carol", "carol-secret-password")
P12_PASSWORD = "p12-store-password"
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


def _openssl(*args: str, cwd: Path) -> None:
    exe = shutil.which("openssl")
    if exe is None:
        raise BrokerStartError("TLS test certificates need the openssl command (apt-get install openssl)")
    done = subprocess.run([exe, *args], cwd=cwd, capture_output=True, text=True, timeout=60,
                          stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        raise BrokerStartError(f"openssl {args[0]} failed: {done.stderr[-2000:]}")


@dataclass(frozen=True)
class TestPki:
    dir: Path
    ca_file: Path            # trust this to verify the broker
    broker_pem: Path         # the broker's key and certificate (Kafka's PEM keystore)
    client_cert: Path        # mTLS client certificate
    client_key: Path
    client_pem: Path         # key + certificate in one file
    other_ca_file: Path      # a CA that signed nothing here
    client_p12: Path         # the client's key and certificate as a PKCS12 store (P12_PASSWORD)
    ca_p12: Path             # the CA certificate as a PKCS12 trust store (P12_PASSWORD)

    __test__ = False         # not a pytest test class

    @classmethod
    def create(cls, directory: Path, host: str = "127.0.0.1") -> "TestPki":
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
        for ca in ("ca", "other-ca"):
            _openssl("req", "-x509", *ec, "-keyout", f"{ca}.key", "-out", f"{ca}.pem", "-days", "2",
                     "-subj", f"/CN=kclient test {ca}", cwd=d)
        for name, san in (("broker", f"IP:{host}"), ("client", "DNS:kclient-test-client")):
            _openssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=d)
            (d / f"{name}.ext").write_text(f"subjectAltName={san}\n")
            _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
                     "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext", cwd=d)
            (d / f"{name}.pem").write_text((d / f"{name}.key").read_text() + (d / f"{name}.crt").read_text())
        _openssl("pkcs12", "-export", "-in", "client.crt", "-inkey", "client.key", "-certfile", "ca.pem",
                 "-out", "client.p12", "-passout", f"pass:{P12_PASSWORD}", cwd=d)
        _openssl("pkcs12", "-export", "-nokeys", "-in", "ca.pem", "-out", "ca.p12",
                 "-passout", f"pass:{P12_PASSWORD}", cwd=d)
        return cls(dir=d, ca_file=d / "ca.pem", broker_pem=d / "broker.pem", client_cert=d / "client.crt",
                   client_key=d / "client.key", client_pem=d / "client.pem", other_ca_file=d / "other-ca.pem",
                   client_p12=d / "client.p12", ca_p12=d / "ca.p12")
