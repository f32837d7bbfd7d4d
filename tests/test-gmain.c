/* test-gmain.c: the GLib main-context bridge. An engine driven by a
 * GMainContext, contexts bound to a GMainContext on an engine with
 * workers, weft_main_context_post(), and what happens to queued work when
 * things are shut down.
 *
 * The test thread iterates a private GMainContext with blocking
 * iterations and nothing else attached but a long deadline source, so a
 * lost wake-up shows as a timeout instead of being hidden by a tick.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "weft-net-util.h"

static pthread_t main_thread;

static gboolean
set_flag (gpointer data)
{
  atomic_store ((atomic_int *) data, 1);
  return G_SOURCE_REMOVE;
}

/* Iterates @mc, blocking, until @cond holds or WT_DEADLINE_US passed. */
#define GM_ITERATE_UNTIL(mc, cond)                                            \
  G_STMT_START                                                                \
  {                                                                           \
    atomic_int gm_expired_ = 0;                                               \
    GSource *gm_deadline_ = g_timeout_source_new (WT_DEADLINE_US / 1000);     \
    g_source_set_callback (gm_deadline_, set_flag, &gm_expired_, NULL);       \
    g_source_attach (gm_deadline_, (mc));                                     \
    while (!(cond) && !atomic_load (&gm_expired_))                            \
      g_main_context_iteration ((mc), TRUE);                                  \
    g_source_destroy (gm_deadline_);                                          \
    g_source_unref (gm_deadline_);                                            \
  }                                                                           \
  G_STMT_END

/* Runs what @mc has ready without blocking. */
static void
gm_iterate_ready (GMainContext *mc)
{
  while (g_main_context_iteration (mc, FALSE))
    ;
}

static inline gboolean
on_main_thread (void)
{
  return pthread_equal (pthread_self (), main_thread);
}

/* What callbacks saw about where they ran. */
typedef struct {
  WeftEngine *engine;
  WeftContext *ctx;
  atomic_int calls;
  atomic_int off_main;          /* ran on a thread other than the test's */
  atomic_int not_worker;        /* weft_engine_is_worker_thread() said FALSE */
  atomic_int wrong_current;     /* weft_context_get_current() was not ctx */
  atomic_int overlap;
  atomic_int inside;
} Where;

static void
where_enter (Where *w)
{
  if (atomic_fetch_add (&w->inside, 1) != 0)
    atomic_fetch_add (&w->overlap, 1);
  if (!on_main_thread ())
    atomic_fetch_add (&w->off_main, 1);
  if (w->engine != NULL && !weft_engine_is_worker_thread (w->engine))
    atomic_fetch_add (&w->not_worker, 1);
  if (w->ctx != NULL && weft_context_get_current () != w->ctx)
    atomic_fetch_add (&w->wrong_current, 1);
}

static void
where_leave (Where *w)
{
  atomic_fetch_add (&w->calls, 1);
  atomic_fetch_sub (&w->inside, 1);
}

static void
assert_where (Where *w)
{
  g_assert_cmpint (atomic_load (&w->off_main), ==, 0);
  g_assert_cmpint (atomic_load (&w->not_worker), ==, 0);
  g_assert_cmpint (atomic_load (&w->wrong_current), ==, 0);
  g_assert_cmpint (atomic_load (&w->overlap), ==, 0);
}

static WeftEngine *
bridged_engine (GMainContext *mc)
{
  GError *error = NULL;
  WeftEngine *engine = weft_engine_new_for_main_context (mc, &error);
  g_assert_no_error (error);
  g_assert_nonnull (engine);
  return engine;
}

/* ---- /gmain/engine-on-main-context ------------------------------------------ */

typedef struct {
  Where where;
  int pipe[2];
  atomic_int fd_ran, timeout_ran, idle_ran, job_ran, engine_job_ran;
} Bridged;

static gboolean
bridged_fd (gint fd, GIOCondition cond, gpointer data)
{
  Bridged *b = data;
  char buf[16];
  where_enter (&b->where);
  while (read (fd, buf, sizeof buf) > 0)
    ;
  atomic_fetch_add (&b->fd_ran, 1);
  where_leave (&b->where);
  return G_SOURCE_REMOVE;
}

static gboolean
bridged_timeout (gpointer data)
{
  Bridged *b = data;
  where_enter (&b->where);
  atomic_fetch_add (&b->timeout_ran, 1);
  where_leave (&b->where);
  return G_SOURCE_REMOVE;
}

static gboolean
bridged_idle (gpointer data)
{
  Bridged *b = data;
  where_enter (&b->where);
  atomic_fetch_add (&b->idle_ran, 1);
  where_leave (&b->where);
  return G_SOURCE_REMOVE;
}

static void
bridged_job (gpointer data)
{
  Bridged *b = data;
  where_enter (&b->where);
  atomic_fetch_add (&b->job_ran, 1);
  where_leave (&b->where);
}

static void
bridged_engine_job (gpointer data)
{
  Bridged *b = data;
  if (!on_main_thread ())
    atomic_fetch_add (&b->where.off_main, 1);
  if (!weft_engine_is_worker_thread (b->where.engine))
    atomic_fetch_add (&b->where.not_worker, 1);
  atomic_fetch_add (&b->engine_job_ran, 1);
}

/* From another thread, once the test thread sleeps in its GMainContext:
 * the post and the pipe write must each wake it. */
static gpointer
bridged_poster (gpointer data)
{
  Bridged *b = data;
  g_usleep (20000); /* let the test thread block in poll (not a wait for a result) */
  weft_context_post (b->where.ctx, bridged_job, b, NULL);
  WT_WAIT_UNTIL (atomic_load (&b->job_ran) == 1);
  g_usleep (20000);
  weft_engine_post (b->where.engine, bridged_engine_job, b, NULL);
  WT_WAIT_UNTIL (atomic_load (&b->engine_job_ran) == 1);
  g_usleep (20000);
  wt_write_byte (b->pipe[1]);
  return NULL;
}

