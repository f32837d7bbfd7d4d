/* weft-tls-util.h: test certificates made with OpenSSL's API at test time
 * (a private CA, leaves signed by it, an expired one), written to a
 * temporary directory so command-line clients can use them too.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#pragma once

#include <glib.h>
#include <glib/gstdio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

typedef struct {
  X509 *x509;
  EVP_PKEY *key;
  gchar *cert_pem;
  gchar *key_pem;
  gchar *cert_file;
  gchar *key_file;
} WtCert;

static inline gchar *
wt_bio_string (BIO *bio)
{
  char *data = NULL;
  long n = BIO_get_mem_data (bio, &data);
  gchar *s = g_strndup (data, (gsize) n);
  BIO_free (bio);
  return s;
}

static inline void
wt_add_ext (X509 *x, X509 *issuer, int nid, const char *value)
{
  X509V3_CTX v3;
  X509V3_set_ctx_nodb (&v3);
  X509V3_set_ctx (&v3, issuer, x, NULL, NULL, 0);
  X509_EXTENSION *ext = X509V3_EXT_conf_nid (NULL, &v3, nid, value);
  g_assert_nonnull (ext);
  g_assert_cmpint (X509_add_ext (x, ext, -1), ==, 1);
  X509_EXTENSION_free (ext);
}

/* A P-256 certificate for @cn, valid from now+@from_s to now+@to_s
 * seconds, signed by @issuer (NULL: self-signed). @san: a subjectAltName
 * value such as "DNS:localhost,IP:127.0.0.1", or NULL. Files go to @dir. */
static inline WtCert *
wt_cert_new (const char *dir, const char *cn, const char *san, long from_s, long to_s,
             WtCert *issuer, gboolean is_ca)
{
  WtCert *c = g_new0 (WtCert, 1);
  c->key = EVP_EC_gen ("P-256");
  g_assert_nonnull (c->key);
  c->x509 = X509_new ();
  X509 *x = c->x509;
  X509_set_version (x, 2);
  ASN1_INTEGER_set (X509_get_serialNumber (x), (long) g_random_int_range (1, G_MAXINT32));
  X509_gmtime_adj (X509_getm_notBefore (x), from_s);
  X509_gmtime_adj (X509_getm_notAfter (x), to_s);
  X509_NAME *name = X509_get_subject_name (x);
  X509_NAME_add_entry_by_txt (name, "CN", MBSTRING_ASC, (const unsigned char *) cn, -1, -1, 0);
  X509_set_issuer_name (x, issuer != NULL ? X509_get_subject_name (issuer->x509) : name);
  X509_set_pubkey (x, c->key);
  X509 *signer = issuer != NULL ? issuer->x509 : x;
  wt_add_ext (x, signer, NID_basic_constraints, is_ca ? "critical,CA:TRUE" : "CA:FALSE");
  if (is_ca)
    wt_add_ext (x, signer, NID_key_usage, "critical,keyCertSign,cRLSign");
  wt_add_ext (x, signer, NID_subject_key_identifier, "hash");
  if (issuer != NULL)
    wt_add_ext (x, signer, NID_authority_key_identifier, "keyid");
  if (san != NULL)
    wt_add_ext (x, signer, NID_subject_alt_name, san);
  g_assert_cmpint (X509_sign (x, issuer != NULL ? issuer->key : c->key, EVP_sha256 ()), >, 0);

  BIO *b = BIO_new (BIO_s_mem ());
  PEM_write_bio_X509 (b, x);
  c->cert_pem = wt_bio_string (b);
  b = BIO_new (BIO_s_mem ());
  PEM_write_bio_PrivateKey (b, c->key, NULL, NULL, 0, NULL, NULL);
  c->key_pem = wt_bio_string (b);

  c->cert_file = g_strdup_printf ("%s/%s.crt", dir, cn);
  c->key_file = g_strdup_printf ("%s/%s.key", dir, cn);
  g_assert_true (g_file_set_contents (c->cert_file, c->cert_pem, -1, NULL));
  g_assert_true (g_file_set_contents (c->key_file, c->key_pem, -1, NULL));
  return c;
}

static inline void
wt_cert_free (WtCert *c)
{
  g_unlink (c->cert_file);
  g_unlink (c->key_file);
  X509_free (c->x509);
  EVP_PKEY_free (c->key);
  g_free (c->cert_pem);
  g_free (c->key_pem);
  g_free (c->cert_file);
  g_free (c->key_file);
  g_free (c);
}
