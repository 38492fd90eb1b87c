"""Never leave a test broker behind.

Two independent mechanisms:

1. ``die_with_parent``: a ``preexec_fn`` (or a call at child start) that asks Linux to SIGKILL
   the child when the process that started it dies, even by SIGKILL (``PR_SET_PDEATHSIG``).
   Linux ties this to the *thread* that forked the child: start brokers from a thread that
   lives as long as the broker (the main thread, as pytest fixtures and the CLI do).
2. A pid-file registry: every started broker writes ``<pid>.json`` (its pid and start time,
   the owner's pid and start time) into a per-user directory. ``reap()``, called whenever a
   harness starts a broker, kills every recorded broker whose owner is gone. This covers
   systems without PDEATHSIG and brokers whose owner was killed before it could clean up.

Start times (from /proc) guard against pid reuse: a pid is only "the same process" if its
start time matches what was recorded.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import json
import logging
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

log = logging.getLogger(__name__)

__all__ = ["state_dir", "log_dir", "process_start_time", "pid_alive", "die_with_parent",
           "set_parent_death_signal", "register", "unregister", "reap"]

_PR_SET_PDEATHSIG = 1


def state_dir() -> Path:
    """Per-user directory for broker records and logs (created 0700 on first use)."""
    base = Path(os.environ.get("KCLIENT_HARNESS_DIR") or
                Path(tempfile.gettempdir()) / f"kclient-harness-{os.getuid()}")
    base.mkdir(mode=0o700, parents=True, exist_ok=True)
    if base.stat().st_uid != os.getuid():
        # Another user owns it: its records could make us kill processes we do not own.
        raise PermissionError(f"{base} is owned by another user; set KCLIENT_HARNESS_DIR")
    return base


def _records_dir() -> Path:
    d = state_dir() / "brokers"
    d.mkdir(mode=0o700, exist_ok=True)
    return d


def log_dir() -> Path:
    d = Path(os.environ.get("KCLIENT_BROKER_LOG_DIR") or state_dir() / "logs")
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    return d


def _proc_stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode(errors="replace")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # comm (field 2) may contain spaces and parentheses: split after the last ')'.
    return raw[raw.rfind(")") + 2:].split()


def process_start_time(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot (Linux), or None if unknown/gone."""
    fields = _proc_stat(pid)
    if fields is None or len(fields) < 20:
        return None
    return int(fields[19])  # field 22 of /proc/pid/stat; fields[0] is field 3


def pid_alive(pid: int, start_time: int | None = None) -> bool:
    """True if ``pid`` runs (zombies count as gone) and, if given, started at ``start_time``."""
    fields = _proc_stat(pid)
    if fields is None:
        if not sys.platform.startswith("linux"):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return False
            except PermissionError:
                return True
            return start_time is None
        return False
    if fields[0] in ("Z", "X"):
        return False
    return start_time is None or int(fields[19]) == start_time


_prctl = None


def _load_prctl():
    global _prctl
    if _prctl is None and sys.platform.startswith("linux"):
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.prctl
        fn.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
        fn.restype = ctypes.c_int
        _prctl = fn
    return _prctl


def set_parent_death_signal(sig: int = signal.SIGKILL) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent thread dies (Linux)."""
    prctl = _load_prctl()
    if prctl is None:
        return False
    return prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0


def die_with_parent(parent_pid: int | None = None):
    """A ``preexec_fn`` for subprocess.Popen: the child is SIGKILLed when the parent dies."""
    parent_pid = os.getpid() if parent_pid is None else parent_pid
    _load_prctl()  # dlopen in the parent, not between fork and exec

    def _preexec() -> None:
        set_parent_death_signal(signal.SIGKILL)
        # The parent may have died between fork() and prctl(): then nobody will signal us.
        if os.getppid() != parent_pid:
            os._exit(1)

    return _preexec


def register(pid: int, kind: str, bootstrap: str | None = None, log_path: str | None = None) -> Path:
    """Record a started broker owned by this process; returns the record's path."""
    record = {
        "pid": pid,
        "start_time": process_start_time(pid),
        "owner_pid": os.getpid(),
        "owner_start_time": process_start_time(os.getpid()),
        "kind": kind,
        "bootstrap": bootstrap,
        "log_path": log_path,
        "created": time.time(),
    }
    path = _records_dir() / f"{pid}.json"
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(record))
    os.replace(tmp, path)  # a reaper never sees half a record
    return path


def unregister(path: Path | None) -> None:
    if path is not None:
        try:
            path.unlink()
        except FileNotFoundError:
            pass


def _kill(pid: int, start_time: int | None) -> bool:
    if not pid_alive(pid, start_time):
        return False
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    return True


def _remove_default_log(log_path: str | None) -> None:
    # Only logs the harness placed itself; a path the user chose is theirs to keep.
    if log_path and not os.environ.get("KCLIENT_BROKER_LOG_DIR"):
        path = Path(log_path)
        if path.parent == state_dir() / "logs":
            try:
                path.unlink()
            except OSError:
                pass


def reap() -> list[int]:
    """Kill recorded brokers whose owner process is gone; return the pids killed."""
    killed: list[int] = []
    try:
        records = list(_records_dir().glob("*.json"))
    except OSError as exc:  # e.g. the directory belongs to someone else
        log.warning("cannot scan broker records: %s", exc)
        return killed
    for path in records:
        try:
            rec = json.loads(path.read_text())
            pid, start = int(rec["pid"]), rec.get("start_time")
            owner, owner_start = int(rec["owner_pid"]), rec.get("owner_start_time")
        except FileNotFoundError:
            continue  # its owner removed it while we looked
        except (OSError, ValueError, KeyError, TypeError):
            log.warning("removing unreadable broker record %s", path)
            unregister(path)
            continue
        if pid_alive(owner, owner_start):
            continue
        if _kill(pid, start):
            log.warning("killed orphaned %s broker pid %s (owner pid %s is gone)", rec.get("kind"), pid, owner)
            killed.append(pid)
        unregister(path)
        _remove_default_log(rec.get("log_path"))
    return killed
