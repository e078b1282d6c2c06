/* Typed wrappers for libcurl's variadic and macro APIs, which Swift cannot import.
 * Every symbol is prefixed pushd_curl_. */
#ifndef PUSHD_CCURL_SHIM_H
#define PUSHD_CCURL_SHIM_H

#include <curl/curl.h>
#include <malloc.h>
#include <stdint.h>

typedef size_t (*pushd_curl_data_cb)(char *data, size_t size, size_t nmemb, void *userdata);
typedef int (*pushd_curl_socket_cb)(CURL *easy, curl_socket_t s, int what, void *userp, void *socketp);
typedef int (*pushd_curl_timer_cb)(CURLM *multi, long timeout_ms, void *userp);

/* curl_easy_setopt */
static inline CURLcode pushd_curl_easy_setopt_long(CURL *h, CURLoption o, long v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode pushd_curl_easy_setopt_off(CURL *h, CURLoption o, curl_off_t v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode pushd_curl_easy_setopt_ptr(CURL *h, CURLoption o, void *v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode pushd_curl_easy_setopt_string(CURL *h, CURLoption o, const char *v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode pushd_curl_easy_setopt_slist(CURL *h, CURLoption o, struct curl_slist *v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode pushd_curl_easy_setopt_url(CURL *h, CURLU *v) { return curl_easy_setopt(h, CURLOPT_CURLU, v); }
static inline CURLcode pushd_curl_easy_setopt_data_cb(CURL *h, CURLoption o, pushd_curl_data_cb v) { return curl_easy_setopt(h, o, v); }
/* A blob option (CURLOPT_SSLCERT_BLOB, CURLOPT_SSLKEY_BLOB): libcurl keeps its own copy. */
static inline CURLcode pushd_curl_easy_setopt_blob(CURL *h, CURLoption o, const void *data, size_t length) {
    struct curl_blob blob = { (void *)data, length, CURL_BLOB_COPY };
    return curl_easy_setopt(h, o, &blob);
}

/* curl_multi_setopt */
static inline CURLMcode pushd_curl_multi_setopt_long(CURLM *m, CURLMoption o, long v) { return curl_multi_setopt(m, o, v); }
static inline CURLMcode pushd_curl_multi_setopt_ptr(CURLM *m, CURLMoption o, void *v) { return curl_multi_setopt(m, o, v); }
static inline CURLMcode pushd_curl_multi_setopt_socket_cb(CURLM *m, pushd_curl_socket_cb v) { return curl_multi_setopt(m, CURLMOPT_SOCKETFUNCTION, v); }
static inline CURLMcode pushd_curl_multi_setopt_timer_cb(CURLM *m, pushd_curl_timer_cb v) { return curl_multi_setopt(m, CURLMOPT_TIMERFUNCTION, v); }

/* curl_easy_getinfo */
static inline CURLcode pushd_curl_easy_getinfo_long(CURL *h, CURLINFO i, long *out) { return curl_easy_getinfo(h, i, out); }
static inline CURLcode pushd_curl_easy_getinfo_off(CURL *h, CURLINFO i, curl_off_t *out) { return curl_easy_getinfo(h, i, out); }
static inline CURLcode pushd_curl_easy_getinfo_double(CURL *h, CURLINFO i, double *out) { return curl_easy_getinfo(h, i, out); }
static inline CURLcode pushd_curl_easy_getinfo_ptr(CURL *h, CURLINFO i, void **out) { return curl_easy_getinfo(h, i, out); }
static inline CURLcode pushd_curl_easy_getinfo_string(CURL *h, CURLINFO i, char **out) { return curl_easy_getinfo(h, i, out); }

/* Macros and constants that do not import cleanly. */
static inline long pushd_curl_global_all(void) { return CURL_GLOBAL_ALL; }
/* glibc's mallopt(M_MMAP_THRESHOLD): libcurl's 16 KiB per-stream buffers (CurlRuntime). */
static inline int pushd_curl_malloc_mmap_threshold(int bytes) { return mallopt(M_MMAP_THRESHOLD, bytes); }
static inline curl_socket_t pushd_curl_socket_timeout(void) { return CURL_SOCKET_TIMEOUT; }
static inline long pushd_curl_http_version_2tls(void) { return CURL_HTTP_VERSION_2TLS; }
static inline long pushd_curl_pipe_multiplex(void) { return CURLPIPE_MULTIPLEX; }
static inline int pushd_curl_poll_in(void) { return CURL_POLL_IN; }
static inline int pushd_curl_poll_out(void) { return CURL_POLL_OUT; }
static inline int pushd_curl_poll_inout(void) { return CURL_POLL_INOUT; }
static inline int pushd_curl_poll_remove(void) { return CURL_POLL_REMOVE; }
static inline int pushd_curl_cselect_in(void) { return CURL_CSELECT_IN; }
static inline int pushd_curl_cselect_out(void) { return CURL_CSELECT_OUT; }
static inline int pushd_curl_cselect_err(void) { return CURL_CSELECT_ERR; }
/* curl_easy_pause(h, CURLPAUSE_CONT) on a transfer that is not paused: libcurl runs it at its next timer action. */
static inline CURLcode pushd_curl_easy_run_soon(CURL *h) { return curl_easy_pause(h, CURLPAUSE_CONT); }

static inline const curl_version_info_data *pushd_curl_version_info(void) { return curl_version_info(CURLVERSION_NOW); }
static inline int pushd_curl_version_has_http2(const curl_version_info_data *v) { return (v->features & CURL_VERSION_HTTP2) != 0; }

/* Dispatcher engine: socket lifecycle callbacks, the multi handle's typed options, and the
 * easy-handle header list built from caller-owned nodes. */
typedef curl_socket_t (*pushd_curl_opensocket_cb)(void *clientp, curlsocktype purpose, struct curl_sockaddr *address);
typedef int (*pushd_curl_closesocket_cb)(void *clientp, curl_socket_t item);
static inline CURLcode pushd_curl_easy_setopt_opensocket_cb(CURL *h, pushd_curl_opensocket_cb v) { return curl_easy_setopt(h, CURLOPT_OPENSOCKETFUNCTION, v); }
static inline CURLcode pushd_curl_easy_setopt_closesocket_cb(CURL *h, pushd_curl_closesocket_cb v) { return curl_easy_setopt(h, CURLOPT_CLOSESOCKETFUNCTION, v); }
static inline curl_socket_t pushd_curl_bad_socket(void) { return CURL_SOCKET_BAD; }
static inline int pushd_curl_sockaddr_family(const struct curl_sockaddr *a) { return a->family; }
static inline int pushd_curl_sockaddr_socktype(const struct curl_sockaddr *a) { return a->socktype; }
static inline int pushd_curl_sockaddr_protocol(const struct curl_sockaddr *a) { return a->protocol; }
static inline CURLcode pushd_curl_msg_result(const CURLMsg *m) { return m->data.result; }
static inline int pushd_curl_msg_is_done(const CURLMsg *m) { return m->msg == CURLMSG_DONE; }
static inline long pushd_curl_max_errorsize(void) { return CURL_ERROR_SIZE; }


/* Called each time libcurl is about to send a request on a connection: more than once for
 * one transfer means libcurl resent it by itself (refused stream, GOAWAY, dead reused
 * connection). */
typedef CURLcode (*pushd_curl_ssl_ctx_cb)(CURL *curl, void *ssl_ctx, void *clientp);
static inline CURLcode pushd_curl_easy_setopt_ssl_ctx_cb(CURL *h, pushd_curl_ssl_ctx_cb v) { return curl_easy_setopt(h, CURLOPT_SSL_CTX_FUNCTION, v); }
typedef int (*pushd_curl_prereq_cb)(void *clientp, char *conn_primary_ip, char *conn_local_ip, int conn_primary_port, int conn_local_port);
static inline CURLcode pushd_curl_easy_setopt_prereq_cb(CURL *h, pushd_curl_prereq_cb v) { return curl_easy_setopt(h, CURLOPT_PREREQFUNCTION, v); }
static inline int pushd_curl_prereq_ok(void) { return CURL_PREREQFUNC_OK; }

#endif
