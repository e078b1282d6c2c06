/* nghttp2 for the mock server. Every added symbol is prefixed pushd_nghttp2_. */
#ifndef PUSHD_CNGHTTP2_SHIM_H
#define PUSHD_CNGHTTP2_SHIM_H

#include <nghttp2/nghttp2.h>

static inline const char *pushd_nghttp2_version_string(void) { return nghttp2_version(0)->version_str; }
static inline const unsigned char *pushd_nghttp2_alpn_h2(void) { return (const unsigned char *)NGHTTP2_PROTO_VERSION_ID; }
static inline size_t pushd_nghttp2_alpn_h2_length(void) { return NGHTTP2_PROTO_VERSION_ID_LEN; }

/* The mock server's event loop: Swift's Glibc module does not export epoll or eventfd. */
#include <sys/epoll.h>
#include <sys/eventfd.h>
static inline int pushd_nghttp2_epoll_create(void) { return epoll_create1(EPOLL_CLOEXEC); }
static inline int pushd_nghttp2_eventfd(void) { return eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); }
static inline uint32_t pushd_nghttp2_epoll_mask(int readable, int writable) {
    uint32_t mask = 0;
    if (readable) mask |= EPOLLIN | EPOLLRDHUP;
    if (writable) mask |= EPOLLOUT;
    return mask;
}
static inline int pushd_nghttp2_epoll_is_readable(uint32_t events) { return (events & (EPOLLIN | EPOLLRDHUP)) != 0; }
static inline int pushd_nghttp2_epoll_is_writable(uint32_t events) { return (events & EPOLLOUT) != 0; }
static inline int pushd_nghttp2_epoll_is_hangup(uint32_t events) { return (events & (EPOLLHUP | EPOLLERR)) != 0; }

#endif
