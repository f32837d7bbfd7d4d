#!/usr/bin/env python3
"""httpd-smoke.py WEFT_HTTPD DOCS_DIR: starts weft-httpd on a free port
serving DOCS_DIR, fetches the index page, a Markdown file with a range and
the status page with http.client, the first server-sent event of
/_weft/events with a raw socket, then stops it with SIGTERM; it must exit
0 within 10 s. A second instance runs with --header-timeout-ms and
--keepalive-timeout-ms: a stalled head gets a 408, an idle keep-alive
connection is closed, each no sooner than its flag says. Last, usage
errors (a stray argument, --workers 4097, a negative timeout, --cert
without --key) exit 2 with a message and never serve."""
import http.client, json, os, re, signal, socket, subprocess, sys, tempfile, time

httpd, docs = sys.argv[1], sys.argv[2]


def recv_to_eof(s):
    """What socket s receives until its peer closes."""
    got = b''
    while True:
        chunk = s.recv(4096)
        if not chunk:
            return got
        got += chunk


p = subprocess.Popen([httpd, '--listen', '127.0.0.1:0', '--root', docs, '--workers', '2'],
                     stdout=subprocess.PIPE, text=True)
try:
    line = p.stdout.readline()
    m = re.search(r'port (\d+)', line)
    assert m, 'no port in: %r' % line
    c = http.client.HTTPConnection('127.0.0.1', int(m.group(1)), timeout=10)
    c.request('GET', '/')
    r = c.getresponse()
    body = r.read()
    assert r.status == 200 and b'<h1>Weft</h1>' in body, (r.status, body[:200])
    assert r.getheader('Content-Type').startswith('text/html')
    c.request('GET', '/architecture.md', headers={'Range': 'bytes=0-5'})
    r = c.getresponse()
    assert r.status == 206 and r.read() == b'# Weft', r.status
    c.request('GET', '/_weft/status')
    r = c.getresponse()
    st = json.loads(r.read())
    assert st['requests'] >= 2 and st['engine']['workers'] == 2, st
    assert st['responses']['2xx'] >= 2, st
    assert sum(b['count'] for b in st['latency_us']) == sum(st['responses'].values()), st
    # Server-sent events: the first arrives at once, chunked, and parses.
    s = socket.create_connection(('127.0.0.1', int(m.group(1))), timeout=10)
    s.sendall(b'GET /_weft/events HTTP/1.1\r\nHost: a\r\n\r\n')
    got = b''
    while b'\n\n' not in got.split(b'\r\n\r\n', 1)[-1] or b'\r\n\r\n' not in got:
        chunk = s.recv(4096)
        assert chunk, got
        got += chunk
    head, body = got.split(b'\r\n\r\n', 1)
    assert b'Transfer-Encoding: chunked' in head and b'text/event-stream' in head, head
    ev = body.split(b'\r\n', 1)[1]
    assert ev.startswith(b'event: status\ndata: {'), ev
    json.loads(ev.split(b'data: ', 1)[1].split(b'\n', 1)[0])
    s.close()
    # The keep-alive connection stays open: shutdown closes it as idle at
    # once instead of waiting out its 5 s deadline.
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=2) == 0, p.returncode
finally:
    if p.poll() is None:
        p.kill()

# The timeout flags (the old names --header-timeout and --keepalive-timeout
# are hidden aliases).
p = subprocess.Popen([httpd, '--listen', '127.0.0.1:0', '--root', docs, '--workers', '1',
                      '--header-timeout-ms', '300', '--keepalive-timeout-ms', '600'],
                     stdout=subprocess.PIPE, text=True)
