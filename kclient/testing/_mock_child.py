"""Child-process side of MockCluster: hosts librdkafka's mock cluster and obeys the parent.

Run as ``python _mock_child.py LIBRDKAFKA_PATH N_BROKERS PARENT_PID``. Standard library
only, so it runs whatever sys.path the child gets. Protocol: one JSON object per line.
The child first writes ``{"ready": true, "bootstrap": ..., "ops": [...], "version": ...}``,
then answers each request ``{"id": n, "op": name, "args": [...]}`` with
``{"id": n, "ok": true, "result": ...}`` or ``{"id": n, "ok": false, "error": ..., "code": ...}``.
End of stdin (the parent closed the pipe or died) destroys the cluster and exits.

Why a child process: a crash or hang inside librdkafka must not take the test run down,
and the parent can always kill a child.
"""
from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
from typing import Any

_PRODUCER = 0  # rd_kafka_type_t RD_KAFKA_PRODUCER

c_int, c_int16, c_int32, c_int64, c_size_t = (ctypes.c_int, ctypes.c_int16, ctypes.c_int32,
                                              ctypes.c_int64, ctypes.c_size_t)
c_char_p, c_void_p = ctypes.c_char_p, ctypes.c_void_p

# name -> (restype, fixed argtypes after the cluster pointer, returns rd_kafka_resp_err_t).
# Signatures from librdkafka src/rdkafka_mock.h (2.16).
_SIGNATURES: dict[str, tuple[Any, list[Any], bool]] = {
    "topic_create": (c_int, [c_char_p, c_int, c_int], True),
    "topic_delete": (c_int, [c_char_p], True),
    "topic_set_error": (None, [c_char_p, c_int], False),
    "partition_set_leader": (c_int, [c_char_p, c_int32, c_int32], True),
    "partition_set_follower": (c_int, [c_char_p, c_int32, c_int32], True),
    "partition_set_follower_wmarks": (c_int, [c_char_p, c_int32, c_int64, c_int64], True),
    "partition_push_leader_response": (c_int, [c_char_p, c_int, c_int32, c_int32], True),
    "partition_delete_records": (c_int, [c_char_p, c_int32, c_int64], True),
    "push_request_errors_array": (None, [c_int16, c_size_t, ctypes.POINTER(c_int)], False),
    "clear_request_errors": (None, [c_int16], False),
    "broker_error_stack_cnt": (c_int, [c_int32, c_int16, ctypes.POINTER(c_size_t)], True),
    "broker_set_down": (c_int, [c_int32], True),
    "broker_set_up": (c_int, [c_int32], True),
    "broker_set_rtt": (c_int, [c_int32, c_int], True),
    "broker_set_rack": (c_int, [c_int32, c_char_p], True),
    "broker_decommission": (c_int, [c_int32], True),
    "broker_add": (c_int, [c_int32], True),
    "broker_remove_from_metadata": (c_int, [c_int32], True),
    "coordinator_set": (c_int, [c_char_p, c_char_p, c_int32], True),
    "set_apiversion": (c_int, [c_int16, c_int16, c_int16], True),
    "group_initial_rebalance_delay_ms": (None, [c_int32], False),
    "set_group_consumer_session_timeout_ms": (None, [c_int], False),
    "set_group_consumer_heartbeat_interval_ms": (None, [c_int], False),
    "start_request_tracking": (None, [], False),
    "stop_request_tracking": (None, [], False),
    "clear_requests": (None, [], False),
}
# Variadic in C: ctypes passes extra ints as C ints, which is what va_arg reads on the
# System V x86-64 and Linux aarch64 ABIs (errors and rtts are `int`-sized).
_VARIADIC = {
    "broker_push_request_error_rtts": [c_int32, c_int16, c_size_t],
    "partition_push_request_errors": [c_char_p, c_int32, c_int16, c_size_t],
}


