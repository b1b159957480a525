#!/usr/bin/env python3
"""Sends COUNT requests with a wrong password for USER to a node, from THREADS keep-alive
connections, spread evenly over SECONDS; prints how they were answered as one JSON line.
Used by scripts/auth-flood.sh (issue 14: a flood of wrong passwords must not slow a producer
whose credentials were verified, and must get the flooded user throttled)."""
import base64, http.client, json, sys, threading, time
from urllib.parse import urlparse

url, user, count, threads, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
# POST (a produce with a body the node never reads: it answers before, and closes the
# connection) or GET (a listing: the connection stays open), or HEALTHZ: the same rate of
# requests that carry no credentials at all (what the flood costs as load alone).
method = sys.argv[6] if len(sys.argv) > 6 else "GET"
target = urlparse(url)
auth = "Basic " + base64.b64encode(f"{user}:wrong-password-{time.time_ns()}".encode()).decode()
statuses, lock = {}, threading.Lock()

def flood(n):
    conn = http.client.HTTPConnection(target.hostname, target.port, timeout=30)
    start, interval = time.monotonic(), seconds / max(n, 1)
    for i in range(n):
        delay = start + i * interval - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        try:
            if method == "POST":
                conn.request("POST", "/v1/topics/bench/produce", body=b"x",
                             headers={"authorization": auth, "content-type": "application/octet-stream"})
            elif method == "HEALTHZ":
                conn.request("GET", "/healthz")  # the control: the same load, no credentials
            else:
                conn.request("GET", "/v1/topics", headers={"authorization": auth})
            response = conn.getresponse()
            response.read()
            status = response.status
        except Exception:
            conn.close()
            conn = http.client.HTTPConnection(target.hostname, target.port, timeout=30)
            status = 0
        with lock:
            statuses[status] = statuses.get(status, 0) + 1

started = time.monotonic()
workers = [threading.Thread(target=flood, args=(count // threads + (i < count % threads),)) for i in range(threads)]
for w in workers:
    w.start()
for w in workers:
    w.join()
print(json.dumps({"sent": count, "seconds": round(time.monotonic() - started, 2),
                  "statuses": {str(k): v for k, v in sorted(statuses.items())}}))
