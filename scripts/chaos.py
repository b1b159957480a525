#!/usr/bin/env python3
"""`make chaos`: three real narad processes in network namespaces under real network faults.

Run through scripts/chaos.sh (it probes for root and `ip netns`, picks the binary, and cleans up on
every exit path); docs/chaos.md describes the run. Python 3 standard library only.

Topology (all names start with `nchaos-`): namespaces nchaos-n1..n3, one narad each. Node i's
cluster (QUIC) address is 10.213.0.i/32 on its loopback; a veth per pair of nodes (i<j: subnet
10.213.<10i+j>.0/30, the lower id takes .1) carries the traffic between them, by a /32 route to each
peer's cluster address, so `--peers` is the same list everywhere and cutting one pair cuts exactly
that pair (no forwarding, no default route: there is no other path). A veth per node to the root
namespace (10.213.<100+i>.0/30, the node at .2) carries the client's HTTP. A fault is a `pfifo
limit 0` root qdisc on both ends of a pair veth: every packet is dropped silently, links and routes
stay up. The routing and the fault mechanism are verified (route lookups, UDP echo probes, ping
when installed) before narad starts.

Scenario, under continuous produce through every node (CHAOS_THREADS_PER_NODE threads per node,
each record's key and body carry a unique id): create a topic; isolate a minority follower (its
202s must survive; topic create/delete on it must answer within CHAOS_ADMIN_HANG_SECONDS, and not
succeed); heal; isolate the metastore leader (the same admin checks); heal; cut the n1-n2 pair;
heal; SIGSTOP the leader; SIGCONT; kill -9 a follower and restart it with the same arguments; stop
producing and poll until every 202'd record is readable on every node.

Ledger: 202 = acked; a refused connect (the request was never sent) or a 4xx = refused (definite:
it must never become visible); anything else (a timeout, a reset, any 5xx, 503 included: the
design calls a 5xx on produce ambiguous, and an overload 503 cannot be told apart from a shutdown's
one without trusting its text) = ambiguous, may or may not exist.

Checks (exit 1 on a failure): lost (acked, never read) = 0; phantoms (read, never sent, or not byte
for byte what was sent) = 0; refused records read = 0; every node reads the same record at the same
(partition, offset); the isolated node acked records while isolated; admin on an isolated node
answered within the bound and did not succeed; the cluster settled after every heal. Duplicates
are reported, not failed: docs/design.md §1/§4.6 allow them at the seams these faults open (a
record rerouted away from an unreachable owner, replayed to its own partition later; a crash).

Knobs (env): CHAOS_PHASE_SECONDS (40) per network fault, CHAOS_WARMUP_SECONDS (20),
CHAOS_STOP_SECONDS (10) of SIGSTOP, CHAOS_DOWN_SECONDS (10) after kill -9,
CHAOS_THREADS_PER_NODE (2), CHAOS_RATE (100 produces/s per thread; 0 = unpaced),
CHAOS_PARTITIONS (6), CHAOS_CONVERGE_SECONDS (120), CHAOS_SETTLE_SECONDS (90),
CHAOS_ADMIN_HANG_SECONDS (15), CHAOS_REQUEST_TIMEOUT (5), CHAOS_JSON (write the summary there),
CHAOS_DIR (work dir, from chaos.sh). Usage: chaos.py --binary PATH --dir DIR
"""
import argparse
import base64
import collections
import ctypes
import datetime
import hashlib
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

T0 = time.monotonic()
PREFIX = "nchaos-"
NODES = (1, 2, 3)
PAIRS = ((1, 2), (1, 3), (2, 3))
HTTP_PORT = 7942
RPC_PORT = 7943
ECHO_PORT = 7999
TOPIC = "chaos"


def now():
    return time.monotonic() - T0


def log(msg):
    print(f"[{now():7.2f}s] {msg}", flush=True)


def env_num(name, default):
    raw = os.environ.get(name)
    if raw in (None, ""):
        return default
    try:
        return type(default)(float(raw)) if isinstance(default, int) else float(raw)
    except ValueError:
        sys.exit(f"chaos: {name}={raw!r} is not a number")


CFG = {
    "phase": env_num("CHAOS_PHASE_SECONDS", 40.0),
    "warmup": env_num("CHAOS_WARMUP_SECONDS", 20.0),
    "stop": env_num("CHAOS_STOP_SECONDS", 10.0),
    "down": env_num("CHAOS_DOWN_SECONDS", 10.0),
    "threads": env_num("CHAOS_THREADS_PER_NODE", 2),
    "rate": env_num("CHAOS_RATE", 100.0),
    "partitions": env_num("CHAOS_PARTITIONS", 6),
    "converge": env_num("CHAOS_CONVERGE_SECONDS", 120.0),
    "settle": env_num("CHAOS_SETTLE_SECONDS", 90.0),
    "admin_hang": env_num("CHAOS_ADMIN_HANG_SECONDS", 15.0),
    "timeout": env_num("CHAOS_REQUEST_TIMEOUT", 5.0),
}


class Failed(Exception):
    """The run cannot go on (a settle or a setup step timed out): report and exit 1."""


