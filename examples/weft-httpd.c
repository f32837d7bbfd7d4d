/* weft-httpd.c: a small web server on Weft: serves a directory (by
 * default docs/ of the current directory) with a JSON status page.
 *
 * Usage: weft-httpd [--listen ADDR] [--root DIR] [--workers N]
 *                   [--cert FILE --key FILE] [--max-body BYTES]
 *                   [--max-connections N] [--header-timeout-ms MS]
 *                   [--keepalive-timeout-ms MS] [--access-log FILE|-]
 *                   [--user NAME [--group NAME]]
 * Defaults: 127.0.0.1:8080, docs, one worker per CPU. With --cert and
 * --key the server speaks HTTPS (ALPN http/1.1). Started as root with
 * --user, it binds, loads the key and opens the log as root, then runs as
 * that user (and its primary group, or --group) before it accepts; any
 * step that fails exits 1. GET /_weft/status answers
 * the engine's and the server's counters as JSON (weft_http_server_get_
 * status_json()); GET /_weft/events streams them once a second as
 * server-sent events. SIGINT, SIGTERM or SIGHUP stops accepting, lets
 * requests in flight finish (5 s at most) and exits 0; a second one
 * during those 5 s cuts them off at once.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <weft.h>

#include <errno.h>
#include <grp.h>
#include <poll.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <unistd.h>

static WeftEngine *engine;

static void
status (WeftHttpServer *server, WeftHttpRequest *request, gpointer user_data)
{
  gchar *json = weft_http_server_get_status_json (server);
  weft_http_request_add_response_header (request, "Cache-Control", "no-store");
  weft_http_request_respond (request, 200, "application/json", (const guint8 *) json,
                             strlen (json));
  g_free (json);
}

/* /_weft/events: the status as server-sent events, one a second, from a
 * timer on the connection's own context, until the client goes away. */
typedef struct {
  WeftHttpServer *server;
  WeftHttpRequest *request;
} Events;

static gboolean
send_event (gpointer data)
{
  Events *ev = data;
  gchar *json = weft_http_server_get_status_json (ev->server);
  g_strdelimit (json, "\n", ' ');
  gchar *event = g_strdup_printf ("event: status\ndata: %s\n\n", json);
  gboolean sent = weft_http_request_write (ev->request, (const guint8 *) event, strlen (event));
  g_free (event);
  g_free (json);
  return sent ? G_SOURCE_CONTINUE : G_SOURCE_REMOVE;
}

static void
events_free (gpointer data)
{
  Events *ev = data;
  weft_http_request_unref (ev->request);
  g_free (ev);
}

static void
events (WeftHttpServer *server, WeftHttpRequest *request, gpointer user_data)
{
  weft_http_request_add_response_header (request, "Cache-Control", "no-store");
  weft_http_request_respond_stream (request, 200, "text/event-stream", NULL, NULL, NULL);
  Events *ev = g_new (Events, 1);
  ev->server = server;
  ev->request = weft_http_request_ref (request);
  send_event (ev);
  weft_context_add_timeout (weft_context_get_current (), 1000, send_event, ev, events_free);
}

static int done_pipe[2];

static void
on_drained (WeftListener *listener, gboolean drained, gpointer user_data)
{
  char c = drained ? 'y' : 'n';
  if (write (done_pipe[1], &c, 1) < 0)
    perror ("weft-httpd: write");
}

/* --user: the ids to become, looked up before anything is set up, so
 * that a name that does not exist fails before a port is bound. */
typedef struct {
  gchar *name;
  uid_t uid;
  gid_t gid;
} Identity;

/* getpwnam(3): these errno values also mean only "not found" (NSS
 * modules set them). */
static gboolean
not_found (int err)
{
  return err == 0 || err == ENOENT || err == ESRCH || err == EBADF || err == EPERM;
}

static gboolean
lookup_identity (const gchar *user, const gchar *group, Identity *id)
{
  errno = 0;
  struct passwd *pw = getpwnam (user); /* one thread yet: the static buffer is fine */
  if (pw == NULL)
    {
      g_printerr ("weft-httpd: --user %s: %s\n", user,
                  not_found (errno) ? "no such user" : g_strerror (errno));
      return FALSE;
    }
  id->name = g_strdup (pw->pw_name);
  id->uid = pw->pw_uid;
  id->gid = pw->pw_gid;
  if (group != NULL)
    {
      errno = 0;
      struct group *gr = getgrnam (group);
      if (gr == NULL)
        {
          g_printerr ("weft-httpd: --group %s: %s\n", group,
                      not_found (errno) ? "no such group" : g_strerror (errno));
          return FALSE;
        }
      id->gid = gr->gr_gid;
    }
  if (id->uid == 0 || id->gid == 0)
    {
      g_printerr ("weft-httpd: --user %s%s%s: refusing to run as root (uid or gid 0)\n", user,
                  group != NULL ? " --group " : "", group != NULL ? group : "");
      return FALSE;
    }
  return TRUE;
}

