#!/usr/bin/env python3
"""http-conformance.py: a black-box HTTP/1.1 conformance probe.

Runs about 290 named cases in eight groups (basics, pipelining, bodies,
framing, syntax, limits, timeouts, faults) over raw sockets against a
server with the bench contract (examples/bench-server.c):

    GET / and HEAD /        200 "Hello, World!", Content-Length 13
    POST /echo, PUT /echo   200, exactly the de-chunked request body, Content-Length
    anything else           404 (or the RFC's own answer: 405, 501...)

Each case sends exact bytes (whole, in pieces, with pauses, half-closes or
resets) and checks every answer: the status, a Date header, framing by
Content-Length or chunked, the body, whether the connection is then closed
or kept, how many answers a pipeline gets, or that there is none. After
each case the server must still answer GET / (and, if the probe started
it, still run). Expectations follow RFC 9110 and RFC 9112; each case's
comment cites the section. Where the RFCs allow several answers, all are
accepted and the one the server chose is printed as "choice: ...".

Usage:
  http-conformance.py --server build/examples/bench-server   # starts it (short timeouts)
  http-conformance.py --host 127.0.0.1 --port 8080 --timeouts 1,1,1   # a server already running
Options: --group G (repeatable), --case SUBSTRING, --skip-echo (servers
without /echo), -v (print every case and choice), --list.
--timeouts H,B,K: the server's header, body and keep-alive timeouts in
seconds (the probe waits that long plus --slack for timeout cases).
Exit status: 0 if every case passed and nothing crashed, 1 otherwise.

Calibration against nginx 1.22: `location = / { return 200 "Hello, World!"; }`
(404 for methods other than GET and HEAD), `location = /echo` proxied to a
small echo origin (404 unless POST or PUT), `location / { return 404; }`,
client_header_timeout, client_body_timeout and keepalive_timeout 1s,
client_max_body_size 8m, proxy_ignore_client_abort on; then --port PORT
--timeouts 1,1,1. It passes 273 of 288: it ignores invalid header lines,
does not check Host's syntax, takes only SP as OWS, answers HTTP/0.9,
HTTP/1.10 and ftp:// targets, accepts "5 x" as a chunk-size line and
refuses OPTIONS *.
WEFT_TEST_WRAPPER, if set, is a command the started server runs under.
"""
import argparse, hashlib, random, re, socket, sys, threading, time

import bench_server
from bench_server import HELLO
GET = b'GET / HTTP/1.1\r\nHost: a\r\n\r\n'
MIB = 1024 * 1024

TOKEN = rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
STATUS_RE = re.compile(rb'HTTP/1\.[01] ([1-5][0-9][0-9]) [\t\x20-\x7e\x80-\xff]*\Z')
FIELD_RE = re.compile(b'(' + TOKEN + rb'):[ \t]*([\t\x20-\x7e\x80-\xff]*?)[ \t]*\Z')
# IMF-fixdate (RFC 9110 §5.6.7), the only form a sender may generate.
DATE_RE = re.compile(rb'(Mon|Tue|Wed|Thu|Fri|Sat|Sun), [0-9]{2} (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug'
                     rb'|Sep|Oct|Nov|Dec) [0-9]{4} [0-9]{2}:[0-9]{2}:[0-9]{2} GMT\Z')


class Fail(Exception):
    pass


class Closed(Exception):
    """The peer closed (or reset) before a final answer began (after
    the 1xx answers in .interim, if any)."""
    def __init__(self, interim=()):
        Exception.__init__(self)
        self.interim = list(interim)


def req(line, *headers, body=b''):
    """A request: line and headers joined with CRLF, then the body."""
    out = line + b'\r\n'
    for h in headers:
        out += h + b'\r\n'
    return out + b'\r\n' + body


def post(body, path=b'/echo', method=b'POST', extra=()):
    return req(method + b' ' + path + b' HTTP/1.1', b'Host: a',
               b'Content-Length: %d' % len(body), *extra, body=body)


def chunked(*pieces, ext=b'', trailers=b''):
    out = b''
    for p in pieces:
        out += b'%x%s\r\n%s\r\n' % (len(p), ext, p)
    return out + b'0\r\n' + trailers + b'\r\n'


def post_chunked(body_bytes, path=b'/echo', method=b'POST', extra=()):
    return req(method + b' ' + path + b' HTTP/1.1', b'Host: a', b'Transfer-Encoding: chunked',
               *extra, body=body_bytes)


class Response:
    def __init__(self, status, headers, body, interim, raw_head):
        self.status = status
        self.headers = headers  # [(lowercase name, value)]
        self.body = body
        self.interim = interim  # 1xx statuses before it
        self.raw_head = raw_head

    def all(self, name):
        return [v for n, v in self.headers if n == name]

    def get(self, name):
        v = self.all(name)
        return v[0] if v else None

    def conn_tokens(self):
        toks = set()
        for v in self.all(b'connection'):
            toks |= {t.strip().lower() for t in v.split(b',')}
        return toks

    def says_close(self):
        return b'close' in self.conn_tokens()

    def __repr__(self):
        return '<%d %r body %d bytes>' % (self.status, self.raw_head[:200], len(self.body))


class Conn:
    def __init__(self, t, timeout=None):
        self.t = t
        self.timeout = timeout if timeout is not None else t.read_timeout
        self.s = socket.create_connection((t.host, t.port), timeout=self.timeout)
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b''
        self.eof = False
        self.wr_shut = False
        t.conns.append(self)

    def send(self, data, tolerate_close=False):
        try:
            self.s.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            if not tolerate_close:
                raise Fail('the server closed while the request was being sent')
            self.eof = True

    def send_pieces(self, data, size=1, delay=0.0, tolerate_close=False):
        for i in range(0, len(data), size):
            self.send(data[i:i + size], tolerate_close)
            if self.eof:
                return
            if delay:
                time.sleep(delay)

    def shut_wr(self):
        self.wr_shut = True
        try:
            self.s.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def rst(self):
        """Closes with a reset (SO_LINGER 0)."""
        self.s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b'\x01\x00\x00\x00\x00\x00\x00\x00')
        self.s.close()

    def close(self):
        try:
            self.s.close()
        except OSError:
            pass

    def _fill(self, deadline):
        """Reads more; FALSE at the end of input (a reset counts as one)."""
        if self.eof:
            return False
        left = deadline - time.monotonic()
        if left <= 0:
            raise Fail('timed out waiting for the server (have %r)' % self.buf[:120])
        self.s.settimeout(left)
        try:
            b = self.s.recv(262144)
        except socket.timeout:
            raise Fail('timed out waiting for the server (have %r)' % self.buf[:120])
        except ConnectionResetError:
            b = b''
        if not b:
            self.eof = True
            return False
        self.buf += b
        return True

    def wait_head(self, timeout, what):
        """Waits until a whole response head is buffered (it stays there
        for read_response); raises Fail(what) if the connection ends."""
        deadline = time.monotonic() + timeout
        while b'\r\n\r\n' not in self.buf:
            if not self._fill(deadline):
                raise Fail(what)

    def wait_continue(self, t):
        """Waits for a 100 Continue ahead of anything else; read_response
        later counts it as interim."""
        self.wait_head(t.read_timeout, 'closed before 100 Continue')
        if not self.buf.startswith(b'HTTP/1.1 100 '):
            raise Fail('expected 100 Continue first, got %r' % self.buf[:60])

    def _take(self, n, deadline):
        while len(self.buf) < n:
            if not self._fill(deadline):
                raise Fail('connection closed inside a response body (%d of %d bytes)'
                           % (len(self.buf), n))
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def _line(self, deadline):
        while b'\r\n' not in self.buf:
            if len(self.buf) > 65536 or not self._fill(deadline):
                raise Fail('bad chunked framing in a response')
        line, self.buf = self.buf.split(b'\r\n', 1)
        return line

    def read_response(self, method=b'GET', timeout=None, http10=False):
        """The next final response (1xx before it in .interim); raises
        Closed if the connection ends before any byte of it."""
        deadline = time.monotonic() + (timeout if timeout is not None else self.timeout)
        interim = []
        while True:
            while b'\r\n\r\n' not in self.buf:
                if not self._fill(deadline):
                    if not self.buf:
                        raise Closed(interim)
                    raise Fail('connection closed inside a response head: %r' % self.buf[:200])
            head, self.buf = self.buf.split(b'\r\n\r\n', 1)
            lines = head.split(b'\r\n')
            m = STATUS_RE.match(lines[0])
            if not m:
                raise Fail('bad status line %r' % lines[0][:100])
            status = int(m.group(1))
            headers = []
            for ln in lines[1:]:
                f = FIELD_RE.match(ln)
                if not f:
                    raise Fail('bad response header line %r' % ln[:100])
                headers.append((f.group(1).lower(), f.group(2)))
            if 100 <= status < 200:
                if status == 101:
                    raise Fail('101 Switching Protocols unasked')
                if http10:
                    # RFC 9110 §15.2: a server MUST NOT send 1xx to an HTTP/1.0 client.
                    raise Fail('%d sent to an HTTP/1.0 request' % status)
                interim.append(status)
                continue
            break
        r = Response(status, headers, b'', interim, head)
        # The contract (and RFC 9110 §6.6.1 for 2xx-4xx): every answer has a Date.
        dates = r.all(b'date')
        if len(dates) != 1 or not DATE_RE.match(dates[0]):
            raise Fail('Date missing, repeated or not IMF-fixdate: %r' % dates)
        if status == 405 and not r.all(b'allow'):
            raise Fail('405 without Allow (RFC 9110 §15.5.6: MUST)')
        te = r.all(b'transfer-encoding')
        cl = r.all(b'content-length')
        if len(cl) > 1 or (cl and not cl[0].isdigit()):
            raise Fail('bad Content-Length in the response: %r' % cl)
        if te and cl:
            # RFC 9112 §6.2: MUST NOT send Content-Length with Transfer-Encoding.
            raise Fail('response has both Content-Length and Transfer-Encoding')
        if method == b'HEAD' or status in (204, 304):
            return r  # RFC 9112 §6.3 rule 1: no content, whatever the fields say
        if te:
            if te[-1].strip().lower() != b'chunked':
                raise Fail('response Transfer-Encoding not chunked: %r' % te)
            if http10:
                raise Fail('chunked answer to an HTTP/1.0 request (RFC 9112 §6.1)')
            body = b''
            while True:
                size_line = self._line(deadline)
                size = int(size_line.split(b';')[0].strip(), 16)
                if size == 0:
                    while self._line(deadline) != b'':
                        pass
                    break
                body += self._take(size, deadline)
                if self._take(2, deadline) != b'\r\n':
                    raise Fail('chunk data not followed by CRLF')
            r.body = body
            return r
        if not cl:
            raise Fail('response not delimited: neither Content-Length nor chunked (%r)'
                       % head[:200])
        r.body = self._take(int(cl[0]), deadline)
        return r

    def resp(self, method=b'GET', timeout=None, http10=False):
        try:
            return self.read_response(method, timeout, http10)
        except Closed as e:
            raise Fail('connection closed without %s answer' % ('a final' if e.interim else 'an'))

    def maybe_resp(self, method=b'GET', timeout=None, http10=False):
        try:
            return self.read_response(method, timeout, http10)
        except Closed:
            return None

    def expect_closed(self, timeout=None, what='after the answer', poke=True):
        """Nothing more may come: the server closes (FIN or reset). With
        @poke, a GET / is sent first: a server that closes must not answer
        it (RFC 9112 §9.6), and one that kept the connection does, at once,
        instead of passing when its idle timeout closes it later."""
        if poke and not self.wr_shut and not self.eof:
            self.send(GET, tolerate_close=True)
        deadline = time.monotonic() + (timeout if timeout is not None else self.timeout)
        while self._fill(deadline):
            pass
        if self.buf:
            raise Fail('unexpected bytes %s: %r' % (what, self.buf[:200]))

    def still_serves(self):
        """The connection is kept: a further GET / is answered on it."""
        self.send(GET)
        hello(self.resp())


