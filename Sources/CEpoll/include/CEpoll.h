/* epoll and eventfd for the shared event loop: Swift's Glibc module exports neither.
 * Every symbol is prefixed pushd_epoll_. */
#ifndef PUSHD_CEPOLL_H
#define PUSHD_CEPOLL_H

#include <stdint.h>

int pushd_epoll_create(void);
int pushd_epoll_eventfd(void);
/* op is EPOLL_CTL_ADD, _MOD or _DEL; returns 0 or errno. */
int pushd_epoll_control(int epfd, int op, int fd, uint32_t events);
/* Waits and writes up to max (fd, events) pairs into fds/masks; returns the count, or -1 with errno. */
int pushd_epoll_wait(int epfd, int *fds, uint32_t *masks, int max, int timeout_ms);

int pushd_epoll_ctl_add(void);
int pushd_epoll_ctl_mod(void);
int pushd_epoll_ctl_del(void);
uint32_t pushd_epoll_in(void);
uint32_t pushd_epoll_out(void);
uint32_t pushd_epoll_rdhup(void);
uint32_t pushd_epoll_hup(void);
uint32_t pushd_epoll_err(void);

/* The calling thread's kernel id (gettid), for per-thread scheduling priority. */
int pushd_epoll_thread_id(void);

#endif