static gboolean
ids_are (uid_t uid, gid_t gid)
{
  uid_t ru, eu, su;
  gid_t rg, eg, sg;
  return getresuid (&ru, &eu, &su) == 0 && getresgid (&rg, &eg, &sg) == 0 && ru == uid &&
         eu == uid && su == uid && rg == gid && eg == gid && sg == gid;
}

/* Becomes @id for good, once the sockets are bound, the TLS key loaded and
 * the access log open, and before accepting: no request is ever handled as
 * root. Groups first, while still root. The engine's workers already run:
 * glibc's setgroups, setgid and setuid change the credentials of every
 * thread of the process (POSIX semantics, which the kernel's per-thread
 * calls alone would not give), so none of them stays root. */
static gboolean
drop_privileges (const Identity *id, const gchar *root)
{
  if (geteuid () != 0)
    {
      /* Only root may change user: naming ourselves is a no-op. */
      if (!ids_are (id->uid, id->gid))
        {
          g_printerr ("weft-httpd: --user %s: not running as root (uid %u, gid %u), cannot "
                      "switch to uid %u, gid %u\n",
                      id->name, (guint) geteuid (), (guint) getegid (), (guint) id->uid,
                      (guint) id->gid);
          return FALSE;
        }
    }
  else
    {
      if (initgroups (id->name, id->gid) != 0)
        {
          g_printerr ("weft-httpd: --user %s: initgroups: %s\n", id->name, g_strerror (errno));
          return FALSE;
        }
      if (setgid (id->gid) != 0)
        {
          g_printerr ("weft-httpd: --user %s: setgid %u: %s\n", id->name, (guint) id->gid,
                      g_strerror (errno));
          return FALSE;
        }
      if (setuid (id->uid) != 0)
        {
          g_printerr ("weft-httpd: --user %s: setuid %u: %s\n", id->name, (guint) id->uid,
                      g_strerror (errno));
          return FALSE;
        }
      /* Trust but verify: a saved uid of 0 or a capability left over
       * would let the process back. */
      if (setuid (0) == 0 || seteuid (0) == 0)
        {
          g_printerr ("weft-httpd: --user %s: could become root again after setuid\n", id->name);
          return FALSE;
        }
      if (!ids_are (id->uid, id->gid))
        {
          g_printerr ("weft-httpd: --user %s: ids are not uid %u, gid %u after the switch\n",
                      id->name, (guint) id->uid, (guint) id->gid);
          return FALSE;
        }
      /* initgroups may add group 0 (the user listed in it): refused, as a
       * primary gid 0 is. */
      int n = getgroups (0, NULL);
      gid_t *groups = g_new (gid_t, MAX (n, 1));
      if (n >= 0)
        n = getgroups (n, groups);
      int err = errno;
      gboolean root_group = FALSE;
      for (int i = 0; i < n; i++)
        root_group |= groups[i] == 0;
      g_free (groups);
      if (n < 0 || root_group)
        {
          g_printerr ("weft-httpd: --user %s: %s\n", id->name,
                      n < 0 ? g_strerror (err) : "a member of group 0: refusing to run so");
          return FALSE;
        }
    }
  /* As root any directory could be read; now the usual rules apply (and
   * the static handler no longer limits itself to world-readable files).
   * The root's index is opened as a directory: reading it needs r. */
  if (access (root, R_OK | X_OK) != 0)
    {
      g_printerr ("weft-httpd: --user %s cannot read and search %s: %s\n", id->name, root,
                  g_strerror (errno));
      return FALSE;
    }
  return TRUE;
}

