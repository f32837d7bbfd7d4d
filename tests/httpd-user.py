#!/usr/bin/env python3
"""httpd-user.py WEFT_HTTPD: examples/weft-httpd --user, run as root.

Started as root with --user nobody on a free port, serving a temporary
directory, the server must answer as nobody: a file only nobody may read
is 200 with its body (as root the static handler would refuse it, 403, as
not world-readable), a root-only file 403; /proc/PID/status and the status
of each of its threads show nobody's uid and gid as real, effective, saved
and filesystem ids, and nobody's groups only. Then the failures, each exit
status 1 with a message and no port ever answering: a user or group that
does not exist, --user root, setuid or initgroups refused (root without
CAP_SETUID or CAP_SETGID, through setpriv), a root directory nobody cannot
read; and, run as nobody already, --user nobody serves (a no-op) while
another user fails. Run as root, --user nobody also binds port 1023 (the
highest free one below 1024), opens a log and loads a TLS key from a
directory only root may enter, so dropping too early fails too.

Needs root: anyone else gets SKIP (exit 77, which meson reports as a
skip), said on standard output."""
import grp, http.client, os, pwd, re, shutil, socket, ssl, subprocess, sys, tempfile

from bench_server import stop

if os.geteuid() != 0:
    print('SKIP: httpd-user needs root (it checks that weft-httpd --user drops it); '
          'running as uid %d' % os.geteuid())
    sys.exit(77)

httpd = os.path.abspath(sys.argv[1])
nobody = pwd.getpwnam('nobody')
uid, gid = nobody.pw_uid, nobody.pw_gid
groups = set(os.getgrouplist('nobody', gid))
assert uid != 0 and gid != 0 and 0 not in groups, (uid, gid, groups)
failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print('FAIL:', what)


def free_port():
    s = socket.socket()
    s.bind(('127.0.0.1', 0))
    port = s.getsockname()[1]
    s.close()
    return port


