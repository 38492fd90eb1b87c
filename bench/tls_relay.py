"""A request-timing relay: the liveness benchmark's judge on Apache Kafka's secured listeners.

``python -m bench.tls_relay --listen HOST:PORT --target HOST:PORT --log FILE [--cert PEM --ca PEM
[--require-client-cert]]`` runs in its own process (so neither the client's GIL nor the
benchmark's touches it). It accepts client connections, terminates their TLS when ``--cert`` is
given (the broker's test certificate; ``--require-client-cert``: mTLS, the client's certificate
verified against ``--ca``), and forwards the bytes both ways, unchanged, to the broker listener
at ``--target`` (PLAINTEXT or SASL_PLAINTEXT: a SASL exchange passes through to the broker). For
every request frame a client sends it appends one line to ``--log``::

    <time.monotonic() when the read that completed the frame's header returned> <api key>
    <connection number> <member epoch, ConsumerGroupHeartbeat only, else ->

``time.monotonic()`` is CLOCK_MONOTONIC, the same clock in every process on the machine, so
the times compare directly with the member's own. It prints ``listening`` once its socket is
bound.

What it sees: when each request reached it, decrypted, which is when the client's bytes left
the client's socket plus loopback and the relay's own latency: the event loop's wake-up and
the TLS decryption, tens of microseconds on an idle machine, more when the machine is loaded
(the relay is a Python process like the others). What it cannot see: time a request spent in
the client before its socket write, and anything after it (the broker's queueing and answer).
"""
from __future__ import annotations

import argparse
import asyncio
import os
import select
import socket
import ssl
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, NamedTuple

from kcore.errors import ProtocolError
from kcore.wire import decode_uvarint

_CONSUMER_GROUP_HEARTBEAT = 68
_HEADER = struct.Struct(">ihhih")   # size, api key, api version, correlation id, client id length


def member_epoch(frame: bytes, client_id_len: int) -> int | None:
    """The member epoch of a ConsumerGroupHeartbeat request frame (header v2, flexible body:
    group id, member id, then the epoch), or None if the frame is too short to hold it."""
    try:
        pos = _HEADER.size + max(client_id_len, 0)
        tags, pos = decode_uvarint(frame, pos)
        for _ in range(tags):
            _, pos = decode_uvarint(frame, pos)
            size, pos = decode_uvarint(frame, pos)
            pos += size
        for _ in range(2):  # group id, member id: compact strings (length + 1)
            n, pos = decode_uvarint(frame, pos)
            pos += max(n - 1, 0)
        return int(struct.unpack_from(">i", frame, pos)[0])
    except (IndexError, ValueError, ProtocolError, struct.error):   # a truncated frame
        return None


class RequestLog:
    """Splits one connection's client-to-broker byte stream into request frames and logs each
    as soon as its header (for a ConsumerGroupHeartbeat: up to its member epoch) is in."""

    def __init__(self, out: IO[str], conn: int) -> None:
        self.out, self.conn = out, conn
        self.buf = bytearray()
        self.skip = 0   # bytes of a logged frame still to come, passed through unkept

    def data(self, data: bytes, at: float) -> None:
        if self.skip:
            n = min(self.skip, len(data))
            self.skip -= n
            data = data[n:]
        self.buf += data
        while len(self.buf) >= _HEADER.size:
            size, api_key, _version, _corr, client_id_len = _HEADER.unpack_from(self.buf)
            whole = 4 + size
            cgh = api_key == _CONSUMER_GROUP_HEARTBEAT
            need = min(whole, 512) if cgh else _HEADER.size
            if len(self.buf) < need:
                return
            epoch = member_epoch(bytes(self.buf[:need]), client_id_len) if cgh else None
            self.out.write(f"{at:.6f} {api_key} {self.conn} {'-' if epoch is None else epoch}\n")
            if len(self.buf) >= whole:
                del self.buf[:whole]
            else:
                self.skip = whole - len(self.buf)
                self.buf.clear()