def hello(r, method=b'GET'):
    if r.status != 200:
        raise Fail('expected 200, got %d' % r.status)
    if method == b'HEAD':
        if r.body:
            raise Fail('HEAD answer with a body')
        return
    if r.body != HELLO:
        raise Fail('expected %r, got %r' % (HELLO, r.body[:100]))
    if r.get(b'content-length') != b'13':
        raise Fail('Content-Length %r, not 13' % r.get(b'content-length'))


def echoed(r, body):
    if r.status != 200:
        raise Fail('expected 200 echo, got %d %r' % (r.status, r.body[:80]))
    if r.body != body:
        raise Fail('echo differs: %d bytes, expected %d (%r...)' % (len(r.body), len(body),
                                                                    r.body[:60]))
    if r.get(b'content-length') is None:
        raise Fail('echo answer without Content-Length (the contract asks for one)')


def status_in(r, allowed):
    if r.status not in allowed:
        raise Fail('status %d, expected %s' % (r.status, '/'.join(map(str, sorted(allowed)))))


class Case:
    def __init__(self, group, name, fn, echo):
        self.group, self.name, self.fn, self.echo = group, name, fn, echo


CASES = []
GROUPS = ['basics', 'pipelining', 'bodies', 'framing', 'syntax', 'limits', 'timeouts', 'faults']


def case(group, name, echo=False):
    assert group in GROUPS

    def reg(fn):
        assert not any(c.name == name for c in CASES), name
        CASES.append(Case(group, name, fn, echo))
        return fn
    return reg


def after(t, c, r, mode):
    """What the connection does after answer @r: 'close' (must close),
    'keep' (must serve another request), 'any' (either; if it says
    Connection: close it must close)."""
    if mode == 'close' or (mode == 'any' and r.says_close()):
        c.expect_closed()
        return 'closed'
    if mode == 'keep':
        c.still_serves()
        return 'kept'
    c.send(GET, tolerate_close=True)
    r2 = c.maybe_resp()
    if r2 is None:
        return 'closed'
    hello(r2)
    return 'kept'


def row(group, name, data, allowed, mode='any', method=b'GET', body=None, silent_ok=False,
        echo=False):
    """A table case: @data in one write; the answer's status in @allowed
    (a 200 must carry @body if given, else the hello); then @mode.
    silent_ok: closing without any answer is also right."""
    allowed = set(allowed)

    def fn(t):
        c = Conn(t)
        c.send(data, tolerate_close=silent_ok)
        r = c.maybe_resp(method)
        if r is None:
            if not silent_ok:
                raise Fail('connection closed without an answer')
            t.choice('closed without an answer')
            return
        status_in(r, allowed)
        if r.status == 200:
            if body is not None:
                echoed(r, body)
            elif method in (b'GET', b'HEAD'):
                hello(r, method)
        how = after(t, c, r, mode)
        if len(allowed) > 1 or silent_ok or mode == 'any':
            t.choice('%d, %s' % (r.status, how))
    CASES.append(Case(group, name, fn, echo))


# ---------------------------------------------------------------- basics

@case('basics', 'get-root')
def _(t):
    # RFC 9110 §9.3.1 GET; the contract: 200 "Hello, World!", Content-Length 13.
    c = Conn(t)
    c.send(GET)
    r = c.resp()
    hello(r)
    if not r.raw_head.startswith(b'HTTP/1.1 200'):
        raise Fail('status line %r' % r.raw_head[:20])


@case('basics', 'head-root')
def _(t):
    # RFC 9110 §9.3.2: HEAD is GET without content; the length MAY be sent
    # (it must then be GET's); RFC 9112 §6.3 rule 1: no body follows.
    c = Conn(t)
    c.send(b'HEAD / HTTP/1.1\r\nHost: a\r\n\r\n')
    r = c.resp(b'HEAD')
    hello(r, b'HEAD')
    cl = r.get(b'content-length')
    if cl not in (None, b'13'):
        raise Fail('HEAD Content-Length %r, GET would send 13' % cl)
    t.choice('Content-Length %s' % (cl or b'absent').decode())
    c.still_serves()  # any body bytes after the head would break this


@case('basics', 'get-unknown-path')
def _(t):
    # The contract: other paths 404 (RFC 9110 §15.5.5), delimited, kept alive.
    c = Conn(t)
    c.send(b'GET /nope HTTP/1.1\r\nHost: a\r\n\r\n')
    status_in(c.resp(), {404})
    c.still_serves()


@case('basics', 'head-unknown-path')
def _(t):
    c = Conn(t)
    c.send(b'HEAD /nope HTTP/1.1\r\nHost: a\r\n\r\n')
    r = c.resp(b'HEAD')
    status_in(r, {404})
    c.still_serves()


row('basics', 'get-echo-path', b'GET /echo HTTP/1.1\r\nHost: a\r\n\r\n', {404, 405}, 'keep')
row('basics', 'delete-echo', b'DELETE /echo HTTP/1.1\r\nHost: a\r\n\r\n', {404, 405}, 'keep')
row('basics', 'post-echo', post(b'hello'), {200}, 'keep', body=b'hello', echo=True)
row('basics', 'put-echo', post(b'hello', method=b'PUT'), {200}, 'keep', body=b'hello', echo=True)
row('basics', 'query-string', b'GET /?a=1&b=2 HTTP/1.1\r\nHost: a\r\n\r\n', {200}, 'keep')
row('basics', 'echo-query-string', post(b'q', path=b'/echo?x=1'), {200}, 'keep', body=b'q', echo=True)
# RFC 9112 §3.2.2: a server MUST accept the absolute-form and MUST ignore Host then.
row('basics', 'absolute-form', b'GET http://a/ HTTP/1.1\r\nHost: a\r\n\r\n', {200}, 'keep')
row('basics', 'absolute-form-other-host', b'GET http://b.example/ HTTP/1.1\r\nHost: a\r\n\r\n',
    {200}, 'keep')
row('basics', 'absolute-form-https', b'GET https://a/ HTTP/1.1\r\nHost: a\r\n\r\n', {200}, 'keep')
row('basics', 'absolute-form-echo', post(b'abs', path=b'http://a:80/echo'), {200}, 'keep', body=b'abs',
    echo=True)
row('basics', 'empty-query', b'GET /? HTTP/1.1\r\nHost: a\r\n\r\n', {200}, 'keep')
row('basics', 'absolute-form-empty-path', b'GET http://a HTTP/1.1\r\nHost: a\r\n\r\n', {200}, 'keep')
# RFC 9110 §4.2.3: the scheme and host are case-insensitive.
row('basics', 'absolute-form-scheme-case', b'GET HTTP://A/ HTTP/1.1\r\nHost: a\r\n\r\n', {200}, 'keep')
# RFC 9110 §7.8: a server MAY ignore Upgrade; then it answers in HTTP/1.1.
row('basics', 'upgrade-h2c-ignored', b'GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade, HTTP2-Settings\r\n'
    b'Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAoAAAAAIAAAAA\r\n\r\n', {200}, 'keep')
row('basics', 'upgrade-websocket-ignored', b'GET / HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\n'
    b'Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n',
    {200}, 'keep')
# RFC 9110 §10.1.4: TE (not Transfer-Encoding) is only a wish about the answer.
row('basics', 'te-trailers-header', b'GET / HTTP/1.1\r\nHost: a\r\nTE: trailers\r\nConnection: TE\r\n\r\n',
    {200}, 'keep')
row('basics', 'host-with-port', b'GET / HTTP/1.1\r\nHost: a.example:8080\r\n\r\n', {200}, 'keep')
row('basics', 'host-ipv6', b'GET / HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n', {200}, 'keep')
row('basics', 'host-ows', b'GET / HTTP/1.1\r\nHost: \t a.example \t\r\n\r\n', {200}, 'keep')
# RFC 9112 §6.3 rule 7: an HTTP/1.0 request without framing has no content.
row('basics', 'http10-post-no-length', b'POST /echo HTTP/1.0\r\n\r\n', {200}, 'close', body=b'',
    echo=True)
row('basics', 'echo-connection-close', post(b'bye', extra=[b'Connection: close']), {200}, 'close',
    body=b'bye', echo=True)
# RFC 9110 §7.6.1: Connection may be repeated; the options add up.
row('basics', 'connection-two-fields',
    b'GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive\r\nConnection: close\r\n\r\n', {200}, 'close')
row('basics', 'host-ipv4', b'GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n', {200}, 'keep')
# RFC 9110 §5.1: field names are case-insensitive.
row('basics', 'field-name-case', b'GET / HTTP/1.1\r\nhOsT: a\r\n\r\n', {200}, 'keep')
row('basics', 'echo-field-name-case',
    b'POST /echo HTTP/1.1\r\nhost: a\r\ncontent-LENGTH: 3\r\n\r\nabc', {200}, 'keep', body=b'abc',
    echo=True)


@case('basics', 'http10-closes')
def _(t):
    # RFC 9112 §9.3: HTTP/1.0 without keep-alive is not persistent.
    c = Conn(t)
    c.send(b'GET / HTTP/1.0\r\n\r\n')
    hello(c.resp(http10=True))
    c.expect_closed()


@case('basics', 'http10-keep-alive')
def _(t):
    # RFC 9112 §9.3 and Appendix C.2.2: a 1.0 client asking keep-alive may
    # get it; the server says so with Connection: keep-alive, or closes.
    c = Conn(t)
    c.send(b'GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n')
    r = c.resp(http10=True)
    hello(r)
    if b'keep-alive' in r.conn_tokens():
        c.send(b'GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n')
        hello(c.resp(http10=True))
        t.choice('kept')
    else:
        c.expect_closed()
        t.choice('closed')


@case('basics', 'http10-host-optional')
def _(t):
    # RFC 9112 §3.2: the Host requirement is for HTTP/1.1.
    c = Conn(t)
    c.send(b'GET /nope HTTP/1.0\r\n\r\n')
    status_in(c.resp(http10=True), {404})
    c.expect_closed()


@case('basics', 'keep-alive-default')
def _(t):
    # RFC 9112 §9.3: HTTP/1.1 is persistent by default; ten in a row.
    c = Conn(t)
    for _ in range(10):
        c.send(GET)
        hello(c.resp())


@case('basics', 'connection-close')
def _(t):
    # RFC 9112 §9.6: after a "close" request the server MUST close; it
    # SHOULD say Connection: close.
    c = Conn(t)
    c.send(b'GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n')
    r = c.resp()
    hello(r)
    c.expect_closed()
    t.choice('Connection: close %s' % ('sent' if r.says_close() else 'not sent'))


