"""Servers for the remote-shard tests (test_remote_shards.py), started by the tests on 127.0.0.1.

  - RangeServer: a folder over plain HTTP with Range (206, Content-Range; 416 past the end),
    which Python's http.server does not do;
  - FaultProxy: forwards each GET to an upstream (RangeServer or moto's S3 server) with its
    headers as sent (Host too: a SigV4 signature covers it), and injects the fault its
    plan gives the request: "reset" (the status, the headers and part of the body, then a
    TCP reset), "503" (a 503 without asking upstream), "stall" (part of the body, then
    nothing for longer than the reader waits), "cut" (part of the body, then a clean close
    short of Content-Length), "wrong-range" (a 206 for bytes starting one later than
    asked: plain HTTP only, a signature covers the Range);
  - moto_server: moto's standalone S3 server in a child process.
Every server runs in daemon threads and stops with the test session; each proxy request
is counted and recorded (path and range), so a test knows faults were met and how many
GETs a read took.
"""
import http.client
import http.server
import os
import re
import shutil
import socket
import socketserver
import struct
import subprocess
import sys
import threading
import time

CHUNK = 8 << 20  # source/remote.h's FERRY__REMOTE_CHUNK: the open's stream reads


class _Quiet(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request, client_address):
        pass  # a fault the proxy made on purpose, or a client that went away


def _start(handler):
    server = _Server(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def parse_range(header, size):
    """(first, last) of a 'bytes=A-B' or 'bytes=A-' header, or None."""
    m = re.fullmatch(r"bytes=(\d+)-(\d*)", header or "")
    if not m:
        return None
    first = int(m.group(1))
    last = int(m.group(2)) if m.group(2) else size - 1
    return first, min(last, size - 1)


def range_server(root):
    """Serve the folder `root` with Range support; returns (server, base URL)."""

    class Handler(_Quiet):
        def do_GET(self):
            path = os.path.join(root, self.path.lstrip("/").split("?")[0])
            if not os.path.isfile(path):
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            size = os.path.getsize(path)
            wanted = parse_range(self.headers.get("Range"), size)
            if wanted and wanted[0] >= size:
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            first, last = wanted if wanted else (0, size - 1)
            self.send_response(206 if wanted else 200)
            if wanted:
                self.send_header("Content-Range", f"bytes {first}-{last}/{size}")
            self.send_header("Content-Length", str(last - first + 1))
            self.end_headers()
            with open(path, "rb") as f:
                f.seek(first)
                self.wfile.write(f.read(last - first + 1))

    return _start(Handler)


class FaultProxy:
    """A proxy to `upstream` (a base URL); plan(n, path, range) gives the fault of the n-th
    GET (from 0) of `path` with that Range header (or None): None, "reset", "503", "stall"
    or "cut"."""

    def __init__(self, upstream, stall_seconds=5.0):
        self.upstream = upstream.split("://", 1)[1]
        self.stall_seconds = stall_seconds
        self.plan = lambda n, path, byte_range: None
        self.lock = threading.Lock()
        self.requests = 0
        self.faults = {}
        self.headers = []  # each GET's request headers, as received
        self.gets = []  # each GET's (path, Range header or None), as received
        proxy = self

        class Handler(_Quiet):
            def do_GET(self):
                with proxy.lock:
                    n = proxy.requests
                    proxy.requests += 1
                fault = proxy.plan(n, self.path, self.headers.get("Range"))
                with proxy.lock:
                    proxy.headers.append(dict(self.headers.items()))
                    proxy.gets.append((self.path, self.headers.get("Range")))
                if fault:
                    with proxy.lock:
                        proxy.faults[fault] = proxy.faults.get(fault, 0) + 1
                if fault == "503":
                    self.send_response(503)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                conn = http.client.HTTPConnection(proxy.upstream, timeout=30)
                conn.putrequest("GET", self.path, skip_host=True, skip_accept_encoding=True)
                for k, v in self.headers.items():
                    wanted = re.fullmatch(r"bytes=(\d+)-(\d*)", v) if k.lower() == "range" else None
                    if fault == "wrong-range" and wanted:  # the next byte on: a 206 for other bytes
                        v = f"bytes={int(wanted.group(1)) + 1}-{wanted.group(2)}"
                    conn.putheader(k, v)
                conn.endheaders()
                reply = conn.getresponse()
                body = reply.read()
                conn.close()
                self.send_response(reply.status)
                for k, v in reply.getheaders():
                    if k.lower() not in ("connection", "transfer-encoding", "date", "server", "content-length"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if fault in ("reset", "stall", "cut") and len(body) > 1:
                    self.wfile.write(body[: len(body) // 2])
                    self.wfile.flush()
                    if fault == "stall":
                        time.sleep(proxy.stall_seconds)
                    if fault == "reset":
                        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.close_connection = True
                    self.connection.close()
                    return
                self.wfile.write(body)

        self.server, self.url = _start(Handler)

    def every(self, k, fault, first=0, limit=None):
        """Fault GETs first, first + k, first + 2k, ... (`limit` of them at most)."""
        def plan(n, path, byte_range):
            i, r = divmod(n - first, k)
            return fault if n >= first and r == 0 and (limit is None or i < limit) else None
        self.plan = plan

    def within(self, path, first, last, fault):
        """Fault every GET of `path` asking for bytes [A, last] with A >= first: one read
        of those bytes and each retry of it (which asks from where the body stopped)."""
        def plan(n, p, byte_range):
            m = re.fullmatch(r"bytes=(\d+)-(\d+)", byte_range or "")
            return fault if p == path and m and int(m.group(1)) >= first and int(m.group(2)) == last else None
        self.plan = plan

    def shard_gets(self, chunks):
        """(shard name, first byte, last byte) of each ranged GET of a .tar so far: the
        open's CHUNK-long reads (chunks True) or every other one (False: the epoch's
        images, blocks and runs)."""
        out = []
        for path, byte_range in self.gets:
            m = re.fullmatch(r"bytes=(\d+)-(\d+)", byte_range or "")
            if path.endswith(".tar") and m and (int(m.group(2)) - int(m.group(1)) + 1 == CHUNK) == chunks:
                out.append((path.rsplit("/", 1)[1], int(m.group(1)), int(m.group(2))))
        return out

    def close(self):
        self.server.shutdown()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def moto_server(env_extra=None):
    """moto's S3 server on 127.0.0.1 in a child; returns (process, URL). Its program comes
    with moto[server] in this interpreter's environment."""
    port = free_port()
    program = shutil.which("moto_server", path=os.path.dirname(sys.executable))
    cmd = [program] if program else [sys.executable, "-m", "moto.server"]
    env = dict(os.environ, **(env_extra or {}))
    proc = subprocess.Popen(cmd + ["-H", "127.0.0.1", "-p", str(port)], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc, url
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"moto_server did not start on port {port}")
