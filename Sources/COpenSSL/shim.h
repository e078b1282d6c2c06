/* Typed wrappers for OpenSSL macros and defines that Swift cannot import.
 * Every symbol is prefixed pushd_openssl_. */
#ifndef PUSHD_COPENSSL_SHIM_H
#define PUSHD_COPENSSL_SHIM_H

#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/crypto.h>
#include <openssl/ec.h>
#include <openssl/ecdsa.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/obj_mac.h>
#include <openssl/opensslv.h>
#include <openssl/pem.h>
#include <openssl/pkcs12.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

/* Must run before curl_global_init and before any other OpenSSL call: without
 * NO_ATEXIT, OpenSSL's exit handler races libcurl's own clean-up at exit. */
static inline int pushd_openssl_init(void) {
    return OPENSSL_init_ssl(OPENSSL_INIT_NO_ATEXIT | OPENSSL_INIT_LOAD_SSL_STRINGS | OPENSSL_INIT_LOAD_CRYPTO_STRINGS, NULL);
}

static inline const char *pushd_openssl_version_string(void) { return OpenSSL_version(OPENSSL_VERSION); }
static inline unsigned long pushd_openssl_version_number(void) { return OpenSSL_version_num(); }

static inline void pushd_openssl_free(void *p) { OPENSSL_free(p); }
static inline long pushd_openssl_bio_get_mem_data(BIO *b, char **out) { return BIO_get_mem_data(b, out); }

static inline int pushd_openssl_nid_prime256v1(void) { return NID_X9_62_prime256v1; }
static inline int pushd_openssl_pkey_ec(void) { return EVP_PKEY_EC; }

static inline long pushd_openssl_ssl_ctx_set_min_tls12(SSL_CTX *ctx) { return SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION); }
static inline long pushd_openssl_ssl_set_host_name(SSL *ssl, const char *name) { return SSL_set_tlsext_host_name(ssl, name); }
static inline uint64_t pushd_openssl_ssl_ctx_set_options(SSL_CTX *ctx, uint64_t opts) { return SSL_CTX_set_options(ctx, opts); }
static inline uint64_t pushd_openssl_op_no_compression(void) { return SSL_OP_NO_COMPRESSION; }
static inline uint64_t pushd_openssl_op_no_renegotiation(void) { return SSL_OP_NO_RENEGOTIATION; }
static inline int pushd_openssl_verify_peer_fail_if_none(void) { return SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT; }
static inline int pushd_openssl_tlsext_err_ok(void) { return SSL_TLSEXT_ERR_OK; }
static inline int pushd_openssl_tlsext_err_noack(void) { return SSL_TLSEXT_ERR_NOACK; }

/* apns-mock server side. */
static inline long pushd_openssl_ssl_ctx_set_mode_nonblocking_writes(SSL_CTX *ctx) {
    return SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
}
static inline long pushd_openssl_ssl_ctx_set_session_cache_server(SSL_CTX *ctx) { return SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_SERVER); }

/* TLS I/O on a connection whose SSL object another library (libcurl) owns and is not using
 * at the moment. Its own BIOs may only work inside that library's calls, so for the duration
 * of one operation a socket BIO on the same descriptor stands in for both, and the owner's
 * BIOs are put back afterwards. op: 0 write, 1 peek, 2 read. Returns SSL_write/peek/read's
 * value and the SSL_get_error code in *ssl_error. */
static inline int pushd_openssl_io_on_fd(SSL *ssl, int fd, int op, void *buf, int len, int *ssl_error) {
    BIO *r = SSL_get_rbio(ssl), *w = SSL_get_wbio(ssl);
    if (!r || !w) { *ssl_error = SSL_ERROR_SSL; return -1; }
    BIO *sr = BIO_new_socket(fd, BIO_NOCLOSE);
    BIO *sw = BIO_new_socket(fd, BIO_NOCLOSE);
    if (!sr || !sw) { BIO_free(sr); BIO_free(sw); *ssl_error = SSL_ERROR_SSL; return -1; }
    BIO_up_ref(r);
    BIO_up_ref(w);
    SSL_set0_rbio(ssl, sr);
    SSL_set0_wbio(ssl, sw);
    ERR_clear_error();
    int rc = op == 0 ? SSL_write(ssl, buf, len) : op == 1 ? SSL_peek(ssl, buf, len) : SSL_read(ssl, buf, len);
    *ssl_error = rc > 0 ? SSL_ERROR_NONE : SSL_get_error(ssl, rc);
    ERR_clear_error();
    SSL_set0_rbio(ssl, r);
    SSL_set0_wbio(ssl, w);
    return rc;
}
static inline int pushd_openssl_ssl_error_want_read(void) { return SSL_ERROR_WANT_READ; }
static inline int pushd_openssl_ssl_error_want_write(void) { return SSL_ERROR_WANT_WRITE; }
static inline int pushd_openssl_ssl_error_zero_return(void) { return SSL_ERROR_ZERO_RETURN; }
/* Whether the peer's close_notify has arrived on this connection. */
static inline int pushd_openssl_ssl_received_shutdown(const SSL *ssl) { return (SSL_get_shutdown(ssl) & SSL_RECEIVED_SHUTDOWN) != 0; }
/* An SSL ex_data slot whose free function is told when OpenSSL frees the SSL object. */
typedef void (*pushd_openssl_ex_free_cb)(void *parent, void *ptr, CRYPTO_EX_DATA *ad, int idx, long argl, void *argp);
static inline int pushd_openssl_ssl_ex_index(pushd_openssl_ex_free_cb on_free) { return SSL_get_ex_new_index(0, NULL, NULL, NULL, on_free); }

#endif
