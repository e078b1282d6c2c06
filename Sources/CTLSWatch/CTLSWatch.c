#include "CTLSWatch.h"
#include <openssl/ssl.h>

void pushd_tls_watch_messages(void *ssl_ctx, pushd_tls_message_cb cb, void *arg) {
    SSL_CTX_set_msg_callback((SSL_CTX *)ssl_ctx,
                             (void (*)(int, int, int, const void *, size_t, SSL *, void *))cb);
    SSL_CTX_set_msg_callback_arg((SSL_CTX *)ssl_ctx, arg);
}

void pushd_tls_stop_watching(void *ssl) {
    SSL_set_msg_callback((SSL *)ssl, NULL);
}