static void
test_engine_on_main_context (void)
{
  g_test_summary ("An engine driven by a GMainContext runs every callback (fd, timeout, idle, "
                  "posted job, engine job) on the thread iterating it, which counts as its "
                  "worker; posts and fd readiness from other threads wake that thread");

  GMainContext *mc = g_main_context_new ();
  WeftEngine *engine = bridged_engine (mc);
  g_assert_cmpuint (weft_engine_get_n_workers (engine), ==, 1);
  g_assert_false (weft_engine_is_worker_thread (engine));

  Bridged b = { 0 };
  b.where.engine = engine;
  b.where.ctx = weft_context_new (engine);
  wt_pipe (b.pipe);
  GError *error = NULL;
  g_assert_cmpuint (weft_context_add_fd (b.where.ctx, b.pipe[0], G_IO_IN, bridged_fd, &b, NULL,
                                         &error), >, 0);
  g_assert_no_error (error);
  g_assert_cmpuint (weft_context_add_timeout (b.where.ctx, 10, bridged_timeout, &b, NULL), >, 0);
  g_assert_cmpuint (weft_context_add_idle (b.where.ctx, bridged_idle, &b, NULL), >, 0);
  weft_context_dispatch (b.where.ctx);

  /* Nothing runs while nobody iterates the GMainContext. */
  wt_quiet_window_ms (30);
  g_assert_cmpint (atomic_load (&b.timeout_ran) + atomic_load (&b.idle_ran), ==, 0);

  /* The timeout wakes the poll by itself (nothing else is attached). */
  GM_ITERATE_UNTIL (mc, atomic_load (&b.timeout_ran) == 1 && atomic_load (&b.idle_ran) >= 1);
  g_assert_cmpint (atomic_load (&b.timeout_ran), ==, 1);
  g_assert_cmpint (atomic_load (&b.idle_ran), >=, 1);

  GThread *poster = g_thread_new ("poster", bridged_poster, &b);
  GM_ITERATE_UNTIL (mc, atomic_load (&b.fd_ran) == 1);
  g_thread_join (poster);
  g_assert_cmpint (atomic_load (&b.job_ran), ==, 1);
  g_assert_cmpint (atomic_load (&b.engine_job_ran), ==, 1);
  g_assert_cmpint (atomic_load (&b.fd_ran), ==, 1);
  assert_where (&b.where);

  WeftEngineStats st = wt_stats (engine);
  g_assert_cmpuint (st.n_workers, ==, 1);
  g_assert_cmpuint (st.fd_events, >=, 1);
  g_assert_cmpuint (st.timers_fired, ==, 1);

  weft_context_unref (b.where.ctx);
  weft_engine_unref (engine);
  gm_iterate_ready (mc);
  g_main_context_unref (mc);
  wt_close (b.pipe[0]);
  wt_close (b.pipe[1]);
}

/* ---- /gmain/engine-stop-start --------------------------------------------------- */

typedef struct {
  atomic_int ran;
  atomic_int off_main;
} Tick;

static gboolean
tick_timeout (gpointer data)
{
  Tick *t = data;
  if (!on_main_thread ())
    atomic_fetch_add (&t->off_main, 1);
  atomic_fetch_add (&t->ran, 1);
  return G_SOURCE_CONTINUE;
}

typedef struct {
  WeftEngine *engine;
  GMainContext *mc;
  Tick *tick;
  atomic_int stopped;
} Stopper;

static gpointer
stopper_thread (gpointer data)
{
  Stopper *s = data;
  WT_WAIT_UNTIL (atomic_load (&s->tick->ran) >= 5);
  weft_engine_stop (s->engine);
  atomic_store (&s->stopped, 1);
  /* The engine's source is gone: nothing else would end the test thread's
   * blocking iteration. */
  g_main_context_wakeup (s->mc);
  return NULL;
}

static void
test_engine_stop_start (void)
{
  g_test_summary ("A bridged engine stopped from another thread while its GMainContext is "
                  "iterated stops running callbacks, and runs them again once restarted");

  GMainContext *mc = g_main_context_new ();
  WeftEngine *engine = bridged_engine (mc);
  weft_engine_set_timer_slack (engine, 0);
  WeftContext *ctx = weft_context_new (engine);
  Tick t = { 0 };
  weft_context_add_timeout (ctx, 1, tick_timeout, &t, NULL);
  weft_context_dispatch (ctx);

  Stopper s = { engine, mc, &t, 0 };
  GThread *th = g_thread_new ("stopper", stopper_thread, &s);
  GM_ITERATE_UNTIL (mc, atomic_load (&s.stopped));
  g_thread_join (th);
  g_assert_cmpint (atomic_load (&s.stopped), ==, 1);
  g_assert_false (weft_engine_is_running (engine));

  /* Stopped: iterating the GMainContext runs nothing of the engine. */
  gint before = atomic_load (&t.ran);
  gint64 until = g_get_monotonic_time () + 50000;
  while (g_get_monotonic_time () < until)
    {
      gm_iterate_ready (mc);
      g_usleep (1000);
    }
  g_assert_cmpint (atomic_load (&t.ran), ==, before);

  GError *error = NULL;
  g_assert_true (weft_engine_start (engine, &error));
  g_assert_no_error (error);
  GM_ITERATE_UNTIL (mc, atomic_load (&t.ran) >= before + 5);
  g_assert_cmpint (atomic_load (&t.ran), >=, before + 5);
  g_assert_cmpint (atomic_load (&t.off_main), ==, 0);

  weft_context_unref (ctx);
  weft_engine_unref (engine);
  g_main_context_unref (mc);
}

/* ---- /gmain/http-server-on-bridge ------------------------------------------------ */

typedef struct {
  GMainLoop *loop;
  WeftEngine *engine;
  guint16 port;
  /* Written by the GLib timeout and read by the HTTP handler, with no
   * lock: both run on the test thread (ThreadSanitizer would see a race
   * otherwise). */
  int ticks;
  int handled;
  atomic_int handler_off_main;
  atomic_int handler_not_worker;
  /* The client thread's findings. */
  atomic_int client_done;
  atomic_int n_ok;
  atomic_int saw_ticks_advance;
  atomic_int curl_ok;           /* 1 ok, 0 not run, -1 failed */
} App;

static gboolean
app_tick (gpointer data)
{
  App *app = data;
  app->ticks++;
  return G_SOURCE_CONTINUE;
}

static void
app_handler (WeftHttpServer *server, WeftHttpRequest *request, gpointer data)
{
  App *app = data;
  if (!on_main_thread ())
    atomic_fetch_add (&app->handler_off_main, 1);
  if (!weft_engine_is_worker_thread (app->engine))
    atomic_fetch_add (&app->handler_not_worker, 1);
  app->handled++;
  gchar *body = g_strdup_printf ("ticks=%d", app->ticks);
  weft_http_request_respond (request, 200, "text/plain", (const guint8 *) body, strlen (body));
  g_free (body);
}

