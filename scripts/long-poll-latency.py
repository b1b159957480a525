# Produce 202 -> long-poll answer latency: a consume parked at the next offset (wait=10s), then a
# produce; the time from its 202 to the long-poll's 200, K times (creates a fresh topic `lat-<time>`
# each run, so a second run against the same node does not find its offsets filled already).
# Usage: python3 scripts/long-poll-latency.py PORT K   (docs/benchmarks.md, long-poll)
import http.client, threading, time, sys, statistics
P = int(sys.argv[1]); K = int(sys.argv[2]); T = f"lat-{time.time_ns()}"
c = http.client.HTTPConnection("127.0.0.1", P); c.request("POST", "/v1/topics", '{"name":"%s","partitions":1}' % T)
created = c.getresponse(); created.read(); assert created.status == 201, created.status
prod = http.client.HTTPConnection("127.0.0.1", P)
lat = []
for i in range(K):
    got = {}
    def poll():
        h = http.client.HTTPConnection("127.0.0.1", P)
        h.request("GET", f"/v1/topics/{T}/consume?partition=0&offset={i}&wait=10s"); r = h.getresponse(); r.read()
        got["t"] = time.perf_counter(); got["s"] = r.status
    t = threading.Thread(target=poll); t.start(); time.sleep(0.02)
    prod.request("POST", f"/v1/topics/{T}/produce?partition=0", b'{"i":1}'); r = prod.getresponse(); r.read()
    t202 = time.perf_counter(); t.join()
    assert got["s"] == 200, got
    lat.append((got["t"] - t202) * 1000)
lat.sort()
print(f"n={K} 202->long-poll answer ms: p50={lat[len(lat)//2]:.2f} p99={lat[int(len(lat)*0.99)-1]:.2f} max={lat[-1]:.2f}")
