"""End-to-end consumer benchmark: every client reads the same topic from the same broker.

``python -m bench`` (or ``kclient bench`` from a source checkout) starts Apache Kafka (one
KRaft node, the reference broker; ``--broker tansu|mock|HOST:PORT`` for the others), and for
each configuration (partitions x record size x codec) creates one topic, fills it once with
confluent-kafka's producer, then runs every driver (bench/drivers/) in its own child process
against it:

- assign mode (throughput): all partitions from offset 0 until exactly N records were seen;
  wall records/s and MB/s of values, client CPU per record (the OS's user+system time of the
  child process), peak RSS, broker CPU over the same window;
- group mode (latency): a fresh group id, subscribe, time until the first record.

A driver whose prerequisites are missing (the Java peer without Java, javac or Maven) is
skipped with the reason in the table; the other drivers still run.

Each round runs the drivers in an order of its own (``round_order``: no client always runs
first or last, nor always right after the same client) and the report gives the median of
the valid runs. A run that did not consume exactly N
records is invalid: it is listed with its error and gives no throughput.

Results: Markdown table, JSON and PNG chart in bench/results/ (and ``--out DIR``).
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from bench.drivers import DRIVERS
from bench.drivers._common import MIN_RECORD_SIZE, Job, write_sequenced

REPO = Path(__file__).resolve().parent.parent
RESULTS_DIR = Path(__file__).resolve().parent / "results"

DEFAULT_RECORDS = 1_000_000
DEFAULT_PARTITIONS = [8]
DEFAULT_SIZES = [100]
DEFAULT_CODECS = ["none"]
MATRIX_PARTITIONS = [1, 8, 64]
MATRIX_SIZES = [10, 100, 1000, 10_000]
MATRIX_CODECS = ["none", "lz4", "zstd"]
# Cap on the bytes of values per configuration (the broker keeps everything in memory and
# the slowest client must finish in reasonable time): N = min(--records, cap / size).
DEFAULT_MAX_BYTES = 200 * 1024 * 1024


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


@dataclasses.dataclass(frozen=True)
class Config:
    partitions: int
    record_size: int
    codec: str
    records: int

    @property
    def name(self) -> str:
        return f"{self.records:,} x {self.record_size} B, {self.partitions} partitions, {self.codec}"

    @property
    def key(self) -> str:
        return f"p{self.partitions}-s{self.record_size}-{self.codec}-n{self.records}"


# ---------------------------------------------------------------------------- data
def produce(bootstrap: str, topic: str, cfg: Config) -> dict:
    """Write the configuration's N records with confluent-kafka (idempotent, so each
    partition holds its records in sequence order at offsets 0, 1, 2, ...)."""
    from confluent_kafka import Producer

    errors: list = []

    def on_error(err, msg):  # delivery.report.only.error: called for failures only
        if err is not None:
            errors.append(err)

    producer = Producer({
        "bootstrap.servers": bootstrap, "enable.idempotence": True,
        "compression.type": cfg.codec, "linger.ms": 20, "batch.size": 1_000_000,
        "queue.buffering.max.messages": 1_000_000, "queue.buffering.max.kbytes": 1_048_576,
        "message.max.bytes": 10_000_000, "delivery.report.only.error": True, "on_delivery": on_error,
    })
    started = time.perf_counter()
    write_sequenced(producer, topic, cfg.records, cfg.partitions, cfg.record_size, errors)
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "records_per_s": cfg.records / seconds}


# ---------------------------------------------------------------------------- child runs
# --baseline DIR: each kclient driver also runs as "<driver>@baseline" from another checkout
# (its own bench drivers and its own compiled kclient), in the same rounds as everything else,
# so a change's before/after shares the broker, the data and the machine's speed of the moment.
BASELINE_SUFFIX = "@baseline"
BASELINE: dict[str, object] = {"repo": None, "tag": ""}


def baseline_drivers(drivers: list[str], known: str = "") -> list[str]:
    """``drivers`` with ``<d>@baseline`` right after each kclient driver that the baseline
    also has (``known``: the text of its bench/drivers/__init__.py; empty: assume all)."""
    out: list[str] = []
    for d in drivers:
        out.append(d)
        if d.startswith("kclient") and (not known or f'"{d}"' in known):
            out.append(d + BASELINE_SUFFIX)
    return out


def bare_driver(name: str) -> str:
    return name[:-len(BASELINE_SUFFIX)] if name.endswith(BASELINE_SUFFIX) else name


def round_order(drivers: list[str], rep: int) -> list[str]:
    """The order of round ``rep``: led by the ``rep``-th driver (each leads a round in turn),
    then the others in their listed order in even rounds and backwards in odd ones. Why: a
    client's run is affected by what the broker did just before it (its JIT, its heap, the
    page cache after a client with larger fetches); in a rotated order alone every driver
    always follows the same neighbour, whose after-effect is then charged to it in every
    round. Here each follows both of its neighbours in turn (and a --baseline twin stays
    beside its driver)."""
    n = len(drivers)
    step = -1 if rep % 2 else 1
    return [drivers[(rep + step * k) % n] for k in range(n)]


def run_child(job: Job, grace_s: float = 60.0) -> dict:
    """Run one driver in a fresh interpreter; returns its result (``ok`` False on failure)."""
    fd, path = tempfile.mkstemp(prefix=f"bench-{job.driver}-", suffix=".json")
    os.close(fd)
    repo = REPO
    name = job.driver
    if name.endswith(BASELINE_SUFFIX):
        repo = Path(str(BASELINE["repo"]))
        job = dataclasses.replace(job, driver=bare_driver(name))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(repo)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    cmd = [sys.executable, "-m", "bench.drivers", json.dumps(dataclasses.asdict(job)), path]
    load_before = os.getloadavg()
    started = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=str(repo), env=env, stdin=subprocess.DEVNULL)
    try:
        code = proc.wait(job.timeout_s + grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        code = None
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    elapsed = time.monotonic() - started
    try:
        with open(path) as f:
            result = json.load(f)
    except (OSError, ValueError):
        result = {"driver": job.driver, "mode": job.mode, "ok": False,
                  "error": ("killed after the time limit" if code is None
                            else f"child exited with status {code} without a result")}
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass
    if name != job.driver:
        result["driver"] = name
        result["label"] = f"{result.get('label', job.driver)} [baseline {BASELINE['tag']}]"
    result["exit_status"] = code
    result["process_seconds"] = elapsed
    result["loadavg_before"] = load_before
    return result


def py_spy() -> str:
    found = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not os.access(found, os.X_OK):
        raise SystemExit("--profile needs py-spy: pip install py-spy")
    return found


def profile_child(job: Job, out_dir: Path, tag: str) -> dict:
    """One extra, untimed run of ``job`` under py-spy (native frames included); returns the
    text summary and the path of the collapsed stacks (loadable in speedscope.app, or
    turned into an SVG with flamegraph.pl)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    raw = out_dir / f"profile-{job.driver}-{tag}.collapsed.txt"
    fd, path = tempfile.mkstemp(prefix=f"bench-profile-{job.driver}-", suffix=".json")
    os.close(fd)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    cmd = [py_spy(), "record", "--native", "--rate", "1000", "--format", "raw", "--output", str(raw), "--",
           sys.executable, "-m", "bench.drivers", json.dumps(dataclasses.asdict(job)), path]
    proc = subprocess.run(cmd, cwd=str(REPO), env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, timeout=job.timeout_s + 120)
    try:
        with open(path) as f:
            result = json.load(f)
    except (OSError, ValueError):
        result = {"ok": False, "error": f"py-spy exited with {proc.returncode}: {proc.stderr[-500:]}"}
    finally:
        os.unlink(path)
    summary = summarize_profile(raw) if raw.exists() else {"error": proc.stderr[-500:]}
    summary["collapsed_stacks"] = str(raw)
    summary["run_ok"] = result.get("ok")
    if result.get("ok"):
        summary["records_per_s_under_profiler"] = result["count"] / result["wall_s"]
    return summary