class _Upstream(asyncio.Protocol):
    def __init__(self, client: asyncio.Transport) -> None:
        self.client = client

    def data_received(self, data: bytes) -> None:
        self.client.write(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.client.close()


class _Client(asyncio.Protocol):
    conns = 0

    def __init__(self, target: tuple[str, int], out: IO[str]) -> None:
        self.target, self.out = target, out
        self.pending: list[bytes] = []
        self.upstream: asyncio.Transport | None = None
        self.transport: asyncio.Transport | None = None
        self.closed = False
        _Client.conns += 1
        self.log = RequestLog(out, _Client.conns)

    def connection_made(self, transport) -> None:  # type: ignore[no-untyped-def]
        self.transport = transport
        transport.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        assert self.transport is not None
        loop = asyncio.get_running_loop()
        try:
            upstream, _ = await loop.create_connection(lambda: _Upstream(self.transport), *self.target)  # type: ignore[arg-type]
        except OSError:
            self.transport.close()
            return
        upstream.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.closed:
            upstream.close()
            return
        self.upstream = upstream  # type: ignore[assignment]
        for chunk in self.pending:
            upstream.write(chunk)  # type: ignore[attr-defined]
        self.pending.clear()

    def data_received(self, data: bytes) -> None:
        at = time.monotonic()
        if self.upstream is not None:
            self.upstream.write(data)
        else:
            self.pending.append(data)
        self.log.data(data, at)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.upstream is not None:
            self.upstream.close()


def _tls_context(cert: str, ca: str | None, require_client_cert: bool) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert)   # the broker's test key and certificate, in one PEM file
    if require_client_cert:
        if ca is None:
            raise SystemExit("--require-client-cert needs --ca")
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_verify_locations(ca)
    return ctx


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


async def serve(args: argparse.Namespace) -> None:
    out = open(args.log, "a", buffering=1)   # a line per request, written as it comes
    ctx = _tls_context(args.cert, args.ca, args.require_client_cert) if args.cert else None
    target = _address(args.target)
    host, port = _address(args.listen)
    server = await asyncio.get_running_loop().create_server(
        lambda: _Client(target, out), host, port, ssl=ctx, reuse_address=True)
    print("listening", flush=True)
    async with server:
        await server.serve_forever()


class Request(NamedTuple):
    at: float          # time.monotonic() when it reached the relay
    api_key: int
    conn: int          # the relay's connection number (a new connection, a new number)
    epoch: int | None  # ConsumerGroupHeartbeat's member epoch


class Relay:
    """The benchmark's side: runs ``python -m bench.tls_relay`` as a child process (it dies
    with its parent) and reads the requests it logged."""

    def __init__(self, listen: tuple[str, int], target: tuple[str, int], log_path: Path, *,
                 cert: Path | None = None, ca: Path | None = None, require_client_cert: bool = False) -> None:
        self.listen, self.target, self.log_path = listen, target, Path(log_path)
        self.cmd = [sys.executable, "-m", "bench.tls_relay", "--listen", f"{listen[0]}:{listen[1]}",
                    "--target", f"{target[0]}:{target[1]}", "--log", str(self.log_path)]
        if cert is not None:
            self.cmd += ["--cert", str(cert)]
        if ca is not None:
            self.cmd += ["--ca", str(ca)]
        if require_client_cert:
            self.cmd.append("--require-client-cert")
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 30.0) -> "Relay":
        from kclient.testing import reaper

        repo = str(Path(__file__).resolve().parent.parent)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([repo] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        self.proc = subprocess.Popen(self.cmd, cwd=repo, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, preexec_fn=reaper.die_with_parent())
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self.proc.stdout], [], [], max(left, 0))
            line = self.proc.stdout.readline() if ready else b""
            if line.strip() == b"listening":
                return self
            if self.proc.poll() is not None or left <= 0:
                err = self.proc.stderr.read().decode(errors="replace")[-2000:] if self.proc.poll() is not None else ""
                self.stop()
                raise RuntimeError(f"the relay on port {self.listen[1]} did not start: {err or 'timed out'}")

    def requests(self, since: float = 0.0, until: float = float("inf")) -> list[Request]:
        out = []
        with open(self.log_path) as f:
            for line in f:
                parts = line.split()
                if len(parts) != 4:
                    continue  # a line being written
                at = float(parts[0])
                if since <= at <= until:
                    out.append(Request(at, int(parts[1]), int(parts[2]), None if parts[3] == "-" else int(parts[3])))
        return out

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None:
            for pipe in (self.proc.stdout, self.proc.stderr):
                if pipe is not None:
                    pipe.close()

    def __enter__(self) -> "Relay":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.tls_relay", description=__doc__.split("\n\n")[0])
    p.add_argument("--listen", required=True, metavar="HOST:PORT")
    p.add_argument("--target", required=True, metavar="HOST:PORT")
    p.add_argument("--log", required=True, help="request log (appended)")
    p.add_argument("--cert", help="terminate TLS with this key and certificate (PEM)")
    p.add_argument("--ca", help="CA that signs client certificates (with --require-client-cert)")
    p.add_argument("--require-client-cert", action="store_true", help="mTLS")
    args = p.parse_args(argv)
    try:
        asyncio.run(serve(args))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
