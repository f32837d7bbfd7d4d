#!/usr/bin/env python3
"""demo-smoke: drive weft-demo end to end (Python standard library only).

Usage: demo-smoke.py PATH/TO/weft-demo

1. Starts the demo on a free port (--port 0; it prints the port it got).
2. Echoes lines through several clients at once: a plain line, a line split
   across two sends, 1 MiB sent while the client does not read (the demo
   must stop reading and then catch up, not buffer without bound), and a
   bulk send ending in an unterminated line and a half-close.
3. Waits for a stats line (the 1 s timeout works).
4. Sends SIGTERM with a client still connected: exit code 0 within 5 s.
5. Runs it again with --duration 1: it must stop by itself, with code 0.
"""
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time

STARTUP_TIMEOUT = 30  # sanitizer builds start slowly
EXIT_TIMEOUT = 5


class Demo:
    def __init__(self, path, *args):
        self.lines = queue.Queue()
        self.log = []
        self.proc = subprocess.Popen([path, "--port", "0", "--workers", "2", *args],
                                     stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
        # Drain stdout all the time, so the demo never blocks on a full pipe.
        threading.Thread(target=self._drain, daemon=True).start()
        self.port = int(self.expect(r"listening on 127\.0\.0\.1:(\d+)", STARTUP_TIMEOUT).group(1))

    def _drain(self):
        for line in self.proc.stdout:
            self.log.append(line)
            self.lines.put(line)

    def expect(self, pattern, timeout):
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                line = self.lines.get(timeout=max(left, 0.01))
            except queue.Empty:
                raise AssertionError(f"no line matching {pattern!r} within {timeout} s")
            m = re.search(pattern, line)
            if m:
                return m

    def wait(self, timeout):
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the demo did not exit within {timeout} s")

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def connect(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def recv_exactly(s, n):
    data = bytearray()
    while len(data) < n:
        chunk = s.recv(min(65536, n - len(data)))
        if not chunk:
            raise AssertionError(f"connection closed after {len(data)} of {n} bytes")
        data += chunk
    return bytes(data)


def check_echo(port):
    a = connect(port)
    a.sendall(b"hello\n")
    assert recv_exactly(a, 6) == b"hello\n", "plain line"

    b = connect(port)
    b.sendall(b"wor")
    time.sleep(0.1)  # the demo must hold a partial line, not echo it
    b.sendall(b"ld\nand more\n")
    assert recv_exactly(b, 15) == b"world\nand more\n", "split line"
    b.close()

    # 1 MiB while not reading: the demo's 64 KiB bound kicks in, then we read.
    c = connect(port)
    payload = b"".join(b"%07d abcdefghijklmnopqrstuvwxyz\n" % i for i in range(1 << 15))
    sender = threading.Thread(target=c.sendall, args=(payload,), daemon=True)
    sender.start()
    time.sleep(0.5)
    assert recv_exactly(c, len(payload)) == payload, "bulk echo"
    sender.join(10)
    c.close()

    # Half-close after a bulk send ending in an unterminated line: the demo
    # must echo all of it, the last line too, and only then close.
    d = connect(port)
    payload = payload[: 1 << 18] + b"no newline at the end"
    sender = threading.Thread(target=lambda: (d.sendall(payload), d.shutdown(socket.SHUT_WR)),
                              daemon=True)
    sender.start()
    assert recv_exactly(d, len(payload)) == payload, "bulk echo before end of stream"
    assert d.recv(16) == b"", "the demo must close after echoing everything"
    sender.join(10)
    d.close()

    a.sendall(b"still here\n")
    assert recv_exactly(a, 11) == b"still here\n", "first client after the others"
    return a


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    path = sys.argv[1]

    demo = Demo(path)
    try:
        a = check_echo(demo.port)
        demo.expect(r"^stats: workers=2 ", 5)
        demo.proc.send_signal(signal.SIGTERM)  # with client a still connected
        rc = demo.wait(EXIT_TIMEOUT)
        assert rc == 0, f"exit code {rc} after SIGTERM"
        assert a.recv(16) == b"", "client socket still open after exit"
        a.close()
    except BaseException:
        demo.kill()
        sys.stderr.write("---- demo output ----\n" + "".join(demo.log))
        raise

    timed = Demo(path, "--duration", "1")
    try:
        rc = timed.wait(1 + EXIT_TIMEOUT)
        assert rc == 0, f"exit code {rc} after --duration 1"
    except BaseException:
        timed.kill()
        sys.stderr.write("---- demo output ----\n" + "".join(timed.log))
        raise
    print("demo-smoke: ok")


if __name__ == "__main__":
    main()