/* One GET /ticks on a fresh connection; returns the ticks value, or -1. */
static int
fetch_ticks (guint16 port)
{
  int fd = wt_connect_tcp (port);
  wt_send_str (fd, "GET /ticks HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n");
  GByteArray *got = wt_recv_to_eof (fd, FALSE, NULL);
  close (fd);
  g_byte_array_append (got, (const guint8 *) "", 1);
  const char *text = (const char *) got->data;
  const char *body = strstr (text, "\r\n\r\nticks=");
  int ticks = -1;
  if (g_str_has_prefix (text, "HTTP/1.1 200 ") && body != NULL)
    ticks = atoi (body + strlen ("\r\n\r\nticks="));
  g_byte_array_unref (got);
  return ticks;
}

static gpointer
app_client (gpointer data)
{
  App *app = data;
  int first = fetch_ticks (app->port);
  if (first >= 0)
    atomic_fetch_add (&app->n_ok, 1);
  /* Until the GLib timeout is seen advancing between two answers. */
  gint64 deadline = g_get_monotonic_time () + WT_DEADLINE_US;
  while (g_get_monotonic_time () < deadline)
    {
      int now = fetch_ticks (app->port);
      if (now < 0)
        break;
      atomic_fetch_add (&app->n_ok, 1);
      if (first >= 0 && now > first && atomic_load (&app->n_ok) >= 10)
        {
          atomic_store (&app->saw_ticks_advance, 1);
          break;
        }
    }

  const char *curl = g_getenv ("WEFT_TEST_CURL");
  if (curl != NULL)
    {
      gchar *url = g_strdup_printf ("http://127.0.0.1:%u/ticks", app->port);
      const char *argv[] = { curl, "-sS", "--max-time", "10", url, NULL };
      gchar *out = NULL;
      gint status = 0;
      gboolean spawned = g_spawn_sync (NULL, (gchar **) argv, NULL,
                                       G_SPAWN_STDIN_FROM_DEV_NULL | G_SPAWN_STDERR_TO_DEV_NULL,
                                       NULL, NULL, &out, NULL, &status, NULL);
      atomic_store (&app->curl_ok, spawned && g_spawn_check_wait_status (status, NULL) &&
                                           out != NULL && g_str_has_prefix (out, "ticks=")
                                       ? 1
                                       : -1);
      g_free (out);
      g_free (url);
    }
  atomic_store (&app->client_done, 1);
  g_main_loop_quit (app->loop);
  return NULL;
}

static void
test_http_server_on_bridge (void)
{
  g_test_summary ("A GMainLoop application runs a WeftHttpServer on a bridged engine beside "
                  "a GLib timeout that shares lock-free state with the handler; a client "
                  "thread gets answers, and the handler ran on the main thread");

  GMainContext *mc = g_main_context_new ();
  g_main_context_push_thread_default (mc);
  App app = { 0 };
  app.loop = g_main_loop_new (mc, FALSE);
  app.engine = bridged_engine (mc);

  WeftHttpServer *server = weft_http_server_new (app.engine);
  weft_http_server_add_handler (server, "GET", "/ticks", app_handler, &app, NULL);
  WeftListener *l = weft_http_server_get_listener (server);
  GError *error = NULL;
  g_assert_true (weft_listener_add_tcp (l, "127.0.0.1", 0, &error));
  g_assert_no_error (error);
  app.port = weft_listener_get_port (l, 0);
  g_assert_true (weft_http_server_start (server, &error));
  g_assert_no_error (error);

  GSource *tick = g_timeout_source_new (2);
  g_source_set_callback (tick, app_tick, &app, NULL);
  g_source_attach (tick, mc);
  atomic_int expired = 0;
  GSource *deadline = g_timeout_source_new (6 * WT_DEADLINE_US / 1000);
  g_source_set_callback (deadline, set_flag, &expired, NULL);
  g_source_attach (deadline, mc);

  GThread *client = g_thread_new ("http-client", app_client, &app);
  g_main_loop_run (app.loop);
  if (atomic_load (&expired))
    g_main_loop_quit (app.loop);
  g_thread_join (client);

  g_assert_cmpint (atomic_load (&expired), ==, 0);
  g_assert_cmpint (atomic_load (&app.client_done), ==, 1);
  g_assert_cmpint (atomic_load (&app.n_ok), >=, 10);
  g_assert_cmpint (atomic_load (&app.saw_ticks_advance), ==, 1);
  g_assert_cmpint (atomic_load (&app.curl_ok), !=, -1);
  g_assert_cmpint (app.handled, >=, 10);
  g_assert_cmpint (atomic_load (&app.handler_off_main), ==, 0);
  g_assert_cmpint (atomic_load (&app.handler_not_worker), ==, 0);
  g_assert_cmpuint (weft_http_server_get_n_requests (server), >=, 10);

  g_source_destroy (tick);
  g_source_unref (tick);
  g_source_destroy (deadline);
  g_source_unref (deadline);
  weft_http_server_unref (server);
  weft_engine_unref (app.engine);
  g_main_loop_unref (app.loop);
  g_main_context_pop_thread_default (mc);
  gm_iterate_ready (mc);
  g_main_context_unref (mc);
}

/* ---- /gmain/context-on-main-context ------------------------------------------- */

#define BOUND_PRODUCERS 2
#define BOUND_JOBS 500

typedef struct {
  Where where;
  int pipe[2];
  atomic_int next[BOUND_PRODUCERS];  /* next sequence number expected */
  atomic_int out_of_order;
  atomic_int fd_bytes;
  atomic_int timeout_ran;
  atomic_int idle_ran;
  atomic_int jobs_ran;
  WtCount first;                     /* a job posted before anyone iterates */
} Bound;

typedef struct {
  Bound *b;
  int producer;
  int seq;
} BoundJob;

static void
bound_job (gpointer data)
{
  BoundJob *j = data;
  Bound *b = j->b;
  where_enter (&b->where);
  if (atomic_load (&b->next[j->producer]) != j->seq)
    atomic_fetch_add (&b->out_of_order, 1);
  atomic_store (&b->next[j->producer], j->seq + 1);
  atomic_fetch_add (&b->jobs_ran, 1);
  where_leave (&b->where);
}

