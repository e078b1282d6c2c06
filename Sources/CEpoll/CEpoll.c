#include "CEpoll.h"
#include <errno.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <unistd.h>

int pushd_epoll_create(void) { return epoll_create1(EPOLL_CLOEXEC); }
int pushd_epoll_eventfd(void) { return eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); }

int pushd_epoll_control(int epfd, int op, int fd, uint32_t events) {
    struct epoll_event ev;
    ev.events = events;
    ev.data.u64 = 0;
    ev.data.fd = fd;
    return epoll_ctl(epfd, op, fd, &ev) == 0 ? 0 : errno;
}

int pushd_epoll_wait(int epfd, int *fds, uint32_t *masks, int max, int timeout_ms) {
    struct epoll_event evs[256];
    if (max > 256) max = 256;
    int n = epoll_wait(epfd, evs, max, timeout_ms);
    for (int i = 0; i < n; i++) { fds[i] = evs[i].data.fd; masks[i] = evs[i].events; }
    return n;
}

int pushd_epoll_ctl_add(void) { return EPOLL_CTL_ADD; }
int pushd_epoll_ctl_mod(void) { return EPOLL_CTL_MOD; }
int pushd_epoll_ctl_del(void) { return EPOLL_CTL_DEL; }
uint32_t pushd_epoll_in(void) { return EPOLLIN; }
uint32_t pushd_epoll_out(void) { return EPOLLOUT; }
uint32_t pushd_epoll_rdhup(void) { return EPOLLRDHUP; }
uint32_t pushd_epoll_hup(void) { return EPOLLHUP; }
uint32_t pushd_epoll_err(void) { return EPOLLERR; }

int pushd_epoll_thread_id(void) { return (int)syscall(SYS_gettid); }
