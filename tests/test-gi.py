#!/usr/bin/env python3
"""test-gi.py: Weft through GObject Introspection (PyGObject), as a Python
application uses it: an engine and contexts with Python jobs (their order),
an HTTP server with Python handlers fetched with urllib (routes, {param}
segments, query, a request body, a 404), a response streamed from a Python
thread, the GLib main-context bridge (a server whose handlers run on the
thread running a GLib.MainLoop, beside a GLib timeout sharing its state
without a lock; worker contexts posting results to the main loop), and a
clean shutdown.

Run by meson with GI_TYPELIB_PATH and LD_LIBRARY_PATH pointing into the
build tree; exits non-zero on the first failure.
"""
import socket
import sys
import threading
import unittest
import urllib.error
import urllib.request

import gi

gi.require_version("Weft", "1")
from gi.repository import GLib, Weft  # noqa: E402

DEADLINE = 10.0


class EngineTest(unittest.TestCase):
    def test_jobs_run_in_post_order(self):
        engine = Weft.Engine.new(2)
        ctx = Weft.Context.new(engine)
        seen = []
        done = threading.Event()
        for i in range(1000):
            ctx.post(seen.append, i)
        ctx.post(lambda _: done.set(), None)
        ctx.dispatch()  # nothing ran before this
        self.assertTrue(done.wait(DEADLINE))
        self.assertEqual(seen, list(range(1000)))
        ctx.destroy()
        self.assertTrue(engine.shutdown(2 * 1000 * 1000))

    def test_contexts_are_serial(self):
        engine = Weft.Engine.new(2)
        ctxs = [Weft.Context.new(engine) for _ in range(4)]
        inside = [0] * 4
        overlaps = []
        counts = [0] * 4
        left = threading.Semaphore(0)

        def job(k):
            inside[k] += 1
            if inside[k] != 1:
                overlaps.append(k)
            counts[k] += 1
            inside[k] -= 1

        for k, ctx in enumerate(ctxs):
            for _ in range(200):
                ctx.post(job, k)
            ctx.post(lambda _: left.release(), None)
            ctx.dispatch()
        for _ in ctxs:
            self.assertTrue(left.acquire(timeout=DEADLINE))
        self.assertEqual(overlaps, [])
        self.assertEqual(counts, [200] * 4)
        for ctx in ctxs:
            ctx.destroy()
        self.assertTrue(engine.shutdown(2 * 1000 * 1000))

    def test_timeout_fires_once(self):
        engine = Weft.Engine.new(1)
        ctx = Weft.Context.new(engine)
        fired = []
        done = threading.Event()

        def on_timeout(_):
            fired.append(GLib.get_monotonic_time())
            done.set()
            return GLib.SOURCE_REMOVE

        start = GLib.get_monotonic_time()
        ctx.add_timeout(30, on_timeout, None)
        ctx.dispatch()
        self.assertTrue(done.wait(DEADLINE))
        self.assertEqual(len(fired), 1)
        self.assertGreaterEqual(fired[0] - start, 29 * 1000)
        ctx.destroy()
        self.assertTrue(engine.shutdown(2 * 1000 * 1000))

    def test_engines_in_a_loop_do_not_grow(self):
        """An engine made and dropped over and over, its workers running
        Python jobs: memory stays flat. Each exiting worker used to give
        its job cache back topped up with new objects, a magazine (about
        10 KiB) per worker per engine, kept for good."""

        def rss_kib():
            with open("/proc/self/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1])
            self.skipTest("no VmRSS")

        def one():
            engine = Weft.Engine.new(2)
            ctx = Weft.Context.new(engine)
            done = threading.Event()
            for _ in range(10):
                ctx.post(lambda _: None, None)
            ctx.post(lambda _: done.set(), None)
            ctx.dispatch()
            self.assertTrue(done.wait(DEADLINE))
            ctx.destroy()
            self.assertTrue(engine.shutdown(2 * 1000 * 1000))

        for _ in range(50):
            one()
        before = rss_kib()
        for _ in range(400):
            one()
        # 400 engines leaked about 6 MiB; allow a quarter of that for noise.
        self.assertLess(rss_kib() - before, 1536)


class HttpTest(unittest.TestCase):
    def setUp(self):
        self.engine = Weft.Engine.new(2)
        self.server = Weft.HttpServer.new(self.engine)
        self.handled_on = set()

        def hello(server, req, _):
            self.handled_on.add(threading.get_ident())
            name = req.get_param("name")
            greeting = req.get_query_param("greeting") or "Hello"
            body = f"{greeting}, {name}! ({req.get_method()})".encode()
            req.add_response_header("X-Weft-Test", "yes")
            req.respond(200, "text/plain", body)

        def echo(server, req, _):
            data = req.get_body().get_data()
            req.respond(201, "application/octet-stream", data[::-1])

        def stream(server, req, _):
            req.respond_stream(200, "text/plain", None, None)

            def produce():
                for i in range(5):
                    req.write(f"part {i}\n".encode())
                req.finish()

            threading.Thread(target=produce).start()

        self.server.add_handler("GET", "/hello/{name}", hello, None)
        self.server.add_handler("POST", "/echo", echo, None)
        self.server.add_handler("GET", "/stream", stream, None)
        self.server.set_limit(Weft.HttpLimit.MAX_BODY_BYTES, 1 << 20)
        listener = self.server.get_listener()
        self.assertTrue(listener.add_tcp("127.0.0.1", 0))
        self.port = listener.get_port(0)
        self.assertTrue(self.server.start())

    def tearDown(self):
        self.server = None
        self.assertTrue(self.engine.shutdown(2 * 1000 * 1000))
        self.engine = None

    def url(self, path):
        return f"http://127.0.0.1:{self.port}{path}"

    def test_python_handler(self):
        with urllib.request.urlopen(self.url("/hello/w%C3%B6rld?greeting=Hi"),
                                    timeout=DEADLINE) as r:
            self.assertEqual(r.status, 200)
            self.assertEqual(r.headers["X-Weft-Test"], "yes")
            self.assertEqual(r.headers["Content-Type"], "text/plain")
            self.assertIsNotNone(r.headers["Date"])
            self.assertEqual(r.read().decode(), "Hi, wörld! (GET)")
        # The handler ran on one of the engine's workers, not here.
        self.assertNotIn(threading.get_ident(), self.handled_on)

    def test_body_and_status(self):
        req = urllib.request.Request(self.url("/echo"), data=b"abc" * 1000, method="POST")
        with urllib.request.urlopen(req, timeout=DEADLINE) as r:
            self.assertEqual(r.status, 201)
            self.assertEqual(r.read(), (b"abc" * 1000)[::-1])

    def test_not_found(self):
        with self.assertRaises(urllib.error.HTTPError) as cm:
            urllib.request.urlopen(self.url("/nope"), timeout=DEADLINE)
        self.assertEqual(cm.exception.code, 404)

    def test_body_limit(self):
        # A declared body over the limit is refused before it is sent:
        # 413, and the connection closes (its bytes would be unframed).
        with socket.create_connection(("127.0.0.1", self.port), timeout=DEADLINE) as s:
            s.sendall(b"POST /echo HTTP/1.1\r\nHost: a\r\n"
                      b"Content-Length: %d\r\n\r\n" % ((1 << 20) + 1))
            got = s.makefile("rb").read()  # to the server's close
        self.assertTrue(got.startswith(b"HTTP/1.1 413 "), got[:80])
        self.assertIn(b"\r\nConnection: close\r\n", got)
        # At the limit exactly, the body is taken.
        req = urllib.request.Request(self.url("/echo"), data=b"x" * (1 << 20), method="POST")
        with urllib.request.urlopen(req, timeout=DEADLINE) as r:
            self.assertEqual(r.status, 201)
            self.assertEqual(len(r.read()), 1 << 20)

    def test_stream_from_thread(self):
        with urllib.request.urlopen(self.url("/stream"), timeout=DEADLINE) as r:
            self.assertEqual(r.headers["Transfer-Encoding"], "chunked")
            self.assertEqual(r.read().decode(), "".join(f"part {i}\n" for i in range(5)))

    def test_many_requests_from_threads(self):
        errors = []

        def client(k):
            try:
                for i in range(20):
                    with urllib.request.urlopen(self.url(f"/hello/c{k}x{i}"),
                                                timeout=DEADLINE) as r:
                        if r.read().decode() != f"Hello, c{k}x{i}! (GET)":
                            errors.append((k, i))
            except Exception as e:  # noqa: BLE001
                errors.append(e)

        threads = [threading.Thread(target=client, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(DEADLINE)
        self.assertEqual(errors, [])
        self.assertGreaterEqual(self.server.get_n_requests(), 80)


class BridgeTest(unittest.TestCase):
    """The GLib main-context bridge: every callback on the thread running a
    GLib.MainLoop, as a PyGObject or GTK application wants it."""

    def test_http_server_on_main_loop(self):
        main_ctx = GLib.MainContext.default()
        engine = Weft.Engine.new_for_main_context(None)
        server = Weft.HttpServer.new(engine)
        loop = GLib.MainLoop.new(main_ctx, False)
        main_thread = threading.get_ident()
        state = {"ticks": 0, "handled_on": set()}

        def hello(server, req, _):
            state["handled_on"].add(threading.get_ident())
            req.respond(200, "text/plain", f"ticks {state['ticks'] > 0}".encode())

        def tick():
            state["ticks"] += 1  # no lock: the handler runs on this thread too
            return GLib.SOURCE_CONTINUE

        server.add_handler("GET", "/", hello, None)
        listener = server.get_listener()
        self.assertTrue(listener.add_tcp("127.0.0.1", 0))
        port = listener.get_port(0)
        self.assertTrue(server.start())
        tick_id = GLib.timeout_add(5, tick)
        results = []

        def client():
            try:
                for _ in range(20):
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/",
                                                timeout=DEADLINE) as r:
                        results.append(r.read().decode())
            except Exception as e:  # noqa: BLE001
                results.append(e)
            finally:
                GLib.idle_add(loop.quit)

        threading.Thread(target=client).start()
        guard = GLib.timeout_add_seconds(int(DEADLINE), loop.quit)
        loop.run()
        GLib.source_remove(guard)
        GLib.source_remove(tick_id)
        self.assertEqual(len(results), 20, results)
        self.assertTrue(all(r in ("ticks True", "ticks False") for r in results), results)
        self.assertEqual(state["handled_on"], {main_thread})
        done = []
        server.shutdown(1000, lambda listener, drained, data: done.append(drained), None)
        deadline = GLib.get_monotonic_time() + int(DEADLINE * 1e6)
        while not done and GLib.get_monotonic_time() < deadline:
            main_ctx.iteration(True)
        self.assertEqual(done, [True])
        server = None
        self.assertTrue(engine.shutdown(2 * 1000 * 1000))

    def test_post_to_main_context(self):
        """Worker contexts post results to the main loop; each producer's
        results arrive in order, on the main thread."""
        main_ctx = GLib.MainContext.default()
        engine = Weft.Engine.new(2)
        loop = GLib.MainLoop.new(main_ctx, False)
        main_thread = threading.get_ident()
        got = {0: [], 1: []}
        threads = set()
        total = 2 * 300

        def deliver(item):
            k, i = item
            threads.add(threading.get_ident())
            got[k].append(i)
            if len(got[0]) + len(got[1]) == total:
                loop.quit()

        ctxs = []
        for k in range(2):
            ctx = Weft.Context.new(engine)
            for i in range(300):
                ctx.post(lambda item: Weft.main_context_post(main_ctx, deliver, item), (k, i))
            ctx.dispatch()
            ctxs.append(ctx)
        guard = GLib.timeout_add_seconds(int(DEADLINE), loop.quit)
        loop.run()
        GLib.source_remove(guard)
        self.assertEqual(got[0], list(range(300)))
        self.assertEqual(got[1], list(range(300)))
        self.assertEqual(threads, {main_thread})
        for ctx in ctxs:
            ctx.destroy()
        self.assertTrue(engine.shutdown(2 * 1000 * 1000))


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
