/* Typed wrappers for libmicrohttpd's variadic start call. Every symbol is prefixed pushd_mhd_. */
#ifndef PUSHD_CMICROHTTPD_SHIM_H
#define PUSHD_CMICROHTTPD_SHIM_H

#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <netinet/in.h>
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

/* Starts a pool daemon as pushd_mhd_start_pool does, and also: `admit` is asked about every
 * accepted connection before it is served (the caller's per-address bound), `notify_connection`
 * hears each connection start and close, and `notify_completed` each request end (answer sent,
 * or the request given up), so that the caller can bound how long a connection may take to
 * send its request and to take its answer. libmicrohttpd's own per-address bound is off: the
 * caller's counts its refusals. */
static inline struct MHD_Daemon *pushd_mhd_start_watched(unsigned int flags,
                                                         const struct sockaddr *addr,
                                                         MHD_AcceptPolicyCallback admit,
                                                         MHD_AccessHandlerCallback handler, void *context,
                                                         MHD_NotifyConnectionCallback notify_connection,
                                                         MHD_RequestCompletedCallback notify_completed,
                                                         unsigned int threads,
                                                         unsigned int connection_limit,
                                                         unsigned int connection_timeout_seconds,
                                                         unsigned int backlog) {
    return MHD_start_daemon(flags, 0, admit, context, handler, context,
                            MHD_OPTION_SOCK_ADDR, addr,
                            MHD_OPTION_THREAD_POOL_SIZE, threads,
                            MHD_OPTION_CONNECTION_LIMIT, connection_limit,
                            MHD_OPTION_CONNECTION_TIMEOUT, connection_timeout_seconds,
                            MHD_OPTION_LISTEN_BACKLOG_SIZE, backlog,
                            MHD_OPTION_NOTIFY_CONNECTION, notify_connection, context,
                            MHD_OPTION_NOTIFY_COMPLETED, notify_completed, context,
                            MHD_OPTION_END);
}

/* An address as the bytes that identify the client: 4 for IPv4 (also an IPv4-mapped IPv6
 * address), 16 for IPv6. Writes at most 16 bytes to out; returns how many, 0 for another family. */
static inline int pushd_mhd_address_bytes(const struct sockaddr *addr, uint8_t *out) {
    if (addr == NULL) return 0;
    if (addr->sa_family == AF_INET) {
        memcpy(out, &((const struct sockaddr_in *)addr)->sin_addr, 4);
        return 4;
    }
    if (addr->sa_family == AF_INET6) {
        const struct in6_addr *v6 = &((const struct sockaddr_in6 *)addr)->sin6_addr;
        if (IN6_IS_ADDR_V4MAPPED(v6)) {
            memcpy(out, &v6->s6_addr[12], 4);
            return 4;
        }
        memcpy(out, v6, 16);
        return 16;
    }
    return 0;
}

/* The socket of a connection, -1 when the library does not say. */
static inline int pushd_mhd_connection_fd(struct MHD_Connection *connection) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    return info ? (int)info->connect_fd : -1;
}

/* The client address of a connection as pushd_mhd_address_bytes gives it. */
static inline int pushd_mhd_connection_address(struct MHD_Connection *connection, uint8_t *out) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    return info ? pushd_mhd_address_bytes(info->client_addr, out) : 0;
}

/* 1 for the notification of a connection's start, 0 for its close. */
static inline int pushd_mhd_notify_is_start(enum MHD_ConnectionNotificationCode code) {
    return code == MHD_CONNECTION_NOTIFY_STARTED;
}

/* A response holding its own copy of body, to be queued on many connections (libmicrohttpd
 * counts its users); the caller gives its own reference back with MHD_destroy_response. */
static inline struct MHD_Response *pushd_mhd_shared_response(const void *body, size_t body_length, const char *content_type) {
    struct MHD_Response *response =
        MHD_create_response_from_buffer(body_length, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (response == NULL) return NULL;
    if (MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, content_type) != MHD_YES) {
        MHD_destroy_response(response);
        return NULL;
    }
    return response;
}

static inline enum MHD_Result pushd_mhd_queue(struct MHD_Connection *connection, unsigned int status, struct MHD_Response *response) {
    return MHD_queue_response(connection, status, response);
}

/* The admission answer "serve this connection". */
static inline enum MHD_Result pushd_mhd_accept(void) { return MHD_YES; }

/* The access handler's "drop this connection" answer, for requests it cannot serve. */
static inline enum MHD_Result pushd_mhd_refuse(void) { return MHD_NO; }

#endif
