/* What the engine learns of a TLS handshake that libcurl runs with OpenSSL: the messages
 * the client writes, through OpenSSL's message callback on the SSL_CTX libcurl hands to
 * CURLOPT_SSL_CTX_FUNCTION. Pointers are untyped so that this header needs no OpenSSL
 * header and clashes with no module that has one. Every symbol is prefixed pushd_tls_. */
#ifndef PUSHD_CTLSWATCH_H
#define PUSHD_CTLSWATCH_H

#include <stddef.h>

/* OpenSSL's SSL_CTX_set_msg_callback callback, with the SSL untyped. */
typedef void (*pushd_tls_message_cb)(int write_p, int version, int content_type, const void *buf, size_t len,
                                     void *ssl, void *arg);

/* Calls cb with arg for every protocol message of the connections made from ssl_ctx. */
void pushd_tls_watch_messages(void *ssl_ctx, pushd_tls_message_cb cb, void *arg);
/* Stops the message callback of one connection (from inside the callback too). */
void pushd_tls_stop_watching(void *ssl);

/* RFC 8446 / 5246 numbers the callback compares. */
enum {
    pushd_tls_content_handshake = 22,
    pushd_tls_handshake_certificate = 11,
    pushd_tls_handshake_finished = 20,
};

#endif
