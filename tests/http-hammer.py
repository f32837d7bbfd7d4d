#!/usr/bin/env python3
"""http-hammer.py BENCH_SERVER SECONDS: hostile traffic against
examples/bench-server for SECONDS (a fixed seed, so a failure repeats):
valid requests, pipelined mixes, mangled bytes, heads dribbled 7 bytes at
a time, oversized targets and headers, half-closes and resets. Afterwards
the server must still answer GET / correctly and exit 0 on SIGTERM. Under
the ASan and TSan builds this is where memory and threading errors in the
HTTP layer show. WEFT_TEST_WRAPPER, if set, is a command the server runs
under (.ci/run: valgrind, whose error exit code then fails the test)."""
import random, socket, sys, time

import bench_server

server, seconds = sys.argv[1], float(sys.argv[2])
p, port = bench_server.start(server)
try:
    rng = random.Random(20261122)
    pieces = [
        b'GET / HTTP/1.1\r\nHost: a\r\n\r\n',
        b'POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello',
        b'PUT /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n',
        b'POST /echo HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nxyz',
        b'GET /x HTTP/1.0\r\n\r\n', b'HEAD / HTTP/1.1\r\nHost: a\r\n\r\n', b'\r\n',
        b'GET / HTTP/1.1\r\n', b'Host: b\r\n', b'Transfer-Encoding: chunked\r\n',
        b'Content-Length: 10\r\n', b'\x00\xff\x7f', b'5\r\nab', b'0\r\n\r\n',
        b'GET /' + b'a' * 9000 + b' HTTP/1.1\r\n', b'X: ' + b'y' * 20000 + b'\r\n',
    ]
    end = time.time() + seconds
    n = 0
    while time.time() < end:
        s = socket.create_connection(('127.0.0.1', port))
        s.settimeout(0.5)
        data = b''.join(rng.choice(pieces) for _ in range(rng.randint(1, 8)))
        if rng.random() < 0.5:
            data = bytearray(data)
            for _ in range(rng.randint(0, 5)):
                if data:
                    data[rng.randrange(len(data))] = rng.randrange(256)
            data = bytes(data)
        try:
            if rng.random() < 0.3:
                for i in range(0, len(data), 7):
                    s.sendall(data[i:i + 7])
            else:
                s.sendall(data)
            if rng.random() < 0.5:
                s.shutdown(socket.SHUT_WR)
            while s.recv(65536):
                pass
        except OSError:
            pass  # resets, timeouts: the server's choice
        if rng.random() < 0.2:  # close with a reset
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b'\x01\x00\x00\x00\x00\x00\x00\x00')
        s.close()
        n += 1
    bad = bench_server.hello_fails('127.0.0.1', port)
    assert bad is None, bad
    code = bench_server.stop(p, 10)
    assert code == 0, code
    print('ok after', n, 'connections')
finally:
    if p.poll() is None:
        p.kill()
