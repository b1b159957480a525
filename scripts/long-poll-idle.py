# Idle CPU of N parked long-poll consumes: N connections loop on GET ...consume?wait=20s against
# an empty partition of topic `idle` (created if missing); prints the server process's CPU over 40 s (from /proc).
# Usage: python3 scripts/long-poll-idle.py PORT N SERVER_PID   (docs/benchmarks.md, long-poll)
import asyncio, os, sys, time, json, urllib.error, urllib.request
URL_HOST, PORT, N, PID = "127.0.0.1", int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
REQ = b"GET /v1/topics/idle/consume?partition=0&offset=0&wait=20s HTTP/1.1\r\nHost: x\r\n\r\n"
answers = 0
async def one():
    global answers
    r, w = await asyncio.open_connection(URL_HOST, PORT)
    while True:
        w.write(REQ); await w.drain()
        line = await r.readline()
        length = 0
        while True:
            h = await r.readline()
            if h in (b"\r\n", b""): break
            if h.lower().startswith(b"content-length:"): length = int(h.split(b":")[1])
        if length: await r.readexactly(length)
        answers += 1
def ticks():
    f = open(f"/proc/{PID}/stat").read().split(")")[1].split()
    return int(f[11]) + int(f[12])
def parked():
    t = urllib.request.urlopen(f"http://127.0.0.1:{PORT}/metrics").read().decode()
    return [l for l in t.splitlines() if l.startswith("narad_consumes_parked ")][0].split()[1]
def create_topic():
    # Topic `idle` with one partition; a 409 (it exists) is fine.
    req = urllib.request.Request(f"http://127.0.0.1:{PORT}/v1/topics", method="POST",
                                 data=b'{"name":"idle","partitions":1}',
                                 headers={"Content-Type": "application/json"})
    try:
        urllib.request.urlopen(req).read()
    except urllib.error.HTTPError as e:
        assert e.code == 409, e
async def main():
    create_topic()
    tasks = [asyncio.create_task(one()) for _ in range(N)]
    await asyncio.sleep(8)
    print("parked", parked(), flush=True)
    t0, c0, a0 = time.time(), ticks(), answers
    await asyncio.sleep(40)
    t1, c1, a1 = time.time(), ticks(), answers
    hz = os.sysconf("SC_CLK_TCK")
    print(f"N={N} window={t1-t0:.1f}s server_cpu={100*(c1-c0)/hz/(t1-t0):.2f}% of one core answers={a1-a0} parked_now={parked()}")
    os._exit(0)
asyncio.run(main())