def summarize_profile(path: Path, top: int = 15) -> dict:
    """Where the consuming call spends its samples: self time per frame (leaf) and time
    inclusive per frame below the driver's ``consume``, as % of the samples inside it."""
    import collections
    own, incl = collections.Counter(), collections.Counter()
    total = inside = 0
    with open(path) as f:
        for line in f:
            stack, _, n = line.rstrip().rpartition(" ")
            if not stack:
                continue
            n = int(n)
            frames = stack.split(";")
            total += n
            marks = [i for i, fr in enumerate(frames) if fr.startswith(("consume (bench/drivers/", "_consume (bench/drivers/"))]
            if not marks:
                continue
            inside += n
            below = frames[marks[-1] + 1:]
            own[below[-1] if below else frames[-1]] += n
            for fr in set(below):
                incl[fr] += n
    pct = (lambda c: [(round(100 * k / inside, 1), name) for name, k in c.most_common(top)]) if inside else (lambda c: [])
    return {"samples": total, "samples_in_consume": inside, "self": pct(own), "inclusive": pct(incl)}


def derive(result: dict, cfg: Config) -> dict:
    """Per-run figures from a child's raw result (only for complete, valid runs)."""
    if not result.get("ok") or result.get("mode") != "assign":
        return result
    wall = result["wall_s"]
    n = result["count"]
    result["records_per_s"] = n / wall
    result["mb_per_s"] = n * cfg.record_size / wall / 1e6
    result["cpu_us_per_record"] = result["cpu_s"] / n * 1e6
    after_first = n - result.get("first_batch_records", n)
    # Only meaningful when the first batch is a small part of the data and time is measurable.
    if result.get("steady_wall_s", 0) > 0.05 and after_first >= n // 2:
        result["steady_records_per_s"] = after_first / result["steady_wall_s"]
    if "broker_cpu_s" in result:
        result["broker_cpu_us_per_record"] = result["broker_cpu_s"] / n * 1e6
    other = result.get("machine_busy_cpu_s", 0.0) - result["cpu_s"] - result.get("broker_cpu_s", 0.0)
    result["other_load_cores"] = max(0.0, other) / wall
    return result