int
main (int argc, char **argv)
{
  gchar *listen = NULL, *root = NULL, *cert = NULL, *key = NULL;
  gchar *access_log = NULL, *user = NULL, *group = NULL;
  /* G_MININT: the timeout flags not given (the library's default); so
   * G_MININT64 for --max-body, where 0 is a limit too (no body). */
  gint workers = 0, max_conns = 0, header_timeout = G_MININT, keepalive = G_MININT;
  gint64 max_body = G_MININT64;
  GOptionEntry entries[] = {
    { "listen", 'l', 0, G_OPTION_ARG_STRING, &listen,
      "Address: host:port, [v6]:port or unix:/path (127.0.0.1:8080)", "ADDR" },
    { "root", 'r', 0, G_OPTION_ARG_FILENAME, &root, "Directory to serve (docs)", "DIR" },
    { "workers", 'w', 0, G_OPTION_ARG_INT, &workers, "Worker threads (0: one per CPU)", "N" },
    { "cert", 0, 0, G_OPTION_ARG_FILENAME, &cert, "PEM certificate chain: serve HTTPS", "FILE" },
    { "key", 0, 0, G_OPTION_ARG_FILENAME, &key, "PEM private key for --cert", "FILE" },
    { "max-body", 0, 0, G_OPTION_ARG_INT64, &max_body, "Largest request body, 0 for none (8 MiB)", "BYTES" },
    { "max-connections", 'm', 0, G_OPTION_ARG_INT, &max_conns,
      "Pause accepting at this many connections (0: the default, 16384)", "N" },
    { "header-timeout-ms", 0, 0, G_OPTION_ARG_INT, &header_timeout,
      "Time a request head may take, 0 for none (20000)", "MS" },
    { "keepalive-timeout-ms", 0, 0, G_OPTION_ARG_INT, &keepalive,
      "Time an idle connection is kept, 0 for ever (30000)", "MS" },
    /* The names before they matched bench-server's. */
    { "header-timeout", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_INT, &header_timeout, NULL, "MS" },
    { "keepalive-timeout", 0, G_OPTION_FLAG_HIDDEN, G_OPTION_ARG_INT, &keepalive, NULL, "MS" },
    { "access-log", 0, 0, G_OPTION_ARG_FILENAME, &access_log,
      "Log each request to FILE (- for standard error)", "FILE" },
    { "user", 'u', 0, G_OPTION_ARG_STRING, &user,
      "Switch to user NAME once the port is bound, the key read and the log open", "NAME" },
    { "group", 'g', 0, G_OPTION_ARG_STRING, &group,
      "Group for --user (default: the user's primary group)", "NAME" },
    { NULL }
  };
  /* Every exit after this goes through out: (frees all, so that a run
   * under LeakSanitizer exits with our status, not its own). */
  int ret = 1;
  GError *error = NULL;
  Identity id = { NULL };
  WeftHttpServer *server = NULL;
  WeftTlsConfig *tls = NULL;
  GOptionContext *opts = g_option_context_new ("- serve a directory over HTTP/1.1");
  g_option_context_add_main_entries (opts, entries, NULL);
  if (!g_option_context_parse (opts, &argc, &argv, &error))
    {
      ret = 2;
      goto out;
    }
  if (argc > 1)
    {
      /* Not a directory to serve: that is --root, and "weft-httpd DIR"
       * must not quietly serve docs/ instead. */
      g_printerr ("weft-httpd: unexpected argument %s (the directory to serve is --root DIR)\n",
                  argv[1]);
      ret = 2;
      goto out;
    }
  if ((cert == NULL) != (key == NULL))
    {
      g_printerr ("weft-httpd: --cert and --key go together\n");
      ret = 2;
      goto out;
    }
  /* 4096: the most weft_engine_new() takes. */
  if (workers < 0 || workers > 4096 || max_conns < 0 || (max_body < 0 && max_body != G_MININT64) ||
      (header_timeout < 0 && header_timeout != G_MININT) || (keepalive < 0 && keepalive != G_MININT))
    {
      g_printerr ("weft-httpd: --workers takes 0 to 4096; counts, sizes and timeouts must not be "
                  "negative\n");
      ret = 2;
      goto out;
    }
  if (group != NULL && user == NULL)
    {
      g_printerr ("weft-httpd: --group needs --user\n");
      ret = 2;
      goto out;
    }
  if (user != NULL && !lookup_identity (user, group, &id))
    goto out;
  if (user == NULL && geteuid () == 0)
    g_printerr ("weft-httpd: warning: running as root; --user NAME drops root once the port is bound\n");

  sigset_t set;
  sigemptyset (&set);
  sigaddset (&set, SIGINT);
  sigaddset (&set, SIGTERM);
  sigaddset (&set, SIGHUP); /* a closed terminal: stop as cleanly (a unix: socket is removed) */
  pthread_sigmask (SIG_BLOCK, &set, NULL);
  signal (SIGPIPE, SIG_IGN);
  if (pipe (done_pipe) != 0)
    {
      perror ("weft-httpd: pipe");
      goto out;
    }

  engine = weft_engine_new ((guint) workers, &error);
  if (engine == NULL)
    goto out;
  server = weft_http_server_new (engine);
  WeftListener *listener = weft_http_server_get_listener (server);
  if (max_body != G_MININT64)
    weft_http_server_set_max_body (server, (guint64) max_body);
  if (max_conns > 0)
    weft_http_server_set_limit (server, WEFT_HTTP_LIMIT_MAX_CONNECTIONS, (guint64) max_conns);
  if (header_timeout != G_MININT)
    weft_http_server_set_limit (server, WEFT_HTTP_LIMIT_HEADER_TIMEOUT_MS, (guint64) header_timeout);
  if (keepalive != G_MININT)
    weft_http_server_set_limit (server, WEFT_HTTP_LIMIT_KEEPALIVE_TIMEOUT_MS, (guint64) keepalive);
  if (access_log != NULL && !weft_http_server_set_access_log (server, access_log, &error))
    goto out;
  weft_http_server_add_handler (server, "GET", "/_weft/status", status, NULL, NULL);
  weft_http_server_add_handler (server, "GET", "/_weft/events", events, NULL, NULL);
  if (!weft_http_server_add_directory (server, "/", root != NULL ? root : "docs", &error))
    goto out;
  if (cert != NULL)
    {
      const gchar *alpn[] = { "http/1.1", NULL };
      tls = weft_tls_config_new_server (&error);
      if (tls == NULL || !weft_tls_config_set_certificate_files (tls, cert, key, &error) ||
          !weft_tls_config_set_alpn_protocols (tls, alpn, &error))
        goto out;
      weft_listener_set_tls (listener, tls);
    }
  if (!weft_listener_add_address (listener, listen != NULL ? listen : "127.0.0.1:8080", &error))
    goto out;
  if (user != NULL && !drop_privileges (&id, root != NULL ? root : "docs"))
    goto out;
  /* Started as another user than root, the same check as after --user:
   * a root it cannot search was served, 403 to every request. */
  if (user == NULL && geteuid () != 0 && access (root != NULL ? root : "docs", R_OK | X_OK) != 0)
    {
      g_printerr ("weft-httpd: cannot read and search %s: %s\n", root != NULL ? root : "docs",
                  g_strerror (errno));
      goto out;
    }
  if (!weft_http_server_start (server, &error))
    goto out;
  /* A port only for TCP: a unix: socket has none. */
  guint16 port = weft_listener_get_port (listener, 0);
  gchar *port_note = port != 0 ? g_strdup_printf ("port %u; ", port) : g_strdup ("");
  printf ("weft-httpd: serving %s on %s (%sstatus: /_weft/status; Ctrl-C stops)\n",
          root != NULL ? root : "docs", listen != NULL ? listen : "127.0.0.1:8080", port_note);
  g_free (port_note);
  fflush (stdout);

  int sig = 0;
  sigwait (&set, &sig);
  weft_http_server_shutdown (server, 5000, on_drained, NULL, NULL);
  /* Until the drain ends, or a second signal says not to wait for it. */
  char c = '?';
  for (;;)
    {
      struct pollfd pfd = { done_pipe[0], POLLIN, 0 };
      if (poll (&pfd, 1, 50) > 0)
        {
          if (read (done_pipe[0], &c, 1) != 1)
            c = '?';
          break;
        }
      struct timespec now = { 0, 0 };
      if (sigtimedwait (&set, NULL, &now) > 0)
        {
          c = 's';
          break;
        }
    }
  printf ("weft-httpd: stopped (%s)\n", c == 'y'   ? "all requests finished"
                                       : c == 's' ? "cut off by a second signal"
                                                  : "some cut off");
  ret = 0;

out:
  if (error != NULL)
    {
      g_printerr ("weft-httpd: %s\n", error->message);
      g_error_free (error);
    }
  g_clear_pointer (&tls, weft_tls_config_unref);
  g_clear_pointer (&server, weft_http_server_unref);
  g_clear_pointer (&engine, weft_engine_unref);
  g_option_context_free (opts);
  g_free (listen);
  g_free (root);
  g_free (cert);
  g_free (key);
  g_free (access_log);
  g_free (user);
  g_free (group);
  g_free (id.name);
  return ret;
}
