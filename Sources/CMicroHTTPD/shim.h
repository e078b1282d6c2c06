/* Typed wrappers for libmicrohttpd's variadic start call. Every symbol is prefixed pushd_mhd_. */
#ifndef PUSHD_CMICROHTTPD_SHIM_H
#define PUSHD_CMICROHTTPD_SHIM_H

#include <stdarg.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <microhttpd.h>

/* Starts a daemon with its own polling thread bound to addr, with a bounded
 * number of connections and an idle timeout in seconds. */
static inline struct MHD_Daemon *pushd_mhd_start(unsigned int flags,
                                                 const struct sockaddr *addr,
                                                 MHD_AccessHandlerCallback handler, void *handler_cls,
                                                 unsigned int connection_limit,
                                                 unsigned int connection_timeout_seconds) {
    return MHD_start_daemon(flags, 0, NULL, NULL, handler, handler_cls,
                            MHD_OPTION_SOCK_ADDR, addr,
                            MHD_OPTION_CONNECTION_LIMIT, connection_limit,
                            MHD_OPTION_CONNECTION_TIMEOUT, connection_timeout_seconds,
                            MHD_OPTION_END);
}

static inline unsigned int pushd_mhd_flags_internal_thread(void) {
    return MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG | MHD_USE_AUTO;
}
static inline const char *pushd_mhd_version_string(void) { return MHD_get_version(); }
static inline uint16_t pushd_mhd_bound_port(struct MHD_Daemon *d) {
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    return info ? info->port : 0;
}

/* Flag that makes the daemon listen on the IPv6 address given to pushd_mhd_start. */
static inline unsigned int pushd_mhd_flag_ipv6(void) { return MHD_USE_IPv6; }

/* Answers a request with a copy of body, so the caller's buffer may go away at once.
 * Returns MHD_NO when the response could not be built or queued, which makes the
 * daemon close the connection. */
static inline enum MHD_Result pushd_mhd_respond(struct MHD_Connection *connection, unsigned int status,
                                                const char *content_type,
                                                const void *body, size_t body_length) {
    struct MHD_Response *response =
        MHD_create_response_from_buffer(body_length, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (response == NULL) return MHD_NO;
    if (MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, content_type) != MHD_YES) {
        MHD_destroy_response(response);
        return MHD_NO;
    }
    enum MHD_Result queued = MHD_queue_response(connection, status, response);
    MHD_destroy_response(response);
    return queued;
}

/* Starts a daemon served by a pool of `threads` polling threads, each waiting on its own
 * epoll set, so idle or slow connections cost a descriptor and a little memory, never a
 * thread. `connection_limit` bounds all connections, `per_ip_limit` those from one
 * address (0: no bound), `connection_timeout_seconds` closes a connection that makes no
 * progress, and `backlog` is the listen queue that absorbs bursts of new connections.
 * libmicrohttpd gives each pool thread an equal share of `connection_limit`. */
static inline struct MHD_Daemon *pushd_mhd_start_pool(unsigned int flags,
                                                      const struct sockaddr *addr,
                                                      MHD_AccessHandlerCallback handler, void *handler_cls,
                                                      unsigned int threads,
                                                      unsigned int connection_limit,
                                                      unsigned int per_ip_limit,
                                                      unsigned int connection_timeout_seconds,
                                                      unsigned int backlog) {
    return MHD_start_daemon(flags, 0, NULL, NULL, handler, handler_cls,
                            MHD_OPTION_SOCK_ADDR, addr,
                            MHD_OPTION_THREAD_POOL_SIZE, threads,
                            MHD_OPTION_CONNECTION_LIMIT, connection_limit,
                            MHD_OPTION_PER_IP_CONNECTION_LIMIT, per_ip_limit,
                            MHD_OPTION_CONNECTION_TIMEOUT, connection_timeout_seconds,
                            MHD_OPTION_LISTEN_BACKLOG_SIZE, backlog,
                            MHD_OPTION_END);
}

/* Internal polling threads on epoll where the library has it (Linux), else the best
 * poller it has. Without MHD_USE_ERROR_LOG: the caller reports failures itself, and
 * stray lines on stderr would break JSON logs. */
static inline unsigned int pushd_mhd_flags_epoll_pool(void) {
    if (MHD_is_feature_supported(MHD_FEATURE_EPOLL) == MHD_YES) {
        return MHD_USE_EPOLL_INTERNAL_THREAD;
    }
    return MHD_USE_AUTO_INTERNAL_THREAD;
}

/* The access handler's "drop this connection" answer, for requests it cannot serve. */
static inline enum MHD_Result pushd_mhd_refuse(void) { return MHD_NO; }

#endif
