#!/usr/bin/env python3
# Replay (offset consume) throughput of one node: R reader processes, each on one keep-alive connection,
# read disjoint offset ranges of one partition with `max=M`; prints response-body and payload MB/s
# (MB = 10^6 bytes), client CPU per reader, the server's CPU seconds over the replay and the whole machine's
# busy CPU (from /proc; "others" = what neither the server nor the readers used: a co-tenant).
# A reader does not parse JSON: the next offset is the last `"offset":` in the body plus one (payloads
# must not contain that text; `fill` writes {"i":N,"pad":"xx…"}). The first answer is parsed once to check.
# Standard library only.
# Usage:
#   python3 scripts/replay-throughput.py fill PORT TOPIC RECORDS [PAYLOAD_BYTES=1024] [CONNS=4]
#       create TOPIC (1 partition) and batch-produce RECORDS JSON payloads of exactly PAYLOAD_BYTES,
#       1000 a request, then wait until partition 0's high watermark has grown by RECORDS
#   python3 scripts/replay-throughput.py read PORT TOPIC [READERS=1] [MAX=1000] [SERVER_PID] [PAYLOAD_BYTES=1024]
#       replay partition 0 from its log start to its high watermark, split over READERS processes
#       (e.g. 1 GiB: fill PORT replay 1048576; then read PORT replay 1 1000 NODE_PID; SERVER_PID 0 = none)
import http.client, json, multiprocessing as mp, os, socket, sys, threading, time

HOST = "127.0.0.1"


def topic_stats(port, topic):
    c = http.client.HTTPConnection(HOST, port)
    c.request("GET", f"/v1/topics/{topic}")
    r = c.getresponse()
    body = r.read()
    c.close()
    assert r.status == 200, (r.status, body)
    return json.loads(body)["partition_stats"][0]


def payload(i, size):
    head = '{"i":%d,"pad":"' % i
    pad = size - len(head) - 2
    assert pad >= 0, "payload too small"
    return head + "x" * pad + '"}'