@case('basics', 'http-1-2-as-1-1')
def _(t):
    # RFC 9110 §6.2: a higher minor version is processed as the highest one
    # implemented; the answer is HTTP/1.1.
    c = Conn(t)
    c.send(b'GET / HTTP/1.2\r\nHost: a\r\n\r\n')
    r = c.resp()
    hello(r)
    if not r.raw_head.startswith(b'HTTP/1.1 '):
        raise Fail('answered as %r' % r.raw_head[:8])


@case('basics', 'sequential-100')
def _(t):
    c = Conn(t)
    for i in range(100):
        c.send(GET if i % 2 else post(b'x%d' % i))
        r = c.resp()
        hello(r) if i % 2 else echoed(r, b'x%d' % i)


@case('basics', 'options-asterisk')
def _(t):
    # RFC 9112 §3.2.4, RFC 9110 §9.3.7: OPTIONS * is a valid request about
    # the server; any well-formed, non-error-of-syntax answer will do.
    c = Conn(t)
    c.send(b'OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n')
    r = c.resp()
    status_in(r, {200, 204, 404, 405, 501})
    t.choice('%d, %s' % (r.status, after(t, c, r, 'any')))


# ------------------------------------------------------------ pipelining

def pipeline_case(name, data, checks, mode='keep', echo=False, pieces=None):
    """@checks: one function per expected answer (called with the answer);
    the connection then behaves per @mode ('keep', 'close')."""
    def fn(t):
        c = Conn(t)
        if pieces:
            c.send_pieces(data, pieces)
        else:
            c.send(data)
        for i, chk in enumerate(checks):
            method = getattr(chk, 'method', b'GET')
            try:
                chk(c.resp(method))
            except Fail as e:
                raise Fail('answer %d: %s' % (i + 1, e))
        if mode == 'close':
            c.expect_closed(what='after the last answer due')
        else:
            c.still_serves()
    CASES.append(Case('pipelining', name, fn, echo))


def is_hello(r):
    hello(r)


def is_head(r):
    hello(r, b'HEAD')


is_head.method = b'HEAD'


def is_status(code):
    def chk(r):
        status_in(r, {code})
    return chk


def is_echo(body):
    def chk(r):
        echoed(r, body)
    return chk


# RFC 9112 §9.3.2: pipelined requests are answered in order.
pipeline_case('three-gets', GET * 3, [is_hello] * 3)
pipeline_case('get-head-get', GET + b'HEAD / HTTP/1.1\r\nHost: a\r\n\r\n' + GET,
              [is_hello, is_head, is_hello])
pipeline_case('mixed-404', GET + b'GET /nope HTTP/1.1\r\nHost: a\r\n\r\n' + GET,
              [is_hello, is_status(404), is_hello])
pipeline_case('post-then-get', post(b'abc') + GET, [is_echo(b'abc'), is_hello], echo=True)
pipeline_case('chunked-then-get', post_chunked(chunked(b'abc', b'de')) + GET,
              [is_echo(b'abcde'), is_hello], echo=True)
pipeline_case('empty-body-then-get', post(b'') + GET, [is_echo(b''), is_hello], echo=True)
pipeline_case('byte-by-byte', GET + post(b'xyz') + GET, [is_hello, is_echo(b'xyz'), is_hello],
              echo=True, pieces=1)
pipeline_case('split-7', (GET + post_chunked(chunked(b'hello', b'world'))) * 3,
              [is_hello, is_echo(b'helloworld')] * 3, echo=True, pieces=7)
pipeline_case('hundred-gets', GET * 100, [is_hello] * 100)
pipeline_case('fifty-echoes', b''.join(post(b'body-%d' % i) for i in range(50)),
              [is_echo(b'body-%d' % i) for i in range(50)], echo=True)
pipeline_case('ten-heads', b'HEAD / HTTP/1.1\r\nHost: a\r\n\r\n' * 10, [is_head] * 10)
# RFC 9112 §9.6: nothing after a "close" request is processed.
pipeline_case('close-in-middle',
              GET + b'GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n' + GET,
              [is_hello, is_hello], mode='close')
pipeline_case('http10-in-middle', GET + b'GET / HTTP/1.0\r\n\r\n' + GET, [is_hello, is_hello],
              mode='close')
# RFC 9112 §2.2: empty lines before a request-line SHOULD be ignored.
pipeline_case('crlf-between', GET + b'\r\n' + GET, [is_hello, is_hello])
# Old clients put a CRLF after a POST body: an empty line before the next
# request-line, ignored (RFC 9112 §2.2).
pipeline_case('crlf-after-body', post(b'abc') + b'\r\n' + GET, [is_echo(b'abc'), is_hello], echo=True)
pipeline_case('get-with-body-then-get',
              b'GET / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nGET /' + GET,
              [is_hello, is_hello])
pipeline_case('big-echoes-in-order',
              b''.join(post(bytes([65 + i]) * (256 * 1024)) for i in range(4)),
              [is_echo(bytes([65 + i]) * (256 * 1024)) for i in range(4)], echo=True)


pipeline_case('post-root-then-get', req(b'POST / HTTP/1.1', b'Host: a', b'Content-Length: 9',
                                       body=b'GET /x HT') + GET,
              [lambda r: status_in(r, {404, 405}), is_hello])
pipeline_case('unknown-method-body-then-get',
              req(b'BREW /pot HTTP/1.1', b'Host: a', b'Content-Length: 9', body=b'GET /x HT') + GET,
              [lambda r: status_in(r, {501, 405, 404}), is_hello])
pipeline_case('head-with-body-then-get',
              req(b'HEAD / HTTP/1.1', b'Host: a', b'Transfer-Encoding: chunked', body=chunked(b'GET /')) + GET,
              [is_head, is_hello])
pipeline_case('get-404-body-then-get', req(b'GET /nope HTTP/1.1', b'Host: a', b'Content-Length: 4',
                                           body=b'\r\n\r\n') + GET,
              [is_status(404), is_hello])


@case('pipelining', 'half-close-after-pipeline')
def _(t):
    # RFC 9112 §9.6: a half-close ends the requests, not the answers.
    c = Conn(t)
    c.send(GET * 5 + post(b'last'))
    c.shut_wr()
    for _ in range(5):
        hello(c.resp())
    echoed(c.resp(), b'last')
    c.expect_closed()


@case('pipelining', 'error-in-middle')
def _(t):
    # A bad request after a good one: the good one is answered first
    # (RFC 9112 §9.3.2 order), then 400; what follows the bad one may be
    # dropped with the connection.
    c = Conn(t)
    c.send(GET + b'GET / HTTP/1.1\r\nHost a\r\n\r\n' + GET)
    hello(c.resp())
    r = c.resp()
    status_in(r, {400})
    r3 = c.maybe_resp()
    if r3 is not None:
        hello(r3)
        t.choice('400, then the next request answered')
    else:
        t.choice('400, closed')


@case('pipelining', 'get-then-bad-head')
def _(t):
    # The refusal of a pipelined HEAD has no content either (RFC 9110 §9.3.2).
    c = Conn(t)
    c.send(GET + b'HEAD / HTTP/1.1\r\nHost a\r\n\r\n')
    hello(c.resp())
    r = c.resp(b'HEAD')
    status_in(r, {400})
    t.choice('400, %s' % after(t, c, r, 'any'))


@case('pipelining', 'expect-continue-pipelined', echo=True)
def _(t):
    # RFC 9110 §10.1.1: the body already sent, a 100 is optional; if one
    # comes it precedes the final answer of its request.
    c = Conn(t)
    c.send(GET + post(b'abc', extra=[b'Expect: 100-continue']) + GET)
    r = c.resp()
    hello(r)
    if r.interim:
        raise Fail('a 100 before the answer to a request without Expect')
    r = c.resp()
    echoed(r, b'abc')
    hello(c.resp())
    t.choice('100 %s' % ('sent' if r.interim else 'not sent'))


@case('pipelining', 'expect-continue-after-get', echo=True)
def _(t):
    # RFC 9110 §10.1.1: the 100 is due even when the request came behind another.
    c = Conn(t)
    c.send(GET + req(b'POST /echo HTTP/1.1', b'Host: a', b'Content-Length: 5',
                     b'Expect: 100-continue'))
    hello(c.resp())
    c.wait_continue(t)
    c.send(b'hello')
    echoed(c.resp(), b'hello')


@case('pipelining', 'rest-after-body-same-packet', echo=True)
def _(t):
    # The next request starts in the same segment as the end of a body.
    c = Conn(t)
    c.send(post(b'12345')[:-2])
    time.sleep(0.05)
    c.send(b'45' + post_chunked(chunked(b'x')) + GET)
    echoed(c.resp(), b'12345')
    echoed(c.resp(), b'x')
    hello(c.resp())


# ---------------------------------------------------------------- bodies

row('bodies', 'cl-5', post(b'hello'), {200}, 'keep', body=b'hello', echo=True)
row('bodies', 'cl-0', post(b''), {200}, 'keep', body=b'', echo=True)
# RFC 9112 §6.3 rule 7: no Content-Length, no Transfer-Encoding: length 0.
row('bodies', 'no-length', b'POST /echo HTTP/1.1\r\nHost: a\r\n\r\n', {200}, 'keep', body=b'',
    echo=True)
# RFC 9112 §7.1: the chunked coding.
row('bodies', 'chunked-one', post_chunked(chunked(b'hello')), {200}, 'keep', body=b'hello', echo=True)
row('bodies', 'chunked-many', post_chunked(chunked(b'a', b'bc', b'def', b'0123456789abcdef')),
    {200}, 'keep', body=b'abcdef0123456789abcdef', echo=True)
row('bodies', 'chunked-zero', post_chunked(b'0\r\n\r\n'), {200}, 'keep', body=b'', echo=True)
row('bodies', 'chunked-upper-hex', post_chunked(b'A\r\n0123456789\r\n0\r\n\r\n'), {200}, 'keep',
    body=b'0123456789', echo=True)
row('bodies', 'chunked-leading-zeros', post_chunked(b'0005\r\nhello\r\n000\r\n\r\n'), {200}, 'keep',
    body=b'hello', echo=True)
# RFC 9112 §7.1.1: unrecognized chunk extensions MUST be ignored.
row('bodies', 'chunk-ext', post_chunked(chunked(b'hello', ext=b';name=value')), {200}, 'keep',
    body=b'hello', echo=True)
row('bodies', 'chunk-ext-quoted', post_chunked(chunked(b'hello', ext=b';n="a; b\\" c"')), {200},
    'keep', body=b'hello', echo=True)
row('bodies', 'chunk-ext-bws', post_chunked(b'5 ; n = v\r\nhello\r\n0\r\n\r\n'), {200}, 'keep',
    body=b'hello', echo=True)
row('bodies', 'chunk-ext-no-value', post_chunked(chunked(b'hello', ext=b';flag;x=1')), {200},
    'keep', body=b'hello', echo=True)
# RFC 9112 §7.1.2: trailer fields; the server may drop them.
row('bodies', 'trailers', post_chunked(chunked(b'hello', trailers=b'X-Sum: 1\r\nX-More: 2\r\n')),
    {200}, 'keep', body=b'hello', echo=True)
row('bodies', 'last-chunk-ext', post_chunked(b'5\r\nhello\r\n0;end=1\r\n\r\n'), {200}, 'keep',
    body=b'hello', echo=True)
row('bodies', 'trailers-many', post_chunked(chunked(b'hello', trailers=b''.join(
    b'X-T%d: %d\r\n' % (i, i) for i in range(50)))), {200}, 'keep', body=b'hello', echo=True)
