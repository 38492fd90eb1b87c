"""Apache Kafka (KRaft) as child processes: the reference broker for tests and benchmarks.

``KafkaCluster(brokers=1)`` resolves ``org.apache.kafka:kafka_2.13`` with Maven once into
``~/.cache/kclient/kafka-<version>/`` (see ``maven``), formats KRaft storage in a fresh
temporary directory and runs each node as ``java -cp <jars> kafka.Kafka server.properties``
in combined broker+controller mode. One node by default; ``brokers=3`` gives a replicated
cluster (replication factor 3, ``min.insync.replicas=2``) for failover tests. Ports are free
ones picked at start, except ``port=`` which fixes the first node's client port (e.g. 9092).

Settings favour a fast start and fast groups on 2 cores (``group.initial.rebalance.delay.ms=0``,
few internal-topic partitions, small heaps, two network/IO threads); ``profile="throughput"``
gives the benchmark broker a larger heap and the optimising JIT. Nodes die with the thread that
started them and are recorded for the reaper, like the other harness brokers.

``client_telemetry=True`` loads ``kclient/testing/java/TelemetryRecorder.java`` (compiled
against the broker's jars) as a metrics reporter: the broker then serves KIP-714's
GetTelemetrySubscriptions and PushTelemetry, and every push it receives is recorded for
``telemetry_pushes()``; ``set_client_metrics()`` makes a subscription.

``client_proxies=True`` puts a ``FaultProxy`` in front of every node for clients: each node
gets a second plaintext listener, ``PROXIED``, that it advertises at its proxy's address, so a
client bootstrapped from ``proxied_bootstrap`` is sent to the proxies by Metadata too and never
reaches a broker directly (brokers and controllers still talk to each other directly). Chaos
tests switch faults on ``proxies[node_id]``; ``bootstrap`` stays the direct listener.

``relayed_protocols=("SSL", "SASL_SSL", ...)`` (with ``security=True``) gives each node, per
protocol, a listener meant to sit behind a relay that the caller runs on
``relay_ports_for(protocol)`` (the liveness benchmark's judge, bench/tls_relay.py): the relay
speaks the protocol to clients (terminating TLS) and forwards to the listener, which speaks
PLAINTEXT or SASL_PLAINTEXT and is advertised at the relay's port, so clients stay behind it.
"""
from __future__ import annotations

import atexit
import base64
import hashlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from kclient.testing import _wire, reaper
from kclient.testing._base import BrokerStartError, ClusterBase, HarnessError, free_port, log_tail
from kclient.testing.oidc import TokenEndpoint
from kclient.testing.javac import compile_helper
from kclient.testing.maven import MavenError, find_java, java_major_version, resolve_jars
from kclient.testing.pki import CONNECTION_STRING_USER, PLAIN_USER, SCRAM_MECHANISMS, SCRAM_USER, TestPki
from kclient.testing.proxy import FaultProxy

_SECURE_LISTENERS = ("SSL", "SASL_PLAINTEXT", "SASL_SSL", "MTLS")
# A relayed listener's protocol on the broker's side, by the protocol its relay speaks to clients.
_RELAYED_BROKER_SIDE = {"PLAINTEXT": "PLAINTEXT", "SSL": "PLAINTEXT", "SASL_PLAINTEXT": "SASL_PLAINTEXT",
                        "SASL_SSL": "SASL_PLAINTEXT"}
_CLIENT_METRICS_RESOURCE = 16   # ConfigResource.Type.CLIENT_METRICS

log = logging.getLogger(__name__)

__all__ = ["KafkaCluster", "KAFKA_VERSION", "kafka_jars", "SASL_SESSION_MS"]

#: The Apache Kafka release the harness runs unless $KCLIENT_KAFKA_VERSION names another 4.x.
KAFKA_VERSION = "4.4.0"
#: connections.max.reauth.ms of a security=True cluster: short, so every SASL test connection
#: that lives a few seconds re-authenticates (KIP-368) at least once.
SASL_SESSION_MS = 2000
# Kafka's own jars log through slf4j 1.7; this binding routes that to log4j2, which Kafka ships.
_LOG4J_VERSION = "2.25.5"

