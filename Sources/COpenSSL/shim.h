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

/* STACK_OF(X509): the chain certificates of a PKCS#12 bundle. */
static inline int pushd_openssl_x509_stack_count(const STACK_OF(X509) *s) { return sk_X509_num(s); }
static inline X509 *pushd_openssl_x509_stack_at(const STACK_OF(X509) *s, int i) { return sk_X509_value(s, i); }
static inline void pushd_openssl_x509_stack_free(STACK_OF(X509) *s) { sk_X509_pop_free(s, X509_free); }

static inline int pushd_openssl_nid_prime256v1(void) { return NID_X9_62_prime256v1; }
static inline int pushd_openssl_pkey_ec(void) { return EVP_PKEY_EC; }

static inline long pushd_openssl_ssl_ctx_set_min_tls12(SSL_CTX *ctx) { return SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION); }
static inline long pushd_openssl_ssl_set_host_name(SSL *ssl, const char *name) { return SSL_set_tlsext_host_name(ssl, name); }
static inline uint64_t pushd_openssl_ssl_ctx_set_options(SSL_CTX *ctx, uint64_t opts) { return SSL_CTX_set_options(ctx, opts); }
static inline uint64_t pushd_openssl_op_no_compression(void) { return SSL_OP_NO_COMPRESSION; }
static inline uint64_t pushd_openssl_op_no_renegotiation(void) { return SSL_OP_NO_RENEGOTIATION; }
static inline int pushd_openssl_verify_peer_fail_if_none(void) { return SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT; }
static inline int pushd_openssl_verify_peer(void) { return SSL_VERIFY_PEER; }
static inline int pushd_openssl_tlsext_err_ok(void) { return SSL_TLSEXT_ERR_OK; }
static inline int pushd_openssl_tlsext_err_noack(void) { return SSL_TLSEXT_ERR_NOACK; }

/* apns-mock server side. */
static inline long pushd_openssl_ssl_ctx_set_mode_nonblocking_writes(SSL_CTX *ctx) {
    return SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
}
static inline long pushd_openssl_ssl_ctx_set_session_cache_server(SSL_CTX *ctx) { return SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_SERVER); }
static inline long pushd_openssl_ssl_ctx_set_read_ahead(SSL_CTX *ctx) { return SSL_CTX_set_read_ahead(ctx, 1); }
static inline long pushd_openssl_ssl_ctx_set_max_tls12(SSL_CTX *ctx) { return SSL_CTX_set_max_proto_version(ctx, TLS1_2_VERSION); }
/* The SSL whose handshake a certificate verification callback runs in. */
static inline SSL *pushd_openssl_ssl_of_store(X509_STORE_CTX *store) {
    return (SSL *)X509_STORE_CTX_get_ex_data(store, SSL_get_ex_data_X509_STORE_CTX_idx());
}


#endif
