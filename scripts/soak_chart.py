#!/usr/bin/env python3
"""The soak benchmark's report (scripts/bench-soak.sh), standard library only: reads the CSV of
scripts/soak_sample.py and the run's settings, checks the bounds, writes an SVG chart of disk use
over time and a Markdown page with the figures. Exits 1 if a bound is broken, 2 on bad input.

Bounds:
  - enough was produced for retention to matter: the bytes written to partition logs (what the
    disk held at the end plus what retention deleted) are at least 5 x retention_bytes x partitions;
  - no partition's segment files ever held more than retention_bytes + 2 segments.

usage: soak_chart.py CSV SETTINGS.json BENCH.json MACHINE.txt NODE.log OUT.svg OUT.md COMMAND
"""

import csv
import json
import math
import os
import sys

MIB = 1024 * 1024
COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22"]


def load_rows(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        sys.exit(f"soak_chart: {path} has no samples")
    return rows


def column(rows, name, scale=1.0):
    """(t, value) pairs of a column, skipping empty cells."""
    return [(float(r["t_s"]), float(r[name]) / scale) for r in rows if r.get(name) not in ("", None)]


def nice_step(top):
    """A round tick step giving about 4 to 10 ticks up to `top`."""
    step = 10 ** math.floor(math.log10(top)) if top > 0 else 1
    if top / step < 2:
        step /= 5
    elif top / step < 5:
        step /= 2
    return step


def panel(out, box, series, x_max, y_max, y_label, hlines=()):
    """One chart panel: `series` are (label, color, points, dashed), `hlines` (label, color, y;
    None: a second legend line for the one before)."""
    left, top, right, bottom = box
    def x(t):
        return left + t / x_max * (right - left)
    def y(v):
        return bottom - v / y_max * (bottom - top)
    step = nice_step(y_max)
    tick = 0.0
    while tick <= y_max + 1e-9:
        out.append(f'<line x1="{left}" x2="{right}" y1="{y(tick):.1f}" y2="{y(tick):.1f}" '
                   f'stroke="#e6e6e6"/>')
        out.append(f'<text x="{left - 6}" y="{y(tick) + 4:.1f}" text-anchor="end">'
                   f'{tick:g}</text>')
        tick += step
    t_step = nice_step(x_max)
    t = 0.0
    while t <= x_max + 1e-9:
        out.append(f'<line x1="{x(t):.1f}" x2="{x(t):.1f}" y1="{top}" y2="{bottom}" '
                   f'stroke="#f2f2f2"/>')
        out.append(f'<text x="{x(t):.1f}" y="{bottom + 15}" text-anchor="middle">{t:g}</text>')
        t += t_step
    mid = (top + bottom) / 2
    out.append(f'<text x="{left - 48}" y="{mid:.0f}" text-anchor="middle" '
               f'transform="rotate(-90 {left - 48} {mid:.0f})">{y_label}</text>')
    for label, color, level in hlines:
        if level is None:
            continue  # a legend line only
        out.append(f'<line x1="{left}" x2="{right}" y1="{y(level):.1f}" y2="{y(level):.1f}" '
                   f'stroke="{color}" stroke-width="1.5" stroke-dasharray="8 4"/>')
    for label, color, points, dashed in series:
        if not points:
            continue
        path = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in points)
        dash = ' stroke-dasharray="2 3"' if dashed else ""
        out.append(f'<polyline points="{path}" fill="none" stroke="{color}" '
                   f'stroke-width="1.6"{dash}/>')
    legend = [(label, color, ' stroke-dasharray="2 3"' if dashed else "")
              for label, color, _, dashed in series]
    legend += [(label, color, ' stroke-dasharray="8 4"') for label, color, _ in hlines]
    for i, (label, color, dash) in enumerate(legend):
        ly = top + 12 + i * 17
        out.append(f'<line x1="{right + 12}" x2="{right + 30}" y1="{ly - 4}" y2="{ly - 4}" '
                   f'stroke="{color}" stroke-width="2"{dash}/>')
        out.append(f'<text x="{right + 36}" y="{ly}">{label}</text>')