def summarize(runs: list[dict], mode: str) -> dict:
    """Median over the valid runs of one driver in one configuration."""
    valid = [r for r in runs if r.get("ok")]
    out = {"runs": len(runs), "valid_runs": len(valid),
           "errors": [r.get("error") for r in runs if not r.get("ok")]}
    for key in ("label", "version", "settings"):
        for r in runs:
            if key in r:
                out[key] = r[key]
                break
    if not valid:
        return out
    keys = (["records_per_s", "steady_records_per_s", "mb_per_s", "cpu_us_per_record", "broker_cpu_us_per_record", "peak_rss_bytes",
             "wall_s", "cpu_s", "first_record_s", "other_load_cores", "max_loop_lag_ms"] if mode == "assign"
            else ["first_record_s", "peak_rss_bytes"])
    for key in keys:
        values = [r[key] for r in valid if key in r]
        if values:
            out[key] = statistics.median(values)
            if len(values) > 1:
                out[key + "_min"] = min(values)
                out[key + "_max"] = max(values)
    return out


def skipped_summary(driver: str, reason: str) -> dict:
    from bench.drivers import load
    module = load(driver)
    return {"runs": 0, "valid_runs": 0, "errors": [], "skipped": reason,
            "label": getattr(module, "LABEL", driver)}


