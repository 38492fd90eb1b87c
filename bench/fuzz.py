"""``python -m bench fuzz``: coverage-guided fuzzing of every decoder that reads network bytes.

Each target (see bench/fuzz_targets.py: record batches, columnar decoding, wire readers,
frames, every response decoder, the decompressors, the group codec, the consumer protocol,
sticky user data, SCRAM) runs for ``--seconds`` under atheris (libFuzzer) in a child process
of its own, so a process death in one target is reported and the others still run.

What counts:
- crash: an exception other than the target's documented bad-input errors (recorded in the
  child with its input and traceback; distinct crash sites are counted and fuzzing goes on),
  or the death of the child (a signal, libFuzzer's RSS limit): the child is started again for
  the time left, from the corpus it had grown;
- hang: one input running longer than ``--timeout`` seconds (libFuzzer's -timeout), or a
  child that outlives its time budget by far (killed).

The table gives executions, exec/s, crashes, hangs, and libFuzzer's coverage: ``cov``/``ft``
at the end and the features found beyond the seed corpus (``+ft``). kcore is compiled without
coverage instrumentation, so for its targets these count only the Python harness and the
kclient code it reaches: the fuzzer still mutates their inputs, but blind to the C paths.
Exit status 1 if any target crashed or hung, 2 if the fuzzer could not run.

Findings are written under the work directory (``findings/``: each input, its hex and its
traceback); the work directory also keeps each target's grown corpus (``corpus/``), reused
by the next run with the same ``--workdir``.
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import importlib.util
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MAX_LAUNCHES = 8          # child restarts per target after a death or a hang
SEED_RESTART = 0.25       # share of mutations that start again from a seed
HEX_SHOWN = 4096          # findings up to this many bytes are printed in hex


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- child side
def _child(args: argparse.Namespace) -> int:
    import atheris

    workdir = Path(args.workdir)
    name = args.child
    # Instrument the harness and kclient's Python code as they are imported (kcore is compiled:
    # atheris cannot see inside it).
    with atheris.instrument_imports(include=["bench.fuzz_targets", "kclient"]):
        from bench.fuzz_targets import build_targets
        target = build_targets()[name]
        expected = target.expected()
        seeds = target.seeds()
        with contextlib.suppress(*expected):
            target.run(b"")
    import logging
    logging.disable(logging.CRITICAL)     # sticky user data logs each unreadable input

    corpus = workdir / "corpus" / name
    corpus.mkdir(parents=True, exist_ok=True)
    for seed in seeds:
        (corpus / f"seed-{hashlib.sha1(seed).hexdigest()[:16]}").write_bytes(seed)
    findings = workdir / "findings"
    findings.mkdir(exist_ok=True)
    counts: dict[str, int] = {}
    counts_file = findings / f"{name}.counts.json"
    run = target.run

    def record(data: bytes, exc: BaseException) -> None:
        tb = traceback.extract_tb(exc.__traceback__)
        where = f"{Path(tb[-1].filename).name}:{tb[-1].lineno}" if tb else "?"
        signature = f"{type(exc).__name__} at {where}"
        first = signature not in counts
        counts[signature] = counts.get(signature, 0) + 1
        if first:
            digest = hashlib.sha1(data).hexdigest()[:16]
            stem = findings / f"{name}-exception-{digest}"
            stem.with_suffix(".bin").write_bytes(data)
            text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
            with open(findings / "findings.jsonl", "a") as f:
                f.write(json.dumps({"target": name, "kind": "exception", "signature": signature,
                                    "input": str(stem.with_suffix(".bin")), "hex": data.hex(),
                                    "traceback": text}) + "\n")
            print(f"FINDING {name}: {signature}: {exc!r}\n{text}", file=sys.stderr, flush=True)
        if first or counts[signature] % 1000 == 0:
            counts_file.write_text(json.dumps(counts))

    def test_one_input(data: bytes) -> None:
        try:
            run(data)
        except expected:
            pass
        except Exception as exc:  # anything else is a finding; the fuzzing goes on
            record(data, exc)

    # kcore is not instrumented, so for its targets libFuzzer sees no new coverage from any
    # seed and keeps only one of them: this mutator starts a share of the mutations from a
    # seed again, so every seed's structure (codecs, versions, legacy formats) gets fuzzed.
    rng = random.Random()

    def mutate(data: bytes, max_size: int, seed: int) -> bytes:
        rng.seed(seed)
        if seeds and rng.random() < SEED_RESTART:
            data = rng.choice(seeds)
        out = atheris.Mutate(data, max_size)
        for _ in range(rng.randrange(3)):
            out = atheris.Mutate(out, max_size)
        return out

    argv = [sys.argv[0], f"-max_total_time={args.seconds}", f"-timeout={args.timeout}",
            f"-max_len={args.max_len}", f"-rss_limit_mb={args.rss_limit_mb}", "-print_final_stats=1",
            f"-artifact_prefix={findings}/{name}-", str(corpus)]
    if args.seed is not None:
        argv.insert(1, f"-seed={args.seed}")
    atheris.Setup(argv, test_one_input, custom_mutator=mutate)
    atheris.Fuzz()
    return 0


# --------------------------------------------------------------------------- parent side
@dataclass
class Result:
    target: str
    executions: int = 0
    fuzz_seconds: float = 0.0
    crashes: int = 0
    hangs: int = 0
    cov: int | None = None
    ft: int | None = None
    ft_start: int | None = None
    corpus: int | None = None
    launches: int = 0
    seeds_used: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def exec_per_sec(self) -> float:
        return self.executions / self.fuzz_seconds if self.fuzz_seconds > 0 else 0.0


_STATUS = re.compile(r"^#(\d+)\s+(\w+)\s+cov: (\d+) ft: (\d+) corp: (\d+)/")
_DONE_RUNS = re.compile(r"^Done (\d+) runs in (\d+) second")
_STAT = re.compile(r"^stat::(\w+):\s+(\d+)")
_UNIT = re.compile(r"Test unit written to (\S+)")


def _parse(log_text: str) -> dict:
    out: dict = {"stats": {}}
    for line in log_text.splitlines():
        m = _STATUS.match(line)
        if m:
            out["last_exec"] = int(m.group(1))
            out["cov"], out["ft"], out["corpus"] = int(m.group(3)), int(m.group(4)), int(m.group(5))
            if m.group(2) == "INITED" and "ft_start" not in out:
                out["ft_start"] = int(m.group(4))
            continue
        m = _STAT.match(line)
        if m:
            out["stats"][m.group(1)] = int(m.group(2))
            continue
        m = _DONE_RUNS.match(line)
        if m:
            out["done"] = True
            continue
        if line.startswith("INFO: Seed: "):
            out["seed"] = int(line.split()[2])
        elif "ERROR: libFuzzer: timeout" in line:
            out["death"] = "timeout"
        elif "ERROR: libFuzzer: out-of-memory" in line:
            out["death"] = "out-of-memory"
        elif "ERROR: libFuzzer: deadly signal" in line:
            out["death"] = "deadly signal"
        elif "ERROR: libFuzzer:" in line and "death" not in out:
            out["death"] = line.split("ERROR: libFuzzer:", 1)[1].strip()
        m = _UNIT.search(line)
        if m:
            out["artifact"] = m.group(1)
    return out


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _finding_from_artifact(workdir: Path, target: str, kind: str, artifact: str | None, log_path: Path) -> None:
    data = b""
    if artifact and os.path.exists(artifact):
        data = Path(artifact).read_bytes()
    tail = log_path.read_text(errors="replace").splitlines()[-40:]
    with open(workdir / "findings" / "findings.jsonl", "a") as f:
        f.write(json.dumps({"target": target, "kind": kind, "signature": kind, "input": artifact,
                            "hex": data.hex(), "traceback": "\n".join(tail)}) + "\n")


def run_target(name: str, args: argparse.Namespace, workdir: Path) -> Result:
    res = Result(name)
    (workdir / "findings").mkdir(parents=True, exist_ok=True)
    (workdir / "logs").mkdir(exist_ok=True)
    budget = float(args.seconds)
    started = time.monotonic()
    while res.launches < MAX_LAUNCHES:
        remaining = budget - (time.monotonic() - started)
        if res.launches and remaining < 1:
            break
        seconds = max(1, int(round(remaining)))
        log_path = workdir / "logs" / f"{name}.{res.launches}.log"
        cmd = [sys.executable, "-m", "bench.fuzz", "--child", name, "--workdir", str(workdir),
               "--seconds", str(seconds), "--timeout", str(args.timeout), "--max-len", str(args.max_len),
               "--rss-limit-mb", str(args.rss_limit_mb)]
        if args.seed is not None:
            cmd += ["--seed", str(args.seed + res.launches)]
        res.launches += 1
        killed = False
        with open(log_path, "wb") as out:
            proc = subprocess.Popen(cmd, cwd=REPO, env=_child_env(), stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
            try:
                # startup (imports, instrumentation, seeds) and libFuzzer's own timeout handling
                proc.wait(timeout=seconds + 4 * args.timeout + 120)
            except subprocess.TimeoutExpired:
                killed = True
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        parsed = _parse(log_path.read_text(errors="replace"))
        stats = parsed["stats"]
        execs = stats.get("number_of_executed_units", parsed.get("last_exec", 0))
        res.executions += execs
        rate = stats.get("average_exec_per_sec", 0)
        res.fuzz_seconds += execs / rate if rate else 0.0
        for key in ("cov", "ft", "corpus"):
            if key in parsed:
                setattr(res, key, parsed[key])
        if res.ft_start is None and "ft_start" in parsed:
            res.ft_start = parsed["ft_start"]
        if "seed" in parsed:
            res.seeds_used.append(parsed["seed"])
        death = parsed.get("death")
        if killed:
            res.hangs += 1
            res.notes.append(f"killed after outliving its budget (log {log_path})")
            _finding_from_artifact(workdir, name, "hang (killed)", None, log_path)
        elif death == "timeout":
            res.hangs += 1
            res.notes.append(f"input ran over {args.timeout} s: {parsed.get('artifact')} (log {log_path})")
            _finding_from_artifact(workdir, name, "hang", parsed.get("artifact"), log_path)
        elif proc.returncode != 0 or death:
            res.crashes += 1
            what = death or f"exit status {proc.returncode}"
            res.notes.append(f"process died ({what}): {parsed.get('artifact')} (log {log_path})")
            _finding_from_artifact(workdir, name, f"process death ({what})", parsed.get("artifact"), log_path)
            if not parsed.get("last_exec") and "ft_start" not in parsed:
                break         # died before fuzzing started: a broken target, not worth restarting
        elif parsed.get("done"):
            break
    counts_file = workdir / "findings" / f"{name}.counts.json"
    if counts_file.exists():
        counts = json.loads(counts_file.read_text())
        res.crashes += len(counts)
        for signature, n in counts.items():
            res.notes.append(f"{signature} ({n}+ inputs)")
    return res


def _fmt(v) -> str:
    return "-" if v is None else str(v)


def print_table(results: list[Result]) -> None:
    header = ["target", "executions", "exec/s", "crashes", "hangs", "cov", "ft", "+ft", "corpus"]
    rows = []
    for r in results:
        new_ft = None if r.ft is None or r.ft_start is None else r.ft - r.ft_start
        rows.append([r.target, str(r.executions), f"{r.exec_per_sec:,.0f}", str(r.crashes), str(r.hangs),
                     _fmt(r.cov), _fmt(r.ft), _fmt(new_ft), _fmt(r.corpus)])
    widths = [max(len(h), *(len(row[i]) for row in rows)) for i, h in enumerate(header)]
    line = "  ".join(h.ljust(widths[0]) if i == 0 else h.rjust(widths[i]) for i, h in enumerate(header))
    print(line)
    print("-" * len(line))
    for row in rows:
        print("  ".join(c.ljust(widths[0]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(row)))
    total_exec = sum(r.executions for r in results)
    print("-" * len(line))
    print(f"{len(results)} targets, {total_exec} executions, {sum(r.crashes for r in results)} crashes, "
          f"{sum(r.hangs for r in results)} hangs")


def _print_findings(workdir: Path) -> None:
    path = workdir / "findings" / "findings.jsonl"
    if not path.exists():
        return
    print(f"\nfindings (inputs and logs under {workdir / 'findings'}):")
    for line in path.read_text().splitlines():
        f = json.loads(line)
        data_hex = f.get("hex", "")
        print(f"\n[{f['target']}] {f['kind']}: {f['signature']}")
        if data_hex and len(data_hex) <= 2 * HEX_SHOWN:
            print(f"input hex: {data_hex}")
        else:
            print(f"input: {f.get('input')} ({len(data_hex) // 2} bytes)")
        print(f.get("traceback", "").rstrip())


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    # The child imports the targets itself, under atheris' instrumentation.
    if "--child" in argv:
        targets = {}
    else:
        from bench.fuzz_targets import build_targets
        targets = build_targets()
    parser = argparse.ArgumentParser(prog="python -m bench fuzz", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="targets:\n" + "\n".join(f"  {n:34} {t.description}"
                                                                     for n, t in targets.items()))
    parser.add_argument("--seconds", type=int, default=60, help="fuzzing time per target (default 60)")
    parser.add_argument("--targets", default="all", help="comma list of targets or prefixes such as "
                        "'response.' (default: all)")
    parser.add_argument("--seed", type=int, help="libFuzzer's random seed (default: a new one per run)")
    parser.add_argument("--max-len", type=int, default=16384, help="largest input in bytes (default 16384)")
    parser.add_argument("--timeout", type=int, default=10,
                        help="seconds one input may run before it counts as a hang (default 10)")
    parser.add_argument("--rss-limit-mb", type=int, default=2048, help="libFuzzer's memory limit per child")
    parser.add_argument("--workdir", help="corpora, findings and logs (default: a new temporary directory, "
                        "removed afterwards unless something was found)")
    parser.add_argument("--list", action="store_true", help="list the targets and exit")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return _child(args)
    if args.list:
        for n, t in targets.items():
            print(f"{n:34} {t.description}")
        return 0
    for opt in ("seconds", "max_len", "timeout", "rss_limit_mb"):
        if getattr(args, opt) <= 0:
            parser.error(f"--{opt.replace('_', '-')} must be positive")
    if args.targets == "all":
        chosen = [n for n in targets if not n.startswith("selftest.")]
    else:
        chosen = []
        for want in (w.strip() for w in args.targets.split(",") if w.strip()):
            hits = [n for n in targets if n == want or (want.endswith(".") and n.startswith(want))]
            if not hits:
                parser.error(f"unknown target {want!r} (see --list)")
            chosen += [n for n in hits if n not in chosen]
    if importlib.util.find_spec("atheris") is None:
        log("atheris is not installed: pip install atheris (or the project's 'bench' extra)")
        return 2

    temporary = args.workdir is None
    workdir = Path(tempfile.mkdtemp(prefix="kclient-fuzz-") if temporary else args.workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "findings").mkdir(exist_ok=True)
    log(f"fuzzing {len(chosen)} targets for {args.seconds} s each (timeout {args.timeout} s per input, "
        f"max_len {args.max_len}, seed {args.seed if args.seed is not None else 'random'}); work dir {workdir}")
    results = []
    for n in chosen:
        t0 = time.monotonic()
        r = run_target(n, args, workdir)
        results.append(r)
        log(f"  {n}: {r.executions} executions, {r.crashes} crashes, {r.hangs} hangs "
            f"({time.monotonic() - t0:.1f} s)")
    print_table(results)
    for r in results:
        for note in r.notes:
            print(f"{r.target}: {note}")
    _print_findings(workdir)
    failed = any(r.crashes or r.hangs for r in results)
    if temporary and not failed:
        shutil.rmtree(workdir, ignore_errors=True)
    elif temporary:
        print(f"\nwork dir kept: {workdir}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