def svg_chart(rows, settings, bound):
    partitions = settings["partitions"]
    width, height = 960, 720
    left, right = 80, 700
    x_max = max(float(rows[-1]["t_s"]), 1.0)
    disk = [(f"partition {i}", COLORS[i % len(COLORS)], column(rows, f"p{i}_bytes", MIB), False)
            for i in range(partitions)]
    peaks = [max(float(r[f"p{i}_max_bytes"]) for i in range(partitions)) / MIB for r in rows]
    disk.append(("peak since the last sample", "#000000",
                 list(zip((float(r["t_s"]) for r in rows), peaks)), True))
    top_disk = max([v for _, _, pts, _ in disk for _, v in pts] + [bound / MIB]) * 1.15
    wal = column(rows, "wal_bytes", MIB)
    rss = column(rows, "rss_bytes", MIB)
    rate = column(rows, "msgs_per_sec", 1000.0)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{left}" y="22" font-size="14" font-weight="bold">Soak: disk use per '
           f'partition under retention_bytes = {settings["retention_bytes"] / MIB:g} MiB, '
           f'{settings["segment_bytes"] / MIB:g} MiB segments, {settings["clients"]} clients</text>']
    panel(out, (left, 40, right, 330), disk, x_max, top_disk, "MiB of segment files",
          [(f"bound {bound / MIB:g} MiB (retention_bytes", "#d62728", bound / MIB),
           ("  + 2 segments)", "white", None),
           (f"retention_bytes {settings['retention_bytes'] / MIB:g} MiB", "#999999",
            settings["retention_bytes"] / MIB)])
    top_wal = max([v for _, v in wal] + [1.0]) * 1.15
    panel(out, (left, 370, right, 500), [("WAL directory (MiB)", "#7f7f7f", wal, False)],
          x_max, top_wal, "MiB of WAL")
    top_low = max([v for _, v in rss] + [v for _, v in rate] + [1.0]) * 1.15
    panel(out, (left, 540, right, 680),
          [("server RSS (MiB)", "#000000", rss, False),
           ("produced (k msg/s)", "#17becf", rate, False)],
          x_max, top_low, "MiB · k msg/s")
    out.append(f'<text x="{(left + right) / 2:.0f}" y="{height - 8}" text-anchor="middle">'
               f'seconds into the run (a sample every {settings["every"]:g} s)</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def passes(log_path):
    """Retention's deletions in the node's log, per partition, grouped into passes (deletions
    of one partition less than 0.5 s apart: a pass deletes one segment after another within
    milliseconds, and passes are a second apart). Returns (seconds between consecutive passes
    that deleted something, segments deleted by each pass), or None without a log."""
    import datetime
    import re
    try:
        with open(log_path, errors="replace") as f:
            lines = [line for line in f if "retention: deleted a sealed segment" in line]
    except FileNotFoundError:
        return None
    by_partition = {}
    for line in lines:
        match = re.search(r"partition=(\S+)", line)
        try:
            when = datetime.datetime.fromisoformat(line.split()[0].replace("Z", "+00:00"))
        except (ValueError, IndexError):
            continue
        if match:
            by_partition.setdefault(match.group(1), []).append(when.timestamp())
    gaps, sizes = [], []
    for times in by_partition.values():
        bursts = []
        for t in sorted(times):
            if bursts and t - bursts[-1][-1] < 0.5:
                bursts[-1].append(t)
            else:
                bursts.append([t])
        gaps += [b[0] - a[0] for a, b in zip(bursts, bursts[1:])]
        sizes += [len(b) for b in bursts]
    return (gaps, sizes) if gaps else None


def at_or_before(points, t):
    """The last value sampled at or before t (else the first)."""
    chosen = points[0][1] if points else None
    for when, value in points:
        if when <= t:
            chosen = value
    return chosen


def figures(rows, settings, bench):
    partitions = settings["partitions"]
    last = rows[-1]
    on_disk_end = sum(int(last[f"p{i}_bytes"]) for i in range(partitions))
    deleted = int(last["retention_bytes_deleted"] or 0)
    # The most each partition held: at a row, or at one of the looks between two rows.
    per_partition = [max(int(r[f"p{i}_max_bytes"]) for r in rows) for i in range(partitions)]
    at_rows = [max(int(r[f"p{i}_bytes"]) for r in rows) for i in range(partitions)]
    peak_row = max(rows, key=lambda r: max(int(r[f"p{i}_max_bytes"]) for i in range(partitions)))
    rss = column(rows, "rss_bytes")
    duration = float(last["t_s"])
    early_t = 120.0 if duration >= 240 else duration / 2
    rates = [v for _, v in column(rows, "msgs_per_sec")]
    # Bytes written to the partition logs so far, at each row, and their rate per partition.
    written = [(float(r["t_s"]), int(r["retention_bytes_deleted"] or 0)
                + sum(int(r[f"p{i}_bytes"]) for i in range(partitions))) for r in rows]
    write_rates = [(b1 - b0) / (t1 - t0) / partitions
                   for (t0, b0), (t1, b1) in zip(written, written[1:]) if t1 > t0]
    return {
        "write_rate_mean": sum(write_rates) / len(write_rates) if write_rates else 0.0,
        "write_rate_max": max(write_rates, default=0.0),
        "samples": len(rows),
        "duration_s": duration,
        "written": on_disk_end + deleted,
        "on_disk_end": on_disk_end,
        "deleted": deleted,
        "segments_deleted": int(last["segments_deleted"] or 0),
        "records_accepted": int(float(last["records_accepted"] or 0)),
        "per_partition_max": per_partition,
        "per_partition_max_at_rows": at_rows,
        "peak_t": float(peak_row["t_s"]),
        "max_segments": max(int(r[f"p{i}_segments"]) for r in rows for i in range(partitions)),
        "wal_max": max(int(r["wal_bytes"]) for r in rows),
        "rss_early_t": early_t,
        "rss_early": at_or_before(rss, early_t),
        "rss_end": rss[-1][1] if rss else None,
        "rss_max": max((v for _, v in rss), default=None),
        "rate_mean": sum(rates) / len(rates) if rates else None,
        "rate_min": min(rates, default=None),
        "rate_max": max(rates, default=None),
        "bench": bench,
    }


def pass_row(found):
    if not found:
        return "| Retention passes (from the node's log) | no log | | |"
    gaps, sizes = sorted(found[0]), found[1]
    median = gaps[len(gaps) // 2]
    return (f"| Retention passes that deleted, per partition (node log) | {len(sizes):,}; "
            f"seconds between two: median {median:.2f}, max {gaps[-1]:.2f}; segments deleted "
            f"by one pass: mean {sum(sizes) / len(sizes):.1f}, max {max(sizes)} | | |")


def mib(n):
    return "n/a" if n is None else f"{n / MIB:.2f} MiB"


def markdown(f, settings, bound, checks, svg_name, machine, command):
    partitions, retention = settings["partitions"], settings["retention_bytes"]
    bench = f["bench"] or {}
    lines = [
        "# Soak: disk use under retention_bytes",
        "",
        f"Written by `{command}` (scripts/bench-soak.sh, scripts/soak_sample.py, "
        "scripts/soak_chart.py). Do not edit by hand except the notes at the end: "
        "rerun the script.",
        "",
        f"One node (`--partition-segment-bytes {settings['segment_bytes']}`), a topic of "
        f"{partitions} partitions with `retention_bytes` {retention} ({retention / MIB:g} MiB) and "
        f"`retention_ms` {settings['retention_ms']} (so only the size limit acts), loaded by "
        f"`narad bench` with {settings['clients']} clients of {settings['payload']}-byte "
        f"single-message produces for {settings['duration']} s. Every {settings['every']:g} s "
        "the sampler read each partition's segment files from the filesystem (not the API), "
        "the WAL directory, the server's VmRSS and the accepted-records counter; between two "
        "samples it looked at the partitions' files every 0.5 s for their peak, which is "
        "what the bound is checked against (the chart shows the 5 s samples).",
        "",
        f"![Disk use per partition over time]({svg_name})",
        "",
        "| Figure | Value | Bound | |",
        "|---|---|---|---|",
        f"| Duration (sampled) | {f['duration_s']:.0f} s, {f['samples']} samples | | |",
        f"| Records accepted | {f['records_accepted']:,} | | |",
        f"| Produced msg/s (5 s windows) | mean {f['rate_mean'] or 0:,.0f}, min "
        f"{f['rate_min'] or 0:,.0f}, max {f['rate_max'] or 0:,.0f} | | |",
        f"| Bytes written to partition logs (on disk at the end + deleted by retention) | "
        f"{mib(f['written'])} | ≥ 5 × retention_bytes × partitions = "
        f"{mib(5 * retention * partitions)} ({f['written'] / (retention * partitions):.1f}×) | "
        f"{'ok' if checks['written'] else '**BROKEN**'} |",
        f"| Max bytes on disk of one partition (looked at every 0.5 s) | "
        f"{mib(max(f['per_partition_max']))} (in the 5 s before {f['peak_t']:.0f} s; per "
        f"partition: {', '.join(mib(n) for n in f['per_partition_max'])}; at the 5 s samples "
        f"only: {mib(max(f['per_partition_max_at_rows']))}) | ≤ retention_bytes + 2 segments "
        f"= {mib(bound)} | {'ok' if checks['bound'] else '**BROKEN**'} |",
        f"| Bytes written per partition per second (5 s windows) | mean "
        f"{mib(f['write_rate_mean'])}/s, max {mib(f['write_rate_max'])}/s | | |",
        f"| What the 1 s pass lets a partition reach: retention_bytes + 1 segment + the mean "
        f"rate x 1 s | {mib(retention + settings['segment_bytes'] + f['write_rate_mean'])} | | "
        f"(see the notes) |",
        f"| Max segment files of one partition (at the 5 s samples) | {f['max_segments']} | | |",
        pass_row(f["passes"]),
        f"| Segments deleted by retention | {f['segments_deleted']:,} ({mib(f['deleted'])}) | | |",
        f"| Max WAL directory bytes | {mib(f['wal_max'])} | | |",
        f"| Server RSS at {f['rss_early_t']:.0f} s / at the end / max | {mib(f['rss_early'])} / "
        f"{mib(f['rss_end'])} / {mib(f['rss_max'])} | | |",
        f"| narad bench: acked, errors, p50 / p99 | {bench.get('acked', 'n/a')}, "
        f"{bench.get('errors', 'n/a')}, {bench.get('p50_ms', 'n/a')} / "
        f"{bench.get('p99_ms', 'n/a')} ms | | |",
        "",
        "## Machine",
        "",
        "```",
        machine.rstrip(),
        "```",
        "",
    ]
    return "\n".join(lines)


def kept_notes(path):
    """The hand-written notes section of an earlier report, kept across reruns."""
    marker = "## Notes"
    try:
        with open(path) as f:
            text = f.read()
    except FileNotFoundError:
        return None
    at = text.find(marker)
    return text[at:] if at >= 0 else None


def main():
    if len(sys.argv) != 9:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    csv_path, settings_path, bench_path, machine_path, log_path, svg_path, md_path, command = \
        sys.argv[1:9]
    rows = load_rows(csv_path)
    with open(settings_path) as s:
        settings = json.load(s)
    try:
        with open(bench_path) as b:
            bench = json.load(b)
    except (FileNotFoundError, json.JSONDecodeError):
        bench = None
    with open(machine_path) as m:
        machine = m.read()
    bound = settings["retention_bytes"] + 2 * settings["segment_bytes"]
    f = figures(rows, settings, bench)
    f["passes"] = passes(log_path)
    checks = {
        "written": f["written"] >= 5 * settings["retention_bytes"] * settings["partitions"],
        "bound": max(f["per_partition_max"]) <= bound,
    }
    os.makedirs(os.path.dirname(svg_path) or ".", exist_ok=True)
    with open(svg_path, "w") as out:
        out.write(svg_chart(rows, settings, bound))
    notes = kept_notes(md_path) or (
        "## Notes\n\n(The run's conditions, e.g. what else the machine was doing.)\n")
    with open(md_path, "w") as out:
        out.write(markdown(f, settings, bound, checks, os.path.basename(svg_path), machine,
                           command))
        out.write("\n" + notes)
    for name, ok in checks.items():
        print(f"soak: {name}: {'ok' if ok else 'BROKEN'}", file=sys.stderr)
    print(f"soak: written {mib(f['written'])} (need {mib(5 * settings['retention_bytes'] * settings['partitions'])}), "
          f"max partition {mib(max(f['per_partition_max']))} (bound {mib(bound)}), WAL max "
          f"{mib(f['wal_max'])}, RSS {mib(f['rss_early'])} at {f['rss_early_t']:.0f} s -> "
          f"{mib(f['rss_end'])} at the end", file=sys.stderr)
    sys.exit(0 if all(checks.values()) else 1)


if __name__ == "__main__":
    main()
