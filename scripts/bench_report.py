#!/usr/bin/env python3
"""Writes docs/benchmarks.md (and its SVG chart) from the results of scripts/bench-peers.sh.

usage: bench_report.py RESULTS.jsonl MACHINE.txt MICRO.txt OUT.md COMMAND "CLIENTS"

RESULTS holds one {"key", "result"} object per line: probe-*, narad-N, redis-N, healthz-N,
batch-64, visible-64, wrk-healthz-64. MICRO (may be missing or empty) is the output of the core's
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


def table(results, clients):
    rows = [
        "| clients | fsync probe /s | Narad produce msg/s | p50 ms | p99 ms | WAL fsyncs/msg "
        "| Redis XADD msg/s | p50 ms | p99 ms | Narad /healthz req/s | Narad/Redis | Narad/ceiling |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in clients:
        narad = get(results, f"narad-{c}", "msgs_per_sec")
        redis = get(results, f"redis-{c}", "msgs_per_sec")
        ceiling = get(results, f"healthz-{c}", "msgs_per_sec")
        rows.append(
            f"| {c} | {num(get(results, f'probe-{c}', 'ops_per_sec'))} | {num(narad)} "
            f"| {num(get(results, f'narad-{c}', 'p50_ms'), 2)} "
            f"| {num(get(results, f'narad-{c}', 'p99_ms'), 2)} "
            f"| {num(get(results, f'narad-{c}', 'fsyncs_per_msg'), 3)} | {num(redis)} "
            f"| {num(get(results, f'redis-{c}', 'p50_ms'), 2)} "
            f"| {num(get(results, f'redis-{c}', 'p99_ms'), 2)} | {num(ceiling)} "
            f"| {num(ratio(narad, redis), 2)} | {num(ratio(narad, ceiling), 2)} |"
        )
    return "\n".join(rows)


def svg_chart(results, clients):
    width, height = 680, 380
    left, right, top, bottom = 80, 170, 40, 60
    series = [
        ("Narad produce (202 after fsync)", "narad", "#1f77b4"),
        ("Redis XADD, appendfsync always", "redis", "#d62728"),
        ("Narad GET /healthz (HTTP ceiling)", "healthz", "#7f7f7f"),
    ]
    values = [get(results, f"{prefix}-{c}", "msgs_per_sec") for _, prefix, _ in series
              for c in clients]
    top_value = max([v for v in values if v] + [1]) * 1.1
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
               f'text-anchor="middle">concurrent clients (log scale)</text>')
    out.append(f'<text x="18" y="{(top + height - bottom) / 2:.0f}" text-anchor="middle" '
               f'transform="rotate(-90 18 {(top + height - bottom) / 2:.0f})">messages / s</text>')
    for i, (label, prefix, color) in enumerate(series):
        points = [(x(c), y(v)) for c in clients
                  if (v := get(results, f"{prefix}-{c}", "msgs_per_sec"))]
        if len(points) > 1:
            path = " ".join(f"{px:.1f},{py:.1f}" for px, py in points)
            out.append(f'<polyline points="{path}" fill="none" stroke="{color}" '
                       f'stroke-width="2"/>')
        for px, py in points:
            out.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3.5" fill="{color}"/>')
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


def acceptance(results):
    lines = []
    probe1 = get(results, "probe-1", "ops_per_sec")
    narad1 = get(results, "narad-1", "msgs_per_sec")
    r = ratio(narad1, probe1)
    lines.append(f"1. 1 client ≥ 0.8 × serialized fdatasync: {num(narad1)} msg/s vs probe "
                 f"{num(probe1)}/s = {num(r, 2)} × — {verdict(None if r is None else r >= 0.8)}")
    for c in (64, 256):
        narad = get(results, f"narad-{c}", "msgs_per_sec")
        redis = get(results, f"redis-{c}", "msgs_per_sec")
        ceiling = get(results, f"healthz-{c}", "msgs_per_sec")
        vs_redis, vs_ceiling = ratio(narad, redis), ratio(narad, ceiling)
        ok = None if vs_redis is None or vs_ceiling is None else (vs_redis >= 1.2, vs_ceiling >= 0.6)
        lines.append(f"2. {c} clients: {num(narad)} msg/s = {num(vs_redis, 2)} × Redis "
                     f"({verdict(None if ok is None else ok[0])}, goal 1.2) and "
                     f"{num(vs_ceiling, 2)} × /healthz ({verdict(None if ok is None else ok[1])}, "
                     f"goal 0.6)")
    fsyncs = get(results, "narad-256", "fsyncs_per_msg")
    lines.append(f"2. WAL fsyncs per message at 256 clients: {num(fsyncs, 4)} (goal ≤ 0.02) — "
                 f"{verdict(None if fsyncs is None else fsyncs <= 0.02)}; partition-log fsyncs "
                 f"per message {num(get(results, 'narad-256', 'partition_fsyncs_per_msg'), 4)}")
    batch = get(results, "batch-64", "msgs_per_sec")
    single = get(results, "narad-64", "msgs_per_sec")
    r = ratio(batch, single)
    ok = None if batch is None or r is None else batch >= 250_000 and r >= 5
    lines.append(f"3. batch produce (100 × 256 B, 64 clients): {num(batch)} msg/s = {num(r, 1)} × "
                 f"one message per request (goal ≥ 250,000 and ≥ 5 ×) — {verdict(ok)}")
    v = results.get("visible-64") or {}
    p50, p99 = v.get("visible_p50_ms"), v.get("visible_p99_ms")
    first, second = v.get("backlog_max_first_half"), v.get("backlog_max_second_half")
    bounded = None
    if first is not None and second is not None:
        bounded = second <= 1.5 * first + 1_000 and (v.get("backlog_end") or 0) <= 65_536
    ok = None if p50 is None else p50 <= 10 and p99 <= 50 and bool(bounded)
    lines.append(f"4. produce → visible at 64 clients over {num(v.get('duration_s'))} s: p50 "
                 f"{num(p50, 2)} ms, p99 {num(p99, 2)} ms (goal ≤ 10 / ≤ 50), "
                 f"{num(v.get('visible_missing'))} acknowledged but never read; dispatch backlog "
                 f"max {num(first)} in the first half, {num(second)} in the second, "
                 f"{num(v.get('backlog_end'))} at the end (bounded: second-half max ≤ 1.5 × "
                 f"first-half max + 1,000) — {verdict(ok)}; it ran at {num(v.get('msgs_per_sec'))} "
                 f"msg/s (probe {num(get(results, 'probe-visible', 'ops_per_sec'))}/s)")
    rss = get(results, "narad-256", "rss_max_mib")
    lines.append(f"5. server RSS under 256 clients: {num(rss, 1)} MiB max (goal < 256) — "
                 f"{verdict(None if rss is None else rss < 256)}; during the 60 s visible run "
                 f"{num(v.get('rss_max_mib'), 1)} MiB")
    lines.append("6. this file: table, chart, machine and command — **met**")
    return "\n".join(lines)


def details(results):
    rows = ["| run | msg/s | p50 ms | p99 ms | p99.9 ms | server CPU % | client CPU % "
            "| server CPU µs/msg | records/group commit | RSS max MiB |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for key, result in results.items():
        if not key.startswith(("narad-", "healthz-", "batch-", "visible-")):
            continue
        rows.append(
            f"| {key} | {num(result.get('msgs_per_sec'))} | {num(result.get('p50_ms'), 2)} "
            f"| {num(result.get('p99_ms'), 2)} | {num(result.get('p999_ms'), 2)} "
            f"| {num(result.get('server_cpu_pct'))} | {num(result.get('client_cpu_pct'))} "
            f"| {num(result.get('server_cpu_us_per_msg'), 1)} "
            f"| {num(result.get('records_per_group_commit'), 1)} "
            f"| {num(result.get('rss_max_mib'), 1)} |")
    probes = [f"{key}: {num(r.get('ops_per_sec'))}/s (p50 {num(r.get('p50_ms'), 3)} ms)"
              for key, r in results.items() if key.startswith("probe-")]
    wrk = get(results, "wrk-healthz-64", "msgs_per_sec")
    return ("\n".join(rows) + "\n\nfsync probes, in run order: " + "; ".join(probes)
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
HTTP/1.1), Redis by `redis-benchmark` (`XADD s * f <256 B>`); the ceiling is Narad's own
`GET /healthz` driven by the same `narad bench`, so the client's cost is the same on both sides of
that ratio. The disk of this kind of machine is shared and its speed drifts (a host throttle can
cut a serialized fsync from ~7,000/s to ~300/s for tens of seconds), so a serialized
write + `fdatasync` probe runs before every client level and only ratios measured together count.

## Machine and command

```
{machine}
```

Command: `{command}`

## Side by side

{table(results, clients)}

![Throughput vs clients]({os.path.basename(svg_path)})

## Acceptance (issue 5)

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
