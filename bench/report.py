"""Benchmark results as a Markdown table, JSON and a PNG chart.

Targets for the fetch path, computed from figures measured in the same run, for the
kclient drivers (the tuned peers' fetch settings) and again for the -defaults drivers:
- kclient per record >= 2.5x confluent-kafka tuned and >= 2x the Java consumer (records/s);
- kclient columnar >= 85% of the raw-fetch ceiling;
- kclient CPU per record <= 0.4x confluent-kafka's (tuned).
"""
from __future__ import annotations

import json
import shutil
import statistics
from pathlib import Path

MiB = 2 ** 20


def _fmt_rate(v) -> str:
    return "–" if v is None else f"{v:,.0f}"


def _fmt(v, spec: str) -> str:
    return "–" if v is None else format(v, spec)


def _spread(s: dict, key: str, spec: str) -> str:
    v = s.get(key)
    if v is None:
        return "–"
    lo, hi = s.get(key + "_min"), s.get(key + "_max")
    if lo is None or hi is None:
        return format(v, spec)
    return f"{format(v, spec)} ({format(lo, spec)}–{format(hi, spec)})"


def paired_ratios(cfg_result: dict, mine: str, theirs: str, key: str = "records_per_s") -> list[float]:
    """mine / theirs for each round in which both ran validly. The runner runs every driver
    once per round, rounds one after another, so a round's two figures share the machine's
    state of the moment; the spread of these ratios is far narrower than that of either
    client's own figures when the machine's speed drifts during a run."""
    runs = cfg_result.get("runs") or {}
    out = []
    for a, b in zip(runs.get(mine, []), runs.get(theirs, [])):
        if a.get("ok") and b.get("ok") and a.get(key) and b.get(key):
            out.append(a[key] / b[key])
    return out


def _with_pairs(target: dict, pairs: list[float]) -> dict:
    if len(pairs) >= 2:
        target["paired"] = {"median": statistics.median(pairs), "min": min(pairs), "max": max(pairs),
                            "rounds": len(pairs)}
    return target


def targets(cfg_result: dict) -> list[dict]:
    """The brief's targets as ratios of this configuration's medians (met or not on those),
    each with the median of the same ratio taken round by round (see paired_ratios)."""
    r = cfg_result["results"]

    def get(driver: str, key: str):
        return r.get(driver, {}).get(key)

    out = []
    ct, raw, java = (get("confluent-tuned", "records_per_s"), get("raw-fetch", "records_per_s"),
                     get("java", "records_per_s"))
    # kclient-* run with the tuned peers' fetch settings, kclient-*-defaults as installed: the
    # targets are stated for both, the second set marked "(defaults)".
    for suffix in ("", "-defaults"):
        records, columnar = "kclient-records" + suffix, "kclient-columnar" + suffix
        kr, kc = get(records, "records_per_s"), get(columnar, "records_per_s")
        tag = " (defaults)" if suffix else ""
        if kr and ct:
            out.append(_with_pairs({"target": f"kclient per record{tag} >= 2.5x confluent-kafka tuned (records/s)",
                                    "ratio": kr / ct, "goal": 2.5, "met": kr / ct >= 2.5},
                                   paired_ratios(cfg_result, records, "confluent-tuned")))
        if kr and java:
            out.append(_with_pairs({"target": f"kclient per record{tag} >= 2x the Java consumer (records/s)",
                                    "ratio": kr / java, "goal": 2.0, "met": kr / java >= 2.0},
                                   paired_ratios(cfg_result, records, "java")))
        if kc and raw:
            out.append(_with_pairs({"target": f"kclient columnar{tag} >= 85% of raw fetch",
                                    "ratio": None, "ratio_of_raw": kc / raw, "goal": 0.85,
                                    "met": kc / raw >= 0.85},
                                   paired_ratios(cfg_result, columnar, "raw-fetch")))
        for name in (records, columnar):
            mine, theirs = get(name, "cpu_us_per_record"), get("confluent-tuned", "cpu_us_per_record")
            if mine and theirs:
                out.append({"target": f"{name} CPU per record <= 0.4x confluent-kafka tuned",
                            "ratio": mine / theirs, "goal": 0.4, "met": mine / theirs <= 0.4})
    return out


def markdown(report: dict) -> str:
    env = report["environment"]
    lines = [
        f"Date: {env['date']}; machine: {env.get('cpu_model', '?')}, {env['cpu_count']} cores; "
        f"Python {env['python']}; broker: {_broker(report)}.",
        f"Command: `{report['command']}`",
        f"Load average at start {_load(report.get('loadavg_start'))}, at end {_load(report.get('loadavg_end'))}; "
        f"{report['repeat']} assign-mode run(s) per client, median shown (min–max in brackets)"
        + ("; one untimed warm-up read of each topic before them." if report.get("warmup") else "."),
    ]
    others = [r["other_load_cores"] for c in report["configs"] for runs in c["runs"].values()
              for r in runs if "other_load_cores" in r]
    if others:
        lines.append(f"Other processes on the machine used {statistics.median(others):.2f} cores (median; "
                     f"{min(others):.2f}–{max(others):.2f}) of {env['cpu_count']} during the measured windows "
                     "(machine busy time minus the client's and the broker's).")
    lines.append("")
    for c in report["configs"]:
        lines += _config_table(c)
    return "\n".join(lines)