static gboolean
bound_fd (gint fd, GIOCondition cond, gpointer data)
{
  Bound *b = data;
  char buf[64];
  ssize_t n;
  where_enter (&b->where);
  while ((n = read (fd, buf, sizeof buf)) > 0)
    atomic_fetch_add (&b->fd_bytes, (int) n);
  where_leave (&b->where);
  return G_SOURCE_CONTINUE;
}

static gboolean
bound_timeout (gpointer data)
{
  Bound *b = data;
  where_enter (&b->where);
  gint k = atomic_fetch_add (&b->timeout_ran, 1) + 1;
  where_leave (&b->where);
  return k < 3 ? G_SOURCE_CONTINUE : G_SOURCE_REMOVE;
}

static gboolean
bound_idle (gpointer data)
{
  Bound *b = data;
  where_enter (&b->where);
  atomic_fetch_add (&b->idle_ran, 1);
  where_leave (&b->where);
  return G_SOURCE_REMOVE;
}

typedef struct {
  Bound *b;
  int producer;
  BoundJob jobs[BOUND_JOBS];
} Producer;

static gpointer
bound_producer (gpointer data)
{
  Producer *p = data;
  for (int i = 0; i < BOUND_JOBS; i++)
    {
      p->jobs[i] = (BoundJob) { p->b, p->producer, i };
      g_assert_true (weft_context_post (p->b->where.ctx, bound_job, &p->jobs[i], NULL));
      if (i % 100 == 0)
        wt_write_byte (p->b->pipe[1]);
    }
  return NULL;
}

static void
test_context_on_main_context (void)
{
  g_test_summary ("A context bound to a GMainContext on an engine with workers runs its jobs, "
                  "fds, timeouts and idles only on the thread iterating the GMainContext, one "
                  "at a time and in order, and nothing while nobody iterates");

  WeftEngine *engine = wt_engine_new (2);
  GMainContext *mc = g_main_context_new ();
  Bound b = { 0 };
  b.where.engine = engine;
  b.where.ctx = weft_context_new_for_main_context (engine, mc);
  g_assert_nonnull (b.where.ctx);
  wt_pipe (b.pipe);
  GError *error = NULL;
  g_assert_cmpuint (weft_context_add_fd (b.where.ctx, b.pipe[0], G_IO_IN, bound_fd, &b, NULL,
                                         &error), >, 0);
  g_assert_no_error (error);
  g_assert_cmpuint (weft_context_add_timeout (b.where.ctx, 5, bound_timeout, &b, NULL), >, 0);
  g_assert_cmpuint (weft_context_add_idle (b.where.ctx, bound_idle, &b, NULL), >, 0);
  weft_context_post (b.where.ctx, wt_count_job, &b.first, wt_count_notify);
  weft_context_dispatch (b.where.ctx);

  /* The workers see the readiness and the timeouts, but do not run them. */
  wt_write_byte (b.pipe[1]);
  wt_quiet_window_ms (50);
  g_assert_cmpint (atomic_load (&b.first.ran), ==, 0);
  g_assert_cmpint (atomic_load (&b.fd_bytes), ==, 0);
  g_assert_cmpint (atomic_load (&b.timeout_ran), ==, 0);
  g_assert_cmpint (atomic_load (&b.idle_ran), ==, 0);

  GM_ITERATE_UNTIL (mc, atomic_load (&b.fd_bytes) == 1 && atomic_load (&b.timeout_ran) >= 1);
  g_assert_cmpint (atomic_load (&b.first.ran), ==, 1);
  g_assert_cmpint (atomic_load (&b.first.notified), ==, 1);
  g_assert_cmpint (atomic_load (&b.fd_bytes), ==, 1);
  g_assert_cmpint (atomic_load (&b.idle_ran), >=, 1);

  static Producer producers[BOUND_PRODUCERS];
  GThread *threads[BOUND_PRODUCERS];
  for (int i = 0; i < BOUND_PRODUCERS; i++)
    {
      producers[i].b = &b;
      producers[i].producer = i;
      threads[i] = g_thread_new ("producer", bound_producer, &producers[i]);
    }
  GM_ITERATE_UNTIL (mc, atomic_load (&b.jobs_ran) == BOUND_PRODUCERS * BOUND_JOBS &&
                            atomic_load (&b.fd_bytes) == 1 + BOUND_PRODUCERS * BOUND_JOBS / 100 &&
                            atomic_load (&b.timeout_ran) == 3);
  for (int i = 0; i < BOUND_PRODUCERS; i++)
    g_thread_join (threads[i]);
  g_assert_cmpint (atomic_load (&b.jobs_ran), ==, BOUND_PRODUCERS * BOUND_JOBS);
  g_assert_cmpint (atomic_load (&b.out_of_order), ==, 0);
  g_assert_cmpint (atomic_load (&b.fd_bytes), ==, 1 + BOUND_PRODUCERS * BOUND_JOBS / 100);
  g_assert_cmpint (atomic_load (&b.timeout_ran), ==, 3);
  assert_where (&b.where);
  g_assert_cmpint (atomic_load (&b.where.calls), >=,
                   BOUND_PRODUCERS * BOUND_JOBS + 1 + 3 + 1);

  weft_context_unref (b.where.ctx);
  weft_engine_unref (engine);
  gm_iterate_ready (mc);
  g_main_context_unref (mc);
  wt_close (b.pipe[0]);
  wt_close (b.pipe[1]);
}

/* ---- /gmain/post-to-main-context ------------------------------------------------ */

#define POST_PRODUCERS 4
#define POST_RESULTS 1000

typedef struct {
  atomic_int ran;
  atomic_int notified;
} Slot;

typedef struct _Posts Posts;

typedef struct {
  Posts *posts;
  WeftContext *ctx;
  int producer;
  atomic_int acks;              /* answers posted back from the main thread */
  atomic_int acks_off_ctx;      /* an answer ran outside this context */
} PostProducer;

struct _Posts {
  GMainContext *mc;
  Slot slots[POST_PRODUCERS][POST_RESULTS];
  PostProducer producers[POST_PRODUCERS];
  int next[POST_PRODUCERS];     /* main thread only */
  int out_of_order;             /* main thread only */
  int received;                 /* main thread only */
  atomic_int off_main;
};

static void
ack_job (gpointer data)
{
  PostProducer *p = data;
  if (weft_context_get_current () != p->ctx)
    atomic_fetch_add (&p->acks_off_ctx, 1);
  atomic_fetch_add (&p->acks, 1);
}