try:
    m = re.search(r'port (\d+)', p.stdout.readline())
    port = int(m.group(1))
    s = socket.create_connection(('127.0.0.1', port), timeout=10)
    t = time.monotonic()
    s.sendall(b'GET / HTTP/1.1\r\nHost: a\r\n')
    got = recv_to_eof(s)
    waited = time.monotonic() - t
    assert got.startswith(b'HTTP/1.1 408 '), got[:100]
    assert waited >= 0.25, waited
    s.close()
    c = http.client.HTTPConnection('127.0.0.1', port, timeout=10)
    c.request('GET', '/architecture.md', headers={'Range': 'bytes=0-5'})
    r = c.getresponse()
    assert r.status == 206 and r.read() == b'# Weft', r.status
    t = time.monotonic()
    assert c.sock.recv(1) == b''  # closed by the server when idle
    waited = time.monotonic() - t
    assert waited >= 0.5, waited
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=2) == 0, p.returncode
finally:
    if p.poll() is None:
        p.kill()

# --max-body 0 is a limit like any other (a body at all is 413), not
# the default 8 MiB.
p = subprocess.Popen([httpd, '--listen', '127.0.0.1:0', '--root', docs, '--workers', '1',
                      '--max-body', '0'], stdout=subprocess.PIPE, text=True)
try:
    port = int(re.search(r'port (\d+)', p.stdout.readline()).group(1))
    s = socket.create_connection(('127.0.0.1', port), timeout=10)
    s.sendall(b'GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\nConnection: close\r\n\r\nx')
    got = recv_to_eof(s)
    s.close()
    assert got.startswith(b'HTTP/1.1 413 '), got[:100]
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=2) == 0, p.returncode
finally:
    if p.poll() is None:
        p.kill()

# Usage errors exit 2 with a message, before serving anything: a stray
# argument (the directory belongs to --root: "weft-httpd DIR" must not
# serve docs/ instead), more workers than weft_engine_new() takes (not a
# GLib critical), a negative timeout (not quietly the default).
for args in ([docs], ['--workers', '4097'], ['--header-timeout-ms', '-5'],
             ['--keepalive-timeout-ms', '-1'], ['--cert', docs]):
    p = subprocess.run([httpd, '--listen', '127.0.0.1:0', '--root', docs] + args,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=10)
    assert p.returncode == 2, (args, p.returncode, p.stdout, p.stderr)
    assert 'serving' not in p.stdout and 'CRITICAL' not in p.stderr, (args, p.stdout, p.stderr)
    assert p.stderr.startswith('weft-httpd: '), (args, p.stderr)

# A second SIGINT during the drain cuts it short (an event stream would
# hold it for its 5 s), and SIGHUP stops as SIGTERM does: exit 0, the
# unix: socket removed (the default action killed it and left the file,
# so the next start failed with "File exists").
p = subprocess.Popen([httpd, '--listen', '127.0.0.1:0', '--root', docs, '--workers', '1'],
                     stdout=subprocess.PIPE, text=True)
try:
    port = int(re.search(r'port (\d+)', p.stdout.readline()).group(1))
    s = socket.create_connection(('127.0.0.1', port), timeout=10)
    s.sendall(b'GET /_weft/events HTTP/1.1\r\nHost: a\r\n\r\n')
    assert s.recv(4096).startswith(b'HTTP/1.1 200 ')
    p.send_signal(signal.SIGINT)
    time.sleep(0.3)
    assert p.poll() is None  # draining: the stream is still open
    t = time.monotonic()
    p.send_signal(signal.SIGINT)
    assert p.wait(timeout=10) == 0, p.returncode
    assert time.monotonic() - t < 2, time.monotonic() - t
    assert 'second signal' in p.stdout.read()
    s.close()
finally:
    if p.poll() is None:
        p.kill()
sock_dir = tempfile.mkdtemp()
sock_path = os.path.join(sock_dir, 'httpd.sock')
p = subprocess.Popen([httpd, '--listen', 'unix:' + sock_path, '--root', docs, '--workers', '1'],
                     stdout=subprocess.PIPE, text=True)
try:
    line = p.stdout.readline()
    assert 'serving' in line and 'port' not in line, line  # a unix: socket has no port
    assert os.path.exists(sock_path)
    p.send_signal(signal.SIGHUP)
    assert p.wait(timeout=10) == 0, p.returncode
    assert not os.path.exists(sock_path)
finally:
    if p.poll() is None:
        p.kill()
    if os.path.exists(sock_path):
        os.unlink(sock_path)
    os.rmdir(sock_dir)
print('ok')