row('bodies', 'chunked-1000-chunks', post_chunked(chunked(*[b'%d' % (i % 10) for i in range(1000)])),
    {200}, 'keep', body=b''.join(b'%d' % (i % 10) for i in range(1000)), echo=True)
row('bodies', 'binary-body', post(bytes(range(256)) * 4), {200}, 'keep',
    body=bytes(range(256)) * 4, echo=True)
row('bodies', 'body-looks-like-request', post(GET + b'\r\n\r\n' + GET), {200}, 'keep',
    body=GET + b'\r\n\r\n' + GET, echo=True)
row('bodies', 'put-chunked', post_chunked(chunked(b'put', b'ted'), method=b'PUT'), {200}, 'keep',
    body=b'putted', echo=True)
# RFC 9110 §8.6: Content-Length = 1*DIGIT (leading zeros included); OWS
# around a field value is not part of it (§5.5).
row('bodies', 'cl-leading-zeros', req(b'POST /echo HTTP/1.1', b'Host: a', b'Content-Length: 005',
                                      body=b'hello'), {200}, 'keep', body=b'hello', echo=True)
# RFC 9112 §7.1: chunk-size = 1*HEXDIG: leading zeros are not a size.
row('bodies', 'chunk-size-many-zeros', post_chunked(b'00000000000000000000005\r\nhello\r\n0\r\n\r\n'),
    {200}, 'keep', body=b'hello', echo=True)
row('bodies', 'cl-many-zeros', req(b'POST /echo HTTP/1.1', b'Host: a',
                                   b'Content-Length: 00000000000000000000005', body=b'hello'),
    {200}, 'keep', body=b'hello', echo=True)
row('bodies', 'cl-ows', req(b'POST /echo HTTP/1.1', b'Host: a', b'Content-Length: \t5 \t',
                            body=b'hello'), {200}, 'keep', body=b'hello', echo=True)
# RFC 9112 §7: transfer-coding names are case-insensitive.
row('bodies', 'te-case', req(b'POST /echo HTTP/1.1', b'Host: a', b'Transfer-Encoding: ChUnKeD',
                             body=chunked(b'abc')), {200}, 'keep', body=b'abc', echo=True)
row('bodies', 'te-ows', req(b'POST /echo HTTP/1.1', b'Host: a', b'Transfer-Encoding:\t chunked \t',
                            body=chunked(b'abc')), {200}, 'keep', body=b'abc', echo=True)


@case('bodies', 'body-in-pieces', echo=True)
def _(t):
    c = Conn(t)
    c.send_pieces(post(b'x' * 3000), 500, 0.01)
    echoed(c.resp(), b'x' * 3000)


@case('bodies', 'chunked-byte-by-byte', echo=True)
def _(t):
    c = Conn(t)
    c.send_pieces(post_chunked(chunked(b'hello', b'world', ext=b';a=b', trailers=b'T: v\r\n')), 1)
    echoed(c.resp(), b'helloworld')
    c.still_serves()


@case('bodies', 'one-mib', echo=True)
def _(t):
    body = bytes(random.Random(1).getrandbits(8) for _ in range(4096)) * 256
    c = Conn(t)
    c.send(post(body))
    echoed(c.resp(), body)


@case('bodies', 'one-mib-chunked', echo=True)
def _(t):
    body = bytes(random.Random(2).getrandbits(8) for _ in range(4096)) * 256
    c = Conn(t)
    c.send(post_chunked(chunked(*[body[i:i + 65536] for i in range(0, len(body), 65536)])))
    echoed(c.resp(), body)


@case('bodies', 'expect-continue', echo=True)
def _(t):
    # RFC 9110 §10.1.1: for a 1.1 request with 100-continue and content the
    # server MUST send 100 or a final answer at once; here 100, then 200.
    c = Conn(t)
    c.send(req(b'POST /echo HTTP/1.1', b'Host: a', b'Content-Length: 5', b'Expect: 100-continue'))
    c.wait_continue(t)
    c.send(b'hello')
    r = c.resp()
    echoed(r, b'hello')
    if r.interim != [100]:
        raise Fail('interim answers %r' % r.interim)


@case('bodies', 'expect-continue-chunked', echo=True)
def _(t):
    c = Conn(t)
    c.send(req(b'POST /echo HTTP/1.1', b'Host: a', b'Transfer-Encoding: chunked',
               b'Expect: 100-continue'))
    c.wait_continue(t)
    c.send(chunked(b'chunk', b'ed'))
    echoed(c.resp(), b'chunked')


@case('bodies', 'expect-on-get')
def _(t):
    # A 100-continue expectation without content: the final answer is due;
    # a 100 before it is harmless (RFC 9110 §10.1.1, §15.2.1).
    c = Conn(t)
    c.send(b'GET / HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\n\r\n')
    r = c.resp()
    hello(r)
    t.choice('100 %s' % ('sent' if r.interim else 'not sent'))
    c.still_serves()


@case('bodies', 'expect-continue-case', echo=True)
def _(t):
    # RFC 9110 §10.1.1: the expectation is case-insensitive.
    c = Conn(t)
    c.send(req(b'POST /echo HTTP/1.1', b'Host: a', b'Content-Length: 5', b'Expect: 100-Continue'))
    c.wait_continue(t)
    c.send(b'hello')
    echoed(c.resp(), b'hello')


@case('bodies', 'expect-continue-http10', echo=True)
def _(t):
    # RFC 9110 §10.1.1: a 100-continue expectation in an HTTP/1.0 request
    # MUST be ignored; §15.2: no 1xx to an HTTP/1.0 client.
    c = Conn(t)
    c.send(req(b'POST /echo HTTP/1.0', b'Content-Length: 5', b'Expect: 100-continue'))
    time.sleep(0.2)
    c.send(b'hello')
    echoed(c.resp(http10=True), b'hello')
    c.expect_closed()


@case('bodies', 'expect-continue-body-sent', echo=True)
def _(t):
    # RFC 9110 §10.1.1: the server MAY omit 100 once content has arrived.
    c = Conn(t)
    c.send(post(b'hello', extra=[b'Expect: 100-continue']))
    r = c.resp()
    echoed(r, b'hello')
    t.choice('100 %s' % ('sent' if r.interim else 'omitted'))
    c.still_serves()


@case('bodies', 'expect-continue-404', echo=True)
def _(t):
    # RFC 9110 §10.1.1: a final answer may come instead of 100; a server
    # that answers before reading the content says whether it closes or
    # reads on (then the client sends it, or a 100 came and it does).
    c = Conn(t)
    c.send(req(b'POST /nope HTTP/1.1', b'Host: a', b'Content-Length: 5', b'Expect: 100-continue'))
    c.wait_head(t.read_timeout, 'closed without an answer')
    if c.buf.startswith(b'HTTP/1.1 100 '):
        c.send(b'hello')
        r = c.resp()
        status_in(r, {404, 405})
        t.choice('100, then %d, %s' % (r.status, after(t, c, r, 'any')))
        return
    r = c.resp()
    status_in(r, {404, 405})
    if r.says_close():
        c.expect_closed()
        t.choice('%d without 100, closed' % r.status)
    else:
        c.send(b'hello', tolerate_close=True)
        t.choice('%d without 100, %s' % (r.status, after(t, c, r, 'any')))


@case('bodies', 'expect-unknown', echo=True)
def _(t):
    # RFC 9110 §10.1.1: another expectation MAY be refused with 417, or ignored.
    c = Conn(t)
    c.send(post(b'hello', extra=[b'Expect: something-else']))
    r = c.resp()
    status_in(r, {200, 417})
    if r.status == 200:
        echoed(r, b'hello')
    t.choice('%d, %s' % (r.status, after(t, c, r, 'any')))