typedef struct {
  Posts *posts;
  int producer;
  int seq;
} Result;

static void
result_run (gpointer data)
{
  Result *r = data;
  Posts *posts = r->posts;
  if (!on_main_thread ())
    atomic_fetch_add (&posts->off_main, 1);
  if (posts->next[r->producer] != r->seq)
    posts->out_of_order++;
  posts->next[r->producer] = r->seq + 1;
  posts->received++;
  atomic_fetch_add (&posts->slots[r->producer][r->seq].ran, 1);
  /* And back to the producer's context. */
  PostProducer *p = &posts->producers[r->producer];
  g_assert_true (weft_context_post (p->ctx, ack_job, p, NULL));
}

static void
result_free (gpointer data)
{
  Result *r = data;
  atomic_fetch_add (&r->posts->slots[r->producer][r->seq].notified, 1);
  g_free (r);
}

static void
produce_job (gpointer data)
{
  PostProducer *p = data;
  for (int i = 0; i < POST_RESULTS; i++)
    {
      Result *r = g_new (Result, 1);
      *r = (Result) { p->posts, p->producer, i };
      weft_main_context_post (p->posts->mc, result_run, r, result_free);
    }
}

static void
test_post_to_main_context (void)
{
  g_test_summary ("Worker contexts post results to a GMainContext with weft_main_context_post "
                  "and get answers back with weft_context_post: results run on the thread "
                  "iterating it, in order per producer, each notify exactly once");

  WeftEngine *engine = wt_engine_new (2);
  Posts *posts = g_new0 (Posts, 1);
  posts->mc = g_main_context_new ();
  for (int p = 0; p < POST_PRODUCERS; p++)
    {
      posts->producers[p].posts = posts;
      posts->producers[p].producer = p;
      posts->producers[p].ctx = weft_context_new (engine);
      weft_context_dispatch (posts->producers[p].ctx);
    }
  for (int p = 0; p < POST_PRODUCERS; p++)
    weft_context_post (posts->producers[p].ctx, produce_job, &posts->producers[p], NULL);

  GM_ITERATE_UNTIL (posts->mc, posts->received == POST_PRODUCERS * POST_RESULTS);
  g_assert_cmpint (posts->received, ==, POST_PRODUCERS * POST_RESULTS);
  g_assert_cmpint (posts->out_of_order, ==, 0);
  g_assert_cmpint (atomic_load (&posts->off_main), ==, 0);
  for (int p = 0; p < POST_PRODUCERS; p++)
    {
      WT_WAIT_UNTIL (atomic_load (&posts->producers[p].acks) == POST_RESULTS);
      g_assert_cmpint (atomic_load (&posts->producers[p].acks), ==, POST_RESULTS);
      g_assert_cmpint (atomic_load (&posts->producers[p].acks_off_ctx), ==, 0);
      for (int i = 0; i < POST_RESULTS; i++)
        {
          g_assert_cmpint (atomic_load (&posts->slots[p][i].ran), ==, 1);
          g_assert_cmpint (atomic_load (&posts->slots[p][i].notified), ==, 1);
        }
    }

  for (int p = 0; p < POST_PRODUCERS; p++)
    weft_context_unref (posts->producers[p].ctx);
  weft_engine_unref (engine);
  g_main_context_unref (posts->mc);
  g_free (posts);
}

/* ---- /gmain/shutdown-with-queued ------------------------------------------------ */

#define QUEUED 100

static void
post_counted (WeftContext *ctx, WtCount *c, int n)
{
  for (int i = 0; i < n; i++)
    g_assert_true (weft_context_post (ctx, wt_count_job, c, wt_count_notify));
}

static void
assert_dropped (WtCount *c, int n)
{
  g_assert_cmpint (atomic_load (&c->ran), ==, 0);
  g_assert_cmpint (atomic_load (&c->notified), ==, n);
  g_assert_cmpint (atomic_load (&c->notify_while_inside), ==, 0);
}

static void
test_shutdown_with_queued (void)
{
  g_test_summary ("Unref and finalization with callbacks queued for a GMainContext that is "
                  "not iterated: every notify runs exactly once, no callback runs, nothing "
                  "leaks");

  /* 1. A bridged engine whose GMainContext is never iterated: the last
   *    unref drops the context's jobs, the engine's jobs and the sources. */
  {
    GMainContext *mc = g_main_context_new ();
    WeftEngine *engine = bridged_engine (mc);
    WeftContext *ctx = weft_context_new (engine);
    WtCount jobs = { 0 }, engine_jobs = { 0 }, timeout = { 0 };
    weft_context_add_timeout (ctx, 1, wt_count_source_continue, &timeout, wt_count_notify);
    weft_context_dispatch (ctx);
    post_counted (ctx, &jobs, QUEUED);
    for (int i = 0; i < QUEUED; i++)
      weft_engine_post (engine, wt_count_job, &engine_jobs, wt_count_notify);
    weft_engine_unref (engine);
    assert_dropped (&jobs, QUEUED);
    assert_dropped (&engine_jobs, QUEUED);
    assert_dropped (&timeout, 1);
    g_assert_false (weft_context_post (ctx, wt_count_job, &jobs, wt_count_notify));
    assert_dropped (&jobs, QUEUED + 1);
    weft_context_unref (ctx);
    g_main_context_unref (mc);
  }

  /* 2. weft_main_context_post to a GMainContext that is finalized without
   *    being iterated: its jobs are dropped by the final unref. */
  {
    GMainContext *mc = g_main_context_new ();
    WtCount jobs = { 0 };
    for (int i = 0; i < QUEUED; i++)
      g_assert_true (weft_main_context_post (mc, wt_count_job, &jobs, wt_count_notify));
    g_assert_cmpint (atomic_load (&jobs.notified), ==, 0);
    g_main_context_unref (mc);
    assert_dropped (&jobs, QUEUED);
  }

  /* 3. A bound context with jobs queued, destroyed with its engine, its
   *    GMainContext iterated afterwards: the jobs are dropped there. */
  {
    WeftEngine *engine = wt_engine_new (2);
    GMainContext *mc = g_main_context_new ();
    WeftContext *ctx = weft_context_new_for_main_context (engine, mc);
    WtCount jobs = { 0 };
    weft_context_dispatch (ctx);
    post_counted (ctx, &jobs, QUEUED);
    weft_context_unref (ctx);
    weft_engine_unref (engine);
    g_assert_cmpint (atomic_load (&jobs.ran), ==, 0);
    GM_ITERATE_UNTIL (mc, atomic_load (&jobs.notified) == QUEUED);
    assert_dropped (&jobs, QUEUED);
    g_main_context_unref (mc);
  }

  /* 4. The same, but the GMainContext is finalized instead of iterated. */
  {
    WeftEngine *engine = wt_engine_new (2);
    GMainContext *mc = g_main_context_new ();
    WeftContext *ctx = weft_context_new_for_main_context (engine, mc);
    WtCount jobs = { 0 }, posted = { 0 };
    weft_context_dispatch (ctx);
    post_counted (ctx, &jobs, QUEUED);
    for (int i = 0; i < QUEUED; i++)
      weft_main_context_post (mc, wt_count_job, &posted, wt_count_notify);
    weft_context_unref (ctx);
    weft_engine_unref (engine);
    g_assert_cmpint (atomic_load (&jobs.notified), ==, 0);
    g_main_context_unref (mc);
    assert_dropped (&jobs, QUEUED);
    assert_dropped (&posted, QUEUED);
  }
}