# ---------------------------------------------------------------------------- the suite
def configurations(args) -> list[Config]:
    parts = MATRIX_PARTITIONS if args.matrix and args.partitions is None else (args.partitions or DEFAULT_PARTITIONS)
    sizes = MATRIX_SIZES if args.matrix and args.sizes is None else (args.sizes or DEFAULT_SIZES)
    codecs = MATRIX_CODECS if args.matrix and args.codecs is None else (args.codecs or DEFAULT_CODECS)
    if args.sweep:
        # One factor at a time around the default configuration.
        base_p, base_s, base_c = DEFAULT_PARTITIONS[0], DEFAULT_SIZES[0], DEFAULT_CODECS[0]
        combos = [(base_p, base_s, base_c)]
        combos += [(p, base_s, base_c) for p in MATRIX_PARTITIONS]
        combos += [(base_p, s, base_c) for s in MATRIX_SIZES]
        combos += [(base_p, base_s, c) for c in MATRIX_CODECS]
        seen = []
        for combo in combos:
            if combo not in seen:
                seen.append(combo)
        return [Config(p, s, c, min(args.records, max(1, args.max_bytes // s))) for p, s, c in seen]
    out = []
    for size in sizes:
        if size < MIN_RECORD_SIZE:
            raise SystemExit(f"record size {size} B is below the {MIN_RECORD_SIZE} B sequence number")
        n = min(args.records, max(1, args.max_bytes // size))
        for p in parts:
            for codec in codecs:
                out.append(Config(p, size, codec, n))
    return out


def timeout_for(cfg: Config, args) -> float:
    if args.timeout:
        return args.timeout
    # The slowest client (kafka-python) reads ~45k records/s of 100 B and ~7 MB/s of 10 KB
    # records on the reference machine; allow about 2x that plus start-up.
    return 60.0 + cfg.records / 20_000 + cfg.records * cfg.record_size / 5e6


def environment() -> dict:
    import psutil
    info = {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "python": sys.version.split()[0], "platform": platform.platform(),
        "cpu_count": os.cpu_count(), "memory_bytes": psutil.virtual_memory().total,
    }
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    info["cpu_model"] = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return info


def tansu_version() -> str | None:
    try:
        from kclient.testing.tansu import find_tansu
        out = subprocess.run([find_tansu(), "--version"], capture_output=True, text=True, timeout=10)
        return (out.stdout or out.stderr).strip() or None
    except Exception:
        return None


def start_broker(args):
    """(cluster, report entry) for ``--broker`` (``--bootstrap`` is the older spelling of HOST:PORT)."""
    from kclient.testing import ExternalCluster, KafkaCluster, MockCluster, TansuBroker

    broker = args.bootstrap or args.broker
    if broker == "tansu":
        return TansuBroker(), {"kind": "tansu", "version": tansu_version()}
    if broker == "mock":
        return MockCluster(n_brokers=1), {"kind": "mock"}
    if broker == "kafka":
        # The reference broker, with the full JIT and a 1 GB heap: it must not be the bottleneck.
        cluster = KafkaCluster(profile="throughput", security=bool(args.tls))
        return cluster, {"kind": "kafka", "version": cluster.version, "tls": args.tls}
    return ExternalCluster(broker), {"kind": "external", "bootstrap": broker}


# librdkafka's mock cluster keeps about 5 MB per partition and drops older data: a larger
# configuration would be read short and every run marked invalid, so it is refused up front.
MOCK_BYTES_PER_PARTITION = 4_000_000


def check_broker_fits(kind: str, configs: list[Config]) -> None:
    if kind != "mock":
        return
    for cfg in configs:
        per_partition = cfg.records * (cfg.record_size + 16) / cfg.partitions
        if per_partition > MOCK_BYTES_PER_PARTITION:
            raise SystemExit(
                f"--broker mock: {cfg.name} puts {per_partition / 1e6:.1f} MB in each partition, but "
                f"librdkafka's mock cluster keeps only about 5 MB per partition; use at most "
                f"{int(MOCK_BYTES_PER_PARTITION * cfg.partitions / (cfg.record_size + 16)):,} --records "
                f"(or more --partitions), or another --broker")


def check_drivers(drivers: list[str]) -> dict[str, str]:
    """{driver: reason} for drivers whose prerequisites are missing. A driver module may define
    ``check()``: run once here, in the runner, before any measurement (the Java peer resolves
    its jars and compiles itself there); whatever it raises is the reason for skipping it."""
    from bench.drivers import load

    skipped = {}
    for name in drivers:
        check = getattr(load(name), "check", None)
        if check is None:
            continue
        try:
            check()
        except Exception as exc:  # reported in the table; the other drivers still run
            skipped[name] = f"{type(exc).__name__}: {exc}"
            log(f"bench: skipping {name}: {skipped[name]}")
    return skipped


def run_suite(args) -> dict:
    unknown = [d for d in (args.drivers or []) if d not in DRIVERS]
    if unknown:
        raise SystemExit(f"unknown driver(s) {unknown}; known: {', '.join(DRIVERS)}")
    drivers = [d for d in DRIVERS if not args.drivers or d in args.drivers]  # report order
    if args.baseline is not None:
        BASELINE["repo"], BASELINE["tag"] = args.baseline, checkout_tag(args.baseline)
        drivers = baseline_drivers(drivers, (args.baseline / "bench" / "drivers" / "__init__.py").read_text())
    configs = configurations(args)
    cluster, broker = start_broker(args)
    check_broker_fits(broker["kind"], configs)
    report = {"environment": environment(), "command": args.command_line,
              "loadavg_start": os.getloadavg(), "repeat": args.repeat, "group_repeat": args.group_repeat,
              "warmup": args.warmup,
              "drivers": drivers, "broker": broker, "configs": []}
    skipped = check_drivers(drivers)
    if args.tls:
        for name in drivers:
            if name not in TLS_DRIVERS:
                skipped.setdefault(name, f"not measured over TLS (--tls {args.tls})")
    report["skipped"] = skipped
    log(f"bench: {len(configs)} configuration(s) x {len(drivers) - len(skipped)} driver(s), repeat {args.repeat}; "
        f"load average {os.getloadavg()[0]:.2f}")
    with cluster:
        broker_pid = getattr(cluster, "pid", None)
        if broker_pid:
            log(f"bench: {broker['kind']} broker pid {broker_pid} at {cluster.bootstrap}")
        for ci, cfg in enumerate(configs, 1):
            report["configs"].append(run_config(cluster, broker_pid, cfg, drivers, skipped, args,
                                                f"[{ci}/{len(configs)}]"))
    report["loadavg_end"] = os.getloadavg()
    return report


# Drivers that can read over TLS, and how each is told to (--tls): the client settings that
# trust the harness's CA. The others are skipped with that reason.
def tls_settings(ca: str, protocol: str, user: tuple[str, str]) -> dict[str, dict]:
    sasl = protocol == "SASL_SSL"
    kclient = {"security.protocol": protocol, "ssl.cafile": ca}
    java = {"security.protocol": protocol, "ssl.truststore.type": "PEM", "ssl.truststore.location": ca}
    confluent = {"security.protocol": protocol.lower(), "ssl.ca.location": ca}
    if sasl:
        kclient |= {"sasl.mechanism": "SCRAM-SHA-512", "sasl.plain.username": user[0], "sasl.plain.password": user[1]}
        java |= {"sasl.mechanism": "SCRAM-SHA-512", "sasl.jaas.config":
                 f'org.apache.kafka.common.security.scram.ScramLoginModule required username="{user[0]}" '
                 f'password="{user[1]}";'}
        confluent |= {"sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user[0], "sasl.password": user[1]}
    return {"kclient": kclient, "java": java, "confluent": confluent}


TLS_DRIVERS = {"kclient-records", "kclient-columnar", "kclient-records-defaults", "kclient-columnar-defaults", "java",
               "confluent-tuned", "confluent-default"}


def run_config(cluster, broker_pid, cfg: Config, all_drivers: list[str], skipped: dict[str, str],
               args, tag: str) -> dict:
    from bench.drivers import load

    drivers = [d for d in all_drivers if d not in skipped]

    topic = f"bench-{cfg.key}-{uuid.uuid4().hex[:8]}"
    log(f"{tag} {cfg.name}: creating {topic} and producing")
    cluster.create_topic(topic, cfg.partitions)
    cluster.wait_for_topic(topic, cfg.partitions, timeout=30)
    produced = produce(cluster.bootstrap, topic, cfg)
    log(f"{tag} produced {cfg.records:,} records in {produced['seconds']:.1f} s")
    timeout = timeout_for(cfg, args)
    bootstrap = cluster.bootstrap
    extra: dict = {"kclient": dict(args.kclient_setting)}
    if args.tls:
        from kclient.testing.pki import SCRAM_USER
        bootstrap = cluster.bootstrap_for(args.tls)
        secured = tls_settings(str(cluster.pki.ca_file), args.tls, SCRAM_USER)
        extra = {k: {**v, **extra.get(k, {})} for k, v in secured.items()}
    runs: dict[str, list[dict]] = {d: [] for d in drivers}
    group_runs: dict[str, list[dict]] = {d: [] for d in drivers}
    group_capable = [d for d in drivers if getattr(load(d), "GROUP_MODE", False)]
    try:
        if args.warmup and drivers:
            # The broker's first read of a fresh topic is slower (JIT, page cache, over TLS its
            # cipher code): without an untimed read first, that cost lands on whichever driver
            # happens to run first and skews its median.
            job = Job(driver=drivers[0], bootstrap=bootstrap, topic=topic, partitions=cfg.partitions,
                      records=cfg.records, record_size=cfg.record_size, mode="assign",
                      timeout_s=timeout, broker_pid=broker_pid, progress=False, extra=extra)
            log(f"{tag} warm-up read with {drivers[0]} (not measured)")
            warm = run_child(job)
            if not warm.get("ok", False):
                log(f"{tag}   warm-up failed (the measured runs will report it): {_one_line(warm)}")
        for rep in range(args.repeat):
            for name in round_order(drivers, rep):
                job = Job(driver=name, bootstrap=bootstrap, topic=topic, partitions=cfg.partitions,
                          records=cfg.records, record_size=cfg.record_size, mode="assign",
                          timeout_s=timeout, broker_pid=broker_pid, progress=not args.quiet,
                          extra=extra)
                log(f"{tag} run {rep + 1}/{args.repeat} {name}: assign mode, {cfg.records:,} records "
                    f"(load {os.getloadavg()[0]:.2f})")
                result = derive(run_child(job), cfg)
                runs[name].append(result)
                log(f"{tag}   {name}: {_one_line(result)}")
        for rep in range(args.group_repeat):
            for name in group_capable:
                job = Job(driver=name, bootstrap=bootstrap, topic=topic, partitions=cfg.partitions,
                          records=cfg.records, record_size=cfg.record_size, mode="group",
                          group_id=f"bench-{name}-{uuid.uuid4().hex[:8]}", timeout_s=60.0,
                          session_timeout_ms=args.group_session_timeout_ms,
                          extra=extra,
                          broker_pid=broker_pid, progress=not args.quiet)
                log(f"{tag} group run {rep + 1}/{args.group_repeat} {name}: time to first record")
                result = run_child(job)
                group_runs[name].append(result)
                log(f"{tag}   {name}: {_one_line(result)}")
        profiles = {}
        for name in [d for d in (args.profile or []) if d in drivers]:
            if not getattr(load(name), "PY_SPY", True):
                log(f"{tag} not profiling {name}: py-spy sees only its Python wrapper, not the client")
                continue
            job = Job(driver=name, bootstrap=cluster.bootstrap, topic=topic, partitions=cfg.partitions,
                      records=cfg.records, record_size=cfg.record_size, mode="assign",
                      timeout_s=timeout, broker_pid=broker_pid, progress=False)
            log(f"{tag} profiling {name} with py-spy (untimed run)")
            profiles[name] = profile_child(job, args.profile_dir, cfg.key)
    finally:
        try:
            cluster.delete_topic(topic)
        except Exception as exc:  # the data is gone with the broker anyway
            log(f"{tag} could not delete {topic}: {exc}")
    results = {}
    for d in all_drivers:  # report order, skipped drivers in their place
        results[d] = skipped_summary(d, skipped[d]) if d in skipped else summarize(runs[d], "assign")
    return {
        "config": dataclasses.asdict(cfg), "name": cfg.name, "topic": topic, "produce": produced,
        "results": results,
        "group": {d: summarize(group_runs[d], "group") for d in group_capable},
        "runs": runs, "group_runs": group_runs, "profiles": profiles,
    }


def _one_line(r: dict) -> str:
    if not r.get("ok"):
        return f"INVALID: {r.get('error')}"
    if r.get("mode") == "group":
        return f"first record after {r['first_record_s']:.2f} s"
    return (f"{r['records_per_s']:,.0f} rec/s, {r['mb_per_s']:.1f} MB/s, {r['cpu_us_per_record']:.2f} us CPU/rec, "
            f"peak RSS {r['peak_rss_bytes'] / 2**20:.0f} MiB")


# ---------------------------------------------------------------------------- command line
def _setting(text: str) -> tuple[str, object]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    for convert in (int, float):
        try:
            return key, convert(value)
        except ValueError:
            pass
    return key, {"true": True, "false": False}.get(value.lower(), value)


def _int_list(text: str) -> list[int]:
    return [int(x.replace("_", "")) for x in text.split(",") if x]


def _broker_arg(text: str) -> str:
    if text in ("kafka", "tansu", "mock"):
        return text
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected kafka, tansu, mock or HOST:PORT, got {text!r}")
    return text


def _checkout(text: str) -> Path:
    path = Path(text).resolve()
    if not (path / "bench" / "drivers").is_dir() or not (path / "kclient").is_dir():
        raise argparse.ArgumentTypeError(f"{text}: not a kclient checkout (no bench/drivers or kclient/)")
    return path


def checkout_tag(path: Path) -> str:
    """The checkout's commit, for the report's labels."""
    try:
        out = subprocess.run(["git", "-C", str(path), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return path.name
    return out.stdout.strip() or path.name


def _str_list(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def configure(parser: argparse.ArgumentParser) -> None:
    """Options of ``python -m bench`` / ``kclient bench`` (throughput and liveness suites)."""
    parser.add_argument("suite", nargs="?", choices=["throughput", "liveness"], default="throughput",
                        help="throughput (default): the side-by-side consumer benchmark; "
                             "liveness: group membership while the application stalls")
    t = parser.add_argument_group("throughput")
    t.add_argument("--broker", type=_broker_arg, default="kafka", metavar="kafka|tansu|mock|HOST:PORT",
                   help="kafka (default): Apache Kafka started for the run, one KRaft node, the "
                        "reference; tansu: the embedded Tansu; mock: librdkafka's mock cluster "
                        "(about 5 MB per partition); HOST:PORT: a cluster you run")
    t.add_argument("--bootstrap", metavar="HOST:PORT", help="same as --broker HOST:PORT")
    t.add_argument("--records", type=lambda s: int(s.replace("_", "")), default=DEFAULT_RECORDS,
                   help=f"records per configuration (default {DEFAULT_RECORDS:,}; capped by --max-bytes)")
    t.add_argument("--max-bytes", type=int, default=DEFAULT_MAX_BYTES,
                   help="cap on value bytes per configuration (default 200 MiB)")
    t.add_argument("--partitions", type=_int_list, help="comma list (default 8; --matrix: 1,8,64)")
    t.add_argument("--sizes", type=_int_list, help="record value sizes in bytes (default 100; --matrix: 10,100,1000,10000)")
    t.add_argument("--codecs", type=_str_list, help="none,lz4,zstd (default none; --matrix: all three)")
    t.add_argument("--matrix", action="store_true", help="every combination of partitions, sizes and codecs")
    t.add_argument("--sweep", action="store_true",
                   help="vary one factor at a time around the default (partitions 1,8,64; sizes 10 B-10 KB; "
                        "codecs none,lz4,zstd): 8 configurations instead of the matrix's 36")
    t.add_argument("--drivers", type=_str_list, help=f"comma list (default all: {','.join(DRIVERS)})")
    t.add_argument("--repeat", type=int, default=3, help="assign-mode runs per driver (median reported)")
    t.add_argument("--group-repeat", type=int, default=1, help="group-mode runs per driver (0: none)")
    t.add_argument("--warmup", type=int, choices=(0, 1), default=1,
                   help="1 (default): one untimed read of each topic before the measured runs, so the "
                        "broker's warm-up is charged to no client; 0: none")
    t.add_argument("--group-session-timeout-ms", type=int, default=10_000,
                   help="session.timeout.ms of every client in group mode (Tansu completes a first "
                        "join after about half of it; default 10000)")
    t.add_argument("--tls", choices=("SSL", "SASL_SSL"), default=None,
                   help="read over TLS (SASL_SSL: with SCRAM-SHA-512) from the harness's Kafka; the "
                        "data is produced in plaintext; drivers without TLS settings here are skipped")
    t.add_argument("--kclient-setting", action="append", default=[], type=_setting, metavar="KEY=VALUE",
                   help="a consumer setting for the kclient drivers only (repeatable), e.g. "
                        "fetch.max.in.flight.per.broker=2; the report lists it")
    t.add_argument("--baseline", type=_checkout, metavar="DIR",
                   help="a second checkout (built in place) whose kclient drivers run beside this one's "
                        "in the same rounds, labelled [baseline <commit>]: a change's before and after "
                        "in one run")
    t.add_argument("--timeout", type=float, help="seconds one driver run may take (default from the size)")
    t.add_argument("--profile", type=_str_list, help="also run these drivers once under py-spy (untimed) "
                                                     "and summarise where their time goes")
    t.add_argument("--out", type=Path, help="also write the results into this directory")
    t.add_argument("--quiet", action="store_true", help="no per-second progress lines")
    from bench import liveness
    liveness.configure(parser.add_argument_group("liveness"))


def run(args: argparse.Namespace) -> int:
    if getattr(args, "command_line", None) is None:  # called by `kclient bench`
        args.command_line = "kclient " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    if args.suite == "liveness":
        from bench import liveness
        return liveness.run(args)
    if (args.matrix or args.sweep) and "--repeat" not in args.command_line:
        args.repeat = 1  # many configurations: one run each unless asked
    from bench import report as rep
    args.profile_dir = RESULTS_DIR / "profiles"
    if args.profile:
        py_spy()
    result = run_suite(args)
    paths = rep.write_all(result, RESULTS_DIR, args.out)
    print(rep.markdown(result))
    for p in paths:
        log(f"bench: wrote {p}")
    invalid = [(c["name"], d) for c in result["configs"] for d, s in c["results"].items()
               if not s.get("valid_runs") and not s.get("skipped")]
    return 1 if invalid else 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    configure(parser)
    args = parser.parse_args(argv)
    args.command_line = "python -m bench " + " ".join(shlex.quote(a) for a in argv)
    return run(args)
