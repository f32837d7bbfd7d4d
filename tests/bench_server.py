"""bench_server.py: what the Python tests share about examples/bench-server
(http-hammer.py, http-conformance.py): starting it on a free port, asking it
GET /, stopping it (stop() serves httpd-user.py's weft-httpd too). WEFT_TEST_WRAPPER, if set, is a command the server runs
under (.ci/run: valgrind)."""
import os, re, shlex, signal, socket, subprocess

HELLO = b'Hello, World!'


def start(server, *args):
    """Starts @server on a free port with two workers and @args; returns
    (process, port)."""
    wrapper = shlex.split(os.environ.get('WEFT_TEST_WRAPPER', ''))
    p = subprocess.Popen(wrapper + [server, '--port', '0', '--workers', '2'] + list(args),
                         stdout=subprocess.PIPE, text=True)
    m = re.search(r':(\d+)/', p.stdout.readline())
    if not m:
        p.kill()
        raise SystemExit('%s printed no port' % server)
    return p, int(m.group(1))


def hello_fails(host, port):
    """None if GET / (on a connection of its own) is answered 200 with
    HELLO, else what came instead (or the socket error)."""
    try:
        s = socket.create_connection((host, port), timeout=10)
        s.sendall(b'GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n')
        got = b''
        while True:
            b = s.recv(65536)
            if not b:
                break
            got += b
        s.close()
    except OSError as e:
        got = repr(e).encode()
    if got.startswith(b'HTTP/1.1 200 ') and got.endswith(b'\r\n\r\n' + HELLO):
        return None
    return got


def stop(p, timeout):
    """SIGTERM; returns the exit code, or 'hung on SIGTERM' (killed then)
    if it did not exit within @timeout seconds."""
    p.send_signal(signal.SIGTERM)
    try:
        return p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        return 'hung on SIGTERM'