/* ---- /gmain/bound-queue-outlives-push ------------------------------------------------ */

static gboolean
keep_ticking (gpointer data)
{
  atomic_fetch_add ((atomic_int *) data, 1);
  return G_SOURCE_CONTINUE;
}

/* Bound contexts whose timeouts fire on the engine's workers (each fire
 * pushes the context to its GMainContext's queue), destroyed and their
 * GMainContext finalized while the timeouts go on firing: a worker's push
 * must keep the queue alive until it is done with it. It used to look at
 * the queue after the push with nothing holding it, so the iterating thread
 * could run the context, destroy it and free the queue in between (TSan
 * reports that in every run of the old code; ASan only with a debugger
 * holding the worker). */
static void
test_bound_queue_outlives_push (void)
{
  WeftEngine *engine = wt_engine_new (2);
  for (int round = 0; round < 60; round++)
    {
      GMainContext *mc = g_main_context_new ();
      WeftContext *ctx[4];
      atomic_int ticks = 0;
      for (int i = 0; i < 4; i++)
        {
          ctx[i] = weft_context_new_for_main_context (engine, mc);
          g_assert_cmpuint (weft_context_add_timeout (ctx[i], 1, keep_ticking, &ticks, NULL), !=, 0);
          weft_context_dispatch (ctx[i]);
        }
      /* Run the contexts here until each has ticked a few times. */
      GM_ITERATE_UNTIL (mc, atomic_load (&ticks) >= 8);
      g_assert_cmpint (atomic_load (&ticks), >=, 8);
      for (int i = 0; i < 4; i++)
        {
          /* Run what is queued first, so the last push often races the
           * destroy and the finalize rather than finding them done. */
          g_main_context_iteration (mc, FALSE);
          weft_context_destroy (ctx[i]);
          weft_context_unref (ctx[i]);
        }
      g_main_context_unref (mc);
    }
  g_assert_true (weft_engine_shutdown (engine, WT_DEADLINE_US));
  weft_engine_unref (engine);
}

/* ---- /gmain/engine-shutdown-runs-queued ------------------------------------------- */

static void
test_engine_shutdown_runs_queued (void)
{
  g_test_summary ("weft_engine_shutdown on the thread owning a bridged engine's GMainContext, "
                  "after its loop returned, runs the queued jobs there and drains");

  GMainContext *mc = g_main_context_new ();
  WeftEngine *engine = bridged_engine (mc);
  WeftContext *ctx = weft_context_new (engine);
  Where where = { .engine = engine, .ctx = ctx };
  WtCount jobs = { 0 };
  weft_context_dispatch (ctx);
  post_counted (ctx, &jobs, QUEUED);
  g_assert_cmpint (atomic_load (&jobs.ran), ==, 0);
  g_assert_true (weft_engine_shutdown (engine, WT_DEADLINE_US));
  g_assert_cmpint (atomic_load (&jobs.ran), ==, QUEUED);
  g_assert_cmpint (atomic_load (&jobs.notified), ==, QUEUED);
  assert_where (&where);
  weft_context_unref (ctx);
  weft_engine_unref (engine);
  g_main_context_unref (mc);
}

/* ---- /gmain/context-outlives-main-context ----------------------------------------- */

static atomic_int unref_notified, unref_job_ran;

static void
unref_job (gpointer data)
{
  atomic_fetch_add (&unref_job_ran, 1);
}

static void
unref_context (gpointer data)
{
  atomic_fetch_add (&unref_notified, 1);
  weft_context_unref (data);
}

static void
test_context_outlives_main_context (void)
{
  g_test_summary ("A bound context whose GMainContext is finalized first: what it had queued "
                  "is dropped then, and what it is given later is dropped at once; each "
                  "notify runs once");

  WeftEngine *engine = wt_engine_new (2);
  GMainContext *mc = g_main_context_new ();
  WeftContext *ctx = weft_context_new_for_main_context (engine, mc);
  WtCount jobs = { 0 }, later = { 0 }, timeout = { 0 };
  weft_context_add_timeout (ctx, 1, wt_count_source_continue, &timeout, wt_count_notify);
  weft_context_dispatch (ctx);
  post_counted (ctx, &jobs, QUEUED);
  g_main_context_unref (mc);
  assert_dropped (&jobs, QUEUED);

  post_counted (ctx, &later, QUEUED);
  WT_WAIT_UNTIL (atomic_load (&later.notified) == QUEUED);
  assert_dropped (&later, QUEUED);
  g_assert_cmpint (atomic_load (&timeout.ran), ==, 0);

  /* The last reference goes with a job that is dropped at once: the
   * context, and with it the last reference on the GMainContext's queue,
   * are freed while that queue is being drained. */
  atomic_store (&unref_notified, 0);
  atomic_store (&unref_job_ran, 0);
  g_assert_true (weft_context_post (ctx, unref_job, ctx, unref_context));
  g_assert_cmpint (atomic_load (&unref_notified), ==, 1);
  g_assert_cmpint (atomic_load (&unref_job_ran), ==, 0);
  assert_dropped (&timeout, 1);
  weft_engine_unref (engine);
}

/* ---- /gmain/stop-during-shutdown-drain ---------------------------------- */