def _broker(report: dict) -> str:
    b = report.get("broker", {})
    if b.get("kind") == "tansu":
        return f"embedded Tansu ({b.get('version') or 'version unknown'}), in-memory storage"
    if b.get("kind") == "kafka":
        tls = f", read over {b['tls']} (TLS 1.3{', SCRAM-SHA-512' if b['tls'] == 'SASL_SSL' else ''})" if b.get("tls") else ""
        return f"Apache Kafka {b.get('version')} (one KRaft node on loopback, 1 GB heap{tls})"
    if b.get("kind") == "mock":
        return "librdkafka's mock cluster (one broker, in memory; a stand-in, not the reference)"
    return f"external cluster {b.get('bootstrap')}"


def _cell(text: str, limit: int) -> str:
    """One table cell: one line, no column separators."""
    text = " ".join(str(text).split()).replace("|", "/")
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _load(v) -> str:
    return "?" if not v else "/".join(f"{x:.2f}" for x in v)


def _config_table(c: dict) -> list[str]:
    lines = [f"### {c['name']}", "",
             f"Produced with confluent-kafka in {c['produce']['seconds']:.1f} s. Assign mode (all partitions "
             "from offset 0, exactly N records counted); time to first record in group mode (fresh group, "
             "subscribe).", "",
             "| client | version | records/s | MB/s | records/s after the first batch | first record, "
             "assign mode (s) | client CPU µs/record | broker CPU µs/record | peak RSS MiB "
             "| first record, group mode (s) | valid runs |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for name, s in c["results"].items():
        if s.get("skipped"):
            lines.append(f"| {s.get('label', name)} | – | skipped: {_cell(s['skipped'], 200)} "
                         + "| – " * 6 + "| n/a | 0/0 |")
            continue
        g = c.get("group", {}).get(name, {})
        valid = f"{s.get('valid_runs', 0)}/{s.get('runs', 0)}"
        if s.get("errors"):
            valid += " (" + "; ".join(str(e)[:120] for e in s["errors"][:2]) + ")"
        if name not in c.get("group", {}):
            first = "n/a"
        elif not g.get("runs"):
            first = "not run"
        elif g.get("valid_runs"):
            first = _spread(g, "first_record_s", ".2f")
        else:
            first = "failed: " + "; ".join(str(e)[:100] for e in g.get("errors", [])[:1])
        lines.append(
            f"| {s.get('label', name)} | {s.get('version', '?')} | {_spread(s, 'records_per_s', ',.0f')} "
            f"| {_fmt(s.get('mb_per_s'), '.1f')} | {_fmt_rate(s.get('steady_records_per_s'))} "
            f"| {_fmt(s.get('first_record_s'), '.3f')} | {_spread(s, 'cpu_us_per_record', '.2f')} "
            f"| {_fmt(s.get('broker_cpu_us_per_record'), '.2f')} "
            f"| {_fmt(s['peak_rss_bytes'] / MiB if s.get('peak_rss_bytes') else None, '.0f')} "
            f"| {first} | {valid} |")
    lags = [(s.get("label", name), s) for name, s in c["results"].items() if s.get("max_loop_lag_ms") is not None]
    if lags:
        lines += ["", "Largest event-loop lag while reading (a 1 ms sleeper on the same loop; asyncio "
                  "clients): " + ", ".join(f"{label} {_spread(s, 'max_loop_lag_ms', '.1f')} ms"
                                           for label, s in lags)]
    tuned = [(s.get("label", name), s["settings"]) for name, s in c["results"].items()
             if s.get("settings") and not s.get("skipped")]
    if tuned:
        lines += ["", "Driver settings (the client's defaults otherwise):", ""]
        lines += [f"- {label}: " + ", ".join(f"{k}={v}" for k, v in settings.items()) for label, settings in tuned]
    t = targets(c)
    if t:
        lines += ["", "Targets (ratios of the medians above):", ""]
        if c["config"]["records"] * c["config"]["record_size"] < 50_000_000:
            lines += ["(Under 50 MB of data: start-up time weighs heavily in these ratios; the targets "
                      "are meant for the default 1,000,000 x 100 B.)", ""]
        for x in t:
            parts = [f"{x['ratio']:.2f}x"] if x.get("ratio") is not None else []
            if x.get("ratio_of_raw") is not None:
                parts.append(f"{x['ratio_of_raw']:.0%} of raw fetch")
            if x.get("paired"):
                pr = x["paired"]
                spec = ".0%" if x.get("ratio_of_raw") is not None else ".2f"
                unit = "" if x.get("ratio_of_raw") is not None else "x"
                parts.append(f"round by round {format(pr['median'], spec)}{unit} (median of {pr['rounds']}; "
                             f"{format(pr['min'], spec)}{unit}–{format(pr['max'], spec)}{unit})")
            lines.append(f"- {x['target']}: {', '.join(parts) or '–'} — {'met' if x['met'] else 'NOT met'}")
    for name, prof in (c.get("profiles") or {}).items():
        lines += ["", f"Profile of {name} (py-spy --native, one untimed run; % of the samples inside the "
                      f"driver's consume call, {prof.get('samples_in_consume', 0)} samples; stacks in "
                      f"`{prof.get('collapsed_stacks')}`):", "", "```", "self time (leaf frame):"]
        lines += [f"  {p:5.1f}%  {name_}" for p, name_ in prof.get("self", [])]
        lines.append("inclusive:")
        lines += [f"  {p:5.1f}%  {name_}" for p, name_ in prof.get("inclusive", [])]
        lines.append("```")
    lines.append("")
    return lines


def chart(report: dict, path: Path) -> Path | None:
    """Bars of records/s and CPU per record per client (one row of panels per configuration)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    configs = report["configs"]
    if not configs:
        return None
    if len(configs) > 4:
        return _chart_many(report, path, plt)
    fig, axes = plt.subplots(len(configs), 2, figsize=(13, 0.6 + 3.2 * len(configs)), squeeze=False)
    for row, c in enumerate(configs):
        names = list(c["results"])
        labels = [c["results"][n].get("label", n) for n in names]
        rates = [c["results"][n].get("records_per_s") or 0 for n in names]
        cpus = [c["results"][n].get("cpu_us_per_record") or 0 for n in names]
        colors = ["#777777" if n == "raw-fetch" else "#d62728" if n.startswith("kclient") else "#1f77b4"
                  for n in names]
        ax = axes[row][0]
        ax.barh(labels, [r / 1e6 for r in rates], color=colors)
        ax.invert_yaxis()
        ax.set_xlabel("million records/s (wall)")
        ax.set_title(c["name"], fontsize=10)
        for i, r in enumerate(rates):
            note = " skipped" if c["results"][names[i]].get("skipped") else " invalid"
            ax.text(r / 1e6, i, f" {r / 1e6:.2f}" if r else note, va="center", fontsize=8)
        ax = axes[row][1]
        ax.barh(labels, cpus, color=colors)
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.set_xlabel("client CPU µs per record, log scale (lower is better)")
        ax.set_yticklabels([])
        for i, v in enumerate(cpus):
            ax.text(v if v else min([c for c in cpus if c] or [1]), i, f" {v:.2f}" if v else " –", va="center", fontsize=8)
    env = report["environment"]
    fig.suptitle(f"Consumer throughput on {env['cpu_count']} cores, {env['date'][:10]}, median of "
                 f"{report['repeat']} run(s) (grey: raw fetch ceiling, red: kclient, blue: peers)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _chart_many(report: dict, path: Path, plt) -> Path:
    """Many configurations: one point per client and configuration, log scales."""
    configs = report["configs"]
    names = list(configs[0]["results"])
    xs = list(range(len(configs)))
    fig, axes = plt.subplots(2, 1, figsize=(max(10, 1.1 * len(configs)), 9), sharex=True)
    markers = "os^vD<>p"
    for k, name in enumerate(names):
        label = configs[0]["results"][name].get("label", name)
        style = dict(marker=markers[k % len(markers)], linestyle="-" if name.startswith("kclient") else ":",
                     linewidth=2 if name.startswith("kclient") else 1, label=label)
        for ax, key in ((axes[0], "records_per_s"), (axes[1], "cpu_us_per_record")):
            ys = [c["results"].get(name, {}).get(key) for c in configs]
            ax.plot([x for x, y in zip(xs, ys) if y], [y for y in ys if y], **style)
    axes[0].set_yscale("log")
    axes[0].set_ylabel("records/s (wall), log scale")
    axes[1].set_yscale("log")
    axes[1].set_ylabel("client CPU µs per record, log scale")
    axes[1].set_xticks(xs)
    axes[1].set_xticklabels([f"{c['config']['partitions']}p {c['config']['record_size']} B\n{c['config']['codec']}"
                             for c in configs], fontsize=8)
    axes[0].legend(fontsize=8, ncol=2)
    env = report["environment"]
    fig.suptitle(f"Consumer throughput per configuration on {env['cpu_count']} cores, {env['date'][:10]}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_all(report: dict, results_dir: Path, out: Path | None = None) -> list[Path]:
    results_dir.mkdir(parents=True, exist_ok=True)
    stamp = report["environment"]["date"].replace(":", "").replace("-", "")[:15]
    base = results_dir / f"bench-{stamp}"
    paths = []
    json_path = base.with_suffix(".json")
    json_path.write_text(json.dumps(report, indent=1, default=str))
    paths.append(json_path)
    md_path = base.with_suffix(".md")
    md_path.write_text(markdown(report))
    paths.append(md_path)
    try:
        png = chart(report, base.with_suffix(".png"))
        if png:
            paths.append(png)
    except ImportError as exc:
        md_path.write_text(markdown(report) + f"\n(no chart: {exc}; pip install matplotlib)\n")
    if out:
        out.mkdir(parents=True, exist_ok=True)
        for p in list(paths):
            target = out / p.name
            shutil.copyfile(p, target)
            paths.append(target)
    return paths
