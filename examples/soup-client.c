/* soup-client.c: a libsoup 3 client (SoupSession) fetching from a Weft
 * server such as weft-httpd, over HTTP or HTTPS, the way a GNOME
 * application talks to one. libsoup is used by this example only.
 *
 * Usage: soup-client [--ca-file FILE] [--repeat N] [--body] URL...
 * Fetches each URL N times on one session (so keep-alive connections are
 * reused) and prints "STATUS BYTES CONTENT-TYPE URL" per answer, and the
 * body with --body. --ca-file trusts the certificates in FILE (a
 * self-signed server) instead of the system's. Exit status 0 if every
 * answer was 2xx or 3xx.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include <libsoup/soup.h>
#include <stdio.h>

int
main (int argc, char **argv)
{
  gchar *ca_file = NULL;
  gint repeat = 1;
  gboolean show_body = FALSE;
  gchar **urls = NULL;
  GOptionEntry entries[] = {
    { "ca-file", 0, 0, G_OPTION_ARG_FILENAME, &ca_file, "Trust the CA certificates in FILE",
      "FILE" },
    { "repeat", 'n', 0, G_OPTION_ARG_INT, &repeat, "Fetch each URL N times", "N" },
    { "body", 'b', 0, G_OPTION_ARG_NONE, &show_body, "Print the bodies", NULL },
    { G_OPTION_REMAINING, 0, 0, G_OPTION_ARG_STRING_ARRAY, &urls, NULL, "URL..." },
    { NULL }
  };
  GError *error = NULL;
  GOptionContext *octx = g_option_context_new ("URL... - fetch from a Weft server with libsoup");
  g_option_context_add_main_entries (octx, entries, NULL);
  if (!g_option_context_parse (octx, &argc, &argv, &error) || urls == NULL || repeat < 1)
    {
      g_printerr ("soup-client: %s\n", error != NULL ? error->message : "give at least one URL");
      return 2;
    }
  g_option_context_free (octx);

  SoupSession *session = soup_session_new_with_options ("timeout", 10, NULL);
  if (ca_file != NULL)
    {
      /* GIO wants the anchor file as an absolute path. */
      gchar *abs = g_canonicalize_filename (ca_file, NULL);
      GTlsDatabase *db = g_tls_file_database_new (abs, &error);
      g_free (abs);
      if (db == NULL)
        {
          g_printerr ("soup-client: %s\n", error->message);
          return 2;
        }
      soup_session_set_tls_database (session, db);
      g_object_unref (db);
    }

  int status = 0;
  for (gchar **u = urls; *u != NULL; u++)
    for (gint i = 0; i < repeat; i++)
      {
        SoupMessage *msg = soup_message_new (SOUP_METHOD_GET, *u);
        if (msg == NULL)
          {
            g_printerr ("soup-client: not a URL: %s\n", *u);
            return 2;
          }
        GBytes *body = soup_session_send_and_read (session, msg, NULL, &error);
        if (body == NULL)
          {
            g_printerr ("soup-client: %s: %s\n", *u, error->message);
            g_clear_error (&error);
            status = 1;
          }
        else
          {
            guint code = soup_message_get_status (msg);
            const char *type = soup_message_headers_get_content_type (
                soup_message_get_response_headers (msg), NULL);
            printf ("%u %" G_GSIZE_FORMAT " %s %s\n", code, g_bytes_get_size (body),
                    type != NULL ? type : "-", *u);
            if (show_body)
              fwrite (g_bytes_get_data (body, NULL), 1, g_bytes_get_size (body), stdout);
            if (code < 200 || code >= 400)
              status = 1;
            g_bytes_unref (body);
          }
        g_object_unref (msg);
      }
  g_object_unref (session);
  g_strfreev (urls);
  g_free (ca_file);
  return status;
}
