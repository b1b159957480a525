#!/usr/bin/env python3
"""The attacker side of scripts/hostile-clients.sh: slow-loris connections, a flood of large batch
bodies and oversized request heads against one node on 127.0.0.1, for a bounded time; prints one
JSON object of what the node answered. Exists to measure the HTTP server's bounds
(runtime-tokio/src/http_server/) under load, which the real-process tests only check for
correctness.

    hostile_clients.py HOST:PORT --loris 2000 --flooders 24 --seconds 30 --ready-file PATH

- loris: keeps N connections open that each sent half a request head; when the node cuts one
  (the header timeout), it is reopened. Counts the cuts.
- flooders: each sends ~16 MiB batch produces back to back (a fresh connection per request, as the
  node closes after a refusal), counting 202, 429, 503 and the rest. With --auth USER:PASS they
  send those credentials; with --honor-retry-after they wait out a 429's or 503's Retry-After
  before the next (a well-behaved bulk loader), otherwise they ignore it (a hostile one).
- oversize: now and then a request with a 32 KiB header, counting 431.
"""

import argparse
import base64
import json
import selectors
import socket
import threading
import time

HALF_HEAD = b"POST /v1/topics/loris/produce HTTP/1.1\r\nHost: x\r\nX-Slow: "
MAX_BATCH_BYTES = 16 * 1024 * 1024


def batch_body():
    """A batch of 1,000 messages just under the 16 MiB batch limit."""
    payload = "x" * ((MAX_BATCH_BYTES - 64 * 1024) // 1000 - 20)
    messages = ",".join('{"payload":"%s"}' % payload for _ in range(1000))
    return ('{"messages":[%s]}' % messages).encode()


def status_of(sock):
    """Reads a response head; returns its status code (0 if none arrived)."""
    return head_of(sock)[0]


def head_of(sock):
    """Reads a response head; returns its status code (0 if none arrived) and its Retry-After
    in seconds (0 if none)."""
    head = b""
    try:
        while b"\r\n\r\n" not in head:
            chunk = sock.recv(4096)
            if not chunk:
                break
            head += chunk
    except OSError:
        pass
    retry_after = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"retry-after:"):
            try:
                retry_after = int(line.split(b":", 1)[1])
            except ValueError:
                pass
    try:
        return int(head[9:12]), retry_after
    except ValueError:
        return 0, 0


class Counts:
    def __init__(self):
        self.lock = threading.Lock()
        self.values = {}

    def add(self, name, n=1):
        with self.lock:
            self.values[name] = self.values.get(name, 0) + n


def loris(addr, count, deadline, counts, ready_file):
    sel = selectors.DefaultSelector()

    def open_one():
        try:
            sock = socket.create_connection(addr, timeout=5)
            sock.sendall(HALF_HEAD)
            sock.setblocking(False)
            sel.register(sock, selectors.EVENT_READ)
            return True
        except OSError:
            counts.add("loris_connect_failed")
            return False

    opened = sum(open_one() for _ in range(count))
    counts.add("loris_opened", opened)
    with open(ready_file, "w") as f:
        f.write(str(opened))
    while time.monotonic() < deadline:
        for key, _ in sel.select(timeout=0.5):
            sock = key.fileobj
            try:
                data = sock.recv(4096)
            except OSError:
                data = b""
            if data.startswith(b"HTTP/1.1 503"):
                counts.add("loris_refused_503")
            sel.unregister(sock)
            sock.close()
            counts.add("loris_cut")
            if open_one():
                counts.add("loris_reopened")
    counts.add("loris_open_at_end", len(sel.get_map()))


def flooder(addr, topic, body, deadline, counts, auth, honor):
    credentials = ""
    if auth:
        credentials = "Authorization: Basic %s\r\n" % base64.b64encode(auth.encode()).decode()
    head = (
        "POST /v1/topics/%s/produce/batch HTTP/1.1\r\nHost: x\r\n%s"
        "Content-Type: application/json\r\nContent-Length: %d\r\n\r\n"
        % (topic, credentials, len(body))
    ).encode()
    while time.monotonic() < deadline:
        try:
            sock = socket.create_connection(addr, timeout=30)
        except OSError:
            counts.add("flood_connect_failed")
            time.sleep(0.1)
            continue
        writer = threading.Thread(target=send_quietly, args=(sock, head + body))
        writer.start()
        status, retry_after = head_of(sock)
        writer.join()
        sock.close()
        counts.add("flood_%d" % status if status else "flood_no_answer")
        if honor and retry_after:
            time.sleep(min(retry_after, max(0.0, deadline - time.monotonic())))


def send_quietly(sock, data):
    try:
        sock.sendall(data)
    except OSError:
        pass


def oversize(addr, deadline, counts):
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 32768 + b"\r\n\r\n"
    while time.monotonic() < deadline:
        try:
            sock = socket.create_connection(addr, timeout=30)
            sock.sendall(request)
            status = status_of(sock)
            sock.close()
            counts.add("oversize_%d" % status if status else "oversize_no_answer")
        except OSError:
            counts.add("oversize_error")
        time.sleep(0.2)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("addr")
    parser.add_argument("--loris", type=int, default=2000)
    parser.add_argument("--flooders", type=int, default=24)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--flood-topic", default="flood")
    parser.add_argument("--ready-file", required=True)
    parser.add_argument("--auth", default="", help="USER:PASS the flooders send")
    parser.add_argument("--honor-retry-after", action="store_true")
    args = parser.parse_args()
    host, port = args.addr.rsplit(":", 1)
    addr = (host, int(port))
    deadline = time.monotonic() + args.seconds
    counts = Counts()
    body = batch_body()
    threads = [threading.Thread(target=loris, args=(addr, args.loris, deadline, counts, args.ready_file))]
    flood_args = (addr, args.flood_topic, body, deadline, counts, args.auth, args.honor_retry_after)
    threads += [threading.Thread(target=flooder, args=flood_args) for _ in range(args.flooders)]
    threads.append(threading.Thread(target=oversize, args=(addr, deadline, counts)))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(json.dumps(dict(sorted(counts.values.items()))))


if __name__ == "__main__":
    main()