# ---------------------------------------------------------------------------------------------
# Addresses and names

def ns(i):
    return f"{PREFIX}n{i}"


def cluster_ip(i):
    return f"10.213.0.{i}"


def client_ip(i):
    """The node's end of its client link (its HTTP address)."""
    return f"10.213.{100 + i}.2"


def root_ip(i):
    return f"10.213.{100 + i}.1"


def pair_dev(i, j):
    """The veth in namespace i that leads to node j."""
    return f"{PREFIX}{i}{j}"


def pair_ip(i, j):
    """Node i's address on the i-j link."""
    a, b = sorted((i, j))
    return f"10.213.{10 * a + b}.{1 if i == a else 2}"


def run(*cmd, check=True, timeout=30):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise Failed(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr.strip()}")
    return r


def in_ns(i, *cmd, **kw):
    return run("ip", "netns", "exec", ns(i), *cmd, **kw)


# ---------------------------------------------------------------------------------------------
# Network: build, verify, fault, tear down

def root_links():
    out = run("ip", "-o", "link", "show", check=False).stdout
    names = []
    for line in out.splitlines():
        parts = line.split(": ", 2)
        if len(parts) >= 2:
            names.append(parts[1].split("@")[0])
    return [n for n in names if n.startswith(PREFIX)]