@case('bodies', 'echo-max-body', echo=True)
def _(t):
    # The contract: bodies up to 8 MiB (the limit) are accepted.
    body = hashlib.sha256(b'seed').digest() * (t.max_body // 32)
    c = Conn(t, timeout=max(t.read_timeout, 30))
    c.send(post(body))
    r = c.resp()
    echoed(r, body)


@case('bodies', 'echo-max-body-chunked', echo=True)
def _(t):
    body = hashlib.sha256(b'chunk').digest() * (t.max_body // 32)
    c = Conn(t, timeout=max(t.read_timeout, 30))
    c.send(post_chunked(chunked(*[body[i:i + MIB] for i in range(0, len(body), MIB)])))
    echoed(c.resp(), body)


# --------------------------------------------------------------- framing
# Request smuggling: RFC 9112 §6.1, §6.3, §11.2.

def smuggle_row(name, data, allowed, mode='close', body=None):
    row('framing', name, data, allowed, mode, body=body, echo=True)


# §6.1: a server MAY reject CL with TE, or process by TE alone; either way
# it MUST close the connection after responding.
row('framing', 'head-cl-and-te', req(b'HEAD / HTTP/1.1', b'Host: a', b'Content-Length: 3',
                                    b'Transfer-Encoding: chunked', body=b'0\r\n\r\n'),
    {400, 200}, 'close', method=b'HEAD')
smuggle_row('cl-then-te', req(b'POST /echo HTTP/1.1', b'Host: a', b'Content-Length: 4',
                              b'Transfer-Encoding: chunked', body=chunked(b'abc')),
            {400, 200}, body=b'abc')
smuggle_row('te-then-cl', req(b'POST /echo HTTP/1.1', b'Host: a', b'Transfer-Encoding: chunked',
                              b'Content-Length: 4', body=chunked(b'abc')),
            {400, 200}, body=b'abc')


@case('framing', 'cl-te-smuggled-request', echo=True)
def _(t):
    # The classic CL.TE attack: whatever the server decides, /smuggled is
    # never answered and the connection closes (§6.1).
    c = Conn(t)
    c.send(req(b'POST /echo HTTP/1.1', b'Host: a', b'Content-Length: 6',
               b'Transfer-Encoding: chunked', body=b'0\r\n\r\nG') +
           b'ET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n')
    r = c.resp()
    status_in(r, {400, 200})
    if r.status == 200:
        echoed(r, b'')
    c.expect_closed()
    t.choice('%d, closed' % r.status)


@case('framing', 'te-cl-smuggled-request', echo=True)
def _(t):
    c = Conn(t)
    c.send(req(b'POST /echo HTTP/1.1', b'Host: a', b'Transfer-Encoding: chunked',
               b'Content-Length: 3', body=b'1f\r\nGET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n\r\n0\r\n\r\n'))
    r = c.resp()
    status_in(r, {400, 200})
    if r.status == 200:
        echoed(r, b'GET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n')
    c.expect_closed()
    t.choice('%d, closed' % r.status)


smuggle_row('te-cl-http10', req(b'POST /echo HTTP/1.0', b'Content-Length: 3',
                                b'Transfer-Encoding: chunked', body=chunked(b'hello')),
            {400, 200}, body=b'hello')
# RFC 9110 §8.6: a repeated identical value MAY be rejected or reduced to one.
smuggle_row('cl-duplicate-same', req(b'POST /echo HTTP/1.1', b'Host: a', b'Content-Length: 5',
                                     b'Content-Length: 5', body=b'hello'), {400, 200}, 'any',
            body=b'hello')
smuggle_row('cl-list-same', req(b'POST /echo HTTP/1.1', b'Host: a', b'Content-Length: 5, 5',
                                body=b'hello'), {400, 200}, 'any', body=b'hello')
# RFC 9112 §6.3 rule 5: an invalid Content-Length: 400, then close (MUST).
for nm, v in [('cl-duplicate-differ', [b'5', b'6']), ('cl-list-differ', [b'5, 6']),
              ('cl-negative', [b'-5']), ('cl-plus', [b'+5']), ('cl-hex', [b'0x5']),
              ('cl-empty', [b'']), ('cl-inner-space', [b'1 0']), ('cl-trailing-garbage', [b'5a']),
              ('cl-decimal', [b'5.0']), ('cl-comma-only', [b','])]:
    smuggle_row(nm, req(b'POST /echo HTTP/1.1', b'Host: a',
                        *[b'Content-Length: ' + x for x in v], body=b'hello'), {400})
smuggle_row('cl-overflow', req(b'POST /echo HTTP/1.1', b'Host: a',
                               b'Content-Length: 18446744073709551617', body=b'hello'), {400, 413})
# §6.3 rule 4: a final coding other than chunked in a request: 400 and
# close (MUST); §6.1 lets a server answer an unknown coding 501.
for nm, te in [('te-gzip', b'gzip'), ('te-chunked-gzip', b'chunked, gzip'),
               ('te-xchunked', b'xchunked'), ('te-identity', b'identity'),
               ('te-chunked-chunked', b'chunked, chunked'), ('te-chunked-param', b'chunked;q=1'),
               ('te-empty', b''), ('te-chunked-space-x', b'chunked x'), ('te-comma-only', b',')]:
    smuggle_row(nm, req(b'POST /echo HTTP/1.1', b'Host: a', b'Transfer-Encoding: ' + te,
                        body=chunked(b'hello')), {400, 501})
smuggle_row('te-two-fields-chunked', req(b'POST /echo HTTP/1.1', b'Host: a',
                                         b'Transfer-Encoding: chunked', b'Transfer-Encoding: chunked',
                                         body=chunked(b'hello')), {400, 501})
# §6.1: unknown coding before a final chunked: 501 SHOULD (400 allowed);
# the body is not read, so closing is the safe end.
smuggle_row('te-gzip-chunked', req(b'POST /echo HTTP/1.1', b'Host: a',
                                   b'Transfer-Encoding: gzip, chunked', body=chunked(b'hello')),
            {501, 400}, 'any')
smuggle_row('te-gzip-then-chunked-fields', req(b'POST /echo HTTP/1.1', b'Host: a',
                                               b'Transfer-Encoding: gzip',
                                               b'Transfer-Encoding: chunked', body=chunked(b'hello')),
            {501, 400}, 'any')
# §6.1: Transfer-Encoding in HTTP/1.0: framing faulty, close after processing.
smuggle_row('te-http10', req(b'POST /echo HTTP/1.0', b'Transfer-Encoding: chunked',
                             body=chunked(b'hello')), {400, 200}, body=b'hello')
# §5.1: whitespace between a field name and the colon: MUST 400.
smuggle_row('te-space-before-colon', req(b'POST /echo HTTP/1.1', b'Host: a',
                                         b'Transfer-Encoding : chunked', body=chunked(b'hello')),
            {400})
smuggle_row('cl-space-before-colon', req(b'POST /echo HTTP/1.1', b'Host: a',
                                         b'Content-Length : 5', body=b'hello'), {400})
# §5.2: obs-fold: reject with 400, or unfold to SP (then it is chunked).
smuggle_row('te-obs-fold', req(b'POST /echo HTTP/1.1', b'Host: a', b'Transfer-Encoding:',
                               b' chunked', body=chunked(b'hello')), {400, 200}, 'any',
            body=b'hello')
# RFC 9110 §5.6.1: empty list elements MUST be ignored ("chunked," is
# chunked); a smuggling-wary server may refuse it.
smuggle_row('te-trailing-comma', req(b'POST /echo HTTP/1.1', b'Host: a',
                                     b'Transfer-Encoding: chunked,', body=chunked(b'hello')),
            {200, 400, 501}, 'any', body=b'hello')
# §7.1: chunk-size = 1*HEXDIG; anything else is a framing error: 400, close.
for nm, body in [('chunk-size-overflow', b'1000000000000000000005\r\nhello\r\n0\r\n\r\n'),
                 ('chunk-size-not-hex', b'g\r\nhello\r\n0\r\n\r\n'),
                 ('chunk-size-0x', b'0x5\r\nhello\r\n0\r\n\r\n'),
                 ('chunk-size-negative', b'-5\r\nhello\r\n0\r\n\r\n'),
                 ('chunk-size-leading-space', b' 5\r\nhello\r\n0\r\n\r\n'),
                 ('chunk-size-empty', b'\r\nhello\r\n0\r\n\r\n'),
                 ('chunk-data-too-long', b'3\r\nhello\r\n0\r\n\r\n'),
                 ('chunk-data-too-short', b'5\r\nabc\r\n0\r\n\r\n'),
                 ('chunk-no-crlf-after-data', b'5\r\nhello0\r\n\r\n'),
                 ('chunk-bare-cr-size', b'5\rhello\r\n0\r\n\r\n'),
                 ('chunk-ext-not-semicolon', b'5 x\r\nhello\r\n0\r\n\r\n'),
                 ]:
    smuggle_row(nm, post_chunked(body), {400, 413} if 'overflow' in nm else {400})
# RFC 9110 §6.5.1: a recipient MAY discard trailer fields; one that parses
# them refuses bad ones (400), one that discards them unread goes on. The
# framing (the empty line) is the same either way. Chunk extensions are
# ignored (RFC 9112 §7.1.1): a control character in one may be too.
smuggle_row('trailer-no-colon', post_chunked(b'5\r\nhello\r\n0\r\nX-Bad\r\n\r\n'), {400, 200},
            'any', body=b'hello')
smuggle_row('trailer-space-before-colon', post_chunked(b'5\r\nhello\r\n0\r\nX-Bad : 1\r\n\r\n'),
            {400, 200}, 'any', body=b'hello')
smuggle_row('chunk-ext-ctl', post_chunked(b'5;a=\x01\r\nhello\r\n0\r\n\r\n'), {400, 200}, 'any',
            body=b'hello')
# Bare LF as a chunked line end: RFC 9112 §2.2's MAY covers it, or 400.
smuggle_row('chunk-bare-lf', post_chunked(b'5\nhello\n0\n\n'), {400, 200}, 'any', body=b'hello')
# RFC 9110 §6.5.1: framing fields in trailers are not used for framing.
smuggle_row('trailer-content-length', post_chunked(chunked(b'hello', trailers=b'Content-Length: 50\r\n')),
            {200, 400}, 'any', body=b'hello')
# A body on a GET is framed like any other and must be skipped.
row('framing', 'get-chunked-body-then-get',
    req(b'GET / HTTP/1.1', b'Host: a', b'Transfer-Encoding: chunked', body=chunked(b'GET /x')) + GET,
    {200}, 'keep')


@case('framing', 'cl-zero-then-request-order', echo=True)
def _(t):
    c = Conn(t)
    c.send(post(b'') + b'GET /nope HTTP/1.1\r\nHost: a\r\n\r\n' + GET)
    echoed(c.resp(), b'')
    status_in(c.resp(), {404})
    hello(c.resp())


@case('framing', 'nul-in-field-name')
def _(t):
    # RFC 9110 §5.5: NUL in a field MUST be rejected or replaced; in a name it is not a token.
    c = Conn(t)
    c.send(b'GET / HTTP/1.1\r\nHost: a\r\nX\x00Y: 1\r\n\r\n')
    r = c.maybe_resp()
    if r is None:
        t.choice('closed without an answer')
        return
    status_in(r, {400})
    t.choice('400, %s' % after(t, c, r, 'any'))


# ---------------------------------------------------------------- syntax

# RFC 9112 §2.2: at least one empty line before a request-line SHOULD be ignored.
row('syntax', 'leading-crlf', b'\r\n' + GET, {200}, 'keep')
row('syntax', 'leading-crlf-three', b'\r\n\r\n\r\n' + GET, {200, 400}, 'any')
# §2.2: a recipient MAY take a bare LF as the line end, or reject it.
row('syntax', 'bare-lf-everywhere', b'GET / HTTP/1.1\nHost: a\n\n', {200, 400}, 'any')
row('syntax', 'bare-lf-one-field', b'GET / HTTP/1.1\r\nHost: a\nX: y\r\n\r\n', {200, 400}, 'any')
row('syntax', 'bare-lf-request-line', b'GET / HTTP/1.1\nHost: a\r\n\r\n', {200, 400}, 'any')
# §2.2: a bare CR MUST be taken as invalid or replaced by SP.
row('syntax', 'bare-cr-in-value', b'GET / HTTP/1.1\r\nHost: a\r\nX: a\rb\r\n\r\n', {400, 200}, 'any')
row('syntax', 'bare-cr-request-line', b'GET / HTTP/1.1\rHost: a\r\n\r\n', {400}, 'any', silent_ok=False)
# §3: one SP between the parts; a recipient MAY split on any whitespace.
row('syntax', 'two-spaces', b'GET  / HTTP/1.1\r\nHost: a\r\n\r\n', {400, 200}, 'any')
row('syntax', 'tab-separator', b'GET\t/ HTTP/1.1\r\nHost: a\r\n\r\n', {400, 200}, 'any')
row('syntax', 'trailing-space-version', b'GET / HTTP/1.1 \r\nHost: a\r\n\r\n', {400, 200}, 'any')
row('syntax', 'leading-space-request-line', b' GET / HTTP/1.1\r\nHost: a\r\n\r\n', {400, 200}, 'any')
# §2.3: HTTP-version = "HTTP/" DIGIT "." DIGIT, case-sensitive.
row('syntax', 'lowercase-version', b'GET / http/1.1\r\nHost: a\r\n\r\n', {400}, 'any')
row('syntax', 'version-two-digit-minor', b'GET / HTTP/1.10\r\nHost: a\r\n\r\n', {400, 505}, 'any')
row('syntax', 'version-no-minor', b'GET / HTTP/1\r\nHost: a\r\n\r\n', {400, 505}, 'any')
row('syntax', 'version-garbage', b'GET / HTTP/x.y\r\nHost: a\r\n\r\n', {400}, 'any')
# RFC 9110 §6.2, §15.6.6: an unsupported major version: 505 (or 400).
row('syntax', 'version-2-0', b'GET / HTTP/2.0\r\nHost: a\r\n\r\n', {505, 400}, 'any')
row('syntax', 'version-3-0', b'GET / HTTP/3.0\r\nHost: a\r\n\r\n', {505, 400}, 'any')
row('syntax', 'version-0-9', b'GET / HTTP/0.9\r\nHost: a\r\n\r\n', {505, 400}, 'any')
# No version at all: an HTTP/0.9 simple request, not HTTP/1.1 (§2.3, §3).
row('syntax', 'no-version', b'GET /\r\nHost: a\r\n\r\n', {400, 505}, 'any', silent_ok=True)
# RFC 9110 §9.1: methods are case-sensitive; "get" is not GET.
row('syntax', 'lowercase-method', b'get / HTTP/1.1\r\nHost: a\r\n\r\n', {400, 404, 405, 501}, 'any')
# RFC 9110 §9.1: an unknown method: 501 (SHOULD); 405 if known but not allowed.
row('syntax', 'unknown-method', b'BREW /nope HTTP/1.1\r\nHost: a\r\n\r\n', {501, 405, 404}, 'any')
row('syntax', 'method-not-token', b'GE(T / HTTP/1.1\r\nHost: a\r\n\r\n', {400}, 'any')
row('syntax', 'empty-method', b' / HTTP/1.1\r\nHost: a\r\n\r\n', {400}, 'any')
# RFC 9112 §3.2: origin-form starts with "/".
row('syntax', 'target-relative', b'GET index HTTP/1.1\r\nHost: a\r\n\r\n', {400}, 'any')
row('syntax', 'target-fragment', b'GET /#frag HTTP/1.1\r\nHost: a\r\n\r\n', {400, 200}, 'any')
row('syntax', 'target-space', b'GET /a b HTTP/1.1\r\nHost: a\r\n\r\n', {400}, 'any')
row('syntax', 'target-nul', b'GET /\x00 HTTP/1.1\r\nHost: a\r\n\r\n', {400}, 'any')
row('syntax', 'target-non-ascii', b'GET /\xc3\xa9 HTTP/1.1\r\nHost: a\r\n\r\n', {400, 404}, 'any')
row('syntax', 'target-asterisk-get', b'GET * HTTP/1.1\r\nHost: a\r\n\r\n', {400, 404, 405}, 'any')
# RFC 9110 §7.4: a target URI the server is not authoritative for: 421, 400 or 404.
row('syntax', 'target-bad-scheme', b'GET ftp://a/ HTTP/1.1\r\nHost: a\r\n\r\n', {400, 404, 421},
    'any')
# RFC 9110 §4.2.4: userinfo in an http URI SHOULD be treated as an error.
row('syntax', 'target-userinfo', b'GET http://u@a/ HTTP/1.1\r\nHost: a\r\n\r\n', {400, 200}, 'any')
# RFC 9110 §9.3.6: CONNECT to an origin server that is no proxy.
row('syntax', 'connect', b'CONNECT a:443 HTTP/1.1\r\nHost: a:443\r\n\r\n', {400, 404, 405, 501},
    'any')
# RFC 9112 §5.1: whitespace before the colon: MUST 400.
row('syntax', 'space-before-colon', b'GET / HTTP/1.1\r\nHost : a\r\n\r\n', {400}, 'any')
row('syntax', 'tab-before-colon', b'GET / HTTP/1.1\r\nHost: a\r\nX\t: y\r\n\r\n', {400}, 'any')
# §5.2: obs-fold: 400, or replaced by SP.
row('syntax', 'obs-fold', b'GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n b\r\n\r\n', {400, 200}, 'any')
# §2.2: whitespace between the start-line and the first field: reject, or
# ignore that line (then Host is missing: 400 either way).
row('syntax', 'space-first-field', b'GET / HTTP/1.1\r\n Host: a\r\n\r\n', {400}, 'any')
row('syntax', 'field-no-colon', b'GET / HTTP/1.1\r\nHost: a\r\nNoColon\r\n\r\n', {400}, 'any')
row('syntax', 'field-empty-name', b'GET / HTTP/1.1\r\nHost: a\r\n: v\r\n\r\n', {400}, 'any')
row('syntax', 'field-name-space', b'GET / HTTP/1.1\r\nHost: a\r\nX Y: z\r\n\r\n', {400}, 'any')
row('syntax', 'field-name-non-token', b'GET / HTTP/1.1\r\nHost: a\r\nX@Y: z\r\n\r\n', {400}, 'any')
# RFC 9110 §5.5: NUL in a value MUST be rejected or replaced by SP; other
# controls are outside the grammar.
row('syntax', 'value-nul', b'GET / HTTP/1.1\r\nHost: a\r\nX: a\x00b\r\n\r\n', {400, 200}, 'any')
row('syntax', 'value-ctl', b'GET / HTTP/1.1\r\nHost: a\r\nX: a\x01b\r\n\r\n', {400, 200}, 'any')
row('syntax', 'value-del', b'GET / HTTP/1.1\r\nHost: a\r\nX: a\x7fb\r\n\r\n', {400, 200}, 'any')
# RFC 9110 §5.6.2: every tchar may appear in a field name.
row('syntax', 'field-name-all-tchars', b"GET / HTTP/1.1\r\nHost: a\r\nX!#$%&'*+-.^_`|~09az: v\r\n\r\n",
    {200}, 'keep')
# RFC 9112 §5.1: OWS after the colon is optional.
row('syntax', 'no-ows-after-colon', b'POST /echo HTTP/1.1\r\nHost:a\r\nContent-Length:3\r\n\r\nabc',
    {200}, 'keep', body=b'abc', echo=True)
row('syntax', 'value-inner-spaces', b'GET / HTTP/1.1\r\nHost: a\r\nX: a  b\t c:d\r\n\r\n', {200}, 'keep')
# RFC 3986 §3.3: every pchar may appear in a path; an unknown path is 404.
row('syntax', 'target-all-pchars', b"GET /a-._~!$&'()*+,;=:@%20/?q=/?&x HTTP/1.1\r\nHost: a\r\n\r\n",
    {404}, 'keep')
# A query is not decoded to route: an invalid %-escape in it is the
# handler's business (200), or refused as an invalid URI (400).
row('syntax', 'query-bad-escape', b'GET /?a=%zz HTTP/1.1\r\nHost: a\r\n\r\n', {200, 400}, 'any')
row('syntax', 'host-upper-dot', b'GET / HTTP/1.1\r\nHost: A.EXAMPLE.\r\n\r\n', {200}, 'keep')
row('syntax', 'host-ipv6-zone', b'GET / HTTP/1.1\r\nHost: [fe80::1%25eth0]:80\r\n\r\n', {200, 400},
    'any')
row('syntax', 'http10-keep-alive-case', b'GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n', {200},
    'any')
row('syntax', 'value-obs-text', b'GET / HTTP/1.1\r\nHost: a\r\nX: caf\xe9\r\n\r\n', {200}, 'keep')
row('syntax', 'value-empty', b'GET / HTTP/1.1\r\nHost: a\r\nX:\r\nY: \r\n\r\n', {200}, 'keep')
# RFC 9112 §3.2: 400 for a 1.1 request without Host, with two Host lines,
# or with an invalid Host value (MUST).
row('syntax', 'host-missing', b'GET / HTTP/1.1\r\n\r\n', {400}, 'any')
row('syntax', 'host-twice', b'GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n', {400}, 'any')
row('syntax', 'host-twice-same', b'GET / HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n', {400}, 'any')
row('syntax', 'host-list', b'GET / HTTP/1.1\r\nHost: a, b\r\n\r\n', {400}, 'any')
row('syntax', 'host-space', b'GET / HTTP/1.1\r\nHost: a b\r\n\r\n', {400}, 'any')
row('syntax', 'host-slash', b'GET / HTTP/1.1\r\nHost: a/b\r\n\r\n', {400}, 'any')
row('syntax', 'host-userinfo', b'GET / HTTP/1.1\r\nHost: u@a\r\n\r\n', {400}, 'any')
# Host = uri-host [ ":" port ], port = *DIGIT (RFC 9110 §7.2, §4.1; RFC 3986 §3.2.2).
row('syntax', 'host-port-not-digits', b'GET / HTTP/1.1\r\nHost: a:b\r\n\r\n', {400}, 'any')
row('syntax', 'host-two-ports', b'GET / HTTP/1.1\r\nHost: a:1:2\r\n\r\n', {400}, 'any')
row('syntax', 'host-ipv6-unclosed', b'GET / HTTP/1.1\r\nHost: [::1\r\n\r\n', {400}, 'any')
row('syntax', 'host-ipv6-no-brackets', b'GET / HTTP/1.1\r\nHost: ::1\r\n\r\n', {400}, 'any')
row('syntax', 'host-bad-percent', b'GET / HTTP/1.1\r\nHost: a%zz\r\n\r\n', {400}, 'any')
row('syntax', 'host-empty-port', b'GET / HTTP/1.1\r\nHost: a:\r\n\r\n', {200}, 'keep')
row('syntax', 'absolute-form-bad-port', b'GET http://a:b/ HTTP/1.1\r\nHost: a\r\n\r\n', {400}, 'any')
# RFC 9110 §7.2: an empty Host is the value for a target without authority.
row('syntax', 'host-empty', b'GET / HTTP/1.1\r\nHost:\r\n\r\n', {400, 200}, 'any')
row('syntax', 'absolute-form-no-host', b'GET http://a/ HTTP/1.1\r\n\r\n', {400, 200}, 'any')
# RFC 9110 §9.3.2: no content in any answer to HEAD, refusals included
# (RFC 9112 §6.3 rule 1: the client reads none, so a body would be taken
# for the next answer).
row('syntax', 'head-bad-field', b'HEAD / HTTP/1.1\r\nHost: a\r\nX Y: z\r\n\r\n', {400}, 'any',
    method=b'HEAD')
row('syntax', 'head-bad-host', b'HEAD / HTTP/1.1\r\nHost: a b\r\n\r\n', {400}, 'any', method=b'HEAD')
row('syntax', 'head-version-2', b'HEAD / HTTP/2.0\r\nHost: a\r\n\r\n', {505, 400}, 'any',
    method=b'HEAD')
row('syntax', 'head-after-crlf-bad', b'\r\nHEAD / HTTP/1.1\r\n\r\n', {400}, 'any', method=b'HEAD')
# RFC 9112 §9.6 and RFC 9110 §7.6.1: connection options are case-insensitive tokens.
row('syntax', 'connection-close-upper', b'GET / HTTP/1.1\r\nHost: a\r\nConnection: CLOSE\r\n\r\n',
    {200}, 'close')
row('syntax', 'connection-list-close', b'GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, close\r\n\r\n',
    {200}, 'close')
row('syntax', 'connection-other-tokens', b'GET / HTTP/1.1\r\nHost: a\r\nConnection: foo, Bar\r\n\r\n',
    {200}, 'keep')


# ---------------------------------------------------------------- limits

# RFC 9112 §3: request-lines of 8000 octets are RECOMMENDED to be supported.
row('limits', 'request-line-8000', b'GET /' + b'a' * 7980 + b' HTTP/1.1\r\nHost: a\r\n\r\n', {404}, 'keep')
# §3: a target longer than the server will parse: 414 (MUST).
row('limits', 'target-16k', b'GET /' + b'a' * 16384 + b' HTTP/1.1\r\nHost: a\r\n\r\n', {414}, 'any')
row('limits', 'target-64k', b'GET /' + b'a' * 65536 + b' HTTP/1.1\r\nHost: a\r\n\r\n', {414}, 'any',
    silent_ok=False)
# RFC 6585 §5: header fields too large: 431 (400 is the generic refusal).
row('limits', 'head-target-16k', b'HEAD /' + b'a' * 16384 + b' HTTP/1.1\r\nHost: a\r\n\r\n', {414},
    'any', method=b'HEAD')
row('limits', 'head-field-64k', b'HEAD / HTTP/1.1\r\nHost: a\r\nX: ' + b'v' * 65536 + b'\r\n\r\n',
    {431, 400}, 'any', method=b'HEAD')
row('limits', 'field-value-64k', b'GET / HTTP/1.1\r\nHost: a\r\nX: ' + b'v' * 65536 + b'\r\n\r\n',
    {431, 400}, 'any')
row('limits', 'field-name-16k', b'GET / HTTP/1.1\r\nHost: a\r\n' + b'N' * 16384 + b': v\r\n\r\n',
    {431, 400}, 'any')
row('limits', 'thousand-fields', b'GET / HTTP/1.1\r\nHost: a\r\n' +
    b''.join(b'X-%d: v\r\n' % i for i in range(1000)) + b'\r\n', {431, 400}, 'any')
row('limits', 'head-6k-in-60-fields', b'GET / HTTP/1.1\r\nHost: a\r\n' +
    b''.join(b'X-Field-%02d: %s\r\n' % (i, b'v' * 90) for i in range(60)) + b'\r\n', {200}, 'keep')
row('limits', 'long-method', b'X' * 1024 + b' / HTTP/1.1\r\nHost: a\r\n\r\n', {501, 400, 404, 405, 414},
    'any')


@case('limits', 'head-32k-trickled')
def _(t):
    c = Conn(t)
    c.send_pieces(b'GET / HTTP/1.1\r\nHost: a\r\n' + b'X-Big: ' + b'y' * 32768 + b'\r\n\r\n', 4096,
                  tolerate_close=True)
    r = c.maybe_resp()
    if r is None:
        t.choice('closed without an answer')
        return
    status_in(r, {431, 400})
    t.choice('%d, %s' % (r.status, after(t, c, r, 'any')))


@case('limits', 'cl-over-max-head-only', echo=True)
def _(t):
    # RFC 9110 §15.5.14: 413 for content larger than the server will take;
    # known from the head, the answer need not wait for the body.
    c = Conn(t)
    c.send(req(b'POST /echo HTTP/1.1', b'Host: a', b'Content-Length: %d' % (t.max_body + 1)))
    r = c.resp()
    status_in(r, {413})
    t.choice('413 %s' % ('with Connection: close' if r.says_close() else 'without Connection: close'))


@case('limits', 'cl-huge', echo=True)
def _(t):
    c = Conn(t)
    c.send(req(b'POST /echo HTTP/1.1', b'Host: a', b'Content-Length: 1000000000000000'))
    status_in(c.resp(), {413})


@case('limits', 'cl-over-max-expect', echo=True)
def _(t):
    # RFC 9110 §10.1.1: a final status known from the head is sent at once
    # instead of 100.
    c = Conn(t)
    c.send(req(b'POST /echo HTTP/1.1', b'Host: a', b'Content-Length: %d' % (t.max_body + 1),
               b'Expect: 100-continue'))
    r = c.resp()
    status_in(r, {413})
    if r.interim:
        raise Fail('100 Continue before a 413 known from the head')


def send_in_thread(c, data):
    def run():
        try:
            c.s.sendall(data)
        except OSError:
            pass
    th = threading.Thread(target=run, daemon=True)
    th.start()
    return th


@case('limits', 'cl-over-max-body-sent', echo=True)
def _(t):
    # The 413 must reach a client that sends its whole body regardless (a
    # reset on unread input must not destroy it: RFC 9112 §9.6 on closing).
    c = Conn(t, timeout=max(t.read_timeout, 30))
    n = t.max_body + 1
    th = send_in_thread(c, req(b'POST /echo HTTP/1.1', b'Host: a', b'Content-Length: %d' % n,
                               body=b'z' * n))
    status_in(c.resp(), {413})
    c.shut_wr()
    th.join(30)


@case('limits', 'chunked-over-max', echo=True)
def _(t):
    c = Conn(t, timeout=max(t.read_timeout, 30))
    body = b'q' * (t.max_body + 1)
    th = send_in_thread(c, post_chunked(chunked(*[body[i:i + MIB] for i in range(0, len(body), MIB)])))
    status_in(c.resp(), {413})
    c.shut_wr()
    th.join(30)


@case('limits', 'pipeline-300', echo=True)
def _(t):
    c = Conn(t)
    data = b''.join(GET if i % 3 else post(b'%d' % i) for i in range(300))
    th = send_in_thread(c, data)
    for i in range(300):
        r = c.resp()
        hello(r) if i % 3 else echoed(r, b'%d' % i)
    th.join(10)


row('limits', 'chunk-ext-8k', post_chunked(b'5;x=' + b'e' * 8192 + b'\r\nhello\r\n0\r\n\r\n'),
    {200, 400, 413, 431}, 'any', body=b'hello', echo=True)
row('limits', 'trailers-16k', post_chunked(b'5\r\nhello\r\n0\r\n' + b'T: ' + b't' * 16384 + b'\r\n\r\n'),
    {200, 400, 413, 431}, 'any', body=b'hello', echo=True)
row('limits', 'empty-lines-8k', b'\r\n' * 4096 + GET, {200, 400, 431}, 'any', silent_ok=True)


# -------------------------------------------------------------- timeouts
# The server's timeouts come from --timeouts (seconds); each case waits at
# most that plus --slack. These cases run at the same time, each on its
# own connection (they only wait).

def expect_timeout_close(t, c, limit, what, method=b'GET'):
    """Within @limit seconds the server closes, with 408 or nothing (a 408
    to a HEAD without content)."""
    r = c.maybe_resp(method, timeout=limit)
    if r is None:
        t.choice('closed without an answer')
        return
    status_in(r, {408})
    c.expect_closed(timeout=limit)
    t.choice('408, closed')


@case('timeouts', 'slowloris-partial-head')
def _(t):
    # RFC 9110 §15.5.9 (408): a head that stops arriving is given up.
    c = Conn(t)
    c.send(b'GET / HTTP/1.1\r\nHost: a\r\n')
    expect_timeout_close(t, c, t.header_timeout + t.slack, 'partial head')


@case('timeouts', 'slowloris-head-method')
def _(t):
    # The 408 to a HEAD request that never ended carries no content either.
    c = Conn(t)
    c.send(b'HEAD / HTTP/1.1\r\nHost: a\r\n')
    expect_timeout_close(t, c, t.header_timeout + t.slack, 'partial HEAD head', b'HEAD')


@case('timeouts', 'slowloris-request-line')
def _(t):
    c = Conn(t)
    c.send(b'GET / HT')
    expect_timeout_close(t, c, t.header_timeout + t.slack, 'partial request line')


@case('timeouts', 'slowloris-trickle')
def _(t):
    # A byte every 100 ms never completes the head: the limit is on the
    # whole head, not between bytes.
    c = Conn(t)
    c.send(b'GET / HTTP/1.1\r\nHost: a\r\nX-Trickle: ')
    end = time.monotonic() + t.header_timeout + t.slack
    while time.monotonic() < end:
        try:
            c.s.send(b'a')
        except OSError:
            break
        c.s.settimeout(0.1)
        try:
            b = c.s.recv(65536)
        except socket.timeout:
            continue
        except ConnectionResetError:
            b = b''
        if not b:
            t.choice('closed without an answer')
            return
        c.buf += b
        r = c.resp(timeout=t.slack)
        status_in(r, {408})
        c.expect_closed(timeout=t.slack)
        t.choice('408, closed')
        return
    raise Fail('a trickled head was still open after %.1f s' % (t.header_timeout + t.slack))


@case('timeouts', 'silent-connection')
def _(t):
    # Connects and sends nothing: a head that never begins is held to the
    # header timeout (or the keep-alive one, if shorter) and closed, with no
    # answer (no request) or 408.
    c = Conn(t)
    expect_timeout_close(t, c, min(t.header_timeout, t.keepalive_timeout) * 1.5 + t.slack,
                         'silent connection')


@case('timeouts', 'idle-after-answer')
def _(t):
    # RFC 9112 §9.5: an idle persistent connection may be closed; no answer
    # is due, so none may come.
    c = Conn(t)
    c.send(GET)
    hello(c.resp())
    c.expect_closed(timeout=t.keepalive_timeout * 1.5 + t.slack, what='on an idle connection',
                    poke=False)


@case('timeouts', 'partial-second-head')
def _(t):
    c = Conn(t)
    c.send(GET + b'GET / HTTP/1.1\r\nHo')
    hello(c.resp())
    expect_timeout_close(t, c, t.header_timeout + t.slack, 'partial second head')


@case('timeouts', 'body-stalled', echo=True)
def _(t):
    c = Conn(t)
    c.send(req(b'POST /echo HTTP/1.1', b'Host: a', b'Content-Length: 10', body=b'12345'))
    expect_timeout_close(t, c, t.body_timeout + t.slack, 'stalled body')


@case('timeouts', 'chunked-body-stalled', echo=True)
def _(t):
    c = Conn(t)
    c.send(post_chunked(b'5\r\nhel'))
    expect_timeout_close(t, c, t.body_timeout + t.slack, 'stalled chunked body')


@case('timeouts', 'body-after-continue-stalled', echo=True)
def _(t):
    c = Conn(t)
    c.send(req(b'POST /echo HTTP/1.1', b'Host: a', b'Content-Length: 5', b'Expect: 100-continue'))
    try:
        r = c.read_response(timeout=t.body_timeout + t.slack)
    except Closed as e:
        t.choice('closed without a final answer (after 100: %s)' % bool(e.interim))
        return
    status_in(r, {408})
    t.choice('408 (after 100: %s)' % bool(r.interim))
    c.expect_closed(timeout=t.slack)


@case('timeouts', 'head-in-time')
def _(t):
    # No false timeout: a head in three pieces well within the limit.
    c = Conn(t)
    gap = t.header_timeout / 10
    c.send(b'GET / HTTP/1.1\r\n')
    time.sleep(gap)
    c.send(b'Host: a\r\n')
    time.sleep(gap)
    c.send(b'\r\n')
    hello(c.resp())


@case('timeouts', 'body-in-time', echo=True)
def _(t):
    c = Conn(t)
    c.send(req(b'POST /echo HTTP/1.1', b'Host: a', b'Content-Length: 4'))
    for b in (b'a', b'b', b'c', b'd'):
        time.sleep(t.body_timeout / 16)
        c.send(b)
    echoed(c.resp(), b'abcd')


@case('timeouts', 'others-served-meanwhile')
def _(t):
    # A slow client does not hold up another one (nor is it closed by it).
    slow = Conn(t)
    slow.send(b'GET / HTTP/1.1\r\nHo')
    fast = Conn(t)
    fast.send(GET)
    hello(fast.resp())
    expect_timeout_close(t, slow, t.header_timeout + t.slack, 'the slow one')


# ---------------------------------------------------------------- faults

@case('faults', 'reset-mid-head')
def _(t):
    c = Conn(t)
    c.send(b'GET / HTTP/1.1\r\nHos')
    c.rst()


@case('faults', 'reset-mid-body', echo=True)
def _(t):
    c = Conn(t)
    c.send(req(b'POST /echo HTTP/1.1', b'Host: a', b'Content-Length: 100000', body=b'x' * 5000))
    c.rst()


@case('faults', 'reset-after-request')
def _(t):
    c = Conn(t)
    c.send(GET)
    c.rst()


@case('faults', 'reset-mid-pipeline')
def _(t):
    for _ in range(20):
        c = Conn(t)
        c.send(GET * 20 + b'GET / HTTP/1.1\r\nHo')
        c.rst()


@case('faults', 'reset-mid-answer', echo=True)
def _(t):
    c = Conn(t)
    c.send(post(b'r' * (4 * MIB)))
    c._fill(time.monotonic() + t.read_timeout)
    c.rst()


@case('faults', 'close-after-request')
def _(t):
    # FIN right after the request, nothing read: the answer meets a closed peer.
    for _ in range(20):
        c = Conn(t)
        c.send(GET * 3)
        c.close()


@case('faults', 'half-close-after-request')
def _(t):
    # RFC 9112 §9.6: a half-close still gets its answer, then the close.
    c = Conn(t)
    c.send(GET)
    c.shut_wr()
    hello(c.resp())
    c.expect_closed()


@case('faults', 'half-close-mid-head')
def _(t):
    # RFC 9112 §8: an incomplete request: the server MAY answer 400, then closes.
    c = Conn(t)
    c.send(b'GET / HTTP/1.1\r\nHost: a\r\n')
    c.shut_wr()
    r = c.maybe_resp()
    if r is not None:
        status_in(r, {400})
        c.expect_closed()
    t.choice('%s' % ('400, closed' if r else 'closed without an answer'))


@case('faults', 'half-close-mid-body', echo=True)
def _(t):
    c = Conn(t)
    c.send(req(b'POST /echo HTTP/1.1', b'Host: a', b'Content-Length: 10', body=b'12345'))
    c.shut_wr()
    r = c.maybe_resp()
    if r is not None:
        status_in(r, {400})
        c.expect_closed()
    t.choice('%s' % ('400, closed' if r else 'closed without an answer'))


@case('faults', 'half-close-after-body-crlf', echo=True)
def _(t):
    # The empty line after a body begins no request: no 400 for it.
    c = Conn(t)
    c.send(post(b'abc') + b'\r\n')
    c.shut_wr()
    echoed(c.resp(), b'abc')
    c.expect_closed(what='for an empty line after a body')


@case('faults', 'half-close-only-crlf')
def _(t):
    # RFC 9112 §2.2: empty lines begin no request: no answer.
    c = Conn(t)
    c.send(b'\r\n\r\n')
    c.shut_wr()
    c.expect_closed(what='for empty lines only')


@case('faults', 'connect-close-storm')
def _(t):
    for _ in range(200):
        Conn(t).close()


@case('faults', 'hundred-concurrent')
def _(t):
    cs = [Conn(t) for _ in range(100)]
    for c in cs:
        c.send(GET)
    for c in cs:
        hello(c.resp())


@case('faults', 'random-garbage')
def _(t):
    rng = random.Random(20261124)
    for _ in range(20):
        c = Conn(t)
        c.send(bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 2000))), tolerate_close=True)
        c.shut_wr()
        r = c.maybe_resp()
        if r is not None:
            status_in(r, {400, 405, 414, 431, 501, 505})
        c.close()