def fill(port, topic, records, size=1024, conns=4):
    c = http.client.HTTPConnection(HOST, port)
    c.request("POST", "/v1/topics", json.dumps({"name": topic, "partitions": 1}))
    r = c.getresponse()
    r.read()
    assert r.status in (201, 409), r.status
    start_hw = topic_stats(port, topic)["high_watermark"]
    batches = [(lo, min(lo + 1000, records)) for lo in range(0, records, 1000)]
    lock = threading.Lock()

    def worker():
        h = http.client.HTTPConnection(HOST, port)
        while True:
            with lock:
                if not batches:
                    return
                lo, hi = batches.pop(0)
            body = '{"messages":[' + ",".join('{"payload":%s}' % payload(i, size) for i in range(lo, hi)) + "]}"
            while True:
                h.request("POST", f"/v1/topics/{topic}/produce/batch", body.encode(),
                          {"Content-Type": "application/json"})
                r = h.getresponse()
                rb = r.read()
                if r.status == 202:
                    break
                if r.status != 503:
                    raise SystemExit(f"produce {lo}: {r.status} {rb[:200]!r}")
                time.sleep(1)

    t0 = time.time()
    ts = [threading.Thread(target=worker) for _ in range(conns)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    t1 = time.time()
    while True:
        hw = topic_stats(port, topic)["high_watermark"]
        if hw - start_hw >= records:
            break
        time.sleep(0.2)
    t2 = time.time()
    print(f"filled {records} x {size} B: produce {t1 - t0:.1f}s, visible after {t2 - t0:.1f}s, high_watermark={hw}")


def reader(port, topic, lo, hi, mx, barrier, out):
    s = socket.create_connection((HOST, port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = bytearray(4 << 20)
    view = memoryview(buf)
    body_bytes = records = requests = 0
    first = None
    barrier.wait()
    c0 = os.times()
    t0 = time.perf_counter()
    off = lo
    while off < hi:
        n = min(mx, hi - off)
        s.sendall(f"GET /v1/topics/{topic}/consume?partition=0&offset={off}&max={n} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        got = 0
        while True:  # headers
            k = s.recv_into(view[got:], len(buf) - got)
            if not k:
                raise SystemExit("server closed the connection")
            got += k
            e = buf.find(b"\r\n\r\n", 0, got)
            if e >= 0:
                break
        head = bytes(buf[:e]).lower()
        if not head.startswith(b"http/1.1 200"):
            raise SystemExit(f"offset {off}: {head[:100]!r}")
        i = head.index(b"content-length:")
        j = head.find(b"\r\n", i)
        length = int(head[i + 15:j if j >= 0 else None])
        start = e + 4
        total = start + length
        if total > len(buf):
            nb = bytearray(total * 2)
            nb[:got] = buf[:got]
            buf, view = nb, memoryview(nb)
        while got < total:
            k = s.recv_into(view[got:total], total - got)
            if not k:
                raise SystemExit("server closed the connection")
            got += k
        if first is None:
            first = bytes(buf[start:total])
        j = buf.rfind(b'"offset":', start, total)
        q = j + 9
        while 48 <= buf[q] <= 57:
            q += 1
        last = int(buf[j + 9:q])
        records += last + 1 - off
        body_bytes += length
        requests += 1
        off = last + 1
    t1 = time.perf_counter()
    c1 = os.times()
    s.close()
    out.send(dict(lo=lo, hi=hi, t0=t0, t1=t1, body=body_bytes, records=records, requests=requests,
                  cpu=(c1.user - c0.user) + (c1.system - c0.system), first=first))


def ticks(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(f[11]) + int(f[12])


def machine_busy():
    f = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return sum(f) - f[3] - f[4]  # all but idle and iowait, in ticks over every core


def read(port, topic, readers=1, mx=1000, server_pid=None, size=1024):
    st = topic_stats(port, topic)
    lo, hi = st["log_start_offset"], st["high_watermark"]
    step = (hi - lo + readers - 1) // readers
    ranges = [(lo + k * step, min(hi, lo + (k + 1) * step)) for k in range(readers)]
    barrier = mp.Barrier(readers + 1)
    pipes, procs = [], []
    for a, b in ranges:
        r, w = mp.Pipe(duplex=False)
        p = mp.Process(target=reader, args=(port, topic, a, b, mx, barrier, w))
        p.start()
        pipes.append(r)
        procs.append(p)
    hz = os.sysconf("SC_CLK_TCK")
    barrier.wait()
    s0 = ticks(server_pid) if server_pid else None
    m0 = machine_busy()
    w0 = time.perf_counter()
    res = [r.recv() for r in pipes]
    w1 = time.perf_counter()
    s1 = ticks(server_pid) if server_pid else None
    m1 = machine_busy()
    for p in procs:
        p.join()
    msgs = json.loads(res[0]["first"])["messages"]
    plen = [len(json.dumps(m["payload"], separators=(",", ":"))) for m in msgs]
    assert all(n == size for n in plen), f"payloads are not all {size} B: {set(plen)}"
    wall = w1 - w0
    body = sum(r["body"] for r in res)
    recs = sum(r["records"] for r in res)
    assert recs == hi - lo, (recs, hi - lo)
    for k, r in enumerate(res):
        t = r["t1"] - r["t0"]
        print(f"  reader {k}: offsets [{r['lo']},{r['hi']}) {r['requests']} requests {t:.2f}s "
              f"body {r['body'] / t / 1e6:.1f} MB/s payload {r['records'] * size / t / 1e6:.1f} MB/s "
              f"client_cpu {r['cpu']:.2f}s ({100 * r['cpu'] / t:.0f}% of a core)")
    srv = ""
    if server_pid:
        sc = (s1 - s0) / hz
        srv = f" server_cpu={sc:.2f}s ({100 * sc / wall:.0f}% of a core)"
    mc = (m1 - m0) / hz
    cc = sum(r["cpu"] for r in res)
    srv += f" machine_busy={mc:.2f}s of {os.cpu_count() * wall:.2f}s"
    if server_pid:
        srv += f" (others={max(0.0, mc - sc - cc):.2f}s)"
    print(f"readers={readers} max={mx} records={recs} wall={wall:.2f}s body={body / 1e6:.1f} MB "
          f"body_rate={body / wall / 1e6:.1f} MB/s payload_rate={recs * size / wall / 1e6:.1f} MB/s "
          f"msgs={recs / wall:.0f}/s req={sum(r['requests'] for r in res) / wall:.0f}/s "
          f"body/record={body / recs:.0f} B{srv}")


if __name__ == "__main__":
    a = sys.argv[1:]
    if len(a) >= 4 and a[0] == "fill":
        fill(int(a[1]), a[2], int(a[3]), *(int(x) for x in a[4:6]))
    elif len(a) >= 3 and a[0] == "read":
        port, topic = int(a[1]), a[2]
        rest = [int(x) for x in a[3:7]]
        readers = rest[0] if len(rest) > 0 else 1
        mx = rest[1] if len(rest) > 1 else 1000
        pid = rest[2] if len(rest) > 2 and rest[2] > 0 else None
        size = rest[3] if len(rest) > 3 else 1024
        read(port, topic, readers, mx, pid, size)
    else:
        sys.exit(__doc__ or open(__file__).read().split("import ")[0])