def our_namespaces():
    out = run("ip", "netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.startswith(PREFIX)]


def teardown_network():
    for name in our_namespaces():
        pids = run("ip", "netns", "pids", name, check=False).stdout.split()
        for pid in pids:  # only what runs inside our own namespaces (echo probes, nodes)
            try:
                os.kill(int(pid), signal.SIGCONT)
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        run("ip", "netns", "del", name, check=False)
    for link in root_links():
        run("ip", "link", "del", link, check=False)


def setup_network():
    teardown_network()
    for i in NODES:
        run("ip", "netns", "add", ns(i))
        run("ip", "-n", ns(i), "link", "set", "lo", "up")
        run("ip", "-n", ns(i), "addr", "add", f"{cluster_ip(i)}/32", "dev", "lo")
        in_ns(i, "sysctl", "-qw", "net.ipv4.ip_forward=0")
    for i, j in PAIRS:
        run("ip", "link", "add", pair_dev(i, j), "netns", ns(i), "type", "veth",
            "peer", "name", pair_dev(j, i), "netns", ns(j))
        for a, b in ((i, j), (j, i)):
            run("ip", "-n", ns(a), "addr", "add", f"{pair_ip(a, b)}/30", "dev", pair_dev(a, b))
            run("ip", "-n", ns(a), "link", "set", pair_dev(a, b), "up")
    for i in NODES:
        host, node = f"{PREFIX}c{i}", f"{PREFIX}h{i}"
        run("ip", "link", "add", host, "type", "veth", "peer", "name", node, "netns", ns(i))
        run("ip", "addr", "add", f"{root_ip(i)}/30", "dev", host)
        run("ip", "link", "set", host, "up")
        run("ip", "-n", ns(i), "addr", "add", f"{client_ip(i)}/30", "dev", node)
        run("ip", "-n", ns(i), "link", "set", node, "up")
    for i in NODES:
        for j in NODES:
            if i != j:
                run("ip", "-n", ns(i), "route", "add", f"{cluster_ip(j)}/32", "via", pair_ip(j, i),
                    "dev", pair_dev(i, j), "src", cluster_ip(i))


CUTS = set()


def cut(i, j):
    """Drops every packet between i and j, both ways: a pfifo of limit 0 on both veth ends."""
    for a, b in ((i, j), (j, i)):
        in_ns(a, "tc", "qdisc", "replace", "dev", pair_dev(a, b), "root", "pfifo", "limit", "0")
    CUTS.add(tuple(sorted((i, j))))


def heal(i, j):
    for a, b in ((i, j), (j, i)):
        in_ns(a, "tc", "qdisc", "del", "dev", pair_dev(a, b), "root", check=False)
    CUTS.discard(tuple(sorted((i, j))))


def heal_all():
    for i, j in PAIRS:
        heal(i, j)


def echo(i, j, deadline_s):
    """A UDP echo from node i's cluster address to node j's: True if it came back in time."""
    r = in_ns(i, sys.executable, os.path.abspath(__file__), "--echo-client", cluster_ip(i),
              cluster_ip(j), str(ECHO_PORT), str(deadline_s), check=False,
              timeout=deadline_s + 20)
    return r.returncode == 0


def verify_network():
    """Routes go over the pair veths; every pair echoes; a cut drops exactly its pair."""
    for i in NODES:
        for j in NODES:
            if i == j:
                continue
            out = run("ip", "-n", ns(i), "route", "get", cluster_ip(j),
                      "from", cluster_ip(i)).stdout
            if f"dev {pair_dev(i, j)}" not in out:
                raise Failed(f"route {i}->{j} does not use {pair_dev(i, j)}: {out.strip()}")
    servers = []
    try:
        for j in NODES:
            servers.append(subprocess.Popen(
                ["ip", "netns", "exec", ns(j), sys.executable, os.path.abspath(__file__),
                 "--echo-server", "0.0.0.0", str(ECHO_PORT), "120"],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL))
        for i in NODES:
            for j in NODES:
                if i != j and not echo(i, j, 10):
                    raise Failed(f"no UDP echo from n{i} ({cluster_ip(i)}) "
                                 f"to n{j} ({cluster_ip(j)})")
        if shutil.which("ping"):
            for i in NODES:
                for j in NODES:
                    if i != j:
                        r = in_ns(i, "ping", "-c", "1", "-W", "2", "-I", cluster_ip(i),
                                  cluster_ip(j), check=False)
                        if r.returncode != 0:
                            raise Failed(f"ping n{i}->n{j} failed: {r.stdout.strip()}")
            how = "ping + UDP echo"
        else:
            how = "UDP echo (no ping installed)"
        for i in NODES:  # the client link, from the root namespace
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.settimeout(0.3)
            ok = False
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not ok:
                try:
                    s.sendto(b"root", (client_ip(i), ECHO_PORT))
                    ok = s.recvfrom(64)[0] == b"root"
                except OSError:
                    pass
            s.close()
            if not ok:
                raise Failed(f"no UDP echo from the root namespace to n{i} at {client_ip(i)}")
        cut(1, 2)
        dropped = not echo(1, 2, 1.5) and not echo(2, 1, 1.5)
        others = echo(1, 3, 5) and echo(2, 3, 5) and echo(3, 1, 5)
        heal(1, 2)
        back = echo(1, 2, 10)
        if not (dropped and others and back):
            raise Failed(f"the cut mechanism misbehaves: cut pair dropped={dropped}, "
                         f"other pairs fine={others}, healed pair back={back}")
        log(f"network verified ({how}): routes over the pair veths, every pair echoes, "
            "a cut n1-n2 drops exactly that pair")
    finally:
        for s in servers:
            s.kill()
            s.wait()


def echo_server(addr, port, seconds):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((addr, port))
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        s.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            data, peer = s.recvfrom(64)
            s.sendto(data, peer)
        except OSError:
            pass


def echo_client(src, dst, port, seconds):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((src, 0))
    s.settimeout(0.3)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            s.sendto(b"chaos", (dst, port))
            if s.recvfrom(64)[0] == b"chaos":
                return 0
        except OSError:
            time.sleep(0.05)  # a send error (no route) would otherwise spin
    return 1


# ---------------------------------------------------------------------------------------------
# Nodes

def pdeathsig():
    """In the child before exec: SIGTERM it if this script dies (even by kill -9)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)
    except Exception:  # noqa: BLE001
        pass


class Cluster:
    def __init__(self, binary, workdir):
        self.binary = binary
        self.workdir = workdir
        self.procs = {}
        self.logs = {}
        self.secret = os.path.join(workdir, "secret")
        with open(self.secret, "w") as f:
            f.write(os.urandom(32).hex() + "\n")
        os.chmod(self.secret, 0o600)
        self.pidfile = os.path.join(workdir, "pids")

    def args(self, i):
        peers = ",".join(f"{j}={cluster_ip(j)}:{RPC_PORT}" for j in NODES)
        return [self.binary, "serve", "--node-id", str(i), "--http", f"{client_ip(i)}:{HTTP_PORT}",
                "--cluster", f"{cluster_ip(i)}:{RPC_PORT}", "--peers", peers,
                "--cluster-secret-file", self.secret,
                # Chaos exercises the write path, not access control (bound off loopback).
                "--insecure-no-auth",
                "--data-dir", os.path.join(self.workdir, f"n{i}")]

    def log_path(self, i):
        return os.path.join(self.workdir, f"n{i}.log")

    def start(self, i):
        lf = open(self.log_path(i), "ab")
        lf.write(f"==== chaos: starting node {i} at t={now():.3f}s ====\n".encode())
        lf.flush()
        p = subprocess.Popen(["ip", "netns", "exec", ns(i)] + self.args(i), stdout=lf,
                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             preexec_fn=pdeathsig, start_new_session=True)
        with open(self.pidfile, "a") as f:  # chaos.sh kills these on every exit path
            f.write(f"{p.pid}\n")
        self.procs[i] = p
        self.logs[i] = lf
        log(f"node {i} started pid={p.pid} http={client_ip(i)}:{HTTP_PORT} "
            f"cluster={cluster_ip(i)}:{RPC_PORT}")

    def note(self, i, what):
        self.logs[i].write(f"==== chaos: {what} at t={now():.3f}s ====\n".encode())
        self.logs[i].flush()

    def signal(self, i, sig):
        os.kill(self.procs[i].pid, sig)

    def kill9(self, i):
        p = self.procs[i]
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        self.note(i, "kill -9")

    def alive(self, i):
        p = self.procs.get(i)
        return p is not None and p.poll() is None

    def stop_all(self):
        for i, p in self.procs.items():
            if p.poll() is None:
                try:
                    p.send_signal(signal.SIGCONT)
                    p.terminate()
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 15
        for p in self.procs.values():
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        for lf in self.logs.values():
            lf.close()

    def tails(self, lines=40):
        for i in NODES:
            path = self.log_path(i)
            if not os.path.exists(path):
                continue
            with open(path, "rb") as f:
                text = f.read().decode("utf-8", "replace").splitlines()
            print(f"---- tail of n{i}.log ({len(text)} lines, {path}) ----")
            for line in text[-lines:]:
                print("   ", line[:400])


# ---------------------------------------------------------------------------------------------
# HTTP

def request(i, method, path, body=None, timeout=5.0, headers=None):
    """(status, body bytes) on a fresh connection, or raises."""
    c = http.client.HTTPConnection(client_ip(i), HTTP_PORT, timeout=timeout)
    try:
        c.request(method, path, body, headers or {})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def metrics(i, timeout=3.0):
    status, body = request(i, "GET", "/metrics", timeout=timeout)
    if status != 200:
        raise RuntimeError(f"/metrics on n{i}: {status}")
    out = {}
    for line in body.decode().splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            try:
                out[name] = float(value)
            except ValueError:
                pass
    return out


def members(i, timeout=3.0):
    status, body = request(i, "GET", "/v1/cluster/members", timeout=timeout)
    if status != 200:
        raise RuntimeError(f"members on n{i}: {status}")
    return json.loads(body)["members"]


def poll(what, fn, deadline_s, interval=0.25):
    """Calls fn until it returns a true value, for at most deadline_s: (value, seconds taken)."""
    start = time.monotonic()
    last = None
    while True:
        try:
            value = fn()
            if value:
                return value, time.monotonic() - start
            last = "not yet"
        except Exception as e:  # noqa: BLE001
            last = repr(e)
        if time.monotonic() - start > deadline_s:
            raise Failed(f"timed out after {deadline_s:.0f}s waiting for {what}; last: {last}")
        time.sleep(interval)


def cluster_view():
    """The leader every node agrees on, if all are ready and all see three live members."""
    leaders = set()
    for i in NODES:
        status, _ = request(i, "GET", "/readyz", timeout=3)
        if status != 200:
            return None
        ms = members(i)
        if len(ms) != len(NODES) or any(m["status"] != "alive" for m in ms):
            return None
        roles = [m["id"] for m in ms if m["role"] == "leader"]
        if len(roles) != 1:
            return None
        leaders.add(roles[0])
    if len(leaders) != 1:
        return None
    leader = leaders.pop()
    m = metrics(leader)
    if m.get("narad_meta_leader") != 1:
        return None
    return leader


def settle(what):
    leader, took = poll(f"the cluster to settle after {what} (all ready, all alive, one leader)",
                        cluster_view, CFG["settle"])
    log(f"settled after {what} in {took:.1f}s; metastore leader n{leader}")
    return leader, took


def admin(i, method, path, body=None):
    """A topic create/delete against node i: (answer, seconds). answer is the status or
    'timeout' / an exception name."""
    start = time.monotonic()
    try:
        status, data = request(i, method, path, body, timeout=CFG["admin_hang"],
                               headers={"content-type": "application/json"} if body else None)
        answer = status
        detail = data[:200].decode("utf-8", "replace")
    except socket.timeout:
        answer, detail = "timeout", ""
    except Exception as e:  # noqa: BLE001
        answer, detail = type(e).__name__, str(e)
    return {"node": i, "request": f"{method} {path}", "answer": answer,
            "seconds": round(time.monotonic() - start, 3), "detail": detail}


# ---------------------------------------------------------------------------------------------
# Producers and the ledger

PHASE = ["start"]


def body_for(rid):
    return f"{rid}|{hashlib.sha256(rid.encode()).hexdigest()[:32]}"


class Producer(threading.Thread):
    """Produces through one node; every id is tried once (no retry), so a duplicate read is the
    broker's own."""

    def __init__(self, run_id, node, k, stop):
        super().__init__(daemon=True, name=f"producer-n{node}-{k}")
        self.run_id, self.node, self.k, self.stop = run_id, node, k, stop
        self.recs = {}  # id -> (outcome, detail, phase)
        self.conn = None

    def send(self, rid):
        if self.conn is None:
            c = http.client.HTTPConnection(client_ip(self.node), HTTP_PORT,
                                           timeout=CFG["timeout"])
            try:
                c.connect()
            except OSError as e:  # never sent: a definite refusal
                c.close()
                return "refused", f"connect {type(e).__name__}"
            self.conn = c
        try:
            self.conn.request("POST", f"/v1/topics/{TOPIC}/produce?key={rid}",
                              body_for(rid).encode())
            r = self.conn.getresponse()
            r.read()
            if r.getheader("connection", "").lower() == "close":
                self.close()
        except Exception as e:  # noqa: BLE001 -- sent, or maybe: ambiguous
            self.close()
            return "ambiguous", "timeout" if isinstance(e, socket.timeout) else type(e).__name__
        if r.status == 202:
            return "acked", "202"
        if 400 <= r.status < 500:
            return "refused", str(r.status)
        return "ambiguous", str(r.status)

    def close(self):
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def run(self):
        seq = 0
        interval = 1.0 / CFG["rate"] if CFG["rate"] > 0 else 0.0
        next_t = time.monotonic()
        while not self.stop.is_set():
            rid = f"{self.run_id}-n{self.node}t{self.k}-{seq}"
            seq += 1
            phase = PHASE[0]
            self.recs[rid] = ("ambiguous", "in flight", phase)  # sent, for the phantom check
            outcome, detail = self.send(rid)
            self.recs[rid] = (outcome, detail, phase)
            if outcome != "acked":
                time.sleep(0.1)  # pacing after an error, not a wait for a condition
            if interval:
                next_t = max(next_t + interval, time.monotonic() - 1.0)
                delay = next_t - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
        self.close()


# ---------------------------------------------------------------------------------------------
# Reading back

def decode_payload(m):
    p = m.get("payload")
    enc = m.get("payload_encoding")
    if enc == "base64":
        return base64.b64decode(p).decode("utf-8", "replace")
    if enc == "json" or not isinstance(p, str):
        return json.dumps(p, separators=(",", ":"))
    return p


class Reader:
    """Reads every partition of the topic through one node, incrementally (offsets only grow)."""

    def __init__(self, node, partitions):
        self.node = node
        self.next = [0] * partitions
        self.at = {}  # (partition, offset) -> id (or a phantom marker)
        self.copies = collections.defaultdict(list)  # id -> [(partition, offset)]
        self.bad = []  # phantoms / corrupt records: (partition, offset, what)
        self.errors = collections.Counter()

    def round(self):
        for p in range(len(self.next)):
            while True:
                q = f"/v1/topics/{TOPIC}/consume?partition={p}&offset={self.next[p]}&max=1000"
                try:
                    status, body = request(self.node, "GET", q, timeout=15)
                except Exception as e:  # noqa: BLE001
                    self.errors[type(e).__name__] += 1
                    break
                if status == 204:
                    break
                if status != 200:
                    self.errors[str(status)] += 1
                    break
                msgs = json.loads(body)["messages"]
                for m in msgs:
                    self.take(p, m)
                if not msgs:
                    break

    def take(self, p, m):
        off = m["offset"]
        if m.get("partition") != p or m.get("topic") != TOPIC or off < self.next[p]:
            self.bad.append((p, off, f"unexpected record {json.dumps(m)[:200]}"))
        self.next[p] = max(self.next[p], off + 1)
        text = decode_payload(m)
        rid = text.split("|", 1)[0]
        if text != body_for(rid) or m.get("key") != rid:
            self.bad.append((p, off, f"not what was sent: {text[:120]!r} key={m.get('key')!r}"))
            self.at[(p, off)] = f"<bad {text[:60]!r}>"
            return
        self.at[(p, off)] = rid
        self.copies[rid].append((p, off))


# ---------------------------------------------------------------------------------------------
# The scenario

class Run:
    def __init__(self, args):
        self.args = args
        self.cluster = Cluster(args.binary, args.dir)
        self.run_id = f"c{os.getpid()}x{int(time.time()) % 100000}"
        self.stop = threading.Event()
        self.producers = []
        self.events = []
        self.admin = []
        self.settles = []
        self.failures = []
        self.isolated_acks = {}
        self.summary = {}

    def event(self, what):
        self.events.append((round(now(), 2), what))
        log(what)

    def phase(self, name):
        PHASE[0] = name
        self.event(f"phase {name}")

    def run_fault(self, seconds):
        time.sleep(seconds)  # a fault runs for N seconds: the one kind of plain sleep here

    def admin_checks(self, node, label, when):
        """Create and delete against an isolated node: must answer (not hang), must not succeed.
        `early` runs the moment the cut is in place (the node still believes in its leader, or
        is the leader), `late` once it had time to notice."""
        body = json.dumps({"name": f"chaos-admin-{label}-{when}", "partitions": 1}).encode()
        for method, path, b in (("POST", "/v1/topics", body),
                                ("DELETE", "/v1/topics/chaos-scratch", None)):
            r = admin(node, method, path, b)
            r["phase"] = f"{label}/{when}"
            r["topic"] = f"chaos-admin-{label}-{when}" if method == "POST" else "chaos-scratch"
            self.admin.append(r)
            self.event(f"admin on isolated n{node}: {r['request']} -> {r['answer']} "
                       f"in {r['seconds']:.2f}s {r['detail'][:100]}")
            if not isinstance(r["answer"], int):
                self.failures.append(f"admin {r['request']} on isolated n{node} ({label}) did not "
                                     f"answer within {CFG['admin_hang']:.0f}s: {r['answer']}")
            elif 200 <= r["answer"] < 300:
                self.failures.append(f"admin {r['request']} on isolated n{node} ({label}) "
                                     f"succeeded ({r['answer']}) without a majority")

    def isolate(self, node):
        for j in NODES:
            if j != node:
                cut(node, j)

    def main(self):
        c = self.cluster
        setup_network()
        verify_network()
        for i in NODES:
            c.start(i)
        leader, took = settle("start")
        self.settles.append(("start", round(took, 2)))

        self.phase("create")
        parts = CFG["partitions"]
        for name, n in ((TOPIC, parts), ("chaos-scratch", 1)):
            r = admin(1, "POST", "/v1/topics", json.dumps({"name": name, "partitions": n}).encode())
            if r["answer"] != 201:
                raise Failed(f"create {name} on n1: {r}")
        poll("the topic on every node", lambda: all(
            request(i, "GET", f"/v1/topics/{TOPIC}", timeout=3)[0] == 200 for i in NODES), 30)
        owners = json.loads(request(1, "GET", f"/v1/topics/{TOPIC}")[1])
        owners = {p["index"]: p["owner_node"] for p in owners.get("partition_stats", [])}
        self.event(f"topic {TOPIC}: {parts} partitions, owners {owners}")

        for i in NODES:
            for k in range(CFG["threads"]):
                p = Producer(self.run_id, i, k, self.stop)
                self.producers.append(p)
                p.start()
        self.phase("warmup")
        self.run_fault(CFG["warmup"])

        # 2. a minority follower, cut from both peers; clients still reach it.
        minority = max(i for i in NODES if i != leader)
        self.phase("isolate-minority")
        self.isolate(minority)
        c.note(minority, "isolated from its peers")
        self.event(f"n{minority} isolated (a follower; leader n{leader})")
        t0 = time.monotonic()
        self.admin_checks(minority, "isolate-minority", "early")
        self.run_fault(max(0.0, CFG["phase"] / 3 - (time.monotonic() - t0)))
        self.admin_checks(minority, "isolate-minority", "late")
        self.run_fault(max(0.0, CFG["phase"] - (time.monotonic() - t0)))
        heal_all()
        c.note(minority, "healed")
        self.phase("heal-1")
        leader, took = settle("healing the minority")
        self.settles.append(("isolate-minority", round(took, 2)))
        self.isolated_acks["isolate-minority"] = minority

        # 3. the metastore leader, cut from both peers.
        self.phase("isolate-leader")
        self.isolate(leader)
        c.note(leader, "isolated from its peers (leader)")
        self.event(f"n{leader} isolated (the metastore leader)")
        t0 = time.monotonic()
        self.admin_checks(leader, "isolate-leader", "early")
        self.run_fault(max(0.0, CFG["phase"] / 3 - (time.monotonic() - t0)))
        self.admin_checks(leader, "isolate-leader", "late")
        self.run_fault(max(0.0, CFG["phase"] - (time.monotonic() - t0)))
        heal_all()
        c.note(leader, "healed")
        self.isolated_acks["isolate-leader"] = leader
        self.phase("heal-2")
        leader, took = settle("healing the leader")
        self.settles.append(("isolate-leader", round(took, 2)))

        # 4. one pair cut; both still reach n3.
        self.phase("cut-n1-n2")
        cut(1, 2)
        for i in (1, 2):
            c.note(i, "pair n1-n2 cut")
        self.run_fault(CFG["phase"])
        heal_all()
        self.phase("heal-3")
        leader, took = settle("healing n1-n2")
        self.settles.append(("cut-n1-n2", round(took, 2)))

        # 5. SIGSTOP the leader.
        stopped = leader
        self.phase("sigstop")
        c.note(stopped, "SIGSTOP")
        c.signal(stopped, signal.SIGSTOP)
        self.event(f"n{stopped} (leader) SIGSTOP for {CFG['stop']:.0f}s")
        self.run_fault(CFG["stop"])
        c.signal(stopped, signal.SIGCONT)
        c.note(stopped, "SIGCONT")
        self.phase("heal-4")
        leader, took = settle("SIGCONT")
        self.settles.append(("sigstop", round(took, 2)))

        # 6. kill -9 a follower, restart it with the same data dir and arguments.
        victim = min(i for i in NODES if i != leader)
        self.phase("kill-9")
        c.kill9(victim)
        self.event(f"n{victim} kill -9 (down {CFG['down']:.0f}s)")
        self.run_fault(CFG["down"])
        c.start(victim)

        # 7. heal everything, stop producing, converge.
        heal_all()
        for i in NODES:
            if c.alive(i):
                c.signal(i, signal.SIGCONT)
        t_heal = time.monotonic()
        self.phase("converge")
        self.stop.set()
        for p in self.producers:
            p.join(CFG["timeout"] + 5)
        self.event("producers stopped")
        self.converge(t_heal)

    def converge(self, t_heal):
        ledger = {}
        for p in self.producers:
            ledger.update(p.recs.copy())
        acked = {rid for rid, (o, _, _) in ledger.items() if o == "acked"}
        readers = {i: Reader(i, CFG["partitions"]) for i in NODES}
        missing = {i: set(acked) for i in NODES}
        converged_at = {}
        deadline = t_heal + CFG["converge"]
        while True:
            for i in NODES:
                if i in converged_at:
                    continue
                r = readers[i]
                r.round()
                missing[i] = {rid for rid in missing[i] if rid not in r.copies}
                if not missing[i]:
                    converged_at[i] = time.monotonic() - t_heal
                    self.event(f"every acked record readable through n{i} "
                               f"{converged_at[i]:.1f}s after the last heal")
            if len(converged_at) == len(NODES) or time.monotonic() > deadline:
                break
            time.sleep(0.5)  # polling interval
        convergence = max(converged_at.values()) if len(converged_at) == len(NODES) else None
        if convergence is None:
            settled = False
        else:
            # Let the backlog drain (late copies: replays), then read once more everywhere.
            def drained():
                return all(metrics(i).get("narad_dispatch_backlog", 1) == 0 for i in NODES)
            try:
                poll("every node's dispatch backlog at 0", drained, 60, interval=0.5)
                settled = True
            except Failed as e:
                self.failures.append(str(e))
                settled = False
            for r in readers.values():
                r.round()
        self.admin_after_heal()
        self.check(ledger, acked, readers, convergence, converged_at, settled)

    def admin_after_heal(self):
        """What the refused admin calls left behind (informational), then a delete through the
        healed majority, which must succeed."""
        left = {}
        for name in ["chaos-scratch"] + [a["topic"] for a in self.admin
                                         if a["request"].startswith("POST")]:
            try:
                left[name] = request(1, "GET", f"/v1/topics/{name}", timeout=5)[0]
            except Exception as e:  # noqa: BLE001
                left[name] = type(e).__name__
        self.summary["admin_topics_after_heal"] = left
        self.event(f"topics the refused admin calls named, after the heal: {left}")

        def delete():
            r = admin(2, "DELETE", "/v1/topics/chaos-scratch")
            return r if r["answer"] in (204, 404) else None
        try:
            r, took = poll("a topic delete through the healed cluster", delete, 30, interval=0.5)
            self.summary["admin_after_heal"] = {"answer": r["answer"], "seconds": r["seconds"]}
            self.event(f"delete chaos-scratch through n2 after the heal: {r['answer']} "
                       f"in {r['seconds']:.2f}s")
        except Failed as e:
            self.failures.append(str(e))

    def check(self, ledger, acked, readers, convergence, converged_at, drained):
        outcomes = collections.Counter(o for o, _, _ in ledger.values())
        details = collections.Counter(f"{o} {d}" for o, d, _ in ledger.values() if o != "acked")
        ref = readers[1]
        lost_by_node = {i: len(acked - set(r.copies)) for i, r in readers.items()}
        lost = acked - set().union(*(set(r.copies) for r in readers.values()))
        lost_anywhere = set().union(*(acked - set(r.copies) for r in readers.values()))
        never_sent = {rid for r in readers.values() for rid in r.copies if rid not in ledger}
        bad = [b for r in readers.values() for b in r.bad]
        phantoms = len(never_sent) + len(bad)
        refused_seen = {rid for r in readers.values() for rid in r.copies
                        if ledger.get(rid, ("",))[0] == "refused"}
        ambiguous = {rid for rid, (o, _, _) in ledger.items() if o == "ambiguous"}
        ambiguous_landed = len({rid for rid in ambiguous if rid in ref.copies})
        dup = {rid: locs for rid, locs in ref.copies.items() if len(locs) > 1}
        dup_same = sum(1 for locs in dup.values() if len({p for p, _ in locs}) == 1)
        inconsistent = []
        for i, r in readers.items():
            if i == 1:
                continue
            for key, rid in r.at.items():
                if key in ref.at and ref.at[key] != rid:
                    inconsistent.append((i, key, ref.at[key], rid))
            if drained and set(r.at) != set(ref.at):
                inconsistent.append((i, "offsets", len(r.at), len(ref.at)))
        node_metrics = {}
        for i in NODES:
            try:
                m = metrics(i)
                node_metrics[i] = {k: int(m.get(f"narad_{k}", -1)) for k in (
                    "records_accepted_total", "records_rerouted_total",
                    "records_discarded_total", "records_lost_total", "dispatch_backlog")}
            except Exception as e:  # noqa: BLE001
                node_metrics[i] = {"error": repr(e)}
        iso = {}
        for label, node in self.isolated_acks.items():
            mine = [rid for rid, (o, _, ph) in ledger.items()
                    if o == "acked" and ph == label and rid.startswith(f"{self.run_id}-n{node}t")]
            iso[label] = {"node": node, "acked_while_isolated": len(mine),
                          "lost": sum(1 for rid in mine if rid in lost_anywhere)}
            if not mine:
                self.failures.append(f"isolated n{node} ({label}) acknowledged no produce: the "
                                     "data plane must stay available without a quorum")
        if lost_anywhere:
            self.failures.append(f"{len(lost_anywhere)} acknowledged records not readable "
                                 f"(per reading node: {lost_by_node})")
        if phantoms:
            self.failures.append(f"{phantoms} phantom records ({len(never_sent)} never sent, "
                                 f"{len(bad)} not as sent)")
        if refused_seen:
            self.failures.append(f"{len(refused_seen)} records that were definitely refused "
                                 "became visible")
        if inconsistent:
            self.failures.append(f"nodes disagree about {len(inconsistent)} (partition, offset) "
                                 f"entries: {inconsistent[:5]}")
        if convergence is None:
            self.failures.append(f"not every acked record readable {CFG['converge']:.0f}s after "
                                 "the last heal")
        admin_answers = [{k: a[k] for k in ("phase", "node", "request", "answer", "seconds")}
                         for a in self.admin]
        s = self.summary
        s.update({
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "passed": not self.failures,
            "failures": self.failures,
            "produced": len(ledger),
            "acked": len(acked),
            "ambiguous": outcomes["ambiguous"],
            "ambiguous_landed": ambiguous_landed,
            "refused": outcomes["refused"],
            "not_acked_by_kind": dict(details.most_common()),
            "lost": len(lost_anywhere),
            "lost_everywhere": len(lost),
            "phantoms": phantoms,
            "refused_visible": len(refused_seen),
            "duplicates": len(dup),
            "duplicate_extra_copies": sum(len(v) - 1 for v in dup.values()),
            "duplicates_same_partition": dup_same,
            "records_read": len(ref.at),
            "convergence_seconds": round(convergence, 2) if convergence is not None else None,
            "convergence_by_node": {i: round(t, 2) for i, t in converged_at.items()},
            "admin": admin_answers,
            "admin_max_seconds": max((a["seconds"] for a in self.admin), default=None),
            "isolated": iso,
            "settle_seconds": dict(self.settles),
            "read_errors": {i: dict(r.errors) for i, r in readers.items()},
            "node_metrics": node_metrics,
            "config": CFG,
            "runtime_seconds": round(now(), 1),
            "events": self.events,
        })
        if dup:
            sample = list(dup.items())[:3]
            s["duplicate_sample"] = [[rid, locs] for rid, locs in sample]
        if lost_anywhere:
            s["lost_sample"] = sorted(lost_anywhere)[:20]
            s["lost_sample_ledger"] = {rid: ledger[rid] for rid in s["lost_sample"]}
        if bad or never_sent:
            s["phantom_sample"] = [list(b) for b in bad[:10]] + sorted(never_sent)[:10]


def print_summary(s):
    print("\n==== chaos summary ====")
    rows = [
        ("result", "PASS" if s.get("passed") else "FAIL"),
        ("produce requests", s.get("produced")),
        ("acked (202)", s.get("acked")),
        ("ambiguous", f"{s.get('ambiguous')} ({s.get('ambiguous_landed')} of them landed)"),
        ("refused", s.get("refused")),
        ("not acked, by kind", s.get("not_acked_by_kind")),
        ("lost", s.get("lost")),
        ("phantoms", s.get("phantoms")),
        ("refused but visible", s.get("refused_visible")),
        ("duplicates", f"{s.get('duplicates')} records, {s.get('duplicate_extra_copies')} extra "
                       f"copies ({s.get('duplicates_same_partition')} within one partition)"),
        ("records read", s.get("records_read")),
        ("convergence", f"{s.get('convergence_seconds')} s after the last heal "
                        f"(per reading node: {s.get('convergence_by_node')})"),
        ("isolated nodes", s.get("isolated")),
        ("settle after heals", s.get("settle_seconds")),
        ("node metrics", s.get("node_metrics")),
        ("runtime", f"{s.get('runtime_seconds')} s"),
    ]
    for k, v in rows:
        print(f"  {k:22} {v}")
    for a in s.get("admin", []):
        print(f"  admin {a['phase']:22} n{a['node']} {a['request']:28} -> {a['answer']} "
              f"in {a['seconds']:.2f} s")
    for f in s.get("failures", []):
        print(f"  FAILURE: {f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--binary")
    ap.add_argument("--dir", default=os.environ.get("CHAOS_DIR"))
    ap.add_argument("--echo-server", nargs=3, metavar=("ADDR", "PORT", "SECONDS"))
    ap.add_argument("--echo-client", nargs=4, metavar=("SRC", "DST", "PORT", "SECONDS"))
    args = ap.parse_args()
    if args.echo_server:
        a, p, s = args.echo_server
        return echo_server(a, int(p), float(s))
    if args.echo_client:
        src, dst, p, s = args.echo_client
        return echo_client(src, dst, int(p), float(s))
    if not args.binary or not args.dir:
        ap.error("--binary and --dir (or CHAOS_DIR) are required")
    pdeathsig()  # if chaos.sh dies, SIGTERM us: the finally below still cleans up

    def on_term(signum, _frame):
        raise SystemExit(128 + signum)
    signal.signal(signal.SIGTERM, on_term)
    log(f"chaos: binary {args.binary}, dir {args.dir}, config {CFG}")
    r = Run(args)
    rc = 0
    try:
        r.main()
    except Failed as e:
        r.failures.append(str(e))
        r.summary.update({"passed": False, "failures": r.failures, "events": r.events,
                          "admin": r.admin, "runtime_seconds": round(now(), 1)})
    except BaseException as e:  # Ctrl-C, SIGTERM: clean up, say so
        r.failures.append(f"interrupted: {e!r}")
        r.summary.update({"passed": False, "failures": r.failures})
        rc = 130
    finally:
        r.stop.set()
        r.cluster.stop_all()
        teardown_network()
    print_summary(r.summary)
    out = os.environ.get("CHAOS_JSON")
    if out:
        with open(out, "w") as f:
            json.dump(r.summary, f, indent=2, default=str)
            f.write("\n")
    if not r.summary.get("passed"):
        r.cluster.tails()
        return rc or 1
    print("chaos passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