class MockError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class Host:
    def __init__(self, lib_path: str, n_brokers: int) -> None:
        lib = self.lib = ctypes.CDLL(lib_path)
        lib.rd_kafka_version_str.restype = c_char_p
        lib.rd_kafka_err2name.restype = c_char_p
        lib.rd_kafka_err2name.argtypes = [c_int]
        lib.rd_kafka_conf_new.restype = c_void_p
        lib.rd_kafka_conf_set.argtypes = [c_void_p, c_char_p, c_char_p, c_char_p, c_size_t]
        lib.rd_kafka_new.restype = c_void_p
        lib.rd_kafka_new.argtypes = [c_int, c_void_p, c_char_p, c_size_t]
        lib.rd_kafka_destroy.argtypes = [c_void_p]
        lib.rd_kafka_mock_cluster_new.restype = c_void_p
        lib.rd_kafka_mock_cluster_new.argtypes = [c_void_p, c_int]
        lib.rd_kafka_mock_cluster_destroy.argtypes = [c_void_p]
        lib.rd_kafka_mock_cluster_bootstraps.restype = c_char_p
        lib.rd_kafka_mock_cluster_bootstraps.argtypes = [c_void_p]

        errstr = ctypes.create_string_buffer(512)
        conf = lib.rd_kafka_conf_new()
        # This handle only owns the mock cluster; it never connects anywhere.
        for key, value in ((b"client.id", b"kclient-mock-cluster"), (b"log_level", b"4")):
            lib.rd_kafka_conf_set(conf, key, value, errstr, len(errstr))
        self.rk = lib.rd_kafka_new(_PRODUCER, conf, errstr, len(errstr))
        if not self.rk:
            raise RuntimeError(f"rd_kafka_new failed: {errstr.value.decode()}")
        self.mc = lib.rd_kafka_mock_cluster_new(self.rk, n_brokers)
        if not self.mc:
            raise RuntimeError("rd_kafka_mock_cluster_new failed")
        self.bootstrap = lib.rd_kafka_mock_cluster_bootstraps(self.mc).decode()

        self.fns = {}
        for name, (restype, argtypes, returns_err) in _SIGNATURES.items():
            fn = getattr(lib, "rd_kafka_mock_" + name, None)
            if fn is None:
                continue
            fn.restype = restype
            fn.argtypes = [c_void_p] + argtypes
            self.fns[name] = (fn, returns_err)
        self.variadic = {}
        for name, fixed in _VARIADIC.items():
            fn = getattr(lib, "rd_kafka_mock_" + name, None)
            if fn is not None:
                fn.restype = c_int  # argtypes stay unset so extra arguments are accepted
                self.variadic[name] = (fn, fixed)
        tracking: list[Any] = [getattr(lib, "rd_kafka_mock_" + n, None) for n in
                    ("get_requests", "request_id", "request_api_key", "request_timestamp",
                     "request_destroy_array")]
        if all(tracking):
            get, rid, rkey, rts, destroy = tracking
            get.restype = ctypes.POINTER(c_void_p)
            get.argtypes = [c_void_p, ctypes.POINTER(c_size_t)]
            rid.restype, rid.argtypes = c_int32, [c_void_p]
            rkey.restype, rkey.argtypes = c_int16, [c_void_p]
            rts.restype, rts.argtypes = c_int64, [c_void_p]
            destroy.restype, destroy.argtypes = None, [ctypes.POINTER(c_void_p), c_size_t]
            self.tracking: tuple[Any, ...] | None = (get, rid, rkey, rts, destroy)
        else:
            self.tracking = None

    def ops(self) -> list[str]:
        names = set(self.fns) | set(self.variadic)
        if "push_request_errors_array" in names:
            names.discard("push_request_errors_array")
            names.add("push_request_errors")
        if self.tracking:
            names.add("get_requests")
        if "broker_error_stack_cnt" in names:
            names.discard("broker_error_stack_cnt")
            names.add("broker_error_stack_count")
        return sorted(names | {"bootstrap", "version", "ping"})

    def _check(self, err: int) -> None:
        if err:
            raise MockError(err, self.lib.rd_kafka_err2name(err).decode())

    @staticmethod
    def _arg(value):
        return value.encode() if isinstance(value, str) else value

    def call(self, op: str, args: list):
        if op == "ping":
            return "pong"
        if op == "bootstrap":
            return self.bootstrap
        if op == "version":
            return self.lib.rd_kafka_version_str().decode()
        if op == "push_request_errors":
            api_key, errors = args
            arr = (c_int * len(errors))(*errors)
            self.fns["push_request_errors_array"][0](self.mc, api_key, len(errors), arr)
            return None
        if op == "broker_error_stack_count":
            broker_id, api_key = args
            cnt = c_size_t(0)
            self._check(self.fns["broker_error_stack_cnt"][0](self.mc, broker_id, api_key, ctypes.byref(cnt)))
            return cnt.value
        if op == "broker_push_request_error_rtts":
            broker_id, api_key, pairs = args
            fn, _ = self.variadic[op]
            flat = [c_int(v) for pair in pairs for v in pair]
            self._check(fn(c_void_p(self.mc), c_int32(broker_id), c_int16(api_key), c_size_t(len(pairs)), *flat))
            return None
        if op == "partition_push_request_errors":
            topic, partition, api_key, errors = args
            fn, _ = self.variadic[op]
            self._check(fn(c_void_p(self.mc), c_char_p(topic.encode()), c_int32(partition), c_int16(api_key),
                           c_size_t(len(errors)), *[c_int(e) for e in errors]))
            return None
        if op == "get_requests":
            return self._requests()
        entry = self.fns.get(op)
        if entry is None:
            raise MockError(-1, f"this librdkafka does not export rd_kafka_mock_{op}")
        fn, returns_err = entry
        result = fn(self.mc, *[self._arg(a) for a in args])
        if returns_err:
            self._check(result)
        return None

    def _requests(self) -> list:
        if self.tracking is None:
            raise RuntimeError("this librdkafka has no mock request tracking (rd_kafka_mock_get_requests)")
        get, rid, rkey, rts, destroy = self.tracking
        cnt = c_size_t(0)
        arr = get(self.mc, ctypes.byref(cnt))
        if not arr:
            return []
        try:
            return [[rid(arr[i]), rkey(arr[i]), rts(arr[i])] for i in range(cnt.value)]
        finally:
            destroy(arr, cnt.value)

    def close(self) -> None:
        self.lib.rd_kafka_mock_cluster_destroy(self.mc)
        self.lib.rd_kafka_destroy(self.rk)


