#!/usr/bin/env bash
# .ci/setup.sh: install what building, testing, the sanitizer runs and the
# bench programs need on Debian 12. Run as root. Idempotent: when every
# package is already installed it does not touch apt at all, so it is fast
# and works offline.
set -euo pipefail

packages=(
  build-essential   # gcc, libc6-dev, make
  meson
  ninja-build
  pkg-config
  libglib2.0-dev    # glib-2.0 / gobject-2.0 / gio-2.0 >= 2.74
  libssl-dev        # OpenSSL 3: TLS on connections
  openssl           # tests: s_client; bench/echo-compare: a certificate
  curl              # tests: a real client
  apache2-utils     # tests: ab -k against the HTTP server
  python3           # examples/demo-smoke.py
  gobject-introspection     # Weft-1.gir / Weft-1.typelib
  libgirepository1.0-dev
  gir1.2-glib-2.0
  python3-gi        # tests/test-gi.py (PyGObject)
  gi-docgen         # .ci/run docs stage: the API reference (-Ddocs=true)
  libsoup-3.0-dev   # examples/soup-client (libsoup in examples only)
  glib-networking   # TLS for GIO and libsoup (examples/soup-smoke.py)
  clang             # tests/fuzz/run: libFuzzer targets
  libclang-rt-14-dev
  valgrind          # .ci/run: the tests under memcheck; <valgrind/valgrind.h>
  libuv1-dev        # bench/ comparisons (bench=true by default)
  libevent-dev
  libhttp-parser-dev  # bench-parser: nodejs' http-parser
  libh2o0.13        # bench-parser: picohttpparser (phr_parse_request, dlopen'ed)
)

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
  if [ "$status" != "installed" ]; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "setup.sh: missing packages: ${missing[*]}; run as root to install them" >&2
  exit 1
fi

echo "setup.sh: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
