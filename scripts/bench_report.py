#!/usr/bin/env python3
"""Writes docs/benchmarks.md (and its SVG chart) from the results of scripts/bench-peers.sh.

usage: bench_report.py RESULTS.jsonl MACHINE.txt MICRO.txt OUT.md COMMAND "CLIENTS"

RESULTS holds one {"key", "result"} object per line: device (the disk whose flushes are counted,
or why none), probe-start*, and per client level N probe-N-rR, narad-N-rR, redis-N-rR (rounds R =
1, 2), narad-h2-N-rR (Narad produce over h2c, driven by h2load; N >= 16 only) and healthz-N, then
batch-64, wrk-healthz-64, probe-visible, visible-64, probe-end. (An older file with narad-N,
redis-N, probe-N is read as round 1; one without narad-h2 runs shows their columns as —.)
MICRO (may be missing or empty) is the output of the core's
divan microbenchmarks; when it is empty the microbenchmark section of the existing OUT is kept.
No plotting library: the chart is written as SVG by hand.
"""
import json
import math
import os
import re
import sys

MICRO_BEGIN = "<!-- micro:begin -->"
MICRO_END = "<!-- micro:end -->"
NOTES_BEGIN = "<!-- notes:begin -->"
NOTES_END = "<!-- notes:end -->"


def load(path):
    results = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                item = json.loads(line)
                results[item["key"]] = item["result"]
    return results


def num(value, digits=0):
    if value is None:
        return "—"
    if digits == 0:
        return f"{value:,.0f}"
    return f"{value:,.{digits}f}"


def ratio(a, b):
    if a is None or b in (None, 0):
        return None
    return a / b


def get(results, key, field):
    return (results.get(key) or {}).get(field)


ROUNDS = (1, 2)


def run_key(results, prefix, c, r):
    """The key of one round's run: PREFIX-C-rR (an older results file without rounds: PREFIX-C
    counts as round 1)."""
    key = f"{prefix}-{c}-r{r}"
    if key not in results and r == 1 and f"{prefix}-{c}" in results:
        return f"{prefix}-{c}"
    return key


def rget(results, prefix, c, r, field):
    return get(results, run_key(results, prefix, c, r), field)


def has_round(results, c, r):
    return any(run_key(results, prefix, c, r) in results
               for prefix in ("probe", "narad", "narad-h2", "redis"))


def healthz(results, c):
    return get(results, f"healthz-{c}", "msgs_per_sec")


def both_rounds(oks):
    """met only if every round met it; not measured if a round could not be judged."""
    if any(ok is False for ok in oks):
        return False
    if not oks or any(ok is None for ok in oks):
        return None
    return True


def fsyncs_wal_partition(results, c, r):
    wal = rget(results, "narad", c, r, "fsyncs_per_msg")
    part = rget(results, "narad", c, r, "partition_fsyncs_per_msg")
    if wal is None and part is None:
        return "—"
    return f"{num((wal or 0) + (part or 0), 4)} ({num(wal, 4)} + {num(part, 4)})"