@case('faults', 'tls-client-hello')
def _(t):
    # TLS to a plaintext port: not HTTP; refused with 400 or a close.
    hello_bytes = bytes.fromhex('16030100f4010000f00303') + bytes(32) + b'\x00\x00\x02\x13\x01\x01\x00'
    c = Conn(t)
    c.send(hello_bytes, tolerate_close=True)
    c.shut_wr()
    r = c.maybe_resp()
    if r is not None:
        status_in(r, {400})
    t.choice('400' if r else 'closed without an answer')


@case('faults', 'h2-preface')
def _(t):
    # HTTP/2 with prior knowledge on an HTTP/1.1-only port (RFC 9113 §3.3):
    # "PRI * HTTP/2.0" is refused (505, 400, or a close).
    c = Conn(t)
    c.send(b'PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n' + bytes(9), tolerate_close=True)
    r = c.maybe_resp()
    if r is not None:
        status_in(r, {505, 400, 501, 405})
    t.choice('%d' % r.status if r else 'closed without an answer')


@case('faults', 'nul-bytes')
def _(t):
    c = Conn(t)
    c.send(b'\x00' * 1000, tolerate_close=True)
    c.shut_wr()
    r = c.maybe_resp()
    if r is not None:
        status_in(r, {400})
        c.expect_closed()