_PROFILES = {
    # Tests: start fast (C1 only, class sharing), stay small.
    "test": ["-Xms128m", "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto"],
    # Benchmarks: the broker must not be the bottleneck, so full JIT and a bigger heap.
    "throughput": ["-Xms1g", "-Xmx1g", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20"],
}

_LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = {level}
rootLogger.appenderRef.out.ref = OUT
logger.kafka.name = kafka
logger.kafka.level = {level}
logger.state.name = state.change.logger
logger.state.level = WARN
"""


def kafka_version() -> str:
    return os.environ.get("KCLIENT_KAFKA_VERSION") or KAFKA_VERSION


def kafka_jars(version: str | None = None) -> list[Path]:
    """The broker's classpath (resolved with Maven on first use, then read from the cache)."""
    version = version or kafka_version()
    return resolve_jars([f"org.apache.kafka:kafka_2.13:{version}",
                         f"org.apache.logging.log4j:log4j-slf4j-impl:{_LOG4J_VERSION}"],
                        f"kafka-{version}")


def class_archive(java: str, classpath: str) -> Path | None:
    """Where the test profile's JVMs keep their class-data archive (CDS): the classes a broker's
    storage tool loaded, which later JVMs of the same Java runtime and classpath map from it
    instead of loading and verifying them from the jars again (a second or so of each start).
    One file per Java runtime and classpath, next to the jars; a JVM that finds it does not
    match (another build of Java) ignores it. None for a classpath with a directory on it (a
    compiled helper's classes): the JVM archives classes from jars only and refuses to start."""
    if not all(entry.endswith(".jar") for entry in classpath.split(os.pathsep)):
        return None
    real = os.path.realpath(java)
    key = hashlib.sha256(f"{real}:{os.stat(real).st_mtime_ns}:{classpath}".encode()).hexdigest()[:16]
    return Path(classpath.split(os.pathsep)[-1]).parent / f"classes-{key}.jsa"


def _check_port_free(host: str, port: int) -> None:
    """Fail before the JVM starts when a chosen port is taken: Kafka would only say so in its log."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # As a server socket binds: a port left in TIME_WAIT by an earlier run is free.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as exc:
            raise BrokerStartError(f"cannot listen on {host}:{port}: {exc.strerror or exc} "
                                   f"(another broker may be running there)") from None


@dataclass
class _Node:
    node_id: int
    port: int
    controller_port: int
    dir: Path
    proc: subprocess.Popen | None = None
    record: Path | None = None
    log_path: Path | None = None
    extra: dict[str, str] = field(default_factory=dict)
    listener_ports: dict[str, int] = field(default_factory=dict)   # secured listeners (security=True)
    proxied_port: int = 0          # the PROXIED listener (client_proxies=True), behind proxy_port
    proxy_port: int = 0
    secure_proxied_port: int = 0   # the PROXIED_SASL_SSL listener (proxied_protocols has SASL_SSL)
    secure_proxy_port: int = 0
    # relayed_protocols: client-side protocol -> (the relay's port, the RELAYED_* listener's port)
    relay_ports: dict[str, tuple[int, int]] = field(default_factory=dict)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class KafkaCluster(ClusterBase):
    """``brokers`` Apache Kafka nodes on loopback ports, each broker and controller at once.

    ``with KafkaCluster() as kafka: kafka.bootstrap`` -> ``"127.0.0.1:PORT"`` (every node's
    address, comma-separated, for a multi-node cluster). ``broker_config`` adds or overrides
    server properties for every node. Start it from a thread that outlives it (e.g. the main
    thread): the nodes are killed when that thread exits.
    """

    kind = "kafka"
    supports_fault_injection = False

    def __init__(self, brokers: int = 1, *, host: str = "127.0.0.1", version: str | None = None,
                 broker_config: dict[str, str] | None = None, racks: list[str] | None = None,
                 security: bool = False, profile: str = "test",
                 startup_timeout: float = 120.0, die_with_parent: bool = True,
                 log_level: str = "WARN", client_proxies: bool = False, port: int | None = None,
                 oidc: TokenEndpoint | None = None, oidc_session_ms: int = SASL_SESSION_MS,
                 proxied_protocols: tuple[str, ...] = ("PLAINTEXT",),
                 client_telemetry: bool = False, relayed_protocols: tuple[str, ...] = ()) -> None:
        if brokers < 1:
            raise ValueError(f"a Kafka cluster needs at least 1 broker, got {brokers}")
        if profile not in _PROFILES:
            raise ValueError(f"profile must be one of {sorted(_PROFILES)}, got {profile!r}")
        self.brokers = brokers
        self.host = host
        # The first node's client port (the others pick free ones); None or 0: a free port.
        self.port = port or None
        self.version = version or kafka_version()
        self.broker_config = dict(broker_config or {})
        if racks is not None and len(racks) != brokers:
            raise ValueError(f"racks names one rack per broker: {brokers} brokers, {len(racks)} racks")
        self.racks = list(racks) if racks is not None else None
        # security=True: SSL, SASL_PLAINTEXT, SASL_SSL and MTLS (SSL, client certificate
        # required) listeners besides PLAINTEXT, test certificates in ``pki``, the PLAIN user
        # and the SCRAM user of kclient.testing.pki.
        self.security = security
        self.pki: TestPki | None = None
        self.client_proxies = client_proxies
        self.proxies: dict[int, FaultProxy] = {}
        # With client_proxies: the protocols of the proxied listeners. PLAINTEXT is ``proxies``
        # behind ``proxied_bootstrap``; SASL_SSL (TLS with SCRAM-SHA-512, needs security=True) is
        # ``secure_proxies``, for fault tests of secured connections (proxied_bootstrap_for).
        unknown = set(proxied_protocols) - {"PLAINTEXT", "SASL_SSL"}
        if unknown or "PLAINTEXT" not in proxied_protocols:
            raise ValueError(f"proxied_protocols is PLAINTEXT, optionally with SASL_SSL, not {proxied_protocols!r}")
        if "SASL_SSL" in proxied_protocols and not security:
            raise ValueError("a SASL_SSL proxied listener needs security=True (certificates and SASL users)")
        self.proxied_protocols = tuple(proxied_protocols)
        self.secure_proxies: dict[int, FaultProxy] = {}
        # oidc: an OIDC listener (SASL_PLAINTEXT, OAUTHBEARER) that validates the JWTs of this
        # started token endpoint against its JWKS; sessions last at most oidc_session_ms.
        self.oidc = oidc
        self.oidc_session_ms = oidc_session_ms
        # relayed_protocols: for each client-side protocol (PLAINTEXT, SSL, SASL_PLAINTEXT,
        # SASL_SSL) a listener whose TLS, if any, a relay outside the broker terminates: the
        # listener speaks PLAINTEXT (for PLAINTEXT and SSL) or SASL_PLAINTEXT (for the SASL ones)
        # and is advertised at the relay's port, so Metadata and FindCoordinator send the
        # client back through the relay. The caller starts the relays (relay_ports_for).
        unknown = set(relayed_protocols) - set(_RELAYED_BROKER_SIDE)
        if unknown:
            raise ValueError(f"relayed_protocols are among {sorted(_RELAYED_BROKER_SIDE)}, not {sorted(unknown)}")
        if relayed_protocols and not security:
            raise ValueError("relayed listeners need security=True (certificates and SASL users)")
        self.relayed_protocols = tuple(relayed_protocols)
        self.client_telemetry = client_telemetry
        self.profile = profile
        self.startup_timeout = startup_timeout
        self.die_with_parent = die_with_parent
        self.log_level = log_level
        self.cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        self.nodes: list[_Node] = []
        self.startup_seconds: float | None = None
        self._root: Path | None = None
        self._keep = bool(os.environ.get("KCLIENT_BROKER_LOG_DIR"))
        self._java: str | None = None
        self._classpath: str | None = None
        self._archive: Path | None = None        # class_archive(), for the test profile

    # ------------------------------------------------------------------ addresses
    @property
    def bootstrap(self) -> str:
        if not self.nodes:
            raise RuntimeError("Kafka cluster not started")
        return ",".join(f"{self.host}:{n.port}" for n in self.nodes)

    @property
    def proxied_bootstrap(self) -> str:
        """Every node's fault proxy (``client_proxies=True``): what clients under test use."""
        if not self.proxies:
            raise HarnessError("this cluster was started without client_proxies=True")
        return ",".join(self.proxies[n.node_id].address for n in self.nodes)

    def proxies_for(self, protocol: str) -> dict[int, FaultProxy]:
        """The fault proxies of the proxied listener of ``protocol`` (PLAINTEXT or SASL_SSL)."""
        proxies = self.proxies if protocol == "PLAINTEXT" else self.secure_proxies if protocol == "SASL_SSL" else {}
        if not proxies:
            raise HarnessError(f"this cluster has no proxied {protocol} listener (client_proxies=True, "
                               f"proxied_protocols={self.proxied_protocols})")
        return proxies

    def proxied_bootstrap_for(self, protocol: str) -> str:
        proxies = self.proxies_for(protocol)
        return ",".join(proxies[n.node_id].address for n in self.nodes)

    def proxied_client_settings(self, protocol: str) -> dict[str, str]:
        """What a client of ``proxied_bootstrap_for(protocol)`` needs besides the address (Java
        names): nothing for PLAINTEXT; for SASL_SSL the SCRAM user and the test CA."""
        if protocol == "PLAINTEXT":
            return {}
        assert self.pki is not None
        user, password = SCRAM_USER
        return {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.plain.username": user, "sasl.plain.password": password,
                "ssl.truststore.type": "PEM", "ssl.truststore.location": str(self.pki.ca_file)}

    def bootstrap_for(self, listener: str) -> str:
        """Bootstrap servers of a secured listener: SSL, SASL_PLAINTEXT, SASL_SSL or MTLS."""
        if not self.security:
            raise HarnessError("this cluster was started without security=True: only PLAINTEXT")
        return ",".join(f"{self.host}:{n.listener_ports[listener]}" for n in self.nodes)

    def relay_ports_for(self, protocol: str) -> dict[int, tuple[int, int]]:
        """node id -> (port the relay must listen on, port of the broker listener it forwards
        to) for a relayed protocol (``relayed_protocols``); the relay listens on the host."""
        if protocol not in self.relayed_protocols:
            raise HarnessError(f"this cluster relays only {self.relayed_protocols}, not {protocol}")
        return {n.node_id: n.relay_ports[protocol] for n in self.nodes}

    @property
    def oidc_bootstrap(self) -> str:
        """Bootstrap servers of the OIDC listener (``oidc=`` a token endpoint)."""
        if self.oidc is None:
            raise HarnessError("this cluster was started without oidc=TokenEndpoint(...)")
        return ",".join(f"{self.host}:{n.listener_ports['OIDC']}" for n in self.nodes)

    def node_bootstrap(self, node_id: int) -> str:
        return f"{self.host}:{self._node(node_id).port}"

    @property
    def pid(self) -> int | None:
        first = self.nodes[0] if self.nodes else None
        return first.proc.pid if first and first.proc else None

    @property
    def pids(self) -> dict[int, int | None]:
        return {n.node_id: (n.proc.pid if n.proc is not None and n.running else None) for n in self.nodes}

    @property
    def running(self) -> bool:
        return bool(self.nodes) and all(n.running for n in self.nodes)

    @property
    def log_paths(self) -> dict[int, Path | None]:
        return {n.node_id: n.log_path for n in self.nodes}

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> "KafkaCluster":
        if self.running:
            return self
        started = time.monotonic()
        self._java = find_java()
        major = java_major_version(self._java)
        if major < 17:
            raise MavenError(f"Apache Kafka {self.version} needs Java 17 or newer; {self._java} is "
                             f"Java {major}: install openjdk-17-jre-headless or set JAVA_HOME")
        jars = kafka_jars(self.version)
        self._classpath = os.pathsep.join(str(j) for j in jars)
        if self.client_telemetry:
            self._classpath = os.pathsep.join([str(compile_helper("TelemetryRecorder", jars)), self._classpath])
        self._archive = class_archive(self._java, self._classpath)
        reaper.reap()
        self._root = Path(tempfile.mkdtemp(prefix="kclient-kafka-", dir=reaper.state_dir()))
        if self.security:
            self.pki = TestPki.create(self._root / "pki", self.host)
        try:
            self._plan_nodes()
            self._format_all()
            for node in self.nodes:
                self._spawn(node)
            self._wait_ready(started + self.startup_timeout)
        except BaseException:  # a failed start (or Ctrl-C) leaves nothing running
            self._kill_all()
            raise
        self.startup_seconds = time.monotonic() - started
        atexit.register(self.stop)
        log.info("Apache Kafka %s, %d node(s), ready at %s in %.1f s", self.version, self.brokers,
                 self.bootstrap, self.startup_seconds)
        return self

    def _plan_nodes(self) -> None:
        taken: set[int] = set()

        def port() -> int:
            while True:
                p = free_port(self.host)
                if p not in taken:
                    taken.add(p)
                    return p

        root = self._root
        assert root is not None  # start() makes it before laying out the nodes
        self.nodes = []
        if self.port is not None:
            _check_port_free(self.host, self.port)
            taken.add(self.port)
        for node_id in range(1, self.brokers + 1):
            node_dir = root / f"node-{node_id}"
            node_dir.mkdir()
            client_port = self.port if node_id == 1 and self.port is not None else port()
            node = _Node(node_id, client_port, port(), node_dir)
            if self.security:
                node.listener_ports = {name: port() for name in _SECURE_LISTENERS}
            if self.oidc is not None:
                node.listener_ports["OIDC"] = port()
            node.relay_ports = {p: (port(), port()) for p in self.relayed_protocols}
            if self.client_proxies:
                # The proxy picks its own free port (no race) before the node advertises it.
                node.proxied_port = port()
                proxy = FaultProxy(self.host, node.proxied_port, host=self.host).start()
                self.proxies[node.node_id] = proxy
                node.proxy_port = proxy.port
                if "SASL_SSL" in self.proxied_protocols:
                    node.secure_proxied_port = port()
                    proxy = FaultProxy(self.host, node.secure_proxied_port, host=self.host).start()
                    self.secure_proxies[node.node_id] = proxy
                    node.secure_proxy_port = proxy.port
            self.nodes.append(node)

    def _properties(self, node: _Node) -> dict[str, str]:
        voters = ",".join(f"{n.node_id}@{self.host}:{n.controller_port}" for n in self.nodes)
        replicas = str(min(3, self.brokers))
        min_isr = "2" if self.brokers >= 3 else "1"
        props = {
            "process.roles": "broker,controller",
            "node.id": str(node.node_id),
            "controller.quorum.voters": voters,
            "listeners": f"PLAINTEXT://{self.host}:{node.port},CONTROLLER://{self.host}:{node.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{self.host}:{node.port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(node.dir / "data"),
            # Replication: one node cannot replicate; three tolerate one failure (acks=all).
            "default.replication.factor": replicas,
            "min.insync.replicas": min_isr,
            "offsets.topic.replication.factor": replicas,
            "transaction.state.log.replication.factor": replicas,
            "transaction.state.log.min.isr": min_isr,
            "share.coordinator.state.topic.replication.factor": replicas,
            "share.coordinator.state.topic.min.isr": min_isr,
            # Fast groups: no initial delay, few coordinator partitions to create on first use.
            "group.initial.rebalance.delay.ms": "0",
            "offsets.topic.num.partitions": "4",
            "transaction.state.log.num.partitions": "4",
            "share.coordinator.state.topic.num.partitions": "4",
            # Tests use short sessions (e.g. 6 s against a 12 s stall); the defaults bound them at 6 s.
            "group.min.session.timeout.ms": "500",
            "group.consumer.min.session.timeout.ms": "1000",
            "group.consumer.min.heartbeat.interval.ms": "100",
            # The consumer protocol (KIP-848, on by default in 4.x) takes session and heartbeat
            # timing from the broker: 6 s / 500 ms instead of 45 s / 5 s keep hand-over tests short.
            "group.consumer.session.timeout.ms": "6000",
            "group.consumer.heartbeat.interval.ms": "500",
            # Kafka 4.3+ batches consumer- and share-group target assignments (KIP-1263), by
            # default once a second: every join or leave in a test would wait for the next batch.
            "group.consumer.assignment.interval.ms": "100",
            "group.share.assignment.interval.ms": "100",
            # Share groups (KIP-932): heartbeats every 500 ms instead of 5 s keep joins short
            # (a member's assignment comes with a heartbeat answer), as for the consumer
            # protocol above, and record locks may be set shorter than the 15 s minimum, so a
            # test waits less for an unacknowledged record to come back.
            "group.share.heartbeat.interval.ms": "500",
            "group.share.min.heartbeat.interval.ms": "100",
            "group.share.min.record.lock.duration.ms": "1000",
            # A share member is evicted after 6 s without a heartbeat instead of 45 s (the
            # default minimum), as for the consumer protocol above.
            "group.share.min.session.timeout.ms": "1000",
            "group.share.session.timeout.ms": "6000",
            # 2 cores: fewer threads than the defaults' 3/8, a small cleaner buffer for small heaps.
            "num.network.threads": "2",
            "num.io.threads": "2",
            "background.threads": "2",
            "num.recovery.threads.per.data.dir": "1",
            "log.cleaner.threads": "1",
            "log.cleaner.dedupe.buffer.size": str(8 * 1024 * 1024),
            "auto.create.topics.enable": "true",
            # A crashed node loses its leaderships after 4 s instead of 9 s: failover tests wait less.
            "broker.session.timeout.ms": "4000",
            "broker.heartbeat.interval.ms": "500",
            # Topics that allow unclean elections get one within half a second of losing every
            # in-sync replica, not after the 5-minute default (truncation tests, KIP-320).
            "unclean.leader.election.interval.ms": "500",
        }
        if self.security:
            props.update(self._security_properties(node))
        if self.oidc is not None:
            props.update(self._oidc_properties(node, props))
        if self.client_proxies:
            props["listeners"] += f",PROXIED://{self.host}:{node.proxied_port}"
            props["advertised.listeners"] += f",PROXIED://{self.host}:{node.proxy_port}"
            props["listener.security.protocol.map"] += ",PROXIED:PLAINTEXT"
            if node.secure_proxied_port:
                props["listeners"] += f",PROXIED_SASL_SSL://{self.host}:{node.secure_proxied_port}"
                props["advertised.listeners"] += f",PROXIED_SASL_SSL://{self.host}:{node.secure_proxy_port}"
                props["listener.security.protocol.map"] += ",PROXIED_SASL_SSL:SASL_SSL"
                user = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
                props["listener.name.proxied_sasl_ssl.sasl.enabled.mechanisms"] = ",".join(SCRAM_MECHANISMS)
                for mechanism in SCRAM_MECHANISMS:
                    props[f"listener.name.proxied_sasl_ssl.{mechanism.lower()}.sasl.jaas.config"] = user
        for protocol, (relay_port, broker_port) in node.relay_ports.items():
            name = f"RELAYED_{protocol}"
            props["listeners"] += f",{name}://{self.host}:{broker_port}"
            props["advertised.listeners"] += f",{name}://{self.host}:{relay_port}"
            props["listener.security.protocol.map"] += f",{name}:{_RELAYED_BROKER_SIDE[protocol]}"
            if _RELAYED_BROKER_SIDE[protocol] == "SASL_PLAINTEXT":
                props.update(self._sasl_jaas_properties(name.lower()))
        if self.client_telemetry:
            assert self._root is not None  # made by start()
            props["metric.reporters"] = "TelemetryRecorder"
            props["kclient.telemetry.record.file"] = str(self._root / "telemetry.log")
        if self.racks is not None:
            # Rack-aware: followers serve consumers in their rack (KIP-392).
            props["broker.rack"] = self.racks[node.node_id - 1]
            props["replica.selector.class"] = "org.apache.kafka.common.replica.RackAwareReplicaSelector"
        props.update(self.broker_config)
        props.update(node.extra)
        return props

    def _security_properties(self, node: _Node) -> dict[str, str]:
        assert self.pki is not None  # made by start() before the nodes are planned
        extra = ",".join(f"{name}://{self.host}:{port}" for name, port in node.listener_ports.items())
        props = {
            "listeners": f"PLAINTEXT://{self.host}:{node.port},CONTROLLER://{self.host}:{node.controller_port},{extra}",
            "advertised.listeners": f"PLAINTEXT://{self.host}:{node.port},{extra}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SSL:SSL,"
                                              "SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL,MTLS:SSL",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(self.pki.broker_pem),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.pki.ca_file),
            "listener.name.mtls.ssl.client.auth": "required",
            "sasl.enabled.mechanisms": "PLAIN,OAUTHBEARER," + ",".join(SCRAM_MECHANISMS),
            # KIP-368: SASL sessions end after this long (or when an OAUTHBEARER token expires,
            # if sooner); clients must re-authenticate on the connection, or the broker closes it.
            "connections.max.reauth.ms": str(SASL_SESSION_MS),
        }
        for listener in ("sasl_plaintext", "sasl_ssl"):
            props.update(self._sasl_jaas_properties(listener))
        return props

    @staticmethod
    def _sasl_jaas_properties(listener: str) -> dict[str, str]:
        """The SASL logins of a SASL listener: the PLAIN users, SCRAM (users in the metadata
        log), OAUTHBEARER with Kafka's unsecured validator (the default without a callback
        handler: accepts alg "none" tokens, checks their expiry; for tests only)."""
        plain_user, plain_password = PLAIN_USER
        cs_user, cs_password = CONNECTION_STRING_USER
        props = {f"listener.name.{listener}.plain.sasl.jaas.config": (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'user_{plain_user}="{plain_password}" user_{cs_user}="{cs_password}";')}
        for mechanism in SCRAM_MECHANISMS:
            props[f"listener.name.{listener}.{mechanism.lower()}.sasl.jaas.config"] = (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;")
        props[f"listener.name.{listener}.oauthbearer.sasl.jaas.config"] = (
            "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
            'unsecuredLoginStringClaim_sub="broker";')
        return props

    def _oidc_properties(self, node: _Node, props: dict[str, str]) -> dict[str, str]:
        assert self.oidc is not None
        address = f"OIDC://{self.host}:{node.listener_ports['OIDC']}"
        handlers = "org.apache.kafka.common.security.oauthbearer"
        return {
            "listeners": f"{props['listeners']},{address}",
            "advertised.listeners": f"{props['advertised.listeners']},{address}",
            "listener.security.protocol.map": f"{props['listener.security.protocol.map']},OIDC:SASL_PLAINTEXT",
            "listener.name.oidc.sasl.enabled.mechanisms": "OAUTHBEARER",
            "listener.name.oidc.oauthbearer.sasl.jaas.config": f"{handlers}.OAuthBearerLoginModule required ;",
            "listener.name.oidc.oauthbearer.sasl.server.callback.handler.class":
                f"{handlers}.OAuthBearerValidatorCallbackHandler",
            "listener.name.oidc.sasl.oauthbearer.jwt.validator.class": f"{handlers}.BrokerJwtValidator",
            "listener.name.oidc.sasl.oauthbearer.jwks.endpoint.url": self.oidc.jwks_url,
            "listener.name.oidc.sasl.oauthbearer.expected.audience": self.oidc.audience,
            # Kafka 4.4 refuses to start a validator that does not check the issuer.
            "listener.name.oidc.sasl.oauthbearer.expected.issuer": self.oidc.issuer,
            "listener.name.oidc.connections.max.reauth.ms": str(self.oidc_session_ms),
        }

    def _write_config(self, node: _Node) -> Path:
        path = node.dir / "server.properties"
        path.write_text("".join(f"{k}={v}\n" for k, v in self._properties(node).items()))
        (node.dir / "log4j2.properties").write_text(_LOG4J2.format(level=self.log_level))
        return path

    def _java_cmd(self, node: _Node, main: str, *args: str, archive_to: Path | None = None) -> list[str]:
        """``archive_to``: the JVM writes the classes it loaded there as it exits (CDS)."""
        assert self._java is not None and self._classpath is not None  # both found by start()
        # The broker fetches the OIDC listener's JWKS only from URLs allowed here.
        allowed = [f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={self.oidc.jwks_url}"] if self.oidc else []
        if archive_to is not None:
            allowed.append(f"-XX:ArchiveClassesAtExit={archive_to}")
        elif self.profile == "test" and self._archive is not None and self._archive.exists():
            allowed.append(f"-XX:SharedArchiveFile={self._archive}")
        return [self._java, *_PROFILES[self.profile], *allowed, "-Djava.awt.headless=true",
                f"-Dlog4j2.configurationFile={node.dir / 'log4j2.properties'}",
                f"-Dkafka.logs.dir={node.dir / 'logs'}",
                "-cp", self._classpath, main, *args]

    def _format_all(self) -> None:
        """Format every node's storage; the JVM starts in parallel (each takes ~1-2 s)."""
        # The first test cluster on a machine (per Java runtime and classpath) has its first
        # node's storage tool write the class-data archive the later JVMs start from.
        archive = self._archive if self.profile == "test" else None
        archive_tmp = None
        if archive is not None and not archive.exists():
            archive_tmp = archive.with_name(f"{archive.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}")

        def fmt(node: _Node) -> None:
            config = self._write_config(node)
            # "=": about one random id in 64 starts with "-", which argparse4j would take for a flag.
            cmd = self._java_cmd(node, "kafka.tools.StorageTool", "format", f"--cluster-id={self.cluster_id}",
                                 "-c", str(config), "--ignore-formatted",
                                 archive_to=archive_tmp if node is self.nodes[0] else None)
            if self.security:   # SCRAM users live in the metadata log: created at format time
                user, password = SCRAM_USER
                for mechanism in SCRAM_MECHANISMS:
                    cmd += ["--add-scram", f"{mechanism}=[name={user},password={password}]"]
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=120,
                                  stdin=subprocess.DEVNULL)
            if done.returncode != 0:
                raise BrokerStartError(f"formatting KRaft storage for node {node.node_id} failed "
                                       f"(exit {done.returncode}):\n{(done.stdout + done.stderr)[-3000:]}")

        try:
            with ThreadPoolExecutor(max_workers=len(self.nodes)) as pool:
                for result in [pool.submit(fmt, n) for n in self.nodes]:
                    result.result()
            if archive is not None and archive_tmp is not None and archive_tmp.exists():
                os.replace(archive_tmp, archive)   # whole or not at all, for concurrent starts
        finally:
            if archive_tmp is not None:
                archive_tmp.unlink(missing_ok=True)

    def _spawn(self, node: _Node) -> None:
        config = self._write_config(node)
        log_dir = Path(os.environ["KCLIENT_BROKER_LOG_DIR"]) if self._keep else node.dir
        log_dir.mkdir(parents=True, exist_ok=True)
        node.log_path = log_dir / f"kafka-{os.getpid()}-{node.port}.log"
        with open(node.log_path, "ab") as logf:
            node.proc = subprocess.Popen(
                self._java_cmd(node, "kafka.Kafka", str(config)),
                stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=reaper.die_with_parent() if self.die_with_parent else None)
        node.record = reaper.register(node.proc.pid, self.kind, f"{self.host}:{node.port}",
                                      str(node.log_path))

    def _wait_ready(self, deadline: float, nodes: list[_Node] | None = None) -> None:
        """Ready: every node answers ApiVersions and Metadata lists every running node as a
        broker (a node stopped or killed by a test is not waited for)."""
        nodes = nodes or self.nodes
        want = {n.node_id for n in self.nodes if n.running}
        last_error: Exception | str | None = None
        pending = list(nodes)
        while pending:
            node = pending[0]
            proc = node.proc
            assert proc is not None  # called for nodes already launched
            if proc.poll() is not None:
                raise BrokerStartError(f"Kafka node {node.node_id} exited with code "
                                       f"{proc.returncode} during start; log {node.log_path}:\n"
                                       f"{log_tail(node.log_path)}")
            try:
                with _wire.RawConnection(self.host, node.port, timeout=2.0) as conn:
                    error, ranges = _wire.api_versions(conn)
                    if error == 0 and 3 in ranges:
                        brokers = set(_wire.metadata(conn, [])["brokers"])
                        if want <= brokers:
                            pending.pop(0)
                            continue
                        last_error = f"metadata lists brokers {sorted(brokers)}, want {sorted(want)}"
                    else:
                        last_error = f"ApiVersions error {error}"
            except (OSError, ValueError) as exc:
                last_error = exc
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BrokerStartError(f"Kafka node {node.node_id} was not ready on "
                                       f"{self.host}:{node.port} within {self.startup_timeout:.0f} s "
                                       f"(last: {last_error}); log {node.log_path}:\n{log_tail(node.log_path)}")
            try:  # wait for an exit or a short backoff, whichever comes first
                proc.wait(timeout=min(0.05, remaining))
            except subprocess.TimeoutExpired:
                pass

    def stop(self, timeout: float = 0.0) -> None:
        """Stop every node and remove its storage.

        Storage is thrown away, so by default the nodes are killed at once: a controlled
        shutdown (``timeout`` > 0: SIGTERM, SIGKILL after ``timeout`` s) of the last voters
        only waits for a quorum that is going away anyway.
        """
        atexit.unregister(self.stop)
        with ThreadPoolExecutor(max_workers=max(1, len(self.nodes))) as pool:
            list(pool.map(lambda n: self._terminate(n, timeout), self.nodes))
        self._stop_proxies()
        if self._root is not None and not self._keep:
            shutil.rmtree(self._root, ignore_errors=True)
        self._root = None

    def _kill_all(self) -> None:
        for node in self.nodes:
            self._terminate(node, 0)
        self._stop_proxies()

    def _stop_proxies(self) -> None:
        proxies, self.proxies = self.proxies, {}
        secure, self.secure_proxies = self.secure_proxies, {}
        for proxy in [*proxies.values(), *secure.values()]:
            proxy.stop()

    def _terminate(self, node: _Node, timeout: float) -> None:
        proc, node.proc = node.proc, None
        if proc is not None and proc.poll() is None:
            if timeout > 0:
                proc.terminate()
                try:
                    proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    log.warning("Kafka node %s (pid %s) ignored SIGTERM for %.1f s; killing it",
                                node.node_id, proc.pid, timeout)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        reaper.unregister(node.record)
        node.record = None

    # ------------------------------------------------------------------ node faults
    def _node(self, node_id: int) -> _Node:
        for node in self.nodes:
            if node.node_id == node_id:
                return node
        raise HarnessError(f"no Kafka node {node_id} (nodes: {[n.node_id for n in self.nodes]})")

    def kill_broker(self, node_id: int) -> None:
        """SIGKILL one node, as a crash: no controlled shutdown, no leadership hand-over."""
        node = self._node(node_id)
        if node.proc is not None and node.proc.poll() is None:
            node.proc.send_signal(signal.SIGKILL)
            node.proc.wait()
        self._terminate(node, 0)

    def stop_broker(self, node_id: int, timeout: float = 30.0) -> None:
        """Stop one node with a controlled shutdown (SIGTERM), as in a rolling restart."""
        self._terminate(self._node(node_id), timeout)

    def start_broker(self, node_id: int, timeout: float | None = None) -> None:
        """Start a stopped node again on its old ports and storage; returns once it serves."""
        node = self._node(node_id)
        if node.running:
            return
        self._spawn(node)
        self._wait_ready(time.monotonic() + (timeout or self.startup_timeout), [node])

    def leader_of(self, topic: str, partition: int) -> int:
        return self.metadata([topic])["topics"][topic]["partitions"][partition]["leader_id"]

    def metadata(self, topics: list[str] | None = None, timeout: float = 10.0) -> dict:
        """Metadata from the first node that answers (a multi-node cluster may have one down)."""
        last: Exception | None = None
        for node in self.nodes:
            if not node.running:
                continue
            try:
                with _wire.RawConnection(self.host, node.port, timeout) as conn:
                    return _wire.metadata(conn, topics)
            except OSError as exc:
                last = exc
        raise HarnessError(f"no Kafka node answered Metadata: {last}")

    # ------------------------------------------------------------------ topics
    def wait_for_topic(self, name: str, partitions: int, timeout: float = 30.0) -> dict:
        """Metadata shows every partition with a leader, and each leader serves it.

        Kafka's metadata can name a leader before that broker has created its replica: a
        Produce sent then fails with NOT_LEADER_OR_FOLLOWER and is retried, which lets a later
        batch overtake it (no idempotence). Asking every leader for the partition's end offset
        waits out that window, so tests may rely on the order in which they produce.
        """
        topic = super().wait_for_topic(name, partitions, timeout)

        def leaders_serve() -> bool:
            by_leader: dict[int, list[int]] = {}
            for index, part in self.metadata([name])["topics"][name]["partitions"].items():
                by_leader.setdefault(part["leader_id"], []).append(index)
            for leader, indexes in by_leader.items():
                node = self._node(leader)
                with _wire.RawConnection(self.host, node.port, timeout) as conn:
                    answers = _wire.list_offsets(conn, name, indexes)
                if any(error != 0 for error, _ in answers.values()):
                    return False
            return True

        _wire.wait_until(leaders_serve, timeout, f"the leaders of {name!r} to serve it")
        return topic

    def delete_records(self, topic: str, partition: int, before_offset: int, timeout: float = 30.0) -> None:
        """Advance the partition's log start offset to ``before_offset`` (DeleteRecords to the leader)."""
        node = self._node(self.leader_of(topic, partition))
        with _wire.RawConnection(self.host, node.port, timeout) as conn:
            error, low = _wire.delete_records(conn, topic, partition, before_offset, int(timeout * 1000))
        if error:
            raise HarnessError(f"DeleteRecords {topic}-{partition} before {before_offset}: error {error}")
        if low < before_offset:
            raise HarnessError(f"DeleteRecords {topic}-{partition}: log start is {low}, not {before_offset}")

    def create_topic(self, name: str, partitions: int = 1, replication_factor: int | None = None, *,
                     configs: dict[str, str] | None = None, timeout: float = 30.0) -> str:
        """CreateTopics; the replication factor defaults to min(3, brokers)."""
        rf = replication_factor if replication_factor is not None else min(3, self.brokers)
        self._create_topic_request(name, partitions, rf, configs, timeout)
        return name



    def set_client_metrics(self, name: str, metrics: list[str], interval_ms: int,
                           match: list[str] | None = None, timeout: float = 30.0) -> None:
        """A client-metrics subscription (KIP-714): metric name prefixes, push interval and
        client selectors (``match``, e.g. ``["client_id=app-.*"]``); empty ``metrics`` removes it."""
        configs: dict[str, str | None] = {"metrics": ",".join(metrics), "interval.ms": str(interval_ms),
                                          "match": ",".join(match or []) or None}
        if match is None:
            del configs["match"]
        with _wire.RawConnection(self.host, self.nodes[0].port, timeout) as conn:
            error, message = _wire.incremental_alter_configs(conn, _CLIENT_METRICS_RESOURCE, name, configs)
        if error:
            raise HarnessError(f"client-metrics subscription {name!r}: error {error} ({message})")

    def telemetry_pushes(self) -> list[tuple[str, bool, str, bytes]]:
        """What clients pushed so far (client_telemetry=True): (client instance id,
        terminating, content type, payload) per push, in arrival order."""
        if self._root is None or not self.client_telemetry:
            return []
        path = self._root / "telemetry.log"
        if not path.exists():
            return []
        out = []
        for line in path.read_text().splitlines():
            instance, terminating, content_type, data = line.split(" ")
            out.append((instance, terminating == "true", content_type, base64.b64decode(data)))
        return out

    def __repr__(self) -> str:
        state = f"nodes={self.brokers} bootstrap={self.bootstrap}" if self.running else "stopped"
        return f"<KafkaCluster {self.version} {state}>"