def _die_with_parent(parent_pid: int) -> None:
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None)
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


def main() -> int:
    lib_path, n_brokers, parent_pid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    _die_with_parent(parent_pid)
    # Ctrl-C in a terminal is for the parent, which stops us in order.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Keep the command channel clean: anything else writing to fd 1 lands on stderr (the log).
    channel = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)

    def send(obj) -> None:
        channel.write(json.dumps(obj) + "\n")
        channel.flush()

    try:
        host = Host(lib_path, n_brokers)
    except Exception as exc:  # report, do not hang the parent until its deadline
        send({"ready": False, "error": f"{type(exc).__name__}: {exc}"})
        return 1
    send({"ready": True, "bootstrap": host.bootstrap, "ops": host.ops(),
          "version": host.lib.rd_kafka_version_str().decode(), "pid": os.getpid()})
    for line in sys.stdin:
        try:
            req = json.loads(line)
        except ValueError:
            continue
        rid, op = req.get("id"), req.get("op")
        if op == "shutdown":
            break
        try:
            send({"id": rid, "ok": True, "result": host.call(op, req.get("args") or [])})
        except MockError as exc:
            send({"id": rid, "ok": False, "code": exc.code, "error": str(exc)})
        except Exception as exc:
            send({"id": rid, "ok": False, "code": None, "error": f"{type(exc).__name__}: {exc}"})
    host.close()
    send({"id": None, "ok": True, "result": "closed"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
