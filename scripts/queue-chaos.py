#!/usr/bin/env python3
"""Queue-consumer acceptance run on real processes, with a kill -9 of a partition owner.

Starts a 3-node cluster from a prebuilt binary, creates topic `chaos`, runs N producers (unique
payloads "p{producer}-{seq}", round-robin over the nodes) and M queue consumers (receive max=10
wait=1s, batch ack) for --duration seconds, kill -9s a node that owns partitions at --kill-at and
restarts it --restart-after seconds later with the same flags and data dir (or, with --leave-down,
leaves it down until the drain is over and only then restarts it for a final recovery drain).
Producers stop at --duration; consumers drain until every 202'd produce was acked (204) at least
once, or no new ack for --drain-idle s, or --drain-max s passed.

Checks (exit 1 if (1) or (2) fails):
  (1) every payload whose produce got 202 was acked 204 by some consumer at least once;
  (2) no delivery of a message (partition, offset) whose receive request was sent after an ack of
      that same message had returned 204. Deliveries of the same payload at a *different*
      partition/offset after the other copy was acked are reported separately (producer retry, or
      a broker reroute+replay copy, which the README allows) and do not fail the run.
  (3) duplicates (deliveries beyond the first per payload), by cause.

Usage: python3 scripts/queue-chaos.py [--binary PATH] [--duration 60] [--producers 8]
         [--consumers 8] [--kill-at S] [--kill-node auto|leader|N] [--restart-after 7]
         [--leave-down] [--keep-dir] [--base-port 18000] [--partitions 6] [--visibility-ms 5000]
Only the Python 3 standard library is used. Node logs: <dir>/n<i>.log (kept with --keep-dir or
on failure; the run's records are written there as JSONL too).
"""
import argparse
import atexit
import base64
import collections
import ctypes
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

T0 = time.monotonic()


def now():
    return time.monotonic() - T0


def log(msg):
    print(f"[{now():7.2f}s] {msg}", flush=True)


# ---------------------------------------------------------------------------------------------
# Cluster processes

class Cluster:
    def __init__(self, binary, base_port, workdir, n=3):
        self.binary = binary
        self.workdir = workdir
        self.n = n
        self.http = {i: base_port + i for i in range(1, n + 1)}
        self.rpc = {i: base_port + 10 + i for i in range(1, n + 1)}
        self.procs = {}
        self.logs = {}
        self.secret = os.path.join(workdir, "secret")
        with open(self.secret, "w") as f:
            f.write(os.urandom(32).hex() + "\n")
        os.chmod(self.secret, 0o600)
        self.lock = threading.Lock()

    def args(self, i):
        peers = ",".join(f"{j}=127.0.0.1:{self.rpc[j]}" for j in range(1, self.n + 1))
        return [self.binary, "serve", "--node-id", str(i), "--http", f"127.0.0.1:{self.http[i]}",
                "--cluster", f"127.0.0.1:{self.rpc[i]}", "--peers", peers,
                "--cluster-secret-file", self.secret,
                "--data-dir", os.path.join(self.workdir, f"n{i}")]

    def start(self, i):
        def pdeathsig():
            try:  # SIGTERM the node if this script dies (even by kill -9)
                ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)
            except Exception:
                pass
        lf = open(os.path.join(self.workdir, f"n{i}.log"), "ab")
        lf.write(f"==== queue-chaos: starting node {i} at t={now():.3f}s ====\n".encode())
        lf.flush()
        p = subprocess.Popen(self.args(i), stdout=lf, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, preexec_fn=pdeathsig)
        with self.lock:
            self.procs[i] = p
            self.logs[i] = lf
        log(f"node {i} started pid={p.pid} http=127.0.0.1:{self.http[i]}")
        return p

    def kill9(self, i):
        with self.lock:
            p = self.procs.get(i)
        if p is None or p.poll() is not None:
            return False
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        self.logs[i].write(f"==== queue-chaos: node {i} kill -9 at t={now():.3f}s ====\n".encode())
        self.logs[i].flush()
        log(f"node {i} kill -9 (pid {p.pid})")
        return True

    def stop_all(self):
        with self.lock:
            procs = list(self.procs.items())
        for _, p in procs:
            if p.poll() is None:
                try:
                    p.terminate()
                except Exception:
                    pass
        deadline = time.monotonic() + 10
        for _, p in procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for lf in self.logs.values():
            try:
                lf.close()
            except Exception:
                pass

    def alive(self, i):
        p = self.procs.get(i)
        return p is not None and p.poll() is None


