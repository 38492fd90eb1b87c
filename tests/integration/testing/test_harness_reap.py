"""No broker outlives its owner: parent-death signal, pid-file reaper, clean stop on
Ctrl-C in pytest, and the ``kclient broker`` command's signal handling."""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from kclient.testing import _wire, reaper
import repo_paths

REPO = repo_paths.REPO

# Starts a Tansu broker and a mock cluster, prints their pids and start times, then waits
# to be killed. argv[1] == "1": brokers die with this process (the default).
OWNER = r"""
import json, sys
from kclient.testing import MockCluster, TansuBroker, reaper
die = sys.argv[1] == "1"
t = TansuBroker(die_with_parent=die).start()
m = MockCluster(1, die_with_parent=die).start()
print(json.dumps({"tansu": [t.pid, reaper.process_start_time(t.pid)],
                  "mock": [m.pid, reaper.process_start_time(m.pid)]}), flush=True)
sys.stdin.read()
"""

# A pytest run that uses the session fixtures and blocks inside a test until interrupted.
INNER_TEST = r"""
import json, threading
from kclient.testing import reaper

def test_hold(tansu, mock_cluster):
    print("PIDS " + json.dumps({"tansu": [tansu.pid, reaper.process_start_time(tansu.pid)],
                                "mock": [mock_cluster.pid, reaper.process_start_time(mock_cluster.pid)]}),
          flush=True)
    threading.Event().wait()
"""
INNER_RUNNER = r"""
import faulthandler, importlib.util, signal, sys
import pytest
faulthandler.register(signal.SIGUSR1, all_threads=True)   # the test asks for stacks if we hang
# Ctrl-C as at a terminal: a shell without job control starts background commands with SIGINT
# ignored, children inherit that, and Python then leaves it ignored (the suite run as
# `cmd &` from a script hung here until this line).
signal.signal(signal.SIGINT, signal.default_int_handler)
spec = importlib.util.spec_from_file_location("kclient_suite_conftest", sys.argv[1])
fixtures = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = fixtures
spec.loader.exec_module(fixtures)
sys.exit(pytest.main([sys.argv[2], "-q", "-s", "-p", "no:cacheprovider"], plugins=[fixtures]))
"""


def child_env() -> dict:
    env = dict(os.environ)
    env.pop("KCLIENT_TEST_BOOTSTRAP", None)  # these tests need brokers of their own
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


