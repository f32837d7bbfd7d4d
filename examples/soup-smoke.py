#!/usr/bin/env python3
"""soup-smoke.py WEFT_HTTPD SOUP_CLIENT DOCS_DIR OPENSSL: starts weft-httpd
twice on free ports serving DOCS_DIR, once over HTTP and once over HTTPS
with a self-signed certificate made here, and fetches from both with the
libsoup client (keep-alive: each URL three times on one session). Every
answer must be 200 with the right type; a wrong CA must be refused."""
import os, re, signal, subprocess, sys, tempfile

httpd, client, docs, openssl = sys.argv[1:5]
tmp = tempfile.mkdtemp(prefix='weft-soup-')
cert, key = os.path.join(tmp, 'cert.pem'), os.path.join(tmp, 'key.pem')
subprocess.run([openssl, 'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256',
                '-nodes', '-keyout', key, '-out', cert, '-days', '2', '-subj', '/CN=127.0.0.1',
                '-addext', 'subjectAltName=IP:127.0.0.1'],
               check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def start(extra):
    p = subprocess.Popen([httpd, '--listen', '127.0.0.1:0', '--root', docs, '--workers', '2']
                         + extra, stdout=subprocess.PIPE, text=True)
    m = re.search(r'port (\d+)', p.stdout.readline())
    assert m, 'no port'
    return p, int(m.group(1))


def fetch(args):
    r = subprocess.run([client, '--repeat', '3'] + args, capture_output=True, text=True,
                       timeout=30)
    return r.returncode, r.stdout, r.stderr


servers = []
try:
    plain, pport = start([])
    servers.append(plain)
    tls, tport = start(['--cert', cert, '--key', key])
    servers.append(tls)

    code, out, err = fetch([f'http://127.0.0.1:{pport}/', f'http://127.0.0.1:{pport}/_weft/status'])
    lines = out.splitlines()
    assert code == 0 and len(lines) == 6, (code, out, err)
    assert all(l.startswith('200 ') for l in lines), out
    assert 'text/html' in lines[0] and 'application/json' in lines[3], out

    code, out, err = fetch(['--ca-file', cert, f'https://127.0.0.1:{tport}/'])
    lines = out.splitlines()
    assert code == 0 and len(lines) == 3 and all(l.startswith('200 ') for l in lines), \
        (code, out, err)

    # Without the CA, the self-signed certificate is refused.
    code, out, err = fetch([f'https://127.0.0.1:{tport}/'])
    assert code != 0 and out == '', (code, out, err)
    print('soup-smoke: ok')
finally:
    for p in servers:
        p.send_signal(signal.SIGTERM)
    for p in servers:
        assert p.wait(timeout=10) == 0
