/* nghttp2 for the mock server. Every added symbol is prefixed pushd_nghttp2_. */
#ifndef PUSHD_CNGHTTP2_SHIM_H
#define PUSHD_CNGHTTP2_SHIM_H

#include <nghttp2/nghttp2.h>

static inline const char *pushd_nghttp2_version_string(void) { return nghttp2_version(0)->version_str; }
static inline const unsigned char *pushd_nghttp2_alpn_h2(void) { return (const unsigned char *)NGHTTP2_PROTO_VERSION_ID; }
static inline size_t pushd_nghttp2_alpn_h2_length(void) { return NGHTTP2_PROTO_VERSION_ID_LEN; }

/* The control server's wake-up: Swift's Glibc module does not export eventfd. */
#include <sys/eventfd.h>
static inline int pushd_nghttp2_eventfd(void) { return eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); }

#endif