typedef struct {
  WeftEngine *engine;
  atomic_int job_started;
  atomic_int job_done;
  atomic_int shutdown_returned;
  atomic_int stop_returned;
} BridgeStop;

static void
bridge_stop_slow_job (gpointer data)
{
  BridgeStop *b = data;
  atomic_store (&b->job_started, 1);
  g_usleep (300 * 1000);
  atomic_store (&b->job_done, 1);
}

static gpointer
bridge_stop_shutdown (gpointer data)
{
  BridgeStop *b = data;
  weft_engine_shutdown (b->engine, -1); /* no deadline: a hang stays one */
  atomic_store (&b->shutdown_returned, 1);
  return NULL;
}

static gpointer
bridge_stop_stop (gpointer data)
{
  BridgeStop *b = data;
  weft_engine_stop (b->engine);
  atomic_store (&b->stop_returned, 1);
  return NULL;
}

static void
test_stop_during_shutdown_drain (void)
{
  g_test_summary ("A weft_engine_stop() while weft_engine_shutdown() (no deadline) drains a "
                  "bridged engine nobody iterates returns once the running job has returned, "
                  "and so does the shutdown: the drain took the stop's level-triggered "
                  "eventfd for progress and never ended, while the stop waited for it");
  GMainContext *mc = g_main_context_new ();
  GError *error = NULL;
  BridgeStop b = { weft_engine_new_for_main_context (mc, &error) };
  g_assert_no_error (error);
  g_assert_true (weft_engine_post (b.engine, bridge_stop_slow_job, &b, NULL));
  GThread *shut = g_thread_new ("shutdown", bridge_stop_shutdown, &b);
  WT_WAIT_UNTIL (atomic_load (&b.job_started)); /* the shutdown's drain runs it */
  GThread *stop = g_thread_new ("stop", bridge_stop_stop, &b);
  WT_WAIT_UNTIL (atomic_load (&b.shutdown_returned) && atomic_load (&b.stop_returned));
  g_assert_cmpint (atomic_load (&b.stop_returned), ==, 1);
  g_assert_cmpint (atomic_load (&b.shutdown_returned), ==, 1);
  g_assert_cmpint (atomic_load (&b.job_done), ==, 1);
  g_thread_join (stop);
  g_thread_join (shut);
  g_assert_false (weft_engine_is_running (b.engine));
  weft_engine_unref (b.engine);
  g_main_context_unref (mc);
}

/* ---- /gmain/two-shutdowns ----------------------------------------------- */

static void
bridge_slow_job (gpointer data)
{
  g_usleep (200 * 1000);
}

static gpointer
bridge_shutdown_thread (gpointer data)
{
  return GINT_TO_POINTER (weft_engine_shutdown (data, 10 * G_USEC_PER_SEC));
}

static void
test_two_shutdowns (void)
{
  g_test_summary ("Two weft_engine_shutdown() calls at once on a bridged engine nobody "
                  "iterates both answer TRUE once the queued job ran: the second waits for "
                  "the first's stop and answers for it (it said FALSE, since a bridge's "
                  "drain leaves its one worker counted awake)");
  GMainContext *mc = g_main_context_new ();
  GError *error = NULL;
  WeftEngine *engine = weft_engine_new_for_main_context (mc, &error);
  g_assert_no_error (error);
  g_assert_true (weft_engine_post (engine, bridge_slow_job, NULL, NULL));
  GThread *first = g_thread_new ("first", bridge_shutdown_thread, engine);
  g_usleep (50 * 1000); /* the first is draining */
  GThread *second = g_thread_new ("second", bridge_shutdown_thread, engine);
  g_assert_true (GPOINTER_TO_INT (g_thread_join (first)));
  g_assert_true (GPOINTER_TO_INT (g_thread_join (second)));
  weft_engine_unref (engine);
  g_main_context_unref (mc);
}

/* ---- /gmain/restart-while-iterating --------------------------------------- */

typedef struct {
  GMainContext *mc;
  atomic_int quit;
  atomic_int pause;   /* asked: stop iterating until cleared */
  atomic_int paused;  /* out of GLib, waiting for pause to clear */
} Iterator;

/* Iterates, and steps out of GLib on request (a wake-up ends its blocking
 * iteration): the
 * stopping thread destroys the bridge's source only while this one is out
 * (GLib's own lists, which both would touch under its GMutex, are not
 * visible to TSan); the start, the step under test, runs while it
 * iterates. */
static gpointer
iterator_thread (gpointer data)
{
  Iterator *it = data;
  while (!atomic_load (&it->quit))
    {
      if (atomic_load (&it->pause))
        {
          atomic_store (&it->paused, 1);
          while (atomic_load (&it->pause) && !atomic_load (&it->quit))
            sched_yield ();
          atomic_store (&it->paused, 0);
          continue;
        }
      /* Blocking: with no source attached it sleeps in the poll, and the
       * attach of a restart wakes it into the new source at once. */
      g_main_context_iteration (it->mc, TRUE);
    }
  return NULL;
}

static void
gm_set_flag_job (gpointer data)
{
  atomic_store ((atomic_int *) data, 1);
}

static gboolean
never_read (gint fd, GIOCondition condition, gpointer data)
{
  return G_SOURCE_CONTINUE; /* stays readable: so does the engine's epoll fd */
}

