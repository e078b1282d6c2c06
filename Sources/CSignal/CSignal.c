#define _GNU_SOURCE
#include "CSignal.h"
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

/* One pipe per signal number, so watchers of different signals do not meet. */
static volatile sig_atomic_t pushd_signal_fds[NSIG];

static void pushd_signal_handler(int signo) {
    int saved = errno;
    unsigned char number = (unsigned char)signo;
    /* Non-blocking: a full pipe (thousands of unread signals) drops the byte, never the process. */
    if (signo > 0 && signo < NSIG) (void)!write(pushd_signal_fds[signo], &number, 1);
    errno = saved;
}

int pushd_signal_pipe(int *read_fd, int *write_fd) {
    int ends[2];
    if (pipe2(ends, O_CLOEXEC) != 0) return errno;
    if (fcntl(ends[1], F_SETFL, fcntl(ends[1], F_GETFL) | O_NONBLOCK) != 0) {
        int saved = errno;
        close(ends[0]);
        close(ends[1]);
        return saved;
    }
    *read_fd = ends[0];
    *write_fd = ends[1];
    return 0;
}

int pushd_signal_watch(int signo, int write_fd) {
    if (signo <= 0 || signo >= NSIG) return EINVAL;
    pushd_signal_fds[signo] = write_fd;
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = pushd_signal_handler;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    return sigaction(signo, &action, NULL) == 0 ? 0 : errno;
}

int pushd_signal_unblock(int signo) {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, signo);
    return pthread_sigmask(SIG_UNBLOCK, &set, NULL);
}

int pushd_signal_default(int signo) {
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = SIG_DFL;
    sigemptyset(&action.sa_mask);
    return sigaction(signo, &action, NULL) == 0 ? 0 : errno;
}
