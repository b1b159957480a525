#!/usr/bin/env python3
"""Sends COUNT requests with a wrong password for USER to a node, from THREADS keep-alive
connections, spread evenly over SECONDS; prints how they were answered as one JSON line.
Used by scripts/auth-flood.sh (issue 14: a flood of wrong passwords must not slow a producer
whose credentials were verified, and must get the flooded user throttled)."""
import base64, json, socket, sys, threading, time
from urllib.parse import urlparse

url, user, count, threads, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
# POST (a produce with a one-byte body, which the node reads and drops before it refuses, so
# the connection stays open) or GET (a listing), or HEALTHZ: the same rate of
# requests that carry no credentials at all (what the flood costs as load alone).
method = sys.argv[6] if len(sys.argv) > 6 else "GET"
target = urlparse(url)
auth = "Basic " + base64.b64encode(f"{user}:wrong-password-{time.time_ns()}".encode()).decode()
statuses, lock = {}, threading.Lock()

def request_bytes():
    host = f"{target.hostname}:{target.port}"
    if method == "POST":
        return (f"POST /v1/topics/bench/produce HTTP/1.1\r\nhost: {host}\r\nauthorization: {auth}\r\n"
                "content-type: application/octet-stream\r\ncontent-length: 1\r\n\r\nx").encode()
    if method == "HEALTHZ":  # the control: the same load, no credentials
        return f"GET /healthz HTTP/1.1\r\nhost: {host}\r\n\r\n".encode()
    return f"GET /v1/topics HTTP/1.1\r\nhost: {host}\r\nauthorization: {auth}\r\n\r\n".encode()

# Raw sockets, not http.client: the flood client shares the node's two cores, and parsing
# responses in Python would cost more than the node spends answering them.
REQUEST = request_bytes()

def read_response(sock, pending):
    """One response off a keep-alive connection: (status, leftover bytes, whether it stays open)."""
    while b"\r\n\r\n" not in pending:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        pending += chunk
    head, rest = pending.split(b"\r\n\r\n", 1)
    lines = head.split(b"\r\n")
    status = int(lines[0].split()[1])
    length, close = 0, False
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value)
        elif name == b"connection" and value.strip().lower() == b"close":
            close = True
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError("closed")
        rest += chunk
    return status, rest[length:], close

def flood(n):
    sock, pending = None, b""
    start, interval = time.monotonic(), seconds / max(n, 1)
    for i in range(n):
        delay = start + i * interval - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        try:
            if sock is None:
                sock, pending = socket.create_connection((target.hostname, target.port), timeout=30), b""
            sock.sendall(REQUEST)
            status, pending, close = read_response(sock, pending)
            if close:
                sock.close()
                sock = None
        except Exception:
            if sock is not None:
                sock.close()
            sock, status = None, 0
        with lock:
            statuses[status] = statuses.get(status, 0) + 1
    if sock is not None:
        sock.close()

started = time.monotonic()
workers = [threading.Thread(target=flood, args=(count // threads + (i < count % threads),)) for i in range(threads)]
for w in workers:
    w.start()
for w in workers:
    w.join()
print(json.dumps({"sent": count, "seconds": round(time.monotonic() - started, 2),
                  "statuses": {str(k): v for k, v in sorted(statuses.items())}}))
