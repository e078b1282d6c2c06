/* Signals as bytes on a pipe: the handler only writes the signal's number, which is
 * async-signal-safe, and a thread of pushd's own reads it. Every symbol is prefixed
 * pushd_signal_. */
#ifndef PUSHD_CSIGNAL_H
#define PUSHD_CSIGNAL_H

/* A pipe for the handler to write to, both ends close-on-exec, the write end non-blocking
 * (a handler must never block). Returns 0 or errno. */
int pushd_signal_pipe(int *read_fd, int *write_fd);
/* Installs the handler for signo, writing to write_fd (one pipe for every watched signal).
 * Returns 0 or errno. */
int pushd_signal_watch(int signo, int write_fd);
/* Unblocks signo in the calling thread: a process may start with signals blocked, as a
 * parent's mask is inherited. Returns 0 or errno. */
int pushd_signal_unblock(int signo);
/* Puts signo back to its default action. Returns 0 or errno. */
int pushd_signal_default(int signo);

#endif