def spawn(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, *args], cwd=REPO, env=child_env(), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def read_line(proc: subprocess.Popen, timeout: float, prefix: bytes = b"") -> bytes:
    """The next stdout line starting with ``prefix``, within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    buf = b""
    fd = proc.stdout.fileno()
    while True:
        while b"\n" in buf:
            line, _, buf = buf.partition(b"\n")
            if line.startswith(prefix):
                return line[len(prefix):]
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
            proc.kill()
            raise AssertionError(f"no line within {timeout} s; stderr: {proc.stderr.read().decode()[-3000:]}")
        chunk = os.read(fd, 65536)
        if not chunk:
            raise AssertionError(f"child exited ({proc.wait()}); output {buf!r}; "
                                 f"stderr: {proc.stderr.read().decode()[-3000:]}")
        buf += chunk


def record_path(pid: int) -> Path:
    return reaper.state_dir() / "brokers" / f"{pid}.json"


def wait_gone(pids: dict, timeout: float = 15.0) -> None:
    _wire.wait_until(lambda: not any(reaper.pid_alive(pid, start) for pid, start in pids.values()),
                     timeout, f"broker processes {pids} to exit")


def finish(proc: subprocess.Popen) -> None:
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        if stream:
            stream.close()
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def test_brokers_die_with_sigkilled_owner():
    owner = spawn(["-c", OWNER, "1"])
    try:
        pids = json.loads(read_line(owner, 60))
        assert all(reaper.pid_alive(pid, start) for pid, start in pids.values())
        owner.send_signal(signal.SIGKILL)
        owner.wait(10)
        wait_gone(pids)
    finally:
        finish(owner)
    # Their records are left behind (nobody ran stop()); the next reap() clears them.
    reaper.reap()
    assert not any(record_path(pid).exists() for pid, _ in pids.values())


def test_reaper_kills_brokers_of_a_dead_owner():
    owner = spawn(["-c", OWNER, "0"])  # no parent-death signal: only the reaper can help
    try:
        pids = json.loads(read_line(owner, 60))
        owner.send_signal(signal.SIGKILL)
        owner.wait(10)
    finally:
        finish(owner)
    tansu_pid, tansu_start = pids["tansu"]
    # Tansu has no other way to notice its owner died (the mock child exits on end of input).
    assert reaper.pid_alive(tansu_pid, tansu_start) or not record_path(tansu_pid).exists()
    reaper.reap()  # what every harness start does
    wait_gone(pids)
    assert not any(record_path(pid).exists() for pid, _ in pids.values())


def test_reaper_spares_brokers_of_a_live_owner(tansu):
    if tansu.pid is None:
        pytest.skip("KCLIENT_TEST_BOOTSTRAP: no local broker to check")
    reaper.reap()
    assert tansu.running
    assert record_path(tansu.pid).exists()


def test_sigint_to_pytest_stops_session_brokers_cleanly(tmp_path):
    test_file = tmp_path / "test_inner_hold.py"
    test_file.write_text(INNER_TEST)
    inner = spawn(["-c", INNER_RUNNER, str(REPO / "tests" / "conftest.py"), str(test_file)])
    try:
        pids = json.loads(read_line(inner, 90, prefix=b"PIDS "))
        inner.send_signal(signal.SIGINT)
        try:
            # communicate() drains stdout and stderr while waiting: a child blocked on a full
            # pipe would look like a hang.
            inner.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            inner.send_signal(signal.SIGUSR1)      # every thread's stack, to stderr
            try:
                _, err = inner.communicate(timeout=5)
            except subprocess.TimeoutExpired:
                inner.kill()
                _, err = inner.communicate()
            raise AssertionError("pytest did not exit within 60 s of SIGINT; its stderr, with "
                                 f"every thread's stack: {err.decode()[-6000:]}") from None
        code = inner.returncode
        assert code == pytest.ExitCode.INTERRUPTED
    finally:
        finish(inner)
    wait_gone(pids)
    # Records are removed only by stop(): the fixtures' teardown ran, not just the kernel.
    assert not any(record_path(pid).exists() for pid, _ in pids.values())


@pytest.mark.parametrize("args, sig", [(["--topic", "cli-topic:2"], signal.SIGTERM),
                                       (["--kafka", "--topic", "cli-topic:2"], signal.SIGINT),
                                       (["--mock", "2"], signal.SIGINT)],
                         ids=["tansu-sigterm", "kafka-sigint", "mock-sigint"])
def test_broker_command_runs_until_signalled(args, sig):
    cli = spawn(["-m", "kclient", "broker", *args])
    try:
        bootstrap = read_line(cli, 120).decode().strip()
        children = {p.pid: reaper.process_start_time(p.pid)
                    for p in psutil.Process(cli.pid).children(recursive=True)}
        assert children, "the command started no broker process"
        for server in bootstrap.split(","):
            with _wire.RawConnection.to(server) as conn:
                assert _wire.api_versions(conn)[0] == 0
        if "--topic" in args:
            with _wire.RawConnection.to(bootstrap) as conn:
                topic = _wire.metadata(conn, ["cli-topic"])["topics"]["cli-topic"]
            assert topic["error_code"] == 0 and len(topic["partitions"]) == 2
        else:
            assert len(bootstrap.split(",")) == 2
        cli.send_signal(sig)
        assert cli.wait(30) == 0
        assert b"stopped" in cli.stderr.read()
    finally:
        finish(cli)
    wait_gone({str(pid): (pid, start) for pid, start in children.items()})


def test_cli_without_command_prints_help():
    cli = spawn(["-m", "kclient"])
    _, err = cli.communicate(timeout=30)
    assert cli.returncode == 2
    assert b"broker" in err
