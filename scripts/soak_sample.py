#!/usr/bin/env python3
"""Samples a running narad node for the soak benchmark (scripts/bench-soak.sh), standard library
only. Every EVERY seconds until the load process exits (or UNTIL seconds pass), one CSV row:

    t_s, rss_bytes, wal_bytes, msgs_per_sec, records_accepted, retention_bytes_deleted,
    segments_deleted, p<i>_bytes, p<i>_segments, p<i>_max_bytes (for every partition i)

Partition bytes are the sizes of that partition's segment files (`<p>.log`, `<p>-<base>.log`)
as the filesystem reports them, not the API's numbers (p<i>_max_bytes: the most seen by a look
every POLL seconds since the previous row, so a peak between two rows is not missed); WAL bytes are the files in <data>/wal/;
RSS is VmRSS of the server from /proc; msg/s is the change of narad_records_accepted_total
since the previous row over the time between the two scrapes' answers.

usage: soak_sample.py DATA_DIR URL SERVER_PID LOAD_PID PARTITIONS EVERY OUT.csv
"""

import csv
import os
import re
import sys
import time
import urllib.request

POLL = 0.5
SEGMENT = re.compile(r"^(\d{5})(?:-(\d{20}))?\.log$")


def partition_files(data_dir, partitions):
    """(bytes, segment files) of each partition, from the filesystem."""
    sizes = [0] * partitions
    counts = [0] * partitions
    root = os.path.join(data_dir, "partitions")
    try:
        topics = list(os.scandir(root))
    except FileNotFoundError:
        return sizes, counts
    for topic in topics:
        if not topic.is_dir():
            continue
        try:
            files = list(os.scandir(topic.path))
        except FileNotFoundError:
            continue  # the topic was deleted meanwhile
        for entry in files:
            match = SEGMENT.match(entry.name)
            if not match or int(match.group(1)) >= partitions:
                continue
            try:
                size = entry.stat().st_size
            except FileNotFoundError:
                continue  # retention deleted it between the listing and the stat
            p = int(match.group(1))
            sizes[p] += size
            counts[p] += 1
    return sizes, counts


def dir_bytes(path):
    total = 0
    try:
        for entry in os.scandir(path):
            try:
                if entry.is_file():
                    total += entry.stat().st_size
            except FileNotFoundError:
                pass
    except FileNotFoundError:
        pass
    return total


def rss_bytes(pid):
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except FileNotFoundError:
        pass
    return None


def metrics(url):
    """The node's unlabelled metrics (None if /metrics did not answer in 10 s)."""
    try:
        with urllib.request.urlopen(url + "/metrics", timeout=10) as answer:
            text = answer.read().decode()
    except OSError:
        return None
    values = {}
    for line in text.splitlines():
        if line.startswith("#") or "{" in line or " " not in line:
            continue
        name, value = line.rsplit(" ", 1)
        try:
            values[name] = float(value)
        except ValueError:
            pass
    return values


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie child of the shell still answers kill -0: look at its state.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def main():
    data_dir, url, server_pid, load_pid, partitions, every, out = sys.argv[1:8]
    server_pid, load_pid, partitions = int(server_pid), int(load_pid), int(partitions)
    every = float(every)
    header = ["t_s", "rss_bytes", "wal_bytes", "msgs_per_sec", "records_accepted",
              "retention_bytes_deleted", "segments_deleted"]
    header += [f"p{i}_bytes" for i in range(partitions)]
    header += [f"p{i}_segments" for i in range(partitions)]
    header += [f"p{i}_max_bytes" for i in range(partitions)]
    start = time.monotonic()
    last = None  # (time, records accepted) of the previous row
    with open(out, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        next_at = start
        peaks = [0] * partitions  # the most each partition held since the previous row
        while True:
            sizes, counts = partition_files(data_dir, partitions)
            peaks = [max(a, b) for a, b in zip(peaks, sizes)]
            m = metrics(url) or {}
            # After the answer: a busy server may take a while to get to the request, and the
            # counter is read when it does (timing from before would skew msg/s).
            now = time.monotonic()
            accepted = m.get("narad_records_accepted_total")
            rate = ""
            if accepted is not None and last is not None:
                rate = f"{(accepted - last[1]) / (now - last[0]):.1f}"
            if accepted is not None:
                last = (now, accepted)
            row = [f"{now - start:.1f}", rss_bytes(server_pid) or "",
                   dir_bytes(os.path.join(data_dir, "wal")), rate,
                   int(accepted) if accepted is not None else "",
                   int(m.get("narad_retention_bytes_deleted_total", 0)),
                   int(m.get("narad_retention_segments_deleted_total", 0))]
            writer.writerow(row + sizes + counts + peaks)
            f.flush()
            next_at += every
            peaks = [0] * partitions
            while time.monotonic() < next_at and alive(load_pid):
                time.sleep(min(POLL, max(0.0, next_at - time.monotonic())))
                peaks = [max(a, b) for a, b in zip(peaks, partition_files(data_dir, partitions)[0])]
            if not alive(load_pid):
                break


if __name__ == "__main__":
    main()