@case('faults', 'line-without-end')
def _(t):
    c = Conn(t)
    c.send_pieces(b'A' * 65536, 8192, tolerate_close=True)
    r = c.maybe_resp()
    if r is not None:
        status_in(r, {400, 414, 431, 501})
    t.choice('%d' % r.status if r else 'closed without an answer')


@case('faults', 'non-reading-client', echo=True)
def _(t):
    # A client that does not read its 4 MiB answer does not stop another.
    slow = Conn(t)
    slow.s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    slow.send(post(b'n' * (4 * MIB)))
    time.sleep(0.1)
    fast = Conn(t)
    fast.send(GET)
    hello(fast.resp())
    slow.rst()


@case('faults', 'slow-reader', echo=True)
def _(t):
    # Reads a 2 MiB answer 64 KiB at a time: all of it arrives intact.
    body = bytes(range(256)) * (8 * 1024)
    c = Conn(t)
    c.s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    c.send(post(body))
    deadline = time.monotonic() + 30
    while len(c.buf) < len(body):
        time.sleep(0.001)
        if not c._fill(deadline):
            break
    echoed(c.resp(), body)


@case('faults', 'reset-waiting-continue', echo=True)
def _(t):
    c = Conn(t)
    c.send(req(b'POST /echo HTTP/1.1', b'Host: a', b'Content-Length: 5', b'Expect: 100-continue'))
    c._fill(time.monotonic() + t.read_timeout)
    c.rst()