def bindable(port):
    s = socket.socket()
    try:
        s.bind(('127.0.0.1', port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def refused(port):
    try:
        socket.create_connection(('127.0.0.1', port), timeout=2).close()
        return False
    except ConnectionRefusedError:
        return True


def ids(path):
    """The Uid, Gid and Groups lines of a /proc status file."""
    got = {}
    with open(path) as f:
        for line in f:
            k, _, v = line.partition(':')
            if k in ('Uid', 'Gid', 'Groups'):
                got[k] = [int(x) for x in v.split()]
    return got


def fetch(port, path, ssl_context=None):
    if ssl_context is None:
        c = http.client.HTTPConnection('127.0.0.1', port, timeout=10)
    else:
        c = http.client.HTTPSConnection('127.0.0.1', port, timeout=10, context=ssl_context)
    c.request('GET', path)
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, body


def fails(args, want, prefix=(), **kw):
    """Runs weft-httpd with @args on a free port (under the command
    @prefix): it must exit 1 with @want on standard error, print no
    "serving" line and never answer."""
    port, before = free_port(), len(failures)
    p = subprocess.Popen(list(prefix) + [httpd, '--listen', '127.0.0.1:%d' % port,
                                         '--workers', '2'] + args,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    try:
        out, err = p.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        check(False, '%s: still running after 10 s (serving?): %r' % (args, out))
        return
    check(p.returncode == 1, '%s: exit status %s, not 1; stderr %r' % (args, p.returncode, err))
    check(want in err, '%s: %r not in stderr %r' % (args, want, err))
    # Under ASan, LeakSanitizer's exit status is 1 too: a leak report must
    # not pass for our own exit.
    check('Sanitizer' not in err, '%s: a sanitizer report: %r' % (args, err))
    check('serving' not in out, '%s: it said it serves: %r' % (args, out))
    check(refused(port), '%s: port %d answers after exit' % (args, port))
    if len(failures) == before:
        print('ok: %s exits 1: %s' % (' '.join(list(prefix) + args), err.strip().splitlines()[-1]))


tmp = tempfile.mkdtemp(prefix='weft-httpd-user-')
try:
    os.chmod(tmp, 0o755)
    root = os.path.join(tmp, 'www')
    os.mkdir(root, 0o755)
    os.chmod(root, 0o755)
    public = b'public %d\n' % os.getpid()
    private = b'for nobody only %d\n' % os.getpid()
    with open(os.path.join(root, 'public.txt'), 'wb') as f:
        f.write(public)
    os.chmod(os.path.join(root, 'public.txt'), 0o644)
    with open(os.path.join(root, 'nobody.txt'), 'wb') as f:
        f.write(private)
    os.chown(os.path.join(root, 'nobody.txt'), uid, gid)
    os.chmod(os.path.join(root, 'nobody.txt'), 0o600)
    with open(os.path.join(root, 'root.txt'), 'wb') as f:
        f.write(b'root only\n')
    os.chmod(os.path.join(root, 'root.txt'), 0o600)

    # What only root may do, done before the drop: a port below 1024, an
    # access log and a TLS key in a directory only root may enter.
    private_dir = os.path.join(tmp, 'private')
    os.mkdir(private_dir, 0o700)
    os.chmod(private_dir, 0o700)
    log = os.path.join(private_dir, 'access.log')
    low = next((q for q in range(1023, 899, -1) if bindable(q)), 0)
    with open('/proc/sys/net/ipv4/ip_unprivileged_port_start') as f:
        if low == 0 or int(f.read()) <= low:
            print('note: no privileged port to try (ip_unprivileged_port_start, or none free); '
                  'port %d' % low)

    def serves_as_nobody(extra, port, ssl_context=None, group=None):
        """Starts weft-httpd --user nobody with @extra on @port; checks what
        it serves and the ids of each of its threads (@group's gid if
        given, else nobody's primary group), then stops it."""
        want_gid = gid if group is None else grp.getgrnam(group).gr_gid
        want_groups = set(os.getgrouplist('nobody', want_gid))
        if group is not None:
            extra = extra + ['--group', group]
        p = subprocess.Popen([httpd, '--user', 'nobody', '--listen', '127.0.0.1:%d' % port,
                              '--root', root, '--workers', '2'] + extra,
                             stdout=subprocess.PIPE, text=True)
        try:
            line = p.stdout.readline()
            m = re.search(r'port (\d+)', line)
            assert m, 'weft-httpd --user nobody %s printed no port: %r (exit %s)' % (
                ' '.join(extra), line, p.poll())
            port = int(m.group(1))
            check(fetch(port, '/public.txt', ssl_context) == (200, public),
                  'GET /public.txt is not 200 with its body')
            st, body = fetch(port, '/nobody.txt', ssl_context)
            check((st, body) == (200, private),
                  'GET /nobody.txt (0600, owned by nobody) is %d %r, not 200: not running as '
                  'nobody?' % (st, body[:60]))
            check(fetch(port, '/root.txt', ssl_context)[0] == 403,
                  'GET /root.txt (0600, owned by root) is not 403')
            want = {'Uid': [uid] * 4, 'Gid': [want_gid] * 4, 'Groups': sorted(want_groups)}
            tasks = sorted(os.listdir('/proc/%d/task' % p.pid))
            check(len(tasks) >= 3, 'only %d threads: the workers should run before the drop'
                  % len(tasks))
            for t in ['..'] + tasks:
                got = ids('/proc/%d/task/%s/status' % (p.pid, t))
                got['Groups'] = sorted(got['Groups'])
                check(got == want, 'thread %s: %s, want %s'
                      % (t if t != '..' else 'process', got, want))
            print('ok: %s served as nobody (uid %d, gid %d, groups %s) on port %d, all %d threads'
                  % ('HTTPS' if ssl_context else 'HTTP', uid, want_gid, sorted(want_groups), port,
                     len(tasks)))
        finally:
            rc = stop(p, 10)
        check(rc == 0, 'weft-httpd --user nobody exit status %s after SIGTERM, not 0' % rc)

    serves_as_nobody(['--access-log', log], low)
    with open(log) as f:
        logged = f.read()
    check(logged.count('GET /') == 3, 'the access log (opened as root) has not the 3 requests: %r'
          % logged)

    openssl = os.environ.get('WEFT_TEST_OPENSSL') or shutil.which('openssl')
    if openssl is None:
        print('note: no openssl program: the HTTPS run (a key only root may read) is left out')
    else:
        cert, key = os.path.join(private_dir, 'cert.pem'), os.path.join(private_dir, 'key.pem')
        subprocess.run([openssl, 'req', '-x509', '-newkey', 'ec', '-pkeyopt',
                        'ec_paramgen_curve:P-256', '-nodes', '-keyout', key, '-out', cert,
                        '-days', '2', '-subj', '/CN=127.0.0.1', '-addext',
                        'subjectAltName=IP:127.0.0.1'],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.chmod(key, 0o600)
        serves_as_nobody(['--cert', cert, '--key', key], 0, ssl.create_default_context(cafile=cert))

    # --group: another group than nobody's own.
    serves_as_nobody([], 0, group=next(g.gr_name for g in grp.getgrall()
                                       if g.gr_gid not in (0, gid)))

    fails(['--user', 'no-such-user-xyz', '--root', root], 'no-such-user-xyz')
    fails(['--user', 'nobody', '--group', 'no-such-group-xyz', '--root', root], 'no-such-group-xyz')
    fails(['--user', 'root', '--root', root], 'refusing to run as root')
    # Root without CAP_SETUID (or CAP_SETGID): the switch fails half-way,
    # and the server must not go on as root.
    can_setpriv = shutil.which('setpriv') is not None and subprocess.run(
        ['setpriv', '--bounding-set', '-setuid,-setgid', 'true'],
        stderr=subprocess.DEVNULL).returncode == 0
    if can_setpriv:
        fails(['--user', 'nobody', '--root', root], 'setuid %d: Operation not permitted' % uid,
              prefix=['setpriv', '--bounding-set', '-setuid'])
        fails(['--user', 'nobody', '--root', root], 'initgroups: Operation not permitted',
              prefix=['setpriv', '--bounding-set', '-setgid'])
    else:
        print('note: setpriv cannot drop a capability here: the failing setuid and initgroups '
              'cases are left out')
    hidden = os.path.join(tmp, 'hidden')
    os.mkdir(hidden, 0o700)
    os.chmod(hidden, 0o700)
    fails(['--user', 'nobody', '--root', hidden], 'cannot read and search')

    # Already nobody: naming nobody is a no-op, naming another user fails.
    as_nobody, before = dict(user=uid, group=gid, extra_groups=[]), len(failures)
    p = subprocess.Popen([httpd, '--user', 'nobody', '--listen', '127.0.0.1:0', '--root', root,
                          '--workers', '1'], stdout=subprocess.PIPE, text=True, **as_nobody)
    try:
        m = re.search(r'port (\d+)', p.stdout.readline())
        check(m is not None, 'as nobody, --user nobody does not serve')
        if m:
            check(fetch(int(m.group(1)), '/nobody.txt') == (200, private),
                  'as nobody, --user nobody: GET /nobody.txt is not 200')
    finally:
        rc = stop(p, 10)
    check(rc == 0, 'as nobody, --user nobody: exit status %s, not 0' % rc)
    if len(failures) == before:
        print('ok: as nobody, --user nobody is a no-op')
    other = next(u.pw_name for u in pwd.getpwall() if u.pw_uid not in (0, uid) and u.pw_gid != 0)
    fails(['--user', other, '--root', root], 'not running as root', **as_nobody)
    # Started as nobody without --user: a root nobody cannot read fails
    # as it does after --user nobody (it was served, 403 to everything).
    fails(['--root', hidden], 'cannot read and search', **as_nobody)
finally:
    shutil.rmtree(tmp, ignore_errors=True)

if failures:
    print('%d failure(s)' % len(failures))
    sys.exit(1)
print('httpd-user: ok')