def table(results, clients):
    rows = [
        "| clients | round | fsync probe /s | Narad produce msg/s | p50 ms | p99 ms "
        "| Narad h2c msg/s | mean ms | Redis XADD msg/s | p50 ms | p99 ms | Narad/Redis msg/s "
        "| Narad-h2c/Redis msg/s | Narad /healthz req/s | Narad/ceiling |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in clients:
        ceiling = healthz(results, c)
        for r in (r for r in ROUNDS if has_round(results, c, r)):
            narad = rget(results, "narad", c, r, "msgs_per_sec")
            h2 = rget(results, "narad-h2", c, r, "msgs_per_sec")
            redis = rget(results, "redis", c, r, "msgs_per_sec")
            rows.append(
                f"| {c} | {r} | {num(rget(results, 'probe', c, r, 'ops_per_sec'))} | {num(narad)} "
                f"| {num(rget(results, 'narad', c, r, 'p50_ms'), 2)} "
                f"| {num(rget(results, 'narad', c, r, 'p99_ms'), 2)} | {num(h2)} "
                f"| {num(rget(results, 'narad-h2', c, r, 'mean_ms'), 2)} | {num(redis)} "
                f"| {num(rget(results, 'redis', c, r, 'p50_ms'), 2)} "
                f"| {num(rget(results, 'redis', c, r, 'p99_ms'), 2)} "
                f"| {num(ratio(narad, redis), 2)} | {num(ratio(h2, redis), 2)} | {num(ceiling)} "
                f"| {num(ratio(narad, ceiling), 2)} |"
            )
    return "\n".join(rows)


def cost_table(results, clients):
    rows = [
        "| clients | round | Narad server CPU µs/msg | Narad h2c CPU µs/msg "
        "| Redis server CPU µs/msg | Narad/Redis CPU | Narad-h2c/Redis CPU "
        "| Narad device flushes/msg | Narad h2c flushes/msg | Redis device flushes/msg "
        "| Narad/Redis flushes | Narad-h2c/Redis flushes | Narad fsyncs/msg (WAL+partition) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in clients:
        for r in (r for r in ROUNDS if has_round(results, c, r)):
            ncpu = rget(results, "narad", c, r, "server_cpu_us_per_msg")
            hcpu = rget(results, "narad-h2", c, r, "server_cpu_us_per_msg")
            rcpu = rget(results, "redis", c, r, "server_cpu_us_per_msg")
            nfl = rget(results, "narad", c, r, "device_flushes_per_msg")
            hfl = rget(results, "narad-h2", c, r, "device_flushes_per_msg")
            rfl = rget(results, "redis", c, r, "device_flushes_per_msg")
            rows.append(
                f"| {c} | {r} | {num(ncpu, 1)} | {num(hcpu, 1)} | {num(rcpu, 1)} "
                f"| {num(ratio(ncpu, rcpu), 2)} | {num(ratio(hcpu, rcpu), 2)} "
                f"| {num(nfl, 4)} | {num(hfl, 4)} | {num(rfl, 4)} | {num(ratio(nfl, rfl), 2)} "
                f"| {num(ratio(hfl, rfl), 2)} | {fsyncs_wal_partition(results, c, r)} |"
            )
    return "\n".join(rows)


def device_note(results):
    d = results.get("device") or {}
    if d.get("stat"):
        return (f"Device flushes: flush requests completed by `{d['name']}` (`{d['stat']}`, field "
                f"16; write cache: {d.get('write_cache') or 'unknown'}), read just before and "
                f"just after each run and divided by the messages of that run (Narad: records "
                f"accepted over the whole `narad bench` process, warm-up included; Redis: the "
                f"requests of the measured `redis-benchmark` run). The counter is the whole "
                f"disk's: the filesystem's journal commits and anything else that flushes it "
                f"meanwhile count too, most visibly when few messages are flushed together.")
    if "device" not in results:
        return "Device flushes: — (this results file has no device record)."
    return f"Device flushes: — unavailable: {d.get('why') or 'unknown reason'}."


TRANSPORTS = (("HTTP/1.1", "narad"), ("h2c", "narad-h2"))


def rounds_note(results, clients):
    apart, compared = [], 0
    for c in clients:
        for name, prefix in TRANSPORTS:
            ratios = [ratio(rget(results, prefix, c, r, "msgs_per_sec"),
                            rget(results, "redis", c, r, "msgs_per_sec")) for r in ROUNDS]
            if None in ratios or 0 in ratios:
                continue
            compared += 1
            if max(ratios) > 1.2 * min(ratios):
                apart.append(f"{c} clients over {name} "
                             f"({' vs '.join(num(x, 2) for x in ratios)})")
    if not compared:
        return "No client level has two rounds with both results to compare."
    if apart:
        return ("The two rounds disagree by more than 20 % on Narad/Redis msg/s at "
                + ", ".join(apart) + ": the disk (or the host) changed speed during that level; "
                "read those ratios with the probe column beside them.")
    return ("The two rounds agree within 20 % on Narad/Redis msg/s at every client level, over "
            "both transports.")


def h2c_note(results, clients):
    runs = [results[k] for c in clients for r in ROUNDS
            if (k := run_key(results, "narad-h2", c, r)) in results]
    errors = sum(run.get("errors") or 0 for run in runs)
    failed = [k for c in clients for r in ROUNDS
              if (k := run_key(results, "narad-h2", c, r)) in results
              and results[k].get("msgs_per_sec") is None]
    text = ("Narad h2c: the same produce with the same number of requests in flight (C), "
            "multiplexed as 16 HTTP/2 streams on each of max(1, C/16) connections (h2c, prior "
            "knowledge, on the same plain-text port), driven by `h2load` (nghttp2's C client, one "
            "thread) rather than `narad bench`, at 16 clients and more. Each run is sized to last "
            "about as long as the others by a 1.5 s calibration run just before it (also its "
            "warm-up). msg/s = 2xx responses / h2load's elapsed time; server CPU = utime + stime of "
            "narad in `/proc/PID/stat` around the measured run / its 2xx responses; device flushes "
            "/ records accepted by narad over the same run. h2load reports only the mean, min and "
            "max time per request, not percentiles: its p50/p99 are not available, so the h2c "
            "column shows the mean (the max is under Every run). The /healthz ceiling is "
            "narad bench's over HTTP/1.1 and has no h2c counterpart.")
    if not runs:
        return text + " This run has no h2c results."
    if failed:
        text += f" No result from h2load in {', '.join(failed)}."
    if errors:
        text += f" h2load counted {num(errors)} requests without a 2xx answer in all."
    return text


def svg_chart(results, clients):
    width, height = 680, 380
    left, right, top, bottom = 80, 170, 40, 60
    series = [
        ("Narad produce (202 after fsync)", "narad", "#1f77b4"),
        ("Narad produce over h2c (h2load)", "narad-h2", "#2ca02c"),
        ("Redis XADD, appendfsync always", "redis", "#d62728"),
        ("Narad GET /healthz (HTTP ceiling)", "healthz", "#7f7f7f"),
    ]

    def runs(prefix, c):  # every round's msg/s of one series at one client level
        if prefix == "healthz":
            values = [healthz(results, c)]
        else:
            values = [rget(results, prefix, c, r, "msgs_per_sec") for r in ROUNDS]
        return [v for v in values if v]

    values = [v for _, prefix, _ in series for c in clients for v in runs(prefix, c)]
    top_value = max(values + [1]) * 1.1
    step = 10 ** math.floor(math.log10(top_value))
    if top_value / step < 3:
        step /= 2
    logs = [math.log2(c) for c in clients]
    span = (max(logs) - min(logs)) or 1

    def x(c):
        return left + (math.log2(c) - min(logs)) / span * (width - left - right)

    def y(v):
        return top + (1 - v / top_value) * (height - top - bottom)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{left}" y="22" font-size="14" font-weight="bold">'
           f'Throughput vs concurrent clients (256-byte messages, durable acks)</text>']
    tick = 0.0
    while tick <= top_value:
        out.append(f'<line x1="{left}" x2="{width - right}" y1="{y(tick):.1f}" y2="{y(tick):.1f}" '
                   f'stroke="#e0e0e0"/>')
        out.append(f'<text x="{left - 8}" y="{y(tick) + 4:.1f}" text-anchor="end">'
                   f'{tick / 1000:,.0f}k</text>')
        tick += step
    for c in clients:
        out.append(f'<line x1="{x(c):.1f}" x2="{x(c):.1f}" y1="{top}" y2="{height - bottom}" '
                   f'stroke="#f0f0f0"/>')
        out.append(f'<text x="{x(c):.1f}" y="{height - bottom + 18}" text-anchor="middle">{c}'
                   f'</text>')
    out.append(f'<text x="{(left + width - right) / 2:.0f}" y="{height - 15}" '
               f'text-anchor="middle">concurrent clients (log scale; a dot per round, the line '
               f'through their mean)</text>')
    out.append(f'<text x="18" y="{(top + height - bottom) / 2:.0f}" text-anchor="middle" '
               f'transform="rotate(-90 18 {(top + height - bottom) / 2:.0f})">messages / s</text>')
    for i, (label, prefix, color) in enumerate(series):
        means = [(x(c), y(sum(v) / len(v))) for c in clients if (v := runs(prefix, c))]
        if len(means) > 1:
            path = " ".join(f"{px:.1f},{py:.1f}" for px, py in means)
            out.append(f'<polyline points="{path}" fill="none" stroke="{color}" '
                       f'stroke-width="2"/>')
        for c in clients:
            for v in runs(prefix, c):
                out.append(f'<circle cx="{x(c):.1f}" cy="{y(v):.1f}" r="3.5" fill="{color}"/>')
        ly = top + 10 + i * 36
        out.append(f'<rect x="{width - right + 12}" y="{ly - 9}" width="12" height="12" '
                   f'fill="{color}"/>')
        words = label.split(" ", 2)
        out.append(f'<text x="{width - right + 30}" y="{ly + 1}">{" ".join(words[:2])}</text>')
        if len(words) > 2:
            out.append(f'<text x="{width - right + 30}" y="{ly + 15}">{words[2]}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def verdict(ok):
    if ok is None:
        return "not measured"
    return "**met**" if ok else "**not met**"


def transports_verdict(oks):
    """The verdict of one criterion judged per transport ({name: [ok per run]}): met if every run of
    some transport met it, saying which; each transport's own verdict beside it."""
    each = {name: both_rounds(runs) for name, runs in oks.items()}
    met = [name for name, ok in each.items() if ok]
    others = "; ".join(f"{name}: {verdict(ok)}" for name, ok in each.items() if not ok)
    if met:
        return f"**met** over {' and '.join(met)}" + (f" ({others})" if others else "")
    if all(ok is None for ok in each.values()):
        return "not measured"
    return f"**not met** ({others})"


def acceptance(results):
    lines = []

    # 1. 64 and 256 clients: throughput and server CPU per message against Redis, every round,
    # judged for each transport (HTTP/1.1 by narad bench, h2c by h2load).
    oks, subs = {name: [] for name, _ in TRANSPORTS}, []
    for c in (64, 256):
        for r in ROUNDS:
            redis = rget(results, "redis", c, r, "msgs_per_sec")
            rcpu = rget(results, "redis", c, r, "server_cpu_us_per_msg")
            parts = []
            for name, prefix in TRANSPORTS:
                narad = rget(results, prefix, c, r, "msgs_per_sec")
                ncpu = rget(results, prefix, c, r, "server_cpu_us_per_msg")
                vs = ratio(narad, redis)
                ok = (None if vs is None or ncpu is None or rcpu is None
                      else vs >= 1.2 and ncpu <= rcpu)
                oks[name].append(ok)
                parts.append(f"{name} {num(narad)} vs {num(redis)} msg/s = {num(vs, 2)} × Redis, "
                             f"server CPU {num(ncpu, 1)} vs {num(rcpu, 1)} µs/msg = "
                             f"{num(ratio(ncpu, rcpu), 2)} × — {verdict(ok)}")
            subs.append(f"   - {c} clients, round {r}: " + "; ".join(parts))
    lines.append("1. 64 and 256 clients: Narad ≥ 1.2 × Redis (appendfsync always) msg/s and "
                 "server CPU per message ≤ Redis's, in both rounds — "
                 f"{transports_verdict(oks)}")
    lines += subs

    # 2. 1 client against the serialized fdatasync probe of the same round.
    oks, subs = [], []
    for r in ROUNDS:
        probe = rget(results, "probe", 1, r, "ops_per_sec")
        narad = rget(results, "narad", 1, r, "msgs_per_sec")
        vs = ratio(narad, probe)
        ok = None if vs is None else vs >= 0.8
        oks.append(ok)
        subs.append(f"   - round {r}: {num(narad)} msg/s vs probe {num(probe)}/s = "
                    f"{num(vs, 2)} × — {verdict(ok)}")
    lines.append("2. 1 client ≥ 0.8 × the serialized write + fdatasync probe run just before it, "
                 f"in both rounds — {verdict(both_rounds(oks))}")
    lines += subs

    # 3. Device flushes per message at 256 clients against Redis's, for each transport.
    oks, subs = {name: [] for name, _ in TRANSPORTS}, []
    for r in ROUNDS:
        redis = rget(results, "redis", 256, r, "device_flushes_per_msg")
        parts = []
        for name, prefix in TRANSPORTS:
            narad = rget(results, prefix, 256, r, "device_flushes_per_msg")
            vs = ratio(narad, redis)
            ok = None if narad is None or redis is None else narad <= 1.5 * redis
            oks[name].append(ok)
            parts.append(f"{name} {num(narad, 4)} vs Redis {num(redis, 4)} flushes/msg = "
                         f"{num(vs, 2)} × — {verdict(ok)}")
        subs.append(f"   - round {r}: " + "; ".join(parts) + "; Narad's own fsyncs/msg "
                    f"(WAL+partition, HTTP/1.1 run) {fsyncs_wal_partition(results, 256, r)}")
    device = results.get("device") or {}
    why = "" if device.get("stat") or "device" not in results else \
        f" (no device counter: {device.get('why')})"
    lines.append("3. device flushes per message at 256 clients ≤ 1.5 × Redis's, in both rounds — "
                 f"{transports_verdict(oks)}{why}")
    lines += subs

    # 4. Visibility latency, batch produce, memory.
    v = results.get("visible-64") or {}
    p50, p99 = v.get("visible_p50_ms"), v.get("visible_p99_ms")
    ok_visible = None if p50 is None or p99 is None else p50 <= 10 and p99 <= 50
    batch = get(results, "batch-64", "msgs_per_sec")
    singles = [rget(results, "narad", 64, r, "msgs_per_sec") for r in ROUNDS]
    singles = [s for s in singles if s]
    single = max(singles) if singles else None
    vs = ratio(batch, single)
    ok_batch = None if batch is None or vs is None else batch >= 250_000 and vs >= 5
    rss_runs = {key: r.get("rss_max_mib") for key, r in results.items()
                if key.startswith(("narad-", "healthz-", "batch-", "visible-"))
                and r.get("rss_max_mib") is not None}
    rss_key = max(rss_runs, key=rss_runs.get) if rss_runs else None
    rss = rss_runs.get(rss_key)
    ok_rss = None if rss is None else rss < 256
    oks = [ok_visible, ok_batch, ok_rss]
    lines.append("4. produce → visible at 64 clients p50 ≤ 10 ms and p99 ≤ 50 ms; batch produce "
                 "≥ 5 × one message per request and ≥ 250,000 msg/s; server RSS under 256 MiB — "
                 f"{verdict(both_rounds(oks))}")
    lines.append(f"   - produce → visible over {num(v.get('duration_s'))} s: p50 {num(p50, 2)} ms, "
                 f"p99 {num(p99, 2)} ms — {verdict(ok_visible)}; it ran at "
                 f"{num(v.get('msgs_per_sec'))} msg/s (probe "
                 f"{num(get(results, 'probe-visible', 'ops_per_sec'))}/s), "
                 f"{num(v.get('visible_missing'))} acknowledged but never read, dispatch backlog "
                 f"max {num(v.get('backlog_max_first_half'))} in the first half, "
                 f"{num(v.get('backlog_max_second_half'))} in the second, "
                 f"{num(v.get('backlog_end'))} at the end")
    lines.append(f"   - batch produce (100 × 256 B, 64 clients): {num(batch)} msg/s = {num(vs, 1)} × "
                 f"one message per request (the better round, {num(single)} msg/s) — "
                 f"{verdict(ok_batch)}")
    lines.append(f"   - server RSS: {num(rss, 1)} MiB at most, in {rss_key or '—'} (over every "
                 f"Narad run; 256 clients: "
                 + " / ".join(num(rget(results, 'narad', 256, r, 'rss_max_mib'), 1)
                              for r in ROUNDS)
                 + f" MiB; visible run: {num(v.get('rss_max_mib'), 1)} MiB) — {verdict(ok_rss)}")
    return "\n".join(lines)


def details(results):
    rows = ["| run | msg/s | errors | p50 ms | p99 ms | p99.9 ms | mean ms | max ms "
            "| server CPU % | client CPU % "
            "| server CPU µs/msg | records/group commit | device flushes/msg | RSS max MiB |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for key, result in results.items():
        if not key.startswith(("narad-", "redis-", "healthz-", "batch-", "visible-")):
            continue
        rows.append(
            f"| {key} | {num(result.get('msgs_per_sec'))} | {num(result.get('errors'))} "
            f"| {num(result.get('p50_ms'), 2)} "
            f"| {num(result.get('p99_ms'), 2)} | {num(result.get('p999_ms'), 2)} "
            f"| {num(result.get('mean_ms'), 2)} | {num(result.get('max_ms'), 2)} "
            f"| {num(result.get('server_cpu_pct'))} | {num(result.get('client_cpu_pct'))} "
            f"| {num(result.get('server_cpu_us_per_msg'), 1)} "
            f"| {num(result.get('records_per_group_commit'), 1)} "
            f"| {num(result.get('device_flushes_per_msg'), 4)} "
            f"| {num(result.get('rss_max_mib'), 1)} |")
    probes = [f"{key}: {num(r.get('ops_per_sec'))}/s (p50 {num(r.get('p50_ms'), 3)} ms)"
              for key, r in results.items() if key.startswith("probe-")]
    wrk = get(results, "wrk-healthz-64", "msgs_per_sec")
    return ("\n".join(rows) + "\n\nRedis runs: server CPU from `/proc/PID/stat` of redis-server "
            "around the measured run only; p99.9, client CPU and RSS are not measured there. "
            "narad-h2-C-rR: Narad produce over h2c driven by h2load (C streams in flight over "
            "max(1, C/16) connections); h2load gives the mean and max time per request but no "
            "percentiles (p50/p99/p99.9: not available), and client CPU, RSS and group commits "
            "are not measured there; errors = requests without a 2xx answer."
            "\n\nfsync probes, in run order: " + "; ".join(probes)
            + f".\n\nwrk (1 thread, 64 connections) against the same /healthz: {num(wrk)} req/s "
            f"(narad bench at 64: {num(get(results, 'healthz-64', 'msgs_per_sec'))} req/s).")


def kept_block(out_path, begin, end, default):
    """The block between `begin` and `end` of the existing doc (hand-written), or `default`."""
    if os.path.exists(out_path):
        with open(out_path) as f:
            old = f.read()
        m = re.search(re.escape(begin) + r".*?" + re.escape(end), old, re.S)
        if m:
            return m.group(0)
    return f"{begin}\n{default}\n{end}"


def micro_section(micro_path, out_path):
    text = ""
    if micro_path and os.path.exists(micro_path):
        with open(micro_path) as f:
            text = f.read().strip()
    if text:
        return (f"{MICRO_BEGIN}\nOutput of `cargo bench -p narad-core --bench hot_paths` "
                f"(divan, same machine):\n\n```\n{text}\n```\n{MICRO_END}")
    return kept_block(out_path, MICRO_BEGIN, MICRO_END,
                      "Not run yet: `MICRO=1 scripts/bench-peers.sh`, or "
                      "`cargo bench -p narad-core --bench hot_paths`.")


def main():
    results_path, machine_path, micro_path, out_path, command, clients = sys.argv[1:7]
    clients = [int(c) for c in clients.split()]
    results = load(results_path)
    with open(machine_path) as f:
        machine = f.read().strip()
    stem = out_path[:-3] if out_path.endswith(".md") else out_path
    svg_path, raw_path = stem + "-throughput.svg", stem + "-results.jsonl"
    with open(results_path) as src, open(raw_path, "w") as dst:
        dst.write(src.read())
    with open(svg_path, "w") as f:
        f.write(svg_chart(results, clients))
    doc = f"""# Benchmarks

Narad side by side with Redis and with its own HTTP ceiling, on one machine, in one run of
`scripts/bench-peers.sh` (`make bench-peers`). Every system acknowledges a message only once it is
on disk: Narad answers 202 after the WAL group commit's `fdatasync`; Redis runs with
`appendonly yes`, `appendfsync always`. Same load shape everywhere: 256-byte messages, closed-loop
clients on keep-alive connections, loopback. Narad is driven by `narad bench` (one thread, bare
HTTP/1.1) and, from 16 clients up, also over HTTP/2 (h2c) by `h2load`; Redis by `redis-benchmark`
(`XADD s * f <256 B>`); the ceiling is Narad's own `GET /healthz` driven by the same
`narad bench`, so the client's cost is the same on both sides of that ratio. The disk of this kind
of machine is shared and its speed drifts (a host throttle can cut a serialized fsync from
~7,000/s to ~300/s for tens of seconds), so every client level runs twice, interleaved A B B A
(round 1: Narad, Narad h2c, Redis; `/healthz`; round 2: Redis, Narad h2c, Narad), a serialized
write + `fdatasync` probe runs before each round, and only ratios measured in the same round
count: a throttle window shows as two rounds that disagree.

## Machine and command

```
{machine}
```

Command: `{command}`

## Side by side

Throughput, one row per client level and round:

{table(results, clients)}

{rounds_note(results, clients)}

Cost per message, same runs:

{cost_table(results, clients)}

Server CPU: Narad's from `narad bench --server-pid` (utime + stime of the server over the
measured window); Redis's from utime + stime of redis-server in `/proc/PID/stat` just before and
just after the measured `redis-benchmark` run (not its calibration run), divided by its
requests. Narad's own fsync counters: WAL fsyncs (checkpoints included) + partition-log fsyncs,
per message accepted in the measured window.

{h2c_note(results, clients)}

{device_note(results)}

![Throughput vs clients]({os.path.basename(svg_path)})

## Acceptance (issue 15)

{acceptance(results)}

## Every run

{details(results)}

## Microbenchmarks of the core's hot paths

{micro_section(micro_path, out_path)}

## What moved the numbers, and what is left

{kept_block(out_path, NOTES_BEGIN, NOTES_END, "(hand-written; kept across runs)")}

Raw results of this run (one JSON object per measurement): `{os.path.basename(raw_path)}`.
"""
    with open(out_path, "w") as f:
        f.write(doc)


if __name__ == "__main__":
    main()