# ----------------------------------------------------------------- runner

class Probe:
    def __init__(self, args):
        self.args = args
        self.host = args.host
        self.port = args.port
        self.proc = None
        self.read_timeout = args.read_timeout
        self.slack = args.slack
        self.max_body = args.max_body
        self.header_timeout, self.body_timeout, self.keepalive_timeout = args.timeouts
        self.crashes = 0

    def start_server(self):
        ms = lambda s: str(int(s * 1000))
        self.proc, self.port = bench_server.start(
            self.args.server, '--header-timeout-ms', ms(self.header_timeout),
            '--body-timeout-ms', ms(self.body_timeout),
            '--keepalive-timeout-ms', ms(self.keepalive_timeout),
            '--max-body', str(self.max_body), *self.args.server_arg)
        self.host = '127.0.0.1'

    def alive(self):
        """None if the server answers GET / correctly, else why not."""
        if self.proc is not None and self.proc.poll() is not None:
            return 'CRASH: the server exited with %s' % self.proc.returncode
        got = bench_server.hello_fails(self.host, self.port)
        if got is not None:
            if self.proc is not None and self.proc.poll() is not None:
                return 'CRASH: the server exited with %s' % self.proc.returncode
            return 'not alive afterwards: %r' % got[:100]
        return None

    def run_case(self, cs):
        ctx = CaseRun(self)
        try:
            cs.fn(ctx)
            ok, why = True, ''
        except Fail as e:
            ok, why = False, str(e)
        except Exception as e:  # a socket error where none was expected
            ok, why = False, '%s: %s' % (type(e).__name__, e)
        finally:
            for c in ctx.conns:
                c.close()
        return ok, why, ctx.choices

    def record(self, cs, ok, why, choices, results):
        results.append((cs, ok, why, choices))
        if self.args.verbose or not ok:
            line = '%-4s %s/%s' % ('ok' if ok else 'FAIL', cs.group, cs.name)
            if choices:
                line += '  [choice: %s]' % '; '.join(choices)
            if not ok:
                line += '\n       ' + why
            print(line, flush=True)

    def check_alive(self, cs, results):
        why = self.alive()
        if why is None:
            return
        if why.startswith('CRASH'):
            self.crashes += 1
        print('FAIL %s/%s: %s' % (cs.group, cs.name, why), flush=True)
        c0, ok, w, ch = results[-1]
        results[-1] = (c0, False, (w + '; ' if w else '') + why, ch)
        if self.proc is not None and self.proc.poll() is not None:
            self.start_server()  # go on with the rest

    def run(self, cases):
        results = []
        for g in GROUPS:
            group = [c for c in cases if c.group == g]
            if g == 'timeouts':
                # These only wait: run them at the same time.
                out = {}
                threads = []
                for cs in group:
                    th = threading.Thread(target=lambda cs=cs: out.__setitem__(cs.name, self.run_case(cs)))
                    th.start()
                    threads.append(th)
                for th in threads:
                    th.join()
                for cs in group:
                    self.record(cs, *out[cs.name], results)
                if group:
                    self.check_alive(group[-1], results)
                continue
            for cs in group:
                self.record(cs, *self.run_case(cs), results)
                self.check_alive(cs, results)
        return results


class CaseRun:
    def __init__(self, probe):
        self.__dict__.update({k: getattr(probe, k) for k in
                              ('host', 'port', 'read_timeout', 'slack', 'max_body',
                               'header_timeout', 'body_timeout', 'keepalive_timeout')})
        self.conns = []
        self.choices = []

    def choice(self, what):
        self.choices.append(what)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--server', help='bench-server to start (on a free port)')
    ap.add_argument('--server-arg', action='append', default=[],
                    help='one more argument for the started server (repeatable)')
    ap.add_argument('--host', default='127.0.0.1')
    ap.add_argument('--port', type=int, default=8080)
    ap.add_argument('--timeouts',
                    help='header,body,keep-alive timeouts in seconds (default 1,1,1; a server '
                    'the probe starts gets 1,1,5: a keep-alive longer than the header timeout '
                    'shows which of the two holds a silent connection)')
    ap.add_argument('--slack', type=float, default=3.0)
    ap.add_argument('--read-timeout', type=float, default=10.0)
    ap.add_argument('--max-body', type=int, default=8 * MIB)
    ap.add_argument('--group', action='append')
    ap.add_argument('--case', action='append')
    ap.add_argument('--skip-echo', action='store_true')
    ap.add_argument('--list', action='store_true')
    ap.add_argument('-v', '--verbose', action='store_true')
    args = ap.parse_args()
    if args.timeouts is None:
        args.timeouts = '1,1,5' if args.server else '1,1,1'
    args.timeouts = [float(x) for x in args.timeouts.split(',')]
    if len(args.timeouts) != 3:
        ap.error('--timeouts wants three numbers')

    cases = [c for c in CASES
             if (not args.group or c.group in args.group)
             and (not args.case or any(s in c.name for s in args.case))]
    if args.list:
        for g in GROUPS:
            gc = [c for c in CASES if c.group == g]
            print('%-11s %3d  %s' % (g, len(gc), ' '.join(c.name for c in gc)))
        print('total %d' % len(CASES))
        return 0
    skipped = [c for c in cases if args.skip_echo and c.echo]
    cases = [c for c in cases if c not in skipped]

    probe = Probe(args)
    if args.server:
        probe.start_server()
    t0 = time.monotonic()
    try:
        results = probe.run(cases)
    finally:
        code = None
        if probe.proc is not None:
            if probe.proc.poll() is None:
                code = bench_server.stop(probe.proc, 20)
            else:
                code = probe.proc.returncode
    print('\n%-11s %5s %5s' % ('group', 'cases', 'pass'))
    for g in GROUPS:
        gr = [r for r in results if r[0].group == g]
        if gr:
            print('%-11s %5d %5d' % (g, len(gr), sum(1 for r in gr if r[1])))
    npass = sum(1 for r in results if r[1])
    print('%-11s %5d %5d   (%d skipped, %d crashes, %.1f s)'
          % ('total', len(results), npass, len(skipped), probe.crashes, time.monotonic() - t0))
    bad_exit = probe.proc is not None and code != 0
    if bad_exit:
        print('the server did not exit 0 on SIGTERM: %s' % code)
    return 0 if npass == len(results) and probe.crashes == 0 and not bad_exit else 1


if __name__ == '__main__':
    sys.exit(main())