static void
test_restart_while_iterating (void)
{
  g_test_summary ("A bridged engine stopped and started again 300 times while another thread "
                  "iterates its GMainContext, its epoll fd always readable: each start's new "
                  "source runs the engine's work on that thread. (A source dispatched "
                  "between its attach and its engine's publication crashed on a NULL engine; "
                  "that window is gone by construction, and this test hits it only by luck)");
  Iterator it = { g_main_context_new () };
  GError *error = NULL;
  WeftEngine *engine = weft_engine_new_for_main_context (it.mc, &error);
  g_assert_no_error (error);
  int p[2];
  wt_pipe (p);
  wt_write_byte (p[1]);
  WeftContext *ctx = weft_context_new (engine);
  g_assert_cmpuint (weft_context_add_fd (ctx, p[0], G_IO_IN, never_read, NULL, NULL, &error), !=,
                    0);
  g_assert_no_error (error);
  weft_context_dispatch (ctx);
  GThread *t = g_thread_new ("iterate", iterator_thread, &it);
  for (int i = 0; i < 300; i++)
    {
      atomic_store (&it.pause, 1);
      g_main_context_wakeup (it.mc);
      WT_WAIT_UNTIL (atomic_load (&it.paused));
      weft_engine_stop (engine);
      atomic_store (&it.pause, 0);
      WT_WAIT_UNTIL (!atomic_load (&it.paused));
      g_usleep (100); /* back in its poll */
      g_assert_true (weft_engine_start (engine, &error)); /* while it iterates */
      g_assert_no_error (error);
      atomic_int ran = 0;
      g_assert_true (weft_engine_post (engine, gm_set_flag_job, &ran, NULL));
      WT_WAIT_UNTIL (atomic_load (&ran));
      g_assert_cmpint (atomic_load (&ran), ==, 1);
    }
  atomic_store (&it.pause, 1);
  g_main_context_wakeup (it.mc);
  WT_WAIT_UNTIL (atomic_load (&it.paused));
  weft_engine_stop (engine);
  atomic_store (&it.quit, 1);
  g_thread_join (t);
  weft_context_destroy (ctx);
  weft_context_unref (ctx);
  weft_engine_unref (engine);
  g_main_context_unref (it.mc);
  wt_close (p[0]);
  wt_close (p[1]);
}

/* ---- /gmain/http-answer-from-nested-loop --------------------------------- */

/* A handler on an engine run by a GMainContext waits in a nested loop (a
 * modal dialog) while a context bound to the same GMainContext, of another
 * engine, answers its request. That callback runs on the handler's thread
 * but not on the connection's context: the answer wrote to the connection
 * from there (a critical, and the client got nothing); it must post. */
typedef struct {
  WeftContext *ui;
  atomic_int answered;
  guint16 port;
  GByteArray *got;
  atomic_int client_done;
} Modal;

static Modal *modal;

static void
modal_answer_job (gpointer data)
{
  weft_http_request_respond (data, 200, "text/plain", (const guint8 *) "answer\n", 7);
  atomic_store (&modal->answered, 1);
}

static void
modal_handler (WeftHttpServer *server, WeftHttpRequest *req, gpointer user_data)
{
  Modal *m = user_data;
  g_assert_true (weft_context_post (m->ui, modal_answer_job, weft_http_request_ref (req),
                                    (GDestroyNotify) weft_http_request_unref));
  /* The dialog: iterates until the answer was made, and a little more. */
  gint64 end = g_get_monotonic_time () + WT_DEADLINE_US;
  while (!atomic_load (&m->answered) && g_get_monotonic_time () < end)
    g_main_context_iteration (g_main_context_get_thread_default (), TRUE);
  g_assert_cmpint (atomic_load (&m->answered), ==, 1);
}

static gpointer
modal_client (gpointer data)
{
  Modal *m = data;
  int fd = wt_connect_tcp (m->port);
  wt_send_str (fd, "GET /modal HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
  m->got = wt_recv_to_eof (fd, FALSE, NULL);
  close (fd);
  atomic_store (&m->client_done, 1);
  g_main_context_wakeup (NULL);
  return NULL;
}

static void
test_http_answer_from_nested_loop (void)
{
  GError *error = NULL;
  GMainContext *mc = g_main_context_new ();
  g_main_context_push_thread_default (mc);
  WeftEngine *engine = weft_engine_new_for_main_context (mc, &error);
  g_assert_no_error (error);
  WeftEngine *other = wt_engine_new (1);
  Modal m = { 0 };
  modal = &m;
  m.ui = weft_context_new_for_main_context (other, mc);
  weft_context_dispatch (m.ui);
  WeftHttpServer *server = weft_http_server_new (engine);
  weft_http_server_add_handler (server, "GET", "/modal", modal_handler, &m, NULL);
  WeftListener *l = weft_http_server_get_listener (server);
  g_assert_true (weft_listener_add_tcp (l, "127.0.0.1", 0, &error));
  g_assert_no_error (error);
  m.port = weft_listener_get_port (l, 0);
  g_assert_true (weft_http_server_start (server, &error));
  g_assert_no_error (error);

  GThread *client = g_thread_new ("client", modal_client, &m);
  gint64 end = g_get_monotonic_time () + WT_DEADLINE_US;
  while (!atomic_load (&m.client_done) && g_get_monotonic_time () < end)
    g_main_context_iteration (mc, FALSE), g_usleep (1000);
  g_thread_join (client);
  g_byte_array_append (m.got, (const guint8 *) "", 1);
  const char *text = (const char *) m.got->data;
  if (!g_str_has_prefix (text, "HTTP/1.1 200 "))
    g_error ("the nested loop's answer did not come:\n%s", text);
  g_assert_true (g_str_has_suffix (text, "\r\n\r\nanswer\n"));
  g_byte_array_unref (m.got);

  weft_http_server_unref (server);
  weft_context_unref (m.ui);
  weft_engine_unref (other);
  weft_engine_unref (engine);
  /* What the engines and the context left to the GMainContext. */
  while (g_main_context_iteration (mc, FALSE))
    ;
  g_main_context_pop_thread_default (mc);
  g_main_context_unref (mc);
  modal = NULL;
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  main_thread = pthread_self ();
  g_test_add_func ("/gmain/engine-on-main-context", test_engine_on_main_context);
  g_test_add_func ("/gmain/engine-stop-start", test_engine_stop_start);
  g_test_add_func ("/gmain/http-server-on-bridge", test_http_server_on_bridge);
  g_test_add_func ("/gmain/context-on-main-context", test_context_on_main_context);
  g_test_add_func ("/gmain/post-to-main-context", test_post_to_main_context);
  g_test_add_func ("/gmain/shutdown-with-queued", test_shutdown_with_queued);
  g_test_add_func ("/gmain/engine-shutdown-runs-queued", test_engine_shutdown_runs_queued);
  g_test_add_func ("/gmain/context-outlives-main-context", test_context_outlives_main_context);
  g_test_add_func ("/gmain/bound-queue-outlives-push", test_bound_queue_outlives_push);
  g_test_add_func ("/gmain/stop-during-shutdown-drain", test_stop_during_shutdown_drain);
  g_test_add_func ("/gmain/two-shutdowns", test_two_shutdowns);
  g_test_add_func ("/gmain/restart-while-iterating", test_restart_while_iterating);
  g_test_add_func ("/gmain/http-answer-from-nested-loop", test_http_answer_from_nested_loop);
  return g_test_run ();
}