def request(port, method, path, body=None, timeout=10.0):
    """One request on a fresh connection: (status, headers, body bytes) or raises."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        c.request(method, path, body)
        r = c.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        c.close()


def wait_until(what, fn, timeout, interval=0.2):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            ok, last = fn()
            if ok:
                return True
        except Exception as e:  # noqa: BLE001
            last = repr(e)
        time.sleep(interval)
    raise RuntimeError(f"timed out after {timeout}s waiting for {what}; last: {last}")


def wait_ready(cluster, i, timeout=60):
    def f():
        s, _, b = request(cluster.http[i], "GET", "/readyz", timeout=2)
        if not cluster.alive(i):
            raise RuntimeError(f"node {i} exited (see {cluster.workdir}/n{i}.log)")
        return s == 200, (s, b[:200])
    wait_until(f"node {i} /readyz 200", f, timeout)


def port_free(p):
    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
        s = socket.socket(socket.AF_INET, kind)
        if kind == socket.SOCK_STREAM:  # as the node's listener does: TIME_WAIT leftovers are fine
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", p))
        except OSError:
            return False
        finally:
            s.close()
    return True


# ---------------------------------------------------------------------------------------------
# HTTP client with a kept-alive connection per node

class Conn:
    def __init__(self, port, timeout):
        self.port = port
        self.timeout = timeout
        self.c = None

    def send(self, method, path, body=None, headers=None):
        """Returns (sent, status, body). sent=False means the request surely never reached the node
        (connect refused); raises on a failure after the request may have been sent."""
        if self.c is None:
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
            try:
                c.connect()
            except OSError:
                c.close()
                return False, None, None
            self.c = c
        try:
            self.c.request(method, path, body, headers or {})
            r = self.c.getresponse()
            data = r.read()
            if r.getheader("connection", "").lower() == "close":
                self.close()
            return True, r.status, data
        except Exception:
            self.close()
            raise

    def close(self):
        if self.c is not None:
            try:
                self.c.close()
            except Exception:
                pass
            self.c = None


# ---------------------------------------------------------------------------------------------
# Workload

class State:
    def __init__(self):
        self.lock = threading.Lock()
        self.produce_stop = threading.Event()
        self.consume_stop = threading.Event()
        # payload -> dict(producer, seq, attempts, ambiguous, acked_202_at, nodes)
        self.produces = {}
        self.acked_payloads = set()     # payloads with at least one ack 204
        self.last_ack_progress = time.monotonic()
        self.deliveries = []            # dicts, appended under lock
        self.acks = []                  # dicts: handle, payload, partition, offset, status, t
        self.errors = collections.Counter()
        self.produce_end = None


def producer(st, pid, ports, timeout, retry_grace):
    conns = [Conn(p, timeout) for p in ports]
    seq = 0
    nnodes = len(ports)
    while not st.produce_stop.is_set():
        payload = f"p{pid}-{seq}"
        rec = {"producer": pid, "seq": seq, "attempts": [], "ambiguous": False,
               "acked_at": None, "node": None}
        with st.lock:
            st.produces[payload] = rec
        node = (pid + seq) % nnodes
        seq += 1
        backoff = 0.05
        while True:
            t = now()
            outcome = None
            try:
                sent, status, body = conns[node].send("POST", "/v1/topics/chaos/produce",
                                                      payload.encode())
                if not sent:
                    outcome = "refused"
                elif status == 202:
                    outcome = "202"
                elif 500 <= status:
                    outcome = f"{status}"
                    rec["ambiguous"] = True  # README: a 5xx on produce is ambiguous
                else:
                    outcome = f"{status}"
            except Exception as e:  # noqa: BLE001 -- timeout/reset after sending: ambiguous
                outcome = type(e).__name__
                rec["ambiguous"] = True
            rec["attempts"].append((round(t, 4), node + 1, outcome))
            if outcome == "202":
                rec["acked_at"] = now()
                rec["node"] = node + 1
                break
            with st.lock:
                st.errors[f"produce {outcome}"] += 1
            if outcome not in ("refused",) and not outcome.startswith("5") and outcome[0].isdigit():
                break  # a 4xx: definitive refusal, give up on this payload
            if st.produce_stop.is_set() and now() > st.produce_end + retry_grace:
                break  # unresolved: stays ambiguous (or simply never accepted if only refused)
            node = (node + 1) % nnodes
            time.sleep(backoff)
            backoff = min(backoff * 2, 1.0)
    for c in conns:
        c.close()


def decode_payload(m):
    p = m.get("payload")
    enc = m.get("payload_encoding")
    if enc == "base64":
        return base64.b64decode(p).decode("utf-8", "replace")
    if enc == "json" or not isinstance(p, str):
        return json.dumps(p, separators=(",", ":"))
    return p


def consumer(st, cid, ports, timeout, max_n, wait):
    conns = [Conn(p, timeout) for p in ports]
    nnodes = len(ports)
    node = cid % nnodes
    while not st.consume_stop.is_set():
        node = (node + 1) % nnodes
        t_req = now()
        try:
            sent, status, body = conns[node].send(
                "GET", f"/v1/topics/chaos/consume?max={max_n}&wait={wait}")
        except Exception as e:  # noqa: BLE001
            with st.lock:
                st.errors[f"receive {type(e).__name__}"] += 1
            time.sleep(0.05)
            continue
        t_resp = now()
        if not sent:
            with st.lock:
                st.errors["receive refused"] += 1
            time.sleep(0.05)
            continue
        if status == 204:
            continue
        if status != 200:
            with st.lock:
                st.errors[f"receive {status}"] += 1
            time.sleep(0.05)
            continue
        msgs = json.loads(body)["messages"]
        batch = []
        with st.lock:
            for m in msgs:
                d = {"payload": decode_payload(m), "partition": m["partition"],
                     "offset": m["offset"], "delivery_count": m.get("delivery_count"),
                     "timestamp_ms": m.get("timestamp_ms"),
                     "handle": m["receipt_handle"], "t_req": t_req, "t_resp": t_resp,
                     "node": node + 1, "consumer": cid}
                st.deliveries.append(d)
                batch.append(d)
        if batch:
            ack_batch(st, conns, node, batch)
    for c in conns:
        c.close()


def ack_batch(st, conns, node, batch):
    """Batch-ack the deliveries; retry connection errors / 503s on other nodes (up to 3 tries)."""
    nnodes = len(conns)
    pending = list(batch)
    ambiguous = set()  # handles whose earlier attempt may have been applied
    for attempt in range(3):
        if not pending:
            return
        body = json.dumps({"receipt_handles": [d["handle"] for d in pending]}).encode()
        t_req = now()
        try:
            sent, status, resp = conns[node].send("POST", "/v1/topics/chaos/ack", body,
                                                  {"content-type": "application/json"})
        except Exception as e:  # noqa: BLE001
            t = now()
            with st.lock:
                st.errors[f"ack {type(e).__name__}"] += 1
                for d in pending:
                    st.acks.append({"handle": d["handle"], "payload": d["payload"],
                                    "partition": d["partition"], "offset": d["offset"],
                                    "status": f"conn:{type(e).__name__}", "t_req": t_req, "t": t,
                                    "node": node + 1, "ambiguous_before": True})
            ambiguous.update(d["handle"] for d in pending)
            node = (node + 1) % nnodes
            time.sleep(0.05)
            continue
        t = now()
        if not sent or status != 200:
            with st.lock:
                st.errors[f"ack {'refused' if not sent else status}"] += 1
            if sent and status >= 500:
                ambiguous.update(d["handle"] for d in pending)
            if sent and status < 500:
                for d in pending:
                    st.acks.append({"handle": d["handle"], "payload": d["payload"],
                                    "partition": d["partition"], "offset": d["offset"],
                                    "status": status, "t_req": t_req, "t": t,
                                    "ambiguous_before": d["handle"] in ambiguous})
                return
            node = (node + 1) % nnodes
            time.sleep(0.05)
            continue
        results = json.loads(resp)["results"]
        retry = []
        with st.lock:
            for d, r in zip(pending, results):
                s = r.get("status")
                st.acks.append({"handle": d["handle"], "payload": d["payload"],
                                "partition": d["partition"], "offset": d["offset"],
                                "status": s, "t_req": t_req, "t": t, "node": node + 1,
                                "ambiguous_before": d["handle"] in ambiguous,
                                "error": r.get("error")})
                if s == 204:
                    if d["payload"] not in st.acked_payloads:
                        st.acked_payloads.add(d["payload"])
                        st.last_ack_progress = time.monotonic()
                elif s is not None and s >= 500:
                    st.errors[f"ack item {s}"] += 1
                    ambiguous.add(d["handle"])
                    retry.append(d)
                else:
                    st.errors[f"ack item {s}"] += 1
        pending = retry
        if pending:
            node = (node + 1) % nnodes
            time.sleep(0.2)
    for d in pending:  # gave up: outcome unknown
        with st.lock:
            st.acks.append({"handle": d["handle"], "payload": d["payload"],
                            "partition": d["partition"], "offset": d["offset"],
                            "status": "gave-up", "t_req": now(), "t": now(),
                            "ambiguous_before": True})


# ---------------------------------------------------------------------------------------------

def topic_stats(port):
    s, _, b = request(port, "GET", "/v1/topics/chaos", timeout=5)
    if s != 200:
        raise RuntimeError(f"GET topic: {s} {b[:200]}")
    return json.loads(b)


def leader_id(port):
    s, _, b = request(port, "GET", "/v1/cluster/members", timeout=5)
    for m in json.loads(b)["members"]:
        if m.get("role") == "leader":
            return m["id"]
    return None


def ack_unknown_locations(st):
    """Delivered messages never acked 204 whose ack attempt errored / 5xx'd / was given up: the
    broker may have applied the ack (then it never redelivers them)."""
    amb, ok = set(), set()
    for a in list(st.acks):
        loc = (a["partition"], a["offset"])
        if a["status"] == 204:
            ok.add(loc)
        elif a.get("ambiguous_before") or isinstance(a["status"], str) or (
                isinstance(a["status"], int) and a["status"] >= 500):
            amb.add(loc)
    return amb - ok


def fully_acked_partitions(stats):
    """Partitions where the broker reports every offset below the high watermark acked."""
    out = set()
    for ps in (stats or {}).get("partition_stats", []):
        if ps.get("status") == "ok" and ps.get("high_watermark") is not None and \
                ps.get("available") == 0 and ps.get("leased") == 0 and \
                ps.get("acked") == ps["high_watermark"] - (ps.get("log_start_offset") or 0):
            out.add(ps["index"])
    return out


def live_stats(cluster):
    for i in cluster.http:
        if cluster.alive(i):
            try:
                return topic_stats(cluster.http[i])
            except Exception:  # noqa: BLE001
                continue
    return None


def drain(st, cluster, args, all_202, label):
    """Wait until every 202'd payload is acked, or no new ack for drain_idle s, or drain_max, or
    the only unacked ones are messages whose ack answer was lost and that the broker reports
    acked (a partition with every offset acked, nothing available or leased)."""
    start = time.monotonic()
    last_report = 0
    last_stats = 0
    while True:
        with st.lock:
            missing_set = all_202() - st.acked_payloads
            missing = len(missing_set)
            idle = time.monotonic() - st.last_ack_progress
        el = time.monotonic() - start
        if missing == 0:
            log(f"{label}: every 202'd payload acked at least once ({el:.1f}s)")
            return True
        if missing <= 1000 and el - last_stats >= 3 and idle > 3:
            last_stats = el
            with st.lock:
                locs = collections.defaultdict(set)
                for d in st.deliveries:
                    if d["payload"] in missing_set:
                        locs[d["payload"]].add((d["partition"], d["offset"]))
            unknown = ack_unknown_locations(st)
            full = fully_acked_partitions(live_stats(cluster))
            if all(locs.get(p) and any(l in unknown and l[0] in full for l in locs[p])
                   for p in missing_set):
                log(f"{label}: the {missing} unacked payloads were all delivered, their ack answer "
                    f"was lost and the broker reports their partitions fully acked; stop draining")
                return False
        if idle > args.drain_idle or el > args.drain_max:
            log(f"{label}: giving up with {missing} unacked (idle {idle:.1f}s, {el:.1f}s)")
            return False
        if el - last_report >= 5:
            log(f"{label}: {missing} 202'd payloads not yet acked")
            last_report = el
        time.sleep(0.25)


def analyze(st, args, workdir, timeline, down_missing, stats):
    prod = st.produces
    ok202 = {p for p, r in prod.items() if r["acked_at"] is not None}
    ambiguous = {p for p, r in prod.items() if r["ambiguous"]}
    amb_unresolved = {p for p in ambiguous if prod[p]["acked_at"] is None}
    retried_dup_possible = {p for p in ambiguous}  # a copy may exist per ambiguous attempt
    dels = sorted(st.deliveries, key=lambda d: d["t_req"])
    acks = st.acks

    first_ack204_loc = {}     # (partition, offset) -> earliest time an ack returned 204
    first_ack204_payload = {}  # payload -> (time, loc)
    ack_by_handle = {}
    for a in acks:
        ack_by_handle.setdefault(a["handle"], []).append(a)
        if a["status"] == 204:
            loc = (a["partition"], a["offset"])
            if loc not in first_ack204_loc or a["t"] < first_ack204_loc[loc]:
                first_ack204_loc[loc] = a["t"]
            if a["payload"] not in first_ack204_payload or a["t"] < first_ack204_payload[a["payload"]][0]:
                first_ack204_payload[a["payload"]] = (a["t"], loc)
    acked_payloads = set(first_ack204_payload)

    # (1) every 202'd payload acked at least once
    delivered_payloads = {d["payload"] for d in dels}
    missing = sorted(ok202 - acked_payloads)
    missing_never_delivered = [p for p in missing if p not in delivered_payloads]
    missing_delivered = [p for p in missing if p in delivered_payloads]
    unknown = ack_unknown_locations(st)
    full = fully_acked_partitions(stats)
    locs_of = collections.defaultdict(set)
    for d in dels:
        locs_of[d["payload"]].add((d["partition"], d["offset"]))
    # ack answer lost (5xx / connection error), no redelivery, and the broker reports the
    # partition fully acked: the ack was applied; not a broker fault
    missing_ack_lost = [p for p in missing_delivered
                        if any(l in unknown and l[0] in full for l in locs_of[p])]
    missing_fail = [p for p in missing if p not in set(missing_ack_lost)]

    # (2) delivery of a message after its ack's 204
    violations = []
    in_flight = []   # another lease received while an ack of the same message was in flight, later 204
    post_ack_copies = []  # same payload at another location, received after the other's 204
    for d in dels:
        loc = (d["partition"], d["offset"])
        t_ack = first_ack204_loc.get(loc)
        if t_ack is not None and d["t_req"] > t_ack:
            violations.append((d, t_ack))
        fp = first_ack204_payload.get(d["payload"])
        if fp is not None and fp[1] != loc and d["t_req"] > fp[0]:
            post_ack_copies.append((d, fp))
    # a different lease of a message whose receive overlapped a successful ack of it
    handle_of_ack = {}
    for a in acks:
        if a["status"] == 204:
            handle_of_ack.setdefault((a["partition"], a["offset"]), []).append(a)
    for d in dels:
        for a in handle_of_ack.get((d["partition"], d["offset"]), ()):
            if a["handle"] != d["handle"] and d["t_req"] < a["t"] and d["t_resp"] > a["t_req"]:
                in_flight.append((d, a))

    # (3) duplicates by cause
    by_payload = collections.defaultdict(list)
    for d in dels:
        by_payload[d["payload"]].append(d)
    causes = collections.Counter()
    dc_anomalies = []
    for p, ds in by_payload.items():
        seen_locs = {}
        for i, d in enumerate(ds):
            loc = (d["partition"], d["offset"])
            if i == 0:
                seen_locs[loc] = d
                continue
            if loc not in seen_locs:
                seen_locs[loc] = d
                if p in retried_dup_possible:
                    causes["copy at another partition/offset: producer retry"] += 1
                else:
                    causes["copy at another partition/offset: broker (no producer retry)"] += 1
                continue
            prev = seen_locs[loc]
            seen_locs[loc] = d
            pa = ack_by_handle.get(prev["handle"], [])
            sts = [a["status"] for a in pa]
            if (d["delivery_count"] or 0) <= (prev["delivery_count"] or 0):
                dc_anomalies.append((prev, d))
            if 204 in sts:
                causes["redelivery after the previous lease was acked 204 (see check 2)"] += 1
            elif any(a.get("ambiguous_before") or isinstance(a["status"], str) for a in pa):
                causes["redelivery: previous ack failed (conn error/5xx)"] += 1
            elif 410 in sts:
                causes["redelivery: previous ack 410 (lease expired or owner restarted)"] += 1
            elif not sts:
                causes["redelivery: previous lease never acked"] += 1
            else:
                causes[f"redelivery: previous ack {sts}"] += 1
    first_seen_dc = sum(1 for ds in by_payload.values() if (ds[0]["delivery_count"] or 1) > 1)
    dups = sum(len(ds) - 1 for ds in by_payload.values())

    ack204 = sum(1 for a in acks if a["status"] == 204)
    ack_status = collections.Counter(str(a["status"]) for a in acks)
    pdur = timeline["produce_end"] - timeline["produce_start"]

    def fmt_d(d):
        return (f"payload={d['payload']} p{d['partition']}@{d['offset']} dc={d['delivery_count']} "
                f"recv_req={d['t_req']:.3f}s recv_resp={d['t_resp']:.3f}s via node {d['node']} "
                f"consumer {d['consumer']} handle={d['handle']}")

    out = []
    w = out.append
    w("=" * 78)
    w("queue-chaos summary")
    w(f"  cluster: 3 nodes, {args.producers} producers, {args.consumers} consumers, "
      f"{args.duration:.0f}s produce, partitions={args.partitions}, visibility={args.visibility_ms}ms")
    for k, v in timeline.items():
        if k.startswith("ev:"):
            w(f"  {k[3:]}: {v}")
    w(f"  produced (202):        {len(ok202)}   ({len(ok202) / pdur:.0f}/s)")
    w(f"  ambiguous produces:    {len(ambiguous)} (resolved by a later 202: "
      f"{len(ambiguous) - len(amb_unresolved)}, unresolved: {len(amb_unresolved)})")
    w(f"  deliveries:            {len(dels)}   distinct payloads {len(by_payload)}, "
      f"distinct messages {len({(d['partition'], d['offset']) for d in dels})}")
    w(f"  acks:                  {len(acks)}   by status {dict(ack_status)}")
    ack204_during = sum(1 for a in acks if a["status"] == 204 and a["t"] <= timeline["produce_end"])
    w(f"  ack 204 throughput:    {ack204_during / pdur:.0f}/s while producing; {ack204} in all "
      f"by {timeline['consume_end']:.1f}s")
    w(f"  duplicates:            {dups}   rate {dups / max(1, len(by_payload)) * 100:.3f}% "
      f"of distinct payloads delivered")
    for c, n in sorted(causes.items(), key=lambda x: -x[1]):
        if n:
            w(f"      {n:7d}  {c}")
    w(f"  first delivery seen already with delivery_count>1 (an earlier lease's answer was "
      f"lost): {first_seen_dc}")
    w(f"  redeliveries whose delivery_count did not increase: {len(dc_anomalies)}")
    for prev, d in dc_anomalies[:5]:
        w(f"      prev: {fmt_d(prev)}\n      then: {fmt_d(d)}")
    if down_missing is not None:
        w(f"  unacked while the killed node was left down: {down_missing}")
    w(f"  errors seen by clients: {dict(st.errors)}")
    w(f"  CHECK 1 (every 202'd payload acked 204 at least once): "
      f"{'PASS' if not missing_fail else 'FAIL'}  missing={len(missing_fail)} "
      f"(never delivered {len(missing_never_delivered)}, delivered but never acked 204 "
      f"{len(missing_delivered) - len(missing_ack_lost)})")
    if missing_ack_lost:
        w(f"      + {len(missing_ack_lost)} delivered whose ack got no definitive answer (5xx/conn "
          f"error, the owner was killed) and never came back: the broker reports their partition "
          f"fully acked, so the ack was applied (not counted as missing): "
          f"{', '.join(missing_ack_lost[:10])}{' ...' if len(missing_ack_lost) > 10 else ''}")
    for p in (missing_fail + missing_ack_lost)[:20]:
        r = prod[p]
        w(f"      {p}: produce attempts {r['attempts']}")
        for d in by_payload.get(p, [])[:3]:
            w(f"         delivered: {fmt_d(d)} acks={[(a['status'], 'via node %s' % a.get('node'), round(a['t'], 3)) for a in ack_by_handle.get(d['handle'], [])]}")
    w(f"  CHECK 2 (no delivery of a message begun after its ack's 204): "
      f"{'PASS' if not violations else 'FAIL'}  violations={len(violations)}")
    for d, t in violations[:20]:
        w(f"      {fmt_d(d)}  first ack 204 of p{d['partition']}@{d['offset']} at {t:.3f}s")
    w(f"  receives that overlapped a successful ack of the same message (race, not counted as "
      f"violations): {len(in_flight)}")
    for d, a in in_flight[:5]:
        w(f"      {fmt_d(d)}  ack {a['handle']} req {a['t_req']:.3f}s -> 204 at {a['t']:.3f}s")
    w(f"  same payload at another partition/offset received after the other copy's 204 "
      f"(allowed: producer retry or reroute replay): {len(post_ack_copies)} "
      f"(of which payload never producer-retried: "
      f"{sum(1 for d, _ in post_ack_copies if d['payload'] not in retried_dup_possible)})")
    for d, fp in post_ack_copies[:5]:
        w(f"      {fmt_d(d)}  other copy p{fp[1][0]}@{fp[1][1]} acked 204 at {fp[0]:.3f}s")
    w(f"  records: {workdir}")
    w("=" * 78)
    print("\n".join(out), flush=True)

    return not missing_fail and not violations


def dump_records(st, workdir):
    with open(os.path.join(workdir, "produces.jsonl"), "w") as f:
        for p, r in st.produces.items():
            f.write(json.dumps({"payload": p, **r}) + "\n")
    with open(os.path.join(workdir, "deliveries.jsonl"), "w") as f:
        for d in st.deliveries:
            f.write(json.dumps(d) + "\n")
    with open(os.path.join(workdir, "acks.jsonl"), "w") as f:
        for a in st.acks:
            f.write(json.dumps(a) + "\n")


def log_offsets_check(st, t):
    """Compare the broker's partition_stats with what consumers saw."""
    if t is None:
        print("  partition_stats unavailable")
        return
    seen = collections.defaultdict(set)
    acked = collections.defaultdict(set)
    for d in st.deliveries:
        seen[d["partition"]].add(d["offset"])
    for a in st.acks:
        if a["status"] == 204:
            acked[a["partition"]].add(a["offset"])
    print("  per partition (broker stats vs consumers):")
    for ps in t["partition_stats"]:
        i = ps["index"]
        hw = ps.get("high_watermark")
        never = None if hw is None else sorted(set(range(ps.get("log_start_offset") or 0, hw)) - seen[i])
        print(f"    p{i} owner {ps['owner_node']} {ps['status']}: hw={hw} broker acked={ps.get('acked')} "
              f"available={ps.get('available')} leased={ps.get('leased')} | consumers: "
              f"distinct delivered={len(seen[i])} distinct acked 204={len(acked[i])}"
              + (f" never-delivered offsets={never[:10]}{'...' if len(never) > 10 else ''} ({len(never)})"
                 if never else ""))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--binary", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "target", "release", "narad"))
    ap.add_argument("--duration", type=float, default=60)
    ap.add_argument("--producers", type=int, default=8)
    ap.add_argument("--consumers", type=int, default=8)
    ap.add_argument("--kill-at", type=float, default=None, help="seconds into the run (default duration/2)")
    ap.add_argument("--kill-node", default="auto",
                    help="auto (a partition owner that is not the metastore leader), leader, or a node id")
    ap.add_argument("--restart-after", type=float, default=7.0)
    ap.add_argument("--leave-down", action="store_true",
                    help="leave the killed node down through produce and drain; restart it only "
                         "afterwards for a final recovery drain")
    ap.add_argument("--no-kill", action="store_true")
    ap.add_argument("--keep-dir", action="store_true")
    ap.add_argument("--base-port", type=int, default=18000,
                    help="HTTP on base+1..3, node RPC (UDP) on base+11..13")
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--visibility-ms", type=int, default=5000)
    ap.add_argument("--drain-idle", type=float, default=30, help="stop draining after this long with no new ack")
    ap.add_argument("--drain-max", type=float, default=120)
    ap.add_argument("--http-timeout", type=float, default=10)
    args = ap.parse_args()
    kill_at = args.duration / 2 if args.kill_at is None else args.kill_at

    ports = [args.base_port + i for i in (1, 2, 3, 11, 12, 13)]
    busy = [p for p in ports if not port_free(p)]
    if busy:
        sys.exit(f"ports in use: {busy}; pick another --base-port")
    if not os.access(args.binary, os.X_OK):
        sys.exit(f"not an executable: {args.binary}")
    workdir = tempfile.mkdtemp(prefix="queue-chaos.")
    cluster = Cluster(args.binary, args.base_port, workdir)
    st = State()
    result = {"ok": False}

    def cleanup():
        st.produce_stop.set()
        st.consume_stop.set()
        cluster.stop_all()
        if args.keep_dir or not result["ok"]:
            print(f"kept {workdir} (node logs n1.log..n3.log, produces/deliveries/acks.jsonl)", flush=True)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    atexit.register(cleanup)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda s, f: sys.exit(128 + s))

    log(f"workdir {workdir}")
    for i in cluster.http:
        cluster.start(i)
    for i in cluster.http:
        wait_ready(cluster, i)
    log("all nodes /readyz 200")

    spec = json.dumps({"name": "chaos", "partitions": args.partitions,
                       "visibility_timeout_ms": args.visibility_ms})

    def create():
        s, _, b = request(cluster.http[1], "POST", "/v1/topics", spec, timeout=10)
        return s in (201, 409), (s, b[:200])
    wait_until("topic create", create, 60, interval=0.5)

    def visible_everywhere():
        for i, p in cluster.http.items():
            t = topic_stats(p)
            if any(ps["status"] != "ok" for ps in t["partition_stats"]):
                return False, (i, "partition not ok")
        return True, None
    wait_until("topic visible on every node", visible_everywhere, 60)
    t = topic_stats(cluster.http[1])
    owners = {ps["index"]: int(ps["owner_node"]) for ps in t["partition_stats"]}
    log(f"topic chaos ready; owners {owners}")

    node_ports = [cluster.http[i] for i in sorted(cluster.http)]
    timeline = {}
    st.produce_end = 1e18
    threads = [threading.Thread(target=consumer, args=(st, c, node_ports, args.http_timeout, 10, "1s"),
                                daemon=True) for c in range(args.consumers)]
    pthreads = [threading.Thread(target=producer, args=(st, p, node_ports, args.http_timeout, 10.0),
                                 daemon=True) for p in range(args.producers)]
    start = now()
    timeline["produce_start"] = start
    for th in threads + pthreads:
        th.start()
    log(f"{args.producers} producers and {args.consumers} consumers running")

    killed = None
    restarted = False
    down_missing = None

    def ok202_set():
        return {p for p, r in list(st.produces.items()) if r["acked_at"] is not None}

    next_report = start + 5
    while now() - start < args.duration:
        el = now() - start
        if not args.no_kill and killed is None and el >= kill_at:
            try:
                leader = leader_id(cluster.http[1])
            except Exception:  # noqa: BLE001
                leader = None
            owner_nodes = sorted(set(owners.values()))
            if args.kill_node == "auto":
                cands = [n for n in owner_nodes if n != leader] or owner_nodes
                killed = cands[-1]
            elif args.kill_node == "leader":
                killed = leader or owner_nodes[0]
            else:
                killed = int(args.kill_node)
            owned = sorted(p for p, n in owners.items() if n == killed)
            cluster.kill9(killed)
            timeline["ev:kill"] = (f"node {killed} (owner of partitions {owned}; metastore leader "
                                   f"was {leader}) kill -9 at {now():.2f}s")
            kill_time = now()
        if killed is not None and not restarted and not args.leave_down and now() - kill_time >= args.restart_after:
            cluster.start(killed)
            t_start = now()
            wait_ready(cluster, killed, 60)
            timeline["ev:restart"] = (f"node {killed} restarted at {t_start:.2f}s, /readyz 200 at "
                                      f"{now():.2f}s")
            log(timeline["ev:restart"])
            restarted = True
        if now() >= next_report:
            with st.lock:
                n202 = sum(1 for r in st.produces.values() if r["acked_at"] is not None)
                log(f"202'd {n202}, deliveries {len(st.deliveries)}, acked payloads "
                    f"{len(st.acked_payloads)}, errors {sum(st.errors.values())}")
            next_report += 5
        time.sleep(0.05)
    st.produce_end = now()
    st.produce_stop.set()
    for th in pthreads:
        th.join()
    timeline["produce_end"] = st.produce_end
    log(f"producers stopped; {len(ok202_set())} produces got 202")
    if killed is not None and not restarted and not args.leave_down:
        cluster.start(killed)
        wait_ready(cluster, killed, 60)
        restarted = True
    st.last_ack_progress = time.monotonic()
    drain(st, cluster, args, ok202_set, "drain")
    if args.leave_down and killed is not None:
        with st.lock:
            miss = ok202_set() - st.acked_payloads
            seen = {d["payload"] for d in st.deliveries}
        down_missing = (f"{len(miss)} ({len(miss - seen)} never delivered, {len(miss & seen)} "
                        f"delivered but not acked 204)")
        timeline["ev:left down"] = (f"node {killed} left down until {now():.2f}s; "
                                    f"{down_missing} 202'd payloads unacked then")
        cluster.start(killed)
        t_start = now()
        wait_ready(cluster, killed, 60)
        timeline["ev:final restart"] = (f"node {killed} restarted at {t_start:.2f}s, ready at {now():.2f}s")
        st.last_ack_progress = time.monotonic()
        drain(st, cluster, args, ok202_set, "final drain")
    # a receive begun now may still have been in flight: stop consumers and let them finish
    st.consume_stop.set()
    for th in threads:
        th.join(args.http_timeout + 5)
    timeline["consume_end"] = now()
    dump_records(st, workdir)
    stats = live_stats(cluster)
    ok = analyze(st, args, workdir, timeline, down_missing, stats)
    log_offsets_check(st, stats)
    for i in cluster.http:
        try:
            with open(os.path.join(workdir, f"n{i}.log"), "rb") as f:
                lines = f.read().decode("utf-8", "replace").splitlines()
            warn = sum(1 for ln in lines if " WARN " in ln)
            err = [ln for ln in lines if " ERROR " in ln or "panicked" in ln]
            print(f"  n{i}.log: {len(lines)} lines, {warn} WARN, {len(err)} ERROR/panic"
                  + (f"; first: {err[0][:200]}" if err else ""))
        except OSError:
            pass
    result["ok"] = ok
    print("RESULT:", "PASS" if ok else "FAIL", flush=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
